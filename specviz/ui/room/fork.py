"""Forking the presenter's run, the page's side (the plain logic is specviz.workshop.presentation).

*Try it yourself from here* (`fork`, drawn while following: specviz.ui.room.follow) turns the follower's view into
their own live run (a new `?run=` token, the presenter's settings in the sidebar), resumed exactly
(specviz.ui.room.saved_runs.rebuild_session). Each of the fork's Steps that ran a round adds an anonymous point to the
presentation's board (after_round: one per round; a participant who forks again keeps their fork's id, so the board
shows their latest try), which the presenter sees, and the room when the presenter turns on *Show the board to the
room* (`show_board`: specviz.ui.room.board). A write the disk refuses (full) says so.
"""

from __future__ import annotations

import logging
import time

import streamlit as st

from specviz.core.metrics import run_metrics
from specviz.ui.common.errors import friendly_error
from specviz.ui.room.present import store
from specviz.ui.room.saved_runs import rebuild_session, save_run
from specviz.ui.step_through.session import PageState, StepSession
from specviz.ui.step_through.sidebar import seed_from_run
from specviz.viz.markdown import md_text
from specviz.workshop.presentation import BoardPoint, new_id
from specviz.workshop.saved_runs import SavedRunError, write_problem

log = logging.getLogger(__name__)

VIEW_KEY = "specviz_follow_view"  # (presentation id, version, SavedRun) the follower's view was drawn from: what a fork copies
FORK_KEY = "specviz_fork"  # {"id": presentation id, "fork": anonymous id, "token": the fork's run token, "rounds": its latest point's}
PENDING_FORK_KEY = "specviz_pending_fork"  # the SavedRun a fork click asked for (made in the next run)


def on_fork() -> None:
    """Seed the sidebar with the presenter's settings and ask for the fork (made by make_pending_fork)."""
    view = st.session_state.get(VIEW_KEY)
    if view is None:
        return
    presentation_id, _, saved = view
    rec = saved.recording
    seed_from_run(rec.runs[0].config, rec.prompt, rec.runs[1].config if len(rec.runs) > 1 else None)
    st.session_state["follow"] = False
    st.session_state[PENDING_FORK_KEY] = (presentation_id, saved)


def make_pending_fork(state: PageState) -> None:
    """The fork a click asked for: the presenter's run at the round the follower saw, as this session's own live run
    under a new token, resumed exactly (generators, k, records). Its Steps feed the board."""
    pending = st.session_state.pop(PENDING_FORK_KEY, None)
    if pending is None:
        return
    presentation_id, saved = pending
    try:
        session = rebuild_session(saved)
    except SavedRunError as exc:
        st.warning(md_text(str(exc)), icon="🎓")
        return
    except Exception as exc:  # a model that will not load, a queue timeout: the follower keeps their own run
        st.warning(f"Your copy could not be made: {md_text(friendly_error(exc))}", icon="🎓")
        return
    state.session, state.playing = session, False
    save_run(session)  # a new token: the presenter's file is never written by a follower
    if session.run_token is not None:
        before = st.session_state.get(FORK_KEY)
        fork_id = before["fork"] if before is not None and before["id"] == presentation_id else new_id()  # one point per participant
        st.session_state[FORK_KEY] = {"id": presentation_id, "fork": fork_id, "token": session.run_token, "rounds": session.num_rounds}
    st.success(f"Your own copy of the presenter's run at round {session.num_rounds}: **Step** continues it exactly as the presenter's would; change the sidebar and **Reset** to try your own settings.", icon="🎓")


def after_round(session: StepSession) -> None:
    """After a Step that ran a round (and was saved): a fork adds its board point, at most one per round it ran."""
    room = store()
    if room is None:
        return
    fork = st.session_state.get(FORK_KEY)
    if fork is None or fork["token"] != session.run_token or session.num_rounds <= fork.get("rounds", -1):
        return
    try:
        live = room.add_point(fork["id"], board_point(fork["fork"], session))
    except OSError as exc:
        log.warning("room: could not add a board point: %s", exc)
        st.warning(f"The room board did not get this round: {md_text(write_problem(exc))}.", icon="🎓")
        return
    if live:
        fork["rounds"] = session.num_rounds
    else:
        st.session_state.pop(FORK_KEY, None)  # the presentation ended: no more points


def board_point(fork_id: str, session: StepSession) -> BoardPoint:
    """The fork's results so far (run A's, specviz.core.metrics): no prompt, no text."""
    run = session.runs[0]
    m = run_metrics(run.records, session.baseline.records)  # no speedup past an unfinished baseline's end (BaselineClock)
    config = run.config
    return BoardPoint(fork_id, config.drafter, config.num_draft_tokens, config.temperature, m.rounds, m.alpha, m.tokens_per_target_pass, m.speedup, time.time())
