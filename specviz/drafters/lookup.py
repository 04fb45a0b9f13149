"""Prompt lookup drafting: copy what followed an earlier occurrence of the context's tail.

Which occurrence. Longest n-gram first (ngram_max down to ngram_min). Among the earlier occurrences
of the tail n-gram, the one whose continuation is longest (capped at k) wins; ties go to the
occurrence whose match with the context extends furthest back (up to MAX_MATCH tokens: more
evidence), then to the latest. Picking simply the latest occurrence (or the first, as transformers'
``prompt_lookup_num_tokens`` does) is weaker: once the output copies a passage, the latest occurrence
of the tail lies inside the copy itself, a few tokens back, and its continuation runs into the end of
the context after a token or two; the first occurrence may sit in an unrelated earlier sentence.

Evidence. Backing off to an n-gram shorter than the longest one tried drafts only if that n-gram is
unambiguous: every earlier occurrence was followed by the same token. A lone " the" matched after a
miss is no evidence, and on a CPU, where a (k+1)-token verify pass costs about 1.5-2.5x a one-token
pass, a wrong guess is paid for.

Exactness. Drafts depend only on the committed context, never on the target, and q_draft is one-hot
on each proposal, so the verify rule stays exact. Cost: the pure function scans the context
(O(L * n) per call); the drafter keeps an index of n-gram positions, updated only for newly
committed tokens, so a round costs a dict lookup plus O(occurrences * MAX_MATCH).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specviz.core.protocols import Draft

MAX_MATCH = 32  # how far back a match is extended to break ties between equally long continuations


def _pick(ctx: Sequence[int], starts: Sequence[int], n: int, k: int, backed_off: bool) -> tuple[int, ...]:
    """The continuation of the best occurrence among starts (earlier occurrences of the tail n-gram)."""
    n_ctx = len(ctx)
    if not starts:
        return ()
    if backed_off and len({ctx[s + n] for s in starts}) > 1:
        return ()  # a short n-gram followed by different tokens: no evidence
    best_key, best = (-1, -1, -1), -1
    tail_end = n_ctx - n - 1  # last token before the tail
    for s in starts:
        follow = min(k, n_ctx - s - n)
        back = 0
        while back < MAX_MATCH - n and s - 1 - back >= 0 and ctx[s - 1 - back] == ctx[tail_end - back]:
            back += 1
        key = (follow, back, s)
        if key > best_key:
            best_key, best = key, s
    return tuple(ctx[best + n : best + n + k])


def lookup_continuation(context: Sequence[int], k: int, ngram_max: int = 3, ngram_min: int = 1) -> tuple[int, ...]:
    """Up to k tokens that followed an earlier occurrence of the context's last n tokens (see the module
    docstring for which occurrence); () on a miss. Pure and deterministic: a linear scan of the context."""
    n_ctx = len(context)
    if k <= 0:
        return ()
    ctx = list(context)
    top = min(ngram_max, n_ctx - 1)
    for n in range(top, ngram_min - 1, -1):
        if n <= 0:
            break
        tail = ctx[-n:]
        starts = [s for s in range(n_ctx - n) if ctx[s : s + n] == tail]  # the tail itself (at n_ctx - n) excluded
        if starts:
            return _pick(ctx, starts, n, k, backed_off=n < top)
    return ()


class NGramIndex:
    """Start positions of every n-gram (orders n_min..n_max) of one growing token stream."""

    def __init__(self, n_min: int, n_max: int) -> None:
        self.n_min = n_min
        self.n_max = n_max
        self.starts: dict[tuple[int, ...], list[int]] = {}
        self.tokens: list[int] = []

    def extend(self, ids: Sequence[int]) -> None:
        toks = self.tokens
        for tok in ids:
            toks.append(int(tok))
            end = len(toks)
            for n in range(self.n_min, min(self.n_max, end) + 1):
                self.starts.setdefault(tuple(toks[end - n :]), []).append(end - n)

    def catch_up(self, context: Sequence[int]) -> None:
        """Index the context's tokens not indexed yet; start over if context is not a continuation."""
        seen = self.tokens
        if len(context) < len(seen) or (seen and context[len(seen) - 1] != seen[-1]):
            self.starts.clear()
            self.tokens = []
            self.extend(context)
        elif len(context) > len(seen):
            self.extend(context[len(seen) :])

    def continuation(self, k: int) -> tuple[int, ...]:
        """lookup_continuation(self.tokens, k, n_max, n_min), from the index instead of a scan."""
        ctx = self.tokens
        n_ctx = len(ctx)
        if k <= 0:
            return ()
        top = min(self.n_max, n_ctx - 1)
        for n in range(top, self.n_min - 1, -1):
            starts = self.starts.get(tuple(ctx[n_ctx - n :]), [])
            if starts and starts[-1] == n_ctx - n:
                starts = starts[:-1]  # the tail itself
            if starts:
                return _pick(ctx, starts, n, k, backed_off=n < top)
        return ()


class PromptLookupDrafter:
    """Proposes without a distribution: q_draft is one-hot on each proposal, which keeps the rule exact."""

    name = "prompt lookup"
    has_q = False
    can_branch = False  # one continuation per match: chains only
    reads_hidden = False
    reads_features = False
    reads_logits = False
    keeps_state = False
    device = torch.device("cpu")

    def __init__(self, ngram_max: int = 3, ngram_min: int = 1) -> None:
        if not (1 <= ngram_min <= ngram_max):
            raise ValueError(f"need 1 <= ngram_min <= ngram_max; got ngram_min={ngram_min}, ngram_max={ngram_max}.")
        self.ngram_max = ngram_max
        self.ngram_min = ngram_min
        self.index = NGramIndex(ngram_min, ngram_max)

    def prepare(self, prompt_ids: Sequence[int]) -> None:
        self.index = NGramIndex(self.ngram_min, self.ngram_max)
        self.index.extend(prompt_ids)

    def propose(self, context: Sequence[int], k: int, generator: torch.Generator) -> Draft:
        self.index.catch_up(context)
        return Draft(self.index.continuation(k))

    def rollback(self, committed: Sequence[int]) -> None:
        pass  # the index holds only committed tokens; the next propose() catches up
