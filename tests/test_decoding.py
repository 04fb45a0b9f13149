"""The decoding loop with toy LMs in plain torch: greedy identity, cache lengths after every round,
EOS and the length limit inside a round, adaptive k, and the first sampled token's distribution."""

from __future__ import annotations

import time

import pytest
import torch

from specviz.core.decoding import DecodeConfig, SpeculativeDecoder
from specviz.core.sampling import SamplingConfig, warp
from specviz.core.verify import residual
from specviz.drafters import ModelDrafter, NoDrafter, PromptLookupDrafter
from tests.toys import TABLE_V as V
from tests.toys import TableLM, plain_greedy, pooled_pvalue

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = [1, 2, 3, 4, 1, 2, 3]  # "1 2 3" repeats, so prompt lookup hits at once
GREEDY = SamplingConfig()


def make_drafter(kind: str, sampling: SamplingConfig = GREEDY, scale: float = 1.0):
    if kind == "none":
        return NoDrafter()
    if kind == "lookup":
        return PromptLookupDrafter(ngram_max=3)
    if kind == "model":  # a different toy LM: accepts some drafts, rejects others
        return ModelDrafter(TableLM(0, noise=2.0, scale=scale), sampling)
    if kind == "same":  # the draft is the target itself: every draft is accepted
        return ModelDrafter(TableLM(0, scale=scale), sampling)
    raise ValueError(kind)


def check_caches(dec: SpeculativeDecoder) -> None:
    """The target caches every committed token but the newest (every one, before a run's first round, when the
    prefill kept the newest one's row: carried); a draft model's cache is a prefix."""
    assert list(dec.target.tokens) == (dec.tokens if dec.carried_row is not None else dec.tokens[:-1])
    lm = getattr(dec.drafter, "lm", None)
    if lm is not None:
        assert len(lm.tokens) <= len(dec.tokens)
        assert list(lm.tokens) == dec.tokens[: len(lm.tokens)]


def run_checked(dec: SpeculativeDecoder) -> SpeculativeDecoder:
    check_caches(dec)
    while not dec.done:
        before = len(dec.tokens)
        calls, first = dec.target.extend_calls, dec.carried_row is not None
        record = dec.step()
        # one target forward per round; none for a plain first round whose row the prefill computed
        assert dec.target.extend_calls == calls + (0 if first and not record.drafted else 1)
        assert dec.tokens[before:] == list(record.emitted)
        assert record.context_length == before
        check_caches(dec)
    return dec


def decoder(kind: str, k: int, max_new: int = 40, eos=(), sampling=GREEDY, seed=0, scale=1.0, **kw):
    config = DecodeConfig(num_draft_tokens=k, sampling=sampling, seed=seed, max_new_tokens=max_new, eos_token_ids=eos, **kw)
    return SpeculativeDecoder(TableLM(0, scale=scale), make_drafter(kind, sampling, scale), PROMPT, config)


@pytest.mark.parametrize("kind", ["none", "lookup"])
def test_a_greedy_round_spends_random_numbers_on_its_uniforms_only(kind):
    """At temperature 0 the next token is the argmax, not a race over the vocabulary: the run's generator ends where
    drawing each round's uniforms alone leaves it (plain decoding: untouched), and the tokens are plain greedy's."""
    dec = decoder(kind, 4, max_new=24)
    dec.run()
    assert dec.generated == plain_greedy(TableLM(0), PROMPT, 24)
    replay = torch.Generator().manual_seed(0)
    for record in dec.records:
        assert tuple(torch.rand(record.num_drafted, generator=replay).tolist()) == record.uniforms
    assert torch.equal(dec.generator.get_state(), replay.get_state())


# -- greedy: token-identical to plain greedy --------------------------------------------------------


def test_plain_greedy_decoder_matches_the_reference():
    dec = run_checked(decoder("none", 0))
    assert dec.generated == plain_greedy(TableLM(0), PROMPT, 40)
    assert all(r.emitted_fates == ("target",) and r.drafted == () for r in dec.records)


