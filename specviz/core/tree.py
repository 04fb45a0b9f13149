"""Token trees: several drafted continuations, verified in one target pass, decided by an exact rule.

Notation follows SpecInfer (Miao et al. 2024, "multi-step speculative sampling") with the letters of
Leviathan et al.: p_target is the target's warped distribution at a node's context, q_draft the draft's.

A tree draft is a list of nodes in topological order: node i has a token x_i, a parent (-1 for the root,
i.e. the newest committed token, else an earlier node's index) and q_draft's row at its parent's context.
The target scores every node in one pass (tree_mask(): each node sees the committed context and its own
ancestors, at position cached + depth), so p_target has one row at the root and one after every node.

The rule (decide_tree), walking down from the root. At a node with target row p and children c_1..c_b:
try the children in order; accept c_j with probability min(1, p(x_j) / q_j(x_j)); after a rejection set
p <- normalise(max(0, p - q_j)) before the next child. If a child is accepted, descend into it and start
again with p_target's row after it; if every child is rejected, draw the next token from the last p (the
residual); at a node without children (a leaf, or the root of an empty tree) draw a bonus token from p.

Exactness. Each try is one step of Leviathan's rule against the current p: the token it emits (the child
if accepted, else a draw from the residual) is distributed as p, whenever x_j is drawn from q_j
independently of everything the rule has seen. By induction over the children, "accept c_1, or else
(accept c_2 against the residual, or else ...)" emits a token distributed as the original p; by induction
over depth, every emitted token is distributed as the target's next-token distribution given the tokens
before it. Two ways of drawing children satisfy the condition; each drafter uses exactly one of them:

* deterministic, distinct children (what specviz's drafters do: the top-W tokens of q_draft, or the W most
  frequent n-gram followers). The child x_j is "drawn" from the one-hot q_j = e_{x_j}, so the rule uses a
  one-hot q: accept with probability p(x_j), and after a rejection p <- p with x_j zeroed, renormalised.
  Since the children are distinct, a rejected child can never be tried again at that node. This is exact
  whatever the drafter's real q is (recorded for charts only), and at temperature 0 (one-hot p) it is
  "follow the child equal to the target's argmax, else emit the argmax": plain greedy, token for token.
* i.i.d. children x_j ~ q (SpecInfer's rule with the real q, same q for each sibling): tree_rule_q() returns
  the drafter's q itself. Provided for completeness and tested on toys; no built-in drafter uses it.

The two known-bad variants (tested, and they fail): keeping p unchanged after a rejected sibling (tokens of
rejected siblings come out too often), and drawing from p instead of the residual when all are rejected.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from specviz.core.sampling import draw
from specviz.core.verify import DraftFate, EmitFate, one_hot_q, residual

MAX_TREE_WIDTH = 4
ChildScheme = Literal["distinct", "iid"]


@dataclass(frozen=True)
class TreeDraft:
    """A drafted token tree: nodes in topological order (parents[i] < i; -1 is the root)."""

    token_ids: tuple[int, ...]
    parents: tuple[int, ...]
    q_draft: torch.Tensor | None = None  # (m, V) q_draft at each node's parent context; None: none known
    scheme: ChildScheme = "distinct"  # how siblings were drawn; decides the q the rule uses

    def __post_init__(self) -> None:
        if len(self.parents) != len(self.token_ids):
            raise ValueError(f"a tree needs one parent per node; got {len(self.token_ids)} nodes, {len(self.parents)} parents.")
        if any(not (-1 <= j < i) for i, j in enumerate(self.parents)):
            raise ValueError(f"tree parents must be -1 or an earlier node's index; got {self.parents}.")
        if self.scheme == "distinct":
            for parent in set(self.parents):
                kids = [self.token_ids[i] for i, j in enumerate(self.parents) if j == parent]
                if len(set(kids)) != len(kids):
                    raise ValueError(f"deterministic siblings must be distinct tokens; node {parent} has {kids}.")
        elif self.q_draft is None:
            raise ValueError("i.i.d. children need the q_draft they were sampled from.")

    def cut(self, k: int) -> TreeDraft:
        """The first k nodes: still a tree, since parents come before children."""
        q = None if self.q_draft is None else self.q_draft[:k]
        return TreeDraft(self.token_ids[:k], self.parents[:k], q, self.scheme)


def tree_depths(parents: Sequence[int]) -> list[int]:
    """Depth of each node: 0 for a child of the root."""
    depth: list[int] = []
    for j in parents:
        depth.append(0 if j < 0 else depth[j] + 1)
    return depth


def ancestors(parents: Sequence[int], node: int) -> list[int]:
    """The path from the root's child down to node (node included)."""
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


