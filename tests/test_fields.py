"""RunConfig's field table (specviz.config.FIELDS): every consumer knows every field, a field added to the table
reaches validate, the CLI and the share link with nothing else edited, and share links parse as they did before the
table (a set of links, hostile ones included, with what they gave then)."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs

import pytest
from streamlit.testing.v1 import AppTest

from specviz.cli.options import add_run_options, config_from_args
from specviz.config import FIELDS, Check, Flag, RunConfig, Setting, Widget, field_named, setting, settings_of
from specviz.ui.room.share import PARSERS, SHARED_KEYS, link_settings, parse_query, parsers
from specviz.ui.step_through.session import DRAFTER_FIELDS
from specviz.workshop.policy import Policy

ROOT = Path(__file__).resolve().parents[1]
# setups that between them show every widget of the sidebar (the drafter section draws a field only when a drafter uses it)
SETUPS = ({}, {"drafter": "early-exit", "compare": "ngram", "auto_k": False}, {"drafter": "medusa", "compare": "eagle"})  # k's slider: the ceiling under auto, else k


def _sidebar_script() -> None:
    import streamlit as st

    from specviz.ui.step_through.sidebar import sidebar

    settings = sidebar()
    st.session_state["_config"] = settings.config


def _fork_script() -> None:
    import streamlit as st

    from specviz.config import RunConfig
    from specviz.ui.step_through.sidebar import seed_from_run

    run = RunConfig(draft="org/small", drafter="model", exit_layer=5, draft_vocab=4096, ngram_max=4, ngram_threshold=0.3, num_draft_tokens=5,
                    adaptive_k=True, tree_width=2, temperature=0.7, top_k=40, top_p=0.9, seed=3, max_new_tokens=20, chat=False, target="org/big")  # fmt: skip
    st.session_state["_run"] = run
    seed_from_run(run, "a prompt")


def _sidebar_keys(monkeypatch) -> set[str]:
    """The widget keys the sidebar draws in local mode, over SETUPS."""
    monkeypatch.setenv("SPECVIZ_MODE", "local")
    keys: set[str] = set()
    for setup in SETUPS:
        at = AppTest.from_function(_sidebar_script, default_timeout=60)
        for key, value in setup.items():
            at.session_state[key] = value
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert at.session_state["_config"] is not None
        for kind in ("slider", "number_input", "selectbox", "toggle", "checkbox", "text_input"):
            keys |= {w.key for w in getattr(at.sidebar, kind)}
    return keys


def _forked_keys() -> dict:
    at = AppTest.from_function(_fork_script, default_timeout=60)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    run = at.session_state["_run"]
    return {s.widget_key: at.session_state[s.widget_key] for s in FIELDS if s.widget_key in at.session_state} | {"_run": run}


def _cli_options(config_cls: type[RunConfig] = RunConfig) -> set[str]:
    parser = argparse.ArgumentParser()
    add_run_options(parser, config_cls)
    return {flag for action in parser._actions for flag in action.option_strings}


def missing(rows, *, cli: set[str], links: set[str], widgets: set[str], forked: dict, drafter_fields: frozenset) -> list[str]:
    """'field: consumer' for each consumer that does not know a field the table says it should."""
    out = []
    for s in rows:
        if any(flag not in cli for flag in s.flags):
            out.append(f"{s.name}: cli")
        if s.carry == "link" and s.widget_key not in links:
            out.append(f"{s.name}: share link")
        if s.widget and s.widget_key not in widgets:
            out.append(f"{s.name}: sidebar")
        if s.carry and s.widget_key not in forked:
            out.append(f"{s.name}: seed_from_run")
        if s.drafter_only != (s.name in drafter_fields):
            out.append(f"{s.name}: DRAFTER_FIELDS")
        if s.cap and not hasattr(Policy(), s.cap):
            out.append(f"{s.name}: policy cap")
    return out


def test_every_consumer_knows_every_field_of_the_table(monkeypatch):
    known = dict(cli=_cli_options(), links=set(PARSERS), widgets=_sidebar_keys(monkeypatch), forked=_forked_keys(), drafter_fields=DRAFTER_FIELDS)
    assert missing(FIELDS, **known) == []
    assert set(SHARED_KEYS) == {s.widget_key for s in FIELDS if s.carry == "link"} | {"prompt"}
    # a fork puts the run's value in each widget, as the widget holds it (None: its unset value)
    run = known["forked"]["_run"]
    for s in FIELDS:
        if s.carry:
            assert known["forked"][s.widget_key] == s.to_widget(getattr(run, s.name)), s.name
    # known-bad control: a row no consumer has heard of is reported for every consumer that should know it
    stranger = Setting(name="stranger", flags=("--stranger",), carry="link", widget="slider", drafter_only=True, cap="max_stranger")
    assert missing([stranger], **known) == [
        "stranger: cli", "stranger: share link", "stranger: sidebar", "stranger: seed_from_run", "stranger: DRAFTER_FIELDS", "stranger: policy cap",
    ]  # fmt: skip


def test_validate_refuses_each_field_outside_its_range():
    for s in FIELDS:
        if s.type in (int, float):
            nudge = 1 if s.type is int else 0.01
            for bad in ([s.low - nudge] if s.low is not None else []) + ([s.high + nudge] if s.high is not None else []):
                with pytest.raises(ValueError):
                    RunConfig(**{s.name: s.type(bad)})
        if s.choices is not None:
            with pytest.raises(ValueError, match="choose one of"):
                RunConfig(**{s.name: "not-a-choice"})


def test_the_policy_caps_each_field_the_table_says_it_caps():
    for s in FIELDS:
        if s.cap:
            policy = Policy(**{s.cap: int(s.low)})
            capped, _, _ = policy.enforce(RunConfig(**{s.name: int(s.high)}, **({"adaptive_k": True} if s.name == "max_draft_tokens" else {})))
            assert getattr(capped, s.name) == s.low, s.name
    assert Policy.local().max_new_tokens == field_named("max_new_tokens").high  # local mode: the engine's own range


@dataclass(frozen=True)
class WithKnob(RunConfig):
    """RunConfig with one field more: the table's row is all it takes."""

    knob: int = setting(3, Check(low=1, high=5, what="The knob"), Widget("number", "sampling", "knob"), Flag("--knob", help="a knob (default %(default)s)"), carry="link")


