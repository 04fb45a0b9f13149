"""The toy speculative sampler: the exact rule passes a chi-square test at a fixed seed, the broken variants (and typical acceptance at T > 0) fail."""

from __future__ import annotations

import pytest
import torch

from specviz.core.sampling import SamplingConfig, warp
from specviz.core.toy import (
    TOY_VARIANTS,
    chi_square_pvalue,
    counts_at,
    emitted_distribution,
    expected_tv_noise,
    log_checkpoints,
    normalise,
    sample_first_tokens,
    tv_distance,
    typical_accepted,
    typical_threshold,
)

# (p_target, q_draft): the lab's default, a draft missing tokens p wants, and a p with zeros where q has mass
CASES = [
    ([30, 20, 20, 15, 10, 5], [10, 35, 10, 25, 10, 10]),
    ([0.5, 0.3, 0.2, 0.0], [0.0, 0.1, 0.3, 0.6]),
    ([0.1, 0.6, 0.3], [0.45, 0.45, 0.1]),
]
N = 20_000


def _counts(variant, p, q, n=N, seed=1234):
    samples = sample_first_tokens(torch.tensor(p, dtype=torch.float64), torch.tensor(q, dtype=torch.float64), n, torch.Generator().manual_seed(seed), variant)
    assert samples.shape == (n,) and samples.dtype == torch.long
    return torch.bincount(samples, minlength=len(p))


@pytest.mark.parametrize(("p", "q"), CASES)
def test_exact_rule_passes_chi_square(p, q):
    counts = _counts("exact", p, q)
    assert float(chi_square_pvalue(counts, normalise(p))) > 0.01
    assert float(tv_distance(counts, normalise(p))) < 0.02


@pytest.mark.parametrize("variant", ["resample_from_target", "greedy_draft_soft_q", "typical_acceptance"])
@pytest.mark.parametrize(("p", "q"), CASES)
def test_broken_variants_fail_chi_square(variant, p, q):
    counts = _counts(variant, p, q)
    assert float(chi_square_pvalue(counts, normalise(p))) < 1e-6
    # ... and they converge where the closed form says they do
    assert float(chi_square_pvalue(counts, emitted_distribution(torch.tensor(p), torch.tensor(q), variant))) > 0.01


def test_limits_by_hand():
    p, q = torch.tensor([0.6, 0.4]), torch.tensor([0.2, 0.8])
    assert torch.allclose(emitted_distribution(p, q, "exact"), p.double())
    # kept min(p, q) = [0.2, 0.4]; rejected mass 0.4 drawn from p = [0.24, 0.16]
    assert torch.allclose(emitted_distribution(p, q, "resample_from_target"), torch.tensor([0.44, 0.56], dtype=torch.float64))
    # x = argmax q = 1 kept with 0.4/0.8 = 0.5, else the residual, all on token 0
    assert torch.allclose(emitted_distribution(p, q, "greedy_draft_soft_q"), torch.tensor([0.5, 0.5], dtype=torch.float64))


def test_greedy_draft_is_fine_with_a_one_hot_q():
    """The bug is the soft q: with the one-hot q a greedy drafter really has, the rule is exact again."""
    p, q = [0.5, 0.3, 0.2], [0.0, 1.0, 0.0]
    counts = _counts("greedy_draft_soft_q", p, q)
    assert float(chi_square_pvalue(counts, normalise(p))) > 0.01


def test_same_seed_same_samples():
    p = torch.tensor([0.2, 0.3, 0.5])
    a = sample_first_tokens(p, p, 1000, torch.Generator().manual_seed(7))
    b = sample_first_tokens(p, p, 1000, torch.Generator().manual_seed(7))
    assert torch.equal(a, b)


def test_chi_square_matches_scipy():
    scipy_stats = pytest.importorskip("scipy.stats")
    counts = torch.tensor([48, 30, 12, 10])
    p = normalise([0.4, 0.3, 0.2, 0.1])
    expected = scipy_stats.chisquare(counts.numpy(), (100 * p).numpy()).pvalue
    assert float(chi_square_pvalue(counts, p)) == pytest.approx(expected, rel=1e-9)
    # a count on a token p_target cannot produce is impossible under p_target
    assert float(chi_square_pvalue(torch.tensor([5, 5, 1]), torch.tensor([0.5, 0.5, 0.0]))) == 0.0


