"""A draft language model: samples k tokens one at a time from its own warped distribution q_draft."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specviz.core.decoding import CachedLM, common_prefix_len
from specviz.core.sampling import SamplingConfig, sample, warp
from specviz.drafters.base import Draft


class ModelDrafter:
    """Drafts with any CachedLM that shares the target's tokenizer (a small model, or the target's early layers)."""

    has_distribution = True

    def __init__(self, lm: CachedLM, sampling: SamplingConfig, name: str = "draft model") -> None:
        self.lm = lm
        self.sampling = sampling
        self.name = name

    def prepare(self, prompt_ids: Sequence[int]) -> None:
        if len(prompt_ids) > 1:
            self.lm.extend(prompt_ids[:-1])

    def propose(self, context: Sequence[int], k: int, generator: torch.Generator) -> Draft:
        if k <= 0:
            return Draft(())
        # Catch up on every committed token not yet cached. After an all-accepted round this is
        # two tokens: the last draft (sampled but never fed) and the target's bonus token.
        cached = len(self.lm.tokens)
        if cached >= len(context):
            self.lm.crop(len(context) - 1)
            cached = len(context) - 1
        logits = self.lm.extend(context[cached:])[-1]
        ids: list[int] = []
        qs: list[torch.Tensor] = []
        for i in range(k):
            q = warp(logits, self.sampling).cpu()  # (V,)
            ids.append(sample(q, generator))
            qs.append(q)
            if i < k - 1:
                logits = self.lm.extend(ids[-1:])[-1]
        return Draft(tuple(ids), torch.stack(qs))

    def rollback(self, committed: Sequence[int]) -> None:
        self.lm.crop(common_prefix_len(self.lm.tokens, committed))
