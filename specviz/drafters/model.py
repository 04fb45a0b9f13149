"""A draft language model: samples k tokens one at a time from its own warped distribution q_draft."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specviz.core.protocols import CachedLM, Draft, common_prefix_len, extend_last
from specviz.core.sampling import SamplingConfig, draw_draft, warp
from specviz.core.tree import TreeDraft
from specviz.drafters.tree import level_sizes, spine_tree


class ModelDrafter:
    """Drafts with any CachedLM that shares the target's tokenizer (a small model, or the target's early layers).
    Warp and sampling stay on the model's device: each drafted token is fed back as a device tensor, and the
    k ids come to the host once, at the end of the round's drafting."""

    has_q = True
    can_branch = True
    reads_hidden = False
    reads_features = False
    reads_logits = False
    keeps_state = False

    def __init__(self, lm: CachedLM, sampling: SamplingConfig, name: str = "draft model") -> None:
        self.lm = lm
        self.sampling = sampling
        self.name = name

    @property
    def device(self) -> torch.device:
        """Where this drafter samples: the decoder hands it a generator on this device."""
        return self.lm.device

    def prepare(self, prompt_ids: Sequence[int]) -> None:
        """Nothing to read yet: the first proposal that drafts catches up on the whole context, so a run whose rounds
        draft nothing (k: auto's k = 0) never pays the draft's prefill."""
        self.lm.crop(common_prefix_len(self.lm.tokens, prompt_ids[:-1]))

    def propose(self, context: Sequence[int], k: int, generator: torch.Generator) -> Draft:
        if k <= 0:
            return Draft(())
        # Catch up on every committed token not yet cached. After an all-accepted round this is
        # two tokens: the last draft (sampled but never fed) and the target's bonus token.
        cached = len(self.lm.tokens)
        if cached >= len(context):
            self.lm.crop(len(context) - 1)
            cached = len(context) - 1
        logits = extend_last(self.lm, context[cached:])  # (V,)
        ids: list[torch.Tensor] = []
        qs: list[torch.Tensor] = []
        for i in range(k):
            q = warp(logits, self.sampling)  # (V,) on the device
            x = draw_draft(q, self.sampling, generator).view(1)  # (1,) on the device; the argmax at temperature 0
            ids.append(x)
            qs.append(q)
            if i < k - 1:
                logits = self.lm.extend(x)[-1]
        drafted = torch.cat(ids)  # (k,)
        return Draft(tuple(drafted.tolist()), torch.stack(qs), drafted)  # (k, V) q_draft; one transfer for the ids

    def propose_tree(self, context: Sequence[int], k: int, width: int, generator: torch.Generator) -> TreeDraft:
        """A token tree of at most k nodes (see specviz.drafters.tree): the top-W children of the draft model's
        logits per level, one draft forward per level."""
        if k <= 0:
            return TreeDraft((), ())
        lm = self.lm
        cached = len(lm.tokens)
        if cached >= len(context):
            lm.crop(len(context) - 1)
            cached = len(context) - 1
        logits = lm.extend(context[cached:])[-1]  # (V,)
        levels: list[tuple[list[int], torch.Tensor | None]] = []
        sizes = level_sizes(k, width)
        for depth, size in enumerate(sizes):
            q = warp(logits, self.sampling)  # (V,) the draft's q at the spine's tip, for charts
            top = torch.topk(logits.float(), min(size, logits.shape[-1])).indices  # (size,) on the device
            levels.append((top.tolist(), q))
            if depth < len(sizes) - 1:
                logits = lm.extend(top[:1])[-1]  # the spine goes on through the best child
        return spine_tree(levels)

    def rollback(self, committed: Sequence[int]) -> None:
        self.lm.crop(common_prefix_len(self.lm.tokens, committed))
