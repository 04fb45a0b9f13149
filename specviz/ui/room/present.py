"""Presenting to the room, the page's side (the plain logic is specviz.workshop.presentation).

The sidebar's *Present to the room* expander takes the owner's presenter key (key `present_key`, a password field
emptied as soon as it is read) and *Present this run* (`present`) makes this session's saved run the room's
presentation; *Stop presenting* ends it. After each of the presenter's Steps the run is saved (as every run is) and the
presentation's round and version move on (after_round). While someone else's presentation is live, the key takes it
over (its board and followers stay, unless *Start a new board* is ticked: a presenter who reloaded their page reclaims
it so, with their restored run) or stops it (*Stop the presentation*, `stop_with_key`: an orphan nobody presents any
more). Every try at the key goes through the room's KeyGuard (per client address and for the whole room, shared by the
replicas: specviz.workshop.presenter_key); a key set too weak turns presenting off. The presenter's page writes a
heartbeat now and then (specviz.ui.room.follow's poll); without it the presentation ends by itself after the owner's
SPECVIZ_PRESENTATION_IDLE_MINUTES. Following is specviz.ui.room.follow, forking specviz.ui.room.fork, the board
specviz.ui.room.board.

When the room's store cannot be reached (Redis away: specviz.workshop.store.StoreUnavailable), live() answers
with the presentation this page last read and the page says the store is unreachable (unreachable_notice): the
presenter stays the presenter and keeps stepping, a follower keeps the view it drew. A move of the presentation the
store did not take is kept (PENDING_KEY) and sent again by the presenter's poll until it is taken.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable

import streamlit as st

from specviz.ui.common import widgets
from specviz.ui.common.client import current_client
from specviz.ui.common.keys import PRESENTING_KEY
from specviz.ui.common.settings import presenter_key_setting, quiet_policy
from specviz.ui.room.saved_runs import run_store
from specviz.ui.step_through.session import StepSession, page_state
from specviz.viz.markdown import md_text
from specviz.workshop.presentation import Presentation, PresentationStore
from specviz.workshop.presenter_key import KeyGuard, Verdict, key_weakness
from specviz.workshop.queues import turns_in_flight
from specviz.workshop.saved_runs import write_problem
from specviz.workshop.store import StoreUnavailable

log = logging.getLogger(__name__)

# PRESENTING_KEY (specviz.ui.common.keys): (presentation id, holder) of the presentation this session presents
SEEN_KEY = "specviz_present_seen"  # what the page drew of the presentation (the watcher compares; specviz.ui.room.follow)
MESSAGE_KEY = "specviz_present_message"  # (kind, text) a callback left for the page
LAST_KEY = "specviz_present_last"  # the presentation this page last read (kept while the store is unreachable)
UNREACHABLE_KEY = "specviz_present_unreachable"  # the last look at the store found it unreachable
PENDING_KEY = "specviz_present_pending"  # {changes} of the presenter's presentation the store has not taken yet
UNREACHABLE_TEXT = {
    "presenting": "The room's store is unreachable: the room does not see your Steps right now. Keep going; this page "
                  "tries again every second, and the room catches up with your latest round when the store is back.",
    "following": "The room's store is unreachable: you see the presenter's run as it was when it was last reached. This "
                 "page tries again by itself and moves on when the store is back.",
    "idle": "The room's store is unreachable: presenting, the board and the lesson's counts wait until it is back. Your "
            "own run works as usual.",
}  # fmt: skip
WEAK_KEY_TEXT = (
    "Presenting is off on this server: the presenter key set here is too weak to keep the room's presentation safe. "
    "The owner sets a stronger one (SPECVIZ_PRESENTER_KEY or presenter_key in the [specviz] secrets table: {why}), or "
    "unsets it and lets `python -m specviz room` make one."
)


def store() -> PresentationStore | None:
    """The room's presentation, ending by itself after the owner's presentation idle time."""
    runs = run_store()
    return None if runs is None else PresentationStore(runs.store, idle_s=quiet_policy().presentation_idle_minutes * 60)


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
    """The live presentation; while the room's store cannot be reached, the one this page last read (unreachable()
    says which)."""
    room = store()
    if room is None:
        return None
    try:
        p = room.read()
    except StoreUnavailable:
        st.session_state[UNREACHABLE_KEY] = True
        return st.session_state.get(LAST_KEY)
    st.session_state[UNREACHABLE_KEY] = False
    st.session_state[LAST_KEY] = p
    return p


def unreachable() -> bool:
    """The last look at the room's store found it unreachable (live() answered with what it last read)."""
    return bool(st.session_state.get(UNREACHABLE_KEY))


