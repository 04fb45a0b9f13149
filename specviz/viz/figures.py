"""Plotly figures built from the frames in specviz.viz.frames. Pure functions: DataFrame in, Figure out."""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go

from specviz.viz import style
from specviz.viz.frames import PositionInfo
from specviz.viz.style import TEMPLATE

P_COLOR, Q_COLOR, RES_COLOR = style.P_TARGET, style.Q_DRAFT, style.RESIDUAL
RUN_COLORS = style.SERIES
BASELINE_COLOR = style.GREY
BASELINE_RUN = "baseline (plain decoding)"  # the run name the page gives the measured baseline; drawn grey
LAYOUT = dict(template=TEMPLATE, margin=dict(l=10, r=10, t=40, b=10), height=320, legend=dict(orientation="h", yanchor="top", y=-0.28))


def _label(text: str) -> str:
    """Chart text is rendered by plotly, which understands some HTML: escape it like the token view."""
    return html.escape(text)


def _runs(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame, str]]:
    """(name, rows, colour) per run, in order of appearance; the baseline is grey."""
    out = []
    for i, (run, part) in enumerate(df.groupby("run", sort=False)):
        out.append((str(run), part, BASELINE_COLOR if run == BASELINE_RUN else RUN_COLORS[i % len(RUN_COLORS)]))
    return out


def _figure(traces: list[dict], layout: dict) -> go.Figure:
    """The figure in one validated construction. Each Step redraws these charts, and plotly's add_*/update_* calls
    validate property by property: built that way the six curves took 57 ms here, built like this 16 ms (median of
    15 builds, the same JSON; docs/performance.md)."""
    return go.Figure({"data": traces, "layout": {**LAYOUT, **layout}})


