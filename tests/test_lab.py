"""The exactness lab's library (specviz.experiments.lab, specviz.core.toy.run_toy) on a tiny local model; the page only draws these."""

from __future__ import annotations

import pytest
import torch

from specviz.config import RunConfig
from specviz.core.toy import run_toy
from specviz.experiments.lab import greedy_side_by_side, sample_real, summarize_real
from specviz.runs import RunModels


def test_run_toy_exact_and_biased():
    p, q = torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.2, 0.2, 0.6])
    exact = run_toy(p, q, 20_000, seed=0)
    assert exact.checkpoints[-1] == 20_000 and exact.counts.shape == (len(exact.checkpoints), 3)
    assert float(exact.tv[-1]) < 0.02 and torch.allclose(exact.limit, p.double())
    assert exact.overlap == pytest.approx(0.6)
    biased = run_toy(p, q, 20_000, seed=0, variant="resample_from_target")
    assert float(biased.pvalues[-1]) < 1e-6  # the known-bad rule must fail


def test_sample_real_fast_and_engine(tiny_models):
    target = tiny_models["llama"]
    config = RunConfig(target="tiny", drafter="early-exit", exit_layer=1, num_draft_tokens=1, auto_k=False, temperature=1.0, max_new_tokens=2, chat=False)
    fast = sample_real(config, RunModels(target), "the quick brown fox", "fast", 5_000)
    s = summarize_real(fast)
    assert len(fast.spec_tokens) == len(fast.target_tokens) == 5_000 and fast.drafted_runs == 5_000
    assert len(s.names) == len(s.p_buckets) == len(s.spec_counts) == len(fast.token_ids) + 1
    assert sum(s.spec_counts) == 5_000 and s.spec_tv < 0.05 and s.target_tv < 0.05
    seen = []
    engine = sample_real(config, RunModels(target), "the quick brown fox", "engine", 4, on_progress=lambda d, t: seen.append((d, t)))
    assert engine.variant == "exact" and len(engine.spec_tokens) == 4 and seen[-1] == (4, 4)
    assert 0.0 <= summarize_real(engine).target_pvalue <= 1.0


@pytest.mark.parametrize(
    ("mode", "n", "variant", "message"),
    [("slow", 10, "exact", "Unknown mode"), ("fast", 0, "exact", "between 1"), ("engine", 10_000, "exact", "between 1"), ("fast", 10, "bogus", "Unknown rule")],
)
def test_sample_real_rejects_bad_arguments(tiny_models, mode, n, variant, message):
    config = RunConfig(target="tiny", drafter="lookup", num_draft_tokens=1, auto_k=False, temperature=1.0, max_new_tokens=2, chat=False)
    with pytest.raises(ValueError, match=message):
        sample_real(config, RunModels(tiny_models["llama"]), "the cat", mode, n, variant)


def test_greedy_side_by_side(tiny_models):
    config = RunConfig(target="tiny", drafter="lookup", num_draft_tokens=3, auto_k=False, temperature=0.0, max_new_tokens=8, chat=False)
    result = greedy_side_by_side(config, RunModels(tiny_models["llama"]), "the cat sat on the mat and the cat sat on the")
    assert result.identical and result.first_difference is None and len(result.spec_ids) == 8
    assert 0 <= result.accepted <= result.drafted and result.drafted > 0  # the check compared a run that drafted, not two plain runs (issue 43)
    with pytest.raises(ValueError, match="greedy"):
        greedy_side_by_side(RunConfig(target="tiny", temperature=1.0, chat=False), RunModels(tiny_models["llama"]), "the cat")
    with pytest.raises(ValueError):
        greedy_side_by_side(config, RunModels(tiny_models["llama"]), "")


def test_the_p_value_check_over_seeds_tells_an_exact_rule_from_a_biased_one():
    """Issue 43: one chi-square p-value under 0.05 is what an exact rule shows 1 time in 20; the lab shows twenty
    seeds beside it, and the convergence chart shades that band."""
    from specviz.ui.labs.exactness import SEED_CHECK, pvalues_over_seeds
    from specviz.viz.lab import convergence_figure, convergence_frame

    p, q = (30.0, 20.0, 20.0, 15.0, 10.0, 5.0), (10.0, 35.0, 10.0, 25.0, 10.0, 10.0)  # the page's default table
    exact = pvalues_over_seeds(p, q, 10_000, "exact")
    biased = pvalues_over_seeds(p, q, 10_000, "resample_from_target")
    assert len(exact) == SEED_CHECK and sum(x < 0.05 for x in exact) <= 4  # about 1 in 20 (binomial: <= 4 with 98% chance)
    assert sum(x < 0.05 for x in biased) == SEED_CHECK
    fig = convergence_figure(convergence_frame([10, 100], [0.1, 0.01], [0.5, 0.03], [0.1, 0.01]))
    assert any(s.type == "rect" and s.y1 == 0.05 for s in fig.layout.shapes)
    assert any("1 time in 20" in a.text for a in fig.layout.annotations)
