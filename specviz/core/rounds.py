"""What one round hands from phase to phase, and the one record builder for chains and trees.

A chain is the tree whose node i hangs under node i-1, so both shapes share the phases' data: ``Drafted``
(the proposal on the device), ``Verified`` (the target pass and the rule's decision), the commit with its EOS /
length cut, and ``build_record``, which gathers the record's numbers on the device and moves them to the host
in one transfer, after the round's clock stopped.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from specviz.core.records import StepRecord, TokenDist
from specviz.core.tree import ChildScheme, TreeDraft, tree_depths
from specviz.core.verify import DraftFate, EmitFate, residual


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


@dataclass(frozen=True)
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
    p_current: tuple[float, ...] = ()  # a tree: per node, p at its token when tried
    pending: int = 0  # a tree: committed tokens fed in the same pass before its nodes
    next_row: int = -1  # the pass's row whose LM-head output chose next_token (its hidden state is what Medusa heads read)
    rows: tuple[int, ...] = ()  # the pass's rows whose LM-head outputs chose each accepted token, then next_token


def cut_emitted(emitted: list[int], fates: list[EmitFate], eos_token_ids: Sequence[int], room: int) -> tuple[list[int], list[EmitFate], bool]:
    """Cut the round's tokens after the first EOS and at ``room`` tokens; also whether an EOS ended the run."""
    cut = next((i + 1 for i, tok in enumerate(emitted) if tok in eos_token_ids), None)
    cut = min(cut or len(emitted), room)
    return emitted[:cut], fates[:cut], emitted[cut - 1] in eos_token_ids


@dataclass(frozen=True)
class RoundContext:
    """The facts of the run a record needs besides the round itself."""

    index: int  # the round's number
    context_length: int  # committed tokens before the round
    num_draft_tokens: int  # k asked
    tree_width: int  # the width asked, when the run drafts trees; 1 for chains
    top_n: int
    finished: bool


def build_record(ctx: RoundContext, drafted: Drafted, verified: Verified, emitted: list[int], fates: list[EmitFate], times: tuple[float, ...]) -> StepRecord:
    """5. The round's record, built after its clock stopped: per drafted node p, q, min(1, p/q) and u; per
    emitted token its row's top-N and top-2 logit margin. Nodes past an EOS / length cut are "discarded", so
    the stats count only what was kept."""
    start = time.perf_counter()
    e, path = len(emitted), verified.path
    depth = tree_depths(drafted.node_parents)
    draft_fates = tuple(f if (e > len(path) or depth[i] < e) else "discarded" for i, f in enumerate(verified.node_fates))
    host = _to_host(drafted, verified, e, drafted.q_draft is not None and not drafted.is_tree, ctx.top_n)
    t0, t1, t2, t3 = times
    return StepRecord(
        index=ctx.index,
        context_length=ctx.context_length,
        num_draft_tokens=ctx.num_draft_tokens,
        drafted=drafted.ids,
        draft_fates=draft_fates,
        emitted=tuple(emitted),
        emitted_fates=tuple(fates),
        has_q=drafted.q_draft is not None,
        draft_ms=(t1 - t0) * 1000.0,
        verify_ms=(t2 - t1) * 1000.0,
        round_ms=(t3 - t0) * 1000.0,
        finished=ctx.finished,  # EOS, or the max_new_tokens limit, reached this round
        tree_width=ctx.tree_width,
        tree_parents=drafted.parents,
        accepted_path=path[: min(len(path), e)] if drafted.is_tree else (),
        tree_p_current=verified.p_current,
        **host,
        record_ms=(time.perf_counter() - start) * 1000.0,
    )


def _rows(drafted: Drafted, verified: Verified, e: int) -> tuple[list[int], list[int]]:
    """The p row that chose each emitted token, and for the first of them that had drafted children, the first
    child (whose q the row shows): a chain's rows 0..e-1 with children 0..; a tree's rows along the path."""
    parents = drafted.node_parents
    rows = ([0] + [i + 1 for i in verified.path])[:e]
    first_kid = {}
    for node, parent in enumerate(parents):
        first_kid.setdefault(parent + 1, node)
    with_q = min(e, len(verified.path) + (verified.next_fate == "resampled"))
    return rows, [first_kid[r] for r in rows[:with_q]]


