"""Long jobs on a shared server: a benchmark sweep, the Exactness lab's samplers, the cost profile, the numerics
comparison. Plain Python (threading), no streamlit.

Each job takes the model one turn per run (or per pass) through specviz.workshop.queues's queue (a Turn,
specviz.core.protocols, handed to the measuring code), so other sessions' rounds get a turn between two of its runs. This module adds what the queue does not know about:

* LongJobs: in shared mode a participant (a session) holds at most one long job at a time; a second start is
  refused with a message saying which job is still running.
* shutting_down / wait_for_turns: the server is stopping (SIGTERM). Jobs take no new turn once it is set, and the
  process waits a moment at exit for the turns in flight, so no thread is cut off in the middle of a model pass."""

from __future__ import annotations

import atexit
import contextlib
import gc
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

log = logging.getLogger(__name__)

EXIT_WAIT_S = 3.5  # at exit, wait this long at most for model turns in flight (the server must be gone within 5 s)

shutting_down = threading.Event()  # set once the process is stopping; never cleared


class JobRefused(ValueError):
    """A participant asked for a second long job while one is running; the message says which."""


class JobStopped(ValueError):
    """A long job stopped between two runs (the server is shutting down, or the session's tab is gone)."""


@dataclass(frozen=True)
class Job:
    what: str  # "a benchmark sweep", "the cost profile"
    started: float  # time.monotonic()


class LongJobs:
    """participant -> the one long job it runs. Thread-safe; `clock` for tests."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._jobs: dict[str, Job] = {}

    def running(self, participant: str) -> Job | None:
        with self._lock:
            return self._jobs.get(participant)

    def __len__(self) -> int:
        with self._lock:
            return len(self._jobs)

    @contextmanager
    def hold(self, participant: str, what: str) -> Iterator[Job]:
        """Hold the participant's one job slot for the with-block. Raises JobRefused if it is taken."""
        with self._lock:
            current = self._jobs.get(participant)
            if current is not None:
                ago = self._clock() - current.started
                raise JobRefused(
                    f"You already have {current.what} running (started {ago:.0f} s ago). On this shared server each "
                    f"participant runs one long job at a time: wait for it to finish, then start {what}."
                )
            job = self._jobs[participant] = Job(what, self._clock())
        try:
            yield job
        finally:
            with self._lock:
                if self._jobs.get(participant) is job:
                    del self._jobs[participant]


def check_running() -> None:
    """Raise JobStopped if the server is stopping (call before taking each turn)."""
    if shutting_down.is_set():
        raise JobStopped("The server is shutting down, so this job stopped. Its finished runs are not kept.")


def wait_for_turns(in_flight: Callable[[], int], timeout_s: float = EXIT_WAIT_S, poll_s: float = 0.05) -> bool:
    """Set shutting_down, then wait until in_flight() is 0 or timeout_s passed. True when nothing was left running."""
    shutting_down.set()
    deadline = time.monotonic() + timeout_s
    while in_flight() > 0:
        if time.monotonic() >= deadline:
            log.warning("exiting with %d model turn(s) still in flight", in_flight())
            return False
        time.sleep(poll_s)
    return True


_exit_hook_lock = threading.Lock()
_exit_hook: list[Callable[[], int]] = []


def stop_at_exit(in_flight: Callable[[], int]) -> None:
    """Once per process: at interpreter exit, stop long jobs and wait briefly for the model turns in flight."""
    with _exit_hook_lock:
        if _exit_hook:
            return
        _exit_hook.append(in_flight)
    atexit.register(_at_exit, in_flight)


def _at_exit(in_flight: Callable[[], int]) -> None:
    if not wait_for_turns(in_flight):
        # A thread still inside a torch call would be cut off by the interpreter's shutdown, which aborts the process
        # ("terminate called without an active exception"); leave now instead, with the logs flushed.
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(0)
    # The interpreter's last garbage collection walks every object of torch, transformers and plotly (seconds with a
    # model loaded); frozen objects are skipped, and the operating system frees the memory anyway.
    gc.freeze()
