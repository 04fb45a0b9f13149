"""The race page's room (pages/race.py, specviz.workshop.race_room): the exercise *Which service speculates?* and what
the race and the probe read of the room.

`serve-pair` starts the exercise, whose guesses the room board counts and whose truth the presenter reveals; with the
presenter key, the race's *Show this race to the room* makes every page play it (specviz.ui.labs.race). While the room's
store cannot be reached the page says so (UNREACHABLE_TEXT), a participant's guess stays on the page (GUESS_PENDING_KEY)
and is sent again on each run until the store takes it, and the presenter's buttons say the store is unreachable.
"""

from __future__ import annotations

import secrets

import streamlit as st

from specviz.ui.common import widgets
from specviz.ui.common.settings import presenter_key_setting
from specviz.ui.room import present
from specviz.ui.room.saved_runs import run_store
from specviz.viz.markdown import md_code, md_text
from specviz.workshop.race_room import NAMES, RaceRoom, voter_id
from specviz.workshop.saved_runs import write_problem
from specviz.workshop.store import StoreUnavailable

WATCH_EVERY_S = 3.0  # how often a page looks whether the presenter showed a race, or the exercise moved on
SEEN_KEY = "specviz_race_room_seen"  # the room files' stamp this page last drew
GUESS_PENDING_KEY = "specviz_race_guess_pending"  # (pair id, guess) submitted while the store was unreachable
PAIR_KEY = "specviz_race_pair"  # the exercise this page last read (drawn from it while the store is unreachable)
UNREACHABLE_SAID_KEY = "specviz_race_unreachable_said"  # this page run said the store is unreachable already
UNREACHABLE_TEXT = ("The room's store is unreachable: the presenter's race and the exercise show again when it is back "
                    "(this page looks every few seconds). Your own race and probes work as usual.")  # fmt: skip


def room() -> RaceRoom | None:
    runs = run_store()
    return None if runs is None else RaceRoom(runs.store)


def unreachable() -> None:
    """Say once per page run that the room's store is unreachable."""
    if not st.session_state.get(UNREACHABLE_SAID_KEY):
        st.session_state[UNREACHABLE_SAID_KEY] = True
        st.warning(UNREACHABLE_TEXT, icon="🎓")


def or_unreachable(read, default=None):
    """read(), or default while the room's store is unreachable (the page says so)."""
    try:
        return read()
    except StoreUnavailable:
        unreachable()
        return default


def key_ok(key_widget: str) -> bool:
    """The presenter key typed in key_widget, checked as the step-through page checks it (the room's wrong-key limits,
    specviz.ui.room.present.key_given); the field is emptied and a refusal is said in the race's expander."""
    return present.key_given(key_widget, lambda kind, text: st.session_state.__setitem__("race_room_message", text))


def presenter_write(write) -> None:
    """A presenter's change to the room (a callback): a store that cannot take it is said in the expander."""
    try:
        write()
    except OSError as exc:
        st.session_state["race_room_message"] = f"The room did not get this: {write_problem(exc)}. Press the button again when it is back."


def exercise_section() -> None:
    """Which service speculates? Shown while `serve-pair` runs (its truth is on the room's store); while the store is
    unreachable, the exercise this page last read, so a guess can still be made (and is sent when the store is back)."""
    here = room()
    if here is None:
        return
    pair = or_unreachable(here.pair, st.session_state.get(PAIR_KEY))
    st.session_state[PAIR_KEY] = pair
    if pair is not None:
        _exercise(here, pair)


def _send_pending_guess(here: RaceRoom, pair, voter: str) -> None:
    """A guess submitted while the store was unreachable, sent now; while it still is, kept (and said)."""
    pending = st.session_state.get(GUESS_PENDING_KEY)
    if pending is None or pending[0] != pair.id:
        st.session_state.pop(GUESS_PENDING_KEY, None)
        return
    try:
        here.guess(pair.id, voter, pending[1])
    except StoreUnavailable:
        unreachable()
        st.caption(f"Your guess (service {pending[1]}) waits for the room's store: it is sent when the store is back.")
        return
    st.session_state.pop(GUESS_PENDING_KEY, None)


