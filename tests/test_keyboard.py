"""Keyboard (issue 43): Step, Play and Reset have shortcuts, named in each button's help; the page's stylesheet draws
a focus ring a keyboard user can see. The buttons are drawn with Streamlit's AppTest (no model needed)."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from specviz.viz.style import FOCUS, PAGE_CSS


def _controls_page() -> None:
    from specviz.ui.step_through import controls

    controls.buttons(playing=False)


def test_step_play_and_reset_have_shortcuts_named_in_their_help():
    at = AppTest.from_function(_controls_page, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    shortcuts = {key: at.button(key=key).proto.shortcut for key in ("step", "play", "reset")}
    assert all(shortcuts.values()) and len(set(shortcuts.values())) == 3, shortcuts
    for key, shortcut in shortcuts.items():
        assert not {"C", "R"} & set(shortcut.upper().split("+")), "Streamlit reserves C and R"
        assert f"Keyboard: {shortcut}".lower() in at.button(key=key).help.lower()  # Streamlit stores the key lower-case


def test_the_focus_ring_is_drawn():
    assert ":focus-visible" in PAGE_CSS and f"3px solid {FOCUS}" in PAGE_CSS
    assert ".stButton button:focus-visible" in PAGE_CSS  # on the red primary button too: a ring outside it
