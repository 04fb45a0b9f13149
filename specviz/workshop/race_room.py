"""The race page's room: the race the presenter shows to everyone, and the exercise "Which service speculates?".

Small files in the run directory the replicas share (specviz.workshop.saved_runs), none ending in .json (the run
store evicts those), each validated on read like any hostile input:

    <run_dir>/room.race             the presenter's race (specviz.core.race JSON), played back by every follower
    <run_dir>/race-pair.truth       written by `python -m specviz serve-pair`: which of services A and B speculates
    <run_dir>/race-pair-<id>.votes  one exercise's votes: one line "<voter> <A|B>" per voter; a later click replaces it
    <run_dir>/race-pair.revealed    the pair id, once the presenter revealed the truth

Participants never read the truth file through the page until it is revealed; the voter is a hash of a random secret the
session keeps (no name, no address). Writes are atomic (a temporary file, then os.replace); a vote rewrites its
exercise's file under an flock (a new exercise starts a new file and deletes the old ones). Readers parse a votes file
once per change: the board polls a file's (inode, size, mtime), not its text.
Plain Python: no streamlit (specviz.ui.labs.race is the page's side).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from specviz.core.race import MAX_FILE_BYTES, RaceResult
from specviz.workshop.files import flocked, write_atomic
from specviz.workshop.probe_urls import parse

log = logging.getLogger(__name__)

RACE_FILE = "room.race"
TRUTH_FILE = "race-pair.truth"
VOTES_PREFIX, VOTES_SUFFIX = "race-pair-", ".votes"
REVEALED_FILE = "race-pair.revealed"
LOCK_FILE = ".race-room.lock"
MAX_SMALL_BYTES = 4096
MAX_VOTERS = 20_000  # one line of 19 bytes each: ~380 KB; a new voter past it is dropped (a changed vote still counts)
NAMES = ("A", "B")
_ID = re.compile(r"[A-Za-z0-9_-]{22}")
_VOTER = re.compile(r"[0-9a-f]{16}")


@dataclass(frozen=True)
class PairService:
    name: str  # "A" or "B"
    url: str  # the base URL the app probes it at
    speculates: bool
    drafter: str  # "none" for the plain one


@dataclass(frozen=True)
class Pair:
    """Two services, one speculating; which one is the secret."""

    id: str
    services: tuple[PairService, PairService]
    created_at: float

    @classmethod
    def new(cls, urls: tuple[str, str], speculating: int, drafter: str) -> Pair:
        """speculating: 0 when service A speculates, 1 when B does."""
        services = tuple(PairService(n, u, i == speculating, drafter if i == speculating else "none") for i, (n, u) in enumerate(zip(NAMES, urls)))
        return cls(secrets.token_urlsafe(16), services, time.time())  # type: ignore[arg-type]

    @property
    def answer(self) -> str:
        return next(s.name for s in self.services if s.speculates)

    def to_json(self) -> str:
        return json.dumps({"id": self.id, "created_at": self.created_at,
                           "services": [{"name": s.name, "url": s.url, "speculates": s.speculates, "drafter": s.drafter} for s in self.services]})  # fmt: skip

    @classmethod
    def from_json(cls, data: bytes) -> Pair:
        raw = json.loads(data)
        if not isinstance(raw, dict) or set(raw) != {"id", "created_at", "services"} or not _ID.fullmatch(str(raw["id"])):
            raise ValueError("not a pair")
        services = raw["services"]
        if not isinstance(services, list) or len(services) != 2:
            raise ValueError("a pair has two services")
        out = []
        for name, s in zip(NAMES, services):
            if not isinstance(s, dict) or s.get("name") != name or not isinstance(s.get("speculates"), bool) or not isinstance(s.get("drafter"), str):
                raise ValueError("a service is malformed")
            parse(s.get("url"))
            out.append(PairService(name, str(s["url"]), s["speculates"], s["drafter"][:40]))
        if sum(s.speculates for s in out) != 1:
            raise ValueError("exactly one service speculates")
        if not isinstance(raw["created_at"], (int, float)):
            raise ValueError("created_at is not a time")
        return cls(raw["id"], (out[0], out[1]), float(raw["created_at"]))


def votes_file(pair_id: str) -> str:
    """The file one exercise's votes live in (its pair id is 22 URL-safe characters)."""
    if not _ID.fullmatch(pair_id):
        raise ValueError("not a pair id")
    return f"{VOTES_PREFIX}{pair_id}{VOTES_SUFFIX}"


def parse_votes(data: bytes) -> dict[str, str]:
    """voter -> vote from a votes file's text; malformed lines are skipped (the file is hostile until checked)."""
    out: dict[str, str] = {}
    for line in data.decode("ascii", "replace").splitlines():
        voter, _, vote = line.partition(" ")
        if vote in NAMES and _VOTER.fullmatch(voter):
            out[voter] = vote
    return out


