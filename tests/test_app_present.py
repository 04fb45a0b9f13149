"""The room follows the teacher, in the app (AppTest, the tiny llama in shared mode, one run directory): the
*Present to the room* expander and its key (off, too weak, empty, wrong and rate-limited for the client however many
sessions it opens, never through the URL or session state), following (the presenter's run at the presenter's
round, read-only controls), fork from here (continues exactly as the presenter's run), the board's point, an
evicted presented run, a takeover that keeps the board (a new one only when asked), a presenter who reloaded and
reclaims the presentation, an orphan stopped with the key, a presentation that ends by itself when its presenter's
page is gone (and a presenter's page that keeps it going), the idle sweeper that spares a presenter's run, and Redis
going away mid-room (the presenter presents on, followers keep their view, the room catches up when it is back). The
room's tests run on both backends of its store (a run directory and a real redis-server: tests/store_helpers.py)."""

from __future__ import annotations

import logging
import time
from dataclasses import replace

import pytest
from streamlit.testing.v1 import AppTest

from specviz.ui.common import sessions
from specviz.ui.common.keys import PRESENTING_KEY, STEP_THROUGH_KEY
from specviz.ui.room import fork
from specviz.ui.room import present as present_ui
from specviz.ui.step_through.session import PageState
from specviz.workshop.presentation import FILE_NAME, PresentationStore, heartbeat_every_s
from specviz.workshop.saved_runs import RunStore
from specviz.workshop.sessions import SessionRegistry
from tests.test_app_saved_runs import generated, page, room_env, room_runs, token  # noqa: F401  (room_env, room_runs: fixtures)
from tests.test_app_shared import PAGES, STATE, click

KEY = "correct horse battery staple"


@pytest.fixture()
def redis_room(redis_server, room_env, monkeypatch):  # noqa: F811
    """A room on a redis-server of the test's own (stopped and started again mid-test)."""
    monkeypatch.setenv("SPECVIZ_PRESENTER_KEY", KEY)
    monkeypatch.setenv("SPECVIZ_STORE", redis_server.url)
    return redis_server


@pytest.fixture()
def room(room_runs, monkeypatch):  # noqa: F811
    """A room with a presenter key, on each backend in turn: its store."""
    monkeypatch.setenv("SPECVIZ_PRESENTER_KEY", KEY)
    return room_runs.store


def texts(at: AppTest) -> str:
    return " ".join(e.value for kind in (at.error, at.warning, at.info, at.success, at.caption) for e in kind)


def present(at: AppTest, key: str = KEY) -> AppTest:
    at.text_input(key="present_key").input(key)
    return click(at, "present")


def presenter(steps: int = 2) -> AppTest:
    at = page()
    if [t for t in at.toggle if t.key == "follow"]:  # someone presents already: step a run of one's own first
        at.toggle(key="follow").set_value(False).run()
    for _ in range(steps):
        click(at, "step")
    present(at)
    assert "You are presenting" in texts(at)
    return at


def shown_rounds(at: AppTest) -> int:
    session = at.session_state[fork.VIEW_KEY][2]
    return session.num_rounds


def test_no_key_configured_says_presenting_is_off(room_env):  # noqa: F811
    at = page()
    assert "Presenting is off on this server" in texts(at)
    assert not [w for w in at.text_input if w.key == "present_key"] and not [t for t in at.toggle if t.key == "follow"]


@pytest.mark.parametrize("weak", ["1234", "workshop-key", "aaaaaaaaaaaaaaaaaaaa"])
def test_a_weak_key_turns_presenting_off_with_a_message_for_the_owner(room_env, monkeypatch, caplog, weak):  # noqa: F811
    monkeypatch.setenv("SPECVIZ_PRESENTER_KEY", weak)
    present_ui._log_weak_key.cache_clear()
    with caplog.at_level(logging.WARNING, logger="specviz.ui.room.present"):
        at = page()
    assert "too weak" in texts(at) and "python -m specviz room" in texts(at) and weak not in texts(at)
    assert not [w for w in at.text_input if w.key == "present_key"] and not [t for t in at.toggle if t.key == "follow"]
    assert any("presenting is off" in r.getMessage() and "too weak" in r.getMessage() for r in caplog.records)
    assert all(weak not in r.getMessage() for r in caplog.records)


def test_empty_wrong_and_rate_limited_keys_and_the_key_leaves_session_state(room):
    at = page()
    click(at, "step")
    click(at, "present")
    assert "Type the presenter key first" in texts(at)
    for _ in range(2):
        present(at, "guess")
        assert "not the presenter key" in texts(at)
    present(at, "guess")
    assert "wait 30 s" in texts(at)
    present(at, KEY)  # locked: even the right key waits
    assert "Too many wrong keys from your address" in texts(at) and PresentationStore(room).read() is None
    assert at.session_state["present_key"] == ""  # the key is never kept


