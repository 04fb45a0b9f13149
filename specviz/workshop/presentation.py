"""The room follows the teacher: one live presentation per room, and the board of the room's forks.

A presentation is one small JSON record on the room's store (specviz.workshop.store: the run directory the replicas
share, or Redis), so any replica reads it and no replica ever reads another participant's session:

    room.presentation   {"id", "run", "started_at", "round", "selected_round", "version", "show_board", "holder",
                         "heartbeat"}
    board-<id>.jsonl    one anonymous point per line (BoardPoint), appended by the forks' Steps
    lesson-<id>.marks   who finished each lesson task, as anonymous counts (specviz.workshop.lesson)

`run` is the presented run's token (its saved run is written after every Step by the saved-runs machinery), `round`
its rounds, `selected_round` the round the presenter's inspector shows (None: the latest), `version` a counter bumped
on every change followers draw (they compare it with what they drew: a read of a record under 1 KB, no model time;
on Redis every change is also announced, and each process's watcher waits for that: watch()).
`holder` is a random id of the presenting browser session's claim (its page keeps it; the key is never kept), and
`heartbeat` the time.time() that page last showed it was there. The names end in neither ``.json`` nor anything the
run store evicts. Nothing secret is in either record: the presenter key is compared in memory
(specviz.workshop.presenter_key) and never written, logged or put in a URL.

One presentation, whoever holds it. Presenting with the key while a presentation is live *takes it over*: the same
id, board and followers, now showing the new presenter's run (a presenter who reloaded their page reclaims it this
way, with their restored run); the previous holder's page sees a holder that is not its own. Only a presenter who
asks for a new board gets a new id (and the old board goes). Anyone with the key can stop it. A presentation whose
heartbeat is older than the owner's idle time (SPECVIZ_PRESENTATION_IDLE_MINUTES) has ended by itself: it reads as
none and the next reader removes it (its presenter closed the tab, the replica died, the server was restarted). The
presenter's page writes the heartbeat at most every heartbeat_every_s(), without a new version (followers are not
redrawn for it).

Writes replace a record whole under the store's lock (an flock; on Redis a lease), so two presenters on two
replicas or hosts cannot interleave a read-modify-write. Both records are validated on read like any hostile input: a damaged presentation
reads as none, a damaged board line is skipped, and the board is capped (MAX_BOARD_BYTES): when a point would not fit,
the board is compacted to each fork's latest point (the only one it shows), so however often one fork Steps it holds
one line after a compaction; only a board of more forks than fit drops points. (The page adds at most one point per
round a fork actually ran, and a participant who forks again keeps their fork id: specviz.ui.room.fork.after_round.)
A store that cannot be reached raises StoreUnavailable (an OSError) from every method, reads included: a page never
takes "unreachable" for "no presentation" (it keeps what it drew and tries again).

Plain Python: no streamlit (specviz.ui.room.present, follow, fork and board are the page's side).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import secrets
import time
from collections.abc import Callable, Hashable
from dataclasses import asdict, dataclass, field, replace

from specviz.config import DRAFTER_KINDS
from specviz.workshop.lesson import marks_name
from specviz.workshop.store import Store, StoreUnavailable, Watch
from specviz.workshop.store.directory import DirectoryStore

log = logging.getLogger(__name__)

FILE_NAME = "room.presentation"
LOCK_NAME = ".room.lock"  # the store's lock for the presentation and its board
MAX_FILE_BYTES = 4096  # a presentation is ~300 bytes; anything larger is not ours
MAX_BOARD_BYTES = 2 * 2**20  # ~10,000 points: a room of 30 stepping for an hour fits many times
MAX_LINE_BYTES = 512
MAX_HEARTBEAT_EVERY_S = 60.0
_ID = re.compile(r"[A-Za-z0-9_-]{22}")  # secrets.token_urlsafe(16), as run tokens


def new_id() -> str:
    return secrets.token_urlsafe(16)


def heartbeat_every_s(idle_s: float) -> float:
    """How often a presenter's page writes its heartbeat: rarely, and at least four times within the idle time."""
    return min(MAX_HEARTBEAT_EVERY_S, idle_s / 4)


