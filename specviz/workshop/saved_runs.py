"""Runs that survive a restart: after every round a live run is written to the room's store the replicas share
(specviz.workshop.store: the run directory, or Redis with SPECVIZ_STORE), keyed by a random token the page keeps in
its URL (``?run=…``), so any replica, on any host sharing the store, can restore it at the same round.

A saved run is one JSON value named ``<token>.json`` (a file of that name in the run directory): a recording
(specviz.recording's format, so it validates the same way) and, per run, what exact continuation needs beyond the
records (specviz.core.resume.RunState).

Tokens are 128 random bits (secrets.token_urlsafe(16): 22 characters of A-Z a-z 0-9 - _), checked strictly
before they touch the file system, so a token is never a path. Nothing lists the directory for a participant.
The directory is 0700 and each file 0600 (only the server's user reads them), files are replaced atomically
(a crash mid-write leaves the previous round), and the whole directory is bounded: before each write the least
recently used files go until the new one fits. Two kinds of file are never evicted (protected):

* the presented run, named by the room's presentation file in the same directory (specviz.workshop.presentation);
* a run a live session holds: every save refreshes its file's mtime, and each replica's session sweeper touches the
  files of the runs its live sessions hold (touch()), so a file written or touched within LIVE_WINDOW_S is live,
  whichever replica holds it.

The rules below hold on both backends: in Redis a run's age is its entry in the store's index (specviz.workshop.store
.redis_store), the cap counts the runs' bytes as the directory counts its files, and Redis also drops a run nobody
saved or touched for twice the maximum age (a safety net: eviction normally removes it first).

When only protected files are left and the new one still does not fit, the save is refused (RunDirFull, an OSError
whose message says so); nothing protected goes. Files older than the maximum age count as expired. How many files
one browser session may keep is the page's rule (specviz.ui.room.saved_runs, the owner's ``max_saved_runs``): a session
over its quota replaces its own oldest file, never another's.

=======================  =====================================================================
environment variable     meaning (default)
=======================  =====================================================================
SPECVIZ_RUN_DIR          the run directory (``runs`` under the cache directory, SPECVIZ_CACHE_DIR)
SPECVIZ_STORE            the room's store: unset, the run directory; ``redis://host:6379/0`` (specviz.workshop.store)
SPECVIZ_RUN_DIR_MAX_MB   total size kept, least recently used evicted first, protected runs never (512)
SPECVIZ_RUN_MAX_HOURS    a saved run older than this is expired (72)
=======================  =====================================================================

Plain Python: no streamlit (specviz.ui.room.saved_runs is the page's side).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from specviz.core.resume import RunState
from specviz.recording.build import dumps
from specviz.recording.load import MAX_BYTES, load_recording
from specviz.recording.schema import Recording, RecordingError
from specviz.workshop.presentation import FILE_NAME as PRESENTATION_NAME
from specviz.workshop.presentation import MAX_FILE_BYTES as MAX_PRESENTATION_BYTES
from specviz.workshop.presentation import Presentation
from specviz.workshop.store import Entry, Store, StoreUnavailable, default_run_dir, open_store
from specviz.workshop.store.directory import DirectoryStore

log = logging.getLogger(__name__)

FORMAT = "specviz-saved-run"
VERSION = 1
TOKEN_LENGTH = 22  # secrets.token_urlsafe(16): 16 bytes -> 22 base64url characters, no padding
_TOKEN = re.compile(rf"[A-Za-z0-9_-]{{{TOKEN_LENGTH}}}")
DEFAULT_MAX_MB = 512.0
DEFAULT_MAX_HOURS = 72.0
LIVE_WINDOW_S = 120.0  # a file saved or touched this recently is held by a live session: never evicted
SUFFIX = ".json"  # a saved run's name in the store: <token>.json


class SavedRunError(ValueError):
    """A token that names no run this server can restore; the message says why, for the participant. transient: the
    run may restore if tried again (the disk could not be read); else the token can never work here."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class RunDirFull(OSError):
    """The run directory is full of runs that may not be evicted (the presented run, live sessions' runs)."""


def disk_full(exc: BaseException) -> bool:
    """The disk (or the user's disk quota) is full: errno ENOSPC or EDQUOT."""
    return isinstance(exc, OSError) and not isinstance(exc, RunDirFull) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def write_problem(exc: OSError) -> str:
    """What a failed write means, for the page: a full disk says so plainly; else the system's words, without the
    path (a server path is not the participant's business)."""
    if disk_full(exc):
        return "the server's disk is full (tell the person running it)"
    if isinstance(exc, RunDirFull) or exc.errno is None:
        return str(exc)
    return exc.strerror or f"error {exc.errno}"


