"""Share a setup by link: the step-through page keeps its settings in the URL query, named as the widget keys,
and a link opened in a new session restores them.

restore_from_query() runs once per session before the sidebar's widgets exist (the page calls it and hands the
sidebar what it seeded): it seeds st.session_state from st.query_params through parse_query, which checks every value
against the widget's own range. An unknown or invalid parameter becomes a warning and the widget keeps its default; nothing raises.
What a value means (a target the owner's policy refuses, a draft model the drafter needs) is still for the
sidebar's normal validation to judge: this module only makes sure each widget receives a value it can hold.

share_link(settings) runs after the config is built: it writes the settings that differ from the defaults into
the URL (so the bare app keeps a bare URL and links stay short) and shows the link under **Copy link**. A prompt
longer than MAX_LINK_PROMPT_CHARS once URL-encoded stays out of the link (the box says so), because chat tools,
slides and some proxies cut URLs of a few thousand characters; the prompt itself may be up to 20,000."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import quote, urlencode

import streamlit as st

from specviz.config import EMBEDDED_TARGET, SECTIONS, RunConfig, Setting, settings_of, validate_prompt
from specviz.drafters.specs import TUNED_FIELDS, drafter_spec
from specviz.ui.common import widgets
from specviz.ui.common.presets import CUSTOM, MODEL_PAIRS
from specviz.viz.markdown import md_text


def link_settings(config_cls: type[RunConfig] = RunConfig) -> tuple[Setting, ...]:
    """The fields a link carries (carry="link" in the table), in the sidebar's order: section by section."""
    rows = [s for s in settings_of(config_cls) if s.carry == "link"]
    return tuple(sorted(rows, key=lambda s: SECTIONS.index(s.section) if s.section in SECTIONS else len(SECTIONS)))


# The widget keys a link carries, in the order the link lists them: the table's link fields, then the prompt.
SHARED_KEYS: tuple[str, ...] = tuple(s.widget_key for s in link_settings()) + ("prompt",)
# Parameters the URL may carry that are not settings: the live run's token (specviz.ui.room.saved_runs). Never in a shared
# link, and named in a message only on the page whose URL carries it (a refused or failed restore says which token,
# so it is not lost): a run token is a private key to a participant's run.
PRIVATE_KEYS: tuple[str, ...] = ("run",)
MAX_LINK_PROMPT_CHARS = 2000  # URL-encoded length; longer prompts are left out of the link
RESTORED_KEY = "specviz_share_restored"  # session state: this session has read its query once
LINK_KEY = "share_link"  # the Copy link box: a text input (with st.code, the sidebar's Models expander lost clicks in browser tests)
_UINT = re.compile(r"[0-9]{1,12}")
_UFLOAT = re.compile(r"[0-9]{1,6}(\.[0-9]{1,8})?|\.[0-9]{1,8}")


class _Invalid(ValueError):
    """A query value a widget can't hold; the message says what it accepts."""


