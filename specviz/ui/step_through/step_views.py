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
from specviz.core.metrics import RunMetrics, draft_heads, run_metrics
from specviz.core.records import StepRecord
from specviz.core.theory import speedup as theory_speedup
from specviz.drafters.specs import drafter_spec
from specviz.ui.common import widgets
from specviz.ui.common.memo import baseline_state, memo, round_key
from specviz.ui.step_through.session import baseline_key
from specviz.viz import (
    figures,
    latency_frame,
    legend_html,
    num_positions,
    position_frame,
    position_info,
    progress_frame,
    rounds_frame,
    stream_frame,
    token_stream_html,
    verify_cost_ratio,
    visible_plain,
)
from specviz.viz.figures import BASELINE_RUN
from specviz.viz.frames import head_drafts_frame, table_entries_frame
from specviz.viz.markdown import md_code, md_text
from specviz.viz.metrics import DISTURBED
from specviz.viz.style import freeze

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


def _fmt(x: float | None, spec: str = ".2f", suffix: str = "") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:{spec}}{suffix}"


def _last(df: pd.DataFrame, column: str) -> float | None:
    return float(df[column].iloc[-1]) if len(df) else None


MEASURING = "measuring…"


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
    if measuring(session, run):
        return MEASURING
    m = metrics_of(session, run)
    note = m.disturbance()
    if note is not None:
        memo(session, f"disturbed:{run.label}", (m.rounds,), lambda: log.warning("%s: %s", run.label, note))  # logged once per round
        return DISTURBED
    return _fmt(m.speedup, ".2f", "×")


def metrics(session: ViewSource, run: ViewRun, columns: int = 6) -> None:
    """The run's headline numbers so far; theory in the small print under each."""
    df = run_frame(session, run)
    k = int(df["k_mean"].iloc[-1]) if len(df) else run.config.num_draft_tokens
    cells = [
        ("rounds", f"{len(df)}", "One target pass each."),
        ("tokens", f"{num_generated(run)} / {run.config.max_new_tokens}", None),
        ("α", _fmt(_last(df, "alpha")), "Leviathan's α = E[Σ_v min(p_target, q_draft)] over the positions the rule checked."),
        ("accepted / drafted", _fmt(_last(df, "acceptance_rate")), "Kept drafts over all drafts (discarded ones included), as vLLM and llama.cpp report it."),
        ("tokens / target pass", _fmt(_last(df, "tokens_per_pass")), f"Theory at this α and k={k}: (1−α^(k+1))/(1−α) = {_fmt(_last(df, 'theory_tokens_per_pass'))}."),
        ("speedup", speedup_text(session, run), f"Wall clock, measured, against plain decoding of the same prompt. Predicted (1−α^(k+1))/((1−α)(1+kc)): {_fmt(_last(df, 'predicted_speedup'), '.2f', '×')}."),
    ]
    cols = st.columns(columns)
    for i, (label, value, help_text) in enumerate(cells):
        cols[i % columns].metric(label, value, help=help_text)


def token_stream(session: ViewSource, run: ViewRun, legend: bool = True) -> None:
    if legend:
        st.html(legend_html())
    st.html(memo(session, f"stream:{run.label}", (len(run.records),), lambda: token_stream_html(session.prompt_texts, stream_frame(run.records, session.token_text))))
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
            st.markdown(f"**{md_text(run.label)}** · round {len(df)} · {num_generated(run)} tokens · α {_fmt(_last(df, 'alpha'))} · {_fmt(_last(df, 'tokens_per_pass'))} tokens/pass")
            st.html(token_stream_html(session.prompt_texts, stream_frame(run.records, session.token_text), show_prompt=False))


def by_head(config: RunConfig) -> bool:
    """The run drafts with Medusa heads (its DRAFTERS row drafts with "heads"), so each drafted token has a head."""
    try:
        return drafter_spec(config.drafter).lm == "heads"
    except ValueError:  # a recording of a drafter this version does not know
        return False


def by_table(config: RunConfig) -> bool:
    """The run drafts by following a table of the target's own guesses (token recycling: its DRAFTERS row drafts with
    nothing but the target's passes), so each drafted token came from a table entry."""
    try:
        return drafter_spec(config.drafter).lm == "target"
    except ValueError:  # a recording of a drafter this version does not know
        return False


def _position_label(record, position: int, token_text, heads: Sequence[int] = ()) -> str:
    info = position_info(record, position)
    if info.kind == "draft":
        mark = "✓" if info.fate == "accepted" else "✗"
        head = f" · head {heads[info.node]}" if heads else ""
        return f"{position + 1}: {visible_plain(token_text(info.drafted))} {mark}{head}"
    return f"{position + 1}: {info.kind}"


