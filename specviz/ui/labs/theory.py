"""The Speedup theory page's plumbing: the formulas it evaluates (specviz.core.theory), the cost profiles
(shipped, or this machine measured now inside one queue turn), and its figures cached as plain dicts where they do
not move with the α and k sliders (building a plotly figure costs tens of ms; the sliders' marks are added to a copy
of the cached dict). The page only draws."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from specviz.config import EMBEDDED_TARGET
from specviz.core.limits import MAX_DRAFT_TOKENS
from specviz.core.theory import (
    VerifyCurve,
    acceptance_rate,
    best_k,
    best_speedups,
    crossover_batch,
    expected_tokens,
    round_cost,
    speedup,
    verify_cost_at,
    vocab_pairs,
)
from specviz.drafters.specs import short_name
from specviz.experiments import batch as batch_results
from specviz.experiments import cost_profile as cost_profile
from specviz.experiments.cost_profile import PROFILE_DRAFTERS, CostProfile, shipped_profiles
from specviz.runs import run_positions
from specviz.ui.common import access, budgets, turns
from specviz.ui.common import models as ui_models
from specviz.ui.labs import measured as session_runs  # its auto_run, called through the module (tests patch it)
from specviz.ui.labs.measured import session_points
from specviz.viz import theory as figures
from specviz.viz.theory import MEASURED_COLUMNS, batch_frame, batch_ratios


@dataclass(frozen=True)
class TheoryNumbers:
    """The headline numbers at one (alpha, k, c, verify cost)."""

    expected_tokens: float  # E[tokens per target pass] at (alpha, k): 1 + alpha + ... + alpha**k
    round_cost: float  # c_verify(k) + k c, in 1-token target passes
    verify_cost: float  # c_verify(k)
    speedup: float
    best_k: int
    best_speedup: float
    acceptance_rate: float  # accepted / drafted at (alpha, k): what a dashboard shows, not alpha


def theory_numbers(alpha: float, k: int, c: float, verify_cost: float | VerifyCurve) -> TheoryNumbers:
    kb = best_k(alpha, c, verify_cost)
    return TheoryNumbers(
        expected_tokens(alpha, k), round_cost(k, c, verify_cost), verify_cost_at(verify_cost, k), speedup(alpha, k, c, verify_cost),
        kb, speedup(alpha, kb, c, verify_cost), acceptance_rate(alpha, k),
    )  # fmt: skip


MEASURED_KEY = "theory_profile_measured"  # this session's own measurement (a CostProfile)
THIS_MACHINE = "this machine (measured now)"


def profiles() -> dict[str, CostProfile]:
    """Menu name -> profile: this session's measurement first (MEASURED_KEY), then the shipped ones in assets/."""
    out: dict[str, CostProfile] = {}
    mine = st.session_state.get(MEASURED_KEY)
    if isinstance(mine, CostProfile):
        out[THIS_MACHINE] = mine
    for prof in shipped_profiles().values():
        out[f"shipped: {prof.name}"] = prof
    return out


def profile_table(shown: dict[str, CostProfile], alpha: float, c: float) -> pd.DataFrame:
    """The profiles side by side (one column each): the machine, c_verify at a few k, the drafters' measured c, and
    the best k at the page's α and c."""
    return pd.DataFrame(
        {
            name: {
                "device": prof.device_name, "dtype": prof.dtype, "threads": str(prof.threads), "clock": prof.clock,
                "1-token pass (ms)": f"{prof.pass_ms[0]:.1f}",
                **{f"c_verify({kk})": f"{prof.curve.at(kk):.2f}" for kk in (1, 2, 4, 8, 16)},
                **draft_cost_cells(prof),
                "best k at your α (c from the slider)": str(best_k(alpha, c, prof.curve)),
            }
            for name, prof in shown.items()
        }
    )  # fmt: skip


def overlay_points(show: bool) -> pd.DataFrame:
    """This session's measured runs as points for the charts (specviz.ui.labs.measured), or none when not shown."""
    return session_points() if show else pd.DataFrame(columns=list(MEASURED_COLUMNS))


PROFILE_CONTEXT = 256  # tokens cached before each timed pass (cost_profile.measure_profile's default)


def measure_this_machine(on_progress: Callable[[int, int, str], None]) -> CostProfile:
    """Profile the embedded target's passes and the offline drafters as a long job: one model turn per measurement
    (no pass overlaps anyone's rounds, and their rounds run between measurements); one repeat in shared mode."""
    target = ui_models.get_model(EMBEDDED_TARGET)
    repeats = 1 if access.current_policy().shared else 3
    memory = (1 + len(PROFILE_DRAFTERS)) * run_positions(PROFILE_CONTEXT, 0, MAX_DRAFT_TOKENS)  # the context's cache, and a drafter's, at most
    with budgets.job_memory(target, memory, "The cost profile"), turns.long_job(target, "the cost profile", "its next measurement") as turn:
        return cost_profile.measure_profile(
            target, context_length=PROFILE_CONTEXT, repeats=repeats, label="this machine, measured now", turn=turn, on_progress=on_progress
        )


NOT_MEASURED = "not measured yet"


