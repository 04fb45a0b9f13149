"""EAGLE as drafter (Li et al., 2024, arXiv 2401.15077; the dynamic tree of EAGLE-2, arXiv 2406.16858): draft at the
level of the target's features, one small layer continuing them.

Model. f_t is the target's last hidden state at position t (after the final norm: what its LM head reads; f_t chose
token t+1). An EAGLE head (specviz.models.eagle) is one decoder layer of the target's shape, with its own weights,
over fc([e(x_{t+1}); f_t]) (e the target's frozen input embedding): at position t it predicts f_{t+1}, and the
target's LM head (cut to the draft vocabulary when one is set) reads that prediction to score token t+2. Its
attention has its own cache, one entry per position. After every round the decoder hands the drafter the rows that
chose the round's committed tokens (observe_features), which it feeds through the layer: the cache then holds the
target's true features for every committed position. Drafting continues from the last output: score it, draw (or
take the argmax at temperature 0) token d_1, feed (predicted feature, d_1) at the next position, score, draw d_2,
and so on: the predicted feature is fed back k times. The drafted positions are cropped from the cache afterwards.

Exactness. A chain *draws* d_i from q_i (the warped draft distribution at step i, over the full vocabulary: zero
outside a draft vocabulary) with the run's generator and reports that q_i, so Leviathan's rule is exact at every
temperature; at temperature 0 the argmax is the draw and the output is plain greedy. A tree (EAGLE-2's dynamic tree)
is built from the draft's own log-probabilities only: at each depth the ``width`` most confident nodes (confidence =
the product of draft probabilities along the path) are expanded with their ``width`` best children, expansion stops
when no node of the level can still make the top k, and the k most confident nodes are kept (a child is never more
confident than its parent, so they form a tree). Children are deterministic and distinct, so the tree rule uses a
one-hot q per child (specviz.core.tree's "distinct" scheme): exact at every temperature, greedy at 0.

Cost. Per drafted token one layer call over one position and one LM-head product over the draft vocabulary; the
committed rows of every round since the last draft are fed in one call when it next drafts (timed as drafting), so
plain rounds (k: auto's k = 0) cost the drafter nothing. A chain never
reads the device inside its loop: the ids come to the host once. A tree reads its few top-W scores once per depth.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from specviz.core.protocols import Draft
from specviz.core.sampling import SamplingConfig, draw_draft, to_full_vocab, warp
from specviz.core.tree import TreeDraft

FEED_ROWS = 256  # pending positions fed at once even before a proposal (bounds what plain rounds hold)


class FeatureCache(Protocol):
    """An EAGLE layer's keys and values for one run, by position."""

    @property
    def length(self) -> int: ...

    def crop(self, length: int) -> None: ...