def inspector(session: ViewSource) -> None:
    """Pick a round and a position; chart p_target, q_draft and the residual there."""
    st.subheader("Round inspector")
    runs = [r for r in session.runs if r.records]
    if not runs:
        return
    run = runs[0]
    if len(runs) > 1:
        label = widgets.radio("run", [r.label for r in runs], horizontal=True, key="inspect_run", format_func=md_text)
        run = next(r for r in runs if r.label == label)
    n = len(run.records)
    left, right = st.columns([1, 3])
    with left:
        # Defaults go into the session state, not value=: a follower's page sets these keys (specviz.ui.room.follow),
        # and Streamlit warns about a widget given both.
        st.session_state.setdefault("inspect_follow", True)
        follow = widgets.toggle("follow the latest round", key="inspect_follow")
        if follow or n == 1:
            round_index = n - 1
            st.caption(f"showing round {round_index}, the latest (rounds count from 0)")
        else:
            held = st.session_state.get("inspect_round")
            if not isinstance(held, int) or isinstance(held, bool) or not (0 <= held <= n - 1):
                st.session_state["inspect_round"] = n - 1
            round_index = widgets.slider("round", 0, n - 1, key="inspect_round")
        record = run.records[round_index]
        heads = draft_heads(record) if by_head(run.config) else ()
        positions = list(range(num_positions(record)))
        rejected = [i for i in positions if position_info(record, i).fate == "rejected"]
        default = rejected[0] if rejected else positions[-1]
        labels = {i: md_text(_position_label(record, i, session.token_text, heads)) for i in positions}  # radio options are Markdown
        position = widgets.radio(
            "position in the round",
            positions,
            index=default,
            format_func=labels.__getitem__,  # plain strings: Streamlit keeps a widget's format_func after the run, and a
            key=f"inspect_pos_{run.label}_{round_index}",  # closure over the session would keep its KV caches alive too
        )
    info = position_info(record, position)
    figure = memo(session, f"inspector:{run.label}", (round_index, position),
                  lambda: freeze(figures.inspector_figure(position_frame(record, position, session.token_text), info)))  # fmt: skip
    with left:
        st.markdown(_position_story(info, session, heads))
    with right:
        st.plotly_chart(figure, width="stretch", key="inspector_chart")
        st.caption(_inspector_caption(info, record.has_q))
    if heads:
        head_drafts(record, session, heads)
    if by_table(run.config) and record.num_drafted:
        table_drafts(record, session, _newest_text(session, run.records, round_index))


def _newest_text(session: ViewSource, records: Sequence[StepRecord], round_index: int) -> str:
    """The text of the newest committed token before a round: the last one an earlier round emitted, or the prompt's."""
    earlier = [t for r in records[:round_index] for t in r.emitted]
    if earlier:
        return session.token_text(earlier[-1])
    return session.prompt_texts[-1] if session.prompt_texts else ""


def table_drafts(record: StepRecord, session: ViewSource, newest_text: str) -> None:
    """A token-recycling round's drafted tokens with the table entry that proposed each."""
    st.dataframe(
        table_entries_frame(record, session.token_text, newest_text), hide_index=True, width="stretch", key="inspector_table",
        column_config={"row": st.column_config.TextColumn("table row: the token it follows"),
                       "column": st.column_config.NumberColumn("column: the target's n-th guess (0 = its top)"),
                       "p_target": st.column_config.NumberColumn("p_target", format="%.3f")},
    )  # fmt: skip
    st.caption(
        "Which table entry proposed each drafted token: token recycling keeps, for every token the target has read, its "
        "top guesses for what follows, from the last pass that read it (the prefill, or a verify pass, rejected drafts "
        "included). A chain follows column 0 from the newest committed token; a tree also takes the next columns. The "
        "proposal is fixed before the target speaks, so the rule keeps each token with probability p_target: exact."
    )


def head_drafts(record: StepRecord, session: ViewSource, heads: Sequence[int]) -> None:
    """A Medusa round's drafted tokens with the head that proposed each and the probability it gave it."""
    st.dataframe(
        head_drafts_frame(record, session.token_text, heads), hide_index=True, width="stretch", key="inspector_heads",
        column_config={"q_draft": st.column_config.NumberColumn("the head's probability (q_draft)", format="%.3f"),
                       "p_target": st.column_config.NumberColumn("p_target", format="%.3f")},
    )  # fmt: skip
    st.caption(
        "Which Medusa head proposed each drafted token: head i reads the target's hidden state at the newest committed "
        "token and guesses the token i places ahead, without seeing the guesses before it. Its probability is its "
        "q_draft, warped like the target's (one-hot at temperature 0); the rule keeps a chain's token with min(1, p/q) "
        "and a tree's with the one-hot rule of distinct children, so the output stays the target's whatever the head said."
    )