def test_a_field_added_to_the_table_reaches_validate_the_cli_and_the_link():
    with pytest.raises(ValueError, match="The knob must be between 1 and 5; got 9"):
        WithKnob(knob=9)
    parser = argparse.ArgumentParser()
    add_run_options(parser, WithKnob)
    assert config_from_args(parser.parse_args(["--knob", "4", "--temperature", "0.5"]), WithKnob) == WithKnob(knob=4, temperature=0.5)
    assert "a knob (default 3)" in " ".join(parser.format_help().split())
    with pytest.raises(ValueError, match="The knob"):
        config_from_args(parser.parse_args(["--knob", "6"]), WithKnob)
    assert "knob" in {s.widget_key for s in link_settings(WithKnob)}
    assert parsers(WithKnob)["knob"]("4") == 4
    with pytest.raises(ValueError):
        parsers(WithKnob)["knob"]("6")
    assert "--knob" in _cli_options(WithKnob) and "--knob" not in _cli_options()


def test_a_setting_is_written_as_its_parts():
    """setting(...) takes a Check, a Widget, a Flag and a Cap (not fifteen loose keywords); the Setting reads them flat."""
    with pytest.raises(TypeError):
        setting(3, low=1, widget="number")
    s = field_named("num_draft_tokens")
    assert (s.low, s.high, s.widget, s.section, s.seeded, s.flags, s.cap, s.short) == (
        1, 16, "slider", "drafter", True, ("--num-draft-tokens", "-k"), "max_draft_tokens", "k",
    )  # fmt: skip
    assert field_named("ngram_min").widget is None and field_named("max_draft_tokens").flags == ()


