"""Benchmark results (the DataFrame of specviz.experiments.bench.rows_to_frame) -> plotly figures and theory points.
Never imports streamlit."""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from specviz.core.theory import speedup
from specviz.viz import style
from specviz.viz.style import TEMPLATE
from specviz.viz.theory import K_COLORS, MEASURED_COLUMNS, alpha_grid

LAYOUT = dict(margin=dict(l=10, r=10, t=80, b=10), height=420, legend=dict(orientation="h", y=-0.25), modebar=dict(orientation="v"))
DRAFTER_COLORS = style.SERIES
TEMPERATURE_DASH = ["solid", "dash", "dot", "dashdot"]
WIDTH_SYMBOLS = ["circle", "diamond", "square", "triangle-up"]  # token-tree widths 1 (a chain) to 4


def alpha_for_theory(frame: pd.DataFrame) -> pd.Series:
    """Leviathan's alpha where the drafter had a q_draft, else the alpha implied by accepted/drafted."""
    return frame["alpha"].astype(float).fillna(frame["alpha_implied"].astype(float))


def tree_widths(frame: pd.DataFrame) -> pd.Series:
    """Each row's tree width; 1 (a chain) where the table has no such column (from before trees) or no value."""
    if "tree_width" not in frame:
        return pd.Series(1, index=frame.index, dtype=int)
    return pd.to_numeric(frame["tree_width"], errors="coerce").fillna(1).astype(int)


def has_trees(frame: pd.DataFrame) -> bool:
    """Whether some row drafted a token tree (tree_width > 1)."""
    return bool((tree_widths(frame) > 1).any())


def width_label(width) -> str:
    """' W=2' for a tree width above 1, '' for a chain (or no width)."""
    try:
        w = int(width)
    except (TypeError, ValueError):
        return ""
    return f" W={w}" if w > 1 else ""


# What each column of a benchmark table is called on the page: plain words, the CSV keeps its names.
COLUMN_LABELS = {
    "category": "category", "prompt": "prompt", "drafter": "drafter", "k": "k (drafts per round)", "temperature": "temperature",
    "seed": "seed", "max_new_tokens": "max new tokens", "device": "device", "dtype": "precision", "repeats": "repeats",
    "new_tokens": "new tokens", "target_passes": "target passes", "drafted": "drafted", "accepted": "accepted",
    "alpha": "α (Σ min(p, q))", "acceptance_rate": "accepted / drafted", "alpha_implied": "α implied by accepted / drafted",
    "tokens_per_target_pass": "tokens per target pass", "tokens_per_s": "tokens/s", "baseline_tokens_per_s": "plain decoding tokens/s",
    "speedup": "speedup (wall clock)", "speedup_low": "speedup, lowest", "speedup_high": "speedup, highest",
    "speedup_cpu": "speedup (CPU time)", "speedup_cpu_low": "speedup (CPU time), lowest", "speedup_cpu_high": "speedup (CPU time), highest",
    "draft_cost": "draft cost c", "verify_cost": "verify cost", "predicted_speedup": "predicted speedup",
    "same_as_baseline": "same text as plain decoding", "wall_s": "wall time (s)", "baseline_wall_s": "plain decoding wall time (s)",
    "cpu_s": "CPU time (s)", "baseline_cpu_s": "plain decoding CPU time (s)", "tree_width": "tree width",
}  # fmt: skip


def column_label(column: str) -> str:
    """A benchmark column's name on the page (COLUMN_LABELS; a column it does not know, with spaces for underscores)."""
    return COLUMN_LABELS.get(column, column.replace("_", " "))


SPEEDUP_METRICS = {"speedup": "wall clock", "speedup_cpu": "process CPU time"}


def _check_metric(frame: pd.DataFrame, metric: str) -> None:
    if metric not in SPEEDUP_METRICS or metric not in frame:
        raise ValueError(f"Unknown speedup column {metric!r}; use one of {', '.join(SPEEDUP_METRICS)}.")


def mean_by_setting(frame: pd.DataFrame, metric: str = "speedup") -> pd.DataFrame:
    """Mean over prompts per (category, drafter, tree_width, k, temperature), with the prompt count; `speedup` holds
    `metric`, speedup_min/max its range over prompts, speedup_low/high the range over prompts and repeats (when
    measured). tree_width is 1 (a chain) for tables from before token trees."""
    _check_metric(frame, metric)
    keys = ["category", "drafter", "tree_width", "k", "temperature"]
    df = frame.assign(alpha_theory=alpha_for_theory(frame), tree_width=tree_widths(frame))
    low, high = (f"{metric}_low", f"{metric}_high") if f"{metric}_low" in df and f"{metric}_high" in df else (metric, metric)
    out = df.groupby(keys, sort=False).agg(
        speedup=(metric, "mean"), speedup_min=(metric, "min"), speedup_max=(metric, "max"),
        speedup_low=(low, "min"), speedup_high=(high, "max"),
        tokens_per_target_pass=("tokens_per_target_pass", "mean"), alpha_theory=("alpha_theory", "mean"), prompts=("prompt", "nunique"),
    )
    return out.reset_index()


