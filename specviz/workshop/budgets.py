"""Live KV-cache memory per process: one budget of tokens that every session's runs and long jobs reserve from.

A run's KV cache grows to prompt + max new tokens + k + 1 positions (specviz.runs.run_positions), for every run a
session holds at once: a compare run doubles it, a draft model or an early exit keeps its own cache beside the
target's, and the plain-decoding baseline measured for the session (specviz.workshop.baselines) keeps another. The
embedded SmolLM2-135M in float32 takes 46,080 bytes a token (30 layers x keys and values x 3 KV heads x 64 x 4 bytes;
specviz.models.adapter.kv_bytes_per_token), so one run at its model's full context of 8,192 holds about 377 MB.

Before a prefill, a session reserves its worst case in a slot (its browser session and what it runs: the
step-through page's runs, a lab's job); the reservation fails with a message naming the numbers, instead of the
process growing until the machine kills it. A new reservation is checked without its own slot's older ones (a new run
replaces the old one), and a reservation is released on Reset, on a new run, when the sweeper frees the session, when
the run's session object goes away (a weakref finalizer), and when a job ends. Counting is in tokens of each run's own target (a run on a bigger
target counts its own tokens; the budget sized from the machine uses that target's bytes per token).

Plain Python (threading), no streamlit, no torch: the UI computes the tokens (specviz.runs.kv_tokens) and the limit
(the owner's SPECVIZ_MAX_KV_TOKENS, or default_kv_tokens() from the machine's memory).

Fair shares. One client (an address: specviz.workshop.clients) with a handful of sessions could hold the whole budget,
and every other participant's new run was refused. Now, while a reservation waits, no client keeps more than its fair
share (the limit divided by the clients holding reservations, the one asking included): a reservation that does not
fit frees, one at a time, the oldest idle evictable reservation of the heaviest client over its share (a step-through
run, whose page restores it from its saved file at the same round on its next rerun: specviz.ui.room.saved_runs) until
it fits. A client asking for more than its share while memory is full is refused. When memory is not full a client may
use more than its share: nobody waits.

The limit. Inside a container with a memory limit, or in a room of N replicas on one machine, a quarter of the host's
RAM per process is more than the process may ever hold: the OOM killer acts before the budget refuses. So the memory
is the cgroup's limit when there is one (cgroup v2 memory.max, v1 memory.limit_in_bytes; memory_limit()), and the
share of it is SPECVIZ_KV_MEMORY_SHARE (a fraction; the room gives each replica MEMORY_SHARE / N).
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MEMORY_SHARE = 0.25  # of the memory where the caches live (RAM, or the GPU's), when the owner sets no budget
MEMORY_SHARE_ENV = "SPECVIZ_KV_MEMORY_SHARE"  # the share of memory for this process's caches (the room sets it per replica)
IDLE_S = 5.0  # a reservation used within this long is busy (a Step, Run to end): never evicted
CGROUP_ROOT = Path("/sys/fs/cgroup")
NO_LIMIT = 2**60  # cgroup v1 writes "no limit" as a page-rounded 2**63 - 1


class OverBudget(ValueError):
    """A reservation that does not fit: the message says what it needed, what is free, and what to do."""


def default_kv_tokens(memory_bytes: int, bytes_per_token: int, share: float = MEMORY_SHARE) -> int:
    """The budget when the owner sets none: a share of the memory, in tokens of a cache of bytes_per_token (at least 1)."""
    if bytes_per_token < 1:
        raise ValueError(f"bytes_per_token must be at least 1; got {bytes_per_token}.")
    return max(1, int(memory_bytes * share) // bytes_per_token)


def memory_share(env: Mapping[str, str] = os.environ) -> float:
    """The share of memory this process's caches may use: SPECVIZ_KV_MEMORY_SHARE (above 0, at most 1), else MEMORY_SHARE."""
    text = env.get(MEMORY_SHARE_ENV, "").strip()
    if not text:
        return MEMORY_SHARE
    try:
        share = float(text)
    except ValueError:
        share = -1.0
    if not 0 < share <= 1:
        raise ValueError(f"{MEMORY_SHARE_ENV}={text[:20]!r}: give a fraction of memory above 0 and at most 1 (e.g. 0.125).")
    return share


