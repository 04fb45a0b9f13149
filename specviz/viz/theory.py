"""Speedup theory as frames and figures: the (alpha, k) heatmap with its break-even line, speedup
curves, the two alpha definitions side by side, and measured points drawn on top.

Measured points are a DataFrame with MEASURED_COLUMNS: source (e.g. "benchmark", "step-through"),
label (hover text), alpha, k, speedup (measured wall clock). Never imports streamlit.
"""

from __future__ import annotations

import html
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from specviz.core.limits import MAX_DRAFT_TOKENS
from specviz.core.theory import (
    VerifyCost,
    VerifyCurve,
    acceptance_rate,
    batch_plain_tokens_per_s,
    batch_speculative_tokens_per_s,
    best_k,
    best_speedups,
    expected_tokens,
    round_cost,
    speedup,
    verify_cost_at,
)
from specviz.viz import style
from specviz.viz.style import TEMPLATE

MEASURED_COLUMNS: tuple[str, ...] = ("source", "label", "alpha", "k", "speedup")
AUTO_K_COLUMNS: tuple[str, ...] = ("k", "rounds")  # auto_k_counts: how many rounds k: auto chose each k
LAYOUT = dict(margin=dict(l=10, r=10, t=40, b=10), height=380, legend=dict(orientation="h", y=-0.2), modebar=dict(orientation="v"))
SOURCE_SYMBOLS = {"benchmark": "circle", "step-through": "diamond"}
K_COLORS = style.SERIES


def alpha_grid(step: float = 0.01) -> np.ndarray:
    return np.round(np.arange(0.0, 1.0 + step / 2, step), 6)


def verify_label(verify_cost: VerifyCost) -> str:
    """How a title names the verify cost: the number, or the measured curve at k = 4."""
    if isinstance(verify_cost, VerifyCurve):
        return f"measured c_verify(k), {verify_cost.at(4):.2f} at k = 4"
    return f"{verify_cost:g}"


def speedup_grid(c: float, verify_cost: VerifyCost = 1.0, k_max: int = MAX_DRAFT_TOKENS, step: float = 0.01) -> pd.DataFrame:
    """One row per (alpha, k): expected tokens per pass and speedup, for k = 1..k_max."""
    rows = [
        {"alpha": a, "k": k, "expected_tokens": expected_tokens(a, k), "speedup": speedup(a, k, c, verify_cost)}
        for k in range(1, k_max + 1)
        for a in alpha_grid(step)
    ]
    return pd.DataFrame(rows, columns=["alpha", "k", "expected_tokens", "speedup"])


def _measured_traces(fig: go.Figure, measured: pd.DataFrame | None, y: str) -> None:
    if measured is None or measured.empty:
        return
    for source, part in measured.dropna(subset=["alpha", y]).groupby("source", sort=False):
        fig.add_scatter(
            x=part["alpha"], y=part[y], mode="markers", name=f"measured · {html.escape(str(source))}",
            marker=dict(symbol=SOURCE_SYMBOLS.get(str(source), "circle"), size=9, color=style.PAPER, line=dict(color=style.INK, width=1.5)),
            text=[html.escape(str(t)) for t in part["label"]], hovertemplate="%{text}<br>α=%{x:.2f}<br>" + y + "=%{y:.2f}<extra></extra>",
        )


