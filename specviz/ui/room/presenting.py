"""The room follows the teacher, the page's side (the plain logic is specviz.workshop.presentation).

Presenting: the sidebar's *Present to the room* expander takes the owner's presenter key (key `present_key`, a
password field emptied as soon as it is read) and *Present this run* (`present`) makes this session's saved run the
room's presentation; *Stop presenting* ends it. After each of the presenter's Steps the run is saved (as every run
is) and the presentation's round and version move on (after_round). While someone else's presentation is live, the
key takes it over (its board and followers stay, unless *Start a new board* is ticked: a presenter who reloaded
their page reclaims it so, with their restored run) or stops it (*Stop the presentation*, `stop_with_key`: an
orphan nobody presents any more). Every try at the key goes through the room's KeyGuard (per client address and
for the whole room, shared by the replicas: specviz.workshop.presenter_key); a key set too weak turns presenting
off. The presenter's page writes a heartbeat now and then; without it the presentation ends by itself after the
owner's SPECVIZ_PRESENTATION_IDLE_MINUTES.

Following: while a presentation is live every other session's page shows *Follow the presenter* (`follow`, on for
a fresh session) and, following, draws the presenter's saved run as a replay at the presenter's round and selected
round, with its own controls read-only (FollowStage, which looks the presentation up each time the page's stage
fragment runs). When the presentation moves, the process's watcher (specviz.ui.room.push) reruns each follower's stage
fragment from the server: no browser timer, no sidebar redrawn. Where Streamlit's internals for that are missing,
a small fragment (watch) reads the presentation file every FOLLOW_EVERY_S and reruns the page instead; with the
watcher it stays as a slow safety net (SAFETY_EVERY_S). Neither takes the model. Both let a participant's Step in
flight in this process go first, for a bounded time (the watcher MAX_DEFER_S, the poll one tick); long jobs and
background baselines never hold them up. Nothing here reads another session's state.

Forking: *Try it yourself from here* (`fork`) turns the follower's view into their own live run (a new `?run=`
token, the presenter's settings in the sidebar), resumed exactly (specviz.ui.room.saved_runs.rebuild_session). Each of
the fork's Steps that ran a round adds an anonymous point to the presentation's board (one per round; a participant
who forks again keeps their fork's id, so the board shows their latest try), which the presenter sees, and the room
when the presenter turns on *Show the board to the room* (`show_board`). A write the disk refuses (full) says so.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator

import streamlit as st

from specviz.core.metrics import run_metrics
from specviz.drafters.specs import short_name
from specviz.ui.common import widgets
from specviz.ui.common.access import presenter_key_setting, quiet_policy, session_id_now
from specviz.ui.common.client import current_client
from specviz.ui.common.keys import PRESENTING_KEY
from specviz.ui.room import push
from specviz.ui.room.saved_runs import rebuild_session, run_store, save_run
from specviz.ui.step_through.replay import ReplaySession
from specviz.ui.step_through.session import PageState, StepSession, friendly_error, page_state
from specviz.ui.step_through.sidebar import seed_from_run
from specviz.viz.board import board_figure, board_frame, board_table
from specviz.viz.markdown import md_text
from specviz.workshop.presentation import BoardPoint, Presentation, PresentationStore, new_id
from specviz.workshop.presenter_key import KeyGuard, Verdict, key_weakness
from specviz.workshop.resources import cached, singleton
from specviz.workshop.saved_runs import SavedRun, SavedRunError, write_problem
from specviz.workshop.serving import turns_in_flight

log = logging.getLogger(__name__)

FOLLOW_EVERY_S = 0.5  # the page's own poll while presenting, or following where the server cannot push
IDLE_EVERY_S = 2.0  # its poll otherwise: noticing that a presentation started or stopped
SAFETY_EVERY_S = 5.0  # a follower's poll when the server pushes its redraws (specviz.ui.room.push): in case one was lost
BOARD_EVERY_S = 2.0
# PRESENTING_KEY (specviz.ui.common.keys): (presentation id, holder) of the presentation this session presents
FOLLOWED_KEY = "specviz_followed"  # the id of the presentation this page last saw live (it is told when it ends)
SEEN_KEY = "specviz_present_seen"  # what the page drew of the presentation (the watcher compares)
VIEW_KEY = "specviz_follow_view"  # (presentation id, version, SavedRun) the follower's view was drawn from
FORK_KEY = "specviz_fork"  # {"id": presentation id, "fork": anonymous id, "token": the fork's run token, "rounds": its latest point's}
PENDING_FORK_KEY = "specviz_pending_fork"  # the SavedRun a fork click asked for (made in the next run)
BOARD_CACHE_KEY = "specviz_board_points"  # (presentation id, the board file's size and mtime, its points, waited): board_cache
MESSAGE_KEY = "specviz_present_message"  # (kind, text) a callback left for the page
WAITED_KEY = "specviz_present_waited"  # the page's last poll let a Step in flight go first (the next one looks)
WEAK_KEY_TEXT = (
    "Presenting is off on this server: the presenter key set here is too weak to keep the room's presentation safe. "
    "The owner sets a stronger one (SPECVIZ_PRESENTER_KEY or presenter_key in the [specviz] secrets table: {why}), or "
    "unsets it and lets `python -m specviz room` make one."
)


def store() -> PresentationStore | None:
    """The room's presentation, ending by itself after the owner's presentation idle time."""
    runs = run_store()
    return None if runs is None else PresentationStore(runs.root, idle_s=quiet_policy().presentation_idle_minutes * 60)


def presenting_on() -> bool:
    """The owner set a presenter key strong enough to use (a weak one is logged once, and said in the sidebar)."""
    key = presenter_key_setting()
    if key is None:
        return False
    weakness = key_weakness(key)
    if weakness is not None:
        _log_weak_key(weakness)
        return False
    return True


@functools.cache
def _log_weak_key(why: str) -> None:
    log.warning("presenting is off: the presenter key set on this server is too weak (%s)", why)  # never the key


def live() -> Presentation | None:
    room = store()
    return None if room is None else room.read()


def current() -> Presentation | None:
    """The live presentation, at the top of the page; a presenter whose presentation is gone or another's is told."""
    p = live()
    if st.session_state.get(PRESENTING_KEY) is not None and not _presenting(p):
        if p is None:  # stopped with the key, ended by itself, or the run directory was cleared
            st.session_state.pop(PRESENTING_KEY, None)
            _say("info", "Your presentation ended: someone stopped it with the presenter key, or this page was away for longer than the server's presentation idle time.")
        else:
            _taken_over()
    return p


