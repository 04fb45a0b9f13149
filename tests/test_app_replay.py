"""AppTest: the step-through page replays recordings with no model at all (examples, uploads, bad files,
payloads in token texts), and saves a live run that replays to the same views."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from specviz.recording.load import MAX_BYTES, load_recording
from specviz.ui.step_through import replay as replay_ui
from tests.test_recording import html_tags

REPO = Path(__file__).resolve().parents[1]
PAGE = str(REPO / "pages" / "step_through.py")
EXAMPLES = sorted((REPO / "assets" / "recordings").glob("*.json"))
REPLAY = "specviz_replay"
HOSTILE = '<script>window.__x=1</script><img src=x onerror=alert(1)>'


def fresh() -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def metric(at: AppTest, label: str) -> str:
    """The metric's value; in compare mode the largest of the runs' values (rounds: the longer run)."""
    return max((m.value for m in at.metric if m.label == label), key=lambda v: (len(v), v))


def click(at: AppTest, key: str) -> AppTest:
    at.button(key=key).click().run()
    assert not at.exception, at.exception
    return at


def session(at: AppTest):
    return at.session_state[REPLAY].session


def upload(at: AppTest, name: str, data: bytes) -> float:
    at.file_uploader(key="recording").set_value((name, data, "application/json"))
    start = time.perf_counter()
    at.run()
    assert not at.exception, at.exception
    return time.perf_counter() - start


def stream_html(at: AppTest) -> str:
    return "".join(h.value for h in at.html if "specviz-stream" in h.value)


def test_there_are_at_least_four_examples():
    assert len(EXAMPLES) >= 4
    for path in EXAMPLES:
        assert path.stat().st_size < 200_000, f"{path.name} should stay small"
        load_recording(path.read_bytes())


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_opens_and_plays_through_without_a_model(no_model, path):
    at = fresh()
    assert any("Live mode is unavailable" in e.value and "no model can be loaded" in e.value for e in at.error)
    before = len(no_model)
    at.selectbox(key="example_recording").set_value(path.stem).run()
    assert not at.exception, at.exception
    assert session(at) is not None and not at.error
    assert any("Replay" in i.value for i in at.info)
    assert metric(at, "rounds") == "1" and stream_html(at)  # the first round is drawn at once
    click(at, "step")
    assert metric(at, "rounds") == "2"
    assert {"export_html", "export_csv"} <= {b.key for b in at.download_button}, "a recording exports for slides too"
    click(at, "run_all")
    total = session(at).total_rounds
    assert metric(at, "rounds") == str(total)
    assert at.get("plotly_chart"), "inspector and curves draw from the file"
    for spec in (json.loads(el.proto.spec) for el in at.get("plotly_chart")):  # specviz.viz.style: no 3-D/polar/geo defaults
        template = spec["layout"]["template"]
        assert set(template["data"]) <= {"bar", "scatter", "heatmap"} and "scene" not in template["layout"]
    click(at, "reset")
    assert session(at).num_rounds == 0
    assert len(no_model) == before, "replay must not load a model"
    click(at, "live_mode")
    assert session(at) is None and at.selectbox(key="example_recording").value == replay_ui.NO_EXAMPLE


def test_upload_steps_through_with_no_model_and_draws_quickly(no_model):
    at = fresh()
    before = len(no_model)
    seconds = upload(at, "run.json", EXAMPLES[0].read_bytes())
    assert session(at) is not None and "run.json" in session(at).source
    assert metric(at, "rounds") == "1" and stream_html(at)
    assert seconds < 2.0, f"the first view took {seconds:.2f}s"
    for n in (2, 3):
        click(at, "step")
        assert metric(at, "rounds") == str(n)
    click(at, "play")
    assert at.button(key="play").label == "Pause"
    click(at, "play")
    assert at.button(key="play").label == "Play"
    assert len(no_model) == before
    assert at.get("download_button"), "Save run is offered in replay too"


BAD_FILES = [
    ("not JSON", b"\x00\x01 this is not json", "not JSON"),
    ("another format", json.dumps({"format": "har", "version": 1}).encode(), "not a specviz recording"),
    ("newer version", None, "newer than this specviz reads"),
    ("missing fields", json.dumps({"format": "specviz-recording", "version": 1}).encode(), "Field required"),
    ("fates against the drafts", None, "drafted tokens but"),
    ("id outside the vocabulary", None, "outside the vocabulary"),
    ("too big", b" " * (MAX_BYTES + 1), "limited to 50 MB"),
]


def _bad(name: str) -> bytes:
    raw = json.loads(EXAMPLES[0].read_text(encoding="utf-8"))
    if name == "newer version":
        raw["version"] = 2
    elif name == "fates against the drafts":
        rec = next(r for r in raw["runs"][0]["records"] if r["drafted"])
        rec["draft_fates"] = rec["draft_fates"][:-1]
    elif name == "id outside the vocabulary":
        raw["prompt_ids"][0] = raw["environment"]["vocab_size"]
    return json.dumps(raw).encode()


@pytest.mark.parametrize("name, data, message", BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_uploads_are_clear_errors_and_the_page_keeps_working(no_model, name, data, message):
    at = fresh()
    at.selectbox(key="example_recording").set_value(EXAMPLES[1].stem).run()
    shown = session(at)
    upload(at, "bad.json", data if data is not None else _bad(name))
    errors = [e.value.replace("\\", "") for e in at.error]  # the page escapes markdown in messages
    assert any(message in e and "bad.json" in e for e in errors), errors
    assert session(at) is shown, "the recording shown before stays"
    click(at, "step")
    assert metric(at, "rounds") == "2"


def test_html_in_token_texts_is_inert(no_model):
    raw = json.loads(EXAMPLES[0].read_text(encoding="utf-8"))
    first = raw["runs"][0]["records"][0]
    for tok in [*first["emitted"], raw["prompt_ids"][-1]]:
        raw["token_texts"][str(tok)] = HOSTILE
    raw["title"] = HOSTILE + " ![pixel](http://example.invalid/p.png) [link](http://example.invalid)"
    at = fresh()
    upload(at, "payload.json", json.dumps(raw).encode())
    banner = next(i.value for i in at.info if "Replay" in i.value)
    assert r"!\[pixel\](" in banner and r"\<script\>" in banner, banner  # markdown and HTML from the file, escaped
    click(at, "run_all")
    html = "".join(h.value for h in at.html)
    assert "&lt;script&gt;" in html and "<script" not in html and "<img" not in html
    assert html_tags(html) <= {"div", "span", "br", "details", "summary", "style"}  # details: the folded prompt; style: the page's CSS
    assert not any("<script" in m.value for m in at.markdown)


@pytest.mark.parametrize("label", ["<b>bold</b>", "[x](http://example.invalid)", "`code`", ""])
def test_run_labels_that_could_carry_markup_are_refused(no_model, label):
    raw = json.loads(EXAMPLES[0].read_text(encoding="utf-8"))
    raw["runs"][0]["label"] = label
    at = fresh()
    upload(at, "labels.json", json.dumps(raw).encode())
    assert session(at) is None
    assert any("runs" in e.value and "label" in e.value for e in at.error), [e.value for e in at.error]


def test_save_run_of_a_live_session_replays_to_the_same_views(smollm):
    """Two live rounds with SmolLM2, saved (what Save run writes), replayed: every frame and figure is the same."""
    from specviz.models import environment
    from specviz.recording.build import dumps
    from tests.test_recording import assert_same_views, views_of

    at = AppTest.from_file(PAGE, default_timeout=180)
    at.run()
    at.text_area(key="prompt").set_value("Repeat exactly: 日本語 🚀, one two three, 日本語 🚀.")
    at.selectbox(key="drafter").set_value("lookup")
    at.number_input(key="max_new_tokens").set_value(8)
    at.run()
    for _ in range(2):
        at.button(key="step").click().run()
        assert not at.exception, at.exception
    save = [b for b in at.get("download_button") if b.proto.id.endswith("save_run") or "save_run" in b.proto.id]
    assert save and not save[0].proto.disabled, "Save run is offered once a round has run"
    live = at.session_state["specviz_step_through"].session
    recording = load_recording(dumps(replay_ui.session_recording(live, environment(smollm))))
    assert recording.environment.model == live.config.target and recording.environment.vocab_size == smollm.vocab_size
    replayed = replay_ui.ReplaySession.open(recording, "test", shown=live.num_rounds)
    assert_same_views(views_of(live), views_of(replayed))
    html = views_of(replayed)[f"{live.runs[0].label}/stream_html"]
    assert all(ch in html for ch in "日本語🚀") and "⟨E6" in html  # the prompt's pieces joined, with the pieces on hover