def test_a_field_without_a_setting_is_refused():
    """Known-bad control: a field the table cannot describe is an error, not a field every consumer skips."""

    @dataclass(frozen=True)
    class Undescribed(RunConfig):
        knob: int = 3

    with pytest.raises(TypeError, match="knob has no setting"):
        settings_of(Undescribed)


def test_the_draft_model_check_is_written_once():
    """'the model drafter needs a draft model' is said by RunConfig.validate alone; the others build a config."""
    sayers = [p.relative_to(ROOT).as_posix() for folder in ("specviz", "pages") for p in (ROOT / folder).rglob("*.py") if "needs a draft model" in p.read_text()]
    assert sayers == ["specviz/config.py"]
    with pytest.raises(ValueError, match="needs a draft model"):
        dataclasses.replace(RunConfig(), drafter="model")


PAIRS = {"embedded": ("embedded:SmolLM2-135M-Instruct", ""), "hub pair": ("org/big", "org/small")}
# (link, the widget values it gave before the field table, its number of warnings); None: the link or value is long
LINKS = [
    ("drafter=lookup&num_draft_tokens=6&temperature=0.5&bogus=1", {"drafter": "lookup", "num_draft_tokens": 6, "temperature": 0.5}, 1),
    ("temperature=0.73&top_p=0.93", {"temperature": 0.75, "top_p": 0.95}, 2),
    ("temperature=2.01&top_p=0.04&top_k=100001&seed=2147483648", {}, 4),
    ("temperature=nan&top_p=inf&seed=-1&num_draft_tokens=17", {}, 4),
    ("temperature=1e3&num_draft_tokens=0x10&max_new_tokens=2049", {}, 3),
    ("max_new_tokens=2048&seed=2147483647&top_k=100000&num_draft_tokens=16", {"max_new_tokens": 2048, "seed": 2147483647, "top_k": 100000, "num_draft_tokens": 16}, 0),
    ("drafter=model", {}, 1),
    ("drafter=model&target=org/big", {"drafter": "model", "target": "org/big", "model_pair": "hub pair", "draft_model": "org/small"}, 0),
    ("drafter=model&target=other/model", {"target": "other/model", "model_pair": "custom", "draft_model": ""}, 1),
    ("drafter=none&num_draft_tokens=1", {"drafter": "none", "num_draft_tokens": 1}, 0),
    ("drafter=%3Cscript%3E&target=%00", {}, 2),
    ("target=" + "x" * 301, {}, 1),
    ("target=embedded:SmolLM2-135M-Instruct&prompt=hi", {"target": "embedded:SmolLM2-135M-Instruct", "prompt": "hi"}, 0),
    ("prompt=&seed=%EF%BC%91", {}, 2),
    ("prompt=" + "a" * 20001, {}, 1),
    ("run=abc&temperature=.05", {"temperature": 0.05}, 0),
    ("temperature=-0&top_p=1.000000001", {}, 2),
    ("top_p=.05&temperature=0&seed=00", {"top_p": 0.05, "temperature": 0.0, "seed": 0}, 0),
    ("seed=%D9%A3&top_k=%201", {}, 2),
    ("drafter=ngram&drafter=eagle", {"drafter": "eagle"}, 0),
    ("num_draft_tokens=8&num_draft_tokens=99", {}, 1),
]  # fmt: skip


@pytest.mark.parametrize(("link", "values", "warnings"), LINKS)
def test_links_parse_as_before_the_table(link, values, warnings):
    restored = parse_query(parse_qs(link, keep_blank_values=True), PAIRS, "custom")
    assert restored.values == values
    assert len(restored.warnings) == warnings
    assert all(type(restored.values[k]) is type(v) for k, v in values.items())
