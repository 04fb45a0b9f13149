"""Share a setup by link: query parameters -> widget values (valid ones only, a warning for the rest, never an
exception), the link a setup gives, and the step-through page restoring and mirroring its URL (AppTest)."""

from __future__ import annotations

import dataclasses
import random
import string
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest
from streamlit.testing.v1 import AppTest

from specviz.config import EMBEDDED_TARGET, MAX_NEW_TOKENS, MAX_PROMPT_CHARS, RunConfig
from specviz.core.limits import MAX_DRAFT_TOKENS
from specviz.ui.room.share import MAX_LINK_PROMPT_CHARS, SHARED_KEYS, link_for, parse_query

PAGE = str(Path(__file__).resolve().parents[1] / "pages" / "step_through.py")
PAIRS = {"embedded": (EMBEDDED_TARGET, ""), "hub pair": ("org/big", "org/small")}

GOOD = {
    "prompt": "Repeat: one two three",
    "drafter": "lookup",
    "num_draft_tokens": "6",
    "auto_k": "false",
    "temperature": "0.5",
    "top_k": "40",
    "top_p": "0.9",
    "seed": "7",
    "max_new_tokens": "32",
    "target": "org/big",
}


def test_good_values_are_restored_with_their_types():
    restored = parse_query(GOOD, PAIRS, "custom")
    assert restored.warnings == ()
    assert restored.values == {
        "prompt": "Repeat: one two three",
        "drafter": "lookup",
        "num_draft_tokens": 6,
        "auto_k": False,
        "temperature": 0.5,
        "top_k": 40,
        "top_p": 0.9,
        "seed": 7,
        "max_new_tokens": 32,
        "target": "org/big",
        "model_pair": "hub pair",  # a preset's target picks the preset, with its draft model
        "draft_model": "org/small",
    }
    assert set(GOOD) == set(SHARED_KEYS)


def test_unknown_parameter_is_a_warning_and_nothing_else():
    restored = parse_query({"drafter": "lookup", "bogus": "1", "<script>": "x"})
    assert restored.values == {"drafter": "lookup"}
    assert len(restored.warnings) == 2
    assert "'bogus'" in restored.warnings[0] and "not a setting" in restored.warnings[0]


@pytest.mark.parametrize(
    "key, value",
    [
        ("num_draft_tokens", "0"),
        ("num_draft_tokens", str(MAX_DRAFT_TOKENS + 1)),
        ("num_draft_tokens", "four"),
        ("num_draft_tokens", "-1"),
        ("num_draft_tokens", "4.0"),
        ("num_draft_tokens", "1_0"),
        ("num_draft_tokens", ""),
        ("auto_k", "1"),
        ("auto_k", "off"),
        ("temperature", "nan"),
        ("temperature", "inf"),
        ("temperature", "2.5"),
        ("temperature", "-0.5"),
        ("temperature", "1e-1"),
        ("top_p", "0"),
        ("top_p", "1.5"),
        ("top_k", "100001"),
        ("seed", str(2**31)),
        ("max_new_tokens", "0"),
        ("max_new_tokens", str(MAX_NEW_TOKENS + 1)),
        ("drafter", "evil"),
        ("drafter", "LOOKUP"),
        ("prompt", ""),
        ("prompt", "   "),
        ("prompt", "x" * (MAX_PROMPT_CHARS + 1)),
        ("target", ""),
        ("target", "org/model\nrm -rf"),
        ("target", "x" * 301),
    ],
)
def test_invalid_value_is_a_warning_and_keeps_the_default(key, value):
    restored = parse_query({key: value, "seed": "3"} if key != "seed" else {key: value})
    assert key not in restored.values  # the widget keeps its default
    assert len(restored.warnings) == 1
    assert key in restored.warnings[0] and "default" in restored.warnings[0]


def test_slider_values_snap_to_their_step_with_a_warning():
    restored = parse_query({"temperature": "0.73", "top_p": ".95"})
    assert restored.values == {"temperature": 0.75, "top_p": 0.95}
    assert len(restored.warnings) == 1 and "0.75" in restored.warnings[0]


def test_repeated_parameter_takes_the_last_value():
    assert parse_query({"seed": ["1", "2"]}).values == {"seed": 2}


def test_draft_model_drafter_needs_a_preset_pair():
    alone = parse_query({"drafter": "model"}, PAIRS)
    assert "drafter" not in alone.values and "draft model" in alone.warnings[0]
    with_pair = parse_query({"drafter": "model", "target": "org/big"}, PAIRS)
    assert with_pair.values["drafter"] == "model" and with_pair.values["draft_model"] == "org/small"


def test_other_targets_go_to_the_custom_pair_for_the_sidebar_to_judge():
    restored = parse_query({"target": "/etc/passwd"}, PAIRS, "custom (type the ids below)")
    # not refused here: the sidebar's validation and the owner's policy decide what a target may be
    assert restored.values == {"target": "/etc/passwd", "model_pair": "custom (type the ids below)", "draft_model": ""}


def test_parse_query_never_raises():
    rng = random.Random(0)
    alphabet = string.printable + "éλ🚀\x00\u202e"
    for _ in range(2000):
        key = rng.choice(SHARED_KEYS + ("x", "", "prompt\x00"))
        value = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        restored = parse_query({key: value})
        assert len(restored.values) + len(restored.warnings) >= 1


