"""The race's and the probe's charts: race -> DataFrame -> plotly Figure (no streamlit).

The gap histogram draws log10 of each gap on a linear axis labelled in seconds (bins of a tenth of a decade), so
overlaid bars line up; a gap of zero (tokens that came in one chunk) lands in the first bin, at 1 µs."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from specviz.core.bursts import FLOOR_S, log_gaps
from specviz.core.race import RaceResult
from specviz.viz import style
from specviz.viz.figures import BASELINE_COLOR, RUN_COLORS
from specviz.viz.style import TEMPLATE

PLAIN_COLOR, SPEC_COLOR = BASELINE_COLOR, RUN_COLORS[0]
BINS_PER_DECADE = 10
TICKS = {-6: "≤1 µs", -5: "10 µs", -4: "100 µs", -3: "1 ms", -2: "10 ms", -1: "100 ms", 0: "1 s", 1: "10 s"}


def lane_frame(race: RaceResult) -> pd.DataFrame:
    """One row per lane: what a user of each service would see."""
    rows = []
    for lane in race.lanes:
        report = lane.bursts()
        rows.append({
            "lane": lane.label, "time to first token (s)": lane.ttft_s, "time to last token (s)": lane.last_s,
            "tokens": lane.num_tokens, "tokens/s": lane.tokens_per_s, "target passes": lane.target_passes,
            "tokens per target pass": lane.tokens_per_target_pass, "gaps < 1 ms": report.share_fast, "gaps > 10 ms": report.share_slow,
        })  # fmt: skip
    return pd.DataFrame(rows)


def gap_series(race: RaceResult) -> list[tuple[str, np.ndarray, str]]:
    """(label, gaps in seconds, colour) per lane, for gap_histogram."""
    return [(lane.label, lane.arrivals().gaps(), color) for lane, color in zip(race.lanes, (PLAIN_COLOR, SPEC_COLOR))]


def gap_histogram(series: Sequence[tuple[str, Sequence[float] | np.ndarray, str]], threshold_s: float | None, title: str = "Gaps between tokens") -> go.Figure:
    """Overlaid histograms of log10(gap), one per series, with the burst threshold as a dashed line."""
    logs = [log_gaps(g) for _, g, _ in series]
    every = np.concatenate(logs) if logs else np.zeros(0)
    low = np.floor(min(every.min(), np.log10(FLOOR_S)) if len(every) else -6)
    high = np.ceil(every.max() + 1e-9) if len(every) else 0
    edges = np.arange(low, high + 1e-9, 1 / BINS_PER_DECADE)
    traces = []
    for (label, _, color), values in zip(series, logs):
        counts, _ = np.histogram(values, bins=edges)
        traces.append(dict(type="bar", x=(edges[:-1] + edges[1:]) / 2, y=counts, name=_label(label), marker_color=color, opacity=0.65,
                           width=1 / BINS_PER_DECADE, hovertemplate="%{y} gaps<extra>" + _label(label) + "</extra>"))  # fmt: skip
    ticks = [t for t in range(int(low), int(high) + 1)]
    layout = dict(
        template=TEMPLATE, barmode="overlay", height=320, margin=dict(l=10, r=10, t=40, b=10), title=dict(text=title),
        xaxis=dict(title=dict(text="gap (log scale)"), tickvals=ticks, ticktext=[TICKS.get(t, f"1e{t} s") for t in ticks]),
        yaxis=dict(title=dict(text="gaps")), legend=dict(orientation="h", yanchor="top", y=-0.25),
    )  # fmt: skip
    if threshold_s:
        x = float(np.log10(max(threshold_s, FLOOR_S)))
        layout["shapes"] = [dict(type="line", x0=x, x1=x, yref="y domain", y0=0, y1=1, line=dict(color=style.INK, dash="dash", width=1))]
        layout["annotations"] = [dict(x=x, yref="y domain", y=1, text=f"burst threshold {_seconds(threshold_s)}", showarrow=False, xanchor="left", yanchor="top")]
    return go.Figure({"data": traces, "layout": layout})


def burst_size_figure(sizes: Sequence[int], title: str = "Tokens per burst") -> go.Figure:
    """Bars: how many bursts carried 1, 2, 3, ... tokens."""
    values, counts = np.unique(np.asarray(sizes, dtype=int), return_counts=True) if len(sizes) else (np.zeros(0), np.zeros(0))
    layout = dict(template=TEMPLATE, height=260, margin=dict(l=10, r=10, t=40, b=10), title=dict(text=title),
                  xaxis=dict(title=dict(text="tokens in the burst"), dtick=1), yaxis=dict(title=dict(text="bursts")))  # fmt: skip
    return go.Figure({"data": [dict(type="bar", x=values, y=counts, marker_color=SPEC_COLOR, name="bursts")], "layout": layout})


def _seconds(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.3g} ms"
    return f"{s:.3g} s"


def _label(text: str) -> str:
    """Trace names and hover text are rendered by plotly, which reads some HTML: escaped."""
    return html.escape(text)