# (cache, features (T, H), token ids (T,) long, positions (T,) long, mask (T, cached + T) bool or None: causal) ->
# (T, H) the predicted next features; the T entries are appended to the cache
FeatureForward = Callable[[FeatureCache, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]


@dataclass(frozen=True)
class FeatureHead:
    """What an EAGLE drafter drafts with, resolved by specviz.runs from a loaded head and the target (all shared,
    only read): a fresh per-run cache, the layer, and the target's LM head (over the draft vocabulary, if any)."""

    new_cache: Callable[[], FeatureCache]
    forward: FeatureForward
    logits: Callable[[torch.Tensor], torch.Tensor]  # (T, H) -> (T, V') float32
    device: torch.device
    vocab_ids: torch.Tensor | None = None  # (V',) draft index -> token id; None: the full vocabulary


class EagleDrafter:
    """Drafts with an EAGLE head over the target's features: chains sampled from q, or EAGLE-2's dynamic trees."""

    has_q = True
    can_branch = True
    reads_hidden = False
    reads_features = True
    reads_logits = False
    keeps_state = False

    def __init__(self, head: FeatureHead, sampling: SamplingConfig, vocab_size: int, name: str = "EAGLE") -> None:
        self.head, self.sampling, self.vocab_size, self.name = head, sampling, vocab_size, name
        self.device = torch.device(head.device)
        self.vocab_ids = None if head.vocab_ids is None else head.vocab_ids.to(self.device)
        self._ids_host = None if self.vocab_ids is None else self.vocab_ids.tolist()
        self.cache: FeatureCache = head.new_cache()
        self.length = 0  # committed positions whose true features are in the cache
        self.last: torch.Tensor | None = None  # (1, H) the layer's output at the last of them: the next feature, predicted
        self.pending: list[tuple[int, torch.Tensor, tuple[int, ...]]] = []  # observed, not fed through the layer yet

    def prepare(self, prompt_ids: Sequence[int]) -> None:
        self.cache, self.length, self.last = self.head.new_cache(), 0, None
        self.pending = []

    def observe_features(self, start: int, features: torch.Tensor, tokens: Sequence[int]) -> None:
        """Keep the pairs (f_t, x_{t+1}) for t = start..: they go through the layer at the next proposal that drafts,
        together (what the cache held from start on is dropped then), so a run of plain rounds (k: auto's k = 0) costs
        the drafter nothing, and catching up is one layer call over the rounds' positions."""
        known = self.pending[-1][0] + self.pending[-1][1].shape[0] if self.pending else self.length
        if start > known:
            raise ValueError(f"The {self.name} drafter is missing the target's features for positions {known}..{start - 1}.")
        if features.shape[0] == 0:
            return
        self.pending.append((start, features, tuple(tokens)))
        if sum(f.shape[0] for _, f, _ in self.pending) >= FEED_ROWS:
            self.feed()

    def feed(self) -> None:
        """Feed the pending pairs through the layer, in order: contiguous ones in one call."""
        blocks: list[tuple[int, list[torch.Tensor], list[int]]] = []
        for start, features, tokens in self.pending:
            if blocks and start == blocks[-1][0] + len(blocks[-1][2]):
                blocks[-1][1].append(features)
                blocks[-1][2].extend(tokens)
            else:
                blocks.append((start, [features], list(tokens)))
        self.pending = []
        for start, features, tokens in blocks:
            self._feed(start, torch.cat(features), tokens)

    def _feed(self, start: int, features: torch.Tensor, tokens: Sequence[int]) -> None:
        self.cache.crop(start)
        ids = torch.tensor(list(tokens), dtype=torch.long, device=self.device)
        positions = torch.arange(start, start + features.shape[0], device=self.device)
        out = self.head.forward(self.cache, features, ids, positions, None)  # (r, H)
        self.length, self.last = start + features.shape[0], out[-1:]

    def token_ids(self, index: torch.Tensor) -> torch.Tensor:
        return index if self.vocab_ids is None else self.vocab_ids[index]

    def full_q(self, q_draft: torch.Tensor) -> torch.Tensor:
        return to_full_vocab(q_draft, self.vocab_ids, self.vocab_size)

    def propose(self, context: Sequence[int], k: int, generator: torch.Generator) -> Draft:
        """d_1..d_k, each drawn from the draft's q at the predicted feature, fed back; nothing before the first feature."""
        if k <= 0:
            return Draft(())
        self.feed()
        if self.last is None:
            return Draft(())
        self.cache.crop(self.length)
        feature, picks, qs = self.last, [], []
        for i in range(k):
            q = warp(self.head.logits(feature), self.sampling)  # (1, V')
            tok = self.token_ids(draw_draft(q, self.sampling, generator))  # (1,) on the device
            picks.append(tok)
            qs.append(q)
            if i < k - 1:
                position = torch.full((1,), self.length + i, dtype=torch.long, device=self.device)
                feature = self.head.forward(self.cache, feature, tok, position, None)  # (1, H)
        ids = torch.cat(picks)  # (k,)
        return Draft(tuple(ids.tolist()), self.full_q(torch.cat(qs)), ids)  # one transfer for the ids

    def propose_tree(self, context: Sequence[int], k: int, width: int, generator: torch.Generator) -> TreeDraft:
        """EAGLE-2's dynamic tree of at most k nodes: expand the ``width`` most confident nodes of each depth with their
        ``width`` best children, keep the k most confident nodes."""
        if k <= 0:
            return TreeDraft((), ())
        self.feed()
        if self.last is None:
            return TreeDraft((), ())
        self.cache.crop(self.length)
        tree = _Tree(k)
        logits = self.head.logits(self.last)  # (1, V')
        tree.q_rows[-1] = warp(logits, self.sampling)[0]
        values, index = _best(logits, width)
        tree.add_children(-1, values[0], index[0])
        level = list(range(len(tree.tokens)))
        outputs: dict[int, torch.Tensor] = {-1: self.last}  # node -> its predicted next feature
        slots: dict[int, int] = {}  # node -> its entry in the cache
        for _ in range(k - 1):
            expand = tree.worth_expanding(level, width)
            if not expand:
                break
            start = self.cache.length
            features = torch.cat([outputs[tree.parents[n]] for n in expand])  # (E, H)
            tokens = self.token_ids(torch.tensor([tree.tokens[n] for n in expand], dtype=torch.long, device=self.device))
            positions = torch.tensor([self.length + tree.depths[n] for n in expand], dtype=torch.long, device=self.device)
            mask = torch.zeros(len(expand), start + len(expand), dtype=torch.bool, device=self.device)
            mask[:, : self.length] = True  # every node sees the committed positions,
            for j, n in enumerate(expand):  # its ancestors' entries and its own
                mask[j, [slots[a] for a in tree.ancestors(n)] + [start + j]] = True
            out = self.head.forward(self.cache, features, tokens, positions, mask)  # (E, H)
            logits = self.head.logits(out)  # (E, V')
            q = warp(logits, self.sampling)
            values, index = _best(logits, width)
            level = []
            for j, n in enumerate(expand):
                slots[n], outputs[n], tree.q_rows[n] = start + j, out[j : j + 1], q[j]
                level += tree.add_children(n, values[j], index[j])
        return tree.draft(self._ids_host, self.full_q)

    def rollback(self, committed: Sequence[int]) -> None:
        self.cache.crop(self.length)  # the drafted positions' entries go; the committed ones stay


def _best(logits: torch.Tensor, width: int) -> tuple[list, list]:
    """(n, V') logits -> per row the ``width`` best draft-vocabulary indices and their log-probabilities (one transfer)."""
    values, index = torch.topk(torch.log_softmax(logits.float(), dim=-1), min(width, logits.shape[-1]), dim=-1)
    return values.tolist(), index.tolist()


class _Tree:
    """The candidates of a dynamic tree on the host: tokens (draft-vocabulary indices), parents, depths, scores
    (summed draft log-probabilities), and the draft's warped q at each expanded node (its children's q_draft)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.tokens: list[int] = []
        self.parents: list[int] = []
        self.depths: list[int] = []
        self.scores: list[float] = []
        self.q_rows: dict[int, torch.Tensor] = {}

    def add_children(self, parent: int, values: list[float], index: list[int]) -> list[int]:
        """Children of parent (-1: the root) from one row of _best(); their scores add the parent's."""
        base = self.scores[parent] if parent >= 0 else 0.0
        depth = self.depths[parent] + 1 if parent >= 0 else 0
        made = []
        for v, i in zip(values, index):
            made.append(len(self.tokens))
            self.tokens.append(int(i))
            self.parents.append(parent)
            self.depths.append(depth)
            self.scores.append(base + float(v))
        return made

    def ancestors(self, node: int) -> list[int]:
        out = []
        node = self.parents[node]
        while node >= 0:
            out.append(node)
            node = self.parents[node]
        return out

    def ranked(self) -> list[int]:
        """Every candidate, most confident first (ties: the earlier made, so a parent before its children)."""
        return sorted(range(len(self.tokens)), key=lambda n: (-self.scores[n], n))

    def worth_expanding(self, level: list[int], width: int) -> list[int]:
        """The level's ``width`` most confident nodes that can still have a child in the top ``budget`` (a child is
        never more confident than its parent, so a node at or below the budget-th score cannot)."""
        ranked = self.ranked()
        floor = self.scores[ranked[self.budget - 1]] if len(ranked) >= self.budget else float("-inf")
        best = sorted(level, key=lambda n: (-self.scores[n], n))[:width]
        return [n for n in best if self.scores[n] > floor]

    def draft(self, ids_host: list[int] | None, full_q: Callable[[torch.Tensor], torch.Tensor]) -> TreeDraft:
        """The top ``budget`` candidates as a TreeDraft: parents before children, siblings most confident first."""
        keep: list[int] = []
        kept = set()
        for n in self.ranked():
            if len(keep) == self.budget:
                break
            if self.parents[n] < 0 or self.parents[n] in kept:
                keep.append(n)
                kept.add(n)
        by_depth: dict[int, list[int]] = {}
        for n in keep:
            by_depth.setdefault(self.depths[n], []).append(n)
        order: list[int] = []
        place = {-1: -1}
        for depth in sorted(by_depth):
            for n in sorted(by_depth[depth], key=lambda n: (place[self.parents[n]], -self.scores[n], n)):
                place[n] = len(order)
                order.append(n)
        tokens = [self.tokens[n] if ids_host is None else ids_host[self.tokens[n]] for n in order]
        parents = [place[self.parents[n]] if self.parents[n] >= 0 else -1 for n in order]
        q = full_q(torch.stack([self.q_rows[self.parents[n]] for n in order])) if order else None
        return TreeDraft(tuple(tokens), tuple(parents), q, "distinct")
