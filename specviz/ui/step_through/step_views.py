"""The step-through page's views: metrics, token stream, round inspector, curves. Frames and figures are built from
the session's records once per round (specviz.ui.common.memo keeps them on the session until the next round).

Every view draws from records, token texts and the baseline's records only, so a live StepSession and a
replayed recording (specviz.ui.step_through.replay.ReplaySession) draw the same way: see ViewSource."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Protocol

import pandas as pd
import streamlit as st

from specviz.config import RunConfig
from specviz.core.divergence import Divergence, emitted_margins, first_divergence
from specviz.core.metrics import RunMetrics, run_metrics
from specviz.core.records import StepRecord
from specviz.core.theory import speedup as theory_speedup
from specviz.experiments.bench import shipped_speedup
from specviz.ui.common.memo import baseline_state, memo, round_key
from specviz.ui.step_through.session import baseline_key
from specviz.viz import (
    figures,
    latency_frame,
    legend_html,
    progress_frame,
    rounds_frame,
    stream_frame,
    token_stream_html,
    verify_cost_ratio,
)
from specviz.viz.figures import BASELINE_RUN
from specviz.viz.markdown import md_text
from specviz.viz.style import PAPER, freeze

log = logging.getLogger(__name__)


class ViewRun(Protocol):
    """What the views read of one run (live: specviz.ui.step_through.session.Run; replay: specviz.ui.step_through.replay.ReplayRun)."""

    label: str
    config: RunConfig

    @property
    def records(self) -> Sequence[StepRecord]: ...
    @property
    def error(self) -> str | None: ...
    @property
    def done(self) -> bool: ...
    @property
    def device_type(self) -> str: ...  # cpu, cuda, mps: where the run ran


class ViewBaseline(Protocol):
    """Plain decoding of the same prompt (live: specviz.workshop.baselines.BaselineRun, measured in the background)."""

    @property
    def records(self) -> Sequence[StepRecord]: ...
    @property
    def error(self) -> str | None: ...
    def covers(self, num_tokens: int) -> bool: ...  # measured that far (or finished): the speedup is measured


class ViewSource(Protocol):
    """What the views read of a session: its runs, its baseline, and token id -> text."""

    prompt: str
    config: RunConfig  # the first run's (the baseline decodes with its target and sampling)

    @property
    def runs(self) -> Sequence[ViewRun]: ...
    @property
    def baseline(self) -> ViewBaseline: ...
    @property
    def prompt_texts(self) -> list[str]: ...
    def token_text(self, token_id: int) -> str: ...


def generated(records: Sequence[StepRecord]) -> list[int]:
    """The ids committed so far, from the records (the same as the live decoder's generated)."""
    return [t for r in records for t in r.emitted]


def num_generated(run: ViewRun) -> int:
    return sum(len(r.emitted) for r in run.records)


def fmt(x: float | None, spec: str = ".2f", suffix: str = "") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:{spec}}{suffix}"


def _last(df: pd.DataFrame, column: str) -> float | None:
    return float(df[column].iloc[-1]) if len(df) else None


MEASURING = "measuring…"