def _round_axis(rounds: pd.DataFrame) -> dict:
    """Whole-number round ticks, counted from 1 (the frames' round)."""
    n = int(rounds["round"].max()) if len(rounds) else 1
    return dict(title=dict(text="round"), tick0=1, dtick=max(1, -(-n // 12)))


def _hline(y: float, text: str) -> dict:
    """A grey horizontal line across the plot with its label at the bottom right (what Figure.add_hline draws)."""
    return dict(
        shapes=[dict(type="line", xref="x domain", x0=0, x1=1, yref="y", y0=y, y1=y, line=dict(color=BASELINE_COLOR, width=1))],
        annotations=[dict(text=text, xref="x domain", x=1, yref="y", y=y, showarrow=False, xanchor="right", yanchor="top")],
    )  # fmt: skip


def _title(text: str) -> dict:
    return dict(title=dict(text=text))


def _measured_and_theory(rounds: pd.DataFrame, measured: str, theory: str, names: tuple[str, str], theory_dash: str = "dot") -> list[dict]:
    """Per run: the measured line with markers, and the formula's line dashed beside it in the same colour."""
    traces = []
    for run, df, color in _runs(rounds):
        traces.append(dict(type="scatter", x=df["round"], y=df[measured], name=f"{names[0]} · {run}", mode="lines+markers", line=dict(color=color)))
        traces.append(dict(type="scatter", x=df["round"], y=df[theory], name=f"{names[1]} · {run}", mode="lines", line=dict(color=color, dash=theory_dash)))
    return traces


ROLE_FONT_PX = 12  # the drafted / emitted names over their bars
ROLE_RISE_PX = (30, 58)  # how far above the bars the lower and the higher name sit (a name's box is ~18 px tall)
ROLE_LEAN_PX = 30  # how far the left name leans left and the right one right of its bar


def role_annotations(labels: list[str], roles: list[str], y: float) -> list[dict]:
    """The drafted and the emitted token named over their bars, with an arrow down to each. Two names never meet,
    however close the bars: the drafted one sits low, the emitted one a row higher, and the left of the two leans
    left, the right one right, so the arrows part and neither crosses the other's name. One token that is both
    (drafted + accepted) gets one name, straight above."""
    marked = [(label, role) for label, role in zip(labels, roles) if role]
    out = []
    for n, (label, role) in enumerate(marked):
        lean = 0 if len(marked) == 1 else (-ROLE_LEAN_PX if n == 0 else ROLE_LEAN_PX)
        rise = ROLE_RISE_PX[0] if len(marked) == 1 or role == "drafted" else ROLE_RISE_PX[1]
        text = f"<b>{role.replace('+', ' + ')}</b>"
        out.append(dict(x=label, y=y, xref="x", yref="y", text=text, showarrow=True, arrowhead=2, ax=lean, ay=-rise, font=dict(size=ROLE_FONT_PX)))
    return out


def inspector_figure(position: pd.DataFrame, info: PositionInfo) -> go.Figure:
    """Bars of p_target, q_draft and the normalised residual at one position; the drafted and the emitted
    token are marked; a side gauge puts min(1, p/q) against the uniform draw u."""
    has_gauge = info.accept_prob is not None
    labels = [_label(t) for t in position["token"]]
    traces = [dict(type="bar", x=labels, y=position["p_target"], name="p_target", marker_color=P_COLOR)]
    if position["q_draft"].notna().any():
        traces.append(dict(type="bar", x=labels, y=position["q_draft"], name="q_draft", marker_color=Q_COLOR))
    if position["residual"].notna().any():
        traces.append(dict(type="bar", x=labels, y=position["residual"], name="residual max(0, p−q), normalised", marker_color=RES_COLOR))
    top = float(position[["p_target", "q_draft", "residual"]].max().max() or 1.0)
    annotations = role_annotations(labels, list(position["role"]), top * 1.02)
    # the axes' domains are those make_subplots gives two columns 0.82 : 0.18 apart by 0.08
    layout = dict(
        barmode="group", height=360, margin=dict(l=10, r=10, t=50, b=10),
        xaxis=dict(anchor="y", domain=[0.0, 0.7544 if has_gauge else 1.0], tickangle=-40),
        yaxis=dict(anchor="x", domain=[0.0, 1.0], title=dict(text="probability"), range=[0, top * 1.25]),
    )  # fmt: skip
    if has_gauge:
        kept = info.fate == "accepted"
        gauge_x = [f"min(1, p/q) = {info.accept_prob:.2f}"]
        traces.append(dict(type="bar", x=gauge_x, y=[info.accept_prob], marker_color=style.ACCEPTED if kept else style.REJECTED, name="min(1, p/q)", showlegend=False, xaxis="x2", yaxis="y2"))
        traces.append(dict(
            type="scatter", x=gauge_x, y=[info.uniform], mode="markers", marker=dict(symbol="line-ew", size=46, line=dict(width=4, color=style.INK)),
            name="uniform draw u", showlegend=False, hovertemplate="u = %{y:.3f}<extra></extra>", xaxis="x2", yaxis="y2",
        ))  # fmt: skip
        annotations.append(dict(x=gauge_x[0], y=info.uniform, xref="x2", yref="y2", text=f"u = {info.uniform:.2f}", showarrow=False, yshift=14,
                                font=dict(size=12, color=style.INK), bgcolor=style.PAPER, bordercolor=style.INK, borderwidth=1, borderpad=2))  # dark on white: reads on any bar
        layout["xaxis2"] = dict(anchor="y2", domain=[0.8344, 1.0])
        layout["yaxis2"] = dict(anchor="x2", domain=[0.0, 1.0], range=[0, 1.12], title=dict(text="kept: u < bar" if kept else "rejected: u ≥ bar"))
    return _figure(traces, {**layout, "annotations": annotations})


def accepted_figure(rounds: pd.DataFrame) -> go.Figure:
    """Accepted drafts per round against what was drafted (and k, which moves when adaptive)."""
    runs = _runs(rounds)
    layout = dict(**_title("accepted drafts per round"), yaxis=dict(title=dict(text="tokens")), xaxis=_round_axis(rounds))
    if len(runs) == 1:
        _, df, _ = runs[0]
        traces = [
            dict(type="bar", x=df["round"], y=df["drafted"], name="drafted", marker_color=style.LIGHT_GREY),
            dict(type="bar", x=df["round"], y=df["accepted"], name="accepted", marker_color=style.ACCEPTED),
            dict(type="scatter", x=df["round"], y=df["k"], name="k asked", mode="lines", line=dict(dash="dot", color=style.MUTED_INK, shape="hv")),
        ]
        layout["barmode"] = "overlay"
    else:
        traces = [dict(type="scatter", x=df["round"], y=df["accepted"], name=run, mode="lines+markers", line=dict(color=color)) for run, df, color in runs]
    return _figure(traces, layout)


def alpha_figure(rounds: pd.DataFrame) -> go.Figure:
    """Running alpha = E[Σ min(p_target, q_draft)] (Leviathan) beside running accepted / drafted."""
    traces = _measured_and_theory(rounds, "alpha", "acceptance_rate", ("α = E[Σ min(p,q)]", "accepted/drafted"), theory_dash="dash")
    return _figure(traces, dict(**_title("running α and acceptance rate"), yaxis=dict(range=[0, 1.05]), xaxis=_round_axis(rounds)))


def tokens_per_target_pass_figure(rounds: pd.DataFrame) -> go.Figure:
    """Running tokens per target pass against (1 − α^(k+1))/(1 − α) at the running α."""
    traces = _measured_and_theory(rounds, "tokens_per_target_pass", "theory_tokens_per_target_pass", ("measured", "(1−α^(k+1))/(1−α)"))
    layout = dict(**_title("tokens per target pass"), yaxis=dict(rangemode="tozero"), xaxis=_round_axis(rounds), **_hline(1.0, "plain decoding"))
    return _figure(traces, layout)


def speedup_figure(rounds: pd.DataFrame) -> go.Figure:
    """Measured wall-clock speedup over plain decoding against Leviathan's prediction with c measured."""
    traces = _measured_and_theory(rounds, "speedup", "predicted_speedup", ("measured", "predicted (1−α^(k+1))/((1−α)(1+kc))"))
    layout = dict(**_title("speedup (wall clock)"), yaxis=dict(rangemode="tozero"), xaxis=_round_axis(rounds), **_hline(1.0, "break-even"))
    return _figure(traces, layout)


def latency_figure(latency: pd.DataFrame) -> go.Figure:
    """Histogram of the gap before each token: speculative bursts (many ~0 ms gaps, some long) vs an even cadence."""
    traces = [dict(type="histogram", x=df["gap_ms"], name=run, marker_color=color, opacity=0.65, nbinsx=30) for run, df, color in _runs(latency)]
    layout = dict(**_title("inter-token latency"), barmode="overlay", xaxis=dict(title=dict(text="gap before a token (ms)")), yaxis=dict(title=dict(text="tokens")))
    return _figure(traces, layout)


def progress_figure(progress: pd.DataFrame) -> go.Figure:
    """Tokens committed against decode time, one line per run: the steeper line is the faster decoder."""
    traces = [
        dict(type="scatter", x=df["decode_ms"] / 1000.0, y=df["tokens"], name=run, mode="lines", line=dict(color=color, shape="hv"))
        for run, df, color in _runs(progress)
    ]
    layout = dict(**_title("tokens over decode time"), xaxis=dict(title=dict(text="decode time (s, prefill excluded)")), yaxis=dict(title=dict(text="tokens committed")))
    return _figure(traces, layout)