def new_token() -> str:
    """A fresh run token: 128 random bits."""
    return secrets.token_urlsafe(16)


def check_token(text: object) -> str:
    """The token if it has a token's exact shape; raises SavedRunError otherwise (never touches the disk)."""
    if not isinstance(text, str) or not _TOKEN.fullmatch(text):
        raise SavedRunError(f"The link's run token is malformed (a run token is {TOKEN_LENGTH} letters, digits, '-' or '_'), so no run was restored.")
    return text


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    try:
        value = float(raw) if raw else default
    except ValueError:
        raise ValueError(f"{name} must be a number; got {raw!r}.") from None
    if not value > 0:
        raise ValueError(f"{name} must be above 0; got {raw!r}.")
    return value


@dataclass(frozen=True)
class SavedRun:
    """A live session after its latest round: the recording and one continuation state per recorded run."""

    recording: Recording
    states: tuple[RunState, ...]  # one per recording.runs, in order

    def __post_init__(self) -> None:
        if len(self.states) != len(self.recording.runs):
            raise ValueError(f"{len(self.recording.runs)} runs but {len(self.states)} continuation states")

    @property
    def num_rounds(self) -> int:
        return max(len(r.records) for r in self.recording.runs)

    def to_json(self) -> str:
        states = json.dumps([s.to_dict() for s in self.states], separators=(",", ":"))
        return f'{{"format":"{FORMAT}","version":{VERSION},"states":{states},"recording":{dumps(self.recording)}}}'

    @classmethod
    def from_json(cls, data: bytes) -> SavedRun:
        """Parse and validate; raises SavedRunError (the file is damaged) with what is wrong."""
        try:
            raw = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            raise SavedRunError("The saved run is damaged (not JSON), so it was not restored.") from None
        if not isinstance(raw, dict) or raw.get("format") != FORMAT or raw.get("version") != VERSION:
            raise SavedRunError("The saved run was written by another version of specviz, so it was not restored.")
        try:
            recording = load_recording(json.dumps(raw.get("recording")))
            raw_states = raw.get("states") or []
            if not isinstance(raw_states, list) or len(raw_states) != len(recording.runs):
                raise ValueError("the continuation states do not match the recorded runs")
            states = tuple(RunState.from_dict(s, len(run.records)) for s, run in zip(raw_states, recording.runs))
            return cls(recording, states)
        except (RecordingError, ValueError) as exc:
            raise SavedRunError(f"The saved run is damaged ({exc}), so it was not restored.") from None


