"""The session sweeper (specviz.workshop.sweeper) owns its registry and its one thread: started once however many
sessions ask, a tick that raises does not end it, it stops with the server, and a sweep frees what the registry says
is due. Event-driven: every wait is on something the test releases or the thread signals."""

from __future__ import annotations

import threading

from specviz.workshop.sessions import SessionRegistry
from specviz.workshop.sweeper import SessionSweeper


def test_the_sweeper_starts_once_survives_a_failing_tick_and_stops_with_the_server():
    stop, ticked, calls = threading.Event(), threading.Event(), []

    def tick() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bad policy")  # logged, never fatal
        ticked.set()

    sweeper = SessionSweeper(every_s=0.01, stop=stop)
    assert not sweeper.started
    assert sweeper.start(tick) is True
    assert sweeper.start(tick) is False  # a second session asking starts nothing
    assert ticked.wait(30), "the sweeper died after a failing tick"
    stop.set()
    sweeper._thread.join(30)
    assert not sweeper._thread.is_alive()


def test_a_sweep_frees_a_gone_session_after_the_grace():
    clock = [0.0]
    sweeper = SessionSweeper(stop=threading.Event(), registry=SessionRegistry(clock=lambda: clock[0]))
    sweeper.registry.touch("gone", {"runs": 1}, "1.2.3.4")
    sweeper.registry.touch("here", {"runs": 2}, "1.2.3.4")
    freed: list[tuple[str, bool]] = []

    def sweep() -> int:
        return sweeper.sweep(lambda sid: sid == "here", lambda sid, state, whole: freed.append((sid, whole)), gone_after_s=30, idle_after_s=600)

    assert sweep() == 0  # first seen gone: the grace starts
    clock[0] = 31.0
    assert sweep() == 1 and freed == [("gone", True)]
    assert len(sweeper.registry) == 1