def tree_mask(parents: Sequence[int], cached: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """-> (1, 1, T, cached + T) bool attention mask, True where a node may attend (the cached context, its
    ancestors and itself), and (T,) long depths: the position of node i is cached + depth[i]."""
    t = len(parents)
    sees = torch.zeros(t, t, dtype=torch.bool)
    for i, j in enumerate(parents):
        sees[i, i] = True
        if j >= 0:
            sees[i] |= sees[j]  # parents come first, so their row is complete
    mask = torch.cat([torch.ones(t, cached, dtype=torch.bool), sees], dim=1).view(1, 1, t, cached + t)
    return mask.to(device), torch.tensor(tree_depths(parents), dtype=torch.long, device=device)


def tree_rule_q(tree: TreeDraft, vocab_size: int, device: torch.device | str) -> torch.Tensor:
    """(m, V) the q the rule must use: one-hot on each node for distinct deterministic children, the
    drafter's own q for i.i.d. children."""
    if tree.scheme == "iid":
        assert tree.q_draft is not None  # checked in TreeDraft
        return tree.q_draft.to(device, torch.float32)
    return one_hot_q(torch.tensor(tree.token_ids, dtype=torch.long, device=device), vocab_size)


@dataclass(frozen=True)
class TreeDecision:
    """What the tree rule decided for one round, on the host (but next_dist, kept on the device for charts)."""

    path: tuple[int, ...]  # accepted nodes, root's child first
    next_token: int  # resampled after the last rejection, or the bonus at an accepted leaf
    next_fate: EmitFate
    fates: tuple[DraftFate, ...]  # per node: accepted, rejected (tried and refused) or discarded (never tried)
    uniforms: tuple[float, ...]  # (m,) one draw per node, used only when it was tried
    accept_prob: tuple[float, ...]  # (m,) min(1, p(x)/q(x)) against the p current when it was tried; 0 if not
    p_current: tuple[float, ...]  # (m,) that current p at x (the residual after earlier siblings); 0 if not tried
    next_dist: torch.Tensor  # (V,) what next_token was drawn from


def decide_tree(
    p_target: torch.Tensor,
    token_ids: Sequence[int],
    parents: Sequence[int],
    q_rule: torch.Tensor,
    generator: torch.Generator,
    *,
    greedy: bool = False,
    _drop_rejected: bool = True,
    _resample_residual: bool = True,
) -> TreeDecision:
    """p_target (m+1, V): row 0 at the root, row i+1 after node i; q_rule (m, V) from tree_rule_q().
    greedy: p_target is the temperature-0 warp, one-hot rows (as verify.decide's greedy). A one-hot p's residual
    against any q is p itself, bit for bit (a rejected child has p(x) = 0, or q puts all its mass on p's argmax), so
    the residual is not computed, and the next token is p's argmax, which is what a draw from a one-hot p returns:
    no race over the vocabulary, no random number but the uniforms.
    The private flags exist only so tests can build the known-bad variants; never pass them."""
    m = len(token_ids)
    if p_target.shape[0] != m + 1 or q_rule.shape[0] != m or len(parents) != m:
        raise ValueError(f"need p_target of m+1 rows, q of m rows and m parents for a tree of m={m} nodes")
    drawn = torch.rand(m, generator=generator, device=p_target.device) if m else p_target.new_zeros(0)  # (m,)
    read = _read_greedy(p_target, token_ids, parents, q_rule, drawn) if greedy and m else None
    uniforms = read[0] if read is not None else drawn.tolist()
    children: dict[int, list[int]] = {}
    for i, j in enumerate(parents):
        children.setdefault(int(j), []).append(i)
    fates: list[DraftFate] = ["discarded"] * m
    accept = [0.0] * m
    p_now = [0.0] * m
    path: list[int] = []
    node = -1
    while True:
        p = p_target[node + 1]  # (V,) the target at this node's context
        kids = children.get(node, [])
        chosen = None
        for c in kids:
            x = int(token_ids[c])
            q = q_rule[c]
            p_x, q_x = (read[1][c], read[2][c]) if read is not None else (p[x].item(), q[x].item())
            p_now[c] = p_x
            accept[c] = min(1.0, p_x / q_x) if q_x > 0 else 0.0
            if uniforms[c] < accept[c]:
                fates[c], chosen = "accepted", c
                break
            fates[c] = "rejected"
            if _drop_rejected and not greedy:
                p = residual(p, q)  # p itself if nothing is left
        if chosen is None:
            if kids and not _resample_residual:
                p = p_target[node + 1]
            fate: EmitFate = "resampled" if kids else ("bonus" if path else "target")
            token = int((p.argmax() if greedy else draw(p, generator)).item())
            return TreeDecision(
                tuple(path), token, fate, tuple(fates), tuple(uniforms), tuple(accept), tuple(p_now), p
            )
        path.append(chosen)
        node = chosen


def _read_greedy(p_target: torch.Tensor, token_ids: Sequence[int], parents: Sequence[int], q_rule: torch.Tensor,
                 uniforms: torch.Tensor) -> tuple[list[float], list[float], list[float]]:  # fmt: skip
    """At temperature 0 nothing is subtracted from p, so every node is tried against its parent's row as it is: the
    uniforms, p(x) and q(x) of every node in one host read (the same values as reading each when it is tried)."""
    m, device = len(token_ids), p_target.device
    ids = torch.tensor(token_ids, dtype=torch.long, device=device)
    rows = torch.tensor([j + 1 for j in parents], dtype=torch.long, device=device)
    flat = torch.cat([uniforms, p_target[rows, ids], q_rule[torch.arange(m, device=device), ids]]).tolist()
    return flat[:m], flat[m : 2 * m], flat[2 * m :]
