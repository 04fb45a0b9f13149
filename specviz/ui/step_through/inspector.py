"""The step-through page's round inspector: one round at a time, each drafted position's story (drafted, kept or
rejected, and why, with p_target and q_draft), the table or head that proposed it, and whether a run drafts by head
(Medusa) or from a table (token recycling). Drawn from records and token texts only (step_views.ViewSource)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import streamlit as st

from specviz.config import RunConfig
from specviz.core.metrics import draft_heads
from specviz.core.records import StepRecord
from specviz.drafters.specs import drafter_spec
from specviz.ui.common import widgets
from specviz.ui.common.memo import memo
from specviz.ui.step_through.step_views import ViewSource, fmt
from specviz.viz import (
    figures,
    num_positions,
    position_frame,
    position_info,
    style,
    visible_plain,
)
from specviz.viz.frames import PositionInfo, head_drafts_frame, last_rejection_round, latest_drafting_round, table_entries_frame
from specviz.viz.markdown import md_code, md_text
from specviz.viz.style import freeze

log = logging.getLogger(__name__)


def by_head(config: RunConfig) -> bool:
    """The run drafts with Medusa heads (its DRAFTERS row drafts with "heads"), so each drafted token has a head."""
    try:
        return drafter_spec(config.drafter).source == "heads"
    except ValueError:  # a recording of a drafter this version does not know
        return False


def by_table(config: RunConfig) -> bool:
    """The run drafts by following a table of the target's own guesses (token recycling: its DRAFTERS row drafts with
    nothing but the target's passes), so each drafted token came from a table entry."""
    try:
        return drafter_spec(config.drafter).source == "target"
    except ValueError:  # a recording of a drafter this version does not know
        return False


def _position_label(record, position: int, token_text, heads: Sequence[int] = ()) -> str:
    info = position_info(record, position)
    if info.kind == "draft":
        mark = "✓" if info.fate == "accepted" else "✗"
        head = f" · head {heads[info.node]}" if heads else ""
        return f"{position + 1}: {visible_plain(token_text(info.drafted))} {mark}{head}"
    return f"{position + 1}: {info.kind}"


def _from_one(index: int) -> str:
    """A round's index as the page counts rounds (from 1)."""
    return str(index + 1)


def inspector(session: ViewSource, narrow: bool = False) -> None:
    """Pick a round and a position; chart p_target, q_draft and the residual there. narrow: the inspector sits in a
    column beside the text, so its parts stack (controls, story, then the chart at the column's full width) instead
    of a controls column beside the chart."""
    st.subheader("Round inspector")
    runs = [r for r in session.runs if r.records]
    if not runs:
        return
    run = runs[0]
    if len(runs) > 1:
        label = widgets.radio("run", [r.label for r in runs], horizontal=True, key="inspect_run", format_func=md_text)
        run = next(r for r in runs if r.label == label)
    left, right = (st.container(), st.container()) if narrow else st.columns([1, 3])
    with left:
        round_index = _pick_round(run.records)
        record = run.records[round_index]
        note = k_note(record)
        if note:
            st.caption(note)
        heads = draft_heads(record) if by_head(run.config) else ()
        positions = list(range(num_positions(record)))
        rejected = [i for i in positions if position_info(record, i).fate == "rejected"]
        default = rejected[0] if rejected else positions[-1]
        labels = {i: md_text(_position_label(record, i, session.token_text, heads)) for i in positions}  # radio options are Markdown
        position = widgets.radio(
            "position in the round",
            positions,
            index=default,
            horizontal=narrow,  # a row of short labels, wrapping, in a narrow column
            format_func=labels.__getitem__,  # plain strings: Streamlit keeps a widget's format_func after the run, and a
            key=f"inspect_pos_{run.label}_{round_index}",  # closure over the session would keep its KV caches alive too
        )
    info = position_info(record, position)
    figure = memo(session, f"inspector:{run.label}", (round_index, position),
                  lambda: freeze(figures.inspector_figure(position_frame(record, position, session.token_text), info)))  # fmt: skip
    with left:
        st.markdown(_position_story(info, session, heads))
    with right:
        st.plotly_chart(figure, width="stretch", key="inspector_chart", config={"displayModeBar": False})
        st.caption(_inspector_caption(info, record.has_q, run.config.temperature))
    if heads:
        head_drafts(record, session, heads)
    if by_table(run.config) and record.num_drafted:
        table_drafts(record, session, _newest_text(session, run.records, round_index))


def k_note(record: StepRecord) -> str | None:
    """Why k: auto chose this round's k, in one sentence, and where its costs come from (None for a fixed or adaptive
    k)."""
    if record.k_choice is None:
        return None
    source = f" Costs: {record.k_choice.source}." if record.k_choice.source else ""
    return md_text(record.k_choice.sentence() + source)