class RunStore:
    """The room's saved runs: save after a round, load by token, evict the oldest when full. On the room's store
    (specviz.workshop.store): the run directory by default, Redis with SPECVIZ_STORE; a path means that directory."""

    def __init__(
        self, store: Store | str | os.PathLike, max_bytes: int = int(DEFAULT_MAX_MB * 2**20), max_age_s: float = DEFAULT_MAX_HOURS * 3600,
        root: str | os.PathLike | None = None,
    ) -> None:  # fmt: skip
        if isinstance(store, (str, os.PathLike)):
            store = DirectoryStore(store)
        self.store: Store = store
        # the local run directory, for the room's files not yet on the store (the directory backend's own folder)
        self.root = store.root if isinstance(store, DirectoryStore) else Path(root if root is not None else default_run_dir())
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RunStore:
        """The store the owner configured (see the module docstring); raises ValueError naming a bad setting."""
        env = os.environ if env is None else env
        max_mb = _number(env, "SPECVIZ_RUN_DIR_MAX_MB", DEFAULT_MAX_MB)
        hours = _number(env, "SPECVIZ_RUN_MAX_HOURS", DEFAULT_MAX_HOURS)
        return cls(open_store(env), int(max_mb * 2**20), hours * 3600, root=default_run_dir(env))

    @staticmethod
    def _name(token: str) -> str:
        return f"{check_token(token)}{SUFFIX}"

    @property
    def _ttl_s(self) -> float:
        """How long Redis keeps a run nobody saved or touched: past its expiry (load says "expired" until then)."""
        return 2 * self.max_age_s

    def save(self, token: str, run: SavedRun) -> None:
        """Replace the run atomically after making room for it (make_room). Raises OSError when the store cannot be
        written (a full disk: errno ENOSPC; Redis unreachable: StoreUnavailable) or holds only protected runs
        (RunDirFull); the caller says so and the run goes on unsaved, its saved copy (if any) at an earlier round."""
        name = self._name(token)
        data = run.to_json().encode("utf-8")
        if len(data) > min(self.max_bytes, MAX_BYTES):
            raise OSError(f"this run's file ({len(data) / 2**20:.1f} MB) is larger than the run directory may hold")
        self.make_room(name, len(data))
        self.store.put(name, data, ttl_s=self._ttl_s)

    def load(self, token: str) -> SavedRun:
        """The saved run; raises SavedRunError when the token is malformed, unknown, expired or its file damaged
        (transient when it exists but could not be read, or the store is unreachable)."""
        name = self._name(token)
        try:
            entry = self.store.stat(name)
            if entry is None:
                raise SavedRunError("No saved run has this link's token (it may have been cleared to make room), so a fresh run starts.")
            if time.time() - entry.mtime > self.max_age_s:
                raise SavedRunError("This run has expired (saved runs are kept for a limited time), so a fresh run starts.")
            if entry.size > MAX_BYTES:
                raise SavedRunError("The saved run is too large to restore.")
            data = self.store.get(name, MAX_BYTES)
        except StoreUnavailable as exc:
            raise SavedRunError(f"The saved run could not be read: {exc}.", transient=True) from None
        except OSError as exc:
            raise SavedRunError(f"The saved run could not be read ({exc.strerror or exc}).", transient=True) from None
        if data is None:  # evicted between the two reads
            raise SavedRunError("No saved run has this link's token (it may have been cleared to make room), so a fresh run starts.")
        return SavedRun.from_json(data)

    def exists(self, token: str) -> bool:
        try:
            return self.store.stat(self._name(token)) is not None
        except SavedRunError:
            return False

    def remove(self, token: str) -> bool:
        """Delete a session's own run (its quota is spent); never the presented run. True when it went."""
        name = self._name(token)
        if token == self.presented():
            return False
        return self.store.delete(name)

    def touch(self, tokens) -> int:
        """Mark these runs as held by a live session (their mtime is now: see LIVE_WINDOW_S); returns how many were
        there. Unknown or malformed tokens are skipped."""
        touched = 0
        for token in tokens:
            try:
                touched += self.store.touch(self._name(token), ttl_s=self._ttl_s)
            except SavedRunError:
                continue
        return touched

    def presented(self) -> str | None:
        """The token of the room's presented run (the presentation beside the runs, in the same store), or None. A
        presentation that cannot be read protects nothing (logged)."""
        data = self.store.get(PRESENTATION_NAME, MAX_PRESENTATION_BYTES)
        if data is None or len(data) > MAX_PRESENTATION_BYTES:
            return None
        try:
            return Presentation.from_json(data).run
        except ValueError as exc:
            log.warning("the presentation is damaged (%s); it protects no run", exc)
            return None

    def _protected(self, entry: Entry, presented: str | None, now: float) -> bool:
        return entry.name == f"{presented}{SUFFIX}" or now - entry.mtime < LIVE_WINDOW_S

    def make_room(self, name: str, size: int) -> int:
        """Evict expired runs, then the least recently used unprotected ones, until `size` more bytes fit beside the
        rest (name's own run, about to be replaced, does not count). Raises RunDirFull when even evicting every
        unprotected run would not make room; then only expired ones go. Returns how many went."""
        entries = [e for e in self.store.entries(suffix=SUFFIX) if e.name != name]
        now, presented = time.time(), self.presented()
        total = sum(e.size for e in entries) + size
        unprotected = [e for e in entries if not self._protected(e, presented, now)]
        expired = [e for e in unprotected if now - e.mtime > self.max_age_s]
        evictable = [e for e in unprotected if e not in expired]
        if total - sum(e.size for e in expired) - sum(e.size for e in evictable) > self.max_bytes:
            self._delete(expired)
            raise RunDirFull(
                "the run directory is full of runs in use (the presented run and runs that live sessions hold), and the "
                "owner's cap (SPECVIZ_RUN_DIR_MAX_MB) leaves no room for another",
            )
        due = list(expired)
        total -= sum(e.size for e in expired)
        for entry in evictable:
            if total <= self.max_bytes:
                break
            due.append(entry)
            total -= entry.size
        return self._delete(due)

    def _delete(self, entries: list[Entry]) -> int:
        for entry in entries:
            self.store.delete(entry.name)
        if entries:
            log.info("run directory: evicted %d saved run(s)", len(entries))
        return len(entries)

    def evict(self) -> int:
        """Delete expired runs and, while the store is over its cap, the least recently used unprotected ones;
        returns how many went (what save() does before it writes, for nothing new)."""
        try:
            return self.make_room(".none", 0)
        except RunDirFull:
            return 0
