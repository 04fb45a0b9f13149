"""AppTest drives pages/step_through.py with the embedded SmolLM2 target: Step, Run to end, Reset, k, compare, errors."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from specviz.core.decoding import SpeculativeDecoder
from specviz.ui.step_through.step_views import counter_sentence

PAGE = str(Path(__file__).resolve().parents[1] / "pages" / "step_through.py")
STATE = "specviz_step_through"
TIMEOUT = 180  # the first run loads the embedded model (seconds when cached, a de-quantise on a cold cache)


@pytest.fixture(scope="module", autouse=True)
def _embedded_model(smollm):
    """Load SmolLM2 once for the session (the shared fixture), so the app's own cached loader is the only cost here."""


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)

    def handle_data(self, data):
        self.text.append(data)


SHORT_PROMPT = "Repeat exactly: one two three four, one two three four."  # short: quick prefills


def page(max_new_tokens: int = 6, **widgets) -> AppTest:
    """The page after a first run, with the given widget values (pinned to lookup, k=4 and a short prompt)."""
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT)
    at.run()
    at.number_input(key="max_new_tokens").set_value(max_new_tokens)
    widgets = {"prompt": SHORT_PROMPT, "drafter": "lookup", "num_draft_tokens": 4, **widgets}
    _widget(at, "drafter").set_value(widgets.pop("drafter"))  # first, on its own: choosing a drafter sets its measured best k
    at.run()
    for key, value in widgets.items():
        try:
            _widget(at, key).set_value(value)
        except KeyError:  # not drawn now (k's slider while k: auto shows its ceiling): held for when it is
            at.session_state[key] = value
    at.run()
    assert not at.exception, at.exception
    return at


def _widget(at: AppTest, key: str):
    for kind in ("text_area", "selectbox", "slider", "number_input", "text_input", "toggle", "checkbox"):
        found = [w for w in getattr(at, kind) if w.key == key]
        if found:
            return found[0]
    raise KeyError(key)


def session(at: AppTest):
    return at.session_state[STATE].session


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def click(at: AppTest, key: str) -> AppTest:
    at.button(key=key).click().run()
    assert not at.exception, at.exception
    return at


def test_step_run_to_end_reset_and_changing_k():
    at = page(auto_k=False)  # a fixed k: k's slider is k
    assert not at.error, [e.value for e in at.error]
    click(at, "step")
    assert metric(at, "rounds") == "1"
    assert len(session(at).runs[0].records) == 1
    assert any("specviz-stream" in h.value for h in at.html)
    assert at.get("plotly_chart"), "the inspector and curves should be drawn after a round"
    click(at, "step")
    assert metric(at, "rounds") == "2"

    _widget(at, "num_draft_tokens").set_value(6)
    at.run()
    assert any("num_draft_tokens: 4 → 6" in w.value for w in at.warning)  # offered a reset, not mixed
    assert session(at).config.num_draft_tokens == 4 and metric(at, "rounds") == "2"  # the old run stays

    click(at, "run_all")
    run = session(at).runs[0]
    assert run.decoder.done and all(r.num_draft_tokens <= 4 for r in run.records)
    assert len(run.decoder.generated) <= 6

    click(at, "reset")
    assert session(at) is None and not at.warning
    click(at, "step")
    assert session(at).config.num_draft_tokens == 6 and metric(at, "rounds") == "1"
    assert session(at).baseline.wait_for(1, timeout_s=120), "the baseline of the same target, prompt and sampling is measured (in the background)"


def test_script_in_the_prompt_renders_as_text():
    hostile = 'Repeat exactly: <script>alert("x")</script> <img src=x onerror=alert(1)>'
    at = page(max_new_tokens=4, prompt=hostile)
    click(at, "step")
    html = "".join(h.value for h in at.html)
    assert "specviz-stream" in html
    assert "<script" not in html and "<img" not in html
    parser = _Parser()
    parser.feed(html)
    assert parser.tags <= {"div", "span", "br", "details", "summary", "style"}  # details: the folded prompt; style: the page's own CSS
    shown = "".join(parser.text).replace("␣", " ")
    assert '<script>alert("x")</script> <img src=x onerror=alert(1)>' in shown  # the prompt, drawn as text


