"""Streamlit's input widgets, each checking the value session state holds for its key before it draws.

A value arrives in session state from outside the widget: a script (st.session_state[key] = ...), a share link, or
a raw protocol client that sends an integer for a selectbox or a string for a slider. Streamlit draws such a value
or raises on it (an st.exception); these wrappers take the same arguments as st.<widget>, and a value of the wrong
type, outside the range or not among the options is replaced by the widget's default (`reset=`, for a widget whose
caller seeds its value through session state; else the value is dropped and the widget starts at its own value=,
index= or default=) with a warning naming the widget. What a valid value means (the owner's policy) is for the
caller to judge. (A protocol client's string for a slider makes Streamlit's own deserializer raise before the
script runs, in that client's session only; nothing in the script can catch that.)"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from numbers import Real
from typing import Any

import streamlit as st

from specviz.viz.markdown import md_text

UNSET = object()  # the caller gave no reset value


def peek(key: str) -> object:
    """The value session state holds for key (UNSET when none); a value Streamlit cannot even read back (a protocol
    client's string for a slider) is dropped with a warning and reads as UNSET."""
    try:
        return st.session_state[key] if key in st.session_state else UNSET
    except KeyError:
        return UNSET
    except Exception:  # the widget's deserializer raised on what the client sent
        del st.session_state[key]
        st.warning(md_text(f"The widget {key!r} got a value it cannot hold; it was reset to its default."), icon="↩️")
        return UNSET


def held(key: str, default: object = None) -> object:
    """Like st.session_state.get(key, default), never raising on what a client sent (see peek)."""
    value = peek(key)
    return default if value is UNSET else value


def _guard(key: str | None, label: str, ok: Callable[[object], bool], what: str, reset: object) -> None:
    """Replace a held value that fails ok() by reset, or drop it (the widget then starts at its value=), naming the
    widget in a warning."""
    if key is None:
        return
    value = peek(key)
    if value is UNSET or ok(value):
        return
    if reset is UNSET:
        del st.session_state[key]
    else:
        st.session_state[key] = reset
    shown = repr(value)
    shown = shown if len(shown) <= 80 else shown[:77] + "…"  # a client's value can be any size
    st.warning(md_text(f"The widget '{label}' was reset to its default: {shown} is not {what}."), icon="↩️")


def _is_number(value: object) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool) and value == value  # not NaN


def _in(options: Sequence, value: object) -> bool:
    """value is one of the options, of the same type (True is not the option 1, 2.0 not the option 2)."""
    return any(value == o and type(value) is type(o) for o in options)


def _number_ok(low: object, high: object, integer: bool) -> Callable[[object], bool]:
    def ok(value: object) -> bool:
        if not _is_number(value) or (integer and not float(value).is_integer()):
            return False
        return (low is None or value >= low) and (high is None or value <= high)

    return ok


class Widgets:
    """The checked widgets drawn in one container (st, st.sidebar, a column)."""

    def __init__(self, where: Any = st) -> None:
        self.where = where

    def selectbox(
        self, label: str, options: Sequence, index: int | None = 0, *, key: str | None = None, reset: object = UNSET, **kw
    ) -> Any:
        options = list(options)
        _guard(key, label, lambda v: _in(options, v), "one of its options", reset)
        return self.where.selectbox(label, options, index, key=key, **kw)

    def radio(
        self, label: str, options: Sequence, index: int | None = 0, *, key: str | None = None, reset: object = UNSET, **kw
    ) -> Any:
        options = list(options)
        _guard(key, label, lambda v: _in(options, v), "one of its options", reset)
        return self.where.radio(label, options, index, key=key, **kw)

    def select_slider(self, label: str, options: Sequence, *, key: str | None = None, reset: object = UNSET, **kw) -> Any:
        options = list(options)
        _guard(key, label, lambda v: _in(options, v), "one of its options", reset)
        return self.where.select_slider(label, options, key=key, **kw)

    def multiselect(
        self,
        label: str,
        options: Sequence,
        default: Sequence | None = None,
        *,
        key: str | None = None,
        reset: object = UNSET,
        **kw,
    ) -> Any:
        options = list(options)
        _guard(
            key, label, lambda v: isinstance(v, (list, tuple)) and all(_in(options, x) for x in v), "a list of its options", reset
        )
        return self.where.multiselect(label, options, default, key=key, **kw)

    def _numeric(self, widget, label: str, low, high, value, step, key: str | None, reset: object, kw: dict) -> Any:
        """A slider or number box: a number within [low, high], whole where the widget's arguments are."""
        integer = all(isinstance(x, int) for x in (low, high, value, step) if x is not None and not isinstance(x, str))
        _guard(key, label, _number_ok(low, high, integer), f"a {'whole ' if integer else ''}number from {low} to {high}", reset)
        current = peek(key) if key is not None else UNSET
        if _is_number(current) and type(current) is not (int if integer else float):
            st.session_state[key] = int(current) if integer else float(current)  # 2.0 on a whole-number slider, 1 on a float one
        return widget(label, low, high, value, step, key=key, **kw)

    def slider(
        self,
        label: str,
        min_value=None,
        max_value=None,
        value=None,
        step=None,
        *,
        key: str | None = None,
        reset: object = UNSET,
        **kw,
    ) -> Any:
        return self._numeric(self.where.slider, label, min_value, max_value, value, step, key, reset, kw)

    def number_input(
        self,
        label: str,
        min_value=None,
        max_value=None,
        value="min",
        step=None,
        *,
        key: str | None = None,
        reset: object = UNSET,
        **kw,
    ) -> Any:
        return self._numeric(self.where.number_input, label, min_value, max_value, value, step, key, reset, kw)

    def toggle(self, label: str, value: bool = False, *, key: str | None = None, reset: object = UNSET, **kw) -> Any:
        _guard(key, label, lambda v: isinstance(v, bool), "on or off", reset)
        return self.where.toggle(label, value, key=key, **kw)

    def checkbox(self, label: str, value: bool = False, *, key: str | None = None, reset: object = UNSET, **kw) -> Any:
        _guard(key, label, lambda v: isinstance(v, bool), "on or off", reset)
        return self.where.checkbox(label, value, key=key, **kw)

    def text_input(self, label: str, value: str | None = "", *, key: str | None = None, reset: object = UNSET, **kw) -> Any:
        _guard(key, label, lambda v: isinstance(v, str), "text", reset)
        return self.where.text_input(label, value, key=key, **kw)

    def text_area(self, label: str, value: str | None = "", *, key: str | None = None, reset: object = UNSET, **kw) -> Any:
        _guard(key, label, lambda v: isinstance(v, str), "text", reset)
        return self.where.text_area(label, value, key=key, **kw)


def on(where: Any) -> Widgets:
    """The checked widgets drawn in a column or another container: widgets.on(col).slider(...)."""
    return Widgets(where)


_MAIN = Widgets()
selectbox, radio, select_slider, multiselect = _MAIN.selectbox, _MAIN.radio, _MAIN.select_slider, _MAIN.multiselect
slider, number_input, toggle, checkbox = _MAIN.slider, _MAIN.number_input, _MAIN.toggle, _MAIN.checkbox
text_input, text_area = _MAIN.text_input, _MAIN.text_area
