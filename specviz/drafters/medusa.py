"""Medusa heads as drafter: the target guesses its own future from the hidden state it already computed.

Model. K heads sit on the target's last hidden state (after the final norm, what the LM head reads). From the
hidden state h of the row whose LM-head output chose the newest committed token, head i (1-based) scores the
token i places after the newest: ``head_logits(h, newest)`` is (K, V), one row per head (specviz.models.medusa
builds it: the heads' residual blocks, then the target's own LM head once over the K rows). Heads with a token
input also read the newest committed token itself (the context's last token); Medusa's own heads ignore it. The round hands h over through
observe() after the prefill and after every verify pass (specviz.core.decoding), so drafting never runs the target.
q_draft at drafted position i is head i's warped distribution ``warp(head_logits(h)[i])``; it does not depend on the
tokens drafted before position i, which the rule allows (a proposal may ignore any part of its context).

Exactness. Chains *draw* token i from q_i with the run's generator and report that q_i, so Leviathan's rule is
exact at every temperature; at temperature 0 the warp is one-hot and the draw is each head's top-1, which the rule
keeps exactly when it is the target's argmax: plain greedy output. Trees take head i's top-``width`` tokens as
level i (Medusa's shape: the spine runs through each head's top-1, siblings are its next guesses), which are
deterministic and distinct, so the tree rule uses a one-hot q per child (the "distinct" scheme of
specviz.core.tree); the heads' warped softmax rows are reported for charts only. Neither choice looks at the
target's verdict, so the output is distributed as the target's. A prompt of one token has no hidden state yet:
that round drafts nothing (an empty Draft).

A draft vocabulary (``vocab_ids``, specviz.models.vocab): the heads' states go through the target's LM head cut to
the V' tokens the target says most often, so head i scores V' tokens; the draw (or the tree's top tokens) happens
over V' and q_draft is reported over the full vocabulary, zero outside V': still what the token was drawn from, so
the rule stays exact, and a token outside V' is only ever emitted by the target itself.

Cost. One call of the K residual blocks and one LM-head product over K rows (no target pass), on the target's
device; at temperature 0 no draw (the argmax is the draw: specviz.core.sampling.draw_draft); the drafted ids come to
the host once per round. Depth is capped at K tokens (levels for a tree).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from specviz.core.protocols import Draft
from specviz.core.sampling import SamplingConfig, draw_draft, to_full_vocab, warp
from specviz.core.tree import TreeDraft
from specviz.drafters.tree import level_sizes, spine_tree

HeadLogits = Callable[[torch.Tensor, int], torch.Tensor]  # (H,) hidden, newest token id -> (K, V or V') logits, one row per head


@dataclass(frozen=True)
class HeadsSource:
    """What a Medusa drafter drafts with, resolved by specviz.runs from loaded heads and the target."""

    head_logits: HeadLogits  # reads the shared heads and the target's LM head, never writes them
    num_heads: int  # K
    device: torch.device  # the target's
    vocab_ids: torch.Tensor | None = None  # (V',) the draft vocabulary head_logits scores, on the device; None: all


class MedusaDrafter:
    """Drafts with K Medusa heads over the target's hidden state; q_draft is each head's warped distribution."""

    has_q = True
    can_branch = True
    reads_hidden = True
    reads_features = False
    reads_logits = False
    keeps_state = False

    def __init__(self, head_logits: HeadLogits, num_heads: int, sampling: SamplingConfig, device: torch.device | str = "cpu",
                 name: str = "Medusa heads", vocab_ids: torch.Tensor | None = None, vocab_size: int = 0) -> None:  # fmt: skip
        if num_heads < 1:
            raise ValueError(f"Medusa drafting needs at least one head; got {num_heads}.")
        if vocab_ids is not None and vocab_size < int(vocab_ids.max()) + 1:
            raise ValueError("A draft vocabulary needs the full vocabulary's size, above its largest id.")
        self.head_logits = head_logits
        self.num_heads = num_heads
        self.sampling = sampling
        self.device = torch.device(device)  # the target's: the heads run and sample there
        self.name = name
        self.vocab_ids = None if vocab_ids is None else vocab_ids.to(self.device)  # (V',) draft index -> token id
        self.vocab_size = vocab_size
        self.hidden: torch.Tensor | None = None  # (H,) the newest committed token's row, from observe()

    def prepare(self, prompt_ids: Sequence[int]) -> None:
        self.hidden = None  # the decoder observes the prefill's row right after this

    def observe(self, hidden: torch.Tensor | None) -> None:
        self.hidden = hidden

    def heads_q(self, depth: int, newest: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The first ``depth`` heads' (depth, V') logits and warped q_draft rows over the draft vocabulary (the full
        one unless reduced) at the observed hidden state and the newest committed token, or None."""
        if self.hidden is None or depth <= 0:
            return None
        logits = self.head_logits(self.hidden, newest)[:depth].float()  # (depth, V')
        return logits, warp(logits, self.sampling)

    def token_ids(self, index: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary indices -> token ids (the same tensor when the vocabulary is full)."""
        return index if self.vocab_ids is None else self.vocab_ids[index]

    def full_q(self, q_draft: torch.Tensor) -> torch.Tensor:
        """(..., V') -> (..., V): zero outside the draft vocabulary."""
        return to_full_vocab(q_draft, self.vocab_ids, self.vocab_size)

    def propose(self, context: Sequence[int], k: int, generator: torch.Generator) -> Draft:
        """Token i drawn from head i's q_i for i = 1..min(k, K) (the argmax at temperature 0); nothing before the
        first hidden state."""
        heads = self.heads_q(min(k, self.num_heads), context[-1]) if context else None
        if heads is None:
            return Draft(())
        _, q_draft = heads  # (m, V')
        ids = self.token_ids(draw_draft(q_draft, self.sampling, generator))  # (m,) on the device
        return Draft(tuple(ids.tolist()), self.full_q(q_draft), ids)  # one transfer for the ids

    def propose_tree(self, context: Sequence[int], k: int, width: int, generator: torch.Generator) -> TreeDraft:
        """Level i = head i's top-``width`` tokens (specviz.drafters.tree's spine shape), within k nodes and K levels."""
        sizes = level_sizes(max(k, 0), width)[: self.num_heads]
        heads = self.heads_q(len(sizes), context[-1]) if context else None
        if heads is None:
            return TreeDraft((), ())
        logits, q_draft = heads  # (depth, V') each
        top = self.token_ids(torch.topk(logits, min(max(sizes), logits.shape[-1]), dim=-1).indices).tolist()  # one transfer
        q_full = self.full_q(q_draft)
        return spine_tree([(top[i][:size], q_full[i]) for i, size in enumerate(sizes)])

    def rollback(self, committed: Sequence[int]) -> None:
        pass  # nothing of a proposal is kept; the next hidden state comes from the next verify pass