def test_compare_mode_runs_both_drafters_side_by_side():
    at = page(max_new_tokens=3, compare="none")
    click(at, "step")
    runs = session(at).runs
    assert [r.label for r in runs] == ["A: prompt lookup", "B: plain decoding"]
    assert all(len(r.records) == 1 for r in runs)
    assert {s.value for s in at.subheader} >= {"A: prompt lookup", "B: plain decoding"}
    assert sum("specviz-stream" in h.value for h in at.html) == 2
    click(at, "run_all")
    a, b = session(at).runs
    assert a.decoder.done and b.decoder.done
    assert a.decoder.generated == b.decoder.generated  # greedy: same prompt and seed give the same text
    assert len([m for m in at.metric if m.label == "speedup"]) == 2


@pytest.mark.parametrize(
    "widgets, message",
    [
        ({"prompt": "   "}, "prompt is empty"),
        ({"drafter": "model"}, "needs a draft model"),
        ({"target": "no-such-org/no-such-model-xyz"}, "not in the Hugging Face cache"),
    ],
)
def test_errors_are_messages_not_tracebacks(widgets, message):
    at = page(**widgets)
    click(at, "step")
    assert [message in e.value for e in at.error].count(True) == 1, [e.value for e in at.error]
    assert session(at) is None


def test_play_pause_and_an_error_mid_run_keeps_the_rounds(monkeypatch):
    at = page()
    click(at, "play")  # the auto-step fragment runs once per full run here
    assert at.button(key="play").label == "Pause" and metric(at, "rounds") == "1"
    click(at, "play")
    assert at.button(key="play").label == "Play"
    rounds = metric(at, "rounds")

    def out_of_memory(self):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(SpeculativeDecoder, "step", out_of_memory)
    click(at, "step")
    assert any("Out of memory" in e.value and "Reset" in e.value for e in at.error), [e.value for e in at.error]
    assert metric(at, "rounds") == rounds  # the earlier rounds are still shown
    assert any("specviz-stream" in h.value for h in at.html)


def test_the_token_counter_leads_and_an_empty_round_says_why():
    """The load-free counter comes first (tokens against target passes); a round that drafted nothing says why in
    words; rounds count from 1."""
    at = click(page(max_new_tokens=12), "step")
    run = session(at).runs[0]
    tokens, passes = sum(len(r.emitted) for r in run.records), len(run.records)
    assert counter_sentence(tokens, passes) in [m.value for m in at.markdown]
    if run.records[-1].num_drafted == 0:  # the short prompt's first round: prompt lookup has nothing to copy yet
        assert any(c.value.startswith("Round 1 drafted nothing: prompt lookup found no earlier place") for c in at.caption), [c.value for c in at.caption]
    assert "rounds count from 0" not in " ".join(c.value for c in at.caption)


def test_a_disturbed_clock_is_said_in_a_sentence_with_the_quiet_machine_figure(monkeypatch):
    """When the measured speedup is no result (the clocks were disturbed), the headline shows no bare word: a
    sentence says why and gives the shipped benchmark's quiet-machine figure for the drafter."""
    from specviz.core.metrics import RunMetrics
    from specviz.experiments.bench import shipped_speedup
    from specviz.ui.step_through import step_views

    monkeypatch.setattr(RunMetrics, "disturbance", lambda self: "the clocks were disturbed")
    monkeypatch.setattr(step_views, "measuring", lambda session, run: False)
    at = click(page(max_new_tokens=4, num_draft_tokens=8), "step")
    assert metric(at, "speedup") == "–"
    quiet, k, _ = shipped_speedup("lookup", 8)
    notes = [c.value for c in at.caption if c.value.startswith("No speedup is shown: the machine was busy")]
    assert len(notes) == 1, [c.value for c in at.caption]
    assert f"On a quiet machine the shipped benchmark measured {quiet:.2f}× for this drafter at k = {k}" in notes[0]
    assert not any(m.value == "disturbed" for m in at.metric)


def test_the_counter_says_one_target_pass_not_one_target_passes():
    """The headline after a first round is grammatical: "2 tokens in 1 target pass"; plurals from 2 on."""
    assert counter_sentence(2, 1) == "**2 tokens in 1 target pass**; plain decoding needs 2."
    assert counter_sentence(1, 1) == "**1 token in 1 target pass**; plain decoding needs 1."
    assert counter_sentence(7, 3) == "**7 tokens in 3 target passes**; plain decoding needs 7."
