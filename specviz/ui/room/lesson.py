"""The lesson's tasks on the page (docs/lesson-45min.md; the table is specviz.workshop.lesson.TASKS).

checklist(page) draws the page's task as a folded expander of steps to tick; the ticks live in this session
(TICKS_KEY), so they survive moving between pages. While the room has a live presentation, the tasks this session
has finished are written to the presentation's marks as one anonymous entry per session (a digest of a random
secret the session keeps), written again only when they change; board_counts draws the room's counts on the board.
A write the room's store did not take (unreachable, a full disk) is tried again on the page's next run: the ticks stay.
"""

from __future__ import annotations

import logging
import secrets
from pathlib import Path

import streamlit as st

from specviz.ui.common import widgets
from specviz.ui.room.present import live, unreachable
from specviz.ui.room.saved_runs import run_store
from specviz.workshop.lesson import TASKS, LessonMarks, LessonTask, session_digest, tasks_on
from specviz.workshop.saved_runs import write_problem
from specviz.workshop.store import StoreUnavailable

log = logging.getLogger(__name__)

TICKS_KEY = "specviz_lesson_ticks"  # {task number: frozenset of ticked step indexes}
SECRET_KEY = "specviz_lesson_secret"  # this session's random secret; the marks hold only its digest
RECORDED_KEY = "specviz_lesson_recorded"  # (presentation id, frozenset of finished tasks) last written
COUNTS_KEY = "specviz_lesson_counts"  # (presentation id, the marks' stamp, counts): board_counts' cache


def _ticks() -> dict[int, frozenset[int]]:
    ticks = st.session_state.get(TICKS_KEY)
    if not isinstance(ticks, dict):
        ticks = st.session_state[TICKS_KEY] = {}
    return ticks


def _step_key(task: LessonTask, index: int) -> str:
    return f"lesson_task{task.number}_step{index}"


def _on_tick(task: LessonTask, index: int) -> None:
    ticks = _ticks()
    done = set(ticks.get(task.number, ()))
    if st.session_state.get(_step_key(task, index)) is True:
        done.add(index)
    else:
        done.discard(index)
    ticks[task.number] = frozenset(done)


def finished_tasks() -> frozenset[int]:
    """The tasks this session ticked every step of."""
    ticks = _ticks()
    return frozenset(t.number for t in TASKS if len(ticks.get(t.number, ())) == len(t.steps))


def checklist(page_file: str) -> None:
    """This page's lesson task as a folded checklist ("Lesson task 2 of 5"), then this session's finished tasks
    written to the room's marks when they changed. page_file: the page's __file__."""
    ticks = _ticks()
    for task in tasks_on(f"pages/{Path(page_file).name}"):
        with st.expander(f"📋 Lesson task {task.number} of {len(TASKS)}: {task.title}"):
            for index, step in enumerate(task.steps):
                key = _step_key(task, index)
                if key not in st.session_state:  # back on this page: the widget starts from this session's ticks
                    st.session_state[key] = index in ticks.get(task.number, ())
                widgets.checkbox(step, key=key, on_change=_on_tick, args=(task, index))
            if task.number in finished_tasks():
                st.caption("Done. The room board counts you among those who finished this task (anonymously: no name, no address).")
    _record()


def _record() -> None:
    """Write this session's finished tasks to the live presentation's marks, when they differ from what was written."""
    finished = finished_tasks()
    recorded = st.session_state.get(RECORDED_KEY)
    if not finished and recorded is None:
        return  # nothing to count and nothing to take back: no file read
    p, runs = live(), run_store()
    if p is None and unreachable():
        st.caption("The room board could not count this yet: the room's store is unreachable. Your ticks stay here and are counted when it works again.")
        return
    if p is None or runs is None:
        return
    if recorded == (p.id, finished):
        return
    secret = st.session_state.setdefault(SECRET_KEY, secrets.token_urlsafe(16))
    try:
        fitted = LessonMarks(runs.store).record(p.id, session_digest(secret), finished)
    except OSError as exc:
        log.warning("lesson: could not record a task: %s", exc)
        st.caption(f"The room board could not count this yet: {write_problem(exc)}. Your ticks stay here and are counted when it works again.")
        return
    st.session_state[RECORDED_KEY] = (p.id, finished)
    if not fitted:
        st.caption("The room board is full for this task; your tick stays on this page.")


def board_counts(presentation_id: str) -> None:
    """The room's lesson progress on the board: how many sessions finished each task (counts only)."""
    runs = run_store()
    if runs is None:
        return
    marks = LessonMarks(runs.store)
    cached = st.session_state.get(COUNTS_KEY)
    try:
        stamp = marks.stamp(presentation_id)
        if not (isinstance(cached, tuple) and cached[:2] == (presentation_id, stamp)):
            cached = (presentation_id, stamp, marks.counts(presentation_id) if stamp is not None else {t.number: 0 for t in TASKS})
            st.session_state[COUNTS_KEY] = cached
    except StoreUnavailable:
        if not (isinstance(cached, tuple) and cached[0] == presentation_id):
            return  # nothing read yet: the board says the store is unreachable
    counts = cached[2]
    if not any(counts.values()):
        st.caption("Lesson tasks (docs/lesson-45min.md): nobody has ticked every step of one yet.")
        return
    st.markdown("**Lesson tasks finished** (participants who ticked every step; counts only, anonymous)")
    for col, task in zip(st.columns(len(TASKS)), TASKS):
        col.metric(f"task {task.number}", counts.get(task.number, 0), help=task.title)