def draft_cost_cells(profile: CostProfile) -> dict[str, str]:
    """'c, <drafter>' -> the profile's measured c per drafted token, for every drafter a profile measures (a profile made
    before a drafter existed says so instead of a number: the lead re-measures the shipped profiles), then any other."""
    cost = profile.draft_cost
    cells = {f"c, {d}": f"{cost[d]:.3g}" if d in cost else NOT_MEASURED for d in PROFILE_DRAFTERS}
    return cells | {f"c, {d}": f"{v:.3g}" for d, v in cost.items() if d not in PROFILE_DRAFTERS}


def cost_label(name: str) -> str:
    """A profile's drafter name for a menu: "medusa@8192" -> "Medusa heads, 8,192-token draft vocabulary"."""
    kind, _, vocab = name.partition("@")
    return f"{short_name(kind)}, {int(vocab):,}-token draft vocabulary" if vocab.isdigit() else short_name(kind)


@dataclass(frozen=True)
class DraftingLesson:
    """The drafting-cost chart: the same drafter at its full-vocabulary and draft-vocabulary cost, from one profile."""

    profile_name: str
    figure: dict
    caption: str


def drafting_lesson(selected: CostProfile | None, available: dict[str, CostProfile], alpha: float) -> DraftingLesson | None:
    """From the sidebar's profile if it timed a drafter over the full and a draft vocabulary, else the first that did;
    None when none did (a profile made before draft vocabularies, or heads without token counts)."""
    named = ([selected] if selected is not None else []) + list(available.values())
    found = next(((prof, vocab_pairs(prof.draft_cost)) for prof in named if vocab_pairs(prof.draft_cost)), None)
    if found is None:
        return None
    prof, pairs = found
    full, reduced = pairs[0]
    costs = {cost_label(full): prof.draft_cost[full], cost_label(reduced): prof.draft_cost[reduced]}
    frame = figures.drafting_cost_frame(costs, prof.curve)
    at = best_speedups(alpha, costs, prof.curve)
    (name_a, (k_a, s_a)), (name_b, (k_b, s_b)) = at.items()
    caption = (
        f"{prof.name}: the same drafter, drafting cost c = {costs[name_a]:.3f} of a pass over the full vocabulary and "
        f"{costs[name_b]:.3f} over the draft vocabulary. At your α ({alpha:.2f}) the best is {s_a:.2f}× (k = {k_a}) against "
        f"{s_b:.2f}× (k = {k_b}). On a 135M-parameter target the LM head is a fifth of the weights, so reading it for every "
        "drafted token is a large share of a round: cutting the vocabulary moves the break-even α further than a better guess would."
    )
    return DraftingLesson(prof.name, figures.drafting_cost_figure(frame).to_plotly_json(), caption)


# --- At batch B ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchLesson:
    """What the *At batch B* section draws: predicted (and, when shipped, measured) throughput against B."""

    profile_name: str  # "" when no profile has batched passes
    k: int  # the k predicted with (the sidebar's, at most the longest pass measured minus one)
    frame: pd.DataFrame  # viz.theory.BATCH_COLUMNS
    ratios: pd.DataFrame  # viz.theory.batch_ratios
    crossover: float | None  # predicted B where speculation stops paying; None: not up to the largest B profiled
    measured_note: str  # where the measured points come from, or why there are none

    @property
    def crossover_text(self) -> str:
        """Where speculation stops paying, for the metric: "B ≈ 5.2", or "not up to B = 32"."""
        return f"not up to B = {int(self.ratios['batch_size'].max())}" if self.crossover is None else f"B ≈ {self.crossover:.1f}"

    def predicted_ratios(self) -> list[tuple[int, float]]:
        """(B, speculative ÷ plain) predicted from the profile, smallest B first."""
        predicted = self.ratios[self.ratios["source"] == "predicted"]
        return [(int(b), float(r)) for b, r in zip(predicted["batch_size"], predicted["ratio"], strict=True)]


def batch_profile(selected: CostProfile | None, available: dict[str, CostProfile]) -> tuple[str, CostProfile] | None:
    """The profile to predict from: the sidebar's choice if it has batched passes, else the first one that has."""
    named = ([(selected.name, selected)] if selected is not None else []) + [(prof.name, prof) for prof in available.values()]
    return next(((name, prof) for name, prof in named if prof.batch_pass_ms), None)


@dataclass(frozen=True)
class AutoChoices:
    """The ks k: auto chose in this session's step-through run, for the speedup-by-k chart."""

    run: str  # the run's label
    counts: pd.DataFrame  # specviz.viz.theory.auto_k_counts

    @property
    def caption(self) -> str:
        return figures.auto_k_caption(self.counts, self.run)


NO_AUTO_RUN = "Step through a run with k: auto (the default; the sidebar's k: auto switch) and the ks it chose each round appear on this chart."


def auto_choices() -> AutoChoices | None:
    """What k: auto chose in the step-through page's current run; None when there is no such run."""
    found = session_runs.auto_run()
    if found is None:
        return None
    label, records = found
    return AutoChoices(label, figures.auto_k_counts(records))