def _inspector_caption(info, has_q: bool) -> str:
    if info.kind != "draft":
        return (
            "Only p_target here: nothing was drafted at this position, so the target's own distribution picks the token "
            "(after every draft was kept, this is the free bonus token). At temperature 0 it is one-hot on the argmax."
        )
    if has_q:
        return (
            "Blue p_target, orange q_draft, green the residual: p_target − q_draft where the target wants more, renormalised. "
            "A draft is kept when u falls below min(1, p/q) (the side gauge); after a rejection the replacement is drawn from "
            "the green bars, so it lands where the draft under-proposed."
        )
    return (
        "This drafter gives no distribution, so q_draft is one-hot on its guess: the guess is kept with probability "
        "p_target(guess), and a rejection resamples from p_target with the guess removed. At temperature 0 p_target is one-hot too."
    )


def _position_story(info, session: ViewSource, heads: Sequence[int] = ()) -> str:
    t = session.token_text
    if info.kind == "draft":
        verdict = "**kept**" if info.fate == "accepted" else "**rejected**"
        by = f"Medusa head {heads[info.node]} drafted" if heads else "Drafted"
        lines = [
            f"{by} {md_code(visible_plain(t(info.drafted)))}: p_target = {_fmt(info.p_target, '.3f')}, q_draft = {_fmt(info.q_draft, '.3f')}.",
            f"min(1, p/q) = {_fmt(info.accept_prob, '.3f')} against u = {_fmt(info.uniform, '.3f')} → {verdict}.",
        ]
        if info.next_fate == "resampled":
            lines.append(f"Resampled {md_code(visible_plain(t(info.next_token)))} from the residual.")
        return "  \n".join(lines)
    if info.next_token is None:
        return "The run stopped before this token."
    if info.kind == "bonus":
        return f"Every draft was kept, so this pass's last distribution gives a **bonus** token for free: {md_code(visible_plain(t(info.next_token)))}."
    return f"Nothing was drafted this round: a plain target step sampled {md_code(visible_plain(t(info.next_token)))}."


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
        st.plotly_chart(figs["accepted"], width="stretch", key="fig_accepted")
        if len(runs) == 1:
            st.caption("Grey: drafted this round; green: kept. A fully green bar also earns a bonus token; a short one means a rejection and a resample.")
        else:
            st.caption("Drafts kept per round by each run: the higher line gets more from each target pass.")
    with b:
        st.plotly_chart(figs["alpha"], width="stretch", key="fig_alpha")
        st.caption(
            "α is Leviathan's E[Σ min(p_target, q_draft)]: the chance a draft survives, read off the distributions. "
            "accepted/drafted counts what happened (discarded drafts count as drafted, so it sits lower). With a one-hot q, Σ min(p, q) = p_target(draft)."
        )
    c, d = st.columns(2)
    with c:
        st.plotly_chart(figs["tpp"], width="stretch", key="fig_tpp")
        st.caption("Measured tokens per target pass against (1 − α^(k+1))/(1 − α) at the running α. Rounds where the drafter had nothing to propose pull the measurement below theory.")
    with d:
        if any(measuring(session, r) for r in runs):
            st.caption(f"Speedup: {MEASURING} plain decoding of the same prompt is timed in the background, after every waiting round; the measured line grows as it catches up.")
        st.plotly_chart(figs["speedup"], width="stretch", key="fig_speedup")
        st.caption(speedup_note(session, runs))
    e, f = st.columns(2)
    with e:
        st.plotly_chart(figs["latency"], width="stretch", key="fig_latency")
        st.caption("Speculative tokens arrive in bursts: a round's tokens come together (gaps near 0 ms), then a long wait for the next round. Plain decoding pays one pass per token, evenly.")
    with f:
        st.plotly_chart(figs["progress"], width="stretch", key="fig_progress")
        st.caption("Tokens committed against decode time: the steeper line is the faster decoder.")


def _curve_figures(session: ViewSource, runs: list[ViewRun]) -> dict:
    """Every curve's figure, from the frames of this round (memoised by curves())."""
    rounds = pd.concat([run_frame(session, r) for r in runs], ignore_index=True)
    base = session.baseline.records
    latency = pd.concat([latency_frame(r.records, r.label) for r in runs] + [latency_frame(base, BASELINE_RUN)], ignore_index=True)
    progress = pd.concat([progress_frame(r.records, r.label) for r in runs] + [progress_frame(base, BASELINE_RUN)], ignore_index=True)
    figs = {
        "accepted": figures.accepted_figure(rounds), "alpha": figures.alpha_figure(rounds), "tpp": figures.tokens_per_pass_figure(rounds),
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