@pytest.mark.parametrize("kind,k", [("none", 0), ("lookup", 4), ("model", 4)])
def test_the_first_token_comes_from_the_prefill_as_generate_takes_it(kind, k):
    """The prefill feeds every prompt token and keeps the newest one's row (carried): a plain run of N tokens runs
    N - 1 passes after it, and a speculative run's first pass feeds its drafts only. The tokens stay the reference's."""
    dec = decoder(kind, k, max_new=10)
    fed: list[int] = []
    extend = dec.target.extend
    dec.target.extend = lambda ids, last_only=False: fed.append(len(ids)) or extend(ids, last_only)  # type: ignore[method-assign]
    first = dec.step()
    assert fed == ([len(first.drafted)] if first.drafted else [])
    run_checked(dec)
    assert dec.generated == plain_greedy(TableLM(0), PROMPT, 10)
    if kind == "none":
        assert len(fed) == 9


def test_a_logits_reader_is_handed_each_row_once_the_carried_one_by_the_first_round():
    """The prefill keeps the newest token's row (carried) for a drafter that reads the pass's logits too: it is handed
    every prompt row but that one, then each round hands over its pass (the newest token's row, then each draft's),
    the first round's beginning with the carried row. Each row reaches the drafter once, as it did when the first
    round's pass fed the newest token itself."""
    from specviz.drafters.recycle import RecycleDrafter

    target = TableLM(0)
    drafter = RecycleDrafter(target.vocab_size)
    handed: list[tuple[int, torch.Tensor]] = []
    observe = drafter.observe_logits
    drafter.observe_logits = lambda ids, logits: handed.extend(zip(ids, logits)) or observe(ids, logits)  # type: ignore[method-assign]
    dec = SpeculativeDecoder(target, drafter, PROMPT, DecodeConfig(num_draft_tokens=2, sampling=GREEDY, max_new_tokens=12))
    assert dec.carried_row is not None and list(dec.target.tokens) == PROMPT
    assert [t for t, _ in handed] == PROMPT[:-1]
    run_checked(dec)
    assert dec.generated == plain_greedy(TableLM(0), PROMPT, 12)
    rounds = [(dec.tokens[r.context_length - 1], *r.drafted) for r in dec.records[:-1]]  # the last round's is not handed yet
    assert [t for t, _ in handed] == PROMPT[:-1] + [t for ids in rounds for t in ids]
    torch.testing.assert_close(handed[len(PROMPT) - 1][1], TableLM(0).logits_after(PROMPT))  # the carried row
    assert sum(len(r.drafted) for r in dec.records) > 0


@pytest.mark.parametrize("kind", ["model", "same", "lookup"])
@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_greedy_speculative_equals_plain_greedy(kind, k):
    dec = run_checked(decoder(kind, k))
    assert dec.generated == plain_greedy(TableLM(0), PROMPT, 40)
    stats = dec.stats()
    assert stats.new_tokens == 40 and stats.target_passes == len(dec.records)
    if kind == "same":  # all accepted: every round but the length-limited last ones emits k+1 tokens
        assert stats.acceptance_rate == 1.0
        assert all(len(r.emitted) == r.num_draft_tokens + 1 for r in dec.records)
        assert all(r.emitted_fates[-1] == "bonus" for r in dec.records if r.drafted)
    else:
        assert stats.drafted > 0


def test_the_toy_drafts_exercise_both_fates():
    """Guards the tests above: the 'model' and 'lookup' drafts are sometimes right and sometimes wrong."""
    for kind in ("model", "lookup"):
        stats = run_checked(decoder(kind, 4)).stats()
        assert 0 < stats.accepted < stats.drafted, kind


def test_a_one_token_prompt_works():
    config = DecodeConfig(num_draft_tokens=3, max_new_tokens=12)
    dec = run_checked(SpeculativeDecoder(TableLM(0), make_drafter("same"), [7], config))
    assert dec.generated == plain_greedy(TableLM(0), [7], 12)


# -- EOS and the length limit inside a round -----------------------------------------------------------


def eos_inside_first_round() -> tuple[int, int]:
    """A token whose first appearance in the greedy output is at index 2..6: inside a k=8 round."""
    ref = plain_greedy(TableLM(0), PROMPT, 40)
    for i in range(2, 7):
        if ref[i] not in ref[:i]:
            return ref[i], i
    raise AssertionError("pick another toy seed: no fresh token early in the output")


