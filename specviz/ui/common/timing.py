"""Server-side timing: one structured line per rerun on the `specviz.timing` logger, so a person or a load test
can read where a Step's time went.

    timing {"session": "3f2a9c1e", "page": "step-through", "fragment": true, "script_s": 0.412, "queue_wait_s": 0.0,
            "round_s": 0.183, "steps": 1}

script_s: the whole rerun (a full run or a fragment run); queue_wait_s: time spent waiting for turns in the model's
queue (specviz.workshop.queues); round_s: time inside the turns running rounds (what the model cost); steps: rounds run.
The lines go to stderr (the server's log); SPECVIZ_TIMING_LOG=off silences them."""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from specviz.ui.common import st_internals
from specviz.workshop.foreground import foreground

LOGGER_NAME = "specviz.timing"
log = logging.getLogger(LOGGER_NAME)
_local = threading.local()  # one rerun at a time per script thread
_handler_lock = threading.Lock()


@dataclass
class RerunTiming:
    page: str
    fragment: bool
    start: float
    queue_wait_s: float = 0.0
    round_s: float = 0.0
    steps: int = 0

    def line(self, session: str) -> str:
        fields = {
            "session": session, "page": self.page, "fragment": self.fragment, "script_s": round(time.perf_counter() - self.start, 4),
            "queue_wait_s": round(self.queue_wait_s, 4), "round_s": round(self.round_s, 4), "steps": self.steps,
        }  # fmt: skip
        return "timing " + json.dumps(fields)


def parse_line(line: str) -> dict | None:
    """A timing line (anywhere in a log line) -> its fields; None for other lines."""
    at = line.find("timing {")
    if at < 0:
        return None
    try:
        fields = json.loads(line[at + len("timing ") :])
    except ValueError:
        return None
    return fields if isinstance(fields, dict) else None


def _ensure_handler() -> None:
    with _handler_lock:
        if log.handlers or os.environ.get("SPECVIZ_TIMING_LOG", "").lower() in ("off", "0", "false"):
            return
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def _session_id() -> str:
    """The first 8 characters of this session's id for the log ("-" outside a script run). Not
    specviz.ui.common.sessions.session_id_now: sessions' users (turns) import this module."""
    session_id = st_internals.session_id_now()
    return session_id[:8] if session_id is not None else "-"


@contextmanager
def rerun(page: str, fragment: bool = False) -> Iterator[RerunTiming]:
    """Time this rerun and log one line at its end (however it ends: st.rerun and st.stop raise). Nested calls (a
    fragment drawn inside a full run) share the outer rerun's line. While it runs, background work in this process
    (the baselines) waits: specviz.workshop.foreground."""
    outer = getattr(_local, "timing", None)
    if outer is not None:
        yield outer
        return
    _ensure_handler()
    timing = RerunTiming(page, fragment, time.perf_counter())
    _local.timing = timing
    try:
        with foreground().busy():
            yield timing
    finally:
        _local.timing = None
        log.info(timing.line(_session_id()))


def add_queue_wait(seconds: float) -> None:
    timing = getattr(_local, "timing", None)
    if timing is not None:
        timing.queue_wait_s += seconds


@contextmanager
def round_clock() -> Iterator[None]:
    """Count the with-block as one round of this rerun (its time in round_s)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timing = getattr(_local, "timing", None)
        if timing is not None:
            timing.round_s += time.perf_counter() - start
            timing.steps += 1