def speedup_vs_k_figure(frame: pd.DataFrame, metric: str = "speedup") -> go.Figure:
    """Mean measured speedup against k, one panel per category, a colour per drafter, a dash per temperature and,
    when the sweep drafted token trees, a marker per tree width (named W=…; chains carry no W)."""
    df = mean_by_setting(frame, metric)
    categories = list(dict.fromkeys(df["category"]))
    drafters = list(dict.fromkeys(df["drafter"]))
    temps = list(dict.fromkeys(df["temperature"]))
    widths = sorted(dict.fromkeys(df["tree_width"]))
    fig = make_subplots(rows=1, cols=max(1, len(categories)), shared_yaxes=True, subplot_titles=[html.escape(str(c)) for c in categories])
    fig.update_layout(template=TEMPLATE)
    for col, cat in enumerate(categories, start=1):
        for i, drafter in enumerate(drafters):
            for j, t in enumerate(temps):
                for m, w in enumerate(widths):
                    part = df[(df["category"] == cat) & (df["drafter"] == drafter) & (df["temperature"] == t) & (df["tree_width"] == w)].sort_values("k")
                    if part.empty:
                        continue
                    fig.add_scatter(
                        x=part["k"], y=part["speedup"], mode="lines+markers", row=1, col=col,
                        name=f"{html.escape(str(drafter))}{width_label(w)}, T={t:g}", legendgroup=f"{drafter}-{w}-{t}", showlegend=col == 1,
                        marker=dict(symbol=WIDTH_SYMBOLS[m % len(WIDTH_SYMBOLS)], size=8),
                        line=dict(color=DRAFTER_COLORS[i % len(DRAFTER_COLORS)], dash=TEMPERATURE_DASH[j % len(TEMPERATURE_DASH)]),
                        error_y=dict(type="data", symmetric=False, array=part["speedup_high"] - part["speedup"],
                                     arrayminus=part["speedup"] - part["speedup_low"], thickness=1, width=3),
                        customdata=np.stack([part["speedup_low"], part["speedup_high"], part["prompts"]], axis=-1),
                        hovertemplate="k=%{x}: mean %{y:.2f}× (lowest %{customdata[0]:.2f}, highest %{customdata[1]:.2f} over repeats of %{customdata[2]} prompts)<extra></extra>",
                    )
        fig.add_hline(y=1.0, line=dict(color=style.INK, dash="dot"), row=1, col=col)
    fig.update_xaxes(title_text="k", dtick=2)
    fig.update_yaxes(title_text=f"speedup (×, {SPEEDUP_METRICS[metric]})", rangemode="tozero", row=1, col=1)
    fig.update_layout(title=f"measured speedup over plain decoding ({SPEEDUP_METRICS[metric]}), mean over prompts", **LAYOUT)
    return fig


def theory_overlay_figure(frame: pd.DataFrame, metric: str = "speedup") -> go.Figure:
    """Per drafter: the theory curve for each k at that drafter's median measured c and verify cost, and
    every run placed at (alpha, measured speedup) in the colour of its k."""
    _check_metric(frame, metric)
    df = frame.assign(alpha_theory=alpha_for_theory(frame)).dropna(subset=["alpha_theory", metric])
    drafters = list(dict.fromkeys(frame["drafter"]))
    fig = make_subplots(rows=1, cols=max(1, len(drafters)), shared_yaxes=True, subplot_titles=[html.escape(str(d)) for d in drafters])
    fig.update_layout(template=TEMPLATE)
    ks = sorted(frame["k"].unique())
    alphas = alpha_grid(0.02)
    for col, drafter in enumerate(drafters, start=1):
        part = df[df["drafter"] == drafter]
        c = float(np.nanmedian(part["draft_cost"].astype(float))) if part["draft_cost"].notna().any() else 0.0
        vc = float(np.nanmedian(part["verify_cost"].astype(float))) if part["verify_cost"].notna().any() else 1.0
        vc = vc if vc > 0 else 1.0
        for i, k in enumerate(ks):
            color = K_COLORS[i % len(K_COLORS)]
            fig.add_scatter(
                x=alphas, y=[speedup(a, int(k), max(0.0, c), vc) for a in alphas], mode="lines", row=1, col=col,
                line=dict(color=color), name=f"theory k={k}", legendgroup=f"k{k}", showlegend=col == 1,
                hovertemplate=f"theory k={k} (c={c:.2f}, verify cost={vc:.2f}): " + "%{y:.2f}×<extra></extra>",
            )
            pts = part[part["k"] == k]
            if not pts.empty:
                fig.add_scatter(
                    x=pts["alpha_theory"], y=pts[metric], mode="markers", row=1, col=col,
                    marker=dict(color=color, size=8, line=dict(color=style.INK, width=1)), name=f"measured k={k}", legendgroup=f"k{k}",
                    showlegend=col == 1, text=[html.escape(f"{r.category} · {r.prompt} · T={r.temperature:g}{width_label(getattr(r, 'tree_width', 1))}") for r in pts.itertuples()],
                    hovertemplate="%{text}<br>α=%{x:.2f}: %{y:.2f}×<extra></extra>",
                )
        fig.add_hline(y=1.0, line=dict(color=style.INK, dash="dot"), row=1, col=col)
    fig.update_xaxes(title_text="α (Leviathan, or implied by accepted/drafted)", range=[-0.03, 1.03])
    fig.update_yaxes(title_text=f"speedup (×, {SPEEDUP_METRICS[metric]})", rangemode="tozero", row=1, col=1)
    fig.update_layout(title="the sweep on the theory curves (c and verify cost measured per drafter)", **LAYOUT)
    return fig