def unreachable_notice(p: Presentation | None, following: bool = False) -> None:
    """Say that the room's store is unreachable, in the words for this page's part in the room."""
    mode = "presenting" if is_presenter(p) else "following" if following else "idle"
    st.warning(UNREACHABLE_TEXT[mode], icon="🎓")


def current() -> Presentation | None:
    """The live presentation, at the top of the page; a presenter whose presentation is gone or another's is told.
    While the store is unreachable: the one last read, and nobody is told it ended."""
    p = live()
    if unreachable():
        if is_presenter(p):
            unreachable_notice(p)
        return p
    if st.session_state.get(PRESENTING_KEY) is not None and not is_presenter(p):
        if p is None:  # stopped with the key, ended by itself, or the run directory was cleared
            st.session_state.pop(PRESENTING_KEY, None)
            _say("info", "Your presentation ended: someone stopped it with the presenter key, or this page was away for longer than the server's presentation idle time.")
        else:
            _taken_over()
    return p


def _say(kind: str, text: str) -> None:
    st.session_state[MESSAGE_KEY] = (kind, text)


def is_presenter(p: Presentation | None) -> bool:
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
    try:
        verdict = KeyGuard(runs.store).attempt(given, presenter_key_setting(), current_client().address)
    except OSError as exc:  # the room's store is away: the limits cannot be kept, so no key is checked
        log.warning("room: the presenter key could not be checked: %s", exc)
        say("error", f"The presenter key cannot be checked right now ({write_problem(exc)}). Try again in a moment.")
        return False
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
        _say("error", f"The presentation could not be started: {write_problem(exc)}. Press **Present this run** again in a moment.")
        return
    st.session_state[PRESENTING_KEY] = (presentation.id, presentation.holder)
    st.session_state[LAST_KEY], st.session_state[UNREACHABLE_KEY] = presentation, False
    st.session_state.pop(PENDING_KEY, None)
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
    try:
        p = None if room is None else room.read()
        stopped = p is not None and room.stop(p.id)
    except OSError as exc:
        _say("error", f"The presentation could not be stopped: {write_problem(exc)}.")
        return
    _say("info", "You stopped the room's presentation; the room is back on its own runs." if stopped else "No presentation is live now.")


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
    with st.sidebar, st.expander("Present to the room", expanded=is_presenter(p)):
        message = st.session_state.pop(MESSAGE_KEY, None)
        if message is not None:
            getattr(st, message[0])(md_text(message[1]))
        if key is None:
            st.caption("Presenting is off on this server: the owner turns it on with a presenter key (SPECVIZ_PRESENTER_KEY, or presenter_key in the [specviz] secrets table).")
            return
        if not presenting_on():
            st.warning(md_text(WEAK_KEY_TEXT.format(why=key_weakness(key))))
            return
        if is_presenter(p):
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
    """After a Step that ran a round (and was saved): the presenter's presentation moves on (a fork's board point:
    specviz.ui.room.fork.after_round)."""
    room = store()
    if room is None:
        return
    mine = st.session_state.get(PRESENTING_KEY)
    if mine is not None and session.run_token is not None:
        move(room, mine, run=session.run_token, round=session.num_rounds, selected_round=selected_round())


def move(room: PresentationStore, mine: tuple[str, str], **changes) -> None:
    """Move the presenter's presentation on, with any earlier move the store did not take (PENDING_KEY): kept
    again when the store cannot be reached (the presenter's poll sends it once it is back), dropped once taken."""
    changes = {**st.session_state.get(PENDING_KEY, {}), **changes}
    try:
        moved = room.update(*mine, **changes)
    except OSError as exc:
        if not st.session_state.get(PENDING_KEY):
            log.warning("room: could not move the presentation on: %s", exc)
        st.session_state[PENDING_KEY] = changes
        st.warning(f"The room does not see this round yet: {md_text(write_problem(exc))}.", icon="🎓")
        return
    st.session_state.pop(PENDING_KEY, None)
    if moved is None:
        _taken_over()
    else:
        st.session_state[LAST_KEY], st.session_state[UNREACHABLE_KEY] = moved, False


def selected_round() -> int | None:
    """The round the presenter's inspector shows; None when it follows the latest."""
    if st.session_state.get("inspect_follow", True):
        return None
    value = widgets.held("inspect_round")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _taken_over() -> None:
    st.session_state.pop(PRESENTING_KEY, None)
    _say("warning", "Someone took over the room's presentation with the presenter key (or it ended): you are no longer presenting.")


def steps_in_flight() -> int:
    """Participants' Steps (rounds, prefills, restores) holding a model turn in this process; long jobs' pieces and
    background baselines do not count (specviz.workshop.queues.TurnKind)."""
    return turns_in_flight("step")
