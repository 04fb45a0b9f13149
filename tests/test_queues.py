"""The per-model queue (specviz.workshop.queues): FIFO order, the bound, places in line, timeouts, release on errors;
and the registry that frees sessions whose tab went away (specviz.workshop.sessions). Plain threads, no streamlit."""

from __future__ import annotations

import threading
import time

import pytest

from specviz.workshop.queues import ModelQueue, QueueTimeout, model_queue, reset_queues
from specviz.workshop.sessions import SessionRegistry
from tests.service_helpers import wait_until


def test_turns_are_served_first_come_first_served():
    queue = ModelQueue("m", 1)
    order, gate = [], threading.Event()
    holder_in = threading.Event()

    def holder():
        with queue.turn():
            holder_in.set()
            gate.wait(5)

    def worker(i):
        with queue.turn(poll_s=0.01):
            order.append(i)

    threads = [threading.Thread(target=holder)]
    threads[0].start()
    holder_in.wait(5)
    for i in range(6):  # join the line one after another, while the holder blocks it
        t = threading.Thread(target=worker, args=(i,))
        t.start()
        threads.append(t)
        wait_until(lambda i=i: queue.waiting == i + 1)
    gate.set()
    for t in threads:
        t.join(5)
    assert order == list(range(6))
    assert queue.in_flight == 0 and queue.waiting == 0


@pytest.mark.parametrize("bound", [1, 2, 3])
def test_never_more_than_the_bound_in_flight(bound):
    queue = ModelQueue("m", bound)
    lock, now, peak = threading.Lock(), [0], [0]

    def worker():
        for _ in range(5):
            with queue.turn(poll_s=0.01):
                with lock:
                    now[0] += 1
                    peak[0] = max(peak[0], now[0])
                time.sleep(0.002)
                with lock:
                    now[0] -= 1

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert peak[0] == bound


def test_a_waiter_sees_its_place_and_it_counts_down():
    queue = ModelQueue("m", 1)
    gates = [threading.Event() for _ in range(3)]
    places: list[int] = []

    def hold(gate, entered):
        with queue.turn(poll_s=0.01):
            entered.set()
            gate.wait(5)

    entered = [threading.Event() for _ in range(3)]
    holders = [threading.Thread(target=hold, args=(g, e)) for g, e in zip(gates, entered)]
    holders[0].start()
    entered[0].wait(5)
    for i in (1, 2):
        holders[i].start()
        wait_until(lambda i=i: queue.waiting == i)

    done = threading.Event()

    def watcher():
        with queue.turn(on_wait=lambda ahead, waited: places.append(ahead), poll_s=0.01):
            done.set()

    w = threading.Thread(target=watcher)
    w.start()
    wait_until(lambda: places and places[-1] == 3)  # one in flight and two earlier in line
    for i, gate in enumerate(gates):
        gate.set()
        if i < 2:
            wait_until(lambda i=i: places[-1] == 2 - i)
    done.wait(5)
    for t in holders + [w]:
        t.join(5)
    assert places[0] == 3 and sorted(set(places), reverse=True) == [3, 2, 1]


def test_timeout_leaves_the_line_and_says_so():
    queue = ModelQueue("m", 1)
    with queue.turn():
        t0 = time.monotonic()
        with pytest.raises(QueueTimeout, match="1 ahead"):
            with queue.turn(timeout_s=0.2, poll_s=0.05):
                pass
        assert time.monotonic() - t0 < 2
        assert queue.waiting == 0
    with queue.turn(timeout_s=1):  # the slot came back
        assert queue.in_flight == 1


def test_an_error_in_the_turn_or_while_waiting_releases_everything():
    queue = ModelQueue("m", 1)
    with pytest.raises(RuntimeError):
        with queue.turn():
            raise RuntimeError("the round failed")
    assert queue.in_flight == 0

    class Stop(Exception):  # streamlit stops a script by raising inside an st call, e.g. in on_wait
        pass

    def stop(ahead, waited):
        raise Stop

    with queue.turn():
        with pytest.raises(Stop):
            with queue.turn(on_wait=stop, poll_s=0.01):
                pass
        assert queue.waiting == 0
    with queue.turn(timeout_s=1):  # no deadlock: the next session gets a turn
        pass


