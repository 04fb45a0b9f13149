"""Speedup theory against hand-computed values, including alpha = 0 and alpha = 1."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from specviz.core.theory import (
    acceptance_rate,
    alpha_from_acceptance_rate,
    best_k,
    expected_tokens,
    round_cost,
    speedup,
)


@pytest.mark.parametrize(
    ("alpha", "k", "tokens"),
    [
        (0.0, 0, 1.0),
        (0.0, 4, 1.0),  # every draft rejected: only the replacement token
        (1.0, 0, 1.0),
        (1.0, 4, 5.0),  # every draft kept plus the bonus token
        (0.5, 2, 1.75),  # 1 + 0.5 + 0.25
        (0.8, 4, 3.3616),  # 1 + 0.8 + 0.64 + 0.512 + 0.4096
    ],
)
def test_expected_tokens_by_hand(alpha, k, tokens):
    assert expected_tokens(alpha, k) == pytest.approx(tokens)


def test_expected_tokens_is_continuous_at_alpha_one():
    assert expected_tokens(1 - 1e-9, 6) == pytest.approx(7.0, rel=1e-6)


@pytest.mark.parametrize(
    ("alpha", "k", "c", "verify_cost", "expected"),
    [
        (0.5, 2, 0.1, 1.0, 1.75 / 1.2),
        (1.0, 4, 0.0, 1.0, 5.0),
        (1.0, 4, 0.25, 1.0, 2.5),  # 5 tokens for 1 + 4 * 0.25 = 2 passes
        (0.0, 3, 0.1, 1.0, 1.0 / 1.3),  # nothing accepted: pure overhead
        (0.5, 2, 0.0, 1.75, 1.0),  # the verify pass eats the whole gain
        (0.8, 4, 0.05, 1.6, 3.3616 / 1.8),
    ],
)
def test_speedup_by_hand(alpha, k, c, verify_cost, expected):
    assert speedup(alpha, k, c, verify_cost) == pytest.approx(expected)
    assert round_cost(k, c, verify_cost) == pytest.approx(verify_cost + k * c)


def test_best_k_by_hand():
    # alpha 0.8, c 0.05: k=7 -> 3.082, k=8 -> 3.092, k=9 -> 3.078
    assert best_k(0.8, 0.05) == 8
    assert best_k(0.0, 0.1) == 1  # nothing is ever accepted: draft as little as possible
    assert best_k(1.0, 0.0, k_max=16) == 16  # free drafts that always survive: draft as much as allowed
    assert best_k(0.6, 28 / 30, 1.6) == 1  # an early exit that costs almost a full pass
    assert speedup(0.6, best_k(0.6, 28 / 30, 1.6), 28 / 30, 1.6) < 1.0


def test_acceptance_rate_relates_the_two_alphas():
    assert acceptance_rate(0.7, 1) == pytest.approx(0.7)  # one draft: the two definitions agree
    assert acceptance_rate(0.8, 4) == pytest.approx(0.5904)  # (0.8 + 0.64 + 0.512 + 0.4096) / 4
    assert acceptance_rate(0.0, 4) == 0.0
    assert acceptance_rate(1.0, 8) == 1.0
    for alpha in (0.1, 0.5, 0.9):
        for k in (1, 3, 8):
            rate = acceptance_rate(alpha, k)
            assert 1 + k * rate == pytest.approx(expected_tokens(alpha, k))
            assert alpha_from_acceptance_rate(rate, k) == pytest.approx(alpha, abs=1e-9)


def test_expected_tokens_matches_simulated_rounds():
    """Draw independent accept/reject per drafted token; count kept drafts before the first rejection, plus one."""
    g = torch.Generator().manual_seed(0)
    alpha, k, n = 0.7, 5, 200_000
    kept = (torch.rand(n, k, generator=g) < alpha).int().cumprod(dim=1).sum(dim=1)  # (n,)
    assert float((kept + 1).float().mean()) == pytest.approx(expected_tokens(alpha, k), rel=0.01)
    assert float(kept.float().mean() / k) == pytest.approx(acceptance_rate(alpha, k), rel=0.01)


@pytest.mark.parametrize(
    "call",
    [
        lambda: expected_tokens(1.2, 4),
        lambda: expected_tokens(-0.1, 4),
        lambda: expected_tokens(0.5, -1),
        lambda: expected_tokens(0.5, 2.5),
        lambda: speedup(0.5, 4, -0.1),
        lambda: speedup(0.5, 4, 0.1, verify_cost=0.0),
        lambda: best_k(0.5, 0.1, k_max=0),
        lambda: acceptance_rate(0.5, 0),
        lambda: alpha_from_acceptance_rate(1.5, 4),
    ],
)
def test_bad_inputs_raise_value_error(call):
    with pytest.raises(ValueError):
        call()


def test_theory_figures():
    from specviz.viz.theory import MEASURED_COLUMNS, heatmap_figure, speedup_grid, worked_examples

    grid = speedup_grid(0.05, 1.0, k_max=8, step=0.1)
    assert len(grid) == 8 * 11
    row = grid[(grid["k"] == 4) & (grid["alpha"] == 0.5)].iloc[0]
    assert row["speedup"] == pytest.approx(speedup(0.5, 4, 0.05))
    measured = pd.DataFrame([{"source": "benchmark", "label": "<script>x</script>", "alpha": 0.6, "k": 4, "speedup": 1.3}], columns=list(MEASURED_COLUMNS))
    fig = heatmap_figure(0.05, 1.0, 0.7, 4, measured)
    names = [t.name for t in fig.data]
    assert "break-even (speedup = 1)" in names  # c = 0.05 has both winning and losing corners
    assert "measured · benchmark" in names
    assert all("<script>" not in str(t.text) for t in fig.data)  # labels are escaped
    # with free drafts and a unit verify pass nothing loses, so there is no break-even line
    assert "break-even (speedup = 1)" not in [t.name for t in heatmap_figure(0.0, 1.0, 0.7, 4).data]
    for _, r in worked_examples().iterrows():
        assert r["speedup"] == pytest.approx(speedup(r["α"], r["k"], r["c"], r["verify cost"]))
        assert r["speedup at best k"] >= r["speedup"]


# --- a measured verify-cost curve c_verify(k) instead of one constant ---------------------------


def test_verify_curve_by_hand():
    from specviz.core.theory import VerifyCurve, verify_cost_at

    curve = VerifyCurve.from_pass_ms([10.0, 12.0, 14.0, 17.0])  # passes over 1..4 tokens
    assert curve.costs == pytest.approx((1.0, 1.2, 1.4, 1.7))
    assert curve.k_max == 3
    assert curve.at(2) == pytest.approx(1.4)
    assert curve.at(5) == pytest.approx(1.7 + 2 * 0.3)  # extrapolated along the last step
    assert verify_cost_at(curve, 1) == pytest.approx(1.2) and verify_cost_at(1.6, 9) == 1.6
    # speedup, round cost and best k read the curve at each k
    assert round_cost(3, 0.1, curve) == pytest.approx(1.7 + 0.3)
    assert speedup(0.8, 2, 0.0, curve) == pytest.approx(expected_tokens(0.8, 2) / 1.4)
    # a flat curve is the constant
    flat = VerifyCurve((1.0,) * 17)
    for alpha in (0.3, 0.8):
        assert best_k(alpha, 0.05, flat) == best_k(alpha, 0.05, 1.0)
        assert speedup(alpha, 4, 0.05, flat) == pytest.approx(speedup(alpha, 4, 0.05, 1.0))


def test_a_growing_curve_moves_best_k_down():
    """With free drafts a constant verify cost always prefers the largest k; a CPU-like curve does not."""
    from specviz.core.theory import VerifyCurve

    cpu_like = VerifyCurve(tuple(1.0 + 0.15 * k for k in range(17)))
    assert best_k(0.9, 0.0, 1.6) == 16
    kb = best_k(0.9, 0.0, cpu_like)
    assert 1 < kb < 16
    assert speedup(0.9, kb, 0.0, cpu_like) == pytest.approx(max(speedup(0.9, k, 0.0, cpu_like) for k in range(1, 17)))


@pytest.mark.parametrize("costs", [(1.0,), (1.0, 0.0), (1.0, float("nan")), (1.0, -2.0)])
def test_bad_verify_curves_raise(costs):
    from specviz.core.theory import VerifyCurve

    with pytest.raises(ValueError):
        VerifyCurve(costs)


def test_expected_tokens_by_position():
    from specviz.core.theory import best_k_by_position, expected_tokens_by_position

    assert expected_tokens_by_position([0.8], 4) == pytest.approx(expected_tokens(0.8, 4))
    assert expected_tokens_by_position([0.5, 0.4, 0.2], 3) == pytest.approx(1 + 0.5 + 0.2 + 0.04)
    assert expected_tokens_by_position([0.5, 0.4], 3) == pytest.approx(1 + 0.5 + 0.2 + 0.08)  # the last rate repeats
    # acceptance that decays with position makes long drafts worth less than one alpha suggests
    decaying = [0.9, 0.6, 0.3, 0.1]
    assert best_k_by_position(decaying, 0.05) < best_k(0.9, 0.05)
    with pytest.raises(ValueError):
        expected_tokens_by_position([], 2)
    with pytest.raises(ValueError):
        expected_tokens_by_position([1.5], 2)


def test_theory_figures_with_a_curve():
    from specviz.core.theory import VerifyCurve
    from specviz.viz.theory import heatmap_figure, speedup_vs_k_frame, verify_curve_figure, verify_curves_frame

    curve = VerifyCurve(tuple(1.0 + 0.1 * k for k in range(9)))  # measured to k = 8
    fig = heatmap_figure(0.0, curve, 0.7, 4)
    assert "measured c_verify(k)" in fig.layout.title.text
    frame = speedup_vs_k_frame(0.7, 0.0, curve)
    assert frame.loc[frame["k"] == 4, "verify_cost"].item() == pytest.approx(1.4)
    assert frame.loc[frame["k"] == 4, "speedup"].item() == pytest.approx(speedup(0.7, 4, 0.0, curve))
    curves = verify_curves_frame({"cpu <b>": curve, "flat": VerifyCurve((1.0, 1.0))}, k_max=12)
    assert len(curves) == 2 * 13
    assert curves[(curves["profile"] == "cpu <b>")]["measured"].sum() == 9  # k = 9..12 extrapolated
    names = [t.name for t in verify_curve_figure({"cpu <b>": curve}, constant=1.6).data]
    assert names == ["cpu &lt;b&gt;"]