@pytest.mark.parametrize("kind", ["same", "model", "lookup", "none"])
def test_eos_inside_a_round_stops_there(kind):
    eos, index = eos_inside_first_round()
    dec = run_checked(decoder(kind, 8, eos=(eos,)))
    assert dec.generated == plain_greedy(TableLM(0), PROMPT, 40, eos=(eos,))
    assert len(dec.generated) == index + 1 and dec.generated[-1] == eos  # nothing after EOS
    assert dec.finished and dec.done and dec.records[-1].finished
    assert not any(r.finished for r in dec.records[:-1])
    if kind == "same":  # the round drafted past EOS and the cut dropped the rest
        assert len(dec.records) == 1 and len(dec.records[0].drafted) == 8
        assert dec.records[0].emitted_fates == ("accepted",) * (index + 1)
    with pytest.raises(RuntimeError):
        dec.step()


@pytest.mark.parametrize("kind", ["same", "model", "lookup"])
@pytest.mark.parametrize("max_new", [1, 3, 6, 10])
def test_max_new_tokens_is_exact(kind, max_new):
    dec = run_checked(decoder(kind, 8, max_new=max_new))
    assert dec.generated == plain_greedy(TableLM(0), PROMPT, max_new)
    remaining = max_new
    for r in dec.records:  # nobody drafts tokens that could never be emitted
        assert r.num_draft_tokens == min(8, remaining - 1) and len(r.emitted) <= remaining
        remaining -= len(r.emitted)
    assert dec.done and dec.records[-1].finished and not dec.finished  # the limit, not EOS, ended it


# -- adaptive k ----------------------------------------------------------------------------------------------


def expected_ks(records, k0: int, ceiling: int, max_new: int) -> list[int]:
    """k per round by the documented rule: +2 after all drafts kept, -1 after a rejection, within [1, ceiling]."""
    ks, k, remaining = [], k0, max_new
    for r in records:
        ks.append(min(k, remaining - 1))
        remaining -= len(r.emitted)
        if r.drafted:
            k = min(ceiling, k + 2) if r.num_accepted == r.num_drafted else max(1, k - 1)
    return ks


@pytest.mark.parametrize("kind, temperature", [("same", 0.0), ("model", 0.0), ("model", 1.0), ("lookup", 0.0)])
def test_adaptive_k_stays_in_range_and_is_recorded(kind, temperature):
    sampling = SamplingConfig(temperature=temperature)
    dec = decoder(kind, 2, max_new=60, sampling=sampling, adaptive_k=True, max_draft_tokens=5)
    while not dec.done:
        dec.step()
        assert 1 <= dec.k <= 5
    ks = [r.num_draft_tokens for r in dec.records]
    assert ks == expected_ks(dec.records, 2, 5, 60)
    assert all(len(r.drafted) <= r.num_draft_tokens <= 5 for r in dec.records)
    if kind == "same":
        assert ks[:3] == [2, 4, 5]  # grows by 2, capped at the ceiling
    elif kind == "model":
        assert len(set(ks)) > 1  # it moved
    if temperature == 0.0:
        assert dec.generated == plain_greedy(TableLM(0), PROMPT, 60)


def test_adaptive_k_starting_above_the_ceiling_is_refused():
    with pytest.raises(ValueError, match="max_draft_tokens"):
        DecodeConfig(num_draft_tokens=8, max_draft_tokens=4, adaptive_k=True)


# -- temperature 1: the first emitted token follows the target's warped distribution -------------------------


@pytest.mark.parametrize(
    "kind, sampling",
    [
        ("model", SamplingConfig(temperature=1.0)),
        ("model", SamplingConfig(temperature=0.8, top_k=6, top_p=0.9)),
        ("lookup", SamplingConfig(temperature=1.0)),
    ],
)
def test_first_sampled_token_follows_the_warped_target(kind, sampling):
    n, scale = 1_500, 0.3  # flatter toys: p_target spreads over most of the vocabulary
    p_target = warp(TableLM(0, scale=scale).logits_after(PROMPT), sampling)
    counts = torch.zeros(V)
    rejected = 0
    for seed in range(n):
        dec = decoder(kind, 2, max_new=1 + 2, sampling=sampling, seed=seed, scale=scale)
        record = dec.step()
        counts[record.emitted[0]] += 1
        rejected += "rejected" in record.draft_fates
    assert int((p_target * n >= 5).sum()) >= 3  # enough tokens the test can tell apart
    assert pooled_pvalue(counts, p_target) > 1e-3  # and nothing outside the support
    assert 0 < rejected < n  # both branches of the rule were taken


