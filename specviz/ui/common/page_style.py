"""The app's own stylesheet (specviz.viz.style.PAGE_CSS): a visible keyboard focus ring, and a token's details shown
when it has the focus (a tap on a phone, Tab on a keyboard), since a touch screen never hovers."""

from __future__ import annotations

import streamlit as st

from specviz.viz.style import PAGE_CSS


def apply() -> None:
    """Add the stylesheet to this page (a <style>-only st.html takes no space)."""
    st.html(f"<style>{PAGE_CSS}</style>")
