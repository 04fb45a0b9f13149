"""The server-side watcher that redraws followers (specviz.ui.room.push): it re-reads the presentation only when the
file's stamp changed, asks each follower that drew an earlier version of the same presentation to rerun its stage
fragment once (not again until the page registers anew), leaves other presentations' followers alone, lets a
participant's Step in flight go first for MAX_DEFER_S at most, is not held up by long jobs or background baselines
(real model queues, turns held by threads gated on events), and forgets sessions that are gone. Known-bad controls:
a watcher that ignores the Step in flight pushes during it; the old one, which waited for any turn, pushes nothing
while a background baseline or a long job holds the model."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import pytest

from specviz.ui.room import board, follow, present, push
from specviz.ui.room.push import MAX_DEFER_S, PresentationWatcher, Registration
from specviz.workshop.queues import model_queue, reset_queues, turns_in_flight


@dataclass(frozen=True)
class P:
    id: str
    version: int
    holder: str = "h"
    show_board: bool = False


def key_of(p, mode):
    return None if p is None else (p.id, p.version)


class Room:
    def __init__(self, p):
        self.p, self.reads, self.pushed, self.in_flight, self.gone = p, 0, [], 0, set()

    def stamp(self):
        return None if self.p is None else (self.p.id, self.p.version)

    def read(self):
        self.reads += 1
        return self.p

    def push(self, session_id, fragment_id):
        if session_id in self.gone:
            return False
        self.pushed.append((session_id, fragment_id))
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def watcher(room, in_flight=None, clock=None):
    return PresentationWatcher(room.stamp, room.read, key_of, in_flight or (lambda: room.in_flight), room.push, clock or Clock())


def register(w, sid, p, fragment="stage"):
    with w._lock:  # register() would start the thread; these tests call check() themselves
        w._pages[sid] = Registration(key_of(p, "following"), p.id, fragment)


def test_a_step_reruns_each_follower_once_and_only_followers_of_that_presentation():
    room = Room(P("a", 1))
    w = watcher(room)
    register(w, "s1", room.p, "f1")
    register(w, "s2", room.p, "f2")
    register(w, "other", P("b", 7), "f3")  # follows a presentation that is not the live one
    assert w.check() == 0 and room.reads == 1
    assert w.check() == 0 and room.reads == 1  # unchanged stamp: no read
    room.p = replace(room.p, version=2)
    assert w.check() == 2 and sorted(room.pushed) == [("s1", "f1"), ("s2", "f2")]
    assert w.check() == 0 and len(room.pushed) == 2  # asked once until the page registers what it drew
    register(w, "s1", room.p, "f1")  # s1 drew version 2
    room.p = replace(room.p, version=3)
    assert w.check() == 2 and room.pushed[-2:] == [("s1", "f1"), ("s2", "f2")]


def test_a_step_in_flight_goes_first_for_a_bounded_time():
    room, clock = Room(P("a", 1)), Clock()
    w = watcher(room, clock=clock)
    register(w, "s1", room.p)
    room.p, room.in_flight = P("a", 2), 1
    assert w.check() == 0 and room.pushed == []
    clock.now += MAX_DEFER_S / 2
    assert w.check() == 0
    room.in_flight = 0  # the Step ended: the redraw goes at once
    assert w.check() == 1
    register(w, "s1", room.p)
    room.p, room.in_flight = P("a", 3), 1  # Steps keep coming (a busy room): the redraw waits MAX_DEFER_S, no longer
    assert w.check() == 0
    clock.now += MAX_DEFER_S
    assert w.check() == 1 and room.pushed[-1] == ("s1", "stage")


def test_the_known_bad_watcher_that_ignores_steps_in_flight_pushes_during_one():
    room = Room(P("a", 1))
    w = watcher(room, in_flight=lambda: 0)
    register(w, "s1", room.p)
    room.p, room.in_flight = P("a", 2), 1
    assert w.check() == 1  # what the real watcher must not do


def test_a_gone_session_is_forgotten_and_an_ended_presentation_pushes_nothing():
    room = Room(P("a", 1))
    w = watcher(room)
    register(w, "s1", room.p)
    room.gone.add("s1")
    room.p = P("a", 2)
    assert w.check() == 0 and len(w) == 0
    register(w, "s2", room.p)
    room.p = None  # stopped: the pages' own poll redraws the whole page
    assert w.check() == 0 and room.pushed == []


def test_outside_a_streamlit_server_there_is_no_push():
    assert push.available() is False
    assert push.current_fragment_id() is None


@pytest.mark.parametrize("version", [1, 5])
def test_the_stamp_changes_with_every_write(room_store, version):
    from specviz.workshop.presentation import PresentationStore

    store = PresentationStore(room_store)
    none = store.stamp()
    p, _ = store.start("A" * 22, rounds=1)
    assert store.stamp() != none
    first = store.stamp()
    for _ in range(version):
        store.update(p.id, p.holder, round=store.read().round + 1)
    assert store.stamp() != first and store.read().version == p.version + version


class FakeRunner:
    def __init__(self):
        self.asked = []

    def request_rerun(self, data):
        self.asked.append(data)
        return True


class FakeApp:
    """What _rerun_fragment reads of Streamlit's AppSession."""

    def __init__(self, fragments=("stage",)):
        from streamlit.proto.ClientState_pb2 import ClientState
        from streamlit.runtime.app_session import AppSessionState

        self._state = AppSessionState.APP_NOT_RUNNING
        self._client_state = ClientState(query_string="run=abc", page_script_hash="h")
        self._client_state.widget_states.widgets.add(id="follow", bool_value=True)  # a value the browser sent earlier
        self._scriptrunner = FakeRunner()
        self.fragments = set(fragments)

    def has_fragment(self, fragment_id):
        return fragment_id in self.fragments