def _say(kind: str, text: str) -> None:
    st.session_state[MESSAGE_KEY] = (kind, text)


def _presenting(p: Presentation | None) -> bool:
    return p is not None and st.session_state.get(PRESENTING_KEY) == (p.id, p.holder)


# --- presenting ------------------------------------------------------------------------------------------------


def _wait(seconds: float) -> str:
    minutes, secs = divmod(math.ceil(seconds), 60)
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


def _refusal(verdict: Verdict) -> tuple[str, str]:
    """What the page says about a try at the key that did not succeed."""
    wait = ""
    if verdict.wait_s > 0:
        who = "from your address" if verdict.locked == "client" else "in this room"
        wait = f" Too many wrong keys {who}: wait {_wait(verdict.wait_s)} before trying again (no key is checked until then)."
    return {
        "off": ("error", "Presenting is off on this server (the owner sets a presenter key)."),
        "weak": ("error", WEAK_KEY_TEXT.format(why=key_weakness(presenter_key_setting() or "") or "")),
        "empty": ("error", "Type the presenter key first."),
        "locked": ("error", wait.strip()),
        "wrong": ("error", "That is not the presenter key." + wait),
    }[verdict.outcome]


def key_given(widget: str = "present_key", say: Callable[[str, str], None] | None = None) -> bool:
    """The key typed in the password field `widget`, tried once through the room's KeyGuard (every replica's wrong
    keys count, per client address and for the room) and cleared from session state before anything else happens.
    A refusal is said with say(kind, text) (default: the sidebar's message). Every page that takes the key uses this."""
    say = say or _say
    given = st.session_state.get(widget, "")
    st.session_state[widget] = ""
    runs = run_store()
    if runs is None:
        say("error", "Presenting needs this server's run directory, and it is not set up.")
        return False
    verdict = KeyGuard(runs.root).attempt(given, presenter_key_setting(), current_client().address)
    if verdict.outcome == "ok":
        return True
    if verdict.outcome == "locked":
        log.debug("room: a presenter key was not checked (locked out)")  # never the key itself
    say(*_refusal(verdict))
    return False


