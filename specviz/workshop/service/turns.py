"""The model thread: every model pass of a service runs on this one thread (torch's OpenMP team belongs to the thread
that calls it, so a pool of threads would start a team each and oversubscribe the cores; docs/performance.md).

submit() is an executor's. run_until() is what makes a long prefill take turns: a pass paused between two chunks
(specviz.core.protocols.pause_point, on this thread) calls it, and the passes other requests submit meanwhile run here,
nested inside the paused one, until the paused one's turn comes back (specviz.workshop.service.server: Service._pause).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any

_WAKE = object()  # put in the queue when a run_until's turn comes back
_STOP = object()


class ModelThread:
    """One thread running submitted work in order; run_until() runs it from inside a paused piece of work."""

    def __init__(self, name: str = "specviz-model") -> None:
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        # a daemon thread, stopped and joined at exit (before the interpreter cuts off a thread still inside torch)
        self._thread = threading.Thread(target=self._loop, name=f"{name}_0", daemon=True)
        self._thread.start()
        atexit.register(self.shutdown)

    def submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._work.put((fn, future))
        return future

    def run_until(self, done: concurrent.futures.Future) -> None:
        """On the model thread only: run the work submitted until done completes (a paused pass's turn came back)."""
        done.add_done_callback(lambda _: self._work.put(_WAKE))
        while not done.done():
            self._run(self._work.get())

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Stop after the work already submitted (a pass under way finishes)."""
        self._work.put(_STOP)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)

    def _loop(self) -> None:
        while True:
            item = self._work.get()
            if item is _STOP:
                return
            self._run(item)
            del item  # a finished pass keeps nothing alive (its decoder, once its request is gone) while the queue is empty

    def _run(self, item: object) -> None:
        if item is _WAKE or item is _STOP:  # a wake-up that came after its run_until returned; a stop inside a pause
            return
        fn, future = item  # type: ignore[misc]
        if not future.set_running_or_notify_cancel():  # its request went away before it started
            return
        try:
            result = fn()
        except BaseException as exc:  # handed to whoever awaits it, as an executor does
            future.set_exception(exc)
        else:
            future.set_result(result)
