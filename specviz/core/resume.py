"""Continue a run exactly after its process is gone: what a round leaves behind besides its records.

A run's future depends on four things: the committed tokens (prompt + generated), the generators' states, the
adaptive k and whether the run finished. Everything else is derived from the committed tokens: the target's KV
cache (re-prefilled), and every drafter's state (n-gram counts, the lookup index, a draft model's cache), which
prepare() rebuilds from them, the hidden state Medusa heads read (the re-prefill's last row is the row that chose
the newest committed token, the same rule as after a round: SpeculativeDecoder.observe), and an EAGLE drafter's own
cache (rebuilt from the re-prefill's rows, each the row that chose the next committed token). So capture() keeps
those four, plus the state of a drafter that declares one the committed tokens cannot give back (keeps_state:
Token Recycling's table, learned from rejected drafts' rows too), and resume() rebuilds a decoder that draws the
same uniforms in the same order from the same states as the uninterrupted run.

The continued stream equals the uninterrupted one token for token, up to floating-point reassociation: a
re-prefilled cache holds the same keys and values computed in one pass instead of round by round, which can
differ in the last bit; a sample or an argmax flips only if a draw lands within that rounding of a boundary.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from specviz.core.decoding import CachedLM, DecodeConfig, SpeculativeDecoder
from specviz.core.records import StepRecord

if TYPE_CHECKING:
    from specviz.core.protocols import Drafter

MAX_STATE_BYTES = 64 * 1024  # a CPU Philox/MT state is ~5 KB, a CUDA one 16 bytes
MAX_DRAFTER_STATE_BYTES = 4 * 1024 * 1024  # a recycling table of every token a long run met: ~40 bytes a token


@dataclass(frozen=True)
class DecoderState:
    """What exact continuation needs besides the committed tokens. States are base64 of torch.Generator.get_state()."""

    generator: str  # the rule's generator (on the target's device)
    draft_generator: str | None  # None: the drafter draws from the rule's generator (same device)
    k: int  # the next round's k (adaptive k moves it)
    finished: bool  # an EOS was emitted
    drafter_state: str | None = None  # base64 of a stateful drafter's save_state(); None for every other drafter

    def to_dict(self) -> dict:
        out = {"generator": self.generator, "draft_generator": self.draft_generator, "k": self.k, "finished": self.finished}
        return out | ({"drafter_state": self.drafter_state} if self.drafter_state is not None else {})

    @classmethod
    def from_dict(cls, raw: object) -> DecoderState:
        """Validate a stored state; raises ValueError saying what is wrong."""
        if not isinstance(raw, dict):
            raise ValueError("the decoder state is not an object")
        gen, draft, k, finished = raw.get("generator"), raw.get("draft_generator"), raw.get("k"), raw.get("finished")
        if not isinstance(gen, str) or not (draft is None or isinstance(draft, str)):
            raise ValueError("the generator states are not text")
        if any(len(s) > MAX_STATE_BYTES * 2 for s in (gen, draft or "")):
            raise ValueError("a generator state is too long")
        if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= 64 or not isinstance(finished, bool):
            raise ValueError("k or finished is not valid")
        for s in (gen, draft):
            if s is not None:
                _decode(s)
        kept = raw.get("drafter_state")
        if kept is not None:
            if not isinstance(kept, str) or len(kept) > MAX_DRAFTER_STATE_BYTES * 2:
                raise ValueError("the drafter state is not text of a possible size")
            _decode(kept, MAX_DRAFTER_STATE_BYTES)
        return cls(gen, draft, k, finished, kept)


def _encode(generator: torch.Generator) -> str:
    return base64.b64encode(bytes(generator.get_state().cpu().numpy())).decode("ascii")


def _decode(text: str, limit: int = MAX_STATE_BYTES) -> torch.Tensor:
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise ValueError("a saved state is not base64") from None
    if not raw or len(raw) > limit:
        raise ValueError("a saved state has an impossible size")
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8)


def capture(decoder: SpeculativeDecoder) -> DecoderState:
    """The decoder's continuation state after its latest round (cheap: a few KB)."""
    shared = decoder.draft_generator is decoder.generator
    kept = decoder.drafter_state()
    return DecoderState(
        _encode(decoder.generator), None if shared else _encode(decoder.draft_generator), decoder.k, decoder.finished,
        None if kept is None else base64.b64encode(kept).decode("ascii"),
    )  # fmt: skip


def resume(
    target: CachedLM,
    drafter: Drafter,
    prompt_ids: Sequence[int],
    generated: Sequence[int],
    records: Sequence[StepRecord],
    config: DecodeConfig,
    state: DecoderState,
    prefill_ms: float = 0.0,
) -> SpeculativeDecoder:
    """A decoder at the round where capture() left it: the target and the drafter prefilled with prompt + generated,
    the records kept, the generators, k and finished restored. Raises ValueError if the pieces do not fit."""
    emitted = [t for r in records for t in r.emitted]
    if emitted != list(generated):
        raise ValueError("the saved tokens are not the ones the saved rounds emitted")
    decoder = SpeculativeDecoder(target, drafter, [*prompt_ids, *generated], config)  # one prefill of everything
    decoder.prompt_length = len(prompt_ids)
    decoder.records = list(records)
    decoder.prefill_ms = prefill_ms
    shared = decoder.draft_generator is decoder.generator
    if shared != (state.draft_generator is None):
        raise ValueError("the saved run drew from a different set of generators (another device?)")
    try:
        decoder.generator.set_state(_decode(state.generator))
        if not shared:
            decoder.draft_generator.set_state(_decode(state.draft_generator or ""))
    except RuntimeError as exc:  # a state from another generator type or device
        raise ValueError(f"the saved generator state does not fit this device ({exc})") from None
    k = min(state.k, config.max_draft_tokens) if config.adaptive_k else state.k  # a ceiling lowered since the save holds
    decoder.k, decoder.finished = k, state.finished
    if drafter.keeps_state:
        if state.drafter_state is None:
            raise ValueError(f"the saved run carries no state for the {drafter.name} drafter, so it cannot continue exactly")
        drafter.load_state(bytes(_decode(state.drafter_state, MAX_DRAFTER_STATE_BYTES).numpy()))  # type: ignore[attr-defined]
    return decoder