# --- the presentation ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Presentation:
    """The room's live presentation (see the module docstring)."""

    id: str
    run: str  # the presented run's token in the run directory
    started_at: float  # time.time() when this presentation started
    round: int = 0  # rounds in the presented run
    selected_round: int | None = None  # the presenter inspector's round; None: the latest
    version: int = 0
    show_board: bool = False
    holder: str = ""  # the presenting session's claim (new_id()); a takeover changes it
    heartbeat: float = 0.0  # time.time() of the presenter's last sign of life

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, data: bytes) -> Presentation:
        """Parse and validate; raises ValueError saying what is wrong (the file is hostile until checked)."""
        try:
            raw = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            raise ValueError("not JSON") from None
        if not isinstance(raw, dict) or set(raw) != set(cls.__dataclass_fields__):
            raise ValueError("not a presentation")
        for name in ("id", "run", "holder"):
            if not isinstance(raw[name], str) or not _ID.fullmatch(raw[name]):
                raise ValueError(f"{name} is not a token")
        ints = [raw["round"], raw["version"]] + ([] if raw["selected_round"] is None else [raw["selected_round"]])
        if any(not _whole(v, 0, 10**9) for v in ints):
            raise ValueError("a count is not a whole number in range")
        if not _real(raw["started_at"], 0, 10**11) or not _real(raw["heartbeat"], 0, 10**11) or not isinstance(raw["show_board"], bool):
            raise ValueError("started_at, heartbeat or show_board is not valid")
        return cls(**raw)