INTRO = (
    "A small, fast **drafter** guesses the next tokens; the big **target** model checks all the guesses in one pass and "
    "keeps those its rule accepts. Every kept guess saves the target a pass of its own. The rule makes the text exactly "
    "what the target alone would write.\n\n"
    "**What to look at:** press **Step**, then read the tokens under the buttons: shaded ones were guessed and kept, "
    "struck-through ones turned down; the count above them is what the answer cost in target passes."
)
METRIC_MIN_WIDTH = "9rem"  # a metric cell's narrowest: equal cells for short values, two a row on a phone
# Less empty space above the title; on a phone a smaller title and tighter buttons (one row), so a Step's result
# shows on the first screen. The control bar sticks under Streamlit's header (3.75rem) while the page scrolls, on the
# light theme's background (.streamlit/config.toml fixes base = "light") so text scrolling under it does not show;
# the rule goes on the bar's layout wrapper, its own height, as a sticky box's parent must be taller than it. A
# heading scrolled to (an anchor link) stops below the bar, not under it.
COMPACT_CSS = (
    "<style>[data-testid='stMainBlockContainer']{padding-top:3rem;}"
    "[data-testid='stLayoutWrapper']:has(> .st-key-step_controls){position:sticky;top:3.75rem;z-index:100;"
    f"background:{PAPER};padding:0.4rem 0;}}"
    "[data-testid='stMain'] :is(h1,h2,h3){scroll-margin-top:10rem;}"
    # the run's metrics only (a horizontal container's items); metrics in st.columns (the board's lesson counts) keep their column's width
    f"[data-testid='stHorizontalBlock'] > [data-testid='stElementContainer']:has(> [data-testid='stMetric']){{min-width:{METRIC_MIN_WIDTH};}}"
    "@media (max-width:640px){[data-testid='stMainBlockContainer'] h1{font-size:1.5rem;}"
    ".st-key-step_controls{gap:0.35rem;} .st-key-step_controls button{padding:0.2rem 0.55rem;min-height:2.25rem;}}</style>"
)


def run_frame(session: ViewSource, run: ViewRun) -> pd.DataFrame:
    """The run's rounds frame (with the measured speedup as far as the baseline reaches), built once per round."""
    key = (len(run.records), baseline_state(session.baseline))
    return memo(session, f"frame:{run.label}", key, lambda: rounds_frame(run.records, run.label, session.baseline.records))


def metrics_of(session: ViewSource, run: ViewRun) -> RunMetrics:
    """The run's metrics (specviz.core.metrics, the speedup by its one baseline rule), computed once per round."""
    key = (len(run.records), baseline_state(session.baseline))
    return memo(session, f"metrics:{run.label}", key, lambda: run_metrics(run.records, session.baseline.records))


def measuring(session: ViewSource, run: ViewRun) -> bool:
    """The baseline is still being measured and has not reached this run's length."""
    return session.baseline.error is None and not session.baseline.covers(num_generated(run))


def speedup_text(session: ViewSource, run: ViewRun) -> str:
    """The measured speedup, "measuring…", or "–" when the clocks were disturbed (clock_note says so in words)."""
    if measuring(session, run):
        return MEASURING
    m = metrics_of(session, run)
    note = m.disturbance()
    if note is not None:
        memo(session, f"disturbed:{run.label}", (m.rounds,), lambda: log.warning("%s: %s", run.label, note))  # logged once per round
        return "–"
    return fmt(m.speedup, ".2f", "×")


GLOSSARY = """**Words on this page**

- **round**: the drafter guesses, the target checks every guess in one pass, the rule keeps some. Rounds count from 1.
- **target pass**: one forward pass of the big model. Plain decoding needs one per token; a round needs one whatever it keeps.
- **drafted / kept**: the drafter's guesses, and those the rule accepted.
- **p_target, q_draft**: the probability the target and the drafter give a token.
- **the rule**: keep a guess with probability min(1, p_target / q_draft); at the first rejection draw a replacement from
  the leftover max(0, p_target − q_draft); when every guess is kept, a bonus token comes free.
- **α**: the chance a guess survives, read off the two distributions: E[Σ min(p_target, q_draft)].
- **k**: the most tokens the drafter may guess per round.
- **speedup**: wall-clock time of plain decoding ÷ this run's, for as many tokens. It depends on how busy the machine is;
  the counts above it do not."""


def glossary() -> None:
    """The words and symbols of the page, one click away (drawn in the control row)."""
    with st.popover("?", help="The words and symbols on this page"):
        st.markdown(GLOSSARY)


def counter_sentence(tokens: int, passes: int) -> str:
    """The load-free headline: tokens committed, target passes used, and what plain decoding would need."""
    tokens_text = "1 token" if tokens == 1 else f"{tokens} tokens"
    passes_text = "1 target pass" if passes == 1 else f"{passes} target passes"
    return f"**{tokens_text} in {passes_text}**; plain decoding needs {tokens}."