def _on_present() -> None:
    """Present this session's run: a new presentation, or the live one taken over (its board and followers stay
    unless a new board was asked for; a presenter who reloaded reclaims it so)."""
    new_board = bool(st.session_state.get("present_new_board"))
    st.session_state["present_new_board"] = False
    if not key_given():
        return
    session, room = page_state().session, store()
    if session is None or session.run_token is None or room is None:
        _say("warning", "Step once first: the room follows a saved run, and this session has none yet.")
        return
    try:
        presentation, before = room.start(session.run_token, session.num_rounds, new_board=new_board)
    except OSError as exc:
        log.warning("room: could not start a presentation: %s", exc)
        _say("error", f"The presentation could not be started: {write_problem(exc)}.")
        return
    st.session_state[PRESENTING_KEY] = (presentation.id, presentation.holder)
    st.session_state[SEEN_KEY] = None
    if before is None:
        said = "You are presenting this run: the room follows each Step."
    elif before.id == presentation.id:
        said = "You are presenting this run: you took over the room's presentation, with its board and its followers."
    else:
        said = "You are presenting this run on a new board: the previous presentation and its board ended."
    _say("success", said)


def _on_stop() -> None:
    room, mine = store(), st.session_state.pop(PRESENTING_KEY, None)
    try:
        if room is not None and mine is not None and room.stop(*mine):
            _say("info", "You stopped presenting; the room is back on its own runs.")
    except OSError as exc:
        st.session_state[PRESENTING_KEY] = mine
        _say("error", f"The presentation could not be stopped: {write_problem(exc)}.")


def _on_stop_with_key() -> None:
    """Stop the live presentation, whoever presents it (an orphan whose presenter's page is gone)."""
    if not key_given():
        return
    room = store()
    p = None if room is None else room.read()
    if p is not None and room.stop(p.id):
        _say("info", "You stopped the room's presentation; the room is back on its own runs.")
    else:
        _say("info", "No presentation is live now.")


def _on_show_board() -> None:
    room, mine = store(), st.session_state.get(PRESENTING_KEY)
    if room is not None and mine is not None:
        try:
            room.update(*mine, show_board=bool(st.session_state.get("show_board")))
        except OSError as exc:
            _say("error", f"The room's presentation could not be changed: {write_problem(exc)}.")


def sidebar_section(p: Presentation | None) -> None:
    """The *Present to the room* expander (in the sidebar)."""
    key = presenter_key_setting()
    with st.sidebar, st.expander("Present to the room", expanded=_presenting(p)):
        message = st.session_state.pop(MESSAGE_KEY, None)
        if message is not None:
            getattr(st, message[0])(md_text(message[1]))
        if key is None:
            st.caption("Presenting is off on this server: the owner turns it on with a presenter key (SPECVIZ_PRESENTER_KEY, or presenter_key in the [specviz] secrets table).")
            return
        if not presenting_on():
            st.warning(md_text(WEAK_KEY_TEXT.format(why=key_weakness(key))))
            return
        if _presenting(p):
            st.caption("You are presenting: the room follows each Step, and sees the round your inspector shows.")
            widgets.toggle("Show the board to the room", value=p.show_board, key="show_board", on_change=_on_show_board)
            st.button("Stop presenting", key="stop_present", on_click=_on_stop)
            return
        if p is not None:
            st.caption(
                "Someone is presenting now. With the key, *Present this run* takes the presentation over: the room keeps "
                "its board and its followers, and follows your run (a presenter who reloaded the page takes it back so). "
                "*Stop the presentation* ends it."
            )
        widgets.text_input("Presenter key", key="present_key", type="password", autocomplete="off")
        if p is not None:
            widgets.checkbox("Start a new board", key="present_new_board", help="The previous presentation ends with its board; your run starts a new one.")
        st.button("Present this run", key="present", on_click=_on_present)
        if p is not None:
            st.button("Stop the presentation", key="stop_with_key", on_click=_on_stop_with_key)


