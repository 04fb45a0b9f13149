"""A vectorised toy of one speculative position, for checking exactness by counting.

Given p_target and q_draft over a small vocabulary, draw N first-emitted tokens at once: a drafted
token x, kept when u < min(1, p_target(x) / q_draft(x)), otherwise replaced by a draw from the
residual norm(max(0, p_target - q_draft)). The emitted token is distributed exactly as p_target.
Two tempting mistakes are here too, so their drift can be seen:

* ``resample_from_target``: on a rejection draw from p_target instead of the residual. Tokens the
  draft over-weights are then emitted too often.
* ``greedy_draft_soft_q``: draft x = argmax q_draft (as greedy drafting does) but accept with the
  soft q_draft(x). The rule's proof needs x to be drawn from q_draft, so this is biased too.

And one rule a serving stack really ships:

* ``typical_acceptance``: the Medusa repository's ``evaluate_posterior`` (vLLM's typical acceptance sampler
  follows it). Keep x when p_target(x) > min(eps, delta * exp(-H(p_target))), with eps = 0.09
  (``posterior_threshold``) and delta = 0.3 (``posterior_alpha``); otherwise emit a draw from p_target. It never
  looks at q_draft, so it cannot undo the drafter's preferences: at T > 0 the output leans towards what the drafter
  proposes. At T = 0 (one-hot p_target) only the argmax clears the threshold and the fallback is the argmax, so
  it is greedy decoding exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from specviz.core.verify import residual

ToyVariant = Literal["exact", "resample_from_target", "greedy_draft_soft_q", "typical_acceptance"]
TOY_VARIANTS: tuple[ToyVariant, ...] = ("exact", "resample_from_target", "greedy_draft_soft_q", "typical_acceptance")
MAX_TOY_SAMPLES = 1_000_000
POSTERIOR_THRESHOLD = 0.09  # Medusa's posterior_threshold (eps): a token at least this likely under p_target is kept
POSTERIOR_ALPHA = 0.3  # Medusa's posterior_alpha (delta): scales exp(-entropy), the bar for a flat p_target


def normalise(weights: torch.Tensor | list[float], name: str = "distribution") -> torch.Tensor:
    """(V,) non-negative weights -> (V,) float64 probabilities summing to 1."""
    w = torch.as_tensor(weights, dtype=torch.float64).flatten()
    if w.numel() < 2:
        raise ValueError(f"{name} needs at least two tokens; got {w.numel()}.")
    if not torch.isfinite(w).all() or (w < 0).any():
        raise ValueError(f"{name} weights must be finite and >= 0.")
    total = float(w.sum())
    if total <= 0:
        raise ValueError(f"{name} weights are all zero: give at least one token some weight.")
    return w / total


def typical_threshold(p_target: torch.Tensor, eps: float = POSTERIOR_THRESHOLD, delta: float = POSTERIOR_ALPHA) -> float:
    """(V,) p_target -> min(eps, delta * exp(-H(p_target))), the bar typical acceptance holds a candidate to
    (H in nats, 0 log 0 = 0; Medusa adds 1e-5 inside the log, which moves the bar by less than 1e-4)."""
    p = torch.as_tensor(p_target, dtype=torch.float64)
    entropy = -float(torch.special.xlogy(p, p).sum())
    return min(eps, delta * float(torch.exp(torch.tensor(-entropy))))


def typical_accepted(p_target: torch.Tensor) -> torch.Tensor:
    """(V,) p_target -> (V,) bool: the tokens typical acceptance keeps when they are drafted."""
    p = torch.as_tensor(p_target, dtype=torch.float64)
    return p > typical_threshold(p)


def _check(p_target: torch.Tensor, q_draft: torch.Tensor, variant: str) -> tuple[torch.Tensor, torch.Tensor]:
    if variant not in TOY_VARIANTS:
        raise ValueError(f"Unknown variant {variant!r}; choose one of {', '.join(TOY_VARIANTS)}.")
    p = normalise(p_target, "p_target")
    q = normalise(q_draft, "q_draft")
    if p.numel() != q.numel():
        raise ValueError(f"p_target and q_draft must cover the same vocabulary; got {p.numel()} and {q.numel()} tokens.")
    return p, q


def sample_first_tokens(
    p_target: torch.Tensor,
    q_draft: torch.Tensor,
    num_samples: int,
    generator: torch.Generator,
    variant: ToyVariant = "exact",
) -> torch.Tensor:
    """Draw num_samples first-emitted tokens of one speculative position -> (N,) long ids."""
    p, q = _check(p_target, q_draft, variant)
    if not (1 <= num_samples <= MAX_TOY_SAMPLES):
        raise ValueError(f"num_samples must be between 1 and {MAX_TOY_SAMPLES:,}; got {num_samples}.")
    n = num_samples
    # 1. draft: a sample from q_draft, or its argmax for the greedy-draft bug
    if variant == "greedy_draft_soft_q":
        drafted = torch.full((n,), int(q.argmax()), dtype=torch.long)
    else:
        drafted = torch.multinomial(q, n, replacement=True, generator=generator)  # (N,)
    # 2. accept with min(1, p/q) at the drafted token (q > 0 there, since x came from q or its argmax);
    #    typical acceptance keeps x when p(x) clears its entropy bar, whatever q(x) was
    accept_prob = typical_accepted(p)[drafted].double() if variant == "typical_acceptance" else (p[drafted] / q[drafted]).clamp(max=1.0)
    accepted = torch.rand(n, generator=generator, dtype=torch.float64) < accept_prob
    # 3. on a rejection: the residual, or p_target itself for the resampling bug and for typical acceptance
    fallback = p if variant in ("resample_from_target", "typical_acceptance") else residual(p, q)
    replacement = torch.multinomial(fallback, n, replacement=True, generator=generator)  # (N,)
    return torch.where(accepted, drafted, replacement)


def emitted_distribution(p_target: torch.Tensor, q_draft: torch.Tensor, variant: ToyVariant = "exact") -> torch.Tensor:
    """(V,) the exact distribution each variant's samples converge to (p_target for 'exact')."""
    p, q = _check(p_target, q_draft, variant)
    if variant == "greedy_draft_soft_q":
        x = int(q.argmax())
        keep = min(1.0, float(p[x] / q[x]))
        out = (1.0 - keep) * residual(p, q)
        out[x] += keep
        return out
    if variant == "typical_acceptance":
        kept = torch.where(typical_accepted(p), q, torch.zeros_like(q))  # P(draft v and keep it) = q(v) [p(v) > bar]
        return kept + (1.0 - float(kept.sum())) * p
    kept = torch.minimum(p, q)  # P(draft v and keep it) = q(v) min(1, p(v)/q(v))
    rejected_mass = 1.0 - float(kept.sum())
    fallback = p if variant == "resample_from_target" else residual(p, q)
    return kept + rejected_mass * fallback