def _int_in(lo: int, hi: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not _UINT.fullmatch(text) or not lo <= int(text) <= hi:
            raise _Invalid(f"a whole number from {lo} to {hi:,}")
        return int(text)

    return parse


def _float_on(lo: float, hi: float, step: float) -> Callable[[str], float]:
    """A slider's value: within [lo, hi], snapped to its step (0.73 -> 0.75 for a 0.05 step)."""

    def parse(text: str) -> float:
        if not _UFLOAT.fullmatch(text) or not math.isfinite(float(text)) or not lo <= float(text) <= hi:
            raise _Invalid(f"a number from {lo:g} to {hi:g} in steps of {step:g}")
        return round(round(float(text) / step) * step, 6)

    return parse


def _choice(choices: tuple) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise _Invalid("one of " + ", ".join(choices))
        return text

    return parse


def _prompt(text: str) -> str:
    try:
        return validate_prompt(text)
    except ValueError as exc:
        raise _Invalid(str(exc).rstrip(".")) from None


def _text(max_chars: int, what: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        text = text.strip()
        if not text or len(text) > max_chars or any(ch < " " or ch == "\x7f" for ch in text):
            raise _Invalid(f"{what} of at most {max_chars} printable characters")
        return text

    return parse


def _switch(text: str) -> bool:
    """A toggle's value: true or false (as link_for writes it)."""
    if text.lower() not in ("true", "false"):
        raise _Invalid("true or false")
    return text.lower() == "true"


def parser_for(s: Setting) -> Callable[[str], object]:
    """A link's text -> the value the field's widget holds, within the widget's range (the table's ui range)."""
    low, high = s.widget_range
    if s.choices is not None:
        return _choice(s.choices)
    if s.type is bool:
        return _switch
    if s.type is str:
        return _text(s.max_chars or 300, s.what)
    if s.type is float:
        return _float_on(low, high, s.step or 0.01)
    if s.type is int:
        return _int_in(int(low), int(high))
    raise TypeError(f"A link cannot carry {s.name} ({s.type.__name__}): give it a parser in specviz.ui.room.share.parser_for.")


def parsers(config_cls: type[RunConfig] = RunConfig) -> dict[str, Callable[[str], object]]:
    """key -> parser for every parameter a link may carry: the table's link fields, and the prompt."""
    return {s.widget_key: parser_for(s) for s in link_settings(config_cls)} | {"prompt": _prompt}


# key -> parser. The ranges are the sidebar's widget ranges (the table, specviz.config.FIELDS): a seeded value must fit its widget.
PARSERS: dict[str, Callable[[str], object]] = parsers()
STEPPED = frozenset(s.widget_key for s in link_settings() if s.type is float and s.step)  # sliders with a step: a value between steps snaps


@dataclass(frozen=True)
class Restored:
    """What a link asks for: the widget values to seed (valid ones only) and one warning per refused parameter."""

    values: dict[str, object]
    warnings: tuple[str, ...]


def _show(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "…")


def parse_query(
    params: Mapping[str, str | Sequence[str]], model_pairs: Mapping[str, tuple[str, str]] | None = None, custom_label: str = "custom"
) -> Restored:
    """Query parameters -> widget values and warnings. Pure: never raises on any input.

    model_pairs (label -> (target, draft)) lets a link to a preset's target also pick the preset (and its draft
    model, which the 'model' drafter needs); any other target selects custom_label in the model-pair menu."""
    values: dict[str, object] = {}
    warnings: list[str] = []
    for key, raw in params.items():
        text = raw if isinstance(raw, str) else (list(raw)[-1] if len(raw) else "")
        if key in PRIVATE_KEYS:
            continue  # read by its own module
        if key not in PARSERS:
            warnings.append(f"The link's parameter {_show(str(key))} is not a setting of this page; it was ignored. Links carry: {', '.join(SHARED_KEYS)}.")
            continue
        try:
            value = PARSERS[key](text)
        except _Invalid as exc:
            warnings.append(f"The link's {key}={_show(text)} is not valid ({exc}); {key} keeps its default.")
            continue
        if isinstance(value, float) and key in STEPPED and abs(value - float(text)) > 1e-9:
            warnings.append(f"The link's {key}={_show(text)} is between the slider's steps; using {value:g}.")
        values[key] = value
    target = values.get("target")
    if target is not None and target != EMBEDDED_TARGET:
        pair = next(((label, draft) for label, (t, draft) in (model_pairs or {}).items() if t == target), None)
        values["model_pair"], values["draft_model"] = pair if pair else (custom_label, "")
    if "drafter" in values and drafter_spec(str(values["drafter"])).needs_model and not values.get("draft_model"):
        values.pop("drafter")
        warnings.append("The link asks for the draft-model drafter, but a link carries no draft model; the drafter keeps its default. Pick a model pair under Models.")
    return Restored(values, tuple(warnings))


def restore_from_query() -> dict[str, object] | None:
    """Once per session, before the sidebar's widgets exist: seed them from the URL, show a warning per refused
    parameter. Returns the values it seeded (for specviz.ui.step_through.sidebar.sidebar), or None on later runs."""
    if st.session_state.get(RESTORED_KEY):
        return None
    st.session_state[RESTORED_KEY] = True
    restored = parse_query(st.query_params.to_dict(), MODEL_PAIRS, CUSTOM)
    for key, value in restored.values.items():
        st.session_state[key] = value
    for text in restored.warnings:
        st.warning(md_text(text), icon="🔗")  # the text quotes the URL: escaped, so a link in it stays text
    return restored.values


@dataclass(frozen=True)
class Link:
    """The query a setup is shared by, and the prompt it had to leave out (None when the prompt is in it)."""

    query: dict[str, str]
    prompt_left_out: int | None = None  # the prompt's length in characters, when too long for a link

    def url(self, base: str) -> str:
        return base + ("?" + urlencode(self.query, quote_via=quote) if self.query else "")


def _as_text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else f"{value:g}" if isinstance(value, float) else str(value)


def link_for(config: RunConfig, prompt: str, default_prompt: str, defaults: RunConfig = RunConfig()) -> Link:  # noqa: B008
    """The query for a setup: each shared setting that differs from its default (k: from the drafter's measured best,
    which the page that opens the link starts the drafter at), the prompt only if it is short."""
    query: dict[str, str] = {}
    left_out = None
    tuned = drafter_spec(config.drafter).defaults
    for setting in link_settings():
        value = getattr(config, setting.name)
        if value != getattr(tuned if setting.name in TUNED_FIELDS else defaults, setting.name):
            query[setting.widget_key] = _as_text(setting.to_widget(value))
    if prompt != default_prompt:
        if len(quote(prompt)) <= MAX_LINK_PROMPT_CHARS:
            query["prompt"] = prompt
        else:
            left_out = len(prompt)
    return Link(query, left_out)


def share_link(settings) -> None:
    """Mirror the settings in the URL and show the link in the sidebar under **Copy link** (specviz.ui.step_through.sidebar.Settings)."""
    if settings.config is None:  # invalid widgets: keep the URL as it was; the page shows the error
        return
    from specviz.ui.common.prompts import load_examples

    link = link_for(settings.config, settings.prompt, load_examples()[0].prompt)
    current = st.query_params.to_dict()
    wanted = link.query | {k: current[k] for k in PRIVATE_KEYS if k in current}  # the URL keeps the run token
    if current != wanted:
        st.query_params.from_dict(wanted)
    base = st.context.url or ""
    st.session_state[LINK_KEY] = link.url(base)  # shown, not read: every run writes the current link
    with st.sidebar.expander("Copy link", icon="🔗"):
        widgets.text_input(
            "Link to this setup", key=LINK_KEY,
            help="This page's settings are in its URL: select the link and copy it to share the setup. Values at their defaults are left out.",
        )  # fmt: skip
        if link.prompt_left_out is not None:
            st.caption(f"The prompt ({link.prompt_left_out:,} characters) is too long for a link and is left out: whoever opens it gets the default prompt. Send the prompt separately.")
