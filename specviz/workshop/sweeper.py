"""The background session sweeper: one thread per process that, every few seconds, frees what closed or idle
browser sessions hold (their runs, their state, their KV-cache reservations) and gives the heap back to the OS.

Plain Python: the server's side (which sessions are connected, how to free one, the owner's idle time) is handed in
as one callable, `tick`, by the UI (specviz.ui.common.sessions). A SessionSweeper owns its registry of sessions and
its thread; the UI keeps one per process (specviz.workshop.resources.singleton), never a module global.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import threading
from collections.abc import Callable

from specviz.workshop.jobs import shutting_down
from specviz.workshop.sessions import SessionRegistry

SWEEP_EVERY_S = 5.0


def trim() -> None:
    """Collect garbage and give freed heap pages back to the OS (glibc's malloc_trim; elsewhere a no-op)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class SessionSweeper:
    """A process's session registry and the thread that sweeps it. start(tick) starts the thread once (later calls
    do nothing); the thread calls tick() every `every_s` until `stop` is set (the server shutting down), and a tick
    that raises is logged, never fatal."""

    def __init__(
        self, every_s: float = SWEEP_EVERY_S, stop: threading.Event = shutting_down, log: logging.Logger | None = None, registry: SessionRegistry | None = None
    ) -> None:
        self.registry = registry if registry is not None else SessionRegistry()
        self.every_s = every_s
        self._stop = stop
        self._log = log or logging.getLogger(__name__)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self, tick: Callable[[], None]) -> bool:
        """Start the sweeping thread unless it runs already; True when this call started it."""
        with self._lock:
            if self._thread is not None:
                return False
            self._thread = threading.Thread(target=self._run, args=(tick,), name="specviz-session-sweeper", daemon=True)
            self._thread.start()
            return True

    def _run(self, tick: Callable[[], None]) -> None:
        while not self._stop.wait(self.every_s):  # stops with the server (and is a daemon thread besides)
            try:
                tick()
            except Exception:  # the sweeper must never die; a bad policy is reported on the page instead
                self._log.exception("session sweep failed")

    def sweep(
        self,
        is_active: Callable[[str], bool],
        free: Callable[[str, object, bool], None],
        gone_after_s: float,
        idle_after_s: float,
    ) -> int:
        """One sweep of the registry (SessionRegistry.sweep); when it freed a session, the heap is trimmed. Returns how
        many sessions were freed."""
        freed = self.registry.sweep(is_active, free, gone_after_s=gone_after_s, idle_after_s=idle_after_s)
        if freed:
            self._log.info("specviz freed %d session(s): %d tracked", freed, len(self.registry))
            trim()
        return freed
