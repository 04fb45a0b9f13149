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
(the owner's SPECVIZ_MAX_KV_TOKENS, or default_kv_tokens() from the machine's memory)."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Hashable

log = logging.getLogger(__name__)

MEMORY_SHARE = 0.25  # of the memory where the caches live (RAM, or the GPU's), when the owner sets no budget


class OverBudget(ValueError):
    """A reservation that does not fit: the message says what it needed, what is free, and what to do."""


def default_kv_tokens(memory_bytes: int, bytes_per_token: int, share: float = MEMORY_SHARE) -> int:
    """The budget when the owner sets none: a share of the memory, in tokens of a cache of bytes_per_token (at least 1)."""
    if bytes_per_token < 1:
        raise ValueError(f"bytes_per_token must be at least 1; got {bytes_per_token}.")
    return max(1, int(memory_bytes * share) // bytes_per_token)


class Reservation:
    """Tokens held in a slot until release() (idempotent)."""

    def __init__(self, budget: KVBudget, slot: Hashable, tokens: int, ident: int) -> None:
        self._budget, self.slot, self.tokens, self._ident = budget, slot, tokens, ident

    @property
    def held(self) -> bool:
        return self._budget._holds(self._ident)

    def release(self) -> None:
        self._budget._release(self._ident)

    def __repr__(self) -> str:
        return f"Reservation({self.slot!r}, {self.tokens:,} tokens, {'held' if self.held else 'released'})"


class KVBudget:
    """The process's live KV-cache tokens, by reservation. Thread-safe; reserve() checks and holds in one step.

    A slot is what one browser session runs in one place, e.g. (session id, "step-through"). A new reservation is
    checked without the same slot's (it replaces them: a new run, a restored or forked run, frees the old one once it
    exists), so a participant at the budget can always start over; the caller releases the old one then."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[int, tuple[Hashable, int]] = {}  # reservation id -> (slot, tokens)
        self._ids = itertools.count(1)

    @property
    def in_use(self) -> int:
        with self._lock:
            return sum(tokens for _, tokens in self._held.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def reserve(self, slot: Hashable, tokens: int, limit: int, what: str = "Your run") -> Reservation:
        """Hold tokens in slot. OverBudget (holding nothing) when the other slots' reservations plus tokens would pass
        limit; what ("Your run", "The lab's sampler") starts the message."""
        if tokens < 0 or limit < 1:
            raise ValueError(f"Need tokens >= 0 and a limit >= 1; got {tokens} and {limit}.")
        with self._lock:
            others = sum(t for s, t in self._held.values() if s != slot)
            if others + tokens > limit:
                if tokens > limit:
                    message = (
                        f"{what} needs {tokens:,} tokens of KV cache (its prompt, max new tokens and k, for each run it "
                        f"keeps), more than this server's memory budget of {limit:,} for everyone together. Shorten the "
                        "prompt, lower max new tokens, or turn off the side-by-side run."
                    )
                else:
                    message = (
                        f"This server's memory for runs is full: {what[0].lower() + what[1:]} needs {tokens:,} tokens of KV "
                        f"cache and {max(0, limit - others):,} of its {limit:,} are free. Try again in a few minutes (idle "
                        "runs are freed), or shorten the prompt or lower max new tokens."
                    )
                log.info("KV budget refused %s: %d tokens, %d of %d held by others", slot, tokens, others, limit)
                raise OverBudget(message)
            ident = next(self._ids)
            self._held[ident] = (slot, tokens)
        return Reservation(self, slot, tokens, ident)

    def _holds(self, ident: int) -> bool:
        with self._lock:
            return ident in self._held

    def _release(self, ident: int) -> None:
        with self._lock:
            self._held.pop(ident, None)

    def release_session(self, session: Hashable) -> int:
        """Release every reservation of one browser session (slots (session, ...)): it was freed. Returns how many."""
        with self._lock:
            idents = [i for i, (slot, _) in self._held.items() if isinstance(slot, tuple) and slot[:1] == (session,)]
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
