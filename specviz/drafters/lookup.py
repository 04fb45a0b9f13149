"""Prompt lookup (n-gram) drafting: copy what followed the last time the context's tail appeared."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specviz.drafters.base import Draft


def lookup_continuation(context: Sequence[int], k: int, ngram_max: int = 3, ngram_min: int = 1) -> tuple[int, ...]:
    """Longest n-gram first (ngram_max down to ngram_min): find the latest earlier occurrence of the
    context's last n tokens and return up to k tokens that followed it; () on a miss."""
    n_ctx = len(context)
    if k <= 0:
        return ()
    ctx = list(context)
    for n in range(min(ngram_max, n_ctx - 1), ngram_min - 1, -1):
        if n <= 0:
            break
        tail = ctx[-n:]
        # search right to left so the most recent occurrence wins; the tail itself is excluded
        for start in range(n_ctx - n - 1, -1, -1):
            if ctx[start : start + n] == tail:
                follow = ctx[start + n : start + n + k]
                if follow:
                    return tuple(follow)
    return ()


class PromptLookupDrafter:
    """Proposes without a distribution: q_draft is one-hot on each proposal, which keeps the rule exact."""

    name = "prompt lookup"
    has_distribution = False

    def __init__(self, ngram_max: int = 3, ngram_min: int = 1) -> None:
        if not (1 <= ngram_min <= ngram_max):
            raise ValueError(f"need 1 <= ngram_min <= ngram_max; got ngram_min={ngram_min}, ngram_max={ngram_max}.")
        self.ngram_max = ngram_max
        self.ngram_min = ngram_min

    def prepare(self, prompt_ids: Sequence[int]) -> None:
        pass

    def propose(self, context: Sequence[int], k: int, generator: torch.Generator) -> Draft:
        return Draft(lookup_continuation(context, k, self.ngram_max, self.ngram_min))

    def rollback(self, committed: Sequence[int]) -> None:
        pass
