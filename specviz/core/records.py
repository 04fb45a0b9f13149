"""Frozen per-round records; the statistics derived from them are in specviz.core.metrics."""

from __future__ import annotations

from dataclasses import dataclass

from specviz.core.verify import DraftFate, EmitFate


@dataclass(frozen=True)
class TokenDist:
    """The top entries of the distributions at one verified position (for charts)."""

    token_ids: tuple[int, ...]
    p_target: tuple[float, ...]
    q_draft: tuple[float, ...] | None  # None at the bonus position, where nothing was drafted
    residual: tuple[float, ...] | None  # normalised max(0, p - q); None where q is None


@dataclass(frozen=True)
class StepRecord:
    """One round: what was drafted, what the rule decided, what was emitted, and what it cost."""

    index: int  # round number, from 0
    context_length: int  # committed tokens (prompt included) before this round
    num_draft_tokens: int  # k asked of the drafter this round
    drafted: tuple[int, ...]  # what the drafter proposed (may be fewer than k)
    p_target: tuple[float, ...]  # p_target(x_i) per drafted token
    q_draft: tuple[float, ...]  # q_draft(x_i); 1.0 for drafters that propose without a distribution
    accept_prob: tuple[float, ...]  # min(1, p/q)
    uniforms: tuple[float, ...]  # the uniform draw u_i; x_i is kept when u_i < accept_prob
    draft_fates: tuple[DraftFate, ...]  # drafts after an EOS / length cut are "discarded", even if the rule kept them
    emitted: tuple[int, ...]  # tokens committed this round (after any EOS / length cut)
    emitted_fates: tuple[EmitFate, ...]
    emitted_margin: tuple[float, ...]  # per emitted token: top-1 minus top-2 raw target logit of the row that chose it
    next_p_target: float  # p_target of the resampled / bonus / plain token
    next_residual: float | None  # its probability under the residual, when resampled
    overlap: tuple[float, ...]  # sum_v min(p, q) per verified drafted position up to the cut; empty without a q
    dists: tuple[TokenDist, ...]  # top-N at the position of each emitted token (rejection or bonus position last)
    has_q: bool  # the drafter supplied a real distribution
    draft_ms: float  # drafting, up to the device synchronising
    verify_ms: float  # the target pass and the accept/resample rule
    round_ms: float  # drafting, the verify pass and the rule, commit and rollback; not building this record
    record_ms: float  # building this record (top-N rows, overlaps, margins), timed after round_ms stopped
    finished: bool  # EOS or max_new_tokens reached in this round
    # Token trees (specviz.core.tree); a chain round leaves them empty, so older recordings still load. For a
    # tree round, drafted / p_target / q_draft / accept_prob / uniforms / draft_fates are per node, with
    # p_target and q_draft at the node's parent context (q_draft: the drafter's real q, shown, not used by
    # the rule, which takes a one-hot q for distinct children).
    tree_width: int = 1  # children per node asked of the drafter; 1 = a chain
    tree_parents: tuple[int, ...] = ()  # per node: its parent's index, -1 for the root (the newest committed token)
    accepted_path: tuple[int, ...] = ()  # node indices accepted, root's child first (after any EOS / length cut)
    tree_p_current: tuple[float, ...] = ()  # per node: p at its token when tried (the residual after rejected
    #                                         siblings); 0 for a node never tried

    @property
    def is_tree(self) -> bool:
        return bool(self.tree_parents)

    @property
    def num_accepted(self) -> int:
        return sum(f == "accepted" for f in self.draft_fates)

    @property
    def num_drafted(self) -> int:
        return len(self.drafted)
