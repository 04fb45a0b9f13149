"""Frozen per-round records and the one record builder for chains and trees; the statistics derived from them are
in specviz.core.metrics.

``build_record`` runs after the round's clock stopped. It gathers the record's numbers on the device, each a named
part (``RecordParts``), and moves them to the host in one transfer; the record is then built field by field. A plain
round at temperature 0 (plain decoding's every round) needs only its margin from the device: the host knows the rest.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

import torch

from specviz.core.auto_k import KChoice
from specviz.core.rounds import Drafted, Verified
from specviz.core.tree import tree_depths
from specviz.core.verify import DraftFate, EmitFate, residual


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
    k_choice: KChoice | None = None  # why auto chose this round's k (specviz.core.auto_k); None for a fixed or adaptive k

    @property
    def is_tree(self) -> bool:
        return bool(self.tree_parents)

    @property
    def node_parents(self) -> tuple[int, ...]:
        """Per drafted node its parent (-1: the newest committed token): a tree's tree_parents; a chain is the tree
        whose node i hangs under node i-1. What reads a round as a tree reads this, so it needs no chain branch."""
        return self.tree_parents or tuple(range(-1, len(self.drafted) - 1))

    @property
    def node_path(self) -> tuple[int, ...]:
        """The drafted nodes the rule accepted, root's child first (after any EOS / length cut): a tree's
        accepted_path; a chain's leading run of accepted drafts."""
        return self.accepted_path if self.tree_parents else tuple(range(self.num_accepted))

    @property
    def num_accepted(self) -> int:
        return sum(f == "accepted" for f in self.draft_fates)

    @property
    def num_drafted(self) -> int:
        return len(self.drafted)


@dataclass(frozen=True)
class RoundContext:
    """The facts of the run a record needs besides the round itself."""

    index: int  # the round's number
    context_length: int  # committed tokens before the round
    num_draft_tokens: int  # k asked
    tree_width: int  # the width asked, when the run drafts trees; 1 for chains
    top_n: int
    finished: bool
    k_choice: KChoice | None = None  # auto's reason for k, when auto chose it
    greedy: bool = False  # temperature 0: p_target's rows are one-hot on the token each emitted (see _candidates)


@dataclass(frozen=True)
class RoundTimes:
    """perf_counter() seconds at the round's phase boundaries, each read after the device synchronised."""

    start: float
    drafted: float
    verified: float
    end: float  # committed and rolled back


X = TypeVar("X")


class RecordParts(NamedTuple, Generic[X]):
    """The record's numbers by name: tensors on the device, then the same parts as host lists after one transfer.
    m drafted nodes, e emitted tokens, N candidates per distribution, with_q rows that had a drafted child."""

    p_target: X  # (m,) p at each node's parent context, at the node's token
    q_draft: X  # (m,) q there
    accept_prob: X  # (m,) min(1, p/q) when tried
    uniforms: X  # (m,)
    next_p_target: X  # (1,) p at the next token's row, at the next token
    next_dist: X  # (1,) what the next token was drawn from, at it (the residual when resampled)
    overlap: X  # (with_q,) sum_v min(p, q) per row with a child; (0,) for a tree or without a q
    emitted_margin: X  # (e,) top-1 minus top-2 raw logit of each emitted token's row
    candidates: X  # (e * 3N,) per emitted token's row: p's, q's and the residual's top-N ids
    cand_p: X  # (e * 3N,) p at those ids
    cand_q: X  # (e * 3N,) q at those ids (0 at a bonus row)
    cand_residual: X  # (e * 3N,) the residual at those ids (0 at a bonus row)


