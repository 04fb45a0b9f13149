"""Measured runs from other pages of this browser session, as points for the theory page's charts.

Other pages own their state; this module only reads it, through their types (PageState of the step-through
page, the Benchmark page's results DataFrame), and returns an empty frame (or None) when there is nothing usable."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from specviz.core.theory import alpha_from_acceptance_rate
from specviz.experiments.bench import COLUMNS as BENCH_COLUMNS
from specviz.ui.common.keys import BENCH_RESULTS_KEY as BENCH_KEY
from specviz.ui.common.keys import STEP_THROUGH_KEY
from specviz.ui.step_through.session import PageState
from specviz.ui.step_through.step_views import measuring, run_frame
from specviz.viz.bench import measured_points
from specviz.viz.theory import MEASURED_COLUMNS


def _empty() -> pd.DataFrame:
    return pd.DataFrame(columns=list(MEASURED_COLUMNS))


def step_through_points() -> pd.DataFrame:
    """The step-through page's current runs at their (alpha, k, measured speedup); empty when there are none."""
    state = st.session_state.get(STEP_THROUGH_KEY)
    if not isinstance(state, PageState) or state.session is None:
        return _empty()
    session = state.session
    rows = []
    for run in session.runs:
        df = run_frame(session, run)  # the step-through page's own frame, memoised per round: not rebuilt per rerun here
        if df.empty or measuring(session, run) or pd.isna(df["speedup"].iloc[-1]):  # "measuring…" there: no point here
            continue
        last = df.iloc[-1]
        k = int(last["k_mean"])
        alpha = last["alpha"]
        if pd.isna(alpha) and pd.notna(last["acceptance_rate"]) and k > 0:
            alpha = alpha_from_acceptance_rate(float(last["acceptance_rate"]), k)
        if pd.isna(alpha) or k < 1:
            continue
        chose = f", k: auto chose about {k} a round" if run.config.k_policy == "auto" else ""  # the point sits at that k
        label = f"{run.label}: {int(last['tokens'])} tokens, {float(last['speedup']):.2f}×{chose}"
        rows.append({"source": "step-through", "label": label, "alpha": float(alpha), "k": k, "speedup": float(last["speedup"])})
    return pd.DataFrame(rows, columns=list(MEASURED_COLUMNS))


def auto_run() -> tuple[str, list] | None:
    """(label, records) of the step-through page's first current run with rounds whose k k: auto chose (each carries
    its k_choice); None when this session has no such run."""
    state = st.session_state.get(STEP_THROUGH_KEY)
    if not isinstance(state, PageState) or state.session is None:
        return None
    for run in state.session.runs:
        if any(getattr(r, "k_choice", None) is not None for r in run.records):
            return run.label, list(run.records)
    return None


def bench_points() -> pd.DataFrame:
    """The Benchmark page's latest results (a DataFrame with the bench columns); empty otherwise."""
    frame = st.session_state.get(BENCH_KEY)
    if not isinstance(frame, pd.DataFrame) or frame.empty or not set(BENCH_COLUMNS) <= set(frame.columns):
        return _empty()
    return measured_points(frame)


def session_points() -> pd.DataFrame:
    parts = [p for p in (step_through_points(), bench_points()) if not p.empty]
    return pd.concat(parts, ignore_index=True) if parts else _empty()
