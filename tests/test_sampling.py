"""The warp (temperature, top-k, top-p, greedy) against hand-computed distributions, and its argument checks."""

import math

import pytest
import torch

from specviz.core.sampling import SamplingConfig, warp
from tests.toys import sample


def softmax(xs: list[float]) -> list[float]:
    e = [math.exp(x) for x in xs]
    return [v / sum(e) for v in e]


def logits_of(probs: list[float]) -> torch.Tensor:
    return torch.tensor(probs).log()


def test_temperature_divides_the_logits():
    out = warp(torch.tensor([1.0, 2.0, 3.0]), SamplingConfig(temperature=2.0))
    assert out.tolist() == pytest.approx(softmax([0.5, 1.0, 1.5]), abs=1e-6)


def test_temperature_one_is_plain_softmax_and_low_temperature_sharpens():
    logits = torch.tensor([0.0, 1.0, 2.0])
    assert warp(logits, SamplingConfig(temperature=1.0)).tolist() == pytest.approx(softmax([0.0, 1.0, 2.0]), abs=1e-6)
    cold = warp(logits, SamplingConfig(temperature=0.25))
    assert cold.tolist() == pytest.approx(softmax([0.0, 4.0, 8.0]), abs=1e-6)
    assert cold[2] > warp(logits, SamplingConfig(temperature=1.0))[2]


def test_top_k_keeps_the_k_largest_and_renormalises():
    out = warp(torch.tensor([1.0, 2.0, 3.0, 0.0]), SamplingConfig(temperature=1.0, top_k=2))
    e2, e3 = math.exp(2), math.exp(3)
    assert out.tolist() == pytest.approx([0.0, e2 / (e2 + e3), e3 / (e2 + e3), 0.0], abs=1e-6)


def test_top_k_at_least_vocab_is_a_no_op():
    logits = torch.tensor([1.0, 2.0, 3.0])
    full = warp(logits, SamplingConfig(temperature=1.0))
    assert torch.allclose(warp(logits, SamplingConfig(temperature=1.0, top_k=3)), full)
    assert torch.allclose(warp(logits, SamplingConfig(temperature=1.0, top_k=50)), full)


@pytest.mark.parametrize(
    "top_p, expected",
    [
        (0.75, [0.5 / 0.8, 0.3 / 0.8, 0.0, 0.0]),  # 0.5 < 0.75, so the 0.3 token is needed too
        (0.85, [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0]),
        (0.1, [1.0, 0.0, 0.0, 0.0]),  # the top token always stays
        (1.0, [0.5, 0.3, 0.15, 0.05]),
    ],
)
def test_top_p_keeps_the_smallest_set_reaching_the_mass(top_p, expected):
    out = warp(logits_of([0.5, 0.3, 0.15, 0.05]), SamplingConfig(temperature=1.0, top_p=top_p))
    assert out.tolist() == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize(
    "top_p, expected",
    [
        (0.5, [1.0, 0.0, 0.0, 0.0]),  # the top token's .5 reaches .5 exactly: the .25 token is not needed
        (0.75, [2 / 3, 1 / 3, 0.0, 0.0]),  # .5 + .25 is exactly .75: two tokens, not three
        (0.875, [4 / 7, 2 / 7, 1 / 7, 0.0]),
    ],
)
def test_top_p_stops_where_the_mass_reaches_top_p_exactly(top_p, expected):
    """Dyadic probabilities, so the running mass lands on top_p with no rounding: the set that reaches it is enough."""
    out = warp(logits_of([0.5, 0.25, 0.125, 0.125]), SamplingConfig(temperature=1.0, top_p=top_p))
    assert out.tolist() == pytest.approx(expected, abs=1e-6)


def test_top_p_works_on_unsorted_logits():
    out = warp(logits_of([0.05, 0.3, 0.15, 0.5]), SamplingConfig(temperature=1.0, top_p=0.75))
    assert out.tolist() == pytest.approx([0.0, 0.375, 0.0, 0.625], abs=1e-5)


def test_top_k_then_top_p_on_the_renormalised_rest():
    # top-k=3 leaves [.4, .3, .2] / .9 = [.444, .333, .222]; top-p=.7 then needs the first two
    out = warp(logits_of([0.4, 0.3, 0.2, 0.1]), SamplingConfig(temperature=1.0, top_k=3, top_p=0.7))
    assert out.tolist() == pytest.approx([4 / 7, 3 / 7, 0.0, 0.0], abs=1e-5)


def test_greedy_is_a_one_hot_on_the_argmax_for_any_batch_shape():
    logits = torch.randn(2, 3, 11, generator=torch.Generator().manual_seed(0))
    out = warp(logits, SamplingConfig(temperature=0.0))
    assert out.shape == logits.shape
    assert torch.equal(out.argmax(-1), logits.argmax(-1))
    assert torch.equal(out.sum(-1), torch.ones(2, 3))
    assert set(out.unique().tolist()) == {0.0, 1.0}
    assert SamplingConfig().greedy and not SamplingConfig(temperature=0.5).greedy


def test_warp_returns_float32_rows_that_sum_to_one():
    logits = torch.randn(4, 9, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    out = warp(logits, SamplingConfig(temperature=0.7, top_k=5, top_p=0.9))
    assert out.dtype == torch.float32 and out.shape == (4, 9)
    assert torch.allclose(out.sum(-1), torch.ones(4))
    assert ((out > 0).sum(-1) <= 5).all()


def test_sample_is_reproducible_and_never_picks_a_zero():
    probs = torch.tensor([0.0, 0.5, 0.0, 0.5])
    draws = [sample(probs, torch.Generator().manual_seed(s)) for s in range(50)]
    assert set(draws) <= {1, 3} and len(set(draws)) == 2
    assert draws == [sample(probs, torch.Generator().manual_seed(s)) for s in range(50)]


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(temperature=-0.1), ["temperature", ">= 0", "greedy"]),
        (dict(temperature=float("nan")), ["temperature"]),
        (dict(top_k=-1), ["top_k", "0 turns it off"]),
        (dict(top_p=0.0), ["top_p", "(0, 1]"]),
        (dict(top_p=1.5), ["top_p", "(0, 1]"]),
        (dict(top_p=float("nan")), ["top_p"]),
    ],
)
def test_bad_sampling_values_raise_with_a_helpful_message(kwargs, words):
    with pytest.raises(ValueError) as err:
        SamplingConfig(**kwargs)
    for w in words:
        assert w in str(err.value)
