"""B streams at once: plain decoding as one batched target pass per token, speculative decoding as one batched
verify per round, each row committing its own number of tokens (ragged acceptance).

Notation as in specviz.core.verify (Leviathan et al. 2023): p_target, q_draft, k drafted tokens per round.

The design. The target is a ``BatchedLM``: one cache tensor for all rows in which every row has its own length
(the transformers version, ``specviz.models.HFBatchedLM``, pads the KV cache and masks each row's holes; its
docstring says how). A round:

1. draft: each active row's own drafter proposes up to k tokens for that row's context (drafters are per row
   and keep per-row state; a draft model here runs one row at a time: only the target pass is batched);
2. verify: one batched target pass over every active row's newest committed token plus its own drafts (rows
   feed 1 + m_b ids; the pass is as long as the longest row);
3. decide: the exact rule (``specviz.core.verify.decide``) row by row, each row with its own generator, so a
   row's output is distributed as its target alone; the host learns every row's (n, next token) in one transfer;
4. commit and roll back per row: accepted drafts plus the resampled or bonus token, cut at EOS or the length
   limit; then ``keep`` gives row b exactly its committed tokens but the newest (its own length, not a shared
   one: a shared length would leave one row's rejected drafts in its context), and its drafter forgets the rest;
5. rows that finished leave the batch (``select``). No row waits for another's tokens, none is decoded twice:
   the batch shrinks instead, as a static batch does; a serving engine would refill the slot (continuous batching).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from specviz.core.decoding import DecodeConfig, sync
from specviz.core.protocols import Drafter
from specviz.core.rounds import Drafted, chain_rule, cut_emitted, draft_chain
from specviz.core.verify import Decision


class BatchedLM(Protocol):
    """B causal-LM rows over one model, each row its own cached tokens, advanced together in one pass."""

    vocab_size: int
    device: torch.device

    @property
    def lengths(self) -> list[int]:
        """Cached tokens per row, in the current row order."""
        ...

    def extend(self, rows: Sequence[Sequence[int]], keep_last: int = 0) -> torch.Tensor:
        """One id list per row (ragged; a row may feed none) -> (B, keep_last or T, V) logits of each row's last
        positions, right-aligned (row b's newest id in the last column; columns before its first fed id are padding)."""
        ...

    def keep(self, lengths: Sequence[int]) -> None:
        """Row b keeps only its first lengths[b] cached tokens."""
        ...

    def select(self, rows: Sequence[int]) -> None:
        """Keep only these rows (indices into the current order), in this order."""
        ...


def row_seed(seed: int, row: int) -> int:
    """The seed of row ``row``'s generators: row 0 uses the run's seed itself."""
    return seed + 1_000_003 * row


@dataclass(frozen=True)
class BatchRound:
    """One batched target pass: which streams took part and what each did (per stream, in pass order)."""

    streams: tuple[int, ...]  # prompt indices in the pass
    drafted: tuple[int, ...]
    accepted: tuple[int, ...]
    committed: tuple[int, ...]  # tokens committed (after the EOS / length cut)
    ms: float  # the round's wall clock: drafting, the pass, the rule, commit and rollback
    pass_ms: float = 0.0  # the batched target forward alone (clocked after the device finished it)

    @property
    def tokens(self) -> int:
        return sum(self.committed)

    @property
    def width(self) -> int:
        """T of the batched pass: the most ids any row fed (its newest token plus its drafts)."""
        return 1 + max(self.drafted, default=0)


class BatchDecoder:
    """B streams decoded together; call step() until done. drafters[b] drafts for prompt b (a NoDrafter for plain
    decoding). Row b's draws come from generators seeded with row_seed(config.seed, b)."""

    def __init__(self, target: BatchedLM, drafters: Sequence[Drafter], prompts: Sequence[Sequence[int]], config: DecodeConfig) -> None:
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("Every stream needs a prompt of at least one token.")
        if len(drafters) != len(prompts) or len(target.lengths) != len(prompts):
            raise ValueError(f"Need one drafter and one target row per prompt ({len(prompts)}).")
        reading = next((d for d in drafters if d.reads_hidden or d.reads_features or d.reads_logits), None)
        if reading is not None:  # a batched target keeps no per-row hidden states and hands no pass to a drafter
            what = "logits" if reading.reads_logits else "hidden states"
            raise ValueError(f"The {reading.name} drafter reads the target's {what}, which batched decoding does not hand over; run it unbatched.")
        self.target, self.drafters, self.config = target, list(drafters), config
        self.prompt_lengths = [len(p) for p in prompts]
        self.tokens: list[list[int]] = [list(p) for p in prompts]  # per stream: prompt + committed tokens
        self.active: list[int] = list(range(len(prompts)))  # streams in the target's row order
        self.finished = [False] * len(prompts)
        self.device = torch.device(target.device)
        self.generators = [torch.Generator(device=self.device).manual_seed(row_seed(config.seed, b)) for b in range(len(prompts))]
        self.draft_generators = [
            g if torch.device(d.device) == self.device else torch.Generator(device=d.device).manual_seed(row_seed(config.seed, b))
            for b, (g, d) in enumerate(zip(self.generators, self.drafters))
        ]
        self.rounds: list[BatchRound] = []
        start = self._clock()
        if any(len(p) > 1 for p in prompts):  # the target caches all but each row's newest token
            target.extend([p[:-1] for p in prompts], keep_last=1)
        for drafter, p in zip(self.drafters, self.tokens):
            drafter.prepare(p)
        self.prefill_ms = (self._clock() - start) * 1000.0

    def generated(self, stream: int) -> list[int]:
        return self.tokens[stream][self.prompt_lengths[stream] :]

    def stream_done(self, stream: int) -> bool:
        return self.finished[stream] or len(self.generated(stream)) >= self.config.max_new_tokens

    @property
    def done(self) -> bool:
        return not self.active

    def run(self) -> list[BatchRound]:
        while not self.done:
            self.step()
        return self.rounds

    def step(self) -> BatchRound:
        """One round for every active stream: draft, one batched verify, the rule per row, commit, roll back."""
        if self.done:
            raise RuntimeError("Every stream is finished.")
        t0 = self._clock()
        drafts = [self.draft(b) for b in self.active]  # 1.
        decisions, pass_ms = self.verify(drafts)  # 2. + 3.
        outcomes = torch.stack([d.outcome() for d in decisions]).tolist() if decisions else []  # one transfer
        committed = [self.commit(b, drafted.ids, n, nxt) for b, drafted, (n, nxt) in zip(self.active, drafts, outcomes)]  # 4.
        streams = tuple(self.active)
        self.rollback()  # 4. + 5.
        record = BatchRound(streams, tuple(len(d.ids) for d in drafts), tuple(n for n, _ in outcomes), tuple(committed),
                            (self._clock() - t0) * 1000.0, pass_ms)  # fmt: skip
        self.rounds.append(record)
        return record

    def draft(self, stream: int) -> Drafted:
        """1. Up to k drafts for this stream (fewer near its length limit) and its drafter's q_draft, if any: the
        chain round's drafting (specviz.core.rounds.draft_chain)."""
        k = min(self.config.num_draft_tokens, self.config.max_new_tokens - len(self.generated(stream)) - 1)
        return draft_chain(self.drafters[stream], self.tokens[stream], k, self.draft_generators[stream], self.device)

    def verify(self, drafts: Sequence[Drafted]) -> tuple[list[Decision], float]:
        """2. One batched pass over each row's newest token plus its drafts; 3. the chain round's rule, row by row
        (specviz.core.rounds.chain_rule). Returns the decisions and the pass's own ms (what a cost profile's batched
        pass measures)."""
        feeds = [[self.tokens[b][-1], *drafted.ids] for b, drafted in zip(self.active, drafts)]
        width = max(len(f) for f in feeds)
        start = self._clock()
        logits = self.target.extend(feeds, keep_last=width)  # (B, width, V), right-aligned
        pass_ms = (self._clock() - start) * 1000.0
        decisions = []
        for row, (b, drafted) in enumerate(zip(self.active, drafts)):
            m = len(drafted.ids)
            _, _, decision = chain_rule(logits[row, width - m - 1 :], drafted, self.config.sampling, self.generators[b])  # (m+1, V) rows
            decisions.append(decision)
        return decisions, pass_ms

    def commit(self, stream: int, ids: tuple[int, ...], n: int, next_token: int) -> int:
        """4. Commit this stream's n accepted drafts and its next token, cut at EOS or the length limit."""
        emitted = [*ids[:n], next_token]
        room = self.config.max_new_tokens - len(self.generated(stream))
        emitted, _, self.finished[stream] = cut_emitted(emitted, ["accepted"] * len(emitted), self.config.eos_token_ids, room)
        self.tokens[stream].extend(emitted)
        return len(emitted)

    def rollback(self) -> None:
        """4. Each row keeps its own committed tokens but the newest; 5. finished streams leave the batch."""
        self.target.keep([len(self.tokens[b]) - 1 for b in self.active])
        for b in self.active:
            self.drafters[b].rollback(self.tokens[b])
        still = [row for row, b in enumerate(self.active) if not self.stream_done(b)]
        if len(still) < len(self.active):
            if still:
                self.target.select(still)
            self.active = [self.active[row] for row in still]

    def _clock(self) -> float:
        """Seconds, read after the target's device finished its queued work."""
        sync(self.device)
        return time.perf_counter()


@dataclass(frozen=True)
class BatchStats:
    """What a batched run measured: tokens over every stream, target passes, wall time of the rounds, and the shape
    of its passes (what a prediction from a cost profile needs: how many rows each pass held and how wide it was)."""

    streams: int
    new_tokens: int
    passes: int  # row-passes: every round counts each row that took part
    decode_s: float  # the rounds' wall clock, prefill excluded
    prefill_ms: float
    rounds: int = 0  # batched target passes
    pass_s: float = 0.0  # the batched forwards alone, summed
    drafted: int = 0  # drafted tokens over every row and round
    schedule: tuple[tuple[int, int, int], ...] = ()  # (rows, width, rounds): how many passes had that shape

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.decode_s if self.decode_s > 0 else float("nan")

    @property
    def tokens_per_target_pass(self) -> float:
        """Mean tokens one stream commits per target pass it takes part in."""
        return self.new_tokens / self.passes if self.passes else float("nan")

    @property
    def verify_width(self) -> float:
        """Mean T of a batched pass: ids per row, the widest row's (1 for plain decoding)."""
        return sum(w * n for _, w, n in self.schedule) / self.rounds if self.rounds else float("nan")

    @property
    def drafted_per_row(self) -> float:
        """Mean tokens a row drafted per round (prompt lookup often drafts none)."""
        return self.drafted / self.passes if self.passes else float("nan")

    @property
    def pass_ms(self) -> float:
        """Mean ms of one batched forward."""
        return self.pass_s * 1000.0 / self.rounds if self.rounds else float("nan")

    @property
    def overhead_ms_per_row(self) -> float:
        """ms per row per round outside the forward: drafting, the rule, commit, rollback, the Python loop."""
        return (self.decode_s - self.pass_s) * 1000.0 / self.passes if self.passes else float("nan")


def batch_stats(decoder: BatchDecoder) -> BatchStats:
    """Derived from the rounds, never tracked on the side."""
    rounds = decoder.rounds
    shapes = Counter((len(r.streams), r.width) for r in rounds)
    return BatchStats(
        streams=len(decoder.tokens), new_tokens=sum(r.tokens for r in rounds), passes=sum(len(r.streams) for r in rounds),
        decode_s=sum(r.ms for r in rounds) / 1000.0, prefill_ms=decoder.prefill_ms, rounds=len(rounds),
        pass_s=sum(r.pass_ms for r in rounds) / 1000.0, drafted=sum(sum(r.drafted) for r in rounds),
        schedule=tuple((rows, width, n) for (rows, width), n in sorted(shapes.items())),
    )  # fmt: skip