def test_counts_at_checkpoints_and_noise_reference():
    samples = torch.tensor([0, 1, 1, 2, 0, 0])
    assert counts_at(samples, 3, [1, 3, 6]).tolist() == [[1, 0, 0], [1, 2, 0], [3, 2, 1]]
    cps = log_checkpoints(10_000, points=20)
    assert cps[0] == 10 and cps[-1] == 10_000 and cps == sorted(set(cps))
    # mean TV of an exact sampler over many seeds is close to the reference curve
    p = normalise([30, 20, 20, 15, 10, 5])
    tvs = [float(tv_distance(_counts("exact", p.tolist(), [1] * 6, n=1000, seed=s), p)) for s in range(100)]
    assert sum(tvs) / len(tvs) == pytest.approx(float(expected_tv_noise(p, [1000])[0]), rel=0.15)


@pytest.mark.parametrize(
    ("p", "q", "variant", "n"),
    [
        ([1, 1], [1, 1, 1], "exact", 10),  # vocabularies differ
        ([-1, 2], [1, 1], "exact", 10),
        ([0, 0], [1, 1], "exact", 10),
        ([1, 1], [float("nan"), 1], "exact", 10),
        ([1], [1], "exact", 10),
        ([1, 1], [1, 1], "typo", 10),
        ([1, 1], [1, 1], "exact", 0),
    ],
)
def test_bad_inputs(p, q, variant, n):
    with pytest.raises(ValueError):
        sample_first_tokens(torch.tensor(p, dtype=torch.float64), torch.tensor(q, dtype=torch.float64), n, torch.Generator(), variant)


def test_variants_are_the_documented_four():
    assert TOY_VARIANTS == ("exact", "resample_from_target", "greedy_draft_soft_q", "typical_acceptance")


def test_typical_threshold_is_medusas():
    """min(eps, delta exp(-H)): a peaked p_target meets eps = 0.09, a flat one delta * exp(-H) = 0.3 / V."""
    assert typical_threshold(torch.tensor([1.0, 0.0, 0.0])) == pytest.approx(0.09)
    assert typical_threshold(torch.full((10,), 0.1)) == pytest.approx(0.03)
    assert typical_accepted(torch.tensor([0.5, 0.45, 0.05])).tolist() == [True, True, False]


LOGITS = torch.tensor([2.0, 1.5, 1.0, 0.2, -0.5, -1.0])  # a target's logits over a toy vocabulary
DRAFT_LOGITS = torch.tensor([0.0, 1.8, 0.5, 1.2, -0.2, 0.3])  # a drafter that likes other tokens


@pytest.mark.parametrize("temperature", [0.7, 1.0, 1.5])
def test_typical_acceptance_is_not_exact_at_positive_temperature(temperature):
    """The known-bad control a serving stack ships: the chi-square test that passes the exact rule rejects it."""
    sampling = SamplingConfig(temperature=temperature)
    p, q = warp(LOGITS, sampling).tolist(), warp(DRAFT_LOGITS, sampling).tolist()
    assert float(chi_square_pvalue(_counts("exact", p, q), normalise(p))) > 0.01
    typical = _counts("typical_acceptance", p, q)
    assert float(chi_square_pvalue(typical, normalise(p))) < 1e-6
    assert float(chi_square_pvalue(typical, emitted_distribution(torch.tensor(p), torch.tensor(q), "typical_acceptance"))) > 0.01


@pytest.mark.parametrize("draft_temperature", [0.0, 1.0])
def test_typical_acceptance_is_greedy_at_temperature_zero(draft_temperature):
    """One-hot p_target: only the argmax clears the bar and the fallback is the argmax, so every token is greedy's."""
    p = warp(LOGITS, SamplingConfig(temperature=0.0))
    q = warp(DRAFT_LOGITS, SamplingConfig(temperature=draft_temperature))
    samples = sample_first_tokens(p, q, 5_000, torch.Generator().manual_seed(3), "typical_acceptance")
    assert samples.eq(int(LOGITS.argmax())).all()
    assert torch.equal(emitted_distribution(p, q, "typical_acceptance"), p.double())


def test_lab_figures_escape_token_names():
    from specviz.viz.lab import histogram_figure, toy_frame

    df = toy_frame(["<b>x</b>", "y", "y"], [0.5, 0.25, 0.25], [0.2, 0.4, 0.4], [50, 30, 20], [0.5, 0.25, 0.25])
    assert df["empirical"].tolist() == [0.5, 0.3, 0.2]
    fig = histogram_figure(df, "<i>title</i>")
    assert list(fig.data[0].x) == ["&lt;b&gt;x&lt;/b&gt;", "y", "y (2)"]  # escaped and made unique
    assert "<i>" not in fig.layout.title.text
