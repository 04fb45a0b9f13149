"""The context n-gram drafter: its q_draft on hand-written sequences, backoff, early stop, incremental
counts, and exactness of speculative decoding with it (greedy identity; sampled distribution by chi-square)."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
import torch

from specviz.core.decoding import DecodeConfig, SpeculativeDecoder
from specviz.core.sampling import SamplingConfig
from specviz.drafters import NGramDrafter, NoDrafter
from specviz.drafters.base import Draft
from specviz.drafters.ngram import NGramCounts, confidence, smoothed
from tests.toys import PairTableLM, plain_greedy, pooled_pvalue

V = 12


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def support(row: torch.Tensor) -> set[int]:
    return set(torch.nonzero(row).flatten().tolist())


class SoftQGreedyDrafter(NGramDrafter):
    """The known bug, kept as a negative control: drafts the argmax but reports the soft q."""

    def propose(self, context, k, generator):
        draft = super().propose(context, k, torch.Generator().manual_seed(0))
        if not draft.token_ids:
            return draft
        ids = tuple(int(i) for i in draft.q_draft.argmax(dim=-1))
        return Draft(ids[:1], draft.q_draft[:1])


# --- q_draft on hand-written sequences ---------------------------------------------------------


def test_q_sums_to_one_with_the_observed_followers_as_support():
    seq = [1, 2, 3, 4, 1, 2, 3, 5, 1, 2]
    drafter = NGramDrafter(V, n_max=3, n_min=1, threshold=0.0, mode="greedy")
    drafter.prepare(seq)
    draft = drafter.propose(seq, 2, gen())
    assert draft.q_draft.shape == (2, V)
    assert torch.allclose(draft.q_draft.sum(dim=-1), torch.ones(2))
    # "5 1 2" was never followed yet, so it backs off to "1 2", always followed by 3
    assert draft.token_ids[0] == 3
    # in sample mode the reported q is the smoothed one: "1 2 3" was followed by 4 and by 5, once each
    sampled = NGramDrafter(V, n_max=3, n_min=1, threshold=0.0)
    sampled.prepare(seq)
    q = sampled.propose(seq, 2, gen()).q_draft
    assert torch.allclose(q.sum(dim=-1), torch.ones(2))
    assert support(q[0]) == {3} and q[0, 3] == 1.0
    assert support(q[1]) == {4, 5}
    assert q[1, 4] == pytest.approx(0.5) and q[1, 5] == pytest.approx(0.5)
    assert (q >= 0).all()


def test_q_uses_counts_not_only_the_latest_match():
    seq = [7, 1, 7, 1, 7, 2, 7]  # 7 was followed by 1, 1, 2: the latest match alone would say 2
    for lam in (0.0, 0.5, 1.0):
        drafter = NGramDrafter(V, n_max=1, n_min=1, threshold=0.0, smoothing=lam)
        drafter.prepare(seq)
        q = drafter.propose(seq, 1, gen()).q_draft[0]
        assert q[1] == pytest.approx((2 + lam) / (3 + 2 * lam))
        assert q[2] == pytest.approx((1 + lam) / (3 + 2 * lam))
        assert support(q) == {1, 2}
        assert float(q.sum()) == pytest.approx(1.0)


def test_greedy_mode_reports_the_one_hot_of_what_it_drafted():
    seq = [7, 1, 7, 1, 7, 2, 7]
    drafter = NGramDrafter(V, n_max=1, n_min=1, threshold=0.0, mode="greedy")
    drafter.prepare(seq)
    draft = drafter.propose(seq, 3, gen())
    assert draft.token_ids[0] == 1
    for row, tok in enumerate(draft.token_ids):
        assert support(draft.q_draft[row]) == {tok} and draft.q_draft[row, tok] == 1.0


def test_backoff_uses_the_longest_order_that_matches():
    counts = NGramCounts(1, 3)
    counts.extend([1, 2, 3, 9, 5, 2, 3, 8, 4, 3, 6])
    assert counts.lookup([1, 2, 3]) == {9: 1}  # order 3 matches: only what followed "1 2 3"
    assert counts.lookup([7, 2, 3]) == {9: 1, 8: 1}  # "7 2 3" unseen -> order 2 "2 3"
    assert counts.lookup([7, 7, 3]) == {9: 1, 8: 1, 6: 1}  # -> order 1 "3"
    assert counts.lookup([7, 7, 11]) is None  # nothing matches at any order
    only_long = NGramCounts(2, 3)
    only_long.extend([1, 2, 3, 9, 5, 2, 3, 8, 4, 3, 6])
    assert only_long.lookup([7, 7, 3]) is None  # order 1 is below n_min


def test_no_match_gives_an_empty_draft():
    drafter = NGramDrafter(V, n_max=3, n_min=1, threshold=0.0)
    seq = [1, 2, 3, 4]  # the last token, 4, was never followed by anything
    drafter.prepare(seq)
    assert drafter.propose(seq, 4, gen()) == Draft(())
    assert drafter.propose(seq, 0, gen()) == Draft(())


def test_drafting_backs_off_between_orders_while_drafting():
    seq = [1, 2, 3, 1, 2]  # "3 1 2" unseen -> "1 2" -> 3; then "1 2 3" -> 1; "2 3 1" -> 2; "3 1 2" -> back off -> 3 ...
    drafter = NGramDrafter(V, n_max=3, n_min=1, threshold=0.0)
    drafter.prepare(seq)
    assert drafter.propose(seq, 5, gen()).token_ids == (3, 1, 2, 3, 1)
    drafter.prepare([4, 5, 9])  # 9 was never followed, at any order
    assert drafter.propose([4, 5, 9], 3, gen()) == Draft(())


def test_early_stop_below_the_threshold():
    seq = [1, 2, 3, 4, 1, 2, 3, 5, 1, 2]
    # "5 1 2" unseen -> "1 2", followed by 3 twice: 2 / 2.5 * 0.8 = 0.64; then "1 2 3", followed by 4 and 5: 1 / 2.5 = 0.4
    assert confidence(Counter({3: 2}), 2, 3) == pytest.approx(0.64)
    assert confidence(Counter({4: 1, 5: 1}), 3, 3) == pytest.approx(0.4)
    default = NGramDrafter(V)
    default.prepare(seq)
    assert default.propose(seq, 4, gen()).token_ids == (3,)
    loose = NGramDrafter(V, threshold=0.4)
    loose.prepare(seq)
    assert len(loose.propose(seq, 4, gen()).token_ids) == 4
    # below the threshold at the very first token: nothing drafted
    unsure = NGramDrafter(V, threshold=0.65)
    unsure.prepare(seq)
    assert unsure.propose(seq, 4, gen()) == Draft(())


def test_one_observation_of_a_short_context_is_not_enough_repeated_ones_are():
    # fresh prose: the unigram 7 was followed once by 1; one observation is no evidence (1 / 1.5 * 0.8^2 = 0.43)
    once = [7, 1, 2, 3, 7]
    drafter = NGramDrafter(V)
    drafter.prepare(once)
    assert drafter.propose(once, 4, gen()) == Draft(())
    # the same unigram followed by 1 twice: 2 / 2.5 * 0.64 = 0.51, it drafts
    twice = [7, 1, 2, 7, 1, 3, 7]
    drafter.prepare(twice)
    assert drafter.propose(twice, 1, gen()).token_ids == (1,)
    # disagreeing observations lower the confidence again: 2 / 3.5 * 0.64
    mixed = [7, 1, 2, 7, 1, 3, 7, 4, 5, 7]
    drafter.prepare(mixed)
    assert drafter.propose(mixed, 1, gen()) == Draft(())
    # a longest-order context seen once is strong evidence (a passage being copied): 1 / 1.5 = 0.67
    copying = [9, 8, 6, 5, 4, 9, 8, 6]
    drafter.prepare(copying)
    draft = drafter.propose(copying, 2, gen())
    assert draft.token_ids == (5, 4)
    assert torch.allclose(draft.q_draft.sum(dim=-1), torch.ones(2))


def test_confidence_is_count_aware_and_discounts_backoff():
    assert confidence(Counter({5: 1}), 3, 3) == pytest.approx(1 / 1.5)
    assert confidence(Counter({5: 4}), 3, 3) == pytest.approx(4 / 4.5)  # grows with agreeing counts
    assert confidence(Counter({5: 1}), 1, 3) == pytest.approx(1 / 1.5 * 0.64)  # two orders backed off
    assert confidence(Counter({5: 1}), 1, 3, prior=0.0, backoff=1.0) == 1.0  # the old rule: q's top mass


def test_sampling_follows_the_generator_and_q():
    seq = [7, 1, 7, 2, 7, 3, 7, 1, 7]
    drafter = NGramDrafter(V, n_max=1, n_min=1, threshold=0.0, smoothing=0.0)
    drafter.prepare(seq)
    assert [drafter.propose(seq, 3, gen(s)).token_ids for s in range(5)] == [drafter.propose(seq, 3, gen(s)).token_ids for s in range(5)]
    g = gen(0)
    draws = [drafter.propose(seq, 1, g).token_ids[0] for _ in range(4000)]
    freq = {tok: draws.count(tok) / len(draws) for tok in (1, 2, 3)}
    assert set(draws) == {1, 2, 3}
    assert freq[1] == pytest.approx(0.5, abs=0.03) and freq[2] == pytest.approx(0.25, abs=0.03)


def test_counts_are_updated_incrementally_and_match_a_fresh_build():
    stream = [1, 2, 3, 1, 2, 4, 1, 2, 3, 3, 1]
    drafter = NGramDrafter(V, n_max=3, n_min=1)
    drafter.prepare(stream[:4])
    for end in range(5, len(stream) + 1):
        drafter.rollback(stream[:end])  # the decoder passes every committed token
    fresh = NGramCounts(1, 3)
    fresh.extend(stream)
    assert drafter.counts.followers == fresh.followers
    # proposals never enter the counts
    before = {ctx: dict(c) for ctx, c in drafter.counts.followers.items()}
    drafter.propose(stream, 4, gen())
    assert {ctx: dict(c) for ctx, c in drafter.counts.followers.items()} == before
    # a different stream (a new run reusing the drafter) starts over
    drafter.rollback([9, 9, 9])
    assert drafter.counts.tokens == [9, 9, 9]


def test_smoothed_is_a_distribution_over_the_followers():
    ids, probs = smoothed(Counter({4: 3, 9: 1, 2: 1}), 0.5)
    assert ids[0] == 4 and sum(probs) == pytest.approx(1.0)
    assert probs[0] == pytest.approx(3.5 / 6.5)


@pytest.mark.parametrize(
    "kwargs",
    [dict(vocab_size=0), dict(n_min=0), dict(n_min=3, n_max=2), dict(threshold=1.5), dict(smoothing=-1.0), dict(mode="beam"), dict(prior=-1.0), dict(backoff=0.0), dict(backoff=1.5)],
)
def test_bad_arguments_raise_value_error(kwargs):
    with pytest.raises(ValueError):
        NGramDrafter(**{"vocab_size": V, **kwargs})


# --- exactness of speculative decoding with the n-gram drafter ------------------------------------


def decode(lm_seed: int, drafter, prompt: list[int], sampling: SamplingConfig, seed: int, max_new: int, k: int = 4, adaptive: bool = False):
    config = DecodeConfig(num_draft_tokens=k, sampling=sampling, seed=seed, max_new_tokens=max_new, adaptive_k=adaptive)
    decoder = SpeculativeDecoder(PairTableLM(V, lm_seed), drafter, prompt, config)
    decoder.run()
    return decoder


@pytest.mark.parametrize("mode", ["sample", "greedy"])
@pytest.mark.parametrize("adaptive", [False, True])
def test_greedy_output_is_identical_to_plain_greedy(mode, adaptive):
    drafted = accepted = 0
    for lm_seed, prompt in [(0, [1, 2, 3, 1, 2, 3, 1, 2]), (1, [5, 5, 6, 7, 5, 6]), (2, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0, 1])]:
        expected = plain_greedy(PairTableLM(V, lm_seed), prompt, 40)
        for seed in range(3):
            decoder = decode(lm_seed, NGramDrafter(V, mode=mode), prompt, SamplingConfig(), seed, 40, adaptive=adaptive)
            assert decoder.generated == expected
            stats = decoder.stats()
            drafted += stats.drafted
            accepted += stats.accepted
            assert all(r.has_q for r in decoder.records if r.drafted)
    assert 0 < accepted < drafted  # the drafter did draft, and was sometimes wrong


def test_baseline_agrees_with_the_toy_plain_greedy():
    prompt = [1, 2, 3, 1, 2]
    assert decode(0, NoDrafter(), prompt, SamplingConfig(), 0, 20).generated == plain_greedy(PairTableLM(V, 0), prompt, 20)


def exact_sequence_probs(lm_seed: int, prompt: list[int], length: int) -> dict[tuple[int, ...], float]:
    p_next = torch.softmax(PairTableLM(V, lm_seed).table.double(), dim=-1).tolist()  # (prev, cur, V)
    probs = {}
    for seq in itertools.product(range(V), repeat=length):
        ctx, p = list(prompt), 1.0
        for tok in seq:
            p *= p_next[ctx[-2]][ctx[-1]][tok]
            ctx.append(tok)
        probs[seq] = p
    return probs


def sampled_pvalue(drafter_factory, lm_seed: int, prompt: list[int], n: int, length: int = 2) -> tuple[float, int, int]:
    """n sampled runs of `length` tokens against their exact sequence probabilities: (p-value, drafted, rejected)."""
    exact = exact_sequence_probs(lm_seed, prompt, length)
    counts = dict.fromkeys(exact, 0)
    drafted = rejected = 0
    for seed in range(n):
        decoder = decode(lm_seed, drafter_factory(), prompt, SamplingConfig(temperature=1.0), seed, length, k=length)
        counts[tuple(decoder.generated)] += 1
        drafted += sum(r.num_drafted for r in decoder.records)
        rejected += sum("rejected" in r.draft_fates for r in decoder.records)
    observed, expected = torch.tensor([counts[key] for key in exact]), torch.tensor([exact[key] for key in exact], dtype=torch.float64)
    return pooled_pvalue(observed, expected), drafted, rejected


PROMPT = [3, 4, 3, 5, 3, 4, 3, 4, 3, 6, 3]  # 3 is followed by 4, 5, 6: a real, non-degenerate q_draft


@pytest.fixture
def one_thread():
    """Tiny tensors gain nothing from intra-op threads, and on a busy 2-core machine OpenMP spinning makes them slow."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_sampled_distribution_matches_the_target(one_thread):
    pvalue, drafted, rejected = sampled_pvalue(lambda: NGramDrafter(V, threshold=0.0), lm_seed=4, prompt=PROMPT, n=1200, length=3)
    assert drafted > 1500 and rejected > 300  # the rule had real work to do, with two-token drafts
    assert pvalue > 1e-3


