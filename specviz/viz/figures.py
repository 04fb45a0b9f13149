"""Plotly figures built from the frames in specviz.viz.frames. Pure functions: DataFrame in, Figure out."""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specviz.viz.frames import PositionInfo

P_COLOR, Q_COLOR, RES_COLOR = "#3b7dd8", "#f28e2b", "#59a14f"
RUN_COLORS = ["#3b7dd8", "#e15759", "#59a14f", "#b07aa1", "#9c755f"]
BASELINE_COLOR = "#888888"
BASELINE_RUN = "baseline (plain decoding)"  # the run name the page gives the measured baseline; drawn grey
LAYOUT = dict(margin=dict(l=10, r=10, t=40, b=10), height=320, legend=dict(orientation="h", yanchor="top", y=-0.28))


def _label(text: str) -> str:
    """Chart text is rendered by plotly, which understands some HTML: escape it like the token view."""
    return html.escape(text)


def _runs(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame, str]]:
    """(name, rows, colour) per run, in order of appearance; the baseline is grey."""
    out = []
    for i, (run, part) in enumerate(df.groupby("run", sort=False)):
        out.append((str(run), part, BASELINE_COLOR if run == BASELINE_RUN else RUN_COLORS[i % len(RUN_COLORS)]))
    return out


def _round_axis(fig: go.Figure, rounds: pd.DataFrame) -> None:
    """Whole-number round ticks."""
    n = int(rounds["round"].max()) + 1 if len(rounds) else 1
    fig.update_xaxes(title_text="round", tick0=0, dtick=max(1, -(-n // 12)))


def inspector_figure(position: pd.DataFrame, info: PositionInfo) -> go.Figure:
    """Bars of p_target, q_draft and the normalised residual at one position; the drafted and the emitted
    token are marked; a side gauge puts min(1, p/q) against the uniform draw u."""
    has_gauge = info.accept_prob is not None
    fig = make_subplots(rows=1, cols=2 if has_gauge else 1, column_widths=[0.82, 0.18] if has_gauge else None, horizontal_spacing=0.08)
    labels = [_label(t) for t in position["token"]]
    fig.add_bar(x=labels, y=position["p_target"], name="p_target", marker_color=P_COLOR, row=1, col=1)
    if position["q_draft"].notna().any():
        fig.add_bar(x=labels, y=position["q_draft"], name="q_draft", marker_color=Q_COLOR, row=1, col=1)
    if position["residual"].notna().any():
        fig.add_bar(x=labels, y=position["residual"], name="residual max(0, p−q), normalised", marker_color=RES_COLOR, row=1, col=1)
    top = float(position[["p_target", "q_draft", "residual"]].max().max() or 1.0)
    for label, role in zip(labels, position["role"]):
        if role:  # the drafted token leans left, the emitted one right, so neighbours don't collide
            ax = -30 if role == "drafted" else (30 if "drafted" not in role else 0)
            fig.add_annotation(x=label, y=top * 1.02, text=f"<b>{role.replace('+', ' + ')}</b>", showarrow=True, arrowhead=2, ax=ax, ay=-30, row=1, col=1)
    if has_gauge:
        kept = info.fate == "accepted"
        gauge_x = [f"min(1, p/q) = {info.accept_prob:.2f}"]
        fig.add_bar(x=gauge_x, y=[info.accept_prob], marker_color=RES_COLOR if kept else "#d23c3c", name="min(1, p/q)", showlegend=False, row=1, col=2)
        fig.add_scatter(
            x=gauge_x, y=[info.uniform], mode="markers", marker=dict(symbol="line-ew", size=46, line=dict(width=4, color="#222")),
            name="uniform draw u", showlegend=False, hovertemplate="u = %{y:.3f}<extra></extra>", row=1, col=2,
        )
        fig.add_annotation(x=gauge_x[0], y=info.uniform, text=f"u = {info.uniform:.2f}", showarrow=False, yshift=12, font=dict(size=11), row=1, col=2)
        fig.update_yaxes(range=[0, 1.12], title_text=("kept: u < bar" if kept else "rejected: u ≥ bar"), row=1, col=2)
    fig.update_layout(barmode="group", **{**LAYOUT, "height": 360, "margin": dict(l=10, r=10, t=50, b=10)})
    fig.update_yaxes(title_text="probability", range=[0, top * 1.25], row=1, col=1)
    fig.update_xaxes(tickangle=-40, row=1, col=1)
    return fig


def accepted_figure(rounds: pd.DataFrame) -> go.Figure:
    """Accepted drafts per round against what was drafted (and k, which moves when adaptive)."""
    fig = go.Figure()
    runs = _runs(rounds)
    if len(runs) == 1:
        _, df, _ = runs[0]
        fig.add_bar(x=df["round"], y=df["drafted"], name="drafted", marker_color="rgba(128,128,128,.35)")
        fig.add_bar(x=df["round"], y=df["accepted"], name="accepted", marker_color="rgba(46,160,67,.85)")
        fig.add_scatter(x=df["round"], y=df["k"], name="k asked", mode="lines", line=dict(dash="dot", color="#555", shape="hv"))
        fig.update_layout(barmode="overlay")
    else:
        for run, df, color in runs:
            fig.add_scatter(x=df["round"], y=df["accepted"], name=run, mode="lines+markers", line=dict(color=color))
    fig.update_layout(title="accepted drafts per round", yaxis_title="tokens", **LAYOUT)
    _round_axis(fig, rounds)
    return fig


def alpha_figure(rounds: pd.DataFrame) -> go.Figure:
    """Running alpha = E[Σ min(p_target, q_draft)] (Leviathan) beside running accepted / drafted."""
    fig = go.Figure()
    for run, df, color in _runs(rounds):
        fig.add_scatter(x=df["round"], y=df["alpha"], name=f"α = E[Σ min(p,q)] · {run}", mode="lines+markers", line=dict(color=color))
        fig.add_scatter(x=df["round"], y=df["acceptance_rate"], name=f"accepted/drafted · {run}", mode="lines", line=dict(color=color, dash="dash"))
    fig.update_layout(title="running α and acceptance rate", yaxis=dict(range=[0, 1.05]), **LAYOUT)
    _round_axis(fig, rounds)
    return fig


def tokens_per_pass_figure(rounds: pd.DataFrame) -> go.Figure:
    """Running tokens per target pass against (1 − α^(k+1))/(1 − α) at the running α."""
    fig = go.Figure()
    for run, df, color in _runs(rounds):
        fig.add_scatter(x=df["round"], y=df["tokens_per_pass"], name=f"measured · {run}", mode="lines+markers", line=dict(color=color))
        fig.add_scatter(x=df["round"], y=df["theory_tokens_per_pass"], name=f"(1−α^(k+1))/(1−α) · {run}", mode="lines", line=dict(color=color, dash="dot"))
    fig.add_hline(y=1.0, line=dict(color=BASELINE_COLOR, width=1), annotation_text="plain decoding", annotation_position="bottom right")
    fig.update_layout(title="tokens per target pass", yaxis=dict(rangemode="tozero"), **LAYOUT)
    _round_axis(fig, rounds)
    return fig


def speedup_figure(rounds: pd.DataFrame) -> go.Figure:
    """Measured wall-clock speedup over plain decoding against Leviathan's prediction with c measured."""
    fig = go.Figure()
    for run, df, color in _runs(rounds):
        fig.add_scatter(x=df["round"], y=df["speedup"], name=f"measured · {run}", mode="lines+markers", line=dict(color=color))
        fig.add_scatter(x=df["round"], y=df["predicted_speedup"], name=f"predicted (1−α^(k+1))/((1−α)(1+kc)) · {run}", mode="lines", line=dict(color=color, dash="dot"))
    fig.add_hline(y=1.0, line=dict(color=BASELINE_COLOR, width=1), annotation_text="break-even", annotation_position="bottom right")
    fig.update_layout(title="speedup (wall clock)", yaxis=dict(rangemode="tozero"), **LAYOUT)
    _round_axis(fig, rounds)
    return fig


def latency_figure(latency: pd.DataFrame) -> go.Figure:
    """Histogram of the gap before each token: speculative bursts (many ~0 ms gaps, some long) vs an even cadence."""
    fig = go.Figure()
    for run, df, color in _runs(latency):
        fig.add_histogram(x=df["gap_ms"], name=run, marker_color=color, opacity=0.65, nbinsx=30)
    fig.update_layout(title="inter-token latency", barmode="overlay", xaxis_title="gap before a token (ms)", yaxis_title="tokens", **LAYOUT)
    return fig


def progress_figure(progress: pd.DataFrame) -> go.Figure:
    """Tokens committed against decode time, one line per run: the steeper line is the faster decoder."""
    fig = go.Figure()
    for run, df, color in _runs(progress):
        fig.add_scatter(x=df["decode_ms"] / 1000.0, y=df["tokens"], name=run, mode="lines", line=dict(color=color, shape="hv"))
    fig.update_layout(title="tokens over decode time", xaxis_title="decode time (s, prefill excluded)", yaxis_title="tokens committed", **LAYOUT)
    return fig