def measured_points(frame: pd.DataFrame, source: str = "benchmark") -> pd.DataFrame:
    """Benchmark rows -> theory-page points (MEASURED_COLUMNS)."""
    if frame is None or frame.empty:
        return pd.DataFrame(columns=list(MEASURED_COLUMNS))
    labels = [f"{r.category} · {r.prompt} · {r.drafter} k={r.k}{width_label(getattr(r, 'tree_width', 1))} T={r.temperature:g}: {r.speedup:.2f}×" for r in frame.itertuples()]
    out = pd.DataFrame({"source": source, "label": labels, "alpha": alpha_for_theory(frame).to_numpy(), "k": frame["k"].to_numpy(), "speedup": frame["speedup"].to_numpy()})
    return out[list(MEASURED_COLUMNS)]


AUTO_K_ROUND_COLUMNS = ["run", "drafter", "category", "prompt", "round", "k", "drafted", "accepted", "probe"]


def auto_k_rounds_frame(obj: dict) -> pd.DataFrame:
    """A trace of k: auto (scripts/auto_k_check.py --trace, schema specviz.auto_k_rounds/1) -> one row per round of
    each run: the k auto chose, what the drafter drafted, how many the target kept, whether it was a probe."""
    if not isinstance(obj, dict) or obj.get("schema") != "specviz.auto_k_rounds/1":
        raise ValueError('Not a k: auto trace: expected a JSON object with "schema": "specviz.auto_k_rounds/1".')
    rows = [dict(run=f"{run['drafter']} · {run['category']} ({run['prompt']})", drafter=run["drafter"], category=run["category"],
                 prompt=run["prompt"], round=int(r["round"]), k=int(r["k"]), drafted=int(r["drafted"]), accepted=int(r["accepted"]),
                 probe=bool(r.get("probe", False)))
            for run in obj.get("runs", []) for r in run["rounds"]]  # fmt: skip
    return pd.DataFrame(rows, columns=AUTO_K_ROUND_COLUMNS)


def auto_k_rounds_figure(frame: pd.DataFrame) -> go.Figure:
    """One panel per run (a drafter on a prompt), rounds along x: bars, the draft tokens the target kept that round;
    a step line, the k auto chose before it (0: a plain pass); a diamond on each probe."""
    runs = list(dict.fromkeys(frame["run"]))
    fig = make_subplots(rows=max(1, len(runs)), cols=1, shared_xaxes=False, vertical_spacing=0.12 if len(runs) > 1 else 0.0,
                        subplot_titles=[html.escape(r) for r in runs] or None)  # fmt: skip
    fig.update_layout(template=TEMPLATE)
    for row, run in enumerate(runs, start=1):
        part = frame[frame["run"] == run].sort_values("round")
        first = row == 1
        fig.add_bar(x=part["round"], y=part["accepted"], name="drafts kept", legendgroup="kept", showlegend=first, row=row, col=1,
                    marker_color=style.ACCEPTED, customdata=part["drafted"],
                    hovertemplate="round %{x}: kept %{y} of %{customdata} drafted<extra></extra>")  # fmt: skip
        fig.add_scatter(x=part["round"], y=part["k"], mode="lines", line=dict(shape="hv", color=style.P_TARGET, width=2), name="k auto chose",
                        legendgroup="k", showlegend=first, row=row, col=1, hovertemplate="round %{x}: k = %{y}<extra></extra>")  # fmt: skip
        probes = part[part["probe"]]
        fig.add_scatter(x=probes["round"], y=probes["k"], mode="markers", marker=dict(symbol="diamond", size=9, color=style.HIGHLIGHT,
                        line=dict(color=style.INK, width=1)), name="a probe", legendgroup="probe", showlegend=first, row=row, col=1,
                        hovertemplate="round %{x}: a probe at k = %{y}<extra></extra>")  # fmt: skip
        fig.update_yaxes(title_text="tokens", rangemode="tozero", row=row, col=1)
    fig.update_xaxes(title_text="round", row=max(1, len(runs)), col=1)
    fig.update_layout(title="k: auto round by round: the k it chose, and how many drafts the target kept", barmode="overlay",
                      **{**LAYOUT, "height": 160 + 190 * max(1, len(runs))})  # fmt: skip
    return fig