def after_round(session: StepSession) -> None:
    """After a Step that ran a round (and was saved): the presenter's presentation moves on; a fork adds its board
    point, at most one per round it ran."""
    room = store()
    if room is None:
        return
    mine = st.session_state.get(PRESENTING_KEY)
    if mine is not None and session.run_token is not None:
        try:
            moved = room.update(*mine, run=session.run_token, round=session.num_rounds, selected_round=_selected_round())
        except OSError as exc:
            log.warning("room: could not move the presentation on: %s", exc)
            st.warning(f"The room did not see this round: {md_text(write_problem(exc))}.", icon="🎓")
        else:
            if moved is None:
                _taken_over()
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


def _selected_round() -> int | None:
    """The round the presenter's inspector shows; None when it follows the latest."""
    if st.session_state.get("inspect_follow", True):
        return None
    value = widgets.held("inspect_round")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _taken_over() -> None:
    st.session_state.pop(PRESENTING_KEY, None)
    _say("warning", "Someone took over the room's presentation with the presenter key (or it ended): you are no longer presenting.")


def board_point(fork_id: str, session: StepSession) -> BoardPoint:
    """The fork's results so far (run A's, specviz.core.metrics): no prompt, no text."""
    run = session.runs[0]
    m = run_metrics(run.records, session.baseline.records)  # no speedup past an unfinished baseline's end (BaselineClock)
    config = run.config
    return BoardPoint(fork_id, config.drafter, config.num_draft_tokens, config.temperature, m.rounds, m.alpha, m.tokens_per_target_pass, m.speedup, time.time())


# --- following -------------------------------------------------------------------------------------------------


def _key(p: Presentation | None, mode: str) -> tuple | None:
    """What of the presentation a page in this mode draws: the watcher reruns the page when it changes."""
    if p is None:
        return None
    return {"presenting": (p.id, p.holder), "following": (p.id, p.version)}.get(mode, (p.id, p.show_board))


def _seen(p: Presentation | None, mode: str) -> None:
    st.session_state[SEEN_KEY] = (mode, _key(p, mode))


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
    if _presenting(p):
        _seen(p, "presenting")
        return None
    if p is None:
        if st.session_state.pop(FOLLOWED_KEY, None) is not None:
            st.info("The presenter stopped presenting. Your own run is below, as you left it.", icon="🎓")
        _seen(p, "idle")
        return None
    st.session_state[FOLLOWED_KEY] = p.id
    follow = widgets.toggle("Follow the presenter", value=True, key="follow", help="Draws the presenter's run as it goes, round by round. Off: your own run.")
    if not follow:
        _seen(p, "idle")
        return None
    _seen(p, "following")
    try:
        _presented(p)  # read once here, so a run that cannot be shown is said before the stage draws
    except SavedRunError as exc:
        st.warning(f"The presenter's run cannot be shown ({md_text(exc)}). You keep your own run below.", icon="🎓")
        return None
    st.button("Try it yourself from here", key="fork", on_click=_on_fork, help="Your own copy of the presenter's run at this round, with the presenter's settings: Step it, change it, replay it.")
    return FollowStage(p.id)


def _show_round(selected: int | None) -> None:
    """The follower's inspector at the presenter's round (None: the latest), set before the inspector draws."""
    wanted = {"inspect_follow": selected is None} | ({} if selected is None else {"inspect_round": selected})
    for key, value in wanted.items():
        if widgets.held(key) != value:
            st.session_state[key] = value


def _on_fork() -> None:
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
        if p is None or p.id != self.presentation_id:
            st.rerun(scope="app")
        try:
            saved = _presented(p)
        except SavedRunError:
            st.rerun(scope="app")
        session = _shared_view(p.id, p.version, saved)
        _show_round(p.selected_round if p.selected_round is not None and p.selected_round < session.num_rounds else None)
        _seen(p, "following")
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


def _process_watcher(root: str) -> push.PresentationWatcher:
    """The one watcher of this process's run directory (specviz.ui.room.push): made once per process, its thread started
    once, never again (a process singleton, which no client message can clear). It waits for Steps only."""

    def build() -> push.PresentationWatcher:
        room = PresentationStore(root)
        return push.PresentationWatcher(room.stamp, room.read, _key, steps_in_flight)

    return singleton(("presentation-watcher", root), build)


def _watcher() -> push.PresentationWatcher | None:
    """The process's watcher, or None where pages must poll (no run directory, or no Streamlit server internals)."""
    runs = run_store()
    if runs is None or not push.available():
        return None
    return _process_watcher(str(runs.root))