# Why a drafter can propose nothing, by kind (the rest always propose k tokens while the text has room).
NOTHING_DRAFTED = {
    "ngram": "the n-gram drafter had not seen the last words often enough to guess what follows (it drafts only on evidence from the text so far)",
    "lookup": "prompt lookup found no earlier place in the text where the last words were followed by one clear continuation",
    "recycle": "token recycling had no candidates yet for the newest token",
    "none": "this run is plain decoding: it never drafts",
}


def nothing_drafted_reason(run: ViewRun, record: StepRecord) -> str | None:
    """Why this round drafted nothing, in words; None when it drafted."""
    if record.num_drafted:
        return None
    if record.num_draft_tokens == 0:
        why = "the text was one token from its length limit, so there was no room for a guess"
    else:
        why = NOTHING_DRAFTED.get(run.config.drafter, "the drafter proposed nothing")
    return f"Round {record.index + 1} drafted nothing: {why}. The target wrote one token on its own (a target step), as plain decoding would."


def quiet_machine_note(run: ViewRun) -> str:
    """The shipped benchmark's speedup for this drafter on a quiet machine, as a clause ('' when it has none)."""
    found = shipped_speedup(run.config.drafter, run.config.num_draft_tokens)
    if found is None:
        return ""
    speedup, k, rows = found
    return f" On a quiet machine the shipped benchmark measured {speedup:.2f}× for this drafter at k = {k} (median of {rows} prompts, docs/benchmarks.md)."


def clock_note(session: ViewSource, run: ViewRun) -> str | None:
    """A plain sentence when the clocks were disturbed (the measured speedup is no result), else None."""
    if measuring(session, run) or metrics_of(session, run).disturbance() is None:
        return None
    return (
        "No speedup is shown: the machine was busy while this run or plain decoding was timed, so the two clocks disagree "
        "with the physics (no speedup can exceed the tokens per target pass). The token counts do not depend on the clock."
        + quiet_machine_note(run)
    )


def headline(session: ViewSource, run: ViewRun) -> None:
    """What a round bought, without a clock: tokens against target passes; then why the latest round drafted
    nothing (if it did not). The clock's numbers come after the text (metrics)."""
    records = run.records
    st.markdown(counter_sentence(num_generated(run), len(records)))
    if records and (why := nothing_drafted_reason(run, records[-1])) is not None:
        st.caption(why)


def metrics(session: ViewSource, run: ViewRun) -> None:
    """The run's headline numbers so far, in a row that wraps (two a row on a phone); the clock-free ones first. One
    acceptance number here (drafts kept); α and the others are in the metrics panel. Each cell is as wide as its
    label and value, at least METRIC_MIN_WIDTH (COMPACT_CSS), so neither is ever cut ("measuring…" was)."""
    df = run_frame(session, run)
    k = int(df["k_mean"].iloc[-1]) if len(df) else run.config.num_draft_tokens
    cells = [
        ("rounds", f"{len(df)}", "One target pass each."),
        ("tokens", f"{num_generated(run)} / {run.config.max_new_tokens}", "Committed so far / the most this run will write."),
        ("tokens / target pass", fmt(_last(df, "tokens_per_target_pass")), f"Plain decoding gets 1. Theory at this α and k={k}: (1−α^(k+1))/(1−α) = {fmt(_last(df, 'theory_tokens_per_target_pass'))}."),
        ("drafts kept", fmt(_last(df, "acceptance_rate")), "Kept drafts over all drafts (discarded ones included), as vLLM and llama.cpp report it. α, the rule's own rate, is in the metrics panel below."),
        ("speedup", speedup_text(session, run), f"Wall clock, measured, against plain decoding of the same prompt; it depends on the machine's load. Predicted (1−α^(k+1))/((1−α)(1+kc)): {fmt(_last(df, 'predicted_speedup'), '.2f', '×')}."),
    ]
    if (note := clock_note(session, run)) is not None:
        st.caption(note)  # why the speedup cell is empty, in words
    with st.container(horizontal=True, gap="small"):
        for label, value, help_text in cells:
            st.metric(label, value, help=help_text, width="content")