def test_first_two_sampled_tokens_follow_the_target_jointly():
    """k=1: the second token is the bonus (drafted from the cache-extended context) or the next round's."""
    n, scale, sampling = 1_500, 0.3, SamplingConfig(temperature=1.0)
    target = TableLM(0, scale=scale)
    first = warp(target.logits_after(PROMPT), sampling)
    joint = torch.stack([first[a] * warp(target.logits_after(PROMPT + [a]), sampling) for a in range(V)])  # (V, V)
    counts = torch.zeros(V, V)
    bonus = 0
    for seed in range(n):
        dec = decoder("model", 1, max_new=2, sampling=sampling, seed=seed, scale=scale)
        dec.run()
        counts[dec.generated[0], dec.generated[1]] += 1
        bonus += dec.records[0].emitted_fates[-1] == "bonus"
    assert int((joint * n >= 5).sum()) >= 20
    assert pooled_pvalue(counts, joint) > 1e-3
    assert 0 < bonus < n


def test_a_draft_identical_to_the_target_accepts_every_draft_when_sampling():
    """The draft model warps with the run's temperature, top-k and top-p, as the target does: the same model then
    drafts from exactly p_target, so p/q = 1 at every draft and the charted q is the target's p."""
    sampling = SamplingConfig(temperature=0.8, top_k=6, top_p=0.9)
    dec = run_checked(decoder("same", 4, sampling=sampling, seed=1, scale=0.3))  # flatter toys: warps that differ show
    drafted = [r for r in dec.records if r.drafted]
    assert drafted and dec.stats().acceptance_rate == 1.0
    for r in drafted:
        assert r.q_draft == pytest.approx(r.p_target, rel=1e-5) and r.accept_prob == pytest.approx((1.0,) * len(r.drafted))


def test_a_resampled_token_comes_with_the_normalised_residual():
    """Draft and target overlap, so p - q is not normalised by itself: every resampled round's record holds
    residual(p, q) at that row (all of it: V < top_n), summing to 1, and next_residual is it at the emitted token."""
    dec = run_checked(decoder("model", 4, sampling=SamplingConfig(temperature=1.0), seed=3, scale=0.3))
    resampled = [r for r in dec.records if r.emitted_fates[-1] == "resampled"]
    assert resampled
    for r in resampled:
        row = r.dists[-1]
        p, q, res = (torch.zeros(V).index_put_((torch.tensor(row.token_ids),), torch.tensor(x, dtype=torch.float32))
                     for x in (row.p_target, row.q_draft, row.residual))  # fmt: skip
        assert float(torch.minimum(p, q).sum()) > 0.05  # they overlap
        assert res.tolist() == pytest.approx(residual(p, q).tolist(), abs=1e-6)
        assert float(res.sum()) == pytest.approx(1.0, abs=1e-5)
        assert r.next_residual == pytest.approx(float(res[r.emitted[-1]]), abs=1e-6)


# -- the record and the stats --------------------------------------------------------------------------------


def test_records_hold_what_the_round_decided():
    dec = run_checked(decoder("model", 4, sampling=SamplingConfig(temperature=1.0), seed=3))
    for r in dec.records:
        m = len(r.drafted)
        assert len(r.p_target) == len(r.q_draft) == len(r.accept_prob) == len(r.uniforms) == len(r.draft_fates) == m
        assert r.has_q == (m > 0) and len(r.overlap) == len(r.dists) - (r.num_accepted == m)
        assert all(0.0 <= o <= 1.0 + 1e-6 for o in r.overlap)
        assert len(r.emitted) == r.num_accepted + 1 and r.emitted[: r.num_accepted] == r.drafted[: r.num_accepted]
        for u, a, fate in zip(r.uniforms, r.accept_prob, r.draft_fates):
            if fate != "discarded":
                assert (u < a) == (fate == "accepted")
    stats = dec.stats()
    assert stats.new_tokens == len(dec.generated) == 40
    assert stats.accepted == sum(r.num_accepted for r in dec.records)
    assert stats.alpha is not None and 0 < stats.alpha <= 1


