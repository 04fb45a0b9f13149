"""The race page's room: the race the presenter shows to everyone, and the exercise "Which service speculates?".

Small records on the room's store (specviz.workshop.store: the run directory the replicas share, or Redis),
none ending in .json (the run store evicts those), each validated on read like any hostile input:

    room.race             the presenter's race (specviz.core.race JSON), played back by every follower
    race-pair.truth       written by `python -m specviz serve-pair`: which of services A and B speculates
    race-pair-<id>.votes  one exercise's votes: one line "<voter> <A|B>" per voter; a later click replaces it
    race-pair.revealed    the pair id, once the presenter revealed the truth

Participants never read the truth through the page until it is revealed; the voter is a hash of a random secret the
session keeps (no name, no address). Writes replace a record whole; a vote rewrites its exercise's record under the
store's lock (a new exercise starts a new record and deletes the old ones). Readers parse a votes record once per
change: the board polls its stamp (a stat, or one GET on Redis), not its text. A store that cannot be reached raises
StoreUnavailable (an OSError) from every method: the page says so, and a guess is kept on the page to send again.
Plain Python: no streamlit (specviz.ui.labs.race, probe and exercise are the page's side).
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
from collections.abc import Hashable
from dataclasses import dataclass

from specviz.core.race import MAX_FILE_BYTES, RaceResult
from specviz.workshop.probe_urls import parse
from specviz.workshop.store import Store, StoreUnavailable
from specviz.workshop.store.directory import DirectoryStore

log = logging.getLogger(__name__)

RACE_FILE = "room.race"
TRUTH_FILE = "race-pair.truth"
VOTES_PREFIX, VOTES_SUFFIX = "race-pair-", ".votes"
REVEALED_FILE = "race-pair.revealed"
LOCK_NAME = ".race-room.lock"  # the store's lock for a vote's read-modify-write and a new exercise
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
    """The last parse of each votes record, keyed by its stamp (specviz.workshop.store): every page's board polls
    every few seconds, and a record that did not change is not read again. Shared by the sessions of a process; it
    holds what the record holds, nothing of a session's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], tuple[Hashable, dict[str, str]]] = {}

    def votes(self, store: Store, name: str) -> dict[str, str]:
        stamp = store.stamp(name)
        where = (store.description, name)  # one cache line per store and record
        with self._lock:
            seen = self._seen.get(where)
        if seen is not None and seen[0] == stamp:
            return dict(seen[1])
        data = _read(store, name, MAX_VOTERS * 20)
        votes = parse_votes(data or b"")
        with self._lock:
            if len(self._seen) > 16:  # old exercises' entries
                self._seen.clear()
            self._seen[where] = (stamp, votes)
        return dict(votes)


_PARSED = _Parsed()


def _read(store: Store, name: str, limit: int) -> bytes | None:
    """A record, or None: missing, larger than limit, or unreadable on a disk (logged). Unreachable raises."""
    try:
        data = store.get(name, limit)
    except StoreUnavailable:
        raise
    except OSError as exc:
        log.warning("cannot read %s: %s", name, exc.strerror or exc)
        return None
    return data if data is not None and len(data) <= limit else None


def voter_id(secret: str) -> str:
    """An anonymous id for one browser session's guesses, from a random secret the session keeps."""
    return hashlib.sha256(f"specviz-guess:{secret}".encode()).hexdigest()[:16]


class RaceRoom:
    """The room's race and exercise records on the room's store (a path means that run directory)."""

    def __init__(self, store: Store | str | os.PathLike) -> None:
        self.store: Store = DirectoryStore(store) if isinstance(store, (str, os.PathLike)) else store

    def _locked(self) -> contextlib.AbstractContextManager[None]:
        return self.store.lock(LOCK_NAME)

    def _write(self, name: str, data: bytes) -> None:
        self.store.put(name, data)

    def _read(self, name: str, limit: int) -> bytes | None:
        return _read(self.store, name, limit)

    def stamp(self) -> tuple:
        """What changes when the presenter shows or hides a race, or an exercise starts or is revealed: the records'
        stamps (a page compares it with what it drew; reading it costs a few stat calls, or GETs on Redis)."""
        return self.store.stamp(RACE_FILE, TRUTH_FILE, REVEALED_FILE)

    # --- the presenter's race -----------------------------------------------------------------------------------

    def show_race(self, race: RaceResult) -> None:
        self._write(RACE_FILE, json.dumps(race.to_json()).encode("utf-8"))

    def hide_race(self) -> None:
        self.store.delete(RACE_FILE)

    def race(self) -> RaceResult | None:
        """The presenter's race, or None (none shown, or a damaged file: logged, read as none)."""
        data = self._read(RACE_FILE, MAX_FILE_BYTES)
        if data is None:
            return None
        try:
            return RaceResult.from_json(json.loads(data))
        except (ValueError, RecursionError) as exc:
            log.warning("ignoring the room's race: %s", exc)
            return None

    # --- the exercise ---------------------------------------------------------------------------------------------

    def start_pair(self, pair: Pair) -> None:
        """A new exercise: its truth written, the last one's reveal forgotten."""
        with self._locked():
            self._write(TRUTH_FILE, pair.to_json().encode("utf-8"))
            for name in [REVEALED_FILE] + [e.name for e in self.store.entries(VOTES_PREFIX, VOTES_SUFFIX)]:  # the last exercises' votes
                self.store.delete(name)

    def pair(self) -> Pair | None:
        data = self._read(TRUTH_FILE, MAX_SMALL_BYTES)
        if data is None:
            return None
        try:
            return Pair.from_json(data)
        except (ValueError, KeyError, TypeError, RecursionError, UnicodeDecodeError) as exc:
            log.warning("ignoring the exercise's truth: %s", exc)
            return None

    def guess(self, pair_id: str, voter: str, guess: str) -> None:
        """Record a vote (A or B): one per voter per exercise, a later one replaces it."""
        if guess not in NAMES or not _VOTER.fullmatch(voter) or not _ID.fullmatch(pair_id):
            raise ValueError("A guess is service A or service B.")
        name = votes_file(pair_id)
        with self._locked():
            votes = _PARSED.votes(self.store, name)
            if voter not in votes and len(votes) >= MAX_VOTERS:
                log.warning("the exercise has %d voters, its limit; a new vote was dropped", len(votes))
                return
            votes[voter] = guess
            self._write(name, "".join(f"{v} {g}\n" for v, g in votes.items()).encode("ascii"))

    def guesses(self, pair_id: str) -> dict[str, str]:
        """voter -> their vote, for this exercise (read again only when its record changed)."""
        return _PARSED.votes(self.store, votes_file(pair_id)) if _ID.fullmatch(pair_id) else {}

    def tally(self, pair_id: str) -> dict[str, int]:
        counts = dict.fromkeys(NAMES, 0)
        for guess in self.guesses(pair_id).values():
            counts[guess] += 1
        return counts

    def reveal(self, pair_id: str) -> None:
        self._write(REVEALED_FILE, pair_id.encode("ascii"))

    def revealed(self, pair_id: str) -> bool:
        return (self._read(REVEALED_FILE, 64) or b"").decode("ascii", "replace") == pair_id