def _exercise(here: RaceRoom, pair) -> None:
    st.header("Which service speculates?")
    st.caption(
        "Two services answer with the same model and the same text; one of them speculates. Probe each above (service A, "
        "service B), look at the gaps and the bursts, then guess. The board shows the room's guesses; the presenter reveals "
        "the answer."
    )
    revealed = or_unreachable(lambda: here.revealed(pair.id), False)
    if not revealed:  # guesses close when the answer is out
        voter = voter_id(st.session_state.setdefault("race_voter", secrets.token_hex(16)))  # anonymous, one per browser session
        _send_pending_guess(here, pair, voter)
        pending = st.session_state.get(GUESS_PENDING_KEY)
        mine = pending[1] if pending is not None else or_unreachable(lambda: here.guesses(pair.id).get(voter))
        cols = st.columns([2, 1])
        with cols[0]:
            guess = widgets.radio("My guess: the one that speculates is", [f"service {n}" for n in NAMES], key="race_guess", horizontal=True,
                                  index=NAMES.index(mine) if mine else 0)  # fmt: skip
        with cols[1]:
            if st.button("Submit my guess", key="race_guess_submit"):
                mine = str(guess).removeprefix("service ")
                st.session_state[GUESS_PENDING_KEY] = (pair.id, mine)  # kept until the store takes it
                _send_pending_guess(here, pair, voter)
        if mine:
            st.caption(f"Your guess: service {mine} (submit again to change it).")
    st.fragment(_board, run_every=None if revealed else WATCH_EVERY_S)(here, pair)
    if not revealed and presenter_key_setting() is not None:

        def reveal() -> None:
            if key_ok("race_reveal_key"):
                presenter_write(lambda: here.reveal(pair.id))

        with st.expander("Reveal the answer (presenter)"):
            widgets.text_input("presenter key", type="password", key="race_reveal_key")
            st.button("Reveal", key="race_reveal", on_click=reveal)
            if message := st.session_state.pop("race_room_message", None):
                st.warning(md_text(message))


def _board(here: RaceRoom, pair) -> None:
    """The room's guesses (a fragment: it reads the guesses again every few seconds, redrawing only itself)."""
    try:
        tally, revealed = here.tally(pair.id), here.revealed(pair.id)
    except StoreUnavailable:
        st.caption("The room's guesses show again when the room's store is back.")
        return
    total = sum(tally.values())
    cols = st.columns(3)
    for col, name in zip(cols, NAMES):
        col.metric(f"guessed service {name}", tally[name])
    if revealed:
        answer = pair.answer
        drafter = next(s.drafter for s in pair.services if s.speculates)
        st.success(f"**Service {answer} speculates** (drafter {md_code(drafter)}); the other decodes plainly. "
                   f"{tally[answer]} of {total} guessed right.")  # fmt: skip
        cols[2].metric("right", f"{tally[answer]} / {total}")


def watch() -> None:
    """Rerun the page when the presenter shows or hides a race, or an exercise starts or is revealed (a fragment that
    compares the room files' stamp every WATCH_EVERY_S; no model time). Only on a server with a presenter key."""
    here = room()
    if here is None or presenter_key_setting() is None:
        return
    st.session_state[SEEN_KEY] = _stamp(here)  # what this run drew

    def look() -> None:
        if _stamp(here) != st.session_state.get(SEEN_KEY):
            st.rerun()

    st.fragment(look, run_every=WATCH_EVERY_S)()


def _stamp(here: RaceRoom) -> object:
    """The room records' stamp, or "unreachable" (so the page reruns when the store goes away and when it is back)."""
    try:
        return here.stamp()
    except StoreUnavailable:
        return "unreachable"