def build_record(ctx: RoundContext, drafted: Drafted, verified: Verified, emitted: list[int], fates: list[EmitFate], times: RoundTimes) -> StepRecord:
    """5. The round's record, built after its clock stopped: per drafted node p, q, min(1, p/q) and u; per
    emitted token its row's top-N and top-2 logit margin. Nodes past an EOS / length cut are "discarded", so
    the stats count only what was kept."""
    start = time.perf_counter()
    e, path = len(emitted), verified.path
    depth = tree_depths(drafted.node_parents)
    draft_fates = tuple(f if (e > len(path) or depth[i] < e) else "discarded" for i, f in enumerate(verified.node_fates))
    rows, kids = _rows(drafted, verified, e)
    with_q, top = len(kids), min(ctx.top_n, verified.p_target.shape[-1])
    if ctx.greedy and not drafted.ids:  # a plain round at temperature 0: only its margin is on the device
        host = _plain_greedy_host(verified, emitted[0], top)
    else:
        host = _to_host(_parts(drafted, verified, rows, kids, top, emitted if ctx.greedy else None))
    resampled = verified.next_fate == "resampled" and e > len(path)  # the next token's q row is the rule's residual
    width = 3 * top
    dists = tuple(
        _dist(*(part[i * width : (i + 1) * width] for part in (host.candidates, host.cand_p, host.cand_q, host.cand_residual)), i < with_q, top)
        for i in range(e)
    )
    return StepRecord(
        index=ctx.index,
        context_length=ctx.context_length,
        num_draft_tokens=ctx.num_draft_tokens,
        drafted=drafted.ids,
        p_target=tuple(host.p_target),
        q_draft=tuple(host.q_draft),
        accept_prob=tuple(host.accept_prob),
        uniforms=tuple(host.uniforms),
        draft_fates=draft_fates,
        emitted=tuple(emitted),
        emitted_fates=tuple(fates),
        emitted_margin=tuple(host.emitted_margin),
        next_p_target=host.next_p_target[0],
        next_residual=host.next_dist[0] if resampled else None,
        overlap=tuple(host.overlap),
        dists=dists,
        has_q=drafted.q_draft is not None,
        draft_ms=(times.drafted - times.start) * 1000.0,
        verify_ms=(times.verified - times.drafted) * 1000.0,
        round_ms=(times.end - times.start) * 1000.0,
        record_ms=(time.perf_counter() - start) * 1000.0,
        finished=ctx.finished,  # EOS, or the max_new_tokens limit, reached this round
        tree_width=ctx.tree_width,
        tree_parents=drafted.parents,
        accepted_path=path[: min(len(path), e)] if drafted.is_tree else (),
        tree_p_current=verified.p_current,
        k_choice=ctx.k_choice,
    )


def _rows(drafted: Drafted, verified: Verified, e: int) -> tuple[list[int], list[int]]:
    """The p row that chose each emitted token, and for the first of them that had drafted children, the first
    child (whose q the row shows): a chain's rows 0..e-1 with children 0..; a tree's rows along the path."""
    rows = ([0] + [i + 1 for i in verified.path])[:e]
    first_kid: dict[int, int] = {}
    for node, parent in enumerate(drafted.node_parents):
        first_kid.setdefault(parent + 1, node)
    with_q = min(e, len(verified.path) + (verified.next_fate == "resampled"))
    return rows, [first_kid[r] for r in rows[:with_q]]


def _parts(drafted: Drafted, verified: Verified, rows: list[int], kids: list[int], top: int, argmax: list[int] | None) -> RecordParts[torch.Tensor]:
    """The record's numbers, gathered on the device: nothing is read back here. argmax: at temperature 0, the emitted
    tokens, each its row's argmax (of p, one-hot there, and of the raw logits p was warped from)."""
    p, q = verified.p_target, verified.q_shown
    m, e, with_q, token = len(drafted.ids), len(rows), len(kids), verified.next_token
    p_rows, q_rows, logit_rows, p_parent = _select(drafted, verified, rows, kids)  # (e, V), (with_q, V), (e, V), (m, V)
    # The residual at each row with a child; the resampled token's row shows what the rule drew it from (the residual
    # after every rejected sibling), kept apart rather than copied under the others.
    drawn = verified.next_dist.view(1, -1) if verified.next_fate == "resampled" and e > len(verified.path) else None
    kept = with_q - (drawn is not None)
    res = residual(p_rows[:kept], q_rows[:kept]) if kept else p_rows[:0]  # (with_q or with_q - 1, V)
    known = [(argmax[i], drafted.ids[kid]) for i, kid in enumerate(kids)] if argmax is not None and drafted.q_draft is None else None
    cand = _candidates(p_rows, q_rows, res, drawn, top, known, argmax[with_q:] if argmax is not None else None)  # (e, 3N)
    ids = drafted.on_device.view(-1, 1)
    last_row = verified.path[-1] + 1 if verified.path else 0  # the row the next token was drawn at
    overlaps = drafted.q_draft is not None and not drafted.is_tree
    return RecordParts(
        p_target=p_parent.gather(1, ids).view(-1) if m else p.new_zeros(0),
        q_draft=q.gather(1, ids).view(-1) if m else p.new_zeros(0),
        accept_prob=verified.accept_prob,
        uniforms=verified.uniforms,
        next_p_target=p[last_row, token].view(1),
        next_dist=verified.next_dist[token].view(1),
        overlap=torch.minimum(p_rows[:with_q], q_rows[:with_q]).sum(dim=-1) if overlaps else p.new_zeros(0),
        emitted_margin=_margins(logit_rows, argmax),
        candidates=cand.flatten(),
        cand_p=p_rows.gather(1, cand).flatten(),
        cand_q=_gather_rows([q_rows], cand).flatten(),
        cand_residual=_gather_rows([res] if drawn is None else [res, drawn], cand).flatten(),
    )