def _pick_round(records: Sequence[StepRecord]) -> int:
    """The round to inspect: the latest that drafted while following, else the round the reader holds (the "last
    rejection" button holds the newest rejection)."""
    n = len(records)
    shown = latest_drafting_round(records)  # following: the newest round with a rule to show, not a plain step
    rejection = last_rejection_round(records)
    # Defaults go into the session state, not value=: a follower's page sets these keys (specviz.ui.room.follow),
    # and Streamlit warns about a widget given both.
    st.session_state.setdefault("inspect_follow", True)
    with st.container(horizontal=True, gap="small", vertical_alignment="center"):  # wraps where it must
        follow = widgets.toggle("follow latest", key="inspect_follow", help="Show the latest round that drafted, after every Step.")
        st.button(
            "last rejection", key="inspect_last_rejection", on_click=_hold_round, args=(rejection,), disabled=rejection is None,
            help="Jump to the newest round where the rule turned a draft down: the clearest view of the rule."
            if rejection is not None else "No draft has been rejected yet.",
        )  # fmt: skip
    if follow or n == 1:
        round_index = shown
        why = "the latest that drafted" if shown == n - 1 else f"the latest that drafted (round {n} drafted nothing)"
        st.caption(f"showing round {round_index + 1}, {why}")
    else:
        held = st.session_state.get("inspect_round")
        if not isinstance(held, int) or isinstance(held, bool) or not (0 <= held <= n - 1):
            st.session_state["inspect_round"] = shown
        round_index = widgets.select_slider("round", range(n), key="inspect_round", format_func=_from_one)  # an index; shown from 1
    return round_index


def _hold_round(round_index: int | None) -> None:
    """The "last rejection" button: stop following and hold the inspector on that round (before the widgets draw)."""
    if round_index is not None:
        st.session_state["inspect_follow"] = False
        st.session_state["inspect_round"] = round_index


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


def _inspector_caption(info: PositionInfo, has_q: bool, temperature: float) -> str:
    """What to look at in the chart, in the chart's own colours and this run's temperature."""
    p_name, q_name, r_name = (style.COLOUR_NAMES[c] for c in (style.P_TARGET, style.Q_DRAFT, style.RESIDUAL))
    greedy = temperature == 0
    if info.kind != "draft":
        return (
            "Only p_target here: nothing was drafted at this position, so the target's own distribution picks the token "
            "(after every draft was kept, this is the free bonus token). "
            + ("At temperature 0 it is one-hot on the argmax." if greedy else f"At temperature {temperature:g} it is drawn from the bars.")
        )
    if has_q:
        residual = (
            f"{r_name.capitalize()} bars: the residual, p_target − q_draft where the target wants more, renormalised; after a "
            f"rejection the replacement is drawn from them, so it lands where the draft under-proposed."
            if info.residual_needed is not False
            else "No residual bars: p_target ≤ q_draft at every token here, so this draft could not be rejected and the "
            "residual was never needed this round."
        )
        one_hot = " At temperature 0 both are one-hot: a draft is kept exactly when it is the target's argmax." if greedy else ""
        return f"{p_name.capitalize()} p_target, {q_name} q_draft. A draft is kept when u falls below min(1, p/q) (the side gauge). {residual}{one_hot}"
    return (
        "This drafter gives no distribution, so q_draft is one-hot on its guess: the guess is kept with probability "
        "p_target(guess), and a rejection resamples from p_target with the guess removed."
        + (" At temperature 0 p_target is one-hot too." if greedy else "")
    )


def _position_story(info, session: ViewSource, heads: Sequence[int] = ()) -> str:
    t = session.token_text
    if info.kind == "draft":
        verdict = "**kept**" if info.fate == "accepted" else "**rejected**"
        by = f"Medusa head {heads[info.node]} drafted" if heads else "Drafted"
        lines = [
            f"{by} {md_code(visible_plain(t(info.drafted)))}: p_target = {fmt(info.p_target, '.3f')}, q_draft = {fmt(info.q_draft, '.3f')}.",
            f"min(1, p/q) = {fmt(info.accept_prob, '.3f')} against u = {fmt(info.uniform, '.3f')} → {verdict}.",
        ]
        if info.next_fate == "resampled":
            lines.append(f"Resampled {md_code(visible_plain(t(info.next_token)))} from the residual.")
        return "  \n".join(lines)
    if info.next_token is None:
        return "The run stopped before this token."
    if info.kind == "bonus":
        return f"Every draft was kept, so this pass's last distribution gives a **bonus** token for free: {md_code(visible_plain(t(info.next_token)))}."
    return f"Nothing was drafted this round: a plain target step sampled {md_code(visible_plain(t(info.next_token)))}."
