"""The record's rankings pinned against a slow reference: for every round of toy runs (plain decoding, prompt lookup,
a draft model as a chain and as a tree; temperature 0 and 1; top-N below and above the vocabulary), the record's
per-row top-N (ids, p, q, residual), the top-2 logit margins, the overlaps and the next token's numbers equal, value
for value, what one torch.topk per distribution row and plain Python over the rows compute from the same round."""

from __future__ import annotations

import pytest
import torch

import specviz.core.decoding as decoding
import specviz.core.records as records
from specviz.core.decoding import DecodeConfig, SpeculativeDecoder
from specviz.core.records import StepRecord, TokenDist
from specviz.core.rounds import Drafted, Verified
from specviz.core.sampling import SamplingConfig
from specviz.core.tree import TreeDraft
from specviz.core.verify import residual
from specviz.drafters import ModelDrafter, NGramDrafter, NoDrafter, PromptLookupDrafter
from tests.toys import TableLM, TreeTableLM

pytestmark = pytest.mark.usefixtures("one_thread")

V = 40
PROMPT = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2]  # repeats, so prompt lookup hits


def reference_dists(drafted: Drafted, verified: Verified, e: int, top_n: int, greedy: bool) -> tuple[TokenDist, ...]:
    """Row by row: the p row that chose each emitted token; where that row had drafted children (an accepted child,
    or the resampled token), q at its first child and the residual (the rule's own for the resampled token); the
    union of each distribution's top-N, those with any mass kept (p's top-N alone where there is no q, and at
    temperature 0 only its entries with mass: the one-hot's token), by p, ties by id."""
    parents, path = drafted.node_parents, verified.path
    top = min(top_n, V)
    out = []
    for i in range(e):
        node = -1 if i == 0 else path[i - 1]
        p = verified.p_target[node + 1]
        kids = [c for c, j in enumerate(parents) if j == node]
        has_q = i < len(path) or verified.next_fate == "resampled"
        if not has_q:
            ids = torch.topk(p, top).indices.tolist()
            ids = [t for t in ids if p[t].item() > 0] if greedy else ids
            order = sorted(sorted(ids), key=lambda t: -p[t].item())
            out.append(TokenDist(tuple(order), tuple(p[t].item() for t in order), None, None))
            continue
        q = verified.q_shown[kids[0]]
        r = verified.next_dist if i == len(path) else residual(p, q)
        ids = {t for row in (p, q, r) for t in torch.topk(row, top).indices.tolist()}
        ids = [t for t in ids if p[t].item() + q[t].item() + r[t].item() > 0]
        order = sorted(sorted(ids), key=lambda t: -p[t].item())
        out.append(TokenDist(tuple(order), *(tuple(row[t].item() for t in order) for row in (p, q, r))))
    return tuple(out)


def reference_margins(verified: Verified, e: int) -> tuple[float, ...]:
    rows = [0] + [j + 1 for j in verified.path]
    out = []
    for row in rows[:e]:
        values = torch.sort(verified.logits[row].float(), descending=True).values
        out.append((values[0] - values[min(1, len(values) - 1)]).item())
    return tuple(out)


def check(record: StepRecord, drafted: Drafted, verified: Verified, top_n: int, greedy: bool) -> None:
    e = len(record.emitted)
    assert record.dists == reference_dists(drafted, verified, e, top_n, greedy)
    assert record.emitted_margin == reference_margins(verified, e)
    p, q, ids = verified.p_target, verified.q_shown, drafted.ids
    parent_rows = [j + 1 for j in drafted.node_parents]
    assert record.p_target == tuple(p[r, t].item() for r, t in zip(parent_rows, ids))
    assert record.q_draft == tuple(q[i, t].item() for i, t in enumerate(ids))
    last = verified.path[-1] + 1 if verified.path else 0
    assert record.next_p_target == p[last, verified.next_token].item()
    if drafted.q_draft is not None and not drafted.is_tree:
        with_q = sum(d.q_draft is not None for d in record.dists)
        assert record.overlap == tuple(torch.minimum(p[i], q[i]).sum().item() for i in range(with_q))
    else:
        assert record.overlap == ()


class NoQTrees(NGramDrafter):
    """The n-gram drafter's trees without its q: a tree drafter that proposes tokens only."""

    def propose_tree(self, context, k, width, generator) -> TreeDraft:
        tree = super().propose_tree(context, k, width, generator)
        return TreeDraft(tree.token_ids, tree.parents)


