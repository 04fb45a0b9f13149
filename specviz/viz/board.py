"""The room board: what the room's forks of a presentation measured, as a tidy frame, a scatter and a table.

Points are specviz.workshop.presentation.BoardPoint (read here through the Point protocol: viz does not import the
workshop): one per fork, anonymous (no prompt, no name, no text). The scatter puts each fork at (α, measured
speedup) over the theory's ceiling for each k in the room: expected tokens per target pass with a free drafter
(specviz.core.theory.speedup at c = 0), which no measured speedup can pass. A fork whose speedup is still being
measured (plain decoding runs in the background) is a hollow marker at its tokens per pass. Never imports streamlit.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable
from typing import Protocol

import pandas as pd
import plotly.graph_objects as go

from specviz.core.theory import speedup
from specviz.viz import style
from specviz.viz.style import TEMPLATE
from specviz.viz.theory import K_COLORS, LAYOUT, alpha_grid

BOARD_COLUMNS: tuple[str, ...] = ("drafter", "k", "temperature", "rounds", "alpha", "tokens_per_target_pass", "speedup")
TEMPERATURE_COLORS = dict(zip(("greedy (T = 0)", "0 < T < 1", "T = 1", "T > 1"), style.SERIES))


class Point(Protocol):
    drafter: str
    k: int
    temperature: float
    rounds: int
    alpha: float | None
    tokens_per_target_pass: float | None
    speedup: float | None


def temperature_band(t: float) -> str:
    """The colour group of a temperature: the bands a teacher talks about."""
    if t == 0:
        return "greedy (T = 0)"
    if t < 1:
        return "0 < T < 1"
    return "T = 1" if t == 1 else "T > 1"


def board_frame(points: Iterable[Point], drafter_name: Callable[[str], str] = str) -> pd.DataFrame:
    """One row per fork with BOARD_COLUMNS (None -> NaN), plus `band` (temperature_band) and `drafter_name` (the
    caller's naming: specviz.drafters.specs.short_name, which viz does not import)."""
    rows = [{c: getattr(p, c) for c in BOARD_COLUMNS} for p in points]
    df = pd.DataFrame(rows, columns=list(BOARD_COLUMNS))
    for c in ("alpha", "tokens_per_target_pass", "speedup", "temperature"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype(float)
    df["band"] = [temperature_band(t) for t in df["temperature"]]
    df["drafter_name"] = [drafter_name(d) for d in df["drafter"]]
    return df


STILL_MEASURING = "measuring…"  # the table's speedup while plain decoding is still being timed (not a bare "None")


def board_table(df: pd.DataFrame) -> pd.DataFrame:
    """The board as the page's table: readable names, rounded numbers; a speedup still being measured says so."""
    speedups = [STILL_MEASURING if pd.isna(s) else f"{s:.2f}×" for s in df["speedup"]]
    out = pd.DataFrame({
        "drafter": df["drafter_name"], "k": df["k"], "temperature": df["temperature"], "rounds": df["rounds"],
        "α": df["alpha"].round(3), "tokens / pass": df["tokens_per_target_pass"].round(2), "measured speedup": pd.Series(speedups, index=df.index, dtype=object),
    })  # fmt: skip
    return out.reset_index(drop=True)


def board_figure(df: pd.DataFrame, color_by: str = "band") -> go.Figure:
    """α against measured speedup, a marker per fork coloured by temperature band (color_by='band') or drafter
    ('drafter_name'); behind them the c = 0 ceiling for each k on the board. Forks still measuring are left out."""
    fig = go.Figure(layout=dict(template=TEMPLATE))
    grid = alpha_grid(0.02)
    for i, k in enumerate(sorted({int(k) for k in df["k"]})):
        ceiling = [speedup(float(a), k, 0.0) for a in grid]
        fig.add_trace(go.Scatter(x=grid, y=ceiling, mode="lines", name=f"ceiling, k = {k}", line=dict(color=K_COLORS[i % len(K_COLORS)], dash="dot", width=1), hoverinfo="skip"))
    colors = TEMPERATURE_COLORS if color_by == "band" else {}
    groups = sorted(set(df[color_by]))
    measuring = df[df["speedup"].isna()].dropna(subset=["alpha", "tokens_per_target_pass"])
    if len(measuring):  # no speedup yet: hollow, at the tokens per pass (the ceiling it cannot pass)
        fig.add_trace(go.Scatter(
            x=measuring["alpha"], y=measuring["tokens_per_target_pass"], mode="markers", name="still measuring (at its tokens per pass)",
            marker=dict(size=10, symbol="circle-open", color=[colors.get(g, K_COLORS[groups.index(g) % len(K_COLORS)]) for g in measuring[color_by]]),
            hovertext=[html.escape(f"{d}, k = {k}: α {a:.2f}, {tp:.2f} tokens/pass, speedup still measuring") for d, k, a, tp in zip(measuring["drafter_name"], measuring["k"], measuring["alpha"], measuring["tokens_per_target_pass"])],
            hoverinfo="text",
        ))  # fmt: skip
    shown = df.dropna(subset=["alpha", "speedup"])
    for group, part in shown.groupby(color_by, sort=True):
        hover = [
            html.escape(f"{d}, k = {k}, T = {t:g}: α {a:.2f}, {tp:.2f} tokens/pass, {s:.2f}× over {r} rounds")
            for d, k, t, a, tp, s, r in zip(part["drafter_name"], part["k"], part["temperature"], part["alpha"], part["tokens_per_target_pass"], part["speedup"], part["rounds"])
        ]  # fmt: skip
        color = colors.get(group, K_COLORS[groups.index(group) % len(K_COLORS)])
        fig.add_trace(go.Scatter(x=part["alpha"], y=part["speedup"], mode="markers", name=html.escape(str(group)), marker=dict(size=11, color=color, line=dict(width=1, color=style.PAPER)), hovertext=hover, hoverinfo="text"))
    fig.update_layout(**LAYOUT, title=dict(text="The room's forks: α against measured speedup", x=0.0), xaxis=dict(title="α (acceptance per drafted position)", range=[0, 1.02]), yaxis=dict(title="measured speedup (×)", rangemode="tozero"))
    return fig
