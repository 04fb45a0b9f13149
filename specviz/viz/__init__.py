"""Records -> tidy DataFrames -> plotly Figures and token-view HTML. Never imports streamlit."""

from specviz.viz.frames import (
    PositionInfo,
    drafts_frame,
    latency_frame,
    num_positions,
    position_frame,
    position_info,
    progress_frame,
    rounds_frame,
    stream_frame,
    verify_cost_ratio,
)
from specviz.viz.tokens import legend_html, token_stream_html, visible_html, visible_plain

__all__ = [
    "PositionInfo",
    "drafts_frame",
    "latency_frame",
    "legend_html",
    "num_positions",
    "position_frame",
    "position_info",
    "progress_frame",
    "rounds_frame",
    "stream_frame",
    "token_stream_html",
    "verify_cost_ratio",
    "visible_html",
    "visible_plain",
]