def test_a_pushed_rerun_is_the_fragment_alone_and_keeps_the_widget_values():
    """The rerun asked for names the stage fragment, the page and URL the browser last sent, and no widget values,
    so the values the session holds stay (a click on its way is not undone by older ones). Known-bad: rerunning
    with the browser's last client state, as run-on-save does, carries its older widget values."""
    app = FakeApp()
    push._rerun_fragment(app, "stage")
    (data,) = app._scriptrunner.asked
    assert data.fragment_id == "stage" and data.widget_states is None
    assert data.query_string == "run=abc" and data.page_script_hash == "h"
    assert len(app._client_state.widget_states.widgets) == 1  # what the known-bad way would have sent again
    push._rerun_fragment(FakeApp(fragments=()), "stage")  # a fragment a full run dropped: nothing is asked
    gone = FakeApp()
    gone.fragments.clear()
    push._rerun_fragment(gone, "stage")
    assert gone._scriptrunner.asked == []


@contextmanager
def held_turn(kind: str, background: bool = False) -> Iterator[threading.Event]:
    """A thread holding a turn of this kind on a real model queue until the test sets the event it yields."""
    queue, entered, release = model_queue(("test-model", "cpu", "float32")), threading.Event(), threading.Event()

    def hold() -> None:
        with queue.turn(background=background, kind=None if background else kind):
            entered.set()
            release.wait(timeout=60)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    try:
        assert entered.wait(timeout=30), "the turn was never granted"
        yield release
    finally:
        release.set()
        thread.join(timeout=30)


@pytest.fixture()
def queues():
    reset_queues()
    yield
    reset_queues()