def _plain_greedy_host(verified: Verified, token: int, top: int) -> RecordParts[list[float]]:
    """The host parts of a plain round's record at temperature 0 (nothing drafted, one token emitted), as _to_host(_parts(...))
    gives them, without the device: p is one-hot on the emitted token, which the rule took from p itself, so p there
    and the draw's distribution there are 1; its row has no q and its one candidate with mass is the token (see
    _candidates: the row's N candidates all name it, at q and residual 0). Only the margin reads the device."""
    width = 3 * top
    return RecordParts(
        p_target=[], q_draft=[], accept_prob=[], uniforms=[], next_p_target=[1.0], next_dist=[1.0], overlap=[],
        emitted_margin=_margins(verified.logits[:1], [token]).tolist(),
        candidates=[float(token)] * width, cand_p=[1.0] * width, cand_q=[0.0] * width, cand_residual=[0.0] * width,
    )  # fmt: skip


def _candidates(p_rows: torch.Tensor, q_rows: torch.Tensor, res: torch.Tensor, drawn: torch.Tensor | None, top: int,
                known: list[tuple[int, int]] | None, bonus: list[int] | None) -> torch.Tensor:  # fmt: skip
    """(e, 3N) ids: per row p's, q's and the residual's top-N (rows with a q first; drawn, when given, is the last of
    the residual's rows). The bonus row has no q: its candidates are p's top-N only (_dist reads no others), so its q
    and residual columns repeat them instead of ranking rows of zeros.

    known (temperature 0, a drafter without a q: every q row one-hot on the row's first child x): per row with a q, the
    token it emitted, a, and x. Then p is one-hot on a (the emitted token is p's argmax), q on x, and the residual on a
    (p itself when x = a, the rule's draw from a one-hot p otherwise), so of the three top-N only a and x have any mass:
    every other candidate _dist drops is a zero tied with others, whichever ones a ranking picked. The rows need no
    ranking, each one a pass over the vocabulary.

    bonus (temperature 0): the token emitted at each row after those with a q, where p is one-hot: it is the row's
    only candidate with mass (a plain round's one row). Its top-N would add zeros tied with all the others, which
    carry nothing and were whichever ones a ranking picked; they are not ranked."""
    with_q, width = q_rows.shape[0], 3 * top
    head = [[a] + [x] * (width - 1) for a, x in known] if known is not None else _ranked(p_rows[:with_q], q_rows, res, drawn, top)
    tail = [[a] * width for a in bonus] if bonus is not None else torch.topk(p_rows[with_q:], top, dim=-1).indices.repeat(1, 3)
    if isinstance(head, list) and isinstance(tail, list):  # one tensor, one copy to the device
        return torch.tensor(head + tail, dtype=torch.long).view(-1, width).to(p_rows.device)
    return torch.cat([_ids(head, width, p_rows.device), _ids(tail, width, p_rows.device)])


def _ranked(p_rows: torch.Tensor, q_rows: torch.Tensor, res: torch.Tensor, drawn: torch.Tensor | None, top: int) -> torch.Tensor:
    """(with_q, 3N): each row's p, q and residual top-N ids; drawn, when given, is the last residual row."""
    ranked = [torch.topk(t, top, dim=-1).indices for t in (p_rows, q_rows, res)]  # (with_q, N) each
    if drawn is not None:  # the resampled row: what the rule drew from
        ranked[2] = torch.cat([ranked[2], torch.topk(drawn, top, dim=-1).indices])
    return torch.cat(ranked, dim=-1)


