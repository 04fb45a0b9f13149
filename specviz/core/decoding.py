"""The speculative decoding loop: prefill once, then draft -> verify in one target pass -> commit -> roll back,
and only then, with the round's clock stopped, build its record.

A drafter that reads the target's hidden state (Medusa heads, reads_hidden) is handed, after the prefill and after
every verify pass, the hidden state of the row whose LM-head output chose the newest committed token: from there
head i guesses the token i places after the newest. The target kept it from the pass the round ran anyway. A drafter
that reads the target's features (EAGLE, reads_features) is handed the rows that chose every committed token, and one
that learns from the target's logits (Token Recycling, reads_logits) every row of every pass; a round's hand-overs
wait for the next draft phase, so their cost is timed as drafting (the prefill's are part of the prefill). For a
logits reader the prefill computes every row's logits (in chunks), which a plain prefill skips.

A round stays on the target's device: the warp, the rule and every draw run there, with a generator there.
The host reads the device back a constant number of times per round (the rule's outcome; the record), never
once per drafted token, and reads the clock only after the device has synchronised.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from specviz.core.metrics import RunMetrics, run_metrics
from specviz.core.protocols import CachedLM, Drafter, common_prefix_len, extend_last, pause_point, paused_s
from specviz.core.records import StepRecord
from specviz.core.rounds import Drafted, RoundContext, Verified, build_record, cut_emitted
from specviz.core.sampling import SamplingConfig, warp
from specviz.core.tree import MAX_TREE_WIDTH
from specviz.core.tree_round import draft_tree, keep_path, verify_tree
from specviz.core.verify import EmitFate, decide, next_fate, one_hot_q
from specviz.core.verify import draft_fates as draft_fates_of

__all__ = ["CachedLM", "Checkpoint", "DecodeConfig", "Drafter", "SpeculativeDecoder", "common_prefix_len", "extend_last", "next_k"]

MAX_DRAFT_TOKENS = 16
PREFILL_CHUNK = 256  # a logits reader's prefill: rows of (chunk, V) logits at a time, not (prompt, V) at once
logger = logging.getLogger(__name__)
Features = tuple[int, torch.Tensor, tuple[int, ...]]  # (start position, (r, H) hidden rows, the r tokens they chose)
PassLogits = tuple[tuple[int, ...], torch.Tensor]  # (ids fed, (T, V) logits, row i after ids[i])


@dataclass(frozen=True)
class DecodeConfig:
    num_draft_tokens: int = 4  # k: tokens drafted per round (the first round's k when adaptive)
    sampling: SamplingConfig = SamplingConfig()
    seed: int = 0  # seeds the one generator every random draw of the run comes from
    max_new_tokens: int = 64
    eos_token_ids: tuple[int, ...] = ()  # generation stops after the first of these
    top_n: int = 20  # entries of p, q and the residual kept per verified position for charts
    adaptive_k: bool = False  # grow k by 2 after an all-accepted round, shrink by 1 after a rejection
    max_draft_tokens: int = MAX_DRAFT_TOKENS  # ceiling for adaptive k
    tree_width: int = 1  # children per tree node; 1 drafts a chain, more a token tree of at most k nodes

    def __post_init__(self) -> None:
        if not (0 <= self.num_draft_tokens <= MAX_DRAFT_TOKENS):
            raise ValueError(f"num_draft_tokens must be between 0 and {MAX_DRAFT_TOKENS}; got {self.num_draft_tokens}.")
        if not (1 <= self.max_draft_tokens <= MAX_DRAFT_TOKENS):
            raise ValueError(f"max_draft_tokens must be between 1 and {MAX_DRAFT_TOKENS}; got {self.max_draft_tokens}.")
        if self.adaptive_k and self.num_draft_tokens > self.max_draft_tokens:
            raise ValueError(
                f"num_draft_tokens ({self.num_draft_tokens}) is above max_draft_tokens ({self.max_draft_tokens}), "
                "the ceiling for adaptive k; lower it or raise the ceiling."
            )
        if not (1 <= self.tree_width <= MAX_TREE_WIDTH):
            raise ValueError(f"tree_width must be between 1 (a chain) and {MAX_TREE_WIDTH}; got {self.tree_width}.")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1; got {self.max_new_tokens}.")
        if self.top_n < 1:
            raise ValueError(f"top_n must be at least 1; got {self.top_n}.")


def next_k(k: int, num_drafted: int, num_accepted: int, config: DecodeConfig) -> int:
    """Adaptive k (the schedule of transformers' assisted generation): +2 after a round where every drafted
    token was kept, -1 after a rejection, always within [1, max_draft_tokens]; a round that drafted nothing
    carries no evidence and leaves k alone. The k asked each round is StepRecord.num_draft_tokens."""
    if not config.adaptive_k or num_drafted == 0:
        return k
    if num_accepted == num_drafted:
        return min(config.max_draft_tokens, k + 2)
    return max(1, k - 1)


def tree_ready(target: CachedLM, drafter: Drafter) -> bool:
    """Whether rounds can draft token trees: the drafter proposes them and the target verifies them in one
    pass (both declare it). When not, the run drafts chains and says why in the log."""
    if not drafter.can_branch:
        logger.warning("The %s drafter proposes chains only; token trees fall back to chains.", drafter.name)
        return False
    if not target.can_verify_tree:
        logger.warning("This target cannot verify a token tree in one pass; token trees fall back to chains.")
        return False
    problem = target.tree_problem  # type: ignore[attr-defined]  # a TreeCachedLM
    if problem:
        logger.warning("%s", problem)
        return False
    return True


@dataclass(frozen=True)
class Checkpoint:
    """Where a run stood between two rounds (SpeculativeDecoder.checkpoint), to take the next round again."""

    num_tokens: int  # prompt + committed
    num_records: int
    finished: bool
    k: int
    rng_state: torch.Tensor  # the rule's generator
    draft_rng_state: torch.Tensor
    hidden: torch.Tensor | None = None  # (H,) what a drafter reading hidden states was last handed
    features: Features | None = None  # what a features reader has not been handed yet
    pass_logits: PassLogits | None = None  # what a logits reader has not been handed yet
    drafter_state: bytes | None = None  # a stateful drafter's save_state()


def sync(device: torch.device) -> None:
    """Wait until the device finished its queued work (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


class SpeculativeDecoder:
    """One run: owns the target's cache, the drafter and the generators. Call step() until done.

    Every draw comes from generators seeded with config.seed: one on the target's device for the rule (and
    for a drafter sampling there), one on the CPU for host-side drafters when the target is elsewhere."""

    def __init__(self, target: CachedLM, drafter: Drafter, prompt_ids: Sequence[int], config: DecodeConfig) -> None:
        if len(prompt_ids) == 0:
            raise ValueError("The prompt is empty: type some text to continue.")
        self.target = target
        self.drafter = drafter
        self.config = config
        self.prompt_length = len(prompt_ids)
        self.tokens: list[int] = list(prompt_ids)  # prompt + every committed token
        self.records: list[StepRecord] = []
        self.device = torch.device(target.device)
        draft_device = torch.device(drafter.device)  # the CPU for host-side drafters
        self.generator = torch.Generator(device=self.device).manual_seed(config.seed)
        self.draft_generator = (
            self.generator if draft_device == self.device else torch.Generator(device=draft_device).manual_seed(config.seed)
        )
        self._devices = {self.device, draft_device}
        self.k = config.num_draft_tokens
        self.finished = False
        self.use_tree = config.tree_width > 1 and tree_ready(target, drafter)
        self.hidden: torch.Tensor | None = None  # (H,) the newest committed token's hidden row, for a drafter reading it
        self.features: Features | None = None  # rows for a features reader, handed over at the next draft
        self.pass_logits: PassLogits | None = None  # the latest verify pass for a logits reader, handed over at the next draft
        # Prefill: the target caches all but the newest token, whose logits the first verify pass computes.
        start, paused = self._clock(), paused_s()
        self.drafter.prepare(self.tokens)
        if len(self.tokens) > 1:
            self.prefill(self.tokens[:-1])
        self.observe(-1 if len(self.tokens) > 1 else None)  # the prefill's last row chose the newest token
        self.hand_over()  # a features reader runs its own prefill over the prompt's rows: timed as the prefill
        self.prefill_ms = (self._clock() - start - (paused_s() - paused)) * 1000.0  # a long prefill's waits between chunks are not its time

    def prefill(self, ids: list[int]) -> None:
        """Cache ids in the target. No (L, V) logits for a prompt of L tokens, unless the drafter learns from them:
        then chunk by chunk, each handed over at once. A features reader gets every row's hidden state (start 0)."""
        if not self.drafter.reads_logits:
            extend_last(self.target, ids)
            rows = self.target.last_hidden if self.drafter.reads_features else None  # type: ignore[attr-defined]
        else:
            kept = []
            for s in range(0, len(ids), PREFILL_CHUNK):
                if s:
                    pause_point()  # on a shared server a waiting participant's turn may go first (as extend_last's chunks)
                chunk = ids[s : s + PREFILL_CHUNK]
                self.drafter.observe_logits(chunk, self.target.extend(chunk))  # type: ignore[attr-defined]  # a LogitsDrafter
                if self.drafter.reads_features:
                    kept.append(self.target.last_hidden)  # type: ignore[attr-defined]
            rows = torch.cat(kept) if kept else None
        if self.drafter.reads_features:
            self.features = (0, self._hidden_rows(rows, len(ids)), tuple(self.tokens[1 : len(ids) + 1]))

    @property
    def generated(self) -> list[int]:
        return self.tokens[self.prompt_length :]

    @property
    def done(self) -> bool:
        return self.finished or len(self.generated) >= self.config.max_new_tokens

    def stats(self, baseline: Sequence[StepRecord] = ()) -> RunMetrics:
        """The run's metrics and timing from its records (with plain decoding's records, the measured speedup too)."""
        return run_metrics(self.records, baseline, self.prefill_ms)

    def run(self) -> list[StepRecord]:
        while not self.done:
            self.step()
        return self.records

    def step(self) -> StepRecord:
        """One round, chain or tree. The clock reads after the device synchronises and stops before the record."""
        if self.done:
            raise RuntimeError("This run is finished; reset to start again.")
        k = min(self.k, self.config.max_new_tokens - len(self.generated) - 1)  # a round emits up to k+1 tokens
        t0 = self._clock()
        drafted = self.draft(k)
        t1 = self._clock()
        verified = self.verify(drafted)
        t2 = self._clock()
        newest = self.tokens[-1]
        emitted, fates = self.commit(drafted, verified)
        self.rollback(drafted, verified)
        self.keep_for_drafter(newest, drafted, verified, len(emitted))
        t3 = self._clock()
        width = self.config.tree_width if self.use_tree else 1
        context = RoundContext(len(self.records), len(self.tokens) - len(emitted), k, width, self.config.top_n, self.done)
        record = build_record(context, drafted, verified, emitted, fates, (t0, t1, t2, t3))
        self.records.append(record)
        self.k = next_k(self.k, record.num_drafted, record.num_accepted, self.config)
        return record

    def checkpoint(self) -> Checkpoint:
        """The run as it stands, generators included, for restore(): plain decoding whose step a rerun disturbed
        takes it again (specviz.workshop.baselines), the same tokens from the same draws."""
        return Checkpoint(
            len(self.tokens), len(self.records), self.finished, self.k, self.generator.get_state(), self.draft_generator.get_state(),
            self.hidden, self.features, self.pass_logits,
            self.drafter.save_state() if self.drafter.keeps_state else None,  # type: ignore[attr-defined]  # a StatefulDrafter
        )  # fmt: skip

    def drafter_state(self) -> bytes | None:
        """A stateful drafter's state, the latest pass's logits included (for a saved run, specviz.core.resume), else
        None. Handing the logits over only queues them: the drafter still folds them in at its next proposal."""
        if not self.drafter.keeps_state:
            return None
        if self.drafter.reads_logits and self.pass_logits is not None:
            self.drafter.observe_logits(*self.pass_logits)  # type: ignore[attr-defined]  # a LogitsDrafter
            self.pass_logits = None
        return self.drafter.save_state()  # type: ignore[attr-defined]  # a StatefulDrafter

    def restore(self, checkpoint: Checkpoint) -> None:
        """Back to checkpoint: the tokens, records and draws after it are forgotten, the target's cache cropped.
        The drafter is told the shorter commit; one that learns from committed text (the n-gram model) would keep
        what it learned, so this is for drafters that keep nothing of it (plain decoding, prompt lookup, a model) or
        that declare their state (keeps_state: loaded back) or read features (handed the checkpoint's rows again)."""
        del self.tokens[checkpoint.num_tokens :]
        del self.records[checkpoint.num_records :]
        self.finished, self.k = checkpoint.finished, checkpoint.k
        self.generator.set_state(checkpoint.rng_state)
        if self.draft_generator is not self.generator:
            self.draft_generator.set_state(checkpoint.draft_rng_state)
        self.target.crop(min(len(self.target.tokens), len(self.tokens) - 1))
        self.drafter.rollback(self.tokens)
        if self.drafter.reads_hidden:
            self.hidden = checkpoint.hidden
            self.drafter.observe(self.hidden)  # type: ignore[attr-defined]  # a HiddenDrafter
        self.features, self.pass_logits = checkpoint.features, checkpoint.pass_logits
        if self.drafter.keeps_state and checkpoint.drafter_state is not None:
            self.drafter.load_state(checkpoint.drafter_state)  # type: ignore[attr-defined]  # a StatefulDrafter

    def draft(self, k: int) -> Drafted:
        """1. What the last pass left for the drafter (hand_over), then up to k drafted tokens (a chain, or a tree of
        at most k nodes) and the drafter's q_draft when it has one, moved to the target's device."""
        self.hand_over()
        if self.use_tree:
            return draft_tree(self.drafter, self.tokens, k, self.config.tree_width, self.draft_generator, self.device)  # type: ignore[arg-type]
        ids, q_draft, on_device = (), None, None
        if k > 0:
            proposal = self.drafter.propose(self.tokens, k, self.draft_generator)
            ids = tuple(int(t) for t in proposal.token_ids[:k])
            if proposal.q_draft is not None and ids:
                q_draft = proposal.q_draft[: len(ids)].to(self.device, torch.float32)
            if proposal.on_device is not None and ids:
                on_device = proposal.on_device[: len(ids)].to(self.device, torch.long)  # no second trip through the host
        if on_device is None:
            on_device = torch.tensor(ids, dtype=torch.long, device=self.device)
        return Drafted(ids, on_device, q_draft)

    def hand_over(self) -> None:
        """Give a features reader the rows that chose the tokens committed since, and a logits reader the latest pass."""
        if self.features is not None:
            self.drafter.observe_features(*self.features)  # type: ignore[attr-defined]  # a FeatureDrafter
            self.features = None
        if self.pass_logits is not None:
            self.drafter.observe_logits(*self.pass_logits)  # type: ignore[attr-defined]  # a LogitsDrafter
            self.pass_logits = None

    def verify(self, drafted: Drafted) -> Verified:
        """2. One target pass over the committed tokens not yet cached plus every draft (m+1 distributions),
        then the rule: for a chain all on the device, the host learning only n and the next token (one
        transfer); for a tree the tree rule (specviz.core.tree_round)."""
        pending = self.tokens[len(self.target.tokens) :]
        if drafted.is_tree:
            return verify_tree(self.target, pending, drafted, self.config.sampling, self.generator)  # type: ignore[arg-type]
        m = len(drafted.ids)
        logits = self.target.extend(pending + list(drafted.ids))[-(m + 1) :]  # (m+1, V)
        p_target = warp(logits, self.config.sampling)  # (m+1, V)
        q_draft = drafted.q_draft if drafted.q_draft is not None else one_hot_q(drafted.on_device, p_target.shape[-1])
        decision = decide(p_target, q_draft, drafted.on_device, self.generator)
        n, next_token = decision.outcome().tolist()
        return Verified(
            logits, p_target, q_draft, tuple(range(n)), next_token, next_fate(m, n), draft_fates_of(m, n),
            decision.accept_prob, decision.uniforms, decision.next_dist, next_row=len(pending) - 1 + n,
            rows=tuple(range(len(pending) - 1, len(pending) + n)),
        )  # fmt: skip

    def commit(self, drafted: Drafted, verified: Verified) -> tuple[list[int], list[EmitFate]]:
        """3. Commit the accepted path, then the resampled / bonus token; cut at EOS or the length limit."""
        emitted = [drafted.ids[i] for i in verified.path] + [verified.next_token]
        fates: list[EmitFate] = ["accepted"] * len(verified.path) + [verified.next_fate]
        room = self.config.max_new_tokens - len(self.generated)
        emitted, fates, self.finished = cut_emitted(emitted, fates, self.config.eos_token_ids, room)
        self.tokens.extend(emitted)
        return emitted, fates

    def rollback(self, drafted: Drafted, verified: Verified) -> None:
        """4. Both caches keep only what was committed. The target cached every draft: a tree first drops every
        node off the accepted path (nothing is recomputed); then the committed tokens before the newest one are
        accepted drafts, so cropping by length is enough (and costs nothing). A drafter reading hidden states is
        handed the pass's row that chose the newest token."""
        if drafted.is_tree:
            keep_path(self.target, verified.pending, verified.path)  # type: ignore[arg-type]
        self.target.crop(len(self.tokens) - 1)
        self.drafter.rollback(self.tokens)
        self.observe(verified.next_row)

    def keep_for_drafter(self, newest: int, drafted: Drafted, verified: Verified, num_emitted: int) -> None:
        """What the next draft phase hands a features reader (the rows that chose the committed tokens, from the
        position of the token before them) and a logits reader (the pass: the newest token's row, then every node's)."""
        if self.drafter.reads_features:
            rows = self.target.last_hidden  # type: ignore[attr-defined]  # a HiddenStateLM
            index = torch.tensor(verified.rows[:num_emitted], dtype=torch.long, device=self.device)
            chosen = self._hidden_rows(rows, 1 + max(verified.rows)).index_select(0, index)  # (e, H)
            start = len(self.tokens) - num_emitted - 1
            self.features = (start, chosen, tuple(self.tokens[start + 1 :]))
        if self.drafter.reads_logits:
            self.pass_logits = ((newest, *drafted.ids), verified.logits)

    def _hidden_rows(self, rows: torch.Tensor | None, need: int) -> torch.Tensor:
        """The target's kept hidden rows, checked: a features reader needs at least ``need`` of them."""
        if rows is None or rows.shape[0] < need:
            raise ValueError(
                f"The {self.drafter.name} drafter reads the target's hidden states, but this target keeps none "
                "(build its cached view with keep_hidden=True)."
            )
        return rows

    def observe(self, row: int | None) -> None:
        """Hand a drafter that reads hidden states (reads_hidden) row ``row`` of the target's latest pass: the row
        whose LM-head output chose the newest committed token (None: no pass yet, a prompt of one token)."""
        if not self.drafter.reads_hidden:
            return
        hidden = None
        if row is not None:
            rows = self.target.last_hidden  # type: ignore[attr-defined]  # a HiddenStateLM
            if rows is None:
                raise ValueError(
                    f"The {self.drafter.name} drafter reads the target's hidden states, but this target keeps none "
                    "(build its cached view with keep_hidden=True)."
                )
            hidden = rows[row]  # (H,)
        self.hidden = hidden
        self.drafter.observe(hidden)  # type: ignore[attr-defined]  # a HiddenDrafter

    def _clock(self) -> float:
        """Seconds, read only after every device of the run finished its queued work."""
        for device in self._devices:
            sync(device)
        return time.perf_counter()
