"""Untrusted text drawn as Markdown stays text: share-link parameters (names and values), every recording field the
page shows (title, token texts, runs[i].error, baseline.error, its format), labels, model paths and exception
messages. AppTest walks every message the app shows with a payload of links, images, backticks, emphasis, bare
URLs and HTML, renders each Markdown body with markdown-it-py (plus GFM's literal autolinks, which markdown-it
lacks) and asserts no link, image or HTML tag we did not write. The same payloads in a real browser:
tests/browser/test_untrusted.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from streamlit.testing.v1 import AppTest

from specviz.recording.load import MAX_INT_DIGITS, load_recording
from specviz.recording.schema import MAX_TOKEN_TEXT_CHARS, MAX_TOKEN_TEXTS, RecordingError, check_label
from specviz.viz.markdown import WORD_JOINER, md_code, md_text

REPO = Path(__file__).resolve().parents[1]
PAGES = REPO / "pages"
EXAMPLE = sorted((REPO / "assets" / "recordings").glob("*.json"))[0]
PAYLOAD = (
    "x`[Click here](http://127.0.0.1:1/phish)![t](http://127.0.0.1:1/bt.png)`y <img src=http://127.0.0.1:1/i.png> "
    '<a href="http://127.0.0.1:1/a">a</a> __import__ *em* http://127.0.0.1:1/bare www.127.0.0.1.example/w '
    "me@127.0.0.1.example <http://127.0.0.1:1/auto> :red[r] :material/home: :smile: $x^2$"
)  # at most 300 characters: a link's target may be no longer (the target field's max_chars, specviz.config.FIELDS)
SHOWN = "[Click here](http://127.0.0.1:1/phish)"  # what the reader sees, literally, somewhere on the page
_MD = MarkdownIt("commonmark", {"html": True})
_GFM_AUTOLINK = re.compile(r"(?i)(https?://|www\.)[-\w.]+|[-.\w+]+@[-\w]+(\.[-\w]+)+")  # GFM's literal autolinks
# Streamlit's colon syntax, found (like GFM's autolinks) in the text after escapes are resolved: colour and size
# directives (':red[x]', and ':red' alone, which draws an empty red span), Material icons, emoji shortcodes
_ST_COLON = re.compile(
    r":(red|orange|yellow|green|blue|violet|gr[ae]y|rainbow|primary|color|small)(-background|-badge)?(?![\w-])"
    r"|:material/\w+:|:[\w+-]+:"
)


def live_markup(markdown: str) -> list[str]:
    """Links, images and HTML that this Markdown would draw (nothing we write carries any)."""
    found = []
    for block in _MD.parse(markdown):
        for tok in [block, *(block.children or [])]:
            if tok.type in ("link_open", "image", "html_inline", "html_block"):
                found.append(f"{tok.type}: {tok.attrs or tok.content}")
            elif tok.type == "text" and _GFM_AUTOLINK.search(tok.content):
                found.append(f"autolink: {_GFM_AUTOLINK.search(tok.content).group(0)}")
            elif tok.type == "text" and _ST_COLON.search(tok.content):
                found.append(f"streamlit directive: {_ST_COLON.search(tok.content).group(0)}")
    return found


def rendered_text(markdown: str) -> str:
    """The text a reader sees (tags dropped, word joiners removed)."""
    return re.sub(r"<[^>]+>", "", _MD.render(markdown)).replace(WORD_JOINER, "").replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def markdown_bodies(at: AppTest) -> list[str]:
    """Every Markdown body the page drew: messages, captions, headings, toasts, radio options, expander/status labels."""
    bodies = []
    for kind in ("markdown", "caption", "error", "warning", "info", "success", "toast", "title", "header", "subheader"):
        bodies += [str(e.value) for e in getattr(at, kind)]
    bodies += [str(o) for r in at.radio for o in r.options]
    bodies += [e.label for e in at.expander] + [s.label for s in at.status]
    return bodies


def assert_inert(at: AppTest, must_show: bool = True) -> None:
    assert not at.exception, [e.value for e in at.exception]
    bodies = markdown_bodies(at)
    bad = {body[:120]: live_markup(body) for body in bodies if live_markup(body)}
    assert not bad, bad
    if must_show:
        assert any(SHOWN in rendered_text(b) for b in bodies), "the payload was expected to be shown, literally"


# --- the helper itself, and the checker's known-bad controls ----------------------------------------------------


def test_the_checker_finds_what_raw_or_merely_backslash_escaped_text_would_draw():
    assert live_markup(PAYLOAD), "the raw payload must be caught"
    old_escape = re.sub(r"([\\`*_{}\[\]()<>#+\-.!|~$])", r"\\\1", PAYLOAD)  # the escape replay.py had
    assert any(f.startswith("autolink") for f in live_markup(old_escape)), "escapes alone leave bare URLs live (GFM)"
    assert live_markup(f"`{PAYLOAD}`"), "a code span built by hand is broken out of by a backtick"
    # seen in Chromium: escaped brackets still draw an empty red span (':red' is a directive without a label), and an
    # escaped colon still draws the icon
    for escaped in (r":red\[x\]", r":blue-background\[bg\]", r"\:material/home:", ":smile:", ":+1:"):
        assert live_markup(escaped), f"{escaped} is drawn by Streamlit"


def test_md_text_keeps_ordinary_colons_as_written():
    assert md_text("ratio: 2, k = 4") == "ratio: 2, k = 4"
    assert rendered_text(md_text("12:30 a:b :red[x]")).strip() == "12:30 a:b :red[x]"


@pytest.mark.parametrize("text", [PAYLOAD, "`", "``x``", " `lead", "trail` ", "", "a\nb", "=HYPERLINK(\"http://127.0.0.1:1/x\")"])
def test_md_text_and_md_code_draw_the_text_literally(text):
    assert live_markup(md_text(text)) == []
    assert rendered_text(md_text(text)).strip() == text.strip() or "\n" in text
    code = _MD.parse(md_code(text))
    inline = [t for b in code for t in (b.children or [])]
    assert [t.type for t in inline] == ["code_inline"], inline
    assert inline[0].content.replace(WORD_JOINER, "").strip() == text.replace("\n", " ").strip()


# --- the share link ------------------------------------------------------------------------------------------


@pytest.fixture
def no_model(monkeypatch):
    from specviz.models import ModelLoadError

    def refuse(source, *args, **kwargs):
        raise ModelLoadError(f"could not load {source}: no model on this machine (test)")

    import specviz.ui.common.models

    monkeypatch.setattr(specviz.ui.common.models, "get_model", refuse)  # the target (load_target)
    monkeypatch.setattr(specviz.ui.common.models, "load_model", refuse)


@pytest.mark.parametrize("mode", ["local", "shared"])
def test_a_hostile_share_link_shows_no_live_link(mode, monkeypatch, no_model):
    monkeypatch.setenv("SPECVIZ_MODE", mode)
    at = AppTest.from_file(str(PAGES / "step_through.py"), default_timeout=120)
    for key in ("drafter", "target", "top_k", "temperature", "prompt"):
        at.query_params[key] = PAYLOAD
    at.query_params[f"[Session expired - click to log in](http://127.0.0.1:1/login){PAYLOAD}"] = "1"
    at.run()
    assert_inert(at)
    at.button(key="step").click().run()  # local: the model error quoting the target, and the status label
    assert_inert(at, must_show=mode == "local")


# --- a hostile recording -------------------------------------------------------------------------------------


def hostile_recording() -> bytes:
    raw = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    raw["title"] = PAYLOAD
    for tid in list(raw["token_texts"]):
        raw["token_texts"][tid] = PAYLOAD
    for run in raw["runs"]:
        run["error"] = PAYLOAD
    if raw.get("baseline"):
        raw["baseline"]["error"] = PAYLOAD
    return json.dumps(raw).encode()


def test_a_hostile_recording_shows_no_live_link(no_model):
    at = AppTest.from_file(str(PAGES / "step_through.py"), default_timeout=120)
    at.run()
    at.file_uploader(key="recording").set_value(("hostile.json", hostile_recording(), "application/json"))
    at.run()
    assert_inert(at)
    for key in ("step", "step", "run_all"):  # the inspector's stories and options, the runs' errors, the curves
        at.button(key=key).click().run()
        assert_inert(at)
    bodies = "\n".join(markdown_bodies(at))
    assert "Drafted" in bodies or "sampled" in bodies or "bonus" in bodies, "the Round inspector was drawn"


def test_a_recording_of_another_format_is_quoted_as_text(no_model):
    at = AppTest.from_file(str(PAGES / "step_through.py"), default_timeout=120)
    at.run()
    at.file_uploader(key="recording").set_value(("x.json", json.dumps({"format": PAYLOAD, "version": 1}).encode(), "application/json"))
    at.run()
    assert_inert(at)


# --- model paths and exception messages on the other pages (shared mode: forced values are refused and quoted) ---


@pytest.mark.parametrize(("page", "key"), [("benchmark.py", "bench_target"), ("exactness.py", "lab_real_target"), ("exactness.py", "lab_greedy_target")])
def test_forced_model_paths_are_quoted_as_text(page, key, monkeypatch):
    monkeypatch.setenv("SPECVIZ_MODE", "shared")
    at = AppTest.from_file(str(PAGES / page), default_timeout=120)
    at.session_state[key] = PAYLOAD
    at.run()
    assert_inert(at)


# --- labels and recordings' caps ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "label",
    ['=HYPERLINK("http://127.0.0.1:1/x","click")', "see http://127.0.0.1:1/x", "https://x.example", "www.x.example", "javascript:alert(1)",
     "data:text/html,x", "+1", "-1", "@SUM(A1)", "\tx", "\rx", " =1", "[x](y)", "<b>", "`x`"],
)
def test_labels_refuse_urls_formulas_and_markup(label):
    with pytest.raises(ValueError):
        check_label(label)


@pytest.mark.parametrize("label", ["A: prompt lookup", "B: n-gram model, tree W=2", "baseline (plain decoding)", "early-exit k=4", "n-gram"])
def test_labels_the_app_writes_pass(label):
    assert check_label(label) == label


def _example() -> dict:
    return json.loads(EXAMPLE.read_text(encoding="utf-8"))


def test_an_over_long_token_text_is_refused_naming_the_field():
    raw = _example()
    tid = next(iter(raw["token_texts"]))
    raw["token_texts"][tid] = "x" * (MAX_TOKEN_TEXT_CHARS + 1)
    with pytest.raises(RecordingError, match=rf"token_texts\['{tid}'\] is 1,001 characters long; it may be at most 1,000"):
        load_recording(json.dumps(raw))
    raw["token_texts"][tid] = "x" * MAX_TOKEN_TEXT_CHARS
    load_recording(json.dumps(raw))  # at the cap: fine


def test_too_many_token_texts_are_refused():
    raw = _example()
    raw["token_texts"] = {str(i): "a" for i in range(MAX_TOKEN_TEXTS + 1)}
    with pytest.raises(RecordingError, match=f"at most {MAX_TOKEN_TEXTS:,}"):
        load_recording(json.dumps(raw))


@pytest.mark.parametrize("where", ["seed", "vocab_size", "token id"])
def test_an_over_long_integer_gets_our_message(where):
    text = _example_text_with_huge_int(where)
    with pytest.raises(RecordingError) as err:
        load_recording(text)
    message = str(err.value)
    assert "5,000 digits" in message and f"at most {MAX_INT_DIGITS}" in message
    assert "4300" not in message and "set_int_max_str_digits" not in message


def _example_text_with_huge_int(where: str) -> str:
    raw = _example()
    marker = 987654321987
    if where == "seed":
        raw["runs"][0]["seed"] = marker
    elif where == "vocab_size":
        raw["environment"]["vocab_size"] = marker
    else:
        raw["prompt_ids"][0] = marker
    return json.dumps(raw).replace(str(marker), "9" * 5000, 1)


def test_the_page_shows_our_message_for_an_over_long_integer(no_model):
    at = AppTest.from_file(str(PAGES / "step_through.py"), default_timeout=120)
    at.run()
    at.file_uploader(key="recording").set_value(("big.json", _example_text_with_huge_int("seed").encode(), "application/json"))
    at.run()
    assert not at.exception
    errors = [rendered_text(e.value) for e in at.error]
    assert any("5,000 digits" in e for e in errors) and not any("4300" in e for e in errors), errors
