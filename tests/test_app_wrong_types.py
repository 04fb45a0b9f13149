"""A widget value of the wrong type (an integer for a selectbox, a string for a slider, a value that is not among the
options) forced into session state is reset to the widget's default with a message, on every page: AppTest finds
each page's keyed widgets, forces a wrong value into each in turn and asserts no exception, a message and a value the
widget can hold (specviz/ui/common/widgets.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from specviz.ui.step_through.caps import DEFAULTS

PAGES = Path(__file__).resolve().parent.parent / "pages"
KINDS = ("selectbox", "radio", "select_slider", "slider", "number_input", "checkbox", "toggle", "text_area", "text_input", "multiselect")
WRONG: dict[str, tuple] = {
    "selectbox": (7, "not-an-option"), "radio": (7, "not-an-option"), "select_slider": (7, "not-an-option"),
    "multiselect": (7, ["not-an-option"]), "slider": ("x",), "number_input": ("x",), "checkbox": ("x",), "toggle": ("x",),
    "text_area": (7,), "text_input": (7,),
}  # fmt: skip




def _page(name: str) -> AppTest:
    return AppTest.from_file(str(PAGES / name), default_timeout=120)


def _messages(at: AppTest) -> list[str]:
    return [m.value for m in [*at.warning, *at.error, *at.info]]


def _holds(kind: str, widget, value) -> bool:
    """The widget's value is one it can hold."""
    if kind in ("selectbox", "radio"):
        return widget.index is not None  # AppTest's options are the formatted labels; the index says it is one of them
    if kind == "select_slider":
        return value is not None
    if kind == "multiselect":
        return isinstance(value, list)
    if kind in ("slider", "number_input"):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind in ("checkbox", "toggle"):
        return isinstance(value, bool)
    return isinstance(value, str)


@pytest.mark.parametrize("page", ["step_through.py", "theory.py", "benchmark.py", "exactness.py", "numerics.py", "race.py"])
def test_every_widget_resets_a_wrong_value_with_a_message(page, no_model):
    first = _page(page).run()
    widgets = [(kind, w.key) for kind in KINDS for w in getattr(first, kind) if w.key and not w.key.startswith("$$")]
    assert len(widgets) >= 5, widgets
    failures = []
    for kind, key in widgets:
        for bad in WRONG[kind]:
            at = _page(page)
            at.session_state[key] = bad
            at.run()
            found = [w for w in getattr(at, kind) if w.key == key]
            if at.exception:
                failures.append(f"{kind} {key}={bad!r}: {at.exception[0].value}")
            elif not _messages(at) and key != "share_link":  # the link box is rewritten by the page on every run
                failures.append(f"{kind} {key}={bad!r}: no message")
            elif found and not _holds(kind, found[0], found[0].value):
                failures.append(f"{kind} {key}={bad!r}: the widget holds {found[0].value!r}")
    assert not failures, "\n".join(failures)


def test_an_integer_for_a_selectbox_names_the_widget_and_resets_it(no_model):
    at = _page("step_through.py")
    at.session_state["example"] = 2
    at.session_state["compare"] = "not-a-drafter"
    at.run()
    assert not at.exception
    shown = " ".join(_messages(at))
    assert "The widget 'Example prompt' was reset to its default: 2 is not one of its options." in shown
    assert "'Compare side by side with' was reset" in shown
    assert at.selectbox(key="example").value == at.selectbox(key="example").options[0]
    assert at.selectbox(key="compare").value == "off"


def test_a_string_for_a_slider_resets_it_to_the_default_not_the_minimum(no_model):
    at = _page("step_through.py")
    at.session_state["temperature"] = "hot"
    at.session_state["tree_width"] = "wide"
    at.run()
    assert not at.exception
    assert at.slider(key="temperature").value == DEFAULTS.temperature
    assert at.slider(key="tree_width").value == DEFAULTS.tree_width
    # every numeric widget no owner's limit caps is checked before it draws, from the field table (specviz.config.FIELDS)
    assert any("tree_width" in m and "'wide'" in m for m in _messages(at)), _messages(at)
    theory = _page("theory.py")
    theory.session_state["theory_alpha"] = "high"
    theory.run()
    assert not theory.exception and theory.slider(key="theory_alpha").value == 0.7