def k_ticks(k_max: int, low: int = 1) -> list[int]:
    """Tick values for a k axis from low to k_max: every k up to k_max = 8, beyond that low and four more (1, 4, 8, 12,
    16), so the labels stay apart on the heatmap's short k axis on a phone (no label may overlap another)."""
    step = 1 if k_max <= 8 else -(-k_max // 4)
    return [k for k in range(low, k_max + 1) if k == low or k % step == 0]


def heatmap_figure(
    c: float, verify_cost: VerifyCost, alpha: float, k: int, measured: pd.DataFrame | None = None, k_max: int = MAX_DRAFT_TOKENS
) -> go.Figure:
    """Speedup over (alpha, k) for one c and verify cost; the speedup = 1 contour, the best k per alpha,
    the chosen point, and measured runs placed at their (alpha, k)."""
    fig = heatmap_base(c, verify_cost, measured, k_max)
    fig.add_trace(choice_marker(alpha, k, c, verify_cost))
    return fig


def heatmap_base(c: float, verify_cost: VerifyCost, measured: pd.DataFrame | None = None, k_max: int = MAX_DRAFT_TOKENS) -> go.Figure:
    """The heatmap without the chosen point: what does not move with the α and k sliders (the page caches it)."""
    grid = speedup_grid(c, verify_cost, k_max)
    table = grid.pivot(index="k", columns="alpha", values="speedup")  # (k_max, n_alpha)
    speedups = table.values
    ticks = [t for t in (0.125, 0.25, 0.5, 1, 2, 4, 8, 16) if speedups.min() / 2 <= t <= speedups.max() * 2]
    fig = go.Figure(layout=dict(template=TEMPLATE))
    # colour by log2(speedup) so halving and doubling look equally far from break-even (white)
    fig.add_heatmap(
        x=table.columns, y=table.index, z=np.log2(speedups), customdata=speedups, colorscale="RdBu", zmid=0.0,
        colorbar=dict(title="speedup", tickvals=np.log2(ticks), ticktext=[f"{t:g}×" for t in ticks]),
        hovertemplate="α=%{x:.2f}<br>k=%{y}<br>speedup=%{customdata:.2f}×<extra></extra>", name="speedup",
    )
    if (speedups > 1).any() and (speedups < 1).any():
        fig.add_contour(
            x=table.columns, y=table.index, z=speedups, showscale=False, name="break-even (speedup = 1)", showlegend=True,
            contours=dict(start=1.0, end=1.0, size=1.0, coloring="lines"), colorscale=[[0, style.INK], [1, style.INK]],
            line=dict(width=2.5), hoverinfo="skip",
        )
    alphas = alpha_grid(0.01)
    best = [best_k(a, c, verify_cost, k_max) for a in alphas]
    fig.add_scatter(x=alphas, y=best, mode="lines", line=dict(color=style.INK, width=6, shape="hv"), hoverinfo="skip", showlegend=False)  # an outline: yellow alone fades on white
    fig.add_scatter(
        x=alphas, y=best, mode="lines", line=dict(color=style.HIGHLIGHT, width=3, shape="hv"),
        name="best k for each α", hovertemplate="α=%{x:.2f}: best k=%{y}<extra></extra>",
    )
    if measured is not None and not measured.empty:
        _measured_traces(fig, measured, "k")
    fig.update_layout(
        title=f"expected speedup (c = {c:g}, verify cost {verify_label(verify_cost)})",
        xaxis=dict(title="α (probability a drafted token is accepted)", range=[0, 1]),
        yaxis=dict(title="k (tokens drafted per round)", range=[0.5, k_max + 0.5], tickvals=k_ticks(k_max)),
        **LAYOUT,
    )
    return fig


def choice_marker(alpha: float, k: int, c: float, verify_cost: VerifyCost) -> dict:
    """The heatmap's chosen (α, k) as a plain trace dict: added to a cached figure without rebuilding it."""
    return dict(
        type="scatter", x=[alpha], y=[k], mode="markers", name="your α and k",
        marker=dict(symbol="star", size=16, color=style.HIGHLIGHT, line=dict(color=style.INK, width=1)),
        hovertemplate=f"α={alpha:.2f}, k={k}: {speedup(alpha, k, c, verify_cost):.2f}×<extra></extra>",
    )  # fmt: skip


def alpha_line(alpha: float) -> dict:
    """The curves' dotted black line at the chosen α as a plain shape dict (what add_vline draws)."""
    return dict(type="line", xref="x", yref="y domain", x0=alpha, x1=alpha, y0=0, y1=1, line=dict(color=style.INK, width=2, dash="dot"))


def curves_figure(c: float, verify_cost: VerifyCost, ks: Sequence[int], alpha: float | None = None, measured: pd.DataFrame | None = None) -> go.Figure:
    """Speedup against alpha, one curve per k, with the break-even line and measured runs at (alpha, speedup)."""
    alphas = alpha_grid(0.01)
    fig = go.Figure(layout=dict(template=TEMPLATE))
    for i, k in enumerate(ks):
        fig.add_scatter(
            x=alphas, y=[speedup(a, k, c, verify_cost) for a in alphas], mode="lines", name=f"k = {k}",
            line=dict(color=K_COLORS[i % len(K_COLORS)]), hovertemplate=f"k={k}, " + "α=%{x:.2f}: %{y:.2f}×<extra></extra>",
        )
    fig.add_hline(y=1.0, line=dict(color=style.INK, dash="dash"), annotation_text="break-even", annotation_position="top left")
    if alpha is not None:
        fig.add_shape(alpha_line(alpha))
    _measured_traces(fig, measured, "speedup")
    fig.update_layout(
        title="speedup against α", xaxis=dict(title="α", range=[0, 1]), yaxis=dict(title="speedup (×)", rangemode="tozero"), **LAYOUT
    )
    return fig


def speedup_vs_k_frame(alpha: float, c: float, verify_cost: VerifyCost, k_max: int = MAX_DRAFT_TOKENS) -> pd.DataFrame:
    rows = [
        {
            "k": k, "expected_tokens": expected_tokens(alpha, k), "verify_cost": verify_cost_at(verify_cost, k),
            "round_cost": round_cost(k, c, verify_cost), "speedup": speedup(alpha, k, c, verify_cost),
        }
        for k in range(1, k_max + 1)
    ]
    return pd.DataFrame(rows)


def auto_k_counts(records: Sequence) -> pd.DataFrame:
    """How many rounds k: auto chose each k (0: a plain pass), from the rounds that carry its reason (a record's
    k_choice, specviz.core.auto_k.KChoice); columns k, rounds, in k order; empty when no round was auto's."""
    chosen = Counter(choice.k for r in records if (choice := getattr(r, "k_choice", None)) is not None)
    return pd.DataFrame(sorted(chosen.items()), columns=list(AUTO_K_COLUMNS))


def auto_k_caption(counts: pd.DataFrame, run: str, k_max: int = MAX_DRAFT_TOKENS) -> str:
    """What the diamonds on the speedup-by-k chart show, for a run whose k: auto counts these are."""
    total = int(counts["rounds"].sum())
    top = counts.loc[counts["rounds"].idxmax()]  # the first of the most chosen: the smallest k on a tie
    plain = int(counts.loc[counts["k"] == 0, "rounds"].sum())
    off = int(counts.loc[counts["k"] > k_max, "rounds"].sum())
    most = "a plain pass (k = 0)" if int(top["k"]) == 0 else f"k = {int(top['k'])}"
    text = (f"Diamonds: the ks k: auto chose in your step-through run ({run}), each labelled with how many of its {total} round{'s' if total != 1 else ''} chose it; "
            f"it chose {most} most. Auto weighs the run's own acceptance by position, not this page's α: set α to the run's to "
            "see whether the yellow best k agrees.")  # fmt: skip
    if plain:
        text += f" {plain} round{'s were plain passes' if plain > 1 else ' was a plain pass'} (k = 0), left of this chart."
    if off:
        text += f" {off} round{'s' if off > 1 else ''} above k = {k_max}, right of it."
    return text


def speedup_vs_k_figure(
    alpha: float, c: float, verify_cost: VerifyCost, k: int, k_max: int = MAX_DRAFT_TOKENS, chosen: pd.DataFrame | None = None
) -> go.Figure:
    """Bars of speedup for every k at one alpha: the chosen k and the best k are highlighted. chosen (auto_k_counts):
    a diamond on each k that k: auto chose in a run, sized and labelled by its rounds."""
    df = speedup_vs_k_frame(alpha, c, verify_cost, k_max)
    best = best_k(alpha, c, verify_cost, k_max)
    colors = [style.HIGHLIGHT if kk == best else (style.P_TARGET if kk == k else style.LIGHT_GREY) for kk in df["k"]]
    fig = go.Figure(go.Bar(x=df["k"], y=df["speedup"], marker=dict(color=colors, line=dict(color=style.INK, width=1)), hovertemplate="k=%{x}: %{y:.2f}×<extra></extra>", name="speedup"), layout=dict(template=TEMPLATE))
    fig.add_hline(y=1.0, line=dict(color=style.INK, dash="dash"))
    on_chart = chosen[(chosen["k"] >= 1) & (chosen["k"] <= k_max)] if chosen is not None else pd.DataFrame(columns=list(AUTO_K_COLUMNS))
    if not on_chart.empty:
        total = int(chosen["rounds"].sum())
        ys = df.set_index("k")["speedup"].reindex(on_chart["k"]).to_numpy()
        fig.add_scatter(
            x=on_chart["k"], y=ys, mode="markers+text", name="k: auto chose", text=[f"{n}" for n in on_chart["rounds"]], textposition="top center",
            marker=dict(symbol="diamond", color=style.INK, size=[8 + 16 * n / total for n in on_chart["rounds"]], line=dict(color=style.PAPER, width=1)),
            customdata=on_chart["rounds"], hovertemplate=f"k: auto chose k=%{{x}} in %{{customdata}} of {total} rounds<extra></extra>",
        )  # fmt: skip
        fig.update_layout(showlegend=True)
    fig.update_layout(title=f"speedup by k at α = {alpha:.2f}", xaxis=dict(title="k", tickvals=k_ticks(k_max)), yaxis_title="speedup (×)", **LAYOUT)
    return fig


def verify_curves_frame(curves: dict[str, VerifyCurve], k_max: int = MAX_DRAFT_TOKENS) -> pd.DataFrame:
    """One row per (profile, k): c_verify(k), and whether it was measured or extrapolated."""
    rows = [
        {"profile": name, "k": k, "tokens fed": k + 1, "verify_cost": curve.at(k), "measured": k <= curve.k_max}
        for name, curve in curves.items()
        for k in range(0, k_max + 1)
    ]
    return pd.DataFrame(rows, columns=["profile", "k", "tokens fed", "verify_cost", "measured"])


def verify_curve_figure(curves: dict[str, VerifyCurve], constant: float | None = None, k_max: int = MAX_DRAFT_TOKENS) -> go.Figure:
    """c_verify(k) for each profile (a pass over k+1 tokens / a 1-token pass), and the constant if one is set."""
    df = verify_curves_frame(curves, k_max)
    fig = go.Figure(layout=dict(template=TEMPLATE))
    for i, (name, part) in enumerate(df.groupby("profile", sort=False)):
        label = html.escape(str(name))
        fig.add_scatter(
            x=part["k"], y=part["verify_cost"], mode="lines+markers", name=label, line=dict(color=K_COLORS[i % len(K_COLORS)]),
            hovertemplate=f"{label}<br>" + "k=%{x}: a pass over k+1 tokens costs %{y:.2f}× a 1-token pass<extra></extra>",
        )
    if constant is not None:
        fig.add_hline(y=constant, line=dict(color=style.INK, dash="dot"), annotation_text=f"constant {constant:g}", annotation_position="top left")
    fig.add_hline(y=1.0, line=dict(color=style.GREY, dash="dash"))
    fig.update_layout(
        title="verify cost c_verify(k): a (k+1)-token target pass ÷ a 1-token pass",
        xaxis=dict(title="k (tokens drafted; the pass feeds k + 1)", tickvals=k_ticks(k_max, low=0)),
        yaxis=dict(title="cost (1-token passes)", rangemode="tozero"), **LAYOUT,
    )
    return fig


def alpha_definitions_figure(ks: Sequence[int] = (1, 2, 4, 8, 16)) -> go.Figure:
    """accepted/drafted against Leviathan's alpha when positions are independent: equal at k = 1, lower for larger k."""
    alphas = alpha_grid(0.01)
    fig = go.Figure(layout=dict(template=TEMPLATE))
    for i, k in enumerate(ks):
        fig.add_scatter(
            x=alphas, y=[acceptance_rate(a, k) for a in alphas], mode="lines", name=f"k = {k}",
            line=dict(color=K_COLORS[i % len(K_COLORS)]), hovertemplate=f"k={k}, " + "α=%{x:.2f}: accepted/drafted=%{y:.2f}<extra></extra>",
        )
    fig.update_layout(
        title="accepted/drafted for a given α", xaxis=dict(title="α = E[Σ min(p_target, q_draft)]", range=[0, 1]),
        yaxis=dict(title="accepted / drafted", range=[0, 1]), **LAYOUT,
    )
    return fig


@dataclass(frozen=True)
class Scenario:
    name: str
    alpha: float
    k: int
    c: float
    verify_cost: float


WORKED_EXAMPLES: tuple[Scenario, ...] = (
    Scenario("small draft model, GPU", 0.8, 4, 0.05, 1.0),
    Scenario("same draft, k = 12", 0.8, 12, 0.05, 1.0),
    Scenario("weak draft model, GPU", 0.4, 4, 0.05, 1.0),
    Scenario("prompt lookup while copying, CPU", 0.9, 8, 0.0, 1.6),
    Scenario("prompt lookup on fresh prose, CPU", 0.2, 4, 0.0, 1.6),
    Scenario("early exit at 28 of 30 layers, CPU", 0.6, 4, 28 / 30, 1.6),
)


def worked_examples(scenarios: Sequence[Scenario] = WORKED_EXAMPLES) -> pd.DataFrame:
    """The formulas evaluated for a few typical settings, one row each."""
    rows = []
    for s in scenarios:
        kb = best_k(s.alpha, s.c, s.verify_cost)
        rows.append(
            {
                "setting": s.name,
                "α": s.alpha,
                "k": s.k,
                "c": s.c,
                "verify cost": s.verify_cost,
                "tokens per pass": expected_tokens(s.alpha, s.k),
                "accepted/drafted": acceptance_rate(s.alpha, s.k),
                "round cost": round_cost(s.k, s.c, s.verify_cost),
                "speedup": speedup(s.alpha, s.k, s.c, s.verify_cost),
                "best k": kb,
                "speedup at best k": speedup(s.alpha, kb, s.c, s.verify_cost),
            }
        )
    return pd.DataFrame(rows)


# --- B streams at once -------------------------------------------------------------------------------

BATCH_COLUMNS: tuple[str, ...] = ("batch_size", "side", "source", "tokens_per_s")
SIDE_COLORS = {"plain": style.GREY, "speculative": style.SERIES[0]}


def batch_frame(
    batch_pass_ms: dict[int, Sequence[float]], alpha: float, k: int, draft_ms_per_token: float = 0.0,
    measured: Sequence[tuple[int, float, float]] = (), overhead_ms_per_row: float = 0.0,
) -> pd.DataFrame:  # fmt: skip
    """Tidy rows (batch_size, side, source, tokens_per_s): predicted plain and speculative throughput at every
    profiled B (k drafts per row, each row's overhead outside the forward on both sides), then measured
    (B, plain, speculative) points from `specviz batch`."""
    rows, o = [], overhead_ms_per_row
    for b, pass_ms in sorted(batch_pass_ms.items()):
        rows.append((b, "plain", "predicted", batch_plain_tokens_per_s(b, pass_ms, o)))
        rows.append((b, "speculative", "predicted", batch_speculative_tokens_per_s(b, pass_ms, alpha, k, draft_ms_per_token, o)))
    for b, plain, spec in measured:
        rows += [(b, "plain", "measured", plain), (b, "speculative", "measured", spec)]
    return pd.DataFrame(rows, columns=list(BATCH_COLUMNS))


def batch_ratios(frame: pd.DataFrame) -> pd.DataFrame:
    """(source, batch_size, plain, speculative, ratio): speculative over plain tokens/s per B and source."""
    wide = frame.pivot_table(index=["source", "batch_size"], columns="side", values="tokens_per_s").reset_index()
    wide["ratio"] = wide["speculative"] / wide["plain"]
    return wide[["source", "batch_size", "plain", "speculative", "ratio"]]


def _batch_axis(batch_sizes: Sequence[float], also: float | None = None) -> dict:
    """A log B axis over the B's drawn, ticked at those B's. Plotly reads a log axis's range (and an annotation's x on
    it) in log10 units: an annotation at x = B without the log stretched the axis to 10^B (2^34 at B ≈ 10)."""
    sizes = sorted({int(b) for b in batch_sizes if b > 0}) or [1]
    lo, hi = math.log10(min(sizes[0], also or sizes[0])), math.log10(max(sizes[-1], also or sizes[-1]))  # also: the crossover
    pad = max(0.05, 0.04 * (hi - lo))
    return dict(title="B (streams decoded at once)", type="log", range=[lo - pad, hi + pad], tickvals=sizes, ticktext=[str(b) for b in sizes])


def batch_throughput_figure(frame: pd.DataFrame) -> go.Figure:
    """Tokens/s over all rows against B: plain and speculative, predicted lines and measured markers."""
    fig = go.Figure(layout=dict(template=TEMPLATE))
    for (source, side), part in frame.groupby(["source", "side"], sort=False):
        predicted = source == "predicted"
        fig.add_scatter(
            x=part["batch_size"], y=part["tokens_per_s"], name=f"{side} · {source}", mode="lines+markers" if predicted else "markers",
            line=dict(color=SIDE_COLORS[str(side)], width=3), marker=dict(size=8 if predicted else 12, symbol="circle" if predicted else "diamond",
            line=dict(color=style.INK, width=0 if predicted else 1.5)),
            hovertemplate=f"{side} ({source}), " + "B=%{x}: %{y:.0f} tokens/s<extra></extra>",
        )  # fmt: skip
    fig.update_layout(title="throughput, every stream together", xaxis=_batch_axis(frame["batch_size"]), yaxis=dict(title="tokens/s", rangemode="tozero"), **LAYOUT)
    return fig


def batch_ratio_figure(ratios: pd.DataFrame, crossover: float | None = None) -> go.Figure:
    """Speculative ÷ plain tokens/s against B, the break-even line, and where the prediction crosses it."""
    fig = go.Figure(layout=dict(template=TEMPLATE))
    for source, part in ratios.groupby("source", sort=False):
        predicted = source == "predicted"
        fig.add_scatter(
            x=part["batch_size"], y=part["ratio"], name=str(source), mode="lines+markers" if predicted else "markers",
            line=dict(color=SIDE_COLORS["speculative"], width=3), marker=dict(size=8 if predicted else 12, symbol="circle" if predicted else "diamond"),
            hovertemplate=f"{source}, " + "B=%{x}: %{y:.2f}×<extra></extra>",
        )  # fmt: skip
    fig.add_hline(y=1.0, line=dict(color=style.INK, dash="dash"), annotation_text="break-even", annotation_position="top left")
    if crossover is not None:  # the label placed by hand: on a log axis an annotation's x is log10(B)
        fig.add_vline(x=crossover, line=dict(color=style.REJECTED, width=2))
        fig.add_annotation(x=math.log10(crossover), xref="x", y=1, yref="y domain", text=f"B ≈ {crossover:.1f}", showarrow=False, xanchor="left", yanchor="top")
    fig.update_layout(title="what speculation buys at batch B", xaxis=_batch_axis(ratios["batch_size"], crossover), yaxis=dict(title="speculative ÷ plain", rangemode="tozero"), **LAYOUT)
    return fig


DRAFTING_COLUMNS: tuple[str, ...] = ("setup", "c", "alpha", "best_k", "speedup")


def drafting_cost_frame(costs: dict[str, float], verify_cost: VerifyCost, step: float = 0.02) -> pd.DataFrame:
    """One row per (setup, α): the best k and its speedup at that setup's drafting cost c (core.theory.best_speedups)."""
    rows = []
    for alpha in alpha_grid(step)[:-1]:
        for name, (k, gain) in best_speedups(float(alpha), costs, verify_cost).items():
            rows.append(dict(setup=name, c=costs[name], alpha=float(alpha), best_k=k, speedup=gain))
    return pd.DataFrame(rows, columns=list(DRAFTING_COLUMNS))


def drafting_cost_figure(frame: pd.DataFrame) -> go.Figure:
    """Speedup at the best k against α, one line per drafting cost, the break-even line dashed."""
    fig = go.Figure()
    for i, (name, part) in enumerate(frame.groupby("setup", sort=False)):
        c = float(part["c"].iloc[0])
        fig.add_trace(go.Scatter(
            x=part["alpha"], y=part["speedup"], mode="lines", name=f"{html.escape(str(name))} (c = {c:.3f})",
            line=dict(color=K_COLORS[i % len(K_COLORS)], width=2), customdata=part["best_k"],
            hovertemplate="α %{x:.2f}: %{y:.2f}× at k = %{customdata}<extra></extra>",
        ))  # fmt: skip
    fig.add_hline(y=1.0, line=dict(color=style.INK, dash="dash", width=1))
    fig.update_layout(template=TEMPLATE, title="drafting cost: speedup at the best k", xaxis_title="α", yaxis_title="speedup", **LAYOUT)
    return fig