def _whole(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _real(value: object, low: float, high: float) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and low <= value <= high


class PresentationStore:
    """The room's presentation and boards on the room's store (a path means that run directory). idle_s: a
    presentation whose heartbeat is older has ended (None: never; a reader that only compares versions, such as the
    push watcher)."""

    def __init__(self, store: Store | str | os.PathLike, idle_s: float | None = None, clock: Callable[[], float] = time.time) -> None:
        self.store: Store = DirectoryStore(store) if isinstance(store, (str, os.PathLike)) else store
        self.idle_s = idle_s
        self._clock = clock

    @staticmethod
    def board_name(presentation_id: str) -> str:
        if not _ID.fullmatch(presentation_id):
            raise ValueError("a presentation id is 22 letters, digits, '-' or '_'")
        return f"board-{presentation_id}.jsonl"

    def _locked(self) -> contextlib.AbstractContextManager[None]:
        return self.store.lock(LOCK_NAME)

    def stamp(self) -> Hashable:
        """Changes whenever the presentation record does: a stat, or one GET on Redis, for a reader that re-reads the
        record only when it changed."""
        return self.store.stamp(FILE_NAME)

    def board_stamp(self, presentation_id: str) -> Hashable:
        """Changes whenever the board does (a page re-reads its points only then)."""
        return self.store.stamp(self.board_name(presentation_id))

    @property
    def announced(self) -> bool:
        """Whether the store announces a change (Redis' pub/sub: wait() wakes at once). A run directory announces
        nothing: its watcher looks at the file's stamp every few hundredths of a second, as it always did."""
        return not isinstance(self.store, DirectoryStore)

    def wait(self, since: Hashable, timeout_s: float) -> Hashable:
        """Block until the presentation's stamp differs from since (a change announced on Redis, with a poll as the
        fallback) or timeout_s passed; returns the stamp now."""
        return self.store.wait([FILE_NAME], since, timeout_s)

    def watch(self) -> Watch:
        """wait(), long-lived, for one process's watcher thread (specviz.ui.room.push): on Redis one subscription kept
        between waits, not one per wait."""
        return self.store.watch([FILE_NAME])

    def read(self) -> Presentation | None:
        """The live presentation, or None (none, one that ended by itself, or a file that is not one: logged,
        treated as none). The first reader to find it idle past idle_s removes it and its board."""
        p = self._read_file()
        if p is not None and self._idle(p):
            with self._locked():
                again = self._read_file()
                if again is not None and self._idle(again):
                    self._end(again, "ended by itself: its presenter was gone for longer than the idle time")
            return None
        return p

    def _idle(self, p: Presentation) -> bool:
        return self.idle_s is not None and self._clock() - p.heartbeat > self.idle_s

    def _live(self) -> Presentation | None:
        """Inside the lock: the presentation, or None when there is none or it ended by itself (then removed)."""
        p = self._read_file()
        if p is not None and self._idle(p):
            self._end(p, "ended by itself: its presenter was gone for longer than the idle time")
            return None
        return p

    def _end(self, p: Presentation, why: str) -> None:
        """Inside the lock: remove the presentation and its board."""
        self.store.delete(FILE_NAME)
        self._remove_boards(p.id)
        log.info("room: the presentation %s", why)

    def _remove_boards(self, presentation_id: str) -> None:
        """The presentation's board and its lesson marks (specviz.workshop.lesson) go with it."""
        self.store.delete(self.board_name(presentation_id))
        self.store.delete(marks_name(presentation_id))

    def _read_file(self) -> Presentation | None:
        try:
            data = self.store.get(FILE_NAME, MAX_FILE_BYTES)
        except StoreUnavailable:
            raise  # unreachable is not "none": the page keeps what it drew
        except OSError as exc:
            log.warning("cannot read the presentation: %s", exc.strerror or exc)
            return None
        if data is None:
            return None
        if len(data) > MAX_FILE_BYTES:
            log.warning("the presentation record is too large; ignored")
            return None
        try:
            return Presentation.from_json(data)
        except ValueError as exc:
            log.warning("the presentation record is damaged (%s); ignored", exc)
            return None

    def _write(self, presentation: Presentation) -> None:
        self.store.put(FILE_NAME, presentation.to_json().encode("utf-8"))  # on Redis, announced

    def start(self, run_token: str, rounds: int, new_board: bool = False) -> tuple[Presentation, Presentation | None]:
        """Make run_token the room's presented run, held by a new claim (``holder``). A live presentation is taken
        over: the same id, board and followers, unless new_board (a new id; the old board goes). Returns (the
        presentation, the one it took over or None). The version keeps counting across takeovers."""
        if not _ID.fullmatch(run_token):
            raise ValueError("a run token is 22 letters, digits, '-' or '_'")
        with self._locked():
            before = self._live()
            now = self._clock()
            version = before.version + 1 if before else 1
            if before is not None and not new_board:
                presentation = replace(before, run=run_token, round=rounds, selected_round=None, version=version, holder=new_id(), heartbeat=now)
            else:
                presentation = Presentation(new_id(), run_token, now, rounds, None, version, False, new_id(), now)
            self._write(presentation)
            if before is not None and presentation.id != before.id:
                self._remove_boards(before.id)
        log.info("room: a presentation %s", "started" if before is None else "was taken over" + (" with a new board" if new_board else ""))
        return presentation, before

    def update(self, presentation_id: str, holder: str, **changes) -> Presentation | None:
        """Change the live presentation if it is still presentation_id's and held by holder (bumping its version
        and the heartbeat); None when it is not (stopped, ended, or taken over). Fields that do not change leave the
        record and its version alone (known without the lock: the presenter's page asks twice a second)."""
        seen = self._read_file()
        if seen is not None and seen.id == presentation_id and seen.holder == holder and not self._idle(seen) and replace(seen, **changes) == seen:
            return seen
        with self._locked():
            live = self._live()
            if live is None or live.id != presentation_id or live.holder != holder:
                return None
            changed = replace(live, **changes)
            if changed == live:
                return live
            changed = replace(changed, version=live.version + 1, heartbeat=self._clock())
            self._write(changed)
            return changed

    def heartbeat(self, presentation_id: str, holder: str) -> Presentation | None:
        """The presenter is still there: write the heartbeat if it is due (at most every heartbeat_every_s), without
        a new version. None when the presentation is no longer this holder's."""
        p = self._read_file()
        if p is None or p.id != presentation_id or p.holder != holder:
            return None
        if self.idle_s is None or self._clock() - p.heartbeat < heartbeat_every_s(self.idle_s):
            return p  # not due: a stat and a read, no write
        with self._locked():
            live = self._live()
            if live is None or live.id != presentation_id or live.holder != holder:
                return None
            live = replace(live, heartbeat=self._clock())
            self._write(live)  # a watcher re-reads it and finds the same version: no follower is redrawn
            return live

    def stop(self, presentation_id: str, holder: str | None = None) -> bool:
        """End the presentation if it is still presentation_id's (and, when holder is given, still held by it: a
        presenter stopping their own); its board goes too. holder None: someone who gave the key stops it. False:
        it was not live."""
        with self._locked():
            live = self._live()
            if live is None or live.id != presentation_id or (holder is not None and live.holder != holder):
                return False
            self._end(live, "stopped" if holder is not None else "was stopped with the key")
        return True

    # --- the board -------------------------------------------------------------------------------------------------

    def add_point(self, presentation_id: str, point: BoardPoint) -> bool:
        """Append one point to the presentation's board (one write of one short line: O_APPEND, or Redis' RPUSH),
        compacting a full board first (compact). False when the presentation is no longer live; a point that does not
        fit even then is dropped (logged). Raises OSError when the board cannot be written (a full disk: errno ENOSPC;
        StoreUnavailable)."""
        live = self.read()
        if live is None or live.id != presentation_id:
            return False
        name = self.board_name(presentation_id)
        line = point.to_json().encode("utf-8")
        size = self.store.size(name)
        if size + len(line) + 1 > MAX_BOARD_BYTES:
            size = self.compact(presentation_id)
            if size + len(line) + 1 > MAX_BOARD_BYTES:
                log.warning("room: the board is full (%d bytes of distinct forks); a point was dropped", MAX_BOARD_BYTES)
                return True
        self.store.append(name, line)
        return True

    def compact(self, presentation_id: str) -> int:
        """Rewrite the board with only each fork's latest valid point (what points() shows), whole, under the lock;
        returns its new size. A point another replica appends while this runs may be lost (its fork's next Step adds
        it again)."""
        with self._locked():
            size = self.store.replace_lines(self.board_name(presentation_id), [p.to_json().encode("utf-8") for p in self.points(presentation_id)])
        log.info("room: the board was compacted to %d bytes", size)
        return size

    def points(self, presentation_id: str) -> list[BoardPoint]:
        """The board: the latest valid point of each fork, in the order the forks first appeared. Lines that are not
        valid points (a damaged or hostile record) are skipped."""
        try:
            lines = self.store.lines(self.board_name(presentation_id), MAX_BOARD_BYTES)
        except StoreUnavailable:
            raise
        except OSError as exc:
            log.warning("room: cannot read the board: %s", exc.strerror or exc)
            return []
        latest: dict[str, BoardPoint] = {}
        skipped = 0
        for raw in lines:
            if not raw.strip():
                continue
            try:
                point = BoardPoint.from_json(raw)
            except ValueError:
                skipped += 1
                continue
            latest[point.fork] = point
        if skipped:
            log.warning("room: %d board line(s) were not valid points; skipped", skipped)
        return list(latest.values())


@dataclass(frozen=True)
class BoardPoint:
    """One fork's results so far: no prompt, no name, no token of anyone's text. `fork` is a random id made at the
    fork (not its run token, which would open the run). Metrics come from specviz.core.metrics.run_metrics."""

    fork: str
    drafter: str
    k: int  # num_draft_tokens
    temperature: float
    rounds: int
    alpha: float | None
    tokens_per_target_pass: float | None
    speedup: float | None  # measured; None while plain decoding is still measuring (or disturbed)
    at: float = field(default=0.0)  # time.time() of the Step

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, data: bytes) -> BoardPoint:
        """Parse and validate one line; raises ValueError."""
        if len(data) > MAX_LINE_BYTES:
            raise ValueError("line too long")
        try:
            raw = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            raise ValueError("not JSON") from None
        if isinstance(raw, dict) and "tokens_per_pass" in raw and "tokens_per_target_pass" not in raw:
            raw["tokens_per_target_pass"] = raw.pop("tokens_per_pass")  # a point written before the metric's one name
        if not isinstance(raw, dict) or set(raw) != set(cls.__dataclass_fields__):
            raise ValueError("not a point")
        ok = (
            isinstance(raw["fork"], str) and _ID.fullmatch(raw["fork"]) is not None and raw["drafter"] in DRAFTER_KINDS
            and _whole(raw["k"], 1, 64) and _real(raw["temperature"], 0, 2) and _whole(raw["rounds"], 0, 10**6)
            and _optional(raw["alpha"], 0, 1) and _optional(raw["tokens_per_target_pass"], 0, 65) and _optional(raw["speedup"], 0, 1000)
            and _real(raw["at"], 0, 10**11)
        )  # fmt: skip
        if not ok:
            raise ValueError("a field is out of range")
        return cls(**raw)


def _optional(value: object, low: float, high: float) -> bool:
    return value is None or _real(value, low, high)
