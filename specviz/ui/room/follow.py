"""Following the presenter, the page's side (the plain logic is specviz.workshop.presentation).

While a presentation is live every other session's page shows *Follow the presenter* (`follow`, on for a fresh
session) and, following, draws the presenter's saved run as a replay at the presenter's round and selected round, with
its own controls read-only (FollowStage, which looks the presentation up each time the page's stage fragment runs).
When the presentation moves, the process's watcher (specviz.ui.room.push) reruns each follower's stage fragment from
the server: no browser timer, no sidebar redrawn. Where Streamlit's internals for that are missing, a small fragment
(watch) reads the presentation file every FOLLOW_EVERY_S and reruns the page instead; with the watcher it stays as a
slow safety net (SAFETY_EVERY_S). Neither takes the model. Both let a participant's Step in flight in this process go
first, for a bounded time (the watcher MAX_DEFER_S, the poll one tick); long jobs and background baselines never hold
them up. Nothing here reads another session's state. The same poll carries the presenter's inspected round and
heartbeat to the room, and a move the store did not take (specviz.ui.room.present.move). While the room's store is
unreachable a follower keeps the view it drew and says so; the poll reruns the page when the store comes and goes.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

import streamlit as st

from specviz.ui.common import widgets
from specviz.ui.common.keys import PRESENTING_KEY
from specviz.ui.common.sessions import session_id_now
from specviz.ui.room import push
from specviz.ui.room.fork import VIEW_KEY, on_fork
from specviz.ui.room.present import (
    PENDING_KEY,
    SEEN_KEY,
    is_presenter,
    live,
    move,
    presenting_on,
    selected_round,
    steps_in_flight,
    store,
    unreachable,
    unreachable_notice,
)
from specviz.ui.room.saved_runs import run_store, save_run
from specviz.ui.step_through.replay import ReplaySession
from specviz.ui.step_through.session import page_state
from specviz.viz.markdown import md_text
from specviz.workshop.presentation import Presentation, PresentationStore
from specviz.workshop.resources import cached, singleton
from specviz.workshop.saved_runs import SavedRun, SavedRunError
from specviz.workshop.store import Store

log = logging.getLogger(__name__)

FOLLOW_EVERY_S = 0.5  # the page's own poll while presenting, or following where the server cannot push
IDLE_EVERY_S = 2.0  # its poll otherwise: noticing that a presentation started or stopped
SAFETY_EVERY_S = 5.0  # a follower's poll when the server pushes its redraws (specviz.ui.room.push): in case one was lost
FOLLOWED_KEY = "specviz_followed"  # the id of the presentation this page last saw live (it is told when it ends)
WAITED_KEY = "specviz_present_waited"  # the page's last poll let a Step in flight go first (the next one looks)
DRAWN_UNREACHABLE_KEY = "specviz_present_drawn_unreachable"  # the page was drawn while the store was unreachable


def page_key(p: Presentation | None, mode: str) -> tuple | None:
    """What of the presentation a page in this mode draws: the watcher reruns the page when it changes."""
    if p is None:
        return None
    return {"presenting": (p.id, p.holder), "following": (p.id, p.version)}.get(mode, (p.id, p.show_board))


def mark_seen(p: Presentation | None, mode: str) -> None:
    st.session_state[SEEN_KEY] = (mode, page_key(p, mode))
    st.session_state[DRAWN_UNREACHABLE_KEY] = unreachable()


def _presented(p: Presentation) -> SavedRun:
    """The presented run as saved at p's version. Raises SavedRunError. The session keeps a reference to the one
    copy this process loaded (for the fork button), never a copy of its own."""
    view = st.session_state.get(VIEW_KEY)
    if view is not None and view[:2] == (p.id, p.version):
        return view[2]
    saved = _load_presented(p.run, p.id, p.version)
    st.session_state[VIEW_KEY] = (p.id, p.version, saved)
    return saved


@cached(max_entries=4)
def _load_presented(run_token: str, presentation_id: str, version: int) -> SavedRun:
    """The presented run at one version, read and validated once per process for every follower, who all keep a
    reference to this one copy (read-only: a fork copies what it continues). Errors are not cached: the next look
    tries again."""
    runs = run_store()
    if runs is None:
        raise SavedRunError("this server's run directory is not set up")
    return runs.load(run_token)


@cached(max_entries=4, key=lambda presentation_id, version, saved: (presentation_id, version, saved.num_rounds))
def _shared_view(presentation_id: str, version: int, saved: SavedRun) -> ReplaySession:
    """The presented run at one version as one replay view for every follower in this process. It is the presenter's
    run, which every follower may see, and a follower's page only reads it (FollowStage steps nothing), so the frames
    and figures memoised on it (specviz.ui.common.memo) are built once per presenter Step, not once per follower: with 15
    followers on a replica, building them per follower was most of the redraw (py-spy, docs/rooms.md)."""
    return ReplaySession.open(saved.recording, "the presenter's run", shown=saved.num_rounds)


def follow_section(p: Presentation | None) -> FollowStage | None:
    """The *Follow the presenter* toggle and *Try it yourself from here*; returns the stage that draws the presenter's
    run while this page follows it (None: the page draws its own run). Says when the presentation ended or was
    taken over."""
    if not presenting_on():
        st.session_state[SEEN_KEY] = None
        return None
    if is_presenter(p):
        mark_seen(p, "presenting")
        return None
    if p is None:
        if st.session_state.pop(FOLLOWED_KEY, None) is not None:
            st.info("The presenter stopped presenting. Your own run is below, as you left it.", icon="🎓")
        mark_seen(p, "idle")
        return None
    st.session_state[FOLLOWED_KEY] = p.id
    follow = widgets.toggle("Follow the presenter", value=True, key="follow", help="Draws the presenter's run as it goes, round by round. Off: your own run.")
    if not follow:
        mark_seen(p, "idle")
        return None
    mark_seen(p, "following")
    try:
        _presented(p)  # read once here, so a run that cannot be shown is said before the stage draws
    except SavedRunError as exc:
        st.warning(f"The presenter's run cannot be shown ({md_text(exc)}). You keep your own run below.", icon="🎓")
        return None
    st.button("Try it yourself from here", key="fork", on_click=on_fork, help="Your own copy of the presenter's run at this round, with the presenter's settings: Step it, change it, replay it.")
    return FollowStage(p.id)


def _show_round(selected: int | None) -> None:
    """The follower's inspector at the presenter's round (None: the latest), set before the inspector draws."""
    wanted = {"inspect_follow": selected is None} | ({} if selected is None else {"inspect_round": selected})
    for key, value in wanted.items():
        if widgets.held(key) != value:
            st.session_state[key] = value


def _redraw_lock() -> threading.Lock:
    """One follower's stage draws at a time in this process (see one_at_a_time): one lock per process."""
    return singleton("follower-redraw-lock", threading.Lock)