def _register(p: Presentation) -> bool:
    """Tell the process's watcher which version of p this follower's stage fragment drew (True), or False where
    the page must poll."""
    watcher, session_id, fragment_id = _watcher(), session_id_now(), push.current_fragment_id()  # the stage fragment's
    if watcher is None or session_id is None or fragment_id is None:
        return False
    watcher.register(session_id, push.Registration(_key(p, "following"), p.id, fragment_id))
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
    if verdict == "moved":
        st.rerun(scope="app")
    mine = st.session_state.get(PRESENTING_KEY)
    if verdict == "same" and seen[0] == "presenting" and p is not None and mine is not None:
        room = store()
        if room is not None:
            try:
                room.update(*mine, selected_round=_selected_round())  # the presenter's inspector: followers show that round
                room.heartbeat(*mine)  # written only when due (presentation.heartbeat_every_s)
            except OSError as exc:
                st.warning(f"The room did not see the round you inspect: {md_text(write_problem(exc))}.", icon="🎓")


def steps_in_flight() -> int:
    """Participants' Steps (rounds, prefills, restores) holding a model turn in this process; long jobs' pieces and
    background baselines do not count (specviz.workshop.serving.TurnKind)."""
    return turns_in_flight("step")


def look(seen: tuple | None, read: Callable[[], Presentation | None], in_flight: Callable[[], int] = steps_in_flight, waited: bool = False) -> tuple[str, Presentation | None]:
    """The page's poll's decision: "skip" (nothing watched; or a participant's Step is in flight in this process and
    the last poll did not wait already: the Step goes first, for one tick at most), "moved" (what this page draws
    changed: rerun it) or "same"; with the presentation read (None when skipped)."""
    if seen is None or (in_flight() and not waited):
        return "skip", None
    mode, key = seen
    p = read()
    return ("moved" if _key(p, mode) != key else "same"), p


# --- the board -------------------------------------------------------------------------------------------------


def board_section(p: Presentation | None) -> None:
    """The room board, for the presenter, and for everyone once the presenter shows it; redrawn every BOARD_EVERY_S."""
    if p is None or not (_presenting(p) or p.show_board):
        return
    st.fragment(_board, run_every=BOARD_EVERY_S)(p.id)


def _board_points(room: PresentationStore, presentation_id: str) -> list[BoardPoint]:
    """The board's points, read again only when its file changed (see board_cache)."""
    try:
        info = room.board_path(presentation_id).stat()
        stamp = (info.st_size, info.st_mtime_ns)
    except OSError:
        stamp = None
    cache = board_cache(st.session_state.get(BOARD_CACHE_KEY), presentation_id, stamp, lambda: room.points(presentation_id))
    st.session_state[BOARD_CACHE_KEY] = cache
    return cache[2]


def board_cache(cached: tuple | None, presentation_id: str, stamp: tuple | None, load: Callable[[], list[BoardPoint]], in_flight: Callable[[], int] = steps_in_flight) -> tuple:
    """(presentation id, the board file's stamp, its points, whether it waited): the cached points while the file is
    unchanged, or for one refresh while a participant's Step is in flight in this process (the aggregation lets the
    Step go first; long jobs and baselines do not hold it up); else load() afresh."""
    if cached is not None and cached[0] == presentation_id:
        if cached[1] == stamp:
            return cached
        if in_flight() and not cached[3]:
            return (*cached[:3], True)
    return (presentation_id, stamp, load(), False)


def _board(presentation_id: str) -> None:
    room = store()
    if room is None:
        return
    st.subheader("The room board")
    points = _board_points(room, presentation_id)
    if not points:
        st.info("No forks yet: when participants press **Try it yourself from here** and Step, their results land here (anonymously).")
        return
    df = board_frame(points, short_name)
    color = widgets.radio("colour by", ["temperature", "drafter"], horizontal=True, key="board_color")
    st.plotly_chart(board_figure(df, "band" if color == "temperature" else "drafter_name"), width="stretch", key="board_chart")
    st.caption(
        f"{len(df)} fork(s) since the presentation started, one marker each at its α and measured speedup (hollow: plain "
        "decoding is still being measured, so the marker sits at its tokens per pass). Dotted: the ceiling for each k, the "
        "tokens per target pass α implies with a free drafter; a real drafter costs time, so the markers sit below it."
    )
    st.dataframe(board_table(df), hide_index=True)
