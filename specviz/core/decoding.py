"""The speculative decoding loop: prefill once, then draft -> verify in one target pass -> commit -> roll back."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

from specviz.core.records import RunStats, StepRecord, TokenDist, summarize
from specviz.core.sampling import SamplingConfig, warp
from specviz.core.verify import one_hot_q, residual, verify

if TYPE_CHECKING:
    from specviz.drafters.base import Drafter

MAX_DRAFT_TOKENS = 16


class CachedLM(Protocol):
    """A causal LM with its own KV cache, owned by one run. ``tokens`` are the ids already cached."""

    vocab_size: int
    device: torch.device

    @property
    def tokens(self) -> Sequence[int]: ...

    def extend(self, ids: Sequence[int]) -> torch.Tensor:
        """Feed ids after the cached ones; return (len(ids), vocab_size) logits, one row per fed id."""
        ...

    def crop(self, length: int) -> None:
        """Keep only the first ``length`` cached tokens."""
        ...


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


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def _top_dist(p: torch.Tensor, q: torch.Tensor | None, top_n: int) -> TokenDist:
    """Top-N of p (and of q and the residual when given), unioned, as plain floats."""
    ids = torch.topk(p, min(top_n, p.numel())).indices
    res = None
    if q is not None:
        res = residual(p, q)
        ids = torch.cat([ids, torch.topk(q, min(top_n, q.numel())).indices, torch.topk(res, min(top_n, res.numel())).indices])
        ids = ids[(p[ids] + q[ids] + res[ids]) > 0]
    ids = torch.unique(ids)
    ids = ids[torch.argsort(p[ids], descending=True, stable=True)]
    return TokenDist(
        token_ids=tuple(ids.tolist()),
        p_target=tuple(p[ids].tolist()),
        q_draft=tuple(q[ids].tolist()) if q is not None else None,
        residual=tuple(res[ids].tolist()) if res is not None else None,
    )


class SpeculativeDecoder:
    """One run: owns the target's cache, the drafter and the generator. Call step() until done."""

    def __init__(self, target: CachedLM, drafter: Drafter, prompt_ids: Sequence[int], config: DecodeConfig) -> None:
        if len(prompt_ids) == 0:
            raise ValueError("The prompt is empty: type some text to continue.")
        self.target = target
        self.drafter = drafter
        self.config = config
        self.prompt_length = len(prompt_ids)
        self.tokens: list[int] = list(prompt_ids)  # prompt + every committed token
        self.records: list[StepRecord] = []
        self.generator = torch.Generator().manual_seed(config.seed)
        self.k = config.num_draft_tokens
        self.finished = False
        # Prefill: the target caches all but the newest token, whose logits the first verify pass computes.
        start = time.perf_counter()
        if len(self.tokens) > 1:
            self.target.extend(self.tokens[:-1])
        self.drafter.prepare(self.tokens)
        _sync(target.device)
        self.prefill_ms = (time.perf_counter() - start) * 1000.0

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
        if self.done:
            raise RuntimeError("This run is finished; reset to start again.")
        cfg = self.config
        remaining = cfg.max_new_tokens - len(self.generated)
        k = min(self.k, remaining - 1)  # a round emits up to k+1 tokens; drafting past the limit is waste
        t0 = time.perf_counter()

        # 1. draft up to k tokens
        draft = self.drafter.propose(self.tokens, k, self.generator) if k > 0 else None
        drafted = torch.tensor(draft.token_ids[:k] if draft else (), dtype=torch.long)
        m = drafted.numel()
        _sync(self.target.device)
        t1 = time.perf_counter()

        # 2. one target pass over the newest committed token plus every draft: m+1 distributions
        feed = self.tokens[len(self.target.tokens) :] + drafted.tolist()
        logits = self.target.extend(feed)[-(m + 1) :]  # (m+1, V)
        p_target = warp(logits, cfg.sampling).cpu()  # (m+1, V)
        vocab = p_target.shape[-1]
        has_q = draft is not None and draft.q_draft is not None and m > 0
        q_draft = draft.q_draft[:m].float().cpu() if has_q else one_hot_q(drafted, vocab)  # (m, V)
        verdict = verify(p_target, q_draft, drafted, self.generator)
        _sync(self.target.device)
        t2 = time.perf_counter()

        # 3. commit: accepted drafts, then the resampled / bonus token; cut at EOS or the length limit
        n = verdict.num_accepted
        emitted = drafted[:n].tolist() + [verdict.next_token]
        fates = ["accepted"] * n + [verdict.next_fate]
        finished = False
        for i, tok in enumerate(emitted):
            if tok in cfg.eos_token_ids:
                emitted, fates, finished = emitted[: i + 1], fates[: i + 1], True
                break
        emitted, fates = emitted[:remaining], fates[:remaining]
        self.tokens.extend(emitted)
        self.finished = finished

        # 4. roll back: both caches keep only what was committed (the target all but the newest token)
        self.target.crop(min(common_prefix_len(self.target.tokens, self.tokens), len(self.tokens) - 1))
        self.drafter.rollback(self.tokens)
        _sync(self.target.device)
        t3 = time.perf_counter()

        # 5. the record, built after the round's clock stopped
        record = self._record(k, drafted, p_target, q_draft, logits, has_q, verdict, emitted, fates, (t0, t1, t2, t3))
        self.records.append(record)
        self.k = next_k(self.k, m, record.num_accepted, cfg)
        return record

    def _record(self, k, drafted, p_target, q_draft, logits, has_q, verdict, emitted, fates, times) -> StepRecord:
        """Per drafted token, then top-N at the position of every emitted token. Drafts after an EOS / length
        cut are "discarded": the stats count only what was kept."""
        start = time.perf_counter()
        m, e, n = drafted.numel(), len(emitted), verdict.num_accepted
        kept = min(n, e)  # drafts that became output
        draft_fates = tuple(verdict.draft_fates[:kept]) + (
            verdict.draft_fates[kept : kept + 1] if e == n + 1 else ()  # the rejection, unless the cut came first
        )
        draft_fates = draft_fates + ("discarded",) * (m - len(draft_fates))
        rows = torch.arange(m)
        overlap = torch.minimum(p_target[: min(e, m)], q_draft[: min(e, m)]).sum(dim=-1) if has_q else torch.empty(0)
        dists = [_top_dist(p_target[i], q_draft[i] if i < m else None, self.config.top_n) for i in range(e)]
        top2 = torch.topk(logits[:e].float(), min(2, logits.shape[-1]), dim=-1).values  # (e, 2)
        margin = top2[:, 0] - top2[:, -1]
        next_tok = verdict.next_token
        t0, t1, t2, t3 = times
        fields = dict(
            index=len(self.records),
            context_length=len(self.tokens) - e,
            num_draft_tokens=k,
            drafted=tuple(drafted.tolist()),
            p_target=tuple(p_target[rows, drafted].tolist()),
            q_draft=tuple(q_draft[rows, drafted].tolist()),
            accept_prob=tuple(verdict.accept_prob.tolist()),
            uniforms=tuple(verdict.uniforms.tolist()),
            draft_fates=draft_fates,
            emitted=tuple(emitted),
            emitted_fates=tuple(fates),
            emitted_margin=tuple(margin.tolist()),
            next_p_target=float(p_target[n, next_tok]),
            next_residual=float(verdict.residual[next_tok]) if verdict.residual is not None else None,
            overlap=tuple(overlap.tolist()),
            dists=tuple(dists),
            has_q=has_q,
            draft_ms=(t1 - t0) * 1000.0,
            verify_ms=(t2 - t1) * 1000.0,
            round_ms=(t3 - t0) * 1000.0,
            finished=self.done,  # EOS, or the max_new_tokens limit, reached this round
        )
        return StepRecord(**fields, record_ms=(time.perf_counter() - start) * 1000.0)