def test_chi_square_catches_a_greedy_draft_scored_with_soft_q(one_thread):
    pvalue, _, _ = sampled_pvalue(lambda: SoftQGreedyDrafter(V, threshold=0.0), lm_seed=4, prompt=PROMPT, n=1200, length=3)
    assert pvalue < 1e-6


def test_ngram_drafter_on_a_tiny_transformers_model(tiny_models):
    from specviz.config import RunConfig
    from specviz.runs import RunModels, build_decoder, make_drafter

    target = tiny_models["llama"]
    tok = target.tokenizer
    prompt_ids = tok("the cat sat on the mat and the dog sat on the log the cat sat on the")["input_ids"]
    config = RunConfig(target="tiny", drafter="ngram", max_new_tokens=24, num_draft_tokens=4, auto_k=False, chat=False)
    drafter = make_drafter(config, RunModels(target))
    assert isinstance(drafter, NGramDrafter) and drafter.vocab_size == target.vocab_size
    spec = build_decoder(config, RunModels(target), prompt_ids)
    spec.run()
    base = build_decoder(config, RunModels(target), prompt_ids, baseline=True)
    base.run()
    assert spec.generated == base.generated
    assert spec.stats().drafted > 0


@pytest.mark.parametrize("width", [1, 2, 3])
@pytest.mark.parametrize(
    "seq",
    [
        [7, 1, 2, 3, 7],  # fresh prose: a unigram seen once is no evidence, the chain does not draft
        [1, 2, 3, 4, 1, 2, 3, 5, 1, 2],  # the chain drafts one token, then the evidence runs out
        [1, 2, 3, 1, 2, 3, 1, 2],  # a repeated passage: the chain drafts to the budget
    ],
)
def test_the_tree_stops_where_the_chain_stops_at_the_default_threshold(seq, width):
    chain = NGramDrafter(V, mode="greedy")  # the default threshold; greedy so the chain is the spine
    chain.prepare(seq)
    spine = chain.propose(seq, 4, gen()).token_ids
    tree_drafter = NGramDrafter(V)
    tree_drafter.prepare(seq)
    tree = tree_drafter.propose_tree(seq, 4 * width, width, gen())
    depth, node = 0, -1
    while True:  # walk the spine: the first child of each level
        kids = [i for i, parent in enumerate(tree.parents) if parent == node]
        if not kids:
            break
        node = kids[0]
        depth += 1
        assert tree.token_ids[node] == spine[depth - 1]
    assert depth == len(spine)