@contextlib.contextmanager
def one_at_a_time(stage: object) -> Iterator[None]:
    """Around a stage's drawing: followers' redraws take turns in this process. A Step reaches every follower at
    once, and 15 pages drawn side by side on one core all finished at the end (2-3 s, the GIL handed round 15
    threads and the event loop); one after another, the first is drawn at once and the last no later. Other
    stages draw as they are."""
    if not isinstance(stage, FollowStage):
        yield
        return
    with _redraw_lock():
        yield


class FollowStage:
    """The presenter's run, drawn round for round: no model, and the controls are read-only. The page's stage
    fragment keeps this object between its reruns, so it looks the presentation up again each time the fragment
    draws (notices(), before the session is read): a rerun pushed after a Step draws the new round."""

    read_only = True

    def __init__(self, presentation_id: str) -> None:
        self.presentation_id = presentation_id
        self._session: ReplaySession | None = None

    def _look(self) -> ReplaySession:
        """The presented run as it is now, shared by every follower in this process; the whole page reruns when the
        presentation is gone, another's, or its run cannot be read (follow_section then says so)."""
        p = live()
        if unreachable() and self._session is not None:
            return self._session  # the view this page drew, until the store is back (notices() says so)
        if p is None or p.id != self.presentation_id:
            st.rerun(scope="app")
        try:
            saved = _presented(p)
        except SavedRunError:
            if unreachable() and self._session is not None:
                return self._session
            st.rerun(scope="app")
        session = _shared_view(p.id, p.version, saved)
        _show_round(p.selected_round if p.selected_round is not None and p.selected_round < session.num_rounds else None)
        mark_seen(p, "following")
        _register(p)
        self._session = session
        return session

    @property
    def session(self) -> ReplaySession:
        return self._session if self._session is not None else self._look()

    @property
    def playing(self) -> bool:
        return False

    @playing.setter
    def playing(self, value: bool) -> None:
        pass  # a follower does not play the presenter's run

    def ready(self) -> bool:
        return False  # nothing to step: a click (even from a raw client) does nothing

    def notices(self) -> None:
        session = self._look()
        if unreachable():
            unreachable_notice(None, following=True)
        st.info(f"Following the presenter (round {session.num_rounds}): your controls are read-only while you follow. **Try it yourself from here** makes it your own run; turning **Follow the presenter** off shows yours.", icon="🎓")

    def step(self) -> bool:
        return False

    def run_to_end(self, progress: Callable[[object], None]) -> None:
        pass

    def reset(self) -> None:
        pass


