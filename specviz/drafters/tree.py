"""Token-tree drafts for the n-gram and model drafters (their propose_tree()): a spine with siblings.

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

import torch

from specviz.core.tree import TreeDraft


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