def test_lookup_records_have_one_hot_q_and_alpha_from_p_target():
    dec = run_checked(decoder("lookup", 4))
    drafted = [r for r in dec.records if r.drafted]
    assert drafted and all(not r.has_q and r.overlap == () and set(r.q_draft) == {1.0} for r in drafted)
    checked = [p for r in drafted for p, f in zip(r.p_target, r.draft_fates) if f != "discarded"]
    assert dec.stats().alpha == pytest.approx(sum(checked) / len(checked))  # sum_v min(p, one-hot q) = p(x)


def test_same_seed_same_run():
    runs = [decoder("model", 3, sampling=SamplingConfig(temperature=1.0), seed=5) for _ in range(2)]
    for d in runs:
        d.run()
    assert runs[0].generated == runs[1].generated
    assert [r.uniforms for r in runs[0].records] == [r.uniforms for r in runs[1].records]


def test_bad_decode_config_and_empty_prompt_raise():
    with pytest.raises(ValueError, match="num_draft_tokens"):
        DecodeConfig(num_draft_tokens=17)
    with pytest.raises(ValueError, match="max_new_tokens"):
        DecodeConfig(max_new_tokens=0)
    with pytest.raises(ValueError, match="empty"):
        SpeculativeDecoder(TableLM(0), NoDrafter(), [], DecodeConfig())


# -- clean clocks and EOS stats ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["model", "lookup", "none"])
def test_building_the_record_is_outside_round_ms(kind, monkeypatch):
    """A slow record step (top-N rows) shows up in record_ms and leaves round_ms alone, for plain decoding too."""
    import specviz.core.records as records  # the one record builder, chains and trees

    slow_ms = 150.0
    margins = records._margins  # every record reads its rows' margins, a plain greedy round's too (its only device part)

    def slow_margins(*args, **kwargs):
        time.sleep(slow_ms / 1000.0)
        return margins(*args, **kwargs)

    monkeypatch.setattr(records, "_margins", slow_margins)
    dec = decoder(kind, 4, max_new=6)
    dec.run()
    assert dec.generated == plain_greedy(TableLM(0), PROMPT, 6)
    for r in dec.records:
        assert r.record_ms >= slow_ms * 0.99
        assert r.round_ms < slow_ms, "the record's cost leaked into the round's clock"
        assert r.draft_ms + r.verify_ms <= r.round_ms
    assert dec.stats().wall_s * 1000.0 == pytest.approx(dec.prefill_ms + sum(r.round_ms for r in dec.records))


def test_eos_cut_discards_the_drafts_after_it_in_the_stats():
    """The 'same' drafter drafts 8 tokens that the rule all accepts; EOS inside them keeps only the prefix."""
    eos, index = eos_inside_first_round()
    dec = run_checked(decoder("same", 8, eos=(eos,)))
    (r,) = dec.records
    assert r.drafted[: index + 1] == r.emitted and len(r.drafted) == 8
    assert r.draft_fates == ("accepted",) * (index + 1) + ("discarded",) * (8 - index - 1)
    assert r.num_accepted == index + 1 and len(r.dists) == len(r.emitted) == len(r.emitted_margin) == index + 1
    stats = dec.stats()
    assert (stats.drafted, stats.accepted, stats.new_tokens) == (8, index + 1, index + 1)
    assert stats.acceptance_rate == pytest.approx((index + 1) / 8)


def test_emitted_margin_is_the_top_two_logit_gap_of_each_emitted_row():
    dec = run_checked(decoder("model", 4, max_new=12))
    target, seq = TableLM(0), list(PROMPT)
    for r in dec.records:
        assert len(r.emitted_margin) == len(r.emitted)
        for tok, margin in zip(r.emitted, r.emitted_margin):
            top2 = torch.topk(target.logits_after(seq), 2).values
            assert margin == pytest.approx(float(top2[0] - top2[1]), abs=1e-5) and margin >= 0
            seq.append(tok)
