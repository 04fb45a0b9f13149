"""The tree-shaped phases of a round (specviz.core.decoding runs them when the run drafts token trees): draft a
tree, verify every node in one target pass with the tree rule (specviz.core.tree), compact the target's cache
to the accepted path. Committing and the record are the chain's (specviz.core.rounds).

Unlike a chain round, the rule walks the tree on the host: it reads one probability pair per tried child
(at most k small transfers a round), which is nothing on a CPU and a few syncs on a GPU.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specviz.core.protocols import TreeCachedLM, TreeDrafter
from specviz.core.rounds import Drafted, Verified
from specviz.core.sampling import SamplingConfig, warp
from specviz.core.tree import decide_tree, tree_rule_q


def draft_tree(drafter: TreeDrafter, context: Sequence[int], k: int, width: int, generator: torch.Generator, device: torch.device) -> Drafted:
    """1. A tree of at most k nodes, width children per node; q_draft (shown, not used by the rule) on the device."""
    if k <= 0:
        return Drafted((), torch.zeros(0, dtype=torch.long, device=device), None)
    tree = drafter.propose_tree(context, k, width, generator).cut(k)
    q = tree.q_draft.to(device, torch.float32) if tree.q_draft is not None and tree.token_ids else None
    return Drafted(tree.token_ids, torch.tensor(tree.token_ids, dtype=torch.long, device=device), q, tree.parents, tree.scheme)


def verify_tree(target: TreeCachedLM, pending: Sequence[int], drafted: Drafted, sampling: SamplingConfig, generator: torch.Generator) -> Verified:
    """2. The committed tokens not yet cached (a chain) and the tree under the newest one, in one pass; then
    the tree rule, which uses a one-hot q per distinct child."""
    a = len(pending)
    parents = [i - 1 for i in range(a)] + [a - 1 if j < 0 else a + j for j in drafted.parents]
    logits = target.extend_tree(list(pending) + list(drafted.ids), parents)[a - 1 :]  # (m+1, V)
    p_target = warp(logits, sampling)  # (m+1, V)
    q_rule = tree_rule_q(drafted.as_tree(), p_target.shape[-1], p_target.device)  # (m, V)
    decision = decide_tree(p_target, drafted.ids, drafted.parents, q_rule, generator)
    device = p_target.device
    return Verified(
        logits, p_target, drafted.q_draft if drafted.q_draft is not None else q_rule, decision.path, decision.next_token,
        decision.next_fate, decision.fates, torch.tensor(decision.accept_prob, dtype=torch.float64, device=device),
        torch.tensor(decision.uniforms, dtype=torch.float64, device=device), decision.next_dist, decision.p_current, a,
        a + decision.path[-1] if decision.path else a - 1,  # node j is pass row a + j; the root's row is a - 1
        (a - 1, *(a + i for i in decision.path)),
    )  # fmt: skip


def keep_path(target: TreeCachedLM, pending: int, path: Sequence[int]) -> None:
    """4. The target drops every node off the accepted path (the pending chain before the tree stays)."""
    target.keep_path(list(range(pending)) + [pending + i for i in path])