# The stream scrolls inside its own box, which starts at its end (column-reverse): the newest round stays in view.
STREAM_BOX = '<div style="display:flex;flex-direction:column-reverse;max-height:55vh;overflow-y:auto;">{}</div>'


def token_stream(session: ViewSource, run: ViewRun, legend: bool = True) -> None:
    """The prompt folded to one line, then the generated tokens by fate; the legend under them."""
    stream = memo(
        session, f"stream:{run.label}", (len(run.records),),
        lambda: token_stream_html(session.prompt_texts, stream_frame(run.records, session.token_text), prompt_summary=session.prompt),
    )  # fmt: skip
    st.html(STREAM_BOX.format(stream))
    if legend:
        st.html(legend_html())
    if run.error:
        st.error(md_text(run.error))
    elif run.done:
        st.caption("This run is finished. Press Reset to start again.")


def baseline_divergence(session: ViewSource, run: ViewRun) -> Divergence | None:
    """Where a greedy run's tokens first differ from its baseline's (as far as both have gone); None when they
    agree, when the run samples, or when the baseline decodes something else (another target, dtype, sampling)."""
    baseline = session.baseline
    if not run.config.sampling.greedy or baseline.error or baseline_key(run.config, session.prompt) != baseline_key(session.config, session.prompt):
        return None
    return first_divergence(
        generated(run.records), emitted_margins(run.records), generated(baseline.records), emitted_margins(baseline.records), prefix_only=True
    )


def divergence_note(session: ViewSource, run: ViewRun) -> None:
    """A warning when a greedy run left plain greedy decoding: where, and how close the target's top two were."""
    d = baseline_divergence(session, run)
    if d is None:
        return
    margin = "–" if d.margin is None else f"{d.margin:.4g}"
    base_margin = "–" if d.baseline_margin is None else f"{d.baseline_margin:.4g}"
    st.warning(
        f"{md_text(run.label)}: this greedy run differs from plain greedy decoding at new token {d.position + 1} "
        f"(token id {d.token} here, {d.baseline_token} in the baseline). "
        f"The target's top-2 logit margin there: {margin} (baseline {base_margin}). Greedy identity is a float32 guarantee: "
        "in bfloat16/float16 the batched verify pass rounds differently from one-token steps and can flip a near-tie."
    )


def divergence_notes(session: ViewSource) -> None:
    for run in session.runs:
        divergence_note(session, run)


def live_progress(session: ViewSource) -> None:
    """What Run to end redraws after every round: the numbers and the streams."""
    cols = st.columns(len(session.runs))
    for col, run in zip(cols, session.runs):
        with col:
            df = run_frame(session, run)
            st.markdown(f"**{md_text(run.label)}** · round {len(df)} · {num_generated(run)} tokens · α {fmt(_last(df, 'alpha'))} · {fmt(_last(df, 'tokens_per_target_pass'))} tokens/pass")
            st.html(token_stream_html(session.prompt_texts, stream_frame(run.records, session.token_text), show_prompt=False))


def first_charts(session: ViewSource) -> bool:
    """True until this session's curves have been drawn once (the page shows a placeholder where they will land)."""
    return "curves" not in (getattr(session, "memo", None) or {})