def test_a_session_asking_again_goes_behind_those_waiting():
    """Run to end takes one turn per round: between two of its rounds, the session waiting gets the model."""
    queue = ModelQueue("m", 1)
    log: list[str] = []
    first_in = threading.Event()

    def greedy():
        for i in range(3):
            with queue.turn(poll_s=0.01):
                log.append(f"greedy{i}")
                first_in.set()
                if i == 0:
                    wait_until(lambda: queue.waiting == 1)  # the polite session is in line before this turn ends

    def polite():
        first_in.wait(5)
        with queue.turn(poll_s=0.01):
            log.append("polite")

    threads = [threading.Thread(target=greedy), threading.Thread(target=polite)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert log.index("polite") == 1


def test_one_queue_per_model():
    reset_queues()
    a, b = model_queue(("a", "cpu", "float32"), 1), model_queue(("b", "cpu", "float32"), 1)
    assert a is not b and model_queue(("a", "cpu", "float32"), 2) is a and a.max_in_flight == 1
    reset_queues()
    with pytest.raises(ValueError):
        ModelQueue("m", 0)


def test_registry_frees_gone_sessions_after_the_grace_and_idle_runs_once():
    now = [0.0]
    registry = SessionRegistry(clock=lambda: now[0])
    active = {"a": True, "b": True}
    freed: list[tuple[str, bool]] = []

    def sweep():
        return registry.sweep(lambda sid: active[sid], lambda sid, state, whole: freed.append((sid, whole)), gone_after_s=30, idle_after_s=600)

    registry.touch("a", object())
    registry.touch("b", object())
    active["a"] = False
    assert sweep() == 0  # first seen gone: the grace starts
    now[0] = 20
    assert sweep() == 0
    active["a"] = True  # came back (a flaky network): the grace resets
    now[0] = 40
    assert sweep() == 0
    active["a"] = False
    sweep()
    now[0] = 71
    assert sweep() == 1 and freed == [("a", True)] and len(registry) == 1
    now[0] = 700  # b idle for 700 s: its runs go, once; it stays registered
    assert sweep() == 1 and freed[-1] == ("b", False)
    assert sweep() == 0
    registry.touch("b", object())  # a click: idle again only after another idle period
    now[0] = 1000
    assert sweep() == 0


def test_registry_survives_a_failing_free():
    registry = SessionRegistry(clock=lambda: 100.0)
    registry.touch("x", object())

    def boom(*args):
        raise RuntimeError("free failed")

    registry.sweep(lambda sid: True, boom, gone_after_s=1, idle_after_s=0)  # logged, not raised


def test_policy_queues_sessions_and_baselines_are_plain_python():
    import subprocess
    import sys

    code = "import sys, specviz.workshop.policy, specviz.workshop.queues, specviz.workshop.sessions, specviz.workshop.baselines; print('streamlit' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


def _hold_queue(queue: ModelQueue):
    """A holder in flight until the returned gate is set."""
    gate, entered = threading.Event(), threading.Event()

    def hold():
        with queue.turn():
            entered.set()
            gate.wait(5)

    thread = threading.Thread(target=hold)
    thread.start()
    entered.wait(5)
    return gate, thread


def test_interactive_waiters_go_before_background_ones_and_each_class_is_fifo():
    queue = ModelQueue("m", 1)
    gate, holder = _hold_queue(queue)
    order, threads = [], []

    def worker(name, background):
        with queue.turn(poll_s=0.01, background=background):
            order.append(name)

    # background waiters join first, interactive ones after: the interactive ones are still served first
    for name, background in [("b0", True), ("b1", True), ("i0", False), ("b2", True), ("i1", False)]:
        t = threading.Thread(target=worker, args=(name, background))
        t.start()
        threads.append(t)
        joined = len(threads)
        wait_until(lambda joined=joined: queue.waiting + queue.waiting_background == joined)
    assert queue.waiting == 2 and queue.waiting_background == 3
    gate.set()
    for t in [holder, *threads]:
        t.join(5)
    assert order == ["i0", "i1", "b0", "b1", "b2"]
    assert queue.in_flight == queue.waiting == queue.waiting_background == 0


def test_a_background_waiter_counts_every_interactive_waiter_ahead_and_times_out_cleanly():
    queue = ModelQueue("m", 1)
    gate, holder = _hold_queue(queue)
    seen, interactive_gate = [], threading.Event()

    def background_turn():
        with pytest.raises(QueueTimeout):
            with queue.turn(on_wait=lambda ahead, waited: seen.append(ahead), timeout_s=0.3, poll_s=0.02, background=True):
                pass

    waiter = threading.Thread(target=background_turn)

    def interactive_turn():
        with queue.turn(poll_s=0.01):
            interactive_gate.wait(5)

    interactive = threading.Thread(target=interactive_turn)
    interactive.start()
    wait_until(lambda: queue.waiting == 1)
    waiter.start()
    waiter.join(5)
    assert seen and max(seen) == 2  # the holder in flight and the interactive waiter
    assert queue.waiting_background == 0  # the timed-out waiter left the line
    gate.set()
    interactive_gate.set()
    for t in (holder, interactive):
        t.join(5)
    assert queue.in_flight == 0



def _line_up(queue: ModelQueue, clients: list[str | None]) -> list[int]:
    """Block the queue, line up one waiter per entry of clients (in that order), release it: the order served."""
    order, gate, holder_in = [], threading.Event(), threading.Event()

    def holder():
        with queue.turn(client="holder"):
            holder_in.set()
            gate.wait(5)

    def worker(i, client):
        with queue.turn(poll_s=0.01, client=client):
            order.append(i)

    threads = [threading.Thread(target=holder)]
    threads[0].start()
    holder_in.wait(5)
    for i, client in enumerate(clients):
        t = threading.Thread(target=worker, args=(i, client))
        t.start()
        threads.append(t)
        wait_until(lambda n=i + 1: queue.waiting == n)
    gate.set()
    for t in threads:
        t.join(5)
    return order


def test_turns_rotate_between_client_addresses():
    """Issue 32: one participant with ten sessions clicking Step had ten places in line, so another participant's Step
    waited for all ten (p95 10.7 s in the room attack). Now the turns rotate over the addresses waiting (the one
    served longest ago first) and each address is first come, first served within."""
    clients = ["hog"] * 6 + ["victim"]
    order = _line_up(ModelQueue("m", 1), clients)
    assert order.index(6) <= 1  # the victim waits for at most one of the hog's turns
    assert [i for i in order if clients[i] == "hog"] == [0, 1, 2, 3, 4, 5]  # in order within an address
    # known-bad control: strict first come, first served puts the victim last
    assert _line_up(ModelQueue("m", 1), [None] * 7) == list(range(7))


def test_rotation_alternates_between_two_busy_addresses_and_reports_a_fair_place():
    queue = ModelQueue("m", 1)
    order = _line_up(queue, ["a", "a", "a", "b", "b", "b"])
    assert [("a" if i < 3 else "b") for i in order] in (list("ababab"), list("bababa"))


def test_a_room_behind_one_address_is_served_first_come_first_served():
    assert _line_up(ModelQueue("m", 1), ["nat"] * 5) == list(range(5))