def _ids(rows: torch.Tensor | list[list[int]], width: int, device: torch.device) -> torch.Tensor:
    return rows if isinstance(rows, torch.Tensor) else torch.tensor(rows, dtype=torch.long).view(-1, width).to(device)


def _gather_rows(parts: list[torch.Tensor], cand: torch.Tensor) -> torch.Tensor:
    """(e, 3N) the values of the rows in parts (stacked, with_q rows in all) at cand's ids, 0 at the rows after them
    (the bonus row's, which has no q): no (e, V) copy of the rows is made."""
    at, out = 0, []
    for rows in parts:
        if rows.shape[0]:
            out.append(rows.gather(1, cand[at : at + rows.shape[0]]))
            at += rows.shape[0]
    out.append(torch.zeros(cand.shape[0] - at, cand.shape[1], dtype=parts[0].dtype, device=cand.device))
    return torch.cat(out)


def _margins(logit_rows: torch.Tensor, argmax: list[int] | None) -> torch.Tensor:
    """(e, V) raw logits -> (e,) top-1 minus top-2: the row's max less the max of the rest, with one max entry set to
    -inf (a tie leaves its twin: 0). The same values as ranking the row (torch.topk), in cheaper passes; at temperature
    0 the argmax is known (argmax: per row), so the max is a gather."""
    x = logit_rows.float()
    if argmax is None:
        top1, at = x.max(dim=-1, keepdim=True)  # (e, 1)
    else:
        at = torch.tensor(argmax, dtype=torch.long).view(-1, 1).to(x.device)  # (e, 1)
        top1 = x.gather(-1, at)
    if x.shape[-1] < 2:
        return (top1 - top1).view(-1)
    top2 = x.scatter(-1, at, float("-inf")).amax(dim=-1, keepdim=True)  # (e, 1)
    return (top1 - top2).view(-1)


def _to_host(parts: RecordParts[torch.Tensor]) -> RecordParts[list[float]]:
    """Every part in one float64 transfer (the record's one host read), split back by name: one cat, whose type
    promotion to float64 (the empty part) converts every part exactly. Empty parts (a plain round's drafts) are left
    out of the cat, which costs per part."""
    device = parts.p_target.device
    flat = torch.cat([t.reshape(-1) for t in parts if t.numel()] + [torch.zeros(0, dtype=torch.float64, device=device)]).tolist()
    out, at = [], 0
    for t in parts:
        out.append(flat[at : at + t.numel()])
        at += t.numel()
    return RecordParts(*out)


def _select(drafted: Drafted, verified: Verified, rows: list[int], kids: list[int]) -> tuple[torch.Tensor, ...]:
    """The rows the record reads: p at each emitted token's row, q at its first child, the raw logits there, and
    p at each node's parent. Leading rows (all of a chain's) are slices, so no index leaves the host; others are gathered."""
    p, q, logits = verified.p_target, verified.q_shown, verified.logits
    parent_rows = [j + 1 for j in drafted.node_parents]
    return _take(p, rows), _take(q, kids), _take(logits, rows), _take(p, parent_rows)


def _take(t: torch.Tensor, index: list[int]) -> torch.Tensor:
    """t's rows at index: a slice when they are t's leading rows in order (a chain's), else an index_select."""
    if index == list(range(len(index))):
        return t[: len(index)]
    return t.index_select(0, torch.tensor(index, dtype=torch.long, device=t.device))


def _dist(ids: list[float], p: list[float], q: list[float], r: list[float], has_q: bool, top: int) -> TokenDist:
    """One row's TokenDist: p's, q's and the residual's top-N where any has mass (p's top-N alone at a bonus
    row), ordered by p_target, ties by token id."""
    keep = [j for j in range(len(ids)) if p[j] + q[j] + r[j] > 0] if has_q else list(range(top))
    by_id = {int(ids[j]): j for j in keep}
    order = sorted(sorted(by_id), key=lambda t: -p[by_id[t]])
    return TokenDist(
        token_ids=tuple(order),
        p_target=tuple(p[by_id[t]] for t in order),
        q_draft=tuple(q[by_id[t]] for t in order) if has_q else None,
        residual=tuple(r[by_id[t]] for t in order) if has_q else None,
    )
