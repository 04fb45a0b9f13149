"""The speculative decoding loop: prefill once, then draft -> verify in one target pass -> commit -> roll back,
and only then, with the round's clock stopped, build its record.

A round stays on the target's device: the warp, the rule and every draw run there, with a generator there.
The host reads the device back a constant number of times per round (the rule's outcome; the record), never
once per drafted token, and reads the clock only after the device has synchronised.
"""

from __future__ import annotations

import functools
import inspect
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

from specviz.core.records import RunStats, StepRecord, TokenDist, summarize
from specviz.core.sampling import SamplingConfig, warp
from specviz.core.tree import MAX_TREE_WIDTH
from specviz.core.verify import Decision, EmitFate, decide, next_fate, one_hot_q, residual
from specviz.core.verify import draft_fates as draft_fates_of

if TYPE_CHECKING:
    from specviz.drafters.base import Drafter

MAX_DRAFT_TOKENS = 16
logger = logging.getLogger(__name__)


class CachedLM(Protocol):
    """A causal LM with its own KV cache, owned by one run. ``tokens`` are the ids already cached."""

    vocab_size: int
    device: torch.device

    @property
    def tokens(self) -> Sequence[int]: ...

    def extend(self, ids: Sequence[int] | torch.Tensor, last_only: bool = False) -> torch.Tensor:
        """Feed ids after the cached ones; return (len(ids), vocab_size) logits, one row per fed id.
        last_only (optional to implement): only the last row, (1, vocab_size), e.g. for a long prefill.
        ids may be a 1-D LongTensor on the device (a draft model feeding back its own samples)."""
        ...

    def crop(self, length: int) -> None:
        """Keep only the first ``length`` cached tokens."""
        ...


