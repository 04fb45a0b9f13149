"""The verify rule on toy distributions: what it emits is distributed as p_target, and the test has teeth.

Each chi-square test draws drafts from q_draft, runs the rule, and compares the emitted token's
counts with p_target at a fixed seed. Two known-bad variants, written here and not in the library,
must fail the very same test: (a) resampling from p_target instead of the residual at a rejection;
(b) a greedy draft (x = argmax q_draft) scored with its soft q_draft.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch

from specviz.core.sampling import greedy_warp
from specviz.core.verify import decide, one_hot_q, residual
from tests.toys import Verdict, pooled_pvalue, sample, verify, zero_uniforms

pytestmark = pytest.mark.usefixtures("one_thread")

Rule = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Generator], Verdict]
NUM_SAMPLES = 4_000  # one verify() call each (~0.1 ms); expected counts >= 160 per cell here
PASS_P = 1e-3  # the right rule must clear this
FAIL_P = 1e-6  # the bad variants must fall far below it


def dist(*xs: float) -> torch.Tensor:
    t = torch.tensor(xs, dtype=torch.float32)
    return t / t.sum()


# p_target and q_draft over 6 tokens. "disjoint": q puts mass where p has none (4, 5) and
# p where q has none (0); "shifted": same support, different shape; "q_peaked_elsewhere": q
# nearly one-hot on a token p finds unlikely.
P = dist(0.45, 0.25, 0.15, 0.15, 0.0, 0.0)
CASES = {
    "shifted": (dist(0.3, 0.25, 0.2, 0.15, 0.06, 0.04), dist(0.05, 0.1, 0.15, 0.2, 0.25, 0.25)),
    "disjoint": (P, dist(0.0, 0.1, 0.3, 0.2, 0.2, 0.2)),
    "q_peaked_elsewhere": (P, dist(0.02, 0.02, 0.02, 0.9, 0.02, 0.02)),
}


# -- the known-bad variants ---------------------------------------------------------------------


def verify_resample_from_target(p_target, q_draft, drafted, generator) -> Verdict:
    """Bad variant (a): at a rejection, draw from p_target instead of the residual max(0, p - q)."""
    verdict = verify(p_target, q_draft, drafted, generator)
    if verdict.next_fate != "resampled":
        return verdict
    row = p_target[verdict.num_accepted]
    return dataclasses.replace(verdict, next_token=sample(row, generator), residual=row)


def draw_soft(q_rows: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
    """n drafts x ~ q_draft, one column per drafted position: (n, k)."""
    return torch.stack([torch.multinomial(q, n, replacement=True, generator=generator) for q in q_rows], dim=1)


def draw_greedy(q_rows: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
    """Bad variant (b): the draft takes argmax q_draft but is scored as if it had sampled from q_draft."""
    return q_rows.argmax(dim=-1).expand(n, -1).clone()


# -- the harness ---------------------------------------------------------------------------------


def first_token_counts(p_row, q_row, rule: Rule = verify, draw=draw_soft, n=NUM_SAMPLES, seed=0) -> torch.Tensor:
    """k=1: draft x from q_draft, verify against p_target = [p_row, anything], count the emitted token."""
    g = torch.Generator().manual_seed(seed)
    vocab = p_row.numel()
    p_target = torch.stack([p_row, torch.full((vocab,), 1.0 / vocab)])
    q_draft = q_row.view(1, -1)
    xs = draw(q_draft, n, g)
    counts = [0] * vocab
    for x in xs.unbind(0):
        v = rule(p_target, q_draft, x, g)
        counts[int(x[0]) if v.num_accepted == 1 else v.next_token] += 1
    return torch.tensor(counts)


# -- k = 1: the emitted token follows p_target -----------------------------------------------------


@pytest.mark.parametrize("case", list(CASES))
def test_emitted_token_follows_p_target(case):
    p_row, q_row = CASES[case]
    assert pooled_pvalue(first_token_counts(p_row, q_row), p_row) > PASS_P


@pytest.mark.parametrize("proposal", [0, 4])  # p_target(x) = .45, and 0 (always rejected)
def test_one_hot_q_from_prompt_lookup_keeps_the_rule_exact(proposal):
    q_row = one_hot_q(torch.tensor([proposal]), P.numel())[0]
    assert pooled_pvalue(first_token_counts(P, q_row), P) > PASS_P


@pytest.mark.parametrize("case", ["shifted", "disjoint"])
def test_bad_variant_resampling_from_p_target_fails(case):
    p_row, q_row = CASES[case]
    assert pooled_pvalue(first_token_counts(p_row, q_row, rule=verify_resample_from_target), p_row) < FAIL_P


def test_bad_variant_resampling_from_p_target_fails_for_one_hot_q():
    q_row = one_hot_q(torch.tensor([0]), P.numel())[0]
    assert pooled_pvalue(first_token_counts(P, q_row, rule=verify_resample_from_target), P) < FAIL_P


@pytest.mark.parametrize("case", ["shifted", "disjoint"])
def test_bad_variant_greedy_draft_with_soft_q_fails(case):
    p_row, q_row = CASES[case]
    assert pooled_pvalue(first_token_counts(p_row, q_row, draw=draw_greedy), p_row) < FAIL_P


# -- k = 2: the first two emitted tokens jointly follow p_target --------------------------------------

# Conditionals over 5 tokens: P1(a), P2(b | a) for the target; Q1, Q2 for the draft, with supports
# that differ (the draft never says 0 first; the target never says 4 first).
P1 = dist(0.4, 0.3, 0.2, 0.1, 0.0)
Q1 = dist(0.0, 0.2, 0.2, 0.3, 0.3)
P2 = torch.stack([dist(0.5, 0.5, 0, 0, 0), dist(0, 0.2, 0.3, 0.5, 0), dist(0.1, 0.1, 0.1, 0.1, 0.6), dist(0.6, 0, 0, 0, 0.4), dist(0.2, 0.2, 0.2, 0.2, 0.2)])
Q2 = torch.stack([dist(0.1, 0.9, 0, 0, 0), dist(0.25, 0.25, 0.25, 0.25, 0), dist(0, 0, 0.5, 0.5, 0), dist(0.2, 0.2, 0.2, 0.2, 0.2), dist(0.4, 0, 0, 0, 0.6)])


def first_two_counts(rule: Rule = verify, n: int = NUM_SAMPLES, seed: int = 0) -> torch.Tensor:
    """k=2 rounds: counts (V, V) of the first two emitted tokens. After a rejection at position 1 the
    second token comes from the next round, i.e. from P2 given the resampled token."""
    g = torch.Generator().manual_seed(seed)
    vocab = P1.numel()
    x1 = torch.multinomial(Q1, n, replacement=True, generator=g)
    x2_given = torch.stack([torch.multinomial(Q2[a], n, replacement=True, generator=g) for a in range(vocab)])  # (V, n)
    next_given = torch.stack([torch.multinomial(P2[a], n, replacement=True, generator=g) for a in range(vocab)])
    bonus_row = torch.full((vocab,), 1.0 / vocab)
    counts = torch.zeros(vocab, vocab, dtype=torch.long)
    x1, x2_given, next_given = x1.tolist(), x2_given.tolist(), next_given.tolist()
    for i in range(n):
        a = x1[i]
        drafted = torch.tensor([a, x2_given[a][i]])
        v = rule(torch.stack([P1, P2[a], bonus_row]), torch.stack([Q1, Q2[a]]), drafted, g)
        if v.num_accepted == 0:
            first, second = v.next_token, next_given[v.next_token][i]
        elif v.num_accepted == 1:
            first, second = a, v.next_token
        else:
            first, second = a, int(drafted[1])
        counts[first, second] += 1
    return counts


def test_first_two_emitted_tokens_follow_the_target_jointly():
    assert pooled_pvalue(first_two_counts(), P1[:, None] * P2) > PASS_P


def test_bad_variant_fails_the_joint_test_too():
    assert pooled_pvalue(first_two_counts(rule=verify_resample_from_target), P1[:, None] * P2) < FAIL_P


# -- the rule's bookkeeping, checked exactly ---------------------------------------------------------


def one_hots(ids: list[int], vocab: int) -> torch.Tensor:
    return one_hot_q(torch.tensor(ids), vocab)


def test_greedy_keeps_drafts_while_they_equal_the_target_argmax():
    g = torch.Generator().manual_seed(0)
    p_target = one_hots([2, 5, 1, 4], 6)  # the target's argmax at each of k+1 = 4 positions
    drafted = torch.tensor([2, 5, 3])
    v = verify(p_target, one_hots(drafted.tolist(), 6), drafted, g)
    assert (v.num_accepted, v.next_token, v.next_fate) == (2, 1, "resampled")
    assert v.draft_fates == ("accepted", "accepted", "rejected")
    assert v.accept_prob.tolist() == [1.0, 1.0, 0.0]


@pytest.mark.parametrize("k", [0, 4])
@pytest.mark.parametrize("soft_q", [False, True])
def test_greedy_takes_the_argmax_for_the_draw_and_spends_no_random_number_on_it(soft_q, k):
    """With one-hot p (the temperature-0 warp) the next token's distribution is one-hot on p's argmax at row n, the
    residual's too, so greedy=True must decide exactly what a draw would, using only the k uniforms of the generator;
    given the warp's argmax (sampling.greedy_warp), it decides the same without ranking row n again. k = 0 is a plain
    round."""
    vocab = 8
    for seed in range(40):
        make = torch.Generator().manual_seed(seed)
        target = torch.randint(vocab, (k + 1,), generator=make)
        drafted = torch.where(torch.rand(k, generator=make) < 0.6, target[:k], torch.randint(vocab, (k,), generator=make))
        q = torch.softmax(torch.randn(k, vocab, generator=make), -1) if soft_q else one_hot_q(drafted, vocab)
        drawn, taken = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        a = decide(one_hot_q(target, vocab), q, drafted, drawn)
        b = decide(one_hot_q(target, vocab), q, drafted, taken, greedy=True)
        assert (int(b.num_accepted), int(b.next_token)) == (int(a.num_accepted), int(a.next_token))
        assert torch.equal(b.next_dist, a.next_dist)  # the residual of a one-hot p is p itself, bit for bit
        assert int(b.next_token) == int(target[int(b.num_accepted)]) and torch.equal(a.uniforms, b.uniforms)
        assert torch.equal(taken.get_state(), _after_rand(seed, k))  # the uniforms, and nothing for the next token
        p, argmax = greedy_warp(one_hot_q(target, vocab) * 3.0 - 1.0)  # logits whose argmax is target
        assert torch.equal(p, one_hot_q(target, vocab)) and torch.equal(argmax, target)
        c = decide(p, q, drafted, torch.Generator().manual_seed(seed), greedy=True, argmax=argmax)
        assert (int(c.num_accepted), int(c.next_token)) == (int(b.num_accepted), int(b.next_token))
        assert torch.equal(c.next_dist, b.next_dist) and torch.equal(c.accept_prob, b.accept_prob)


def _after_rand(seed: int, k: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    torch.rand(k, generator=g)
    return g.get_state()


def test_all_accepted_draws_the_bonus_from_the_last_row():
    g = torch.Generator().manual_seed(0)
    p_target = one_hots([2, 5, 1, 4], 6)
    drafted = torch.tensor([2, 5, 1])
    v = verify(p_target, one_hots(drafted.tolist(), 6), drafted, g)
    assert (v.num_accepted, v.next_token, v.next_fate, v.residual) == (3, 4, "bonus", None)
    assert v.draft_fates == ("accepted",) * 3


def test_nothing_drafted_is_a_plain_target_sample():
    v = verify(one_hots([3], 6), torch.zeros(0, 6), torch.zeros(0, dtype=torch.long), torch.Generator().manual_seed(0))
    assert (v.num_accepted, v.next_token, v.next_fate, v.draft_fates) == (0, 3, "target", ())


def test_every_uniform_is_kept_and_fates_follow_the_first_rejection():
    g = torch.Generator().manual_seed(3)
    p_target = torch.stack([dist(0.5, 0.5, 0, 0)] * 5)
    q_draft = torch.stack([dist(0, 0, 0.5, 0.5)] * 4)  # p(x) = 0 everywhere q drafts: the first is rejected
    v = verify(p_target, q_draft, torch.tensor([2, 3, 2, 3]), g)
    assert v.uniforms.shape == (4,) and ((v.uniforms >= 0) & (v.uniforms < 1)).all()
    assert v.draft_fates == ("rejected", "discarded", "discarded", "discarded")
    assert v.next_token in (0, 1) and torch.allclose(v.residual, dist(0.5, 0.5, 0, 0))


def test_accept_prob_is_min_one_p_over_q():
    p_target = torch.stack([dist(0.2, 0.8), dist(0.6, 0.4), dist(0.5, 0.5)])
    q_draft = torch.stack([dist(0.4, 0.6), dist(0.3, 0.7)])
    v = verify(p_target, q_draft, torch.tensor([0, 0]), torch.Generator().manual_seed(0))
    assert v.accept_prob.tolist() == pytest.approx([0.5, 1.0])


def test_residual_is_normalised_positive_part_and_falls_back_to_p():
    p_target, q_draft = dist(0.5, 0.3, 0.2, 0.0), dist(0.2, 0.4, 0.1, 0.3)
    assert residual(p_target, q_draft).tolist() == pytest.approx([0.75, 0.0, 0.25, 0.0], abs=1e-6)
    assert torch.allclose(residual(p_target, p_target), p_target)


def test_the_decision_holds_the_normalised_residual_where_p_and_q_overlap():
    """p and q share mass, so max(0, p - q) sums to .4, not 1: what the next token was drawn from (and what the
    record and the inspector's chart show) must be residual(p, q) itself, summing to 1. (Disjoint p and q would
    not tell: there p - q is normalised already.)"""
    p_target = torch.stack([dist(0.5, 0.3, 0.2, 0.0), dist(0.25, 0.25, 0.25, 0.25)])
    q_draft = dist(0.2, 0.4, 0.1, 0.3).view(1, -1)
    v = verify(p_target, q_draft, torch.tensor([3]), torch.Generator().manual_seed(0))  # p(3) = 0: always rejected
    assert v.num_accepted == 0 and v.next_token in (0, 2)
    assert v.residual.tolist() == pytest.approx(residual(p_target[0], q_draft[0]).tolist(), abs=1e-6)  # [.75, 0, .25, 0]
    assert float(v.residual.sum()) == pytest.approx(1.0, abs=1e-6)


def test_a_token_the_target_forbids_is_rejected_even_at_u_zero(monkeypatch):
    """Keep x when u < min(1, p/q): at p(x) = 0 that is never, even for u = 0 (u <= 0 would keep it)."""
    zero_uniforms(monkeypatch)
    p_target = torch.stack([dist(0.5, 0.5, 0.0), dist(1, 1, 1)])
    v = verify(p_target, dist(0.2, 0.2, 0.6).view(1, -1), torch.tensor([2]), torch.Generator().manual_seed(0))
    assert v.uniforms.tolist() == [0.0] and v.accept_prob.tolist() == [0.0]
    assert v.num_accepted == 0 and v.draft_fates == ("rejected",) and v.next_token in (0, 1)


@pytest.mark.parametrize("u_zero", [False, True])
def test_a_draft_with_q_zero_is_rejected(monkeypatch, u_zero):
    """A correct drafter never proposes x with q(x) = 0; if one does, the guard rejects it (accept probability 0)
    rather than dividing by zero, however much the target likes x."""
    if u_zero:
        zero_uniforms(monkeypatch)
    p_target = torch.stack([dist(0.6, 0.3, 0.1), dist(1, 1, 1)])
    v = verify(p_target, dist(0.0, 0.5, 0.5).view(1, -1), torch.tensor([0]), torch.Generator().manual_seed(0))
    assert v.accept_prob.tolist() == [0.0] and v.num_accepted == 0 and v.draft_fates == ("rejected",)


def test_wrong_shapes_raise_value_error():
    with pytest.raises(ValueError, match="k\\+1 rows"):
        verify(torch.rand(2, 4), torch.rand(2, 4), torch.tensor([0, 1]), torch.Generator())