class _Parsed:
    """The last parse of each votes file, keyed by what a stat says (inode, size, mtime): every page's board polls
    every few seconds, and a file that did not change is not read again. Shared by the sessions of a process; it
    holds what the file holds, nothing of a session's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[tuple[int, int, int], dict[str, str]]] = {}

    def votes(self, path: Path) -> dict[str, str]:
        try:
            with open(path, "rb") as fh:
                st = os.fstat(fh.fileno())
                stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
                with self._lock:
                    seen = self._seen.get(str(path))
                if seen is not None and seen[0] == stamp:
                    return dict(seen[1])
                data = fh.read(MAX_VOTERS * 20 + 1)
        except OSError:
            return {}
        votes = parse_votes(data)
        with self._lock:
            if len(self._seen) > 16:  # old exercises' entries
                self._seen.clear()
            self._seen[str(path)] = (stamp, votes)
        return dict(votes)


_PARSED = _Parsed()


def voter_id(secret: str) -> str:
    """An anonymous id for one browser session's guesses, from a random secret the session keeps."""
    return hashlib.sha256(f"specviz-guess:{secret}".encode()).hexdigest()[:16]


class RaceRoom:
    """The room's race and exercise files under one run directory."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)

    def _locked(self) -> contextlib.AbstractContextManager[None]:
        return flocked(self.root / LOCK_FILE)

    def _write(self, name: str, data: bytes) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(self.root / name, data)

    def _read(self, name: str, limit: int) -> bytes | None:
        try:
            with open(self.root / name, "rb") as fh:
                data = fh.read(limit + 1)
        except OSError:
            return None
        return data if len(data) <= limit else None

    def stamp(self) -> tuple:
        """What changes when the presenter shows or hides a race, or an exercise starts or is revealed: the files'
        sizes and modification times (a page compares it with what it drew; reading it costs a few stat calls)."""
        out = []
        for name in (RACE_FILE, TRUTH_FILE, REVEALED_FILE):
            try:
                st = (self.root / name).stat()
                out.append((st.st_mtime_ns, st.st_size))
            except OSError:
                out.append(None)
        return tuple(out)

    # --- the presenter's race -----------------------------------------------------------------------------------

    def show_race(self, race: RaceResult) -> None:
        self._write(RACE_FILE, json.dumps(race.to_json()).encode("utf-8"))

    def hide_race(self) -> None:
        (self.root / RACE_FILE).unlink(missing_ok=True)

    def race(self) -> RaceResult | None:
        """The presenter's race, or None (none shown, or a damaged file: logged, read as none)."""
        data = self._read(RACE_FILE, MAX_FILE_BYTES)
        if data is None:
            return None
        try:
            return RaceResult.from_json(json.loads(data))
        except (ValueError, RecursionError) as exc:
            log.warning("ignoring %s: %s", self.root / RACE_FILE, exc)
            return None

    # --- the exercise ---------------------------------------------------------------------------------------------

    def start_pair(self, pair: Pair) -> None:
        """A new exercise: its truth written, the last one's reveal forgotten."""
        with self._locked():
            self._write(TRUTH_FILE, pair.to_json().encode("utf-8"))
            (self.root / REVEALED_FILE).unlink(missing_ok=True)
            for old in self.root.glob(f"{VOTES_PREFIX}*{VOTES_SUFFIX}"):  # the last exercises' votes
                old.unlink(missing_ok=True)

    def pair(self) -> Pair | None:
        data = self._read(TRUTH_FILE, MAX_SMALL_BYTES)
        if data is None:
            return None
        try:
            return Pair.from_json(data)
        except (ValueError, KeyError, TypeError, RecursionError, UnicodeDecodeError) as exc:
            log.warning("ignoring %s: %s", self.root / TRUTH_FILE, exc)
            return None

    def guess(self, pair_id: str, voter: str, guess: str) -> None:
        """Record a vote (A or B): one per voter per exercise, a later one replaces it."""
        if guess not in NAMES or not _VOTER.fullmatch(voter) or not _ID.fullmatch(pair_id):
            raise ValueError("A guess is service A or service B.")
        path = self.root / votes_file(pair_id)
        with self._locked():
            votes = _PARSED.votes(path)
            if voter not in votes and len(votes) >= MAX_VOTERS:
                log.warning("the exercise has %d voters, its limit; a new vote was dropped", len(votes))
                return
            votes[voter] = guess
            self._write(path.name, "".join(f"{v} {g}\n" for v, g in votes.items()).encode("ascii"))

    def guesses(self, pair_id: str) -> dict[str, str]:
        """voter -> their vote, for this exercise (read again only when its file changed)."""
        return _PARSED.votes(self.root / votes_file(pair_id)) if _ID.fullmatch(pair_id) else {}

    def tally(self, pair_id: str) -> dict[str, int]:
        counts = dict.fromkeys(NAMES, 0)
        for guess in self.guesses(pair_id).values():
            counts[guess] += 1
        return counts

    def reveal(self, pair_id: str) -> None:
        self._write(REVEALED_FILE, pair_id.encode("ascii"))

    def revealed(self, pair_id: str) -> bool:
        return (self._read(REVEALED_FILE, 64) or b"").decode("ascii", "replace") == pair_id
