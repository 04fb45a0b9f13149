"""Exports for slides: the standalone token-stream HTML (escaped, inline styles, no script can run) and the
per-round CSV (its columns, one row per round and run), from real runs on the toy bigram LMs of test_viz."""

from __future__ import annotations

import csv
import io
import json
from html.parser import HTMLParser

import pytest
import torch

from specviz.core.sampling import SamplingConfig
from specviz.drafters import ModelDrafter, NoDrafter, PromptLookupDrafter
from specviz.viz import rounds_frame, stream_frame
from specviz.viz.export import CSP, ROUND_COLUMNS, round_table, rounds_csv, stream_document
from tests.test_viz import VOCAB, BigramLM, run

HOSTILE = {
    0: "<script>alert(1)</script>",
    1: '" onmouseover="alert(1)" x="',
    2: "</div></span><img src=x onerror=alert(1)>",
    3: "'><svg onload=alert(1)>",
    4: "=HYPERLINK(\"http://evil\")",
    5: "&amp; &lt;",
}


def text(i: int) -> str:
    return HOSTILE.get(i, f"t{i}")


@pytest.fixture(scope="module")
def model_run():
    draft = BigramLM(0)
    draft.table = draft.table + torch.randn(VOCAB, VOCAB, generator=torch.Generator().manual_seed(7)) * 1.5
    return run(ModelDrafter(draft, SamplingConfig(temperature=1.0)))


@pytest.fixture(scope="module")
def lookup_run():
    return run(PromptLookupDrafter(3, 1), temperature=0.0)


@pytest.fixture(scope="module")
def baseline_run():
    return run(NoDrafter(), k=0)


class _Doc(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.decl: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def handle_decl(self, decl):
        self.decl.append(decl)


def _document(model_run, lookup_run) -> str:
    streams = {
        "draft model <b>": stream_frame(model_run.records, text),
        'lookup" onclick="x': stream_frame(lookup_run.records, text),
    }
    return stream_document([text(i) for i in range(6)], streams, title="</title><script>alert(1)</script>", notes=["note <i>&"])


def test_stream_document_is_standalone_and_escaped(model_run, lookup_run):
    doc = _document(model_run, lookup_run)
    parser = _Doc()
    parser.feed(doc)
    assert parser.decl == ["DOCTYPE html"]
    tags = {tag for tag, _ in parser.tags}
    assert tags <= {"html", "head", "meta", "title", "body", "h1", "h2", "p", "div", "span", "br"}  # no script, img, svg, link, style
    for tag, attrs in parser.tags:
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)  # no attribute breakout made a handler
        assert set(attrs) <= {"style", "title", "class", "lang", "charset", "http-equiv", "content", "name", "tabindex", "aria-label"}
    csp = next(a["content"] for t, a in parser.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    assert csp == CSP and "default-src 'none'" in csp
    assert "<script" not in doc.lower() and "<img" not in doc.lower() and "<svg" not in doc.lower()
    shown = "".join(parser.text).replace("␣", " ")
    assert "</title><script>alert(1)</script>" in shown  # the title, as text (twice: <title> and <h1>)
    assert "note <i>&" in shown and "draft model <b>" in shown and 'lookup" onclick="x' in shown
    assert "&amp; &lt;" in shown  # already-escaped-looking text is escaped again, shown as typed
    assert "<style" not in doc and "<link" not in doc  # styles inline; with no src/href attributes nothing is fetched


def test_stream_document_shows_every_token_of_each_run(model_run, lookup_run):
    parser = _Doc()
    parser.feed(_document(model_run, lookup_run))
    titled = [a["title"] for t, a in parser.tags if t == "span" and "title" in a and " · round " in a["title"]]
    n_tokens = len(stream_frame(model_run.records, text)) + len(stream_frame(lookup_run.records, text))
    assert len(titled) == n_tokens  # one hover per token (prompt and legend spans carry other titles)
    hostile_in_stream = {text(int(i)) for i in stream_frame(model_run.records, text)["token_id"]} & set(HOSTILE.values())
    shown = "".join(parser.text).replace("␣", " ")
    assert hostile_in_stream and all(p in shown for p in hostile_in_stream)
    assert all(p in shown for p in list(HOSTILE.values())[:6])  # the prompt's six hostile tokens, as text


def test_single_run_document_has_no_run_heading(lookup_run):
    doc = stream_document(["a"], {"only": stream_frame(lookup_run.records, text)})
    assert "<h2" not in doc and doc.startswith("<!DOCTYPE html>")


def _rows(text_csv: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text_csv)))


def test_rounds_csv_columns_and_rows(model_run, lookup_run, baseline_run):
    tables = [round_table(model_run.records, "draft model", text, baseline_run.records), round_table(lookup_run.records, "lookup", text)]
    out = rounds_csv(tables)
    header = next(csv.reader(io.StringIO(out)))
    assert header == list(ROUND_COLUMNS)
    rows = _rows(out)
    assert len(rows) == len(model_run.records) + len(lookup_run.records)
    assert [r["run"] for r in rows] == ["draft model"] * len(model_run.records) + ["lookup"] * len(lookup_run.records)
    first = rows[0]
    record = model_run.records[0]
    assert int(first["round"]) == 1 and int(first["drafted"]) == record.num_drafted and int(first["accepted"]) == record.num_accepted
    assert json.loads(first["drafted_tokens"]) == [text(t) for t in record.drafted]
    assert json.loads(first["emitted_tokens"]) == [text(t) for t in record.emitted]
    assert json.loads(first["emitted_fates"]) == list(record.emitted_fates)
    # the numbers are the ones the charts draw
    frame = rounds_frame(model_run.records, "draft model", baseline_run.records)
    assert float(rows[len(model_run.records) - 1]["alpha"]) == pytest.approx(frame["alpha"].iloc[-1], rel=1e-5)
    assert float(rows[len(model_run.records) - 1]["speedup"]) == pytest.approx(frame["speedup"].iloc[-1], rel=1e-5)
    assert rows[-1]["speedup"] == ""  # no baseline given for the lookup run: empty, not 'nan'


def test_rounds_csv_quotes_what_a_spreadsheet_would_run(lookup_run):
    table = round_table(lookup_run.records, "=cmd|' /C calc'!A0", text)
    rows = _rows(rounds_csv([table]))
    assert rows[0]["run"] == "'=cmd|' /C calc'!A0"
    assert all(r["emitted_tokens"].startswith("[") for r in rows)  # JSON lists: never a formula
    assert rounds_csv([]).strip() == ",".join(ROUND_COLUMNS)


# --- the page (AppTest): the buttons appear once there is a round to export --------------------------------


def test_step_through_offers_the_exports_after_a_round(smollm):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "pages" / "step_through.py"), default_timeout=180)
    at.query_params.update(drafter="lookup", max_new_tokens="4", prompt="Repeat: a b c, a b c.")
    at.run()
    assert not at.exception, at.exception
    assert not [b for b in at.download_button if b.key in ("export_html", "export_csv")]  # nothing to export yet
    at.button(key="step").click().run()
    assert not at.exception, at.exception
    keys = {b.key: b for b in at.download_button}
    assert {"export_html", "export_csv"} <= set(keys)
    assert keys["export_html"].proto.label == "Token stream (HTML)" and keys["export_csv"].proto.label == "Rounds table (CSV)"