def test_a_new_session_of_the_same_client_is_still_locked_out(room):
    """Known-bad before: the count lived in the session, so every new session (a reload, a raw client's new
    websocket) or a cleared session state had three fresh tries."""
    for _ in range(3):
        at = page()
        present(at, "guess")
    fresh = page()
    present(fresh, KEY)
    assert "Too many wrong keys from your address" in texts(fresh) and "no key is checked" in texts(fresh)
    assert PresentationStore(room).read() is None


def test_a_key_in_the_url_or_session_state_does_not_present(room):
    at = AppTest.from_file(str(PAGES / "step_through.py"), default_timeout=120)
    at.query_params["present_key"] = KEY
    at.query_params["present"] = "true"
    at.session_state[PRESENTING_KEY] = "A" * 22
    at.run()
    assert "present_key" in texts(at) and "not a setting of this page" in texts(at)
    click(at, "step")
    assert PresentationStore(room).read() is None and at.session_state["present_key"] == ""
    assert KEY not in " ".join(str(v) for v in at.query_params.values())


def test_followers_see_the_presenters_round_read_only_and_fork_exactly(room):
    solo = page()
    for _ in range(4):
        click(solo, "step")
    teacher = presenter(steps=2)
    follower = page()
    assert follower.toggle(key="follow").value and shown_rounds(follower) == 2
    assert follower.button(key="step").disabled and "Following the presenter" in texts(follower)
    assert follower.session_state[STATE].session is None  # following takes no model time and starts no run of its own
    click(teacher, "step")
    follower.run()
    assert shown_rounds(follower) == 3
    click(follower, "fork")
    own = follower.session_state[STATE].session
    assert own is not None and own.num_rounds == 3 and token(follower) != token(teacher)
    assert not follower.toggle(key="follow").value and follower.session_state["temperature"] == 1.0
    click(follower, "step")
    assert generated(follower) == generated(solo)  # the fork continues as the presenter's run would
    board = PresentationStore(room).points(PresentationStore(room).read().id)
    assert len(board) == 1 and board[0].rounds == 4 and board[0].drafter == "ngram"
    assert RunStore(room).load(token(teacher)).num_rounds == 3  # the presenter's run is untouched
    teacher.run()
    assert "The room board" in [s.value for s in teacher.subheader]


def test_an_evicted_presented_run_says_so_and_the_follower_keeps_their_own(room):
    mine = page()
    click(mine, "step")
    own = generated(mine)
    teacher = presenter(steps=1)
    room.delete(f"{token(teacher)}.json")
    mine.run()
    assert "cannot be shown" in texts(mine)
    assert generated(mine) == own and not mine.button(key="step").disabled


def forked_point(follower: AppTest) -> str:
    """The follower forks the presentation and Steps: one point on the board; returns its fork id."""
    click(follower, "fork")
    click(follower, "step")
    return follower.session_state[fork.FORK_KEY]["fork"]


def test_a_takeover_keeps_the_board_and_the_followers_and_stop(room):
    """Known-bad before: presenting with the key while someone presented started a new presentation and deleted the
    room's board."""
    first = presenter(steps=1)
    p = PresentationStore(room).read()
    follower, forker = page(), page()
    assert shown_rounds(follower) == 1
    fork = forked_point(forker)
    second = presenter(steps=2)
    assert "took over the room's presentation, with its board and its followers" in texts(second)
    taken = PresentationStore(room).read()
    assert taken.id == p.id and taken.run == token(second) and [q.fork for q in PresentationStore(room).points(p.id)] == [fork]
    first.run()
    assert "took over" in texts(first) and not [b for b in first.button if b.key == "stop_present"]
    follower.run()
    assert shown_rounds(follower) == 2  # the same followers, now on the new presenter's run
    click(forker, "step")  # the fork's Steps still land on the board
    assert [q.rounds for q in PresentationStore(room).points(p.id)] == [3]
    click(second, "stop_present")
    assert PresentationStore(room).read() is None and room.size(PresentationStore.board_name(p.id)) == 0
    follower.run()
    assert "The presenter stopped presenting" in texts(follower)
    assert not [t for t in follower.toggle if t.key == "follow"]


def test_a_new_board_only_when_the_presenter_asks_for_one(room):
    presenter(steps=1)
    p = PresentationStore(room).read()
    forked_point(page())
    second = page()
    second.toggle(key="follow").set_value(False).run()
    click(second, "step")
    second.checkbox(key="present_new_board").check()
    present(second)
    assert "on a new board" in texts(second)
    now = PresentationStore(room).read()
    assert now.id != p.id and PresentationStore(room).points(now.id) == [] and room.size(PresentationStore.board_name(p.id)) == 0


