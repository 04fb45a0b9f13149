"""Background work yields to a Step (issue 24 item 5): while a participant's Step is in flight in this process (a
fake Step holding a real model turn), a page's poll reads nothing and decides nothing for one tick, and the board's
aggregation re-reads no points for one refresh; the tick after that (or the first once the turn is given back) sees
what moved (issue 32: bounded, so a room that keeps stepping cannot freeze the presentation; long jobs and baselines
never hold it up: tests/test_push.py). The baseline's side of the same rule is tests/test_disturbed.py
(specviz.workshop.foreground)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from specviz.ui.room.board import board_cache
from specviz.ui.room.follow import look, page_key
from specviz.workshop.presentation import PresentationStore
from specviz.workshop.queues import model_queue, reset_queues, turns_in_flight
from specviz.workshop.saved_runs import new_token


@pytest.fixture(autouse=True)
def fresh_queues() -> Iterator[None]:
    reset_queues()
    yield
    reset_queues()


@contextmanager
def step_in_flight() -> Iterator[None]:
    """A fake Step: another thread (another session's script) holds the model's turn until the block ends."""
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        with model_queue(("a target", "cpu", "float32")).turn():
            entered.set()
            release.wait(30)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert entered.wait(10)
    try:
        yield
    finally:
        release.set()
        thread.join(10)


class Counting:
    """A reader that counts how often the watcher looked."""

    def __init__(self, read) -> None:
        self.read, self.calls = read, 0

    def __call__(self):
        self.calls += 1
        return self.read()


def test_the_watcher_does_no_work_while_a_step_is_in_flight(tmp_path):
    room = PresentationStore(tmp_path)
    p, _ = room.start(new_token(), 1)
    seen, reader = ("following", page_key(p, "following")), Counting(room.read)
    assert look(seen, reader) == ("same", p) and reader.calls == 1
    with step_in_flight():
        room.update(p.id, p.holder, round=2)  # the presenter's Step moved the presentation on
        for _ in range(5):  # every tick that has not waited yet, while the round holds the model
            assert look(seen, reader) == ("skip", None)
        assert reader.calls == 1 and turns_in_flight() == 1  # not one read of the file
        assert look(seen, reader, waited=True)[0] == "moved"  # a tick that waited once looks, the Step still going
        reader.calls = 1
    assert turns_in_flight() == 0
    verdict, now = look(seen, reader)
    assert verdict == "moved" and now.round == 2 and reader.calls == 2  # the next tick after the Step sees it


def test_control_a_watcher_that_ignored_the_turn_would_read_during_the_step(tmp_path):
    """Known-bad control: with the in-flight check taken away the same ticks do read, so the test above can fail."""
    room = PresentationStore(tmp_path)
    p, _ = room.start(new_token(), 1)
    seen, reader = ("following", page_key(p, "following")), Counting(room.read)
    with step_in_flight():
        room.update(p.id, p.holder, round=2)
        assert look(seen, reader, in_flight=lambda: 0)[0] == "moved" and reader.calls == 1


def test_the_board_keeps_its_points_while_a_step_is_in_flight():
    loads = Counting(lambda: ["a fresh point"])
    cached = ("pres", (10, 1), ["an old point"], False)
    with step_in_flight():
        assert board_cache(cached, "pres", (20, 2), loads)[2] == ["an old point"] and loads.calls == 0  # the file grew: wait
        assert board_cache(cached, "pres", (20, 2), loads, in_flight=lambda: 0)[2] == ["a fresh point"]  # control
    assert board_cache(cached, "pres", (20, 2), loads) == ("pres", (20, 2), ["a fresh point"], False) and loads.calls == 2
    assert board_cache(("pres", (20, 2), ["kept"], False), "pres", (20, 2), loads)[2] == ["kept"] and loads.calls == 2  # unchanged
