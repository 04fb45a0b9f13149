"""Streamlit's input widgets, each checking the value session state holds for its key before it draws.

A value arrives in session state from outside the widget: a script (st.session_state[key] = ...), a share link, or
a raw protocol client that sends an integer for a selectbox or a string for a slider. Streamlit draws such a value
or raises on it (an st.exception); these wrappers take the same arguments as st.<widget>, and a value of the wrong
type, outside the range or not among the options is replaced by the widget's default (`reset=`, for a widget whose
caller seeds its value through session state; else the value is dropped and the widget starts at its own value=,
index= or default=) with a warning naming the widget. What a valid value means (the owner's policy) is for the
caller to judge.

A value Streamlit cannot even read (a protocol client's text that is not JSON for a data editor, the Exactness lab's
toy table) makes Streamlit's own deserializer raise, and it does so before the script runs, every rerun after, so nothing in the
script could catch it and the session stayed broken. tolerate_unreadable_values() (specviz.ui.common.errors, once per
process) makes such a value read as no value at all (what a cleared widget sends): the widget starts at its default,
and the page says which widget was reset (dropped_values). It wraps one method of Streamlit's widget-state map (WStates.__getitem__); where that is
not there, nothing is wrapped and the page is as before (tests/test_app_errors.py checks it is there)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from numbers import Real
from typing import Any

import streamlit as st

from specviz.ui.common import st_internals
from specviz.viz.markdown import md_text

UNSET = object()  # the caller gave no reset value
MAX_DROPPED = 20  # widgets remembered per session between two runs
log = logging.getLogger(__name__)
_dropped: dict[str, list[str]] = {}  # session id -> widget keys whose client value could not be read (until its page says so)
_dropped_lock = threading.Lock()
_tolerant = False


def tolerate_unreadable_values() -> bool:
    """Make a widget value Streamlit's deserializer cannot read count as absent, for this process (see the module
    docstring). Returns whether the hook is in place."""
    global _tolerant
    if _tolerant:
        return True
    try:
        WidgetState, Serialized, WStates = st_internals.widget_state_types()
    except ImportError:
        log.warning("this Streamlit has no WStates: a client's unreadable widget value still breaks its session")
        return False
    with _dropped_lock:
        if _tolerant:
            return True
        read = WStates.__getitem__

        def tolerant_getitem(self, k: str) -> Any:
            try:
                return read(self, k)
            except KeyError:
                raise
            except Exception as exc:  # the deserializer refused what the client sent: read it as no value (the default)
                self.states[k] = Serialized(WidgetState(id=k))  # replaced in place: callers may be iterating the map
                _remember_dropped(k, exc)
                try:
                    return read(self, k)
                except KeyError:
                    raise
                except Exception:
                    raise KeyError(k) from None

        WStates.__getitem__ = tolerant_getitem
        _tolerant = True
    return True


def _remember_dropped(widget_id: str, exc: Exception) -> None:
    ctx = st_internals.script_run_ctx()
    key = widget_id.split("-", 2)[2] if widget_id.count("-") >= 2 else widget_id  # "$$ID-<hash>-<key>" -> key
    log.warning("a client's value for widget %r could not be read (%s); it was dropped", key[:80], type(exc).__name__)
    if ctx is None:
        return
    with _dropped_lock:
        keys = _dropped.setdefault(ctx.session_id, [])
        if len(keys) < MAX_DROPPED and key not in keys:
            keys.append(key)


def dropped_values() -> list[str]:
    """The widgets of this session whose client values could not be read since its page last asked (and said so)."""
    ctx = st_internals.script_run_ctx()
    if ctx is None:
        return []
    with _dropped_lock:
        return _dropped.pop(ctx.session_id, [])


def say_dropped() -> None:
    """One warning per widget reset by tolerate_unreadable_values since this session's last run."""
    for key in dropped_values():
        st.warning(md_text(f"The widget {key[:80]!r} got a value it cannot hold; it was reset to its default."), icon="↩️")


def peek(key: str) -> object:
    """The value session state holds for key (UNSET when none); a value Streamlit cannot even read back is dropped with
    a warning and reads as UNSET."""
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

    def data_editor(self, label: str, data, *, key: str, text_chars: int = 100, **kw) -> Any:
        """st.data_editor for a table of fixed rows (num_rows="fixed"); label names it in messages only. The edits a
        client sends (Streamlit keeps {"edited_rows": {row: {column: value}}, "added_rows": [], "deleted_rows": []})
        must name rows and columns of `data`, with a finite number (or nothing) in a numeric column and at most
        text_chars characters of text in any other; anything else resets the table to `data` with a warning."""
        _guard(key, label, _edits_ok(data, text_chars), "edits of its cells", UNSET)
        return self.where.data_editor(data, key=key, num_rows="fixed", **kw)


def _edits_ok(data, text_chars: int) -> Callable[[object], bool]:
    from pandas.api.types import is_numeric_dtype

    numeric = {str(c): is_numeric_dtype(data[c]) for c in data.columns}

    def cell_ok(column: object, value: object) -> bool:
        if column not in numeric:
            return False
        if value is None:
            return True
        if numeric[column]:
            return _is_number(value) and abs(float(value)) != float("inf")
        return isinstance(value, str) and len(value) <= text_chars

    def ok(value: object) -> bool:
        if not isinstance(value, dict) or set(value) - {"edited_rows", "added_rows", "deleted_rows"}:
            return False
        rows = value.get("edited_rows", {})
        if value.get("added_rows") or value.get("deleted_rows") or not isinstance(rows, dict):
            return False
        return all(
            _row(row) is not None and _row(row) < len(data) and isinstance(cells, dict) and all(cell_ok(c, v) for c, v in cells.items())
            for row, cells in rows.items()
        )

    return ok


def _row(row: object) -> int | None:
    """A row position as Streamlit reads it (an int, or its digits as text from a JSON key), else None."""
    if isinstance(row, int) and not isinstance(row, bool):
        return row if row >= 0 else None
    if isinstance(row, str) and row.isascii() and row.isdigit() and len(row) <= 9:
        return int(row)
    return None


def on(where: Any) -> Widgets:
    """The checked widgets drawn in a column or another container: widgets.on(col).slider(...)."""
    return Widgets(where)


_MAIN = Widgets()
selectbox, radio, select_slider, multiselect = _MAIN.selectbox, _MAIN.radio, _MAIN.select_slider, _MAIN.multiselect
slider, number_input, toggle, checkbox = _MAIN.slider, _MAIN.number_input, _MAIN.toggle, _MAIN.checkbox
text_input, text_area, data_editor = _MAIN.text_input, _MAIN.text_area, _MAIN.data_editor
