"""Runs that survive a restart: after every round a live run is written to a run directory the replicas share, keyed
by a random token the page keeps in its URL (``?run=…``), so any replica can restore it at the same round.

A saved run is one JSON file, ``<token>.json``: a recording (specviz.recording's format, so it validates the same
way) and, per run, what exact continuation needs beyond the records (specviz.core.resume.DecoderState).

Tokens are 128 random bits (secrets.token_urlsafe(16): 22 characters of A-Z a-z 0-9 - _), checked strictly
before they touch the file system, so a token is never a path. Nothing lists the directory for a participant.
The directory is 0700 and each file 0600 (only the server's user reads them), files are replaced atomically
(a crash mid-write leaves the previous round), and the whole directory is bounded: after each write the oldest
files go until the total fits. Files older than the maximum age count as expired.

=======================  =====================================================================
environment variable     meaning (default)
=======================  =====================================================================
SPECVIZ_RUN_DIR          the run directory (``runs`` under the cache directory, SPECVIZ_CACHE_DIR)
SPECVIZ_RUN_DIR_MAX_MB   total size kept, oldest evicted first (512)
SPECVIZ_RUN_MAX_HOURS    a saved run older than this is expired (72)
=======================  =====================================================================

Plain Python: no streamlit (specviz.ui.saved_runs is the page's side).
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from specviz.core.resume import DecoderState
from specviz.recording import MAX_BYTES, Recording, RecordingError, dumps, load_recording

log = logging.getLogger(__name__)

FORMAT = "specviz-saved-run"
VERSION = 1
TOKEN_LENGTH = 22  # secrets.token_urlsafe(16): 16 bytes -> 22 base64url characters, no padding
_TOKEN = re.compile(r"[A-Za-z0-9_-]{22}")
DEFAULT_MAX_MB = 512.0
DEFAULT_MAX_HOURS = 72.0


class SavedRunError(ValueError):
    """A token that names no run this server can restore; the message says why, for the participant."""


def new_token() -> str:
    """A fresh run token: 128 random bits."""
    return secrets.token_urlsafe(16)


def check_token(text: object) -> str:
    """The token if it has a token's exact shape; raises SavedRunError otherwise (never touches the disk)."""
    if not isinstance(text, str) or not _TOKEN.fullmatch(text):
        raise SavedRunError("The link's run token is malformed (a run token is 22 letters, digits, '-' or '_'), so no run was restored.")
    return text


def default_run_dir(env: Mapping[str, str] | None = None) -> Path:
    """SPECVIZ_RUN_DIR, else ``runs`` under the cache directory (the rule of specviz.models.loading.cache_root)."""
    env = os.environ if env is None else env
    if env.get("SPECVIZ_RUN_DIR"):
        return Path(env["SPECVIZ_RUN_DIR"]).expanduser()
    root = env.get("SPECVIZ_CACHE_DIR") or os.path.join(env.get("XDG_CACHE_HOME", "~/.cache"), "specviz")
    return Path(root).expanduser() / "runs"


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
    states: tuple[DecoderState, ...]  # one per recording.runs, in order

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
            states = tuple(DecoderState.from_dict(s) for s in raw.get("states") or [])
            recording = load_recording(json.dumps(raw.get("recording")))
            return cls(recording, states)
        except (RecordingError, ValueError) as exc:
            raise SavedRunError(f"The saved run is damaged ({exc}), so it was not restored.") from None


class RunStore:
    """The run directory: save after a round, load by token, evict the oldest when full."""

    def __init__(self, root: str | os.PathLike, max_bytes: int = int(DEFAULT_MAX_MB * 2**20), max_age_s: float = DEFAULT_MAX_HOURS * 3600) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RunStore:
        """The store the owner configured (see the module docstring); raises ValueError naming a bad setting."""
        env = os.environ if env is None else env
        max_mb = _number(env, "SPECVIZ_RUN_DIR_MAX_MB", DEFAULT_MAX_MB)
        hours = _number(env, "SPECVIZ_RUN_MAX_HOURS", DEFAULT_MAX_HOURS)
        return cls(default_run_dir(env), int(max_mb * 2**20), hours * 3600)

    def _path(self, token: str) -> Path:
        return self.root / f"{check_token(token)}.json"

    def _ensure_dir(self) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.root.stat().st_mode & 0o077:
            os.chmod(self.root, 0o700)  # an existing directory others could read: close it

    def save(self, token: str, run: SavedRun) -> None:
        """Write atomically (0600), then evict the oldest other files until the directory fits. Raises OSError
        when the directory cannot be written (the caller says so and the run goes on unsaved)."""
        path = self._path(token)
        data = run.to_json().encode("utf-8")
        if len(data) > min(self.max_bytes, MAX_BYTES):
            raise OSError(f"this run's file ({len(data) / 2**20:.1f} MB) is larger than the run directory may hold")
        self._ensure_dir()
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=self.root)  # mkstemp creates it 0600
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.evict(keep=path)

    def load(self, token: str) -> SavedRun:
        """The saved run; raises SavedRunError when the token is malformed, unknown, expired or its file damaged."""
        path = self._path(token)
        try:
            info = path.stat()
            if time.time() - info.st_mtime > self.max_age_s:
                raise SavedRunError("This run has expired (saved runs are kept for a limited time), so a fresh run starts.")
            if info.st_size > MAX_BYTES:
                raise SavedRunError("The saved run is too large to restore.")
            data = path.read_bytes()
        except FileNotFoundError:
            raise SavedRunError("No saved run has this link's token (it may have been cleared to make room), so a fresh run starts.") from None
        except OSError as exc:
            raise SavedRunError(f"The saved run could not be read ({exc.strerror or exc}).") from None
        return SavedRun.from_json(data)

    def evict(self, keep: Path | None = None) -> int:
        """Delete expired files, then the oldest, until the total size fits; returns how many went."""
        entries = []
        for p in self.root.glob("*.json"):
            try:
                info = p.stat()
            except FileNotFoundError:  # another replica evicted it meanwhile
                continue
            if p.name.startswith(".tmp-") and time.time() - info.st_mtime < 60:
                continue  # another replica is writing it right now
            entries.append((info.st_mtime, info.st_size, p))
        entries.sort()
        total, now, removed = sum(size for _, size, _ in entries), time.time(), 0
        for mtime, size, p in entries:
            if p == keep or (total <= self.max_bytes and now - mtime <= self.max_age_s):
                continue
            p.unlink(missing_ok=True)
            total, removed = total - size, removed + 1
        if removed:
            log.info("run directory: evicted %d saved run(s), %d bytes kept", removed, total)
        return removed