def _to_host(drafted: Drafted, verified: Verified, e: int, overlaps: bool, top_n: int) -> dict:
    """The record's numbers, gathered on the device and moved to the host in one float64 transfer."""
    p, q, device = verified.p_target, verified.q_shown, verified.p_target.device
    m, token, vocab = len(drafted.ids), verified.next_token, p.shape[-1]
    rows, kids = _rows(drafted, verified, e)
    with_q = len(kids)
    p_rows, q_rows, logit_rows, p_parent = _select(drafted, verified, rows, kids)  # (e, V), (with_q, V), (e, V), (m, V)
    res = residual(p_rows[:with_q], q_rows)  # (with_q, V)
    resampled = verified.next_fate == "resampled" and e > len(verified.path)
    if resampled:  # the token was drawn from the rule's residual (after every rejected sibling)
        res = torch.cat([res[:-1], verified.next_dist.view(1, -1)])
    pad = torch.zeros_like(p_rows[with_q:])  # the bonus row has no q: its candidates are p's top-N only
    q_rows, res_rows = torch.cat([q_rows, pad]), torch.cat([res, pad])  # (e, V)
    top = min(top_n, vocab)
    cand = torch.cat([torch.topk(t, top, dim=-1).indices for t in (p_rows, q_rows, res_rows)], dim=-1)  # (e, 3N)
    top2 = torch.topk(logit_rows.float(), min(2, vocab), dim=-1).values  # (e, 2)
    ids = drafted.on_device.view(-1, 1)
    last_row = verified.path[-1] + 1 if verified.path else 0  # the row the next token was drawn at
    parts = [
        p_parent.gather(1, ids).view(-1) if m else p.new_zeros(0),
        q.gather(1, ids).view(-1) if m else p.new_zeros(0),
        verified.accept_prob.to(device, torch.float64),
        verified.uniforms.to(device, torch.float64),
        p[last_row, token].view(1),
        verified.next_dist[token].view(1),
        torch.minimum(p_rows[:with_q], q_rows[:with_q]).sum(dim=-1) if overlaps else p.new_zeros(0),
        top2[:, 0] - top2[:, -1],
        cand.flatten(),
        p_rows.gather(1, cand).flatten(),
        q_rows.gather(1, cand).flatten(),
        res_rows.gather(1, cand).flatten(),
    ]
    flat = torch.cat([t.double() for t in parts]).tolist()  # the record's one host transfer
    sizes = [m, m, m, m, 1, 1, with_q if overlaps else 0, e] + [cand.numel()] * 4
    p_x, q_x, accept, uniforms, next_p, next_r, overlap, margin, cand_ids, pv, qv, rv = _split(flat, sizes)
    width = cand.shape[-1]
    dists = tuple(
        _dist(cand_ids[i * width : (i + 1) * width], pv[i * width : (i + 1) * width], qv[i * width : (i + 1) * width],
              rv[i * width : (i + 1) * width], i < with_q, top)
        for i in range(e)
    )  # fmt: skip
    return dict(
        p_target=tuple(p_x),
        q_draft=tuple(q_x),
        accept_prob=tuple(accept),
        uniforms=tuple(uniforms),
        next_p_target=next_p[0],
        next_residual=next_r[0] if resampled else None,
        overlap=tuple(overlap),
        emitted_margin=tuple(margin),
        dists=dists,
    )


def _select(drafted: Drafted, verified: Verified, rows: list[int], kids: list[int]) -> tuple[torch.Tensor, ...]:
    """The rows the record reads: p at each emitted token's row, q at its first child, the raw logits there, and
    p at each node's parent. A chain's are leading slices (no index leaves the host); a tree's are gathered."""
    p, q, logits, e = verified.p_target, verified.q_shown, verified.logits, len(rows)
    if not drafted.is_tree:
        return p[:e], q[: len(kids)], logits[:e], p[: len(drafted.ids)]
    index = torch.tensor(rows, dtype=torch.long, device=p.device)
    parents = torch.tensor([j + 1 for j in drafted.parents], dtype=torch.long, device=p.device)
    kid_index = torch.tensor(kids, dtype=torch.long, device=p.device)
    return p.index_select(0, index), q.index_select(0, kid_index), logits.index_select(0, index), p.index_select(0, parents)


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


def _split(flat: list[float], sizes: list[int]) -> list[list[float]]:
    out, at = [], 0
    for size in sizes:
        out.append(flat[at : at + size])
        at += size
    return out