# --- the link a setup gives ------------------------------------------------------------------------------


def test_defaults_give_a_bare_link():
    link = link_for(RunConfig(), "the default prompt", "the default prompt")
    assert link.query == {} and link.prompt_left_out is None
    assert link.url("http://host:8501/") == "http://host:8501/"


def test_link_round_trips_through_parse_query():
    config = RunConfig(drafter="lookup", num_draft_tokens=6, temperature=0.7, top_k=50, top_p=0.85, seed=9, max_new_tokens=100)
    prompt = "Say: <b>hi</b> & bye?\n#frag=1"
    link = link_for(config, prompt, "default")
    assert list(link.query) == ["drafter", "num_draft_tokens", "temperature", "top_k", "top_p", "seed", "max_new_tokens", "prompt"]
    fixed = link_for(dataclasses.replace(config, auto_k=False), prompt, "default")  # a fixed k's run says so: the link opens at it
    assert fixed.query["auto_k"] == "false" and parse_query(fixed.query).values["auto_k"] is False
    query = dict(parse_qsl(urlsplit(link.url("http://h/")).query, keep_blank_values=True))
    restored = parse_query(query)
    assert restored.warnings == ()
    assert restored.values.pop("prompt") == prompt
    assert dataclasses.replace(RunConfig(), **restored.values) == config


def test_long_prompt_is_left_out_of_the_link():
    prompt = "word " * 1000
    link = link_for(RunConfig(), prompt, "default")
    assert "prompt" not in link.query and link.prompt_left_out == len(prompt)
    short = "é" * (MAX_LINK_PROMPT_CHARS // 6 - 1)  # six URL characters each: %C3%A9
    assert link_for(RunConfig(), short, "default").query["prompt"] == short


# --- the page (AppTest) ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def _embedded_model(smollm):
    """The page loads the embedded target on its first run; load it once for the module."""


def _page(**params: str) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=180)
    for key, value in params.items():
        at.query_params[key] = value
    return at.run()


def _widget_value(at: AppTest, key: str):
    for kind in ("text_area", "selectbox", "slider", "number_input", "text_input", "toggle"):
        found = [w for w in getattr(at, kind) if w.key == key]
        if found:
            return found[0].value
    raise KeyError(key)


def test_page_restores_a_share_link_and_mirrors_it(_embedded_model):
    at = _page(drafter="lookup", num_draft_tokens="6", auto_k="false", temperature="0.5", top_k="20", seed="11", max_new_tokens="12", prompt="Count: 1 2 3")
    assert not at.exception, at.exception
    assert not at.warning, [w.value for w in at.warning]
    assert not at.error, [e.value for e in at.error]
    expected = {"drafter": "lookup", "num_draft_tokens": 6, "temperature": 0.5, "top_k": 20, "seed": 11, "max_new_tokens": 12, "prompt": "Count: 1 2 3"}
    assert {key: _widget_value(at, key) for key in expected} == expected
    assert at.query_params == {"drafter": "lookup", "num_draft_tokens": "6", "auto_k": "false", "temperature": "0.5", "top_k": "20", "seed": "11", "max_new_tokens": "12", "prompt": "Count: 1 2 3"}
    assert "num_draft_tokens=6" in at.text_input(key="share_link").value  # the Copy link box
    assert _widget_value(at, "example") == "custom"  # the link's prompt is none of the examples
    at.slider(key="num_draft_tokens").set_value(3).run()  # a later change is mirrored; the link is read only once
    assert at.query_params["num_draft_tokens"] == "3"
    assert _widget_value(at, "num_draft_tokens") == 3


def test_page_warns_about_bad_parameters_and_keeps_defaults(_embedded_model):
    at = _page(num_draft_tokens="999", auto_k="no", temperature="hot", drafter="<script>alert(1)</script>", bogus="1")
    assert not at.exception, at.exception
    warnings = " ".join(w.value for w in at.warning)
    for key in ("num_draft_tokens", "auto_k", "temperature", "drafter", "bogus"):
        assert key in warnings
    defaults = RunConfig()
    assert _widget_value(at, "auto_k") is True  # k: auto, so k's slider is auto's ceiling; k itself is held
    assert at.session_state["num_draft_tokens"] == defaults.num_draft_tokens
    assert _widget_value(at, "temperature") == defaults.temperature
    assert _widget_value(at, "drafter") == defaults.drafter
    assert at.query_params == {}  # refused parameters leave the URL; the defaults need none


def test_page_hands_a_linked_target_to_the_sidebar_which_refuses_a_non_model(_embedded_model):
    at = _page(target="/etc/passwd")
    assert not at.exception, at.exception
    assert _widget_value(at, "target") == "/etc/passwd"
    assert at.error  # the normal target validation speaks, as for a typed target


def test_the_example_menu_follows_the_prompt(_embedded_model):
    from specviz.ui.common.prompts import load_examples

    examples = load_examples()
    at = _page(prompt=examples[1].prompt)  # a link to an example's prompt names that example
    assert _widget_value(at, "example") == examples[1].label
    at.text_area(key="prompt").set_value("my own words").run()
    assert _widget_value(at, "example") == "custom"
    at.selectbox(key="example").set_value(examples[0].label).run()
    assert _widget_value(at, "prompt") == examples[0].prompt
