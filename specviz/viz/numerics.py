"""The numerics lab's frames and figures (never imports streamlit). Input: specviz.experiments.numerics.NumericsReport."""

from __future__ import annotations

import html
import math
from collections.abc import Callable

import pandas as pd
import plotly.graph_objects as go

from specviz.viz import style
from specviz.viz.style import TEMPLATE
from specviz.viz.theory import K_COLORS, LAYOUT
from specviz.viz.tokens import visible_plain

TokenText = Callable[[int], str]


def divergence_frame(report, token_text: TokenText) -> pd.DataFrame:
    """One row per comparison: where the two greedy traces part (1-based token), what each chose, and the margins."""
    rows = []
    for d in report.divergences:
        parted = d.position is not None
        rows.append(
            {
                "comparison": f"{d.a} vs {d.b}",
                "parts at token": d.position + 1 if parted else None,
                "verdict": f"part at token {d.position + 1} of {d.compared}" if parted else f"identical for all {d.compared} tokens",
                "first chose": visible_plain(token_text(d.token_a)) if parted else "",
                "second chose": visible_plain(token_text(d.token_b)) if parted else "",
                "top-2 logit margin (first)": d.margin_a,
                "top-2 logit margin (second)": d.margin_b,
            }
        )
    return pd.DataFrame(rows)


def traces_frame(report, token_text: TokenText) -> pd.DataFrame:
    """Tokens side by side, one column per trace, one row per generated position (texts are untrusted: shown as text)."""
    n = max((len(t.ids) for t in report.traces), default=0)
    data = {"token": list(range(1, n + 1))}
    for t in report.traces:
        data[t.name] = [visible_plain(token_text(t.ids[i])) if i < len(t.ids) else "" for i in range(n)]
    return pd.DataFrame(data)


def pass_summary(report) -> pd.DataFrame:
    """Per dtype: the largest and mean |logit difference| between 1-token and (k+1)-token passes, and argmax flips."""
    df = report.pass_diffs
    out = df.groupby("dtype", sort=False).agg(
        positions=("position", "count"), max_abs_diff=("max_abs_diff", "max"), mean_abs_diff=("max_abs_diff", "mean"),
        smallest_margin=("margin", "min"), argmax_flips=("flipped", "sum"),
    )
    return out.reset_index()


def pass_diff_figure(report) -> go.Figure:
    """Per position and dtype: how far a (k+1)-token pass moves the logits (markers) against the top-2 margin (dotted);
    an argmax can flip only where the markers reach the dotted line; flips are crossed."""
    df = report.pass_diffs
    fig = go.Figure(layout=dict(template=TEMPLATE))
    for i, (dtype, part) in enumerate(df.groupby("dtype", sort=False)):
        color = K_COLORS[i % len(K_COLORS)]
        name = html.escape(str(dtype))
        x = part["position"] + 1
        fig.add_scatter(
            x=x, y=part["max_abs_diff"].clip(lower=1e-9), mode="markers", name=f"{name}: max |logit(1-token) − logit({report.k + 1}-token)|",
            marker=dict(color=color, size=8), hovertemplate=f"{name}, token " + "%{x}: logits differ by up to %{y:.2g}<extra></extra>",
        )
        fig.add_scatter(
            x=x, y=part["margin"].clip(lower=1e-9), mode="lines", name=f"{name}: top-1 − top-2 logit", line=dict(color=color, dash="dot"),
            hovertemplate=f"{name}, token " + "%{x}: top-2 margin %{y:.3g}<extra></extra>",
        )
        flips = part[part["flipped"]]
        if len(flips):
            fig.add_scatter(
                x=flips["position"] + 1, y=flips["max_abs_diff"].clip(lower=1e-9), mode="markers", name=f"{name}: argmax flipped",
                marker=dict(symbol="x", size=14, color=style.INK), hovertemplate=f"{name}, token " + "%{x}: the argmax flips<extra></extra>",
            )
    fig.update_layout(
        title=f"the same positions scored by 1-token passes and by {report.k + 1}-token passes",
        xaxis=dict(title="generated token"), yaxis=dict(title="logits (log scale)", type="log"), **LAYOUT,
    )
    return fig


INVARIANCE_LIMIT = 1e-3  # the test suite's bound for a precision fit to verify drafts


def invariance_figure(report) -> go.Figure:
    """Per position and precision: max |logit(1-token pass) - logit(row of a (k+1)-token pass)|, log scale, with the
    test suite's 1e-3 bound dashed. Input: specviz.experiments.numerics.InvarianceReport."""
    df = report.pass_diffs
    fig = go.Figure(layout=dict(template=TEMPLATE))
    for i, (precision, part) in enumerate(df.groupby("dtype", sort=False)):
        name = html.escape(str(precision))
        fig.add_scatter(
            x=part["position"] + 1, y=part["max_abs_diff"].clip(lower=1e-9), mode="lines+markers", name=name,
            line=dict(color=K_COLORS[i % len(K_COLORS)]), marker=dict(size=6),
            hovertemplate=f"{name}, token " + "%{x}: logits move by up to %{y:.2g}<extra></extra>",
        )
    fig.add_hline(y=INVARIANCE_LIMIT, line=dict(dash="dash", color=style.GREY))  # its label by hand: on a log axis an annotation's y is log10
    fig.add_annotation(text="1e-3: fit to verify", xref="x domain", x=1, yref="y", y=math.log10(INVARIANCE_LIMIT), showarrow=False, xanchor="right", yanchor="bottom")
    fig.update_layout(
        title=f"how far a position's logits move inside a {report.k + 1}-token pass",
        xaxis=dict(title="generated token (float32 plain greedy)"), yaxis=dict(title="max |Δ logit| (log scale)", type="log"), **LAYOUT,
    )
    return fig
