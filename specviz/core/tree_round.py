"""The tree-shaped round (specviz.core.rounds.Round; the decoder picks it once, when the run starts, with
tree_round()): draft a tree, verify every node in one target pass with the tree rule (specviz.core.tree), compact the
target's cache to the accepted path. Committing and the record are the chain's (specviz.core.records).

Unlike a chain round, the rule walks the tree on the host: it reads one probability pair per tried child
(at most k small transfers a round), which is nothing on a CPU and a few syncs on a GPU; at temperature 0 it reads
every node's at once (nothing is subtracted from p there), and takes the argmax for the next token.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import cast

import torch

from specviz.core.protocols import CachedLM, Drafter, TreeCachedLM, TreeDrafter
from specviz.core.rounds import Drafted, Verified
from specviz.core.sampling import SamplingConfig, warp
from specviz.core.tree import decide_tree, tree_rule_q

logger = logging.getLogger(__name__)


class TreeRound:
    """Token trees of at most k nodes, ``width`` children per node."""

    def __init__(self, target: TreeCachedLM, drafter: TreeDrafter, width: int, sampling: SamplingConfig) -> None:
        self.target, self.drafter, self.width, self.sampling = target, drafter, width, sampling
        self.device = torch.device(target.device)

    def draft(self, context: Sequence[int], k: int, generator: torch.Generator) -> Drafted:
        """1. A tree of at most k nodes; q_draft (shown, not used by the rule) on the device."""
        if k <= 0:
            return Drafted((), torch.zeros(0, dtype=torch.long, device=self.device), None)
        tree = self.drafter.propose_tree(context, k, self.width, generator).cut(k)
        q = tree.q_draft.to(self.device, torch.float32) if tree.q_draft is not None and tree.token_ids else None
        return Drafted(tree.token_ids, torch.tensor(tree.token_ids, dtype=torch.long, device=self.device), q, tree.parents, tree.scheme)

    def verify(self, pending: Sequence[int], drafted: Drafted, generator: torch.Generator, carried: torch.Tensor | None = None) -> Verified:
        """2. The committed tokens not yet cached (a chain) and the tree under the newest one, in one pass; then
        the tree rule, which uses a one-hot q per distinct child. carried (1, V): the newest token's row from the
        prefill, which cached that token (pending is then empty): the pass feeds the tree alone, its root's children
        following the cache, and a round that drafted nothing runs no pass."""
        if (carried is None) == (not pending):
            raise ValueError("a tree round needs the newest committed token pending or its row carried, not both")
        if carried is None:
            a = len(pending)
            parents = [i - 1 for i in range(a)] + [a - 1 if j < 0 else a + j for j in drafted.parents]
            logits = self.target.extend_tree([*pending, *drafted.ids], parents)[a - 1 :]  # (m+1, V)
        else:  # row 0 is the carried row and node j's row 1 + j, as when the pass fed the newest token
            a = 1  # the rows below index logits (the decoder lines the pass's hidden rows up after the carried one's)
            logits = torch.cat([carried, self.target.extend_tree(drafted.ids, drafted.parents)]) if drafted.ids else carried
        p_target = warp(logits, self.sampling)  # (m+1, V)
        q_rule = tree_rule_q(drafted.as_tree(), p_target.shape[-1], p_target.device)  # (m, V)
        decision = decide_tree(p_target, drafted.ids, drafted.parents, q_rule, generator, greedy=self.sampling.greedy)
        device = p_target.device
        return Verified(
            logits=logits,
            p_target=p_target,
            q_shown=drafted.q_draft if drafted.q_draft is not None else q_rule,
            path=decision.path,
            next_token=decision.next_token,
            next_fate=decision.next_fate,
            node_fates=decision.fates,
            accept_prob=torch.tensor(decision.accept_prob, dtype=torch.float64, device=device),
            uniforms=torch.tensor(decision.uniforms, dtype=torch.float64, device=device),
            next_dist=decision.next_dist,
            next_row=a + decision.path[-1] if decision.path else a - 1,  # node j is pass row a + j; the root's row is a - 1
            rows=(a - 1, *(a + i for i in decision.path)),
            p_current=decision.p_current,
            pending=len(pending),
        )

    def keep(self, verified: Verified) -> None:
        """4. The target drops every node off the accepted path (the pending chain before the tree stays); a carried
        round that drafted nothing fed nothing."""
        if verified.pending or verified.node_fates:
            self.target.keep_path(list(range(verified.pending)) + [verified.pending + i for i in verified.path])


def tree_round(target: CachedLM, drafter: Drafter, width: int, sampling: SamplingConfig) -> TreeRound | None:
    """The run's tree round, when it can have one: the drafter proposes trees and the target verifies them in one
    pass (both declare it, so both are the tree protocols). When not, None (the run drafts chains) and the log says why."""
    if not drafter.can_branch:
        logger.warning("The %s drafter proposes chains only; token trees fall back to chains.", drafter.name)
        return None
    if not target.can_verify_tree:
        logger.warning("This target cannot verify a token tree in one pass; token trees fall back to chains.")
        return None
    tree_target = cast(TreeCachedLM, target)  # declared by can_verify_tree
    if tree_target.tree_problem:
        logger.warning("%s", tree_target.tree_problem)
        return None
    return TreeRound(tree_target, cast(TreeDrafter, drafter), width, sampling)  # the drafter declared can_branch
