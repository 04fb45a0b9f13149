"""The round's shape chosen once, the record built by name, and one RunState for restore and resume (toys only)."""

from __future__ import annotations

import json

import pytest
import torch

from specviz.core.decoding import DecodeConfig, SpeculativeDecoder, resume
from specviz.core.records import RoundContext, RoundTimes, build_record
from specviz.core.resume import RunState
from specviz.core.rounds import ChainRound, Drafted, Verified
from specviz.core.sampling import SamplingConfig, warp
from specviz.core.tree import TreeDraft
from specviz.core.tree_round import TreeRound
from specviz.drafters import ModelDrafter, NoDrafter, PromptLookupDrafter
from tests.toys import TableLM, TreeTableLM

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = [1, 2, 3, 4, 1, 2, 3]
SAMPLED = SamplingConfig(temperature=1.0)


def _decoder(width: int, drafter=None, target=None, **kw) -> SpeculativeDecoder:
    config = DecodeConfig(num_draft_tokens=4, sampling=SAMPLED, max_new_tokens=24, tree_width=width, seed=3, **kw)
    drafter = drafter if drafter is not None else ModelDrafter(TableLM(0, noise=2.0), SAMPLED)
    return SpeculativeDecoder(target if target is not None else TreeTableLM(0), drafter, PROMPT, config)


class CountingRound:
    """Delegates to the run's round and counts the phases the step asks of it."""

    def __init__(self, inner) -> None:
        self.inner, self.width, self.calls = inner, inner.width, []

    def draft(self, *args):
        self.calls.append("draft")
        return self.inner.draft(*args)

    def verify(self, *args):
        self.calls.append("verify")
        return self.inner.verify(*args)

    def keep(self, *args):
        self.calls.append("keep")
        return self.inner.keep(*args)


def test_the_shape_is_chosen_once_and_the_step_only_asks_the_round():
    assert isinstance(_decoder(1).round, ChainRound)
    assert isinstance(_decoder(3).round, TreeRound) and _decoder(3).round.width == 3
    assert isinstance(_decoder(3, drafter=PromptLookupDrafter(ngram_max=3)).round, ChainRound)  # a chain-only drafter
    assert isinstance(_decoder(3, target=TableLM(0)).round, ChainRound)  # a target that cannot verify a tree
    for width in (1, 3):
        dec = _decoder(width)
        dec.round = counting = CountingRound(dec.round)
        record = dec.step()
        assert counting.calls == ["draft", "verify", "keep"]
        assert record.tree_width == width and record.is_tree == (width > 1 and record.num_drafted > 0)


def test_every_named_part_lands_in_its_field():
    """A chain round built by hand, every number distinct: the record must put each where its name says (a part
    packed at the wrong position would land in a neighbour's field)."""
    p = torch.tensor([[0.1, 0.6, 0.2, 0.1], [0.3, 0.1, 0.15, 0.45], [0.25, 0.25, 0.25, 0.25]])  # (m+1, V)
    q = torch.tensor([[0.05, 0.7, 0.05, 0.2], [0.1, 0.2, 0.6, 0.1]])  # (m, V)
    logits = torch.tensor([[0.0, 3.0, 1.0, 0.5], [1.0, 0.0, 0.5, 2.5], [0.0, 0.0, 0.0, 0.0]])
    next_dist = torch.tensor([0.4, 0.0, 0.0, 0.6])  # the residual the next token (3) was drawn from
    drafted = Drafted((1, 2), torch.tensor([1, 2]), q)
    verified = Verified(
        logits=logits, p_target=p, q_shown=q, path=(0,), next_token=3, next_fate="resampled", node_fates=("accepted", "rejected"),
        accept_prob=torch.tensor([0.857, 0.25]), uniforms=torch.tensor([0.11, 0.93]), next_dist=next_dist, next_row=1, rows=(0, 1),
    )  # fmt: skip
    record = build_record(RoundContext(5, 40, 2, 1, 3, False), drafted, verified, [1, 3], ["accepted", "resampled"], RoundTimes(1.0, 1.5, 2.5, 3.0))
    approx = pytest.approx
    assert (record.index, record.context_length, record.num_draft_tokens, record.drafted) == (5, 40, 2, (1, 2))
    assert record.p_target == approx((0.6, 0.15)) and record.q_draft == approx((0.7, 0.6))
    assert record.accept_prob == approx((0.857, 0.25)) and record.uniforms == approx((0.11, 0.93))
    assert record.next_p_target == approx(0.45) and record.next_residual == approx(0.6)
    assert record.overlap == approx((0.05 + 0.6 + 0.05 + 0.1, 0.1 + 0.1 + 0.15 + 0.1))
    assert record.emitted_margin == approx((2.0, 1.5))
    assert record.draft_fates == ("accepted", "rejected") and record.emitted_fates == ("accepted", "resampled")
    assert (record.draft_ms, record.verify_ms, record.round_ms) == approx((500.0, 1000.0, 2000.0))
    first, second = record.dists
    assert first.token_ids[0] == 1 and first.p_target[0] == approx(0.6) and first.q_draft[0] == approx(0.7)
    assert second.token_ids[0] == 3 and second.residual[0] == approx(0.6)  # the rule's residual, not p - q again


