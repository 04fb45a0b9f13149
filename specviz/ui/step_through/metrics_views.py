"""The step-through page's metrics panel: every metric by its name, acceptance by draft position and, beside it, vLLM's
acceptance histogram (how many drafts each verify step kept).

Computed from the session's records on every rerun (specviz.core.metrics); nothing is stored."""

from __future__ import annotations

import streamlit as st

from specviz.core.metrics import RunMetrics, head_acceptance
from specviz.core.theory import VerifyCost
from specviz.experiments.cost_profile import shipped_profiles
from specviz.ui.common.memo import memo, round_key
from specviz.ui.step_through.inspector import by_head
from specviz.ui.step_through.step_views import MEASURING, ViewRun, ViewSource, measuring, metrics_of, run_frame
from specviz.viz import verify_cost_ratio
from specviz.viz.markdown import md_text
from specviz.viz.metrics import (
    HISTOGRAM_CAPTION,
    decay_note,
    head_figure,
    heads_frame,
    histogram_figure,
    histogram_frame,
    metrics_frame,
    position_figure,
    positions_frame,
)
from specviz.viz.style import freeze
from specviz.workshop.resources import cached

POSITION_CAPTION = (
    "Bars: of the rounds that reached draft position i (every earlier draft kept), the share that kept draft i; n is that count, "
    "faint bars have fewer than 5. Dashed: the one α the formula (1 − α^(k+1))/(1 − α) assumes at every position. "
    "Bars falling below the line mean long drafts are worth less than the formula promises."
)
HEAD_CAPTION = (
    "Head i guesses the token i places ahead, so its bar is position i's rate: of the rounds that tried head i's token (every "
    "earlier head's kept), the share that kept it. Look at how fast the bars fall: each head guesses farther from the hidden "
    "state it reads, blind to the guesses before it. Diamonds: the head's own mean probability for its tried tokens; a diamond "
    "above its bar is a head surer than it is right."
)
WHY_HEADS = (
    "Why heads, and when not: a Medusa head guesses from the target's own hidden state, which already holds what the target "
    "is about to say, and all heads together cost about one extra read of the LM head, so on fresh prose they propose tokens "
    "a context n-gram model has never seen. On text that copies itself, prompt lookup wins: it copies long spans at almost no "
    "cost and stays right along the whole span, while a head's accuracy falls with every token it looks ahead."
)


def cpu_precision(dtype: str) -> str:
    """What a dtype choice runs as on this CPU ('auto' is fp16-weights where fbgemm runs); the name itself if unknown."""
    import torch

    from specviz.models import resolve_dtype_name

    try:
        return resolve_dtype_name(dtype, torch.device("cpu"))
    except ValueError:
        return dtype


@cached(ttl_s=300)
def _shipped_profiles() -> dict:
    """assets/profile_*.json, read once every few minutes per process rather than on every redraw of every page."""
    return shipped_profiles()


def _costs(session: ViewSource, run: ViewRun) -> tuple[float, VerifyCost, str]:
    """c measured in this run, and the verify cost: the shipped profile of this model on a CPU, else this run's mean."""
    df = run_frame(session, run)
    c = float(df["c"].iloc[-1]) if len(df) and df["c"].notna().iloc[-1] else 0.0
    if run.device_type == "cpu":
        precision = cpu_precision(run.config.dtype)
        for profile in _shipped_profiles().values():
            if profile.target == run.config.target and profile.device == "cpu" and profile.dtype == precision:
                return c, profile.curve, f"the verify-cost curve measured on a CPU ({profile.name})"
    v = verify_cost_ratio(run.records, session.baseline.records)
    if v is None:
        return c, 1.0, "a verify cost of 1 (no baseline yet to measure it)"
    return c, v, f"this run's measured verify cost ({v:.2f}× a 1-token pass, for every k)"


def panel(session: ViewSource) -> None:
    """The metrics table and the per-position acceptance chart for every run with records."""
    runs = [r for r in session.runs if r.records]
    if not runs:
        return
    metrics, table, positions, histogram, heads, notes = memo(session, "metrics_panel", round_key(session), lambda: _panel_parts(session, runs))
    st.subheader("Every metric by its name")
    st.dataframe(table, hide_index=True, width="stretch", key="metrics_table")
    if any(measuring(session, r) for r in runs):
        st.caption(f"speedup: {MEASURING} (plain decoding of the same prompt is timed in the background; the row fills in when it has caught up).")
    st.caption(
        "The same run, measured the ways tools report it. They differ on purpose: accepted/drafted counts drafts thrown away "
        "after a rejection, mean acceptance length skips rounds that drafted nothing, tokens per target pass counts every pass. "
        "Compare a tool's number with the row of the same name, not with α."
    )
    st.subheader("Acceptance by draft position, and drafts kept per verify step")
    left, right = st.columns(2)
    left.plotly_chart(positions, width="stretch", key="fig_positions", config={"displayModeBar": False})
    left.caption(POSITION_CAPTION)
    right.plotly_chart(histogram, width="stretch", key="fig_acceptance_histogram", config={"displayModeBar": False})
    right.caption(HISTOGRAM_CAPTION)
    if heads is not None:
        st.subheader("Acceptance by head")
        st.plotly_chart(heads, width="stretch", key="fig_heads", config={"displayModeBar": False})
        st.caption(HEAD_CAPTION)
        st.caption(WHY_HEADS)
    for note in notes:
        st.markdown(note)


def _panel_parts(session: ViewSource, runs: list[ViewRun]) -> tuple[dict[str, RunMetrics], object, object, object, object | None, list[str]]:
    """The metrics (the numbers the headline cells and the curves show), the table, the position chart, the acceptance
    histogram (each run's RunMetrics.spec_decode), the head
    chart when a run drafts with Medusa heads (else None), and each run's note on how its acceptance decays with k."""
    metrics: dict[str, RunMetrics] = {r.label: metrics_of(session, r) for r in runs}
    heads = {r.label: head_acceptance(r.records) for r in runs if by_head(r.config)}
    head_chart = freeze(head_figure(heads_frame(heads))) if heads else None
    notes = [f"**{md_text(r.label)}.** " + decay_note(metrics[r.label], *_costs(session, r)) for r in runs]
    histogram = freeze(histogram_figure(histogram_frame({label: m.spec_decode.acceptance_histogram for label, m in metrics.items()})))
    return metrics, metrics_frame(metrics), freeze(position_figure(positions_frame(metrics))), histogram, head_chart, notes