@pytest.mark.parametrize(("kind", "background"), [("background", True), ("job", False)])
def test_followers_are_redrawn_while_a_background_baseline_or_a_long_job_holds_the_model(queues, kind, background):
    """The app's watcher (steps_in_flight, a real queue): a move is pushed at once while another participant's long
    job or a background baseline holds a turn. Known-bad: the old watcher (any turn in flight) pushes nothing."""
    room = Room(P("a", 1))
    w = watcher(room, in_flight=present.steps_in_flight)
    old = watcher(room, in_flight=turns_in_flight)
    with held_turn(kind, background):
        assert turns_in_flight() == 1 and turns_in_flight(kind) == 1 and present.steps_in_flight() == 0
        for each in (w, old):
            register(each, "s1", room.p)
        room.p = P("a", 2)
        assert old.check() == 0  # the known-bad watcher waits for the job
        assert w.check() == 1  # the real one redraws the follower while the turn is still held
    assert turns_in_flight() == 0


def test_a_participants_step_on_a_real_queue_defers_the_redraw_and_a_polling_page_waits_one_tick_at_most(queues):
    room, clock = Room(P("a", 1)), Clock()
    w = watcher(room, in_flight=present.steps_in_flight, clock=clock)
    register(w, "s1", room.p)
    with held_turn("step"):
        assert present.steps_in_flight() == 1
        room.p = P("a", 2)
        assert w.check() == 0
        clock.now += MAX_DEFER_S
        assert w.check() == 1  # bounded: the Step still holds the model
        seen = ("following", key_of(P("a", 1), "following"))
        assert follow.look(seen, room.read)[0] == "skip"
        assert follow.look(seen, room.read, waited=True)[0] == "moved"  # the next tick looks anyway
    with held_turn("job"):
        assert follow.look(seen, room.read)[0] == "moved"  # a long job does not hold the page's poll up


def test_the_board_waits_one_refresh_for_a_step_and_never_for_a_job(queues):
    loads = []

    def load():
        loads.append(1)
        return [len(loads)]

    cached = board.board_cache(None, "p", (1,), load)
    with held_turn("step"):
        waited = board.board_cache(cached, "p", (2,), load)
        assert waited[2] == [1] and waited[3]
        again = board.board_cache(waited, "p", (2,), load)
        assert again[2] == [2] and not again[3]  # one refresh at most, though the Step still holds the model
        assert board.board_cache(again, "p", (2,), load) is again  # the file unchanged: no read
    with held_turn("background", background=True):
        assert board.board_cache(cached, "p", (4,), load)[2] == [3]  # a baseline does not hold it up


def test_while_the_store_is_unreachable_the_watcher_keeps_its_presentation_and_says_so_once(caplog):
    """Redis away: the watcher's reads fail; it pushes nothing, keeps what it read (followers keep their view), logs
    once, and redraws the followers as soon as the store answers with a newer version."""
    from specviz.workshop.store import StoreUnavailable

    class Away(Room):
        reachable = True

        def read(self):
            if not self.reachable:
                raise StoreUnavailable("the room's store (Redis at 127.0.0.1:1/0) is unreachable; specviz tries again")
            return super().read()

    room = Away(P("a", 1))
    watcher = PresentationWatcher(room.stamp, room.read, key_of, lambda: 0, push=room.push)
    register(watcher, "s1", room.p, "frag")
    watcher.check()
    room.reachable, room.p = False, P("a", 2)
    for _ in range(5):
        assert watcher.check() == 0
    assert room.pushed == [] and sum("unreachable" in r.getMessage() for r in caplog.records) == 1
    room.reachable = True
    assert watcher.check() == 1 and room.pushed == [("s1", "frag")]


def test_where_changes_are_announced_the_watcher_waits_for_them_and_polls_where_not():
    """The watcher's pause: wait(since, WAIT_S) where the store announces changes (Redis), POLL_S sleeps where it
    does not (a run directory, as before) and while a due redraw waits for a Step in flight."""
    room, waits = Room(P("a", 1)), []
    watcher = PresentationWatcher(room.stamp, room.read, key_of, lambda: 0, push=room.push, wait=lambda since, s: waits.append((since, s)))
    watcher.check()
    watcher._pause()
    assert waits == [(("a", 1), push.WAIT_S)]
    watcher._deferred_since = 1.0  # a redraw waits for a Step: look again soon, not at the next announcement
    watcher._pause()
    assert len(waits) == 1
