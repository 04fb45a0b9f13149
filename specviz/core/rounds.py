"""The round's two shapes behind one interface, chosen once when a run starts: a ``ChainRound`` or a ``TreeRound``
(specviz.core.tree_round). Both hand the same data from phase to phase.

A chain is the tree whose node i hangs under node i-1, so both shapes share ``Drafted`` (the proposal on the
device), ``Verified`` (the target pass and the rule's decision) and the commit with its EOS / length cut; the record
is built from them by one builder (specviz.core.records.build_record). A round object holds the run's target, drafter
and sampling, and knows three phases: draft, verify, and what the target keeps of the pass (a chain keeps every row up
to the newest committed token, so the decoder's crop by length is all; a tree first drops the rejected branches).
The chain's helpers (draft_chain, chain_rule) also serve the batched decoder (specviz.core.batch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from specviz.core.protocols import CachedLM, Drafter
from specviz.core.sampling import SamplingConfig, greedy_warp, warp
from specviz.core.tree import ChildScheme, TreeDraft
from specviz.core.verify import Decision, DraftFate, EmitFate, decide, draft_fates, next_fate, one_hot_q


@dataclass(frozen=True)
class Drafted:
    """A round's proposal, ready for the target: ids on the host and on the device, and q_draft when given."""

    ids: tuple[int, ...]  # (m,) what the drafter proposed, cut to k
    on_device: torch.Tensor  # (m,) the same ids on the target's device
    q_draft: torch.Tensor | None  # (m, V) float32 on the device; None: one-hot on each id
    parents: tuple[int, ...] = ()  # a tree: per node its parent (-1 = the root); () for a chain
    scheme: ChildScheme = "distinct"  # a tree: how siblings were drawn (decides the rule's q)

    @property
    def is_tree(self) -> bool:
        return bool(self.parents)

    def as_tree(self) -> TreeDraft:
        return TreeDraft(self.ids, self.node_parents, self.q_draft, self.scheme)

    @property
    def node_parents(self) -> tuple[int, ...]:
        """Per node its parent; a chain's node i hangs under node i-1."""
        return self.parents if self.parents else tuple(range(-1, len(self.ids) - 1))


@dataclass(frozen=True, kw_only=True)
class Verified:
    """The target pass and the rule's decision. Tensors stay on the device; path and next_token are on the host."""

    logits: torch.Tensor  # (m+1, V) raw target logits at the root and after each node
    p_target: torch.Tensor  # (m+1, V) after the warp
    q_shown: torch.Tensor  # (m, V) q at each node for the record: the drafter's, one-hot where it has none
    path: tuple[int, ...]  # accepted nodes, root's child first (a chain: 0..n-1)
    next_token: int  # resampled after the last rejection, the bonus, or the plain target sample
    next_fate: EmitFate
    node_fates: tuple[DraftFate, ...]  # per node, as the rule left it
    accept_prob: torch.Tensor  # (m,) min(1, p/q) when tried
    uniforms: torch.Tensor  # (m,) one draw per node
    next_dist: torch.Tensor  # (V,) what next_token was drawn from
    next_row: int  # the pass's row whose LM-head output chose next_token (its hidden state is what Medusa heads read)
    rows: tuple[int, ...]  # the pass's rows whose LM-head outputs chose each accepted token, then next_token
    p_current: tuple[float, ...] = ()  # a tree: per node, p at its token when tried
    pending: int = 0  # a tree: committed tokens fed in the same pass before its nodes


class Round(Protocol):
    """One shape of round (chain or tree) for one run: its target, drafter and sampling are fixed."""

    width: int  # children per node asked of the drafter; 1 for a chain

    def draft(self, context: Sequence[int], k: int, generator: torch.Generator) -> Drafted:
        """1. Up to k drafted tokens after context, on the target's device."""
        ...

    def verify(self, pending: Sequence[int], drafted: Drafted, generator: torch.Generator, carried: torch.Tensor | None = None) -> Verified:
        """2. One target pass over the committed tokens not yet cached plus every draft, then the rule. carried (1, V):
        the newest committed token's logits when the cache holds that token already (the prefill computed its row, as
        transformers' generate takes its first token from the prefill; pending is then empty): only the drafts are
        fed, and a round that drafted nothing runs no pass. Every run's first round takes one (SpeculativeDecoder._start),
        and so does the first round after a restore back to the prefill."""
        ...

    def keep(self, verified: Verified) -> None:
        """4. What the target's cache keeps of the pass before the decoder crops it to the committed length."""
        ...