def watch() -> None:
    """Keep the page up to date with the presentation (see _key) with a poll of its own: a follower's stage is
    redrawn from the server when it can be (specviz.ui.room.push), so its poll is only a slow safety net; the presenter's
    polls at FOLLOW_EVERY_S (its tick carries the round its inspector shows to the room); any other page at
    IDLE_EVERY_S, to notice a presentation start or stop."""
    seen = st.session_state.get(SEEN_KEY)
    if seen is None:
        _forget()
        return
    mode = seen[0]
    if mode != "following":
        _forget()
    if mode == "following":  # registered with the watcher by its stage fragment (FollowStage), if there is one
        every = SAFETY_EVERY_S if _watcher() is not None else FOLLOW_EVERY_S
    else:
        every = FOLLOW_EVERY_S if mode == "presenting" else IDLE_EVERY_S
    st.fragment(_tick, run_every=every)()


def _process_watcher(store: Store) -> push.PresentationWatcher:
    """The one watcher of this process's room store (specviz.ui.room.push): made once per process, its thread started
    once, never again (a process singleton, which no client message can clear). It waits for Steps only."""

    def build() -> push.PresentationWatcher:
        room = PresentationStore(store)
        wait = room.watch().wait if room.announced else None  # Redis: woken by pub/sub; a run directory: a poll of the stamp
        return push.PresentationWatcher(room.stamp, room.read, page_key, steps_in_flight, wait=wait)

    return singleton(("presentation-watcher", store.description), build)


def _watcher() -> push.PresentationWatcher | None:
    """The process's watcher, or None where pages must poll (no run directory, or no Streamlit server internals)."""
    runs = run_store()
    if runs is None or not push.available():
        return None
    return _process_watcher(runs.store)


def _register(p: Presentation) -> bool:
    """Tell the process's watcher which version of p this follower's stage fragment drew (True), or False where
    the page must poll."""
    watcher, session_id, fragment_id = _watcher(), session_id_now(), push.current_fragment_id()  # the stage fragment's
    if watcher is None or session_id is None or fragment_id is None:
        return False
    watcher.register(session_id, push.Registration(page_key(p, "following"), p.id, fragment_id))
    return True


def _forget() -> None:
    watcher, session_id = _watcher(), session_id_now()
    if watcher is not None and session_id is not None:
        watcher.forget(session_id)


def _tick() -> None:
    """One look at the presentation file (no model, no other session); see look(). The presenter's tick carries
    the round its inspector shows and, now and then, the heartbeat that keeps the presentation from ending."""
    seen = st.session_state.get(SEEN_KEY)
    verdict, p = look(seen, live, waited=bool(st.session_state.get(WAITED_KEY)))
    st.session_state[WAITED_KEY] = verdict == "skip" and seen is not None
    if verdict == "moved" or (verdict == "same" and unreachable() != bool(st.session_state.get(DRAWN_UNREACHABLE_KEY))):
        st.rerun(scope="app")  # what it draws changed, or the store went away or came back
    mine = st.session_state.get(PRESENTING_KEY)
    if verdict == "same" and seen[0] == "presenting" and p is not None and mine is not None:
        room = store()
        if room is not None:
            session = page_state().session
            if st.session_state.get(PENDING_KEY) and session is not None:
                save_run(session)  # the Steps the store missed, saved before the room is moved on to them
            move(room, mine, selected_round=selected_round())  # the presenter's inspector (and any move not yet taken)
            try:
                room.heartbeat(*mine)  # written only when due (presentation.heartbeat_every_s)
            except OSError as exc:
                log.debug("room: no heartbeat: %s", exc)  # move() said what the presenter needs to know


def look(seen: tuple | None, read: Callable[[], Presentation | None], in_flight: Callable[[], int] = steps_in_flight, waited: bool = False) -> tuple[str, Presentation | None]:
    """The page's poll's decision: "skip" (nothing watched; or a participant's Step is in flight in this process and
    the last poll did not wait already: the Step goes first, for one tick at most), "moved" (what this page draws
    changed: rerun it) or "same"; with the presentation read (None when skipped)."""
    if seen is None or (in_flight() and not waited):
        return "skip", None
    mode, key = seen
    p = read()
    return ("moved" if page_key(p, mode) != key else "same"), p
