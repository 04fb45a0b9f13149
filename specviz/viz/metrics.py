"""Metrics by name and acceptance by draft position: frames and figures (never imports streamlit).

Input: specviz.core.metrics.RunMetrics per run label. The per-position chart sets the measured
conditional acceptance at each draft position against the constant alpha that Leviathan's formula
assumes, and decay_note says in words what the difference does to the best k."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from specviz.core.limits import MAX_DRAFT_TOKENS
from specviz.core.metrics import METRIC_INFO, HeadAcceptance, RunMetrics, histogram_shares
from specviz.core.theory import VerifyCost, best_k, best_k_by_position, expected_tokens, expected_tokens_by_position
from specviz.viz.style import TEMPLATE
from specviz.viz.theory import K_COLORS, LAYOUT

MIN_COUNT = 5  # a position's rate is drawn solid, and used for best k, only when reached at least this often
POSITION_COLUMNS = ["run", "position", "reached", "accepted", "rate", "unconditional", "alpha"]
HISTOGRAM_COLUMNS = ["run", "accepted", "steps", "share", "num_spec_steps", "num_spec_tokens"]
HISTOGRAM_CAPTION = (
    "vLLM's acceptance_histogram (aiperf prints it too): bar j is the share of verify steps (rounds that drafted) that kept "
    "exactly j drafts, so acceptance length j + 1 with the bonus token; n on top is the count. Look at the ends: a tall bar "
    "at 0 is drafting wasted (the target threw every guess away); a tall bar at k says k could grow (the drafter was still "
    "right when the round ran out of drafts)."
)
HEAD_COLUMNS = ["run", "head", "reached", "accepted", "rate", "unconditional", "tokens_tried", "mean_q", "mean_p"]


def _fmt(x: float | None, spec: str = ".3f") -> str:
    return "–" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:{spec}}"


DISTURBED = "disturbed"  # a measured speedup above the tokens per pass: no result (specviz.core.metrics.speedup_disturbed)


def _positions_text(m: RunMetrics, limit: int = 6) -> str:
    parts = [f"{p.position}: {_fmt(p.rate, '.2f')} (n={p.reached})" for p in m.position_acceptance[:limit]]
    more = len(m.position_acceptance) - limit
    return " · ".join(parts) + (f" · … {more} more" if more > 0 else "") if parts else "–"


def metric_values(m: RunMetrics) -> dict[str, str]:
    """metric key -> the value as shown in the table."""
    return {
        "alpha": _fmt(m.alpha),
        "acceptance_rate": _fmt(m.acceptance_rate) + (f" ({m.accepted}/{m.drafted})" if m.drafted else ""),
        "mean_acceptance_length": _fmt(m.mean_acceptance_length) + (f" ({m.drafting_rounds} drafting rounds)" if m.drafting_rounds else ""),
        "tokens_per_target_pass": _fmt(m.tokens_per_target_pass) + (f" ({m.new_tokens}/{m.rounds})" if m.rounds else ""),
        "position_acceptance": _positions_text(m),
        "speedup": DISTURBED if m.speedup_disturbed else _fmt(m.speedup, ".2f") + ("×" if m.speedup is not None else ""),
    }


def metrics_frame(runs: Mapping[str, RunMetrics]) -> pd.DataFrame:
    """One row per metric: its name, one value column per run, its definition and who prints it."""
    values = {label: metric_values(m) for label, m in runs.items()}
    rows = []
    for info in METRIC_INFO:
        row = {"metric": info.name}
        row.update({label: values[label][info.key] for label in runs})
        row.update({"definition": info.definition, "printed by": info.printed_by})
        rows.append(row)
    return pd.DataFrame(rows, columns=["metric", *runs, "definition", "printed by"])


def positions_frame(runs: Mapping[str, RunMetrics]) -> pd.DataFrame:
    """One row per (run, draft position): reached, accepted, the conditional and vLLM's unconditional rate, the run's alpha."""
    rows = [
        {
            "run": label, "position": p.position, "reached": p.reached, "accepted": p.accepted,
            "rate": np.nan if p.rate is None else p.rate, "unconditional": np.nan if p.unconditional is None else p.unconditional,
            "alpha": np.nan if m.alpha is None else m.alpha,
        }
        for label, m in runs.items()
        for p in m.position_acceptance
    ]
    return pd.DataFrame(rows, columns=POSITION_COLUMNS)


def position_figure(df: pd.DataFrame) -> go.Figure:
    """Conditional acceptance by draft position (bars, count on top; faint where reached < MIN_COUNT) against
    each run's constant alpha (dashed) and what that alpha predicts unconditionally (alpha^i, dotted)."""
    fig = go.Figure(layout=dict(template=TEMPLATE))
    for i, (run, part) in enumerate(df.groupby("run", sort=False)):
        color = K_COLORS[i % len(K_COLORS)]
        name = html.escape(str(run))
        opacity = [1.0 if n >= MIN_COUNT else 0.35 for n in part["reached"]]
        fig.add_bar(
            x=part["position"], y=part["rate"], name=f"{name}: accepted at i ÷ reached i", marker=dict(color=color, opacity=opacity),
            text=[f"n={n}" for n in part["reached"]], textposition="outside",
            customdata=np.stack([part["accepted"], part["reached"], part["unconditional"]], axis=-1),
            hovertemplate=f"{name}<br>" + "position %{x}: %{customdata[0]} kept of %{customdata[1]} reached = %{y:.2f}"
            "<br>vLLM's unconditional rate: %{customdata[2]:.2f}<extra></extra>",
        )
        alpha = part["alpha"].dropna()
        if len(alpha):
            a = float(alpha.iloc[0])
            xs = part["position"].to_numpy()
            fig.add_scatter(
                x=xs, y=[a] * len(xs), mode="lines", name=f"{name}: constant α = {a:.2f} (the formula's assumption)",
                line=dict(color=color, dash="dash", width=2), hovertemplate=f"constant α = {a:.2f}<extra></extra>",
            )
    fig.update_layout(
        title="acceptance by draft position, against one constant α", barmode="group",
        xaxis=dict(title="draft position i in a round", dtick=1), yaxis=dict(title="P(kept at i | reached i)", range=[0, 1.15]), **LAYOUT,
    )
    return fig