def last_run_alpha(measured: pd.DataFrame) -> float | None:
    """α of the last measured run this session (step-through or benchmark), if it has one."""
    alphas = measured["alpha"].dropna() if "alpha" in measured else pd.Series(dtype=float)
    return float(alphas.iloc[-1]) if len(alphas) else None


MeasuredPoints = tuple[list[tuple[int, float, float]], str, float]  # (B, plain, speculative tokens/s), note, overhead ms per row


def _measured_points() -> MeasuredPoints:
    """The shipped `specviz batch` points (assets/batch_cpu.json), a note saying what they are, and their plain side's
    per-row overhead outside the forward (0 for a file that did not measure it)."""
    try:
        loaded = batch_results.load_batch_points()
    except ValueError as exc:
        return [], f"The shipped batch results could not be read: {exc}", 0.0
    if loaded is None:
        return [], "No measured points shipped yet (`python -m specviz batch --out assets/batch_cpu.json` writes them).", 0.0
    header, points = loaded
    overhead = float(header.get("plain_overhead_ms_per_row", 0.0))  # derived by load_batch_points, >= 0
    return points, (
        f"Measured: `specviz batch`, {header.get('drafter', '?')} with k = {header.get('k', '?')} on "
        f"{', '.join(header.get('category') or ['?'])} prompts, {header.get('device_name', '?')}, {header.get('threads', '?')} threads."
    ), overhead


def batch_lesson(
    selected: CostProfile | None, available: dict[str, CostProfile], alpha: float, k: int, c: float,
    mine: MeasuredPoints | None = None,
) -> BatchLesson | None:  # fmt: skip
    """Plain and speculative tokens/s against B from a profile's batch_pass_ms at (alpha, k, c), with measured
    points: this session's (mine: points, their note, their overhead) instead of the shipped ones. The points' plain
    per-row overhead outside the forward is charged to both predicted sides. Without batched passes only this
    session's points are drawn (profile_name ""); None when there are none either. c: a draft forward over a
    1-token target pass, charged per drafted token per row."""
    found = batch_profile(selected, available)
    points, note, overhead = mine if mine is not None else _measured_points()
    if found is None:
        if mine is None:
            return None
        frame = batch_frame({}, alpha, k, 0.0, points)
        return BatchLesson("", k, frame, batch_ratios(frame), None, note)
    name, prof = found
    passes = {b: prof.batch_pass(b) for b in prof.batch_sizes}
    k = max(1, min(k, min(len(ms) for ms in passes.values()) - 1))
    frame = batch_frame(passes, alpha, k, c * prof.pass_ms[0], points, overhead)
    ratios = batch_ratios(frame)
    predicted = ratios[ratios["source"] == "predicted"]
    crossover = crossover_batch(predicted["batch_size"].tolist(), predicted["ratio"].tolist())
    return BatchLesson(name, k, frame, ratios, crossover, note)


# --- figures the sliders do not change, cached ---
# In st.cache_data, not a process registry (specviz.workshop.resources): pure, bounded, rebuilt in a moment if a
# client's clear_cache empties them, and heatmap()/curves() add to the copy st.cache_data returns on every call.


@st.cache_data(show_spinner=False, max_entries=64)
def _heatmap_base(c: float, verify_cost: float | VerifyCurve, measured: pd.DataFrame) -> dict:
    return figures.heatmap_base(c, verify_cost, measured).to_plotly_json()


def heatmap(c: float, verify_cost: float | VerifyCurve, alpha: float, k: int, measured: pd.DataFrame) -> dict:
    """figures.heatmap_figure as a dict: the cached base (a copy per call) plus the chosen (α, k)."""
    fig = _heatmap_base(c, verify_cost, measured)
    fig["data"] = [*fig["data"], figures.choice_marker(alpha, k, c, verify_cost)]
    return fig


@st.cache_data(show_spinner=False, max_entries=64)
def _curves_base(c: float, verify_cost: float | VerifyCurve, ks: tuple[int, ...], measured: pd.DataFrame) -> dict:
    return figures.curves_figure(c, verify_cost, ks, None, measured).to_plotly_json()


def curves(c: float, verify_cost: float | VerifyCurve, ks: Sequence[int], alpha: float, measured: pd.DataFrame) -> dict:
    """figures.curves_figure as a dict: the cached curves plus the line at the chosen α."""
    fig = _curves_base(c, verify_cost, tuple(ks), measured)
    fig["layout"]["shapes"] = [*fig["layout"].get("shapes", ()), figures.alpha_line(alpha)]
    return fig


@st.cache_data(show_spinner=False, max_entries=16)
def verify_curves(curves_by_name: dict[str, VerifyCurve], constant: float | None) -> dict:
    return figures.verify_curve_figure(curves_by_name, constant).to_plotly_json()


@st.cache_data(show_spinner=False)
def alpha_definitions() -> dict:
    return figures.alpha_definitions_figure().to_plotly_json()


def examples_by_setting() -> pd.DataFrame:
    """The worked examples indexed by their setting's name, for the text that quotes them."""
    return worked_examples().set_index("setting")


@st.cache_data(show_spinner=False)
def worked_examples() -> pd.DataFrame:
    return figures.worked_examples()
