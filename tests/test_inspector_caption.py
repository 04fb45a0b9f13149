"""The round inspector's caption is built from the run's own settings and the chart's own colours (issue 43): no
"at temperature 0" at another temperature, no "green residual" where none is drawn."""

from __future__ import annotations

from specviz.ui.step_through.inspector import _inspector_caption
from specviz.viz import style
from specviz.viz.frames import PositionInfo


def _draft(residual_needed: bool | None) -> PositionInfo:
    return PositionInfo(0, "draft", 5, "accepted", 0.4, 0.4, 1.0, 0.3, None, None, node=0, residual_needed=residual_needed)


def test_the_caption_names_the_runs_temperature():
    bonus = PositionInfo(1, "bonus", None, None, None, None, None, None, 7, "bonus")
    assert "temperature 0" in _inspector_caption(bonus, False, 0.0)
    assert "temperature 0 " not in _inspector_caption(bonus, False, 0.7) and "temperature 0.7" in _inspector_caption(bonus, False, 0.7)
    for has_q in (True, False):
        assert "temperature 0" not in _inspector_caption(_draft(True), has_q, 0.7)
        assert "temperature 0" in _inspector_caption(_draft(True), has_q, 0.0)


def test_the_caption_says_the_residual_was_never_needed_where_none_is_drawn():
    assert "never needed" in _inspector_caption(_draft(False), True, 1.0)
    drawn = _inspector_caption(_draft(True), True, 1.0)
    assert "never needed" not in drawn and style.COLOUR_NAMES[style.RESIDUAL].capitalize() + " bars" in drawn
    assert style.COLOUR_NAMES[style.Q_DRAFT] + " q_draft" in drawn  # the chart's colours, from the palette