def cut_emitted(emitted: list[int], fates: list[EmitFate], eos_token_ids: Sequence[int], room: int) -> tuple[list[int], list[EmitFate], bool]:
    """Cut the round's tokens after the first EOS and at ``room`` tokens; also whether an EOS ended the run."""
    cut = next((i + 1 for i, tok in enumerate(emitted) if tok in eos_token_ids), None)
    cut = min(cut or len(emitted), room)
    return emitted[:cut], fates[:cut], emitted[cut - 1] in eos_token_ids


def draft_chain(drafter: Drafter, context: Sequence[int], k: int, generator: torch.Generator, device: torch.device) -> Drafted:
    """Up to k drafted tokens and the drafter's q_draft when it has one, moved to the target's device."""
    ids, q_draft, on_device = (), None, None
    if k > 0:
        proposal = drafter.propose(context, k, generator)
        ids = tuple(int(t) for t in proposal.token_ids[:k])
        if proposal.q_draft is not None and ids:
            q_draft = proposal.q_draft[: len(ids)].to(device, torch.float32)
        if proposal.on_device is not None and ids:
            on_device = proposal.on_device[: len(ids)].to(device, torch.long)  # no second trip through the host
    if on_device is None:
        on_device = torch.tensor(ids, dtype=torch.long, device=device)
    return Drafted(ids, on_device, q_draft)


def chain_rule(logits: torch.Tensor, drafted: Drafted, sampling: SamplingConfig, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, Decision]:
    """(m+1, V) logits at the newest committed token and after each draft -> (p_target (m+1, V), the q_draft the rule
    used (m, V): the drafter's, one-hot where it has none, the Decision), all on the device: nothing is read back."""
    p_target, argmax = greedy_warp(logits) if sampling.greedy else (warp(logits, sampling), None)  # (m+1, V), (m+1,)
    if drafted.q_draft is not None:
        q_draft = drafted.q_draft  # (m, V)
    else:  # one-hot at each draft; a plain round's (0, V) is a view, no allocation
        q_draft = one_hot_q(drafted.on_device, p_target.shape[-1]) if drafted.ids else p_target[:0]
    return p_target, q_draft, decide(p_target, q_draft, drafted.on_device, generator, greedy=sampling.greedy, argmax=argmax)


class ChainRound:
    """A chain of up to k drafts, verified by the rule on the device; the host learns (n, next token) in one transfer."""

    width = 1

    def __init__(self, target: CachedLM, drafter: Drafter, sampling: SamplingConfig) -> None:
        self.target, self.drafter, self.sampling = target, drafter, sampling
        self.device = torch.device(target.device)

    def draft(self, context: Sequence[int], k: int, generator: torch.Generator) -> Drafted:
        return draft_chain(self.drafter, context, k, generator, self.device)

    def verify(self, pending: Sequence[int], drafted: Drafted, generator: torch.Generator, carried: torch.Tensor | None = None) -> Verified:
        m, a = len(drafted.ids), len(pending)
        if carried is None:
            logits = self.target.extend([*pending, *drafted.ids])[-(m + 1) :]  # (m+1, V)
        else:  # the newest token's row came with the prefill; row i + 1 still follows draft i
            logits = torch.cat([carried, self.target.extend(drafted.ids)]) if m else carried
            a = 1  # the rows below index logits (the decoder lines the pass's hidden rows up after the carried one's)
        p_target, q_draft, decision = chain_rule(logits, drafted, self.sampling, generator)
        n, next_token = decision.outcome().tolist()  # the rule's one host transfer
        return Verified(
            logits=logits,
            p_target=p_target,
            q_shown=q_draft,
            path=tuple(range(n)),
            next_token=next_token,
            next_fate=next_fate(m, n),
            node_fates=draft_fates(m, n),
            accept_prob=decision.accept_prob,
            uniforms=decision.uniforms,
            next_dist=decision.next_dist,
            next_row=a - 1 + n,  # row a-1 is the newest committed token's; row a-1+i follows draft i
            rows=tuple(range(a - 1, a + n)),
        )

    def keep(self, verified: Verified) -> None:
        """Nothing to drop: the accepted drafts are the cache's leading rows."""