def counts_at(samples: torch.Tensor, vocab_size: int, checkpoints: list[int]) -> torch.Tensor:
    """(N,) ids -> (len(checkpoints), V) counts among the first n samples for each n in checkpoints."""
    if any(not (1 <= n <= samples.numel()) for n in checkpoints):
        raise ValueError(f"checkpoints must lie between 1 and the number of samples ({samples.numel()}).")
    return torch.stack([torch.bincount(samples[:n], minlength=vocab_size) for n in checkpoints])


def tv_distance(counts: torch.Tensor, p_target: torch.Tensor) -> torch.Tensor:
    """(..., V) counts vs (V,) probabilities -> (...) total-variation distance 0.5 * sum |freq - p|."""
    counts = counts.to(torch.float64)
    freq = counts / counts.sum(dim=-1, keepdim=True).clamp_min(1.0)
    return 0.5 * (freq - torch.as_tensor(p_target, dtype=torch.float64)).abs().sum(dim=-1)


def chi_square_pvalue(counts: torch.Tensor, p_target: torch.Tensor) -> torch.Tensor:
    """(..., V) counts vs (V,) probabilities -> (...) Pearson chi-square goodness-of-fit p-values.

    Tokens with p_target = 0 are left out of the statistic; a single count on one of them makes the
    sample impossible under p_target, so its p-value is 0."""
    counts = counts.to(torch.float64)
    p = torch.as_tensor(p_target, dtype=torch.float64)
    support = p > 0
    n = counts.sum(dim=-1, keepdim=True)
    expected = n * p[support]
    stat = ((counts[..., support] - expected) ** 2 / expected.clamp_min(1e-300)).sum(dim=-1)
    dof = max(int(support.sum()) - 1, 1)
    # the chi-square survival function is the regularised upper incomplete gamma Q(dof/2, stat/2)
    pvalue = torch.special.gammaincc(torch.tensor(dof / 2.0, dtype=torch.float64), stat / 2.0)
    impossible = (counts[..., ~support] > 0).any(dim=-1)
    return torch.where(impossible, torch.zeros_like(pvalue), pvalue)