def histogram_frame(runs: Mapping[str, Sequence[int]]) -> pd.DataFrame:
    """One row per (run, j = drafts kept in a verify step, 0..k) from each run's acceptance histogram (vLLM's
    acceptance_histogram: SpecDecodeSteps', or pooled_histogram's): the steps that kept j and their share; a run with
    no verify step has no rows."""
    rows = [
        {"run": label, "accepted": j, "steps": n, "share": share, "num_spec_steps": sum(hist), "num_spec_tokens": len(hist) - 1}
        for label, hist in runs.items()
        for j, (n, share) in enumerate(zip(hist, histogram_shares(hist)))
    ]
    return pd.DataFrame(rows, columns=HISTOGRAM_COLUMNS)


def histogram_figure(df: pd.DataFrame) -> go.Figure:
    """The acceptance histogram as shares of each run's verify steps (bars, the count on top), one colour per run."""
    fig = go.Figure(layout=dict(template=TEMPLATE))
    for i, (run, part) in enumerate(df.groupby("run", sort=False)):
        name = html.escape(str(run))
        fig.add_bar(
            x=part["accepted"], y=part["share"], name=f"{name}: {int(part['num_spec_steps'].iloc[0])} verify steps, k = {int(part['num_spec_tokens'].iloc[0])}",
            marker=dict(color=K_COLORS[i % len(K_COLORS)]), text=[f"n={n}" for n in part["steps"]], textposition="outside",
            customdata=np.stack([part["steps"], part["num_spec_steps"], part["accepted"] + 1], axis=-1),
            hovertemplate=f"{name}<br>" + "kept %{x} drafts (acceptance length %{customdata[2]}): %{customdata[0]} of %{customdata[1]} "
            "verify steps = %{y:.0%}<extra></extra>",
        )  # fmt: skip
    fig.update_layout(
        title="acceptance_histogram: how many drafts each verify step kept", barmode="group",
        xaxis=dict(title="drafts kept in a verify step (j); acceptance length = j + 1", dtick=1),
        yaxis=dict(title="share of verify steps", range=[0, 1.15], tickformat=".0%"), **LAYOUT,
    )
    return fig


def _nan(x: float | None) -> float:
    return np.nan if x is None else x


def heads_frame(runs: Mapping[str, tuple[HeadAcceptance, ...]]) -> pd.DataFrame:
    """One row per (run, Medusa head): rounds that tried it and kept it, both rates, tokens tried, the head's and the target's mean probability."""
    rows = [
        {
            "run": label, "head": h.head, "reached": h.acceptance.reached, "accepted": h.acceptance.accepted,
            "rate": _nan(h.rate), "unconditional": _nan(h.acceptance.unconditional), "tokens_tried": h.tokens_tried,
            "mean_q": _nan(h.mean_q), "mean_p": _nan(h.mean_p),
        }
        for label, heads in runs.items()
        for h in heads
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=HEAD_COLUMNS)