def test_a_row_without_q_ranks_p_alone(monkeypatch):
    """Plain decoding's row (and a bonus row) has no q and no residual: its record shows p's top-N alone, so building
    it ranks p's row alone: never rows of zeros, and the margin is a max, not a ranking of the raw logits."""
    ranked: list[int] = []
    topk = torch.topk

    def counting(t, *args, **kwargs):
        ranked.append(t.shape[0])
        return topk(t, *args, **kwargs)

    logits = torch.tensor([[0.0, 3.0, 1.0, 0.5]])
    p = warp(logits, SAMPLED)
    verified = Verified(
        logits=logits, p_target=p, q_shown=p.new_zeros(0, 4), path=(), next_token=1, next_fate="target", node_fates=(),
        accept_prob=p.new_zeros(0), uniforms=p.new_zeros(0), next_dist=p[0], next_row=0, rows=(0,),
    )  # fmt: skip
    monkeypatch.setattr(torch, "topk", counting)
    record = build_record(RoundContext(0, 7, 0, 1, 3, False), Drafted((), torch.zeros(0, dtype=torch.long), None), verified, [1], ["target"], RoundTimes(0, 0, 0, 0))
    assert sum(ranked) == 1  # p's row
    (dist,) = record.dists
    assert dist.token_ids == (1, 2, 3) and dist.q_draft is None and dist.residual is None
    assert dist.p_target == pytest.approx(tuple(p[0, [1, 2, 3]].tolist()))


class IidDrafter:
    """Proposes one i.i.d. child, token 5, drawn (say) from a uniform q: min(1, p(5) / .1) is its acceptance."""

    name, can_branch = "iid stub", True

    def propose_tree(self, context, k, width, generator) -> TreeDraft:
        return TreeDraft((5,), (-1,), torch.full((1, 10), 0.1), "iid")


def test_a_tree_round_scores_an_iid_child_with_the_drafters_q():
    """The scheme travels from the drafter's tree through the round to the rule: an i.i.d. child is scored against
    the q it was drawn from, not the one-hot q of distinct children (exact as well, but accepting p(x) / q(x) less)."""
    target, sampling = TreeTableLM(0, scale=0.3), SAMPLED
    tree_round = TreeRound(target, IidDrafter(), 2, sampling)
    drafted = tree_round.draft(PROMPT, 4, torch.Generator())
    assert drafted.scheme == "iid"
    verified = tree_round.verify(PROMPT, drafted, torch.Generator().manual_seed(0))
    p_x = float(warp(TableLM(0, scale=0.3).logits_after(PROMPT), sampling)[5])
    assert 0.01 < p_x < 0.1  # so min(1, p/q) = 10 p(x), and a one-hot q's p(x) differs
    assert verified.accept_prob.tolist() == pytest.approx([10 * p_x], rel=1e-5)


@pytest.mark.parametrize("width", [1, 3])
def test_a_state_round_trips_through_json_and_restores_the_same_rounds(width):
    dec = _decoder(width)
    dec.step()
    state = dec.state()
    assert state.draft_generator is None  # the toys draw on the target's device: one shared generator
    back = RunState.from_dict(json.loads(json.dumps(state.to_dict())), len(dec.records))
    assert back == state and back.hand_overs is None  # the hand-overs stay in memory
    ahead = [dec.step().emitted for _ in range(2)]
    dec.restore(back)
    assert len(dec.records) == 1 and [dec.step().emitted for _ in range(2)] == ahead


def test_a_state_that_is_not_the_runs_latest_is_refused():
    dec = _decoder(1)
    early = dec.state()
    dec.step()
    late = dec.state()
    fresh = _decoder(1)
    with pytest.raises(ValueError, match="later round"):
        fresh.restore(late)  # a fresh run has no rounds to stand after
    with pytest.raises(ValueError, match="latest round"):
        resume(TreeTableLM(0), ModelDrafter(TableLM(0, noise=2.0), SAMPLED), PROMPT, dec.generated, dec.records, dec.config, early)
    again = resume(TreeTableLM(0), ModelDrafter(TableLM(0, noise=2.0), SAMPLED), PROMPT, dec.generated, dec.records, dec.config, late)
    assert again.tokens == dec.tokens and again.step().emitted == dec.step().emitted


def test_plain_decoding_restores_without_a_drafter_state():
    dec = _decoder(1, drafter=NoDrafter())
    state = dec.state()
    assert state.drafter_state is None
    first = dec.step()
    dec.restore(state)
    assert dec.step().emitted == first.emitted
