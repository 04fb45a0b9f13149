"""Figures for the exactness lab: empirical histograms against p_target and q_draft, and how the distance
from p_target shrinks (or does not) as samples accumulate. Never imports streamlit."""

from __future__ import annotations

import html
from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specviz.viz import style
from specviz.viz.style import TEMPLATE

P_COLOR, Q_COLOR, EMP_COLOR, ALT_COLOR = style.P_TARGET, style.Q_DRAFT, style.OKABE_ITO["bluish_green"], style.OKABE_ITO["orange"]
LAYOUT = dict(margin=dict(l=10, r=10, t=40, b=10), height=400, legend=dict(orientation="h", y=-0.2), modebar=dict(orientation="v"))


def _labels(names: Sequence[str]) -> list[str]:
    """Token names are user input or model output: escaped, and made unique for the category axis."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        text = html.escape(str(name)) or "∅"
        seen[text] = seen.get(text, 0) + 1
        out.append(text if seen[text] == 1 else f"{text} ({seen[text]})")
    return out


def toy_frame(names: Sequence[str], p_target: Sequence[float], q_draft: Sequence[float], counts: Sequence[int], limit: Sequence[float] | None = None) -> pd.DataFrame:
    """One row per token: p_target, q_draft, the empirical frequency and (optionally) where the variant converges."""
    total = max(1, int(sum(counts)))
    df = pd.DataFrame({"token": list(names), "p_target": list(p_target), "q_draft": list(q_draft), "count": [int(c) for c in counts]})
    df["empirical"] = df["count"] / total
    if limit is not None:
        df["limit"] = list(limit)
    return df


def histogram_figure(df: pd.DataFrame, title: str) -> go.Figure:
    """Grouped bars: p_target, q_draft, the empirical frequency of emitted tokens; diamonds where the variant converges."""
    x = _labels(df["token"])
    fig = go.Figure(layout=dict(template=TEMPLATE))
    fig.add_bar(x=x, y=df["p_target"], name="p_target (what exact sampling must give)", marker_color=P_COLOR)
    fig.add_bar(x=x, y=df["q_draft"], name="q_draft (what the drafter proposes)", marker_color=Q_COLOR)
    fig.add_bar(x=x, y=df["empirical"], name="emitted tokens (empirical)", marker_color=EMP_COLOR)
    if "limit" in df:
        fig.add_scatter(x=x, y=df["limit"], mode="markers", name="where this variant converges", marker=dict(symbol="diamond", size=11, color=style.INK))
    fig.update_layout(title=html.escape(title), barmode="group", yaxis=dict(title="probability", rangemode="tozero"), **LAYOUT)
    return fig


def convergence_frame(checkpoints: Sequence[int], tv: Sequence[float], pvalue: Sequence[float], noise: Sequence[float]) -> pd.DataFrame:
    return pd.DataFrame({"samples": list(checkpoints), "tv": list(tv), "pvalue": list(pvalue), "noise": list(noise)})


def convergence_figure(df: pd.DataFrame) -> go.Figure:
    """Top: total-variation distance from p_target as samples grow, against the sampling noise of an exact
    sampler. Bottom: the chi-square p-value, with the 0.05 line."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    fig.update_layout(template=TEMPLATE)
    fig.add_scatter(x=df["samples"], y=df["tv"], mode="lines+markers", name="TV(empirical, p_target)", line=dict(color=EMP_COLOR), row=1, col=1)
    fig.add_scatter(x=df["samples"], y=df["noise"], mode="lines", name="typical TV of an exact sampler", line=dict(color=style.GREY, dash="dash"), row=1, col=1)
    fig.add_scatter(x=df["samples"], y=df["pvalue"], mode="lines+markers", name="chi-square p-value", line=dict(color=P_COLOR), row=2, col=1)
    fig.add_hline(y=0.05, line=dict(color=style.REJECTED, dash="dot"), row=2, col=1)
    fig.add_hrect(y0=0, y1=0.05, fillcolor=style.REJECTED, opacity=0.12, line_width=0, row=2, col=1)  # where an exact rule lands 5% of the time
    fig.add_annotation(text="p < 0.05: 1 time in 20 for an exact rule", xref="x2 domain", x=0.0, yref="y2", y=0.05, showarrow=False,
                       xanchor="left", yanchor="bottom", font=dict(size=11), row=2, col=1)  # fmt: skip
    fig.update_xaxes(type="log", dtick=1, row=1, col=1)
    fig.update_xaxes(type="log", dtick=1, title_text="samples drawn", row=2, col=1)
    fig.update_yaxes(type="log", dtick=1, title_text="TV distance", row=1, col=1)
    fig.update_yaxes(title_text="p-value", range=[0, 1.02], row=2, col=1)
    fig.update_layout(title="distance from p_target as N grows", **LAYOUT)
    return fig


def real_frame(names: Sequence[str], p_target: Sequence[float], q_draft: Sequence[float] | None,
               spec_counts: Sequence[int], target_counts: Sequence[int]) -> pd.DataFrame:
    """One row per shown token (the last may be 'other'): p_target, q_draft and both empirical frequencies."""
    n_spec, n_target = max(1, int(sum(spec_counts))), max(1, int(sum(target_counts)))
    return pd.DataFrame(
        {
            "token": list(names),
            "p_target": list(p_target),
            "q_draft": list(q_draft) if q_draft is not None else [float("nan")] * len(names),
            "speculative": [c / n_spec for c in spec_counts],
            "target alone": [c / n_target for c in target_counts],
            "speculative_count": [int(c) for c in spec_counts],
            "target_count": [int(c) for c in target_counts],
        }
    )


def real_histogram_figure(df: pd.DataFrame, title: str) -> go.Figure:
    """Grouped bars over the target's top tokens: p_target, q_draft, and the two empirical histograms."""
    x = _labels(df["token"])
    fig = go.Figure(layout=dict(template=TEMPLATE))
    fig.add_bar(x=x, y=df["p_target"], name="p_target (exact)", marker_color=P_COLOR)
    if df["q_draft"].notna().any():
        fig.add_bar(x=x, y=df["q_draft"], name="q_draft", marker_color=Q_COLOR)
    fig.add_bar(x=x, y=df["speculative"], name="speculative decoding (empirical)", marker_color=EMP_COLOR)
    fig.add_bar(x=x, y=df["target alone"], name="target alone (empirical)", marker_color=ALT_COLOR)
    fig.update_layout(title=html.escape(title), barmode="group", yaxis=dict(title="probability", rangemode="tozero"), **LAYOUT)
    return fig