def head_figure(df: pd.DataFrame) -> go.Figure:
    """Conditional acceptance by Medusa head (bars, count on top; faint where tried < MIN_COUNT) with the head's own mean
    probability for the tokens it had tried (diamonds): a diamond above its bar is a head more sure of itself than right."""
    fig = go.Figure(layout=dict(template=TEMPLATE))
    for i, (run, part) in enumerate(df.groupby("run", sort=False)):
        color = K_COLORS[i % len(K_COLORS)]
        name = html.escape(str(run))
        opacity = [1.0 if n >= MIN_COUNT else 0.35 for n in part["reached"]]
        fig.add_bar(
            x=part["head"], y=part["rate"], name=f"{name}: kept ÷ tried", marker=dict(color=color, opacity=opacity),
            text=[f"n={n}" for n in part["reached"]], textposition="outside",
            customdata=np.stack([part["accepted"], part["reached"], part["unconditional"], part["tokens_tried"], part["mean_p"]], axis=-1),
            hovertemplate=f"{name}<br>" + "head %{x}: kept in %{customdata[0]} of %{customdata[1]} rounds that tried it = %{y:.2f}"
            "<br>of all drafting rounds: %{customdata[2]:.2f}<br>tokens tried: %{customdata[3]}, mean p_target %{customdata[4]:.2f}<extra></extra>",
        )  # fmt: skip
        fig.add_scatter(
            x=part["head"], y=part["mean_q"], mode="markers", name=f"{name}: the head's own probability (mean q_draft)",
            marker=dict(color=color, symbol="diamond-open", size=12, line=dict(width=2)),
            hovertemplate="head %{x}: mean q_draft of its tried tokens %{y:.2f}<extra></extra>",
        )
    fig.update_layout(
        title="acceptance by Medusa head", barmode="group",
        xaxis=dict(title="head i (guesses the token i places ahead)", dtick=1), yaxis=dict(title="P(kept | tried)", range=[0, 1.15]), **LAYOUT,
    )
    return fig


def reliable_rates(m: RunMetrics) -> list[float]:
    """Conditional rates of the leading positions reached at least MIN_COUNT times (stops at the first thin one)."""
    out = []
    for p in m.position_acceptance:
        if p.reached < MIN_COUNT or p.rate is None:
            break
        out.append(p.rate)
    return out


def decay_note(m: RunMetrics, c: float, verify_cost: VerifyCost, cost_label: str, k_max: int = MAX_DRAFT_TOKENS) -> str:
    """Does acceptance fall with position, and what does that do to the best k? In plain words."""
    rates = reliable_rates(m)
    if len(rates) < 2 or m.alpha is None:
        return (
            f"Too few rounds reached position 2 or beyond (at least {MIN_COUNT} each) to tell whether acceptance changes with position; "
            "step further, or raise k."
        )
    alpha = min(1.0, max(0.0, m.alpha))
    first, last = rates[0], rates[-1]
    if last <= first - 0.1:
        shape = f"decays with position, from {first:.2f} at position 1 to {last:.2f} at position {len(rates)}"
    elif last >= first + 0.1:
        shape = f"rises with position, from {first:.2f} at position 1 to {last:.2f} at position {len(rates)} (acceptances come in streaks)"
    else:
        shape = f"is roughly flat, {first:.2f} at position 1 and {last:.2f} at position {len(rates)}"
    kb_const, kb_pos = best_k(alpha, c, verify_cost, k_max), best_k_by_position(rates, c, verify_cost, k_max)
    e_const, e_pos = expected_tokens(alpha, kb_const), expected_tokens_by_position(rates, kb_const)
    verdict = (
        f"the best k moves from {kb_const} to {kb_pos}" if kb_pos != kb_const else f"the best k stays {kb_const}"
    )
    return (
        f"Acceptance {shape}; the formula assumes one α = {alpha:.2f} at every position. At k = {kb_const} the constant α predicts "
        f"{e_const:.2f} tokens per target pass and the measured rates {e_pos:.2f}. With c = {c:.3g} and {cost_label}, {verdict} "
        f"when the per-position rates replace α (positions past {len(rates)} reuse its rate)."
    )
