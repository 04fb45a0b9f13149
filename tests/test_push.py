"""The server-side watcher that redraws followers (specviz.ui.push): it re-reads the presentation only when the
file's stamp changed, asks each follower that drew an earlier version of the same presentation to rerun its stage
fragment once (not again until the page registers anew), leaves other presentations' followers alone, waits while a
model round is in flight, and forgets sessions that are gone. A known-bad watcher that ignores the round in flight
pushes during it."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from specviz.ui import push
from specviz.ui.push import PresentationWatcher, Registration


@dataclass(frozen=True)
class P:
    id: str
    version: int


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


def watcher(room, in_flight=None):
    return PresentationWatcher(room.stamp, room.read, key_of, in_flight or (lambda: room.in_flight), room.push)


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


def test_it_waits_while_a_round_is_in_flight():
    room = Room(P("a", 1))
    w = watcher(room)
    register(w, "s1", room.p)
    room.p, room.in_flight = P("a", 2), 1
    assert w.check() == 0 and room.pushed == [] and room.reads == 0
    room.in_flight = 0
    assert w.check() == 1


def test_the_known_bad_watcher_that_ignores_rounds_in_flight_pushes_during_one():
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
def test_the_stamp_changes_with_every_write(tmp_path, version):
    from specviz.workshop.presentation import PresentationStore

    store = PresentationStore(tmp_path)
    assert store.stamp() is None
    p, _ = store.start("A" * 22, rounds=1)
    first = store.stamp()
    for _ in range(version):
        store.update(p.id, round=store.read().round + 1)
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
