"""Model turns on the pages: one queue per loaded model with a visible place in line (model_turn), and long jobs
(long_job: one turn per run, one job per participant in shared mode). The queue itself is specviz.workshop.queues."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st
from streamlit.logger import get_logger

from specviz.core.protocols import Turn, pausable
from specviz.ui.common import timing
from specviz.ui.common.access import current_policy
from specviz.ui.common.client import current_client
from specviz.ui.common.sessions import runtime, session_id_now
from specviz.workshop.jobs import JobStopped, LongJobs, check_running
from specviz.workshop.queues import ModelQueue, QueueTimeout, TurnKind, model_queue

log = get_logger(__name__)  # scripts/contention.py reads its turn lines


def queue_key(model) -> tuple:
    return (model.name, str(model.device), str(model.dtype))


def target_queue(model) -> ModelQueue:
    """The one queue for this loaded model, bounded by the owner's concurrency for its device."""
    return model_queue(queue_key(model), current_policy().concurrency(model.device.type))


@contextmanager
def model_turn(model, what: str = "your round", slot=None, kind: TurnKind = "step") -> Iterator[float]:
    """Hold a turn on `model` for the with-block; while waiting, show the place in line (an element drawn only if we
    wait; in `slot`, an st.empty, when given). kind: a participant's "step", or a piece of a long "job". Raises
    ValueError with a message after the owner's queue timeout, and JobStopped (a ValueError) once the server is
    shutting down. A long prefill inside the block lets waiting turns go first between its chunks
    (specviz.core.protocols.pausable; the waits count as queue time, not the run's)."""
    check_running()
    policy = current_policy()
    queue = model_queue(queue_key(model), policy.concurrency(model.device.type))
    box = slot
    start = time.perf_counter()

    def on_wait(ahead: int, waited_s: float) -> None:
        nonlocal box
        if box is None:
            box = st.empty()
        box.info(
            f"⏳ Waiting for the model: {ahead} ahead of you ({waited_s:.0f} s so far). {what.capitalize()} runs when it is your "
            "turn; its timing starts then, so the wait does not count against the speedup."
        )

    try:
        with queue.held_turn(on_wait, timeout_s=policy.queue_timeout_s, kind=kind, client=current_client().address) as held:
            waited = held.waited_s
            timing.add_queue_wait(waited)
            log.debug("specviz turn: %s waited %.3f s for %s", what, waited, queue.name)  # scripts/contention.py reads this
            if box is not None:
                box.empty()

            def pass_on() -> float:
                again = held.pass_on()
                if again:
                    timing.add_queue_wait(again)
                    log.debug("specviz turn: %s waited %.3f s for %s", what, again, queue.name)
                    if box is not None:
                        box.empty()
                return again

            with pausable(pass_on):
                yield waited
    except QueueTimeout as exc:
        timing.add_queue_wait(time.perf_counter() - start)
        log.warning("specviz queue for %s: %s", queue.name, exc)
        raise ValueError(str(exc)) from None
    finally:
        if box is not None:
            box.empty()


# --- long jobs: one turn per run, one job per participant --------------------------------------------------------

_jobs = LongJobs()


@contextmanager
def long_job(model, job: str, each: str) -> Iterator[Turn]:
    """A long job of this session (job: "a benchmark sweep"): refused in shared mode while the session runs another.
    Yields a Turn: each call takes one model turn (each: "the sweep's next run" while waiting), shows the place in
    line in one slot, and raises JobStopped between runs once the tab is gone or the server stops."""
    sid = session_id_now()
    hold = _jobs.hold(sid, job) if current_policy().shared and sid else contextlib.nullcontext()
    slot = st.empty()
    with hold:

        def turn():
            rt = runtime()
            if sid and rt is not None and not rt.is_active_session(sid):
                raise JobStopped(f"This tab disconnected, so {job} stopped to leave the model to the others.")
            return model_turn(model, each, slot, kind="job")

        yield turn