def test_a_presenter_who_reloaded_reclaims_the_presentation_with_its_board_and_followers(room):
    """Known-bad before: after a reload nobody could stop the presentation, and presenting again deleted the board."""
    teacher = presenter(steps=2)
    p = PresentationStore(room).read()
    follower, forker = page(), page()
    fork = forked_point(forker)
    reloaded = page(run=token(teacher))  # a reload: a new session, the run restored from the URL under a new token
    assert any("Restored this run at round 2" in i.value for i in reloaded.info)
    assert not [b for b in reloaded.button if b.key == "stop_present"]  # the right to present stayed in the old session
    present(reloaded)
    assert "You are presenting" in texts(reloaded)
    reclaimed = PresentationStore(room).read()
    assert (reclaimed.id, reclaimed.run, reclaimed.round) == (p.id, token(reloaded), 2)
    assert [q.fork for q in PresentationStore(room).points(p.id)] == [fork]
    follower.run()
    assert follower.toggle(key="follow").value and shown_rounds(follower) == 2
    click(reloaded, "step")
    follower.run()
    assert shown_rounds(follower) == 3  # the room follows the reloaded page's Steps
    teacher.run()  # the page from before the reload (had it survived) knows it no longer presents
    assert "took over" in texts(teacher)


def test_anyone_with_the_key_stops_an_orphaned_presentation(room):
    presenter(steps=1)  # ... whose page then goes away: nobody has a Stop presenting button
    follower, other = page(), page()
    other.text_input(key="present_key").input("guess")
    click(other, "stop_with_key")
    assert "not the presenter key" in texts(other) and PresentationStore(room).read() is not None
    other.text_input(key="present_key").input(KEY)
    click(other, "stop_with_key")
    assert "You stopped the room's presentation" in texts(other) and PresentationStore(room).read() is None
    follower.run()
    assert "The presenter stopped presenting" in texts(follower)


def test_a_presentation_ends_by_itself_when_its_presenters_page_is_gone(room, monkeypatch):
    """Known-bad before: an orphan stayed live for ever (the room frozen on its round), even across a restart."""
    monkeypatch.setenv("SPECVIZ_PRESENTATION_IDLE_MINUTES", "2")
    teacher = presenter(steps=1)
    follower = page()
    assert shown_rounds(follower) == 1
    store = PresentationStore(room)
    p = store.read()
    store._write(replace(p, heartbeat=time.time() - heartbeat_every_s(120) - 1))  # the presenter's page is still there
    teacher.run()  # its poll (the watch fragment) writes the heartbeat when due, with no new version
    beat = store.read()
    assert beat.heartbeat > time.time() - 10 and beat.version == p.version
    store._write(replace(beat, heartbeat=time.time() - 121))  # now nobody has written it for longer than 2 minutes
    follower.run()
    assert "The presenter stopped presenting" in texts(follower) and store.read() is None and room.get(FILE_NAME, 4096) is None
    teacher.run()
    assert "Your presentation ended" in texts(teacher) and not [b for b in teacher.button if b.key == "stop_present"]


def test_the_idle_sweeper_spares_a_live_presenters_run():
    """The sweeper frees an idle session's runs (SPECVIZ_IDLE_MINUTES); a presenter's run is what the room
    follows, however long the presenter talks. Known-bad control: the same session state without the presenting
    mark is freed. (A presenter whose page is gone is freed whole after the disconnect grace, as any session.)"""
    class Session:  # a StepSession's part the sweeper touches: its saved file's token, and its KV-cache share back
        run_token = None

        def release(self) -> None:
            pass

    clock = [0.0]
    registry = SessionRegistry(clock=lambda: clock[0])
    presenter_state = {STEP_THROUGH_KEY: PageState(session=Session()), PRESENTING_KEY: ("A" * 22, "B" * 22)}
    other_state = {STEP_THROUGH_KEY: PageState(session=Session())}
    registry.touch("presenter", presenter_state)
    registry.touch("other", other_state)
    clock[0] = 21 * 60.0
    registry.sweep(lambda sid: True, sessions.free_session, gone_after_s=30, idle_after_s=20 * 60)
    assert presenter_state[STEP_THROUGH_KEY].session is not None and not presenter_state[STEP_THROUGH_KEY].freed
    assert other_state[STEP_THROUGH_KEY].session is None and other_state[STEP_THROUGH_KEY].freed


def test_while_the_rooms_store_is_away_the_presenter_presents_on_and_followers_keep_their_view(redis_room):
    """Known-bad before: an unreachable store read as "no presentation", so the presenter was told the presentation
    ended and every follower dropped to their own run. Now the presenter keeps stepping (the room does not see it yet,
    and the page says why), a follower keeps the round it drew and says why, and when Redis is back the presenter's
    poll saves the missed Step and moves the room on to it."""
    teacher = presenter(steps=2)
    follower = page()
    assert shown_rounds(follower) == 2
    redis_room.stop()
    click(teacher, "step")  # the Step runs in this replica; the room's store is away
    assert "unreachable" in texts(teacher) and PRESENTING_KEY in teacher.session_state
    assert "Your presentation ended" not in texts(teacher)
    follower.run()
    assert shown_rounds(follower) == 2 and "you see the presenter's run as it was" in texts(follower)
    assert "The presenter stopped presenting" not in texts(follower)
    redis_room.start()
    teacher.run()  # its poll sends what the store missed
    assert PresentationStore(RunStore.from_env().store).read().round == 3 and present_ui.PENDING_KEY not in teacher.session_state
    follower.run()
    assert shown_rounds(follower) == 3 and "unreachable" not in texts(follower)