def curves(session: ViewSource) -> None:
    """Accepted per round, running α, tokens per pass and speedup against theory, inter-token latency."""
    runs = [r for r in session.runs if r.records]
    if not runs:
        return
    figs = memo(session, "curves", round_key(session), lambda: _curve_figures(session, runs))
    st.subheader("Curves")
    a, b = st.columns(2)
    with a:
        st.plotly_chart(figs["accepted"], width="stretch", key="fig_accepted", config={"displayModeBar": False})
        if len(runs) == 1:
            st.caption("Grey: drafted this round; green: kept. A fully green bar also earns a bonus token; a short one means a rejection and a resample.")
        else:
            st.caption("Drafts kept per round by each run: the higher line gets more from each target pass.")
    with b:
        st.plotly_chart(figs["alpha"], width="stretch", key="fig_alpha", config={"displayModeBar": False})
        st.caption(
            "α is Leviathan's E[Σ min(p_target, q_draft)]: the chance a draft survives, read off the distributions. "
            "accepted/drafted counts what happened (discarded drafts count as drafted, so it sits lower). With a one-hot q, Σ min(p, q) = p_target(draft)."
        )
    c, d = st.columns(2)
    with c:
        st.plotly_chart(figs["tpp"], width="stretch", key="fig_tpp", config={"displayModeBar": False})
        st.caption("Measured tokens per target pass against (1 − α^(k+1))/(1 − α) at the running α. Rounds where the drafter had nothing to propose pull the measurement below theory.")
    with d:
        if any(measuring(session, r) for r in runs):
            st.caption(f"Speedup: {MEASURING} plain decoding of the same prompt is timed in the background, after every waiting round; the measured line grows as it catches up.")
        st.plotly_chart(figs["speedup"], width="stretch", key="fig_speedup", config={"displayModeBar": False})
        st.caption(speedup_note(session, runs))
    e, f = st.columns(2)
    with e:
        st.plotly_chart(figs["latency"], width="stretch", key="fig_latency", config={"displayModeBar": False})
        st.caption("Speculative tokens arrive in bursts: a round's tokens come together (gaps near 0 ms), then a long wait for the next round. Plain decoding pays one pass per token, evenly.")
    with f:
        st.plotly_chart(figs["progress"], width="stretch", key="fig_progress", config={"displayModeBar": False})
        st.caption("Tokens committed against decode time: the steeper line is the faster decoder.")


def _curve_figures(session: ViewSource, runs: list[ViewRun]) -> dict:
    """Every curve's figure, from the frames of this round (memoised by curves())."""
    rounds = pd.concat([run_frame(session, r) for r in runs], ignore_index=True)
    base = session.baseline.records
    latency = pd.concat([latency_frame(r.records, r.label) for r in runs] + [latency_frame(base, BASELINE_RUN)], ignore_index=True)
    progress = pd.concat([progress_frame(r.records, r.label) for r in runs] + [progress_frame(base, BASELINE_RUN)], ignore_index=True)
    figs = {
        "accepted": figures.accepted_figure(rounds), "alpha": figures.alpha_figure(rounds), "tpp": figures.tokens_per_target_pass_figure(rounds),
        "speedup": figures.speedup_figure(rounds), "latency": figures.latency_figure(latency), "progress": figures.progress_figure(progress),
    }  # fmt: skip
    return {name: freeze(fig) for name, fig in figs.items()}


def speedup_note(session: ViewSource, runs: list[ViewRun]) -> str:
    """Why measured and predicted speedups differ: the formula charges one target pass per round."""
    if session.baseline.error:
        return f"No baseline, so no measured speedup: {md_text(session.baseline.error)}"
    if not session.baseline.records:
        return f"Measured speedup: {MEASURING} the baseline (plain decoding of the same prompt) runs in the background, after every waiting round."
    notes = []
    for run in runs:
        df = run_frame(session, run)
        if (note := metrics_of(session, run).disturbance()) is not None and not measuring(session, run):
            notes.append(f"{md_text(run.label)}: no measured speedup, {md_text(note)}")
        v = verify_cost_ratio(run.records, session.baseline.records)
        alpha, c = _last(df, "alpha"), _last(df, "c")
        if v is None or alpha is None or math.isnan(alpha):
            continue
        k = int(df["k_mean"].iloc[-1])
        corrected = theory_speedup(alpha, k, c, verify_cost=v)
        notes.append(f"{md_text(run.label)}: c = {c:.2f}; verifying k+1 tokens took {v:.2f}× a one-token pass (the formula assumes 1×); charging that, it predicts {corrected:.2f}×.")
    head = (
        "Measured: the baseline's decode time for as many tokens ÷ this run's (prefill excluded), drawn as far as the "
        "baseline has been measured (it is timed in the background; a baseline that stopped at EOS sooner is extrapolated at its mean pace). "
        "Predicted: Leviathan's formula with c = draft time per token ÷ target time per token, both measured. "
    )
    return head + " ".join(notes)
