"""Token-tree drafts for the n-gram and model drafters: a spine with siblings.

Shape. Level by level, the drafter's W best candidates at the spine's tip become children (W = tree width),
and the spine continues through the best one; the next level's candidates come from the draft's
distribution after it. Levels are added until the node budget k is spent, so a tree of k nodes reaches
depth ceil(k / W) (a chain when W = 1). The spine is the drafter's chain; the siblings are its second and
later guesses at every position, which is what lets one target pass survive a miss on the first guess.

Exactness. Children are deterministic (the top-W of the draft model's logits, or the W most frequent
n-gram followers) and distinct, so the tree rule uses a one-hot q per child ("distinct" scheme of
specviz.core.tree); the drafter's real q_draft at the parent's context is reported for charts only.
That choice does not depend on the target, so the output is distributed as the target's at every
temperature, and at temperature 0 it is plain greedy.

Cost. The model drafter runs one forward per level (depth ceil(k / W) instead of k for a chain); the
n-gram drafter does at most n_max dictionary lookups per level.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from specviz.core.sampling import warp
from specviz.core.tree import TreeDraft
from specviz.drafters.ngram import smoothed

if TYPE_CHECKING:
    from specviz.drafters.model import ModelDrafter
    from specviz.drafters.ngram import NGramDrafter


def spine_tree(levels: list[tuple[list[int], torch.Tensor | None]]) -> TreeDraft:
    """Per level (candidate ids best first, q_draft row at the spine's tip) -> the TreeDraft: the level's
    candidates are children of the previous level's first node (the root for the first level)."""
    ids: list[int] = []
    parents: list[int] = []
    rows: list[torch.Tensor] = []
    parent = -1
    for candidates, q_row in levels:
        first = len(ids)
        for tok in candidates:
            ids.append(int(tok))
            parents.append(parent)
            if q_row is not None:
                rows.append(q_row)
        parent = first
    q = torch.stack(rows) if rows and len(rows) == len(ids) else None
    return TreeDraft(tuple(ids), tuple(parents), q, "distinct")


def level_sizes(k: int, width: int) -> list[int]:
    """How many nodes each level gets: width each, the last level whatever is left of the budget k."""
    return [min(width, k - at) for at in range(0, k, width)]


def model_tree(drafter: ModelDrafter, context: Sequence[int], k: int, width: int) -> TreeDraft:
    """Top-W children of the draft model's logits per level; one draft forward per level."""
    if k <= 0:
        return TreeDraft((), ())
    lm = drafter.lm
    cached = len(lm.tokens)
    if cached >= len(context):
        lm.crop(len(context) - 1)
        cached = len(context) - 1
    logits = lm.extend(context[cached:])[-1]  # (V,)
    levels: list[tuple[list[int], torch.Tensor | None]] = []
    sizes = level_sizes(k, width)
    for depth, size in enumerate(sizes):
        q = warp(logits, drafter.sampling)  # (V,) the draft's q at the spine's tip, for charts
        top = torch.topk(logits.float(), min(size, logits.shape[-1])).indices  # (size,) on the device
        levels.append((top.tolist(), q))
        if depth < len(sizes) - 1:
            logits = lm.extend(top[:1])[-1]  # the spine goes on through the best child
    return spine_tree(levels)


def ngram_tree(drafter: NGramDrafter, context: Sequence[int], k: int, width: int) -> TreeDraft:
    """The W most frequent followers per level; the spine stops where the drafter's chain would stop
    (no order matches, or the count-aware confidence below the threshold)."""
    if k <= 0:
        return TreeDraft((), ())
    drafter.rollback(context)  # count what was committed since the last round
    suffix = list(context[max(0, len(context) - drafter.n_max) :])
    levels: list[tuple[list[int], torch.Tensor | None]] = []
    for size in level_sizes(k, width):
        counter = drafter.followers(suffix)  # the chain's stopping rule (NGramDrafter.followers)
        if counter is None:
            break
        tokens, probs = smoothed(counter, drafter.smoothing)
        q = torch.zeros(drafter.vocab_size)
        q[tokens] = torch.tensor(probs)
        levels.append((tokens[:size], q))
        suffix.append(tokens[0])
        del suffix[: max(0, len(suffix) - drafter.n_max)]
    return spine_tree(levels)