def expected_tv_noise(p_target: torch.Tensor, num_samples: torch.Tensor | list[int]) -> torch.Tensor:
    """(V,), (M,) sample sizes -> (M,) the approximate mean TV distance of an exact sampler's histogram
    from p_target: sampling noise alone, 0.5 * sum_v sqrt(2 p (1 - p) / (pi n))."""
    p = torch.as_tensor(p_target, dtype=torch.float64)
    n = torch.as_tensor(num_samples, dtype=torch.float64)
    return 0.5 * torch.sqrt(2.0 * p * (1.0 - p) / torch.pi).sum() / torch.sqrt(n)


def log_checkpoints(num_samples: int, points: int = 30, start: int = 10) -> list[int]:
    """About `points` sample sizes spread evenly on a log scale from `start` to num_samples (inclusive)."""
    if num_samples < 1:
        raise ValueError(f"num_samples must be at least 1; got {num_samples}.")
    start = min(start, num_samples)
    grid = torch.logspace(torch.log10(torch.tensor(float(start))), torch.log10(torch.tensor(float(num_samples))), points)
    return sorted({int(round(float(g))) for g in grid} | {num_samples})


@dataclass(frozen=True)
class ToyRun:
    """N samples of one variant, summarised at log-spaced checkpoints (for the lab's charts)."""

    checkpoints: list[int]  # (M,) sample sizes
    counts: torch.Tensor  # (M, V) counts among the first n samples
    tv: torch.Tensor  # (M,) total-variation distance from p_target
    pvalues: torch.Tensor  # (M,) chi-square p-values against p_target
    noise: torch.Tensor  # (M,) typical TV of an exact sampler at each n
    limit: torch.Tensor  # (V,) where this variant converges
    overlap: float  # sum_v min(p, q): Leviathan's beta, the chance a draft is kept


def run_toy(p_target: torch.Tensor, q_draft: torch.Tensor, num_samples: int, seed: int, variant: ToyVariant = "exact") -> ToyRun:
    """Draw num_samples first tokens of one variant with a generator seeded from `seed`, and measure them."""
    p, q = _check(p_target, q_draft, variant)
    samples = sample_first_tokens(p, q, num_samples, torch.Generator().manual_seed(int(seed)), variant)
    checkpoints = log_checkpoints(num_samples)
    counts = counts_at(samples, p.numel(), checkpoints)
    return ToyRun(
        checkpoints=checkpoints, counts=counts, tv=tv_distance(counts, p), pvalues=chi_square_pvalue(counts, p),
        noise=expected_tv_noise(p, checkpoints), limit=emitted_distribution(p, q, variant), overlap=float(torch.minimum(p, q).sum()),
    )