def drafter(kind: str, sampling: SamplingConfig):
    if kind == "none":
        return NoDrafter()
    if kind == "lookup":
        return PromptLookupDrafter(ngram_max=3)
    if kind == "ngram":  # trees with the n-gram model's q
        return NGramDrafter(V, n_max=3, threshold=0.0)
    if kind == "ngram-no-q":  # trees without a q
        return NoQTrees(V, n_max=3, threshold=0.0)
    return ModelDrafter(TableLM(0, vocab_size=V, noise=2.0), sampling)


@pytest.mark.parametrize("top_n", [3, 20, 64])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("kind,width", [("none", 1), ("lookup", 1), ("model", 1), ("model", 3), ("ngram", 3), ("ngram-no-q", 3)])
def test_every_rounds_rankings_equal_the_slow_reference(monkeypatch, kind, width, temperature, top_n):
    seen = run(monkeypatch, kind, width, temperature, top_n)
    for record, drafted, verified in seen:
        check(record, drafted, verified, top_n, temperature == 0.0)
    fates = {f for record, _, _ in seen for f in record.emitted_fates}
    assert fates >= ({"target"} if kind == "none" else {"accepted", "resampled"})  # the rows with a q and without
    assert any(r.is_tree for r, _, _ in seen) == (width > 1)


@pytest.mark.parametrize("kind,width", [("none", 1), ("lookup", 1), ("ngram-no-q", 3)])
def test_a_greedy_record_ranks_no_row(monkeypatch, kind, width):
    """At temperature 0, for a drafter without a q, no row needs a ranking: a row with a drafted child has mass only at
    the emitted token and the drafted one, and a bonus or plain row only at the emitted token (p is one-hot there; the
    rest of its top-N would be zeros tied with all the others). The margins take no ranking either."""
    ranked: list[int] = []
    topk = torch.topk

    def counting(t, k, *args, **kwargs):
        if k == 20:  # the record's rankings (the n-gram drafter ranks its followers for a tree's top-W)
            ranked.append(t.shape[0] if t.dim() > 1 else 1)
        return topk(t, k, *args, **kwargs)

    monkeypatch.setattr(torch, "topk", counting)
    seen = run(monkeypatch, kind, width, 0.0, 20)
    assert ranked == []
    assert sum(r.emitted_fates[-1] in ("bonus", "target") for r, _, _ in seen) > 0  # the run had rows without a q


def keep_rounds(monkeypatch) -> list[tuple[StepRecord, Drafted, Verified]]:
    """From now on, every round's record with the round it was built from (the list fills as the rounds run)."""
    seen: list[tuple[StepRecord, Drafted, Verified]] = []
    build = decoding.build_record

    def keeping(ctx, drafted, verified, *args):
        record = build(ctx, drafted, verified, *args)
        seen.append((record, drafted, verified))
        return record

    monkeypatch.setattr(decoding, "build_record", keeping)
    return seen


def run(monkeypatch, kind: str, width: int, temperature: float, top_n: int) -> list[tuple[StepRecord, Drafted, Verified]]:
    """A toy run; every round's record with the round it was built from."""
    seen = keep_rounds(monkeypatch)
    sampling = SamplingConfig(temperature=temperature)
    config = DecodeConfig(num_draft_tokens=0 if kind == "none" else 4, sampling=sampling, max_new_tokens=40, top_n=top_n, tree_width=width, seed=1)
    SpeculativeDecoder(TreeTableLM(0, vocab_size=V), drafter(kind, sampling), PROMPT, config).run()
    return seen


class TiedLM(TreeTableLM):
    """Logits rounded to whole numbers: a row's top two often tie (margin 0), and its argmax is then the first of them."""

    def logits_after(self, seq):
        return super().logits_after(seq).round()


@pytest.mark.parametrize("top_n", [3, 64])
def test_a_plain_greedy_records_parts_equal_the_general_builders(monkeypatch, top_n):
    """A plain round at temperature 0 builds its record's host parts without the device (but the margin): they must
    equal, value for value, what the general builder gathers on the device and moves, on rows with and without ties."""
    seen = keep_rounds(monkeypatch)
    config = DecodeConfig(num_draft_tokens=0, sampling=SamplingConfig(temperature=0.0), max_new_tokens=40, top_n=top_n, seed=1)
    SpeculativeDecoder(TiedLM(0, vocab_size=V), NoDrafter(), PROMPT, config).run()
    assert len(seen) == 40
    assert 0.0 in {m for r, _, _ in seen for m in r.emitted_margin}  # some rows tie
    top = min(top_n, V)
    for record, drafted, verified in seen:
        general = records._to_host(records._parts(drafted, verified, [0], [], top, list(record.emitted)))
        assert records._plain_greedy_host(verified, record.emitted[0], top) == general
