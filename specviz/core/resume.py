"""Where a run stands between two rounds (``RunState``): for taking a round again in the same process (restore) and
for continuing exactly after the process is gone (a saved run, resumed).

A run's future depends on four things: the committed tokens (prompt + generated), the generators' states, the
adaptive k and whether the run finished. Everything else is derived from the committed tokens: the target's KV
cache (re-prefilled), and every drafter's state (n-gram counts, the lookup index, a draft model's cache), which
prepare() rebuilds from them, the hidden state Medusa heads read (the re-prefill's row before its last is the row
that chose the newest committed token, the same rule as after a round: SpeculativeDecoder.observe), and an EAGLE drafter's own
cache (rebuilt from the re-prefill's rows, each the row that chose the next committed token). So a RunState keeps
those, plus the state of a drafter that declares one the committed tokens cannot give back (keeps_state: Token
Recycling's table, learned from rejected drafts' rows too). In memory it also keeps what the latest pass left for
the drafter (``HandOvers``), so a restore needs no re-prefill; a saved state leaves them out, and the resumed run's
re-prefill derives them. The committed tokens themselves are the records' (num_rounds says how many).

The continued stream equals the uninterrupted one token for token, up to floating-point reassociation: a
re-prefilled cache holds the same keys and values computed in one pass instead of round by round, which can
differ in the last bit; a sample or an argmax flips only if a draw lands within that rounding of a boundary.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

import torch

MAX_STATE_BYTES = 64 * 1024  # a CPU Philox/MT state is ~5 KB, a CUDA one 16 bytes
MAX_DRAFTER_STATE_BYTES = 4 * 1024 * 1024  # a recycling table of every token a long run met: ~40 bytes a token
Features = tuple[int, torch.Tensor, tuple[int, ...]]  # (start position, (r, H) hidden rows, the r tokens they chose)
PassLogits = tuple[tuple[int, ...], torch.Tensor]  # (ids fed, (T, V) logits, row i after ids[i])


@dataclass(frozen=True)
class HandOvers:
    """What the target's latest pass left for a drafter that reads it (in memory only)."""

    hidden: torch.Tensor | None = None  # (H,) what a drafter reading hidden states was last handed
    features: Features | None = None  # what a features reader has not been handed yet
    pass_logits: PassLogits | None = None  # what a logits reader has not been handed yet


@dataclass(frozen=True)
class RunState:
    """A run between two rounds, besides its records (SpeculativeDecoder.state(); restore() goes back to it)."""

    num_rounds: int  # the records taken; the committed tokens are the prompt and what these rounds emitted
    k: int  # the next round's k (adaptive k moves it)
    finished: bool  # an EOS was emitted
    generator: bytes  # the rule's generator's get_state()
    draft_generator: bytes | None  # None: the drafter draws from the rule's generator (same device)
    drafter_state: bytes | None = None  # a stateful drafter's save_state(); None for every other drafter
    hand_overs: HandOvers | None = field(default=None, compare=False)  # None in a saved state: the re-prefill derives them

    def to_dict(self) -> dict:
        """JSON for a saved run: the generators as base64; num_rounds and the hand-overs are not written (the
        saved records give the one, a re-prefill the other)."""
        out = {"generator": _encode(self.generator), "draft_generator": None if self.draft_generator is None else _encode(self.draft_generator),
               "k": self.k, "finished": self.finished}  # fmt: skip
        return out | ({"drafter_state": _encode(self.drafter_state)} if self.drafter_state is not None else {})

    @classmethod
    def from_dict(cls, raw: object, num_rounds: int) -> RunState:
        """Validate a stored state saved after num_rounds rounds; raises ValueError saying what is wrong."""
        if not isinstance(raw, dict):
            raise ValueError("the decoder state is not an object")
        gen, draft, k, finished = raw.get("generator"), raw.get("draft_generator"), raw.get("k"), raw.get("finished")
        if not isinstance(gen, str) or not (draft is None or isinstance(draft, str)):
            raise ValueError("the generator states are not text")
        if any(len(s) > MAX_STATE_BYTES * 2 for s in (gen, draft or "")):
            raise ValueError("a generator state is too long")
        if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= 64 or not isinstance(finished, bool):
            raise ValueError("k or finished is not valid")
        kept = raw.get("drafter_state")
        if kept is not None and (not isinstance(kept, str) or len(kept) > MAX_DRAFTER_STATE_BYTES * 2):
            raise ValueError("the drafter state is not text of a possible size")
        drafter_state = None if kept is None else _decode(kept, MAX_DRAFTER_STATE_BYTES)
        return cls(num_rounds, k, finished, _decode(gen), None if draft is None else _decode(draft), drafter_state)


def generator_state(generator: torch.Generator) -> bytes:
    """A generator's state as bytes (get_state() is a CPU byte tensor on every device: no device sync)."""
    return bytes(generator.get_state().numpy())


def set_generator_state(generator: torch.Generator, state: bytes) -> None:
    """Back to a generator_state(); ValueError when the state does not fit this generator (another device or type)."""
    try:
        generator.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))
    except RuntimeError as exc:
        raise ValueError(f"the saved generator state does not fit this device ({exc})") from None


def _encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _decode(text: str, limit: int = MAX_STATE_BYTES) -> bytes:
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise ValueError("a saved state is not base64") from None
    if not raw or len(raw) > limit:
        raise ValueError("a saved state has an impossible size")
    return raw