def extend_last(lm: CachedLM, ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
    """Feed ids and return the last position's (V,) logits; an lm whose extend takes last_only computes no others."""
    if _takes_last_only(type(lm)):
        return lm.extend(ids, last_only=True)[-1]
    return lm.extend(ids)[-1]


@functools.cache
def _takes_last_only(lm_type: type) -> bool:
    return "last_only" in inspect.signature(lm_type.extend).parameters


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


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def tree_ready(target: CachedLM, drafter: Drafter) -> bool:
    """Whether rounds can draft token trees: the drafter proposes them and the target verifies them in one
    pass. When not, the run drafts chains and says why in the log."""
    if not hasattr(drafter, "propose_tree"):
        logger.warning("The %s drafter proposes chains only; token trees fall back to chains.", drafter.name)
        return False
    if not hasattr(target, "extend_tree"):
        logger.warning("This target cannot verify a token tree in one pass; token trees fall back to chains.")
        return False
    problem = getattr(target, "tree_problem", None)
    if problem:
        logger.warning("%s", problem)
        return False
    return True


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


@dataclass(frozen=True)
class Drafted:
    """A round's proposal, ready for the target: ids on the host and on the device, and q_draft when given."""

    ids: tuple[int, ...]  # (m,) what the drafter proposed, cut to k
    on_device: torch.Tensor  # (m,) the same ids on the target's device
    q_draft: torch.Tensor | None  # (m, V) float32 on the device; None: one-hot on each id


@dataclass(frozen=True)
class Verified:
    """The target pass and the rule's decision; only num_accepted and next_token have crossed to the host."""

    logits: torch.Tensor  # (m+1, V) raw target logits at the newest committed token and each draft
    p_target: torch.Tensor  # (m+1, V) after the warp
    q_draft: torch.Tensor  # (m, V), one-hot for drafters without a distribution
    decision: Decision  # on the device
    num_accepted: int  # n
    next_token: int


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
        draft_device = torch.device(getattr(drafter, "device", "cpu"))  # host-side drafters have no device
        self.generator = torch.Generator(device=self.device).manual_seed(config.seed)
        self.draft_generator = (
            self.generator if draft_device == self.device else torch.Generator(device=draft_device).manual_seed(config.seed)
        )
        self._devices = {self.device, draft_device}
        self.k = config.num_draft_tokens
        self.finished = False
        self.use_tree = config.tree_width > 1 and tree_ready(target, drafter)
        # Prefill: the target caches all but the newest token, whose logits the first verify pass computes.
        start = self._clock()
        if len(self.tokens) > 1:
            extend_last(self.target, self.tokens[:-1])  # no (L, V) logits for a prompt of L tokens
        self.drafter.prepare(self.tokens)
        self.prefill_ms = (self._clock() - start) * 1000.0

    @property
    def generated(self) -> list[int]:
        return self.tokens[self.prompt_length :]

    @property
    def done(self) -> bool:
        return self.finished or len(self.generated) >= self.config.max_new_tokens

    def stats(self) -> RunStats:
        return summarize(self.records, self.prefill_ms)

    def run(self) -> list[StepRecord]:
        while not self.done:
            self.step()
        return self.records

    def step(self) -> StepRecord:
        """One round. The clock reads after the device synchronises and stops before the record is built."""
        if self.done:
            raise RuntimeError("This run is finished; reset to start again.")
        k = min(self.k, self.config.max_new_tokens - len(self.generated) - 1)  # a round emits up to k+1 tokens
        if self.use_tree:  # token trees: their own round (specviz.core.tree_round); chains are untouched
            from specviz.core.tree_round import tree_round

            record = tree_round(self, k)
            self.records.append(record)
            self.k = next_k(self.k, record.num_drafted, record.num_accepted, self.config)
            return record
        t0 = self._clock()
        drafted = self.draft(k)
        t1 = self._clock()
        verified = self.verify(drafted)
        t2 = self._clock()
        emitted, fates = self.commit(drafted, verified)
        self.rollback()
        t3 = self._clock()
        record = self.record(k, drafted, verified, emitted, fates, (t0, t1, t2, t3))
        self.records.append(record)
        self.k = next_k(self.k, record.num_drafted, record.num_accepted, self.config)
        return record

    def draft(self, k: int) -> Drafted:
        """1. Up to k drafted tokens, and the drafter's q_draft when it has one, moved to the target's device."""
        ids, q_draft = (), None
        if k > 0:
            proposal = self.drafter.propose(self.tokens, k, self.draft_generator)
            ids = tuple(int(t) for t in proposal.token_ids[:k])
            if proposal.q_draft is not None and ids:
                q_draft = proposal.q_draft[: len(ids)].to(self.device, torch.float32)
        return Drafted(ids, torch.tensor(ids, dtype=torch.long, device=self.device), q_draft)

    def verify(self, drafted: Drafted) -> Verified:
        """2. One target pass over the newest committed token plus every draft (m+1 distributions), then the
        rule, all on the device; the host learns only n and the next token (one transfer)."""
        m = len(drafted.ids)
        feed = self.tokens[len(self.target.tokens) :] + list(drafted.ids)
        logits = self.target.extend(feed)[-(m + 1) :]  # (m+1, V)
        p_target = warp(logits, self.config.sampling)  # (m+1, V)
        q_draft = drafted.q_draft if drafted.q_draft is not None else one_hot_q(drafted.on_device, p_target.shape[-1])
        decision = decide(p_target, q_draft, drafted.on_device, self.generator)
        n, next_token = decision.outcome().tolist()
        return Verified(logits, p_target, q_draft, decision, n, next_token)

    def commit(self, drafted: Drafted, verified: Verified) -> tuple[list[int], list[EmitFate]]:
        """3. Commit the accepted drafts, then the resampled / bonus token; cut at EOS or the length limit."""
        n = verified.num_accepted
        emitted = list(drafted.ids[:n]) + [verified.next_token]
        fates: list[EmitFate] = ["accepted"] * n + [next_fate(len(drafted.ids), n)]
        cut = next((i + 1 for i, tok in enumerate(emitted) if tok in self.config.eos_token_ids), None)
        cut = min(cut or len(emitted), self.config.max_new_tokens - len(self.generated))
        self.finished = emitted[cut - 1] in self.config.eos_token_ids
        emitted, fates = emitted[:cut], fates[:cut]
        self.tokens.extend(emitted)
        return emitted, fates

    def rollback(self) -> None:
        """4. Both caches keep only what was committed. The target cached every draft; the committed tokens
        before the newest one are accepted drafts, so cropping by length is enough (and costs nothing)."""
        self.target.crop(len(self.tokens) - 1)
        self.drafter.rollback(self.tokens)

    def record(
        self, k: int, drafted: Drafted, verified: Verified, emitted: list[int], fates: list[EmitFate], times: tuple[float, ...]
    ) -> StepRecord:
        """5. The round's record, built after its clock stopped: per drafted token, then top-N rows and the top-2
        logit margin at the position of every emitted token. Drafts after an EOS / length cut are "discarded",
        so the stats count only what was kept. Everything crosses to the host in one transfer."""
        start = time.perf_counter()
        m, e, n = len(drafted.ids), len(emitted), verified.num_accepted
        kept = min(n, e)
        draft_fates = draft_fates_of(m, n)[: kept + (e == n + 1)]  # the rejection stays unless the cut came first
        draft_fates += ("discarded",) * (m - len(draft_fates))
        has_q = drafted.q_draft is not None
        host = _to_host(verified, drafted.on_device, e, has_q, self.config.top_n)
        t0, t1, t2, t3 = times
        fields = dict(
            index=len(self.records),
            context_length=len(self.tokens) - e,
            num_draft_tokens=k,
            drafted=drafted.ids,
            draft_fates=draft_fates,
            emitted=tuple(emitted),
            emitted_fates=tuple(fates),
            has_q=has_q,
            draft_ms=(t1 - t0) * 1000.0,
            verify_ms=(t2 - t1) * 1000.0,
            round_ms=(t3 - t0) * 1000.0,
            finished=self.done,  # EOS, or the max_new_tokens limit, reached this round
            **host,
        )
        return StepRecord(**fields, record_ms=(time.perf_counter() - start) * 1000.0)

    def _clock(self) -> float:
        """Seconds, read only after every device of the run finished its queued work."""
        for device in self._devices:
            _sync(device)
        return time.perf_counter()


def _to_host(verified: Verified, drafted: torch.Tensor, e: int, has_q: bool, top_n: int) -> dict:
    """The record's numbers, gathered on the device and moved to the host in one float64 transfer: per drafted
    token p, q, min(1, p/q) and u; the chosen token's p and residual; overlaps; margins; top-N candidates."""
    p, q, decision = verified.p_target, verified.q_draft, verified.decision
    m, n, token = drafted.numel(), verified.num_accepted, verified.next_token
    vocab = p.shape[-1]
    with_q = min(e, m)  # emitted positions that had a draft, hence a q row
    res = residual(p[:with_q], q[:with_q])  # (with_q, V)
    pad = torch.zeros_like(p[with_q:e])  # the bonus row has no q: its candidates are p's top-N only
    q_rows, res_rows = torch.cat([q[:with_q], pad]), torch.cat([res, pad])  # (e, V)
    top = min(top_n, vocab)
    cand = torch.cat([torch.topk(t, top, dim=-1).indices for t in (p[:e], q_rows, res_rows)], dim=-1)  # (e, 3N)
    top2 = torch.topk(verified.logits[:e].float(), min(2, vocab), dim=-1).values  # (e, 2)
    next_res = decision.next_dist[token] if n < m else torch.full((), -1.0, device=p.device)
    parts = [
        p[:m].gather(1, drafted.view(-1, 1)).view(-1),
        q.gather(1, drafted.view(-1, 1)).view(-1),
        decision.accept_prob,
        decision.uniforms,
        p[n, token].view(1),
        next_res.view(1),
        torch.minimum(p[:with_q], q[:with_q]).sum(dim=-1) if has_q else p.new_zeros(0),
        top2[:, 0] - top2[:, -1],
        cand.flatten(),
        p[:e].gather(1, cand).flatten(),
        q_rows.gather(1, cand).flatten(),
        res_rows.gather(1, cand).flatten(),
    ]
    flat = torch.cat([t.double() for t in parts]).tolist()  # the record's one host transfer
    sizes = [m, m, m, m, 1, 1, with_q if has_q else 0, e] + [cand.numel()] * 4
    p_x, q_x, accept, uniforms, next_p, next_r, overlap, margin, ids, pv, qv, rv = _split(flat, sizes)
    width = cand.shape[-1]
    dists = []
    for i in range(e):
        row = slice(i * width, (i + 1) * width)
        ids_i, p_i, q_i, r_i = ids[row], pv[row], qv[row], rv[row]
        if i < with_q:  # p's, q's and the residual's top-N, where any of them has mass
            keep = [j for j in range(width) if p_i[j] + q_i[j] + r_i[j] > 0]
        else:
            keep = list(range(top))
        by_id = {int(ids_i[j]): j for j in keep}
        order = sorted(sorted(by_id), key=lambda t: -p_i[by_id[t]])  # by p_target, ties by token id
        dists.append(
            TokenDist(
                token_ids=tuple(order),
                p_target=tuple(p_i[by_id[t]] for t in order),
                q_draft=tuple(q_i[by_id[t]] for t in order) if i < with_q else None,
                residual=tuple(r_i[by_id[t]] for t in order) if i < with_q else None,
            )
        )
    return dict(
        p_target=tuple(p_x),
        q_draft=tuple(q_x),
        accept_prob=tuple(accept),
        uniforms=tuple(uniforms),
        next_p_target=next_p[0],
        next_residual=next_r[0] if n < m else None,
        overlap=tuple(overlap),
        emitted_margin=tuple(margin),
        dists=tuple(dists),
    )


def _split(flat: list[float], sizes: list[int]) -> list[list[float]]:
    out, at = [], 0
    for size in sizes:
        out.append(flat[at : at + size])
        at += size
    return out
