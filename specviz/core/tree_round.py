"""One token-tree round of a SpeculativeDecoder: draft a tree, verify every node in one target pass, apply
the tree rule (specviz.core.tree), commit the accepted path, compact both caches, then build the record.

Unlike a chain round, the rule walks the tree on the host: it reads one probability pair per tried child
(at most k small transfers a round), which is nothing on a CPU and a few syncs on a GPU.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch

from specviz.core.records import StepRecord, TokenDist
from specviz.core.sampling import warp
from specviz.core.tree import TreeDecision, TreeDraft, decide_tree, tree_depths, tree_rule_q
from specviz.core.verify import DraftFate, EmitFate, residual

if TYPE_CHECKING:
    from specviz.core.decoding import SpeculativeDecoder


def tree_round(dec: SpeculativeDecoder, k: int) -> StepRecord:
    """One round with a token tree of at most k nodes; the caches end holding exactly the committed tokens."""
    config = dec.config
    t0 = dec._clock()
    # 1. draft: a tree of at most k nodes
    tree = dec.drafter.propose_tree(dec.tokens, k, config.tree_width, dec.draft_generator).cut(k) if k > 0 else TreeDraft((), ())
    t1 = dec._clock()
    # 2. verify: the committed tokens not yet cached (a chain) and the tree under the newest one, in one pass
    pending = dec.tokens[len(dec.target.tokens) :]
    m, a = len(tree.token_ids), len(pending)
    if m:
        parents = [i - 1 for i in range(a)] + [a - 1 if j < 0 else a + j for j in tree.parents]
        logits = dec.target.extend_tree(pending + list(tree.token_ids), parents)[a - 1 :]  # (m+1, V)
    else:
        logits = dec.target.extend(pending)[-1:]  # (1, V)
    p_target = warp(logits, config.sampling)  # (m+1, V)
    q_rule = tree_rule_q(tree, p_target.shape[-1], dec.device)
    decision = decide_tree(p_target, tree.token_ids, tree.parents, q_rule, dec.generator)
    t2 = dec._clock()
    # 3. commit the accepted path and the next token, cut at EOS or the length limit
    emitted = [tree.token_ids[i] for i in decision.path] + [decision.next_token]
    fates: list[EmitFate] = ["accepted"] * len(decision.path) + [decision.next_fate]
    cut = next((i + 1 for i, tok in enumerate(emitted) if tok in config.eos_token_ids), None)
    cut = min(cut or len(emitted), config.max_new_tokens - len(dec.generated))
    dec.finished = emitted[cut - 1] in config.eos_token_ids
    emitted, fates = emitted[:cut], fates[:cut]
    dec.tokens.extend(emitted)
    # 4. both caches keep only what was committed: the target drops every node off the path (no recomputation)
    if m:
        dec.target.keep_path(list(range(a)) + [a + i for i in decision.path])
    dec.target.crop(len(dec.tokens) - 1)
    dec.drafter.rollback(dec.tokens)
    t3 = dec._clock()
    return tree_record(dec, k, tree, logits, p_target, decision, emitted, fates, (t0, t1, t2, t3))


def tree_record(
    dec: SpeculativeDecoder,
    k: int,
    tree: TreeDraft,
    logits: torch.Tensor,
    p_target: torch.Tensor,
    decision: TreeDecision,
    emitted: list[int],
    fates: list[EmitFate],
    times: tuple[float, ...],
) -> StepRecord:
    """5. The round's record, built after its clock stopped. Nodes tried below the EOS / length cut are
    "discarded", so the stats count only what was kept."""
    start = time.perf_counter()
    m, e = len(tree.token_ids), len(emitted)
    kept_path = decision.path[: min(len(decision.path), e)]
    depth = tree_depths(tree.parents)
    draft_fates: tuple[DraftFate, ...] = tuple(
        fate if (e > len(decision.path) or depth[i] < e) else "discarded" for i, fate in enumerate(decision.fates)
    )
    ids = torch.tensor(tree.token_ids, dtype=torch.long)
    parent_rows = torch.tensor([j + 1 for j in tree.parents], dtype=torch.long)
    p_host = p_target.detach().double().cpu()  # (m+1, V): one transfer
    has_q = tree.q_draft is not None
    q_host = tree.q_draft.detach().double().cpu() if has_q else None  # (m, V)
    p_x = p_host[parent_rows, ids].tolist() if m else []
    q_x = q_host[torch.arange(m), ids].tolist() if q_host is not None else [1.0] * m
    rows = [0] + [i + 1 for i in decision.path]  # the row that chose each emitted token
    top2 = torch.topk(logits.detach().float().cpu(), min(2, logits.shape[-1]), dim=-1).values
    margin = [float(top2[r, 0] - top2[r, -1]) for r in rows[:e]]
    token, last = decision.next_token, rows[len(decision.path)]
    resampled = decision.next_fate == "resampled"
    dists = []
    for j in range(e):
        row = rows[j]
        kids = [i for i, par in enumerate(tree.parents) if par + 1 == row]
        q_row = q_host[kids[0]] if (q_host is not None and kids) else None
        if row == last and resampled:
            res_row = decision.next_dist.detach().double().cpu()
        else:
            res_row = residual(p_host[row], q_row) if q_row is not None else None
        dists.append(_top(p_host[row], q_row, res_row, dec.config.top_n))
    t0, t1, t2, t3 = times
    return StepRecord(
        index=len(dec.records),
        context_length=len(dec.tokens) - e,
        num_draft_tokens=k,
        drafted=tree.token_ids,
        p_target=tuple(p_x),
        q_draft=tuple(q_x),
        accept_prob=decision.accept_prob,
        uniforms=decision.uniforms,
        draft_fates=draft_fates,
        emitted=tuple(emitted),
        emitted_fates=tuple(fates),
        emitted_margin=tuple(margin),
        next_p_target=float(p_host[last, token]),
        next_residual=float(decision.next_dist[token]) if resampled and e > len(decision.path) else None,
        overlap=(),
        dists=tuple(dists),
        has_q=has_q,
        draft_ms=(t1 - t0) * 1000.0,
        verify_ms=(t2 - t1) * 1000.0,
        round_ms=(t3 - t0) * 1000.0,
        record_ms=(time.perf_counter() - start) * 1000.0,
        finished=dec.done,
        tree_width=dec.config.tree_width,
        tree_parents=tree.parents,
        accepted_path=kept_path,
        tree_p_current=decision.p_current,
    )


def _top(p: torch.Tensor, q: torch.Tensor | None, res: torch.Tensor | None, top_n: int) -> TokenDist:
    """Top-N of p, q and the residual at one row, ordered by p_target (ties by id)."""
    top = min(top_n, p.numel())
    cand = {int(t) for t in torch.topk(p, top).indices}
    for extra in (q, res):
        if extra is not None:
            cand |= {int(t) for t in torch.topk(extra, top).indices if extra[t] > 0}
    order = sorted(sorted(cand), key=lambda t: -float(p[t]))
    return TokenDist(
        token_ids=tuple(order),
        p_target=tuple(float(p[t]) for t in order),
        q_draft=tuple(float(q[t]) for t in order) if q is not None else None,
        residual=tuple(float(res[t]) for t in order) if (q is not None and res is not None) else None,
    )
