"""Foreground work in this process (a session's rerun, and the rounds it runs), so background work can yield to it.

A Step is a rerun: its round, then drawing. Plain decoding measured in the background (specviz.workshop.baselines)
on the same cores while a rerun draws slows the Step and, worse, is timed slow itself: the measured speedup then
divides by an inflated baseline (once 5.46× at 4.88 tokens per pass, which no speedup can reach). So
background work waits until no rerun is in flight and the last one ended SETTLE_S ago, so the browser that draws it
has drawn (wait_idle), and a background measurement that a rerun overlapped (the epoch moved, or one is still
running) is thrown away and taken again (disturbed).

    with foreground().busy():           # specviz.ui.common.timing.rerun: every full and fragment rerun
        ...
    mark = foreground().wait_idle(stop) # the baseline worker, before each plain step
    ...measure...
    if foreground().disturbed(mark): ...take it again

Plain Python (threading), no streamlit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

POLL_S = 0.25  # how often a waiting background job checks whether it was stopped
# After a rerun ends, its browser draws what it sent (on a laptop, on the same cores): background work waits this long.
SETTLE_S = 0.5


class Foreground:
    """How many foreground jobs are in flight, and an epoch that moves each time one starts."""

    def __init__(self, settle_s: float = SETTLE_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.settle_s = settle_s
        self._cond = threading.Condition()
        self._clock = clock
        self._in_flight = 0
        self._epoch = 0
        self._ended = float("-inf")  # when the last foreground job ended

    @contextmanager
    def busy(self) -> Iterator[None]:
        """Count the with-block as foreground work (background work waits for it to end)."""
        with self._cond:
            self._in_flight += 1
            self._epoch += 1
        try:
            yield
        finally:
            with self._cond:
                self._in_flight -= 1
                self._ended = self._clock()
                self._cond.notify_all()

    def _quiet_for(self) -> float:
        """Seconds until the process has been idle for settle_s (0 or less: it has); inf while work is in flight."""
        return float("inf") if self._in_flight else self._ended - self._clock()

    def wait_idle(self, check_stop: Callable[[], None] = lambda: None, poll_s: float = POLL_S) -> int:
        """Block until no foreground work is in flight and none ended in the last settle_s; returns the epoch then
        (the mark disturbed() compares with). check_stop is called every poll_s while waiting and may raise."""
        settle_s = self.settle_s
        while True:
            with self._cond:
                left = self._quiet_for() + settle_s
                if left <= 0:
                    return self._epoch
                self._cond.wait(min(poll_s, left))
                if self._quiet_for() + settle_s <= 0:
                    return self._epoch
            check_stop()

    def disturbed(self, mark: int) -> bool:
        """True when foreground work started since wait_idle returned mark, or is running now."""
        with self._cond:
            return self._in_flight > 0 or self._epoch != mark


_foreground = Foreground()


def foreground() -> Foreground:
    """The process's one tracker (every session's reruns count: they share the cores)."""
    return _foreground