def _read_limit(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not text.isdigit() or len(text) > 20:  # "max" (v2: none), or damage
        return None
    value = int(text)
    return value if 0 < value < NO_LIMIT else None


def memory_limit(root: Path = CGROUP_ROOT, self_cgroup: Path = Path("/proc/self/cgroup")) -> int | None:
    """This process's cgroup memory limit in bytes, or None (none set, or no cgroup to read). cgroup v2: memory.max in
    the process's own group (the path /proc/self/cgroup names, then the mount's root: a container sees its group
    there); cgroup v1: memory/memory.limit_in_bytes. The smallest limit found counts."""
    groups = []
    try:
        for line in self_cgroup.read_text(encoding="utf-8", errors="replace").splitlines()[:64]:
            hierarchy, _, rest = line.partition(":")
            controllers, _, path = rest.partition(":")
            if path.startswith("/") and ".." not in path:
                if hierarchy == "0" and controllers == "":
                    groups.append(root / path.lstrip("/") / "memory.max")
                elif "memory" in controllers.split(","):
                    groups.append(root / "memory" / path.lstrip("/") / "memory.limit_in_bytes")
    except OSError:
        pass
    groups += [root / "memory.max", root / "memory" / "memory.limit_in_bytes"]
    limits = [limit for limit in map(_read_limit, groups) if limit is not None]
    return min(limits) if limits else None


@dataclass
class _Held:
    slot: Hashable
    client: Hashable
    tokens: int
    used_at: float  # the last time its run was used (reserve, touch)
    on_evict: Callable[[], None] | None = None  # frees what the reservation holds; None: never evicted (a job)


class Reservation:
    """Tokens held in a slot until release() (idempotent)."""

    def __init__(self, budget: KVBudget, slot: Hashable, tokens: int, ident: int) -> None:
        self._budget, self.slot, self.tokens, self._ident = budget, slot, tokens, ident

    @property
    def held(self) -> bool:
        return self._budget._holds(self._ident)

    def release(self) -> None:
        self._budget._release(self._ident)

    def touch(self) -> None:
        """Its run was used now: not idle (the budget frees idle reservations first)."""
        self._budget._touch(self._ident)

    def evictable(self, on_evict: Callable[[], None]) -> None:
        """The budget may free this reservation while it is idle and its client holds more than its fair share:
        it calls on_evict (once, on the thread that asked for the memory, outside the budget's lock) after releasing it."""
        self._budget._set_evict(self._ident, on_evict)

    def __repr__(self) -> str:
        return f"Reservation({self.slot!r}, {self.tokens:,} tokens, {'held' if self.held else 'released'})"


class KVBudget:
    """The process's live KV-cache tokens, by reservation. Thread-safe; reserve() checks and holds in one step.

    A slot is what one browser session runs in one place, e.g. (session id, "step-through"). A new reservation is
    checked without the same slot's (it replaces them: a new run, a restored or forked run, frees the old one once it
    exists), so a participant at the budget can always start over; the caller releases the old one then. A client is
    who holds the slot (its address): fair shares are counted per client (the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, idle_s: float | None = None) -> None:
        self._lock = threading.Lock()
        self._held: dict[int, _Held] = {}  # reservation id -> what it holds
        self._ids = itertools.count(1)
        self._clock, self._idle_s = clock, IDLE_S if idle_s is None else idle_s
        self.evicted = 0  # reservations freed for another client, since the start

    @property
    def in_use(self) -> int:
        with self._lock:
            return sum(h.tokens for h in self._held.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def by_client(self) -> dict[Hashable, int]:
        """Tokens held per client."""
        with self._lock:
            return self._by_client()

    def _by_client(self, skip_slot: Hashable = None) -> dict[Hashable, int]:
        out: dict[Hashable, int] = {}
        for h in self._held.values():
            if h.slot != skip_slot:
                out[h.client] = out.get(h.client, 0) + h.tokens
        return out

    def reserve(self, slot: Hashable, tokens: int, limit: int, what: str = "Your run", client: Hashable = None) -> Reservation:
        """Hold tokens in slot for client (None: the slot is its own client). When the other slots' reservations
        plus tokens would pass limit, idle evictable reservations of clients over their fair share are freed first
        (the heaviest client's oldest); OverBudget (holding nothing) when that is not enough or the asking client
        would pass its own share. what ("Your run", "The lab's sampler") starts the message."""
        if tokens < 0 or limit < 1:
            raise ValueError(f"Need tokens >= 0 and a limit >= 1; got {tokens} and {limit}.")
        client = slot if client is None else client
        evicted: list[Callable[[], None]] = []
        try:
            with self._lock:
                self._make_room(slot, client, tokens, limit, what, evicted)
                ident = next(self._ids)
                self._held[ident] = _Held(slot, client, tokens, self._clock())
        finally:
            for on_evict in evicted:  # outside the lock: freeing a run may release other reservations
                try:
                    on_evict()
                except Exception:
                    log.exception("freeing an evicted run failed")
        return Reservation(self, slot, tokens, ident)

    def _make_room(self, slot: Hashable, client: Hashable, tokens: int, limit: int, what: str, evicted: list) -> None:
        """Under the lock: evict until tokens fit, or raise OverBudget (having evicted nothing then)."""
        held = self._by_client(skip_slot=slot)
        others = sum(held.values())
        if others + tokens <= limit:
            return
        if tokens > limit:
            log.info("KV budget refused %s: %d tokens, more than the limit %d", slot, tokens, limit)
            raise OverBudget(
                f"{what} needs {tokens:,} tokens of KV cache (its prompt, max new tokens and k, for each run it "
                f"keeps), more than this server's memory budget of {limit:,} for everyone together. Shorten the "
                "prompt, lower max new tokens, or turn off the side-by-side run."
            )
        clients = set(held) | {client}
        share = limit // len(clients)
        mine = held.get(client, 0)
        victims: list[int] = []
        if mine + tokens <= share:  # within its share: clients over theirs give idle runs back
            now = self._clock()
            while others + tokens > limit:
                candidates = [(i, h) for i, h in self._held.items() if i not in victims and h.slot != slot and h.client != client
                              and h.on_evict is not None and now - h.used_at >= self._idle_s and held[h.client] > share]  # fmt: skip
                if not candidates:
                    break
                heaviest = max(held[h.client] for _, h in candidates)
                ident, h = min(((i, h) for i, h in candidates if held[h.client] == heaviest), key=lambda ih: ih[1].used_at)
                victims.append(ident)
                held[h.client] -= h.tokens
                others -= h.tokens
        if others + tokens > limit:
            log.info("KV budget refused %s of %s: %d tokens, %d of %d held by others, its client holds %d (share %d)",
                     slot, client, tokens, others, limit, mine, share)  # fmt: skip
            if mine + tokens > share and mine > 0 and len(clients) > 1:  # alone, the plain message: nobody else waits
                raise OverBudget(
                    f"This server's memory for runs is full, and your address already holds {mine:,} tokens of KV cache in "
                    f"other tabs or runs; with {what[0].lower() + what[1:]}'s {tokens:,} it would hold more than its fair "
                    f"share of {share:,} while others wait. Close or Reset a run you no longer use, then try again."
                )
            raise OverBudget(
                f"This server's memory for runs is full: {what[0].lower() + what[1:]} needs {tokens:,} tokens of KV "
                f"cache and {max(0, limit - others):,} of its {limit:,} are free. Try again in a few minutes (idle "
                "runs are freed), or shorten the prompt or lower max new tokens."
            )
        for ident in victims:
            h = self._held.pop(ident)
            evicted.append(h.on_evict)
            self.evicted += 1
            log.info("KV budget freed an idle run of %s (%d tokens, over its share of %d) for %s", h.client, h.tokens, share, client)

    def _holds(self, ident: int) -> bool:
        with self._lock:
            return ident in self._held

    def _release(self, ident: int) -> None:
        with self._lock:
            self._held.pop(ident, None)

    def _touch(self, ident: int) -> None:
        with self._lock:
            if ident in self._held:
                self._held[ident].used_at = self._clock()

    def _set_evict(self, ident: int, on_evict: Callable[[], None]) -> None:
        with self._lock:
            if ident in self._held:
                self._held[ident].on_evict = on_evict

    def release_session(self, session: Hashable) -> int:
        """Release every reservation of one browser session (slots (session, ...)): it was freed. Returns how many."""
        with self._lock:
            idents = [i for i, h in self._held.items() if isinstance(h.slot, tuple) and h.slot[:1] == (session,)]
            for i in idents:
                del self._held[i]
        return len(idents)


_budget: KVBudget | None = None
_budget_lock = threading.Lock()


def kv_budget() -> KVBudget:
    """The process's one budget, made on first use (a module registry: nothing a participant can clear)."""
    global _budget
    with _budget_lock:
        if _budget is None:
            _budget = KVBudget()
        return _budget


def reset_kv_budget() -> None:
    """Forget every reservation (tests)."""
    global _budget
    with _budget_lock:
        _budget = None
