"""The 45-minute lesson (docs/lesson-45min.md): its five tasks, and the room's anonymous count of who finished each.

TASKS is the one table of the tasks: the app's checklists (specviz.ui.room.lesson) draw it, and the doc's task headings
and checklists repeat its titles and steps (tests/test_lesson.py checks they match). A task belongs to one page (a path of
specviz.ui.common.navigation.PAGE_SPECS) and is finished when every one of its steps is ticked.

The count is one small JSON record per presentation on the room's store (specviz.workshop.store: the run directory
the replicas share, or Redis; specviz.workshop.presentation removes it with the presentation's board):

    lesson-<presentation id>.marks   {"1": ["<16 hex>", ...], "2": [...], ...}

Each entry is a digest of a random secret one browser session keeps (session_digest): no name, no address, nothing
that ties it to a person. A session counts at most once per task (the entries are a set, and a session only ever
writes its own), unticking takes its mark back, and each task holds at most MAX_MARKS_PER_TASK marks (later ones are
dropped), so the record stays under MAX_FILE_BYTES however a client behaves. Writes replace it whole under the
store's lock; a record that is damaged or too large reads as empty (logged) and the next write replaces it. A store
that cannot be reached raises StoreUnavailable (an OSError): the page keeps the ticks and writes them again later.
Plain Python: no streamlit.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from specviz.workshop.store import Store, StoreUnavailable
from specviz.workshop.store.directory import DirectoryStore

log = logging.getLogger(__name__)

LOCK_NAME = ".lesson.lock"  # the store's lock for a read-modify-write of the marks
MAX_MARKS_PER_TASK = 1000  # a room of 30 is far below; a client opening sessions in a loop stops here
_DIGEST = re.compile(r"[0-9a-f]{16}")
_ID = re.compile(r"[A-Za-z0-9_-]{22}")  # a presentation id (specviz.workshop.presentation.new_id)


@dataclass(frozen=True)
class LessonTask:
    """One task of the lesson: a title, the page it is done on, and the steps a participant ticks."""

    number: int  # 1..len(TASKS), the order of the lesson
    title: str  # the doc's heading: "Task <number> of 5: <title> (<page title>, <minutes> min)"
    page: str  # the page file, as in specviz.ui.common.navigation.PAGE_SPECS
    minutes: int  # its share of the 45 minutes
    steps: tuple[str, ...]  # what a participant does and answers, one tick each


TASKS: tuple[LessonTask, ...] = (
    LessonTask(1, "Watch three rounds", "pages/step_through.py", 8, (
        "Keep the first example *repeat after an example* and the default drafter; press **Step** three times.",
        "Find a draft the target kept and a draft it threw away (struck through): in which round, at which position?",
        "After three Steps, read new tokens and target passes: how many passes would plain decoding have needed?",
        "Press **Run to end**: tokens per target pass for the whole answer, and the measured speedup?",
    )),
    LessonTask(2, "Predict a speedup", "pages/theory.py", 7, (
        "Set α = 0.8, k = 4, c = 0.05 and a constant verify cost of 1: read tokens per target pass and the expected speedup.",
        "Read the best k there; then set c = 0.5: what happens to the speedup and the best k?",
        "Back at c = 0.05, pick the shipped AMD EPYC profile as the verify cost: what does a 5-token pass cost, and what is left of the speedup?",
    )),
    LessonTask(3, "Break the rule", "pages/exactness.py", 8, (
        "Section 1, the exact rule, N = 10,000: read the TV distance and the chi-square p-value.",
        "Switch to the bug *draw from p_target instead of the residual*: which tokens come out too often, and why those?",
        "Section 3: press **Run both**; if tokens per target pass is 1.00 nothing was drafted, so give it a prompt that copies and run again: still identical?",
    )),
    LessonTask(4, "Measure it", "pages/benchmark.py", 7, (
        "In the table measured earlier, find prompt lookup's speedup and tokens per pass on copy and on prose at k = 4.",
        "One person per table runs the default sweep (copy, prompt lookup, k = 2 and 4): compare with the shipped numbers.",
        "Say why tokens per pass stays put from run to run while the speedup moves.",
    )),
    LessonTask(5, "Which service speculates?", "pages/race.py", 8, (
        "Press **Start the race** on the copy example: how many times faster is the speculative lane, and does the page say *Identical text*?",
        "In the gap histograms, which lane has gaps near zero, and what is a burst?",
        "Probe service A and service B (copy prompts) and submit your guess; without `serve-pair`, say how a probe would tell them apart.",
    )),
)  # fmt: skip


def tasks_on(page: str) -> tuple[LessonTask, ...]:
    """The tasks done on this page (a PAGE_SPECS path)."""
    return tuple(t for t in TASKS if t.page == page)


def session_digest(secret: str) -> str:
    """The anonymous entry for one browser session, from a random secret the session keeps."""
    return hashlib.sha256(f"specviz-lesson:{secret}".encode()).hexdigest()[:16]


MAX_FILE_BYTES = len(TASKS) * (MAX_MARKS_PER_TASK * 20 + 16)  # '"<16 hex>", ' per mark, a key per task


class LessonMarks:
    """Who finished which task, as anonymous counts per presentation, on the room's store (a path means that run
    directory)."""

    def __init__(self, store: Store | str | os.PathLike) -> None:
        self.store: Store = DirectoryStore(store) if isinstance(store, (str, os.PathLike)) else store

    def _locked(self) -> contextlib.AbstractContextManager[None]:
        return self.store.lock(LOCK_NAME)

    def stamp(self, presentation_id: str) -> Hashable:
        """Changes whenever the presentation's marks do; a page counts again only then."""
        return self.store.stamp(marks_name(presentation_id))

    def _read(self, presentation_id: str) -> dict[int, set[str]]:
        """task number -> the sessions that finished it; a missing, damaged or oversized record reads as none."""
        try:
            data = self.store.get(marks_name(presentation_id), MAX_FILE_BYTES)
        except StoreUnavailable:
            raise
        except OSError as exc:
            log.warning("cannot read the lesson's marks: %s", exc.strerror or exc)
            return {}
        if data is None:
            return {}
        try:
            return _parse(data)
        except ValueError as exc:
            log.warning("the lesson's marks are damaged (%s); they read as empty", exc)
            return {}

    def record(self, presentation_id: str, digest: str, finished: Iterable[int]) -> bool:
        """Make this session (digest) count for exactly the tasks in finished: marked there, unmarked elsewhere.
        False when a task was full and this session's mark was dropped (logged). OSError as the disk (or the store) says."""
        if not _DIGEST.fullmatch(digest):
            raise ValueError("a session's digest is 16 hex digits")
        wanted = set(finished)
        if not wanted <= {t.number for t in TASKS}:
            raise ValueError("no such lesson task")
        fitted = True
        with self._locked():
            marks = self._read(presentation_id)
            for task in TASKS:
                have = marks.setdefault(task.number, set())
                if task.number not in wanted:
                    have.discard(digest)
                elif digest not in have:
                    if len(have) >= MAX_MARKS_PER_TASK:
                        log.warning("lesson: task %d already holds %d marks; one was dropped", task.number, MAX_MARKS_PER_TASK)
                        fitted = False
                    else:
                        have.add(digest)
            data = {str(n): sorted(d) for n, d in sorted(marks.items()) if d}
            self.store.put(marks_name(presentation_id), json.dumps(data, separators=(",", ":")).encode("ascii"))
        return fitted

    def counts(self, presentation_id: str) -> dict[int, int]:
        """task number -> how many sessions finished it (every task, 0 where none did)."""
        marks = self._read(presentation_id)
        return {t.number: len(marks.get(t.number, ())) for t in TASKS}


def marks_name(presentation_id: str) -> str:
    """The record a presentation's lesson marks live in (specviz.workshop.presentation removes it with the board)."""
    if not _ID.fullmatch(presentation_id):
        raise ValueError("a presentation id is 22 letters, digits, '-' or '_'")
    return f"lesson-{presentation_id}.marks"


def _parse(data: bytes) -> dict[int, set[str]]:
    """Validate a marks record like any hostile input; ValueError says what is wrong."""
    if len(data) > MAX_FILE_BYTES:
        raise ValueError("too large")
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise ValueError("not JSON") from None
    numbers = {str(t.number): t.number for t in TASKS}
    if not isinstance(raw, dict) or not set(raw) <= set(numbers):
        raise ValueError("not a marks file")
    out: dict[int, set[str]] = {}
    for key, entries in raw.items():
        if not isinstance(entries, list) or len(entries) > MAX_MARKS_PER_TASK:
            raise ValueError(f"task {key}'s marks are not a list that fits")
        if not all(isinstance(e, str) and _DIGEST.fullmatch(e) for e in entries):
            raise ValueError(f"task {key} holds something that is not a session's digest")
        out[numbers[key]] = set(entries)
    return out
