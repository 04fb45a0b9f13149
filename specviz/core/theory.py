"""Expected speedup of speculative decoding, after Leviathan, Kalman & Matias (2023), section 3.

alpha: the probability that one drafted token is accepted, assumed the same and independent at every
position. k: tokens drafted per round. c: the cost of one draft forward relative to one target
forward. verify_cost: the cost of one (k+1)-token target pass relative to a 1-token pass, either one
number for every k or a measured VerifyCurve c_verify(k) (nearly flat at 1 on a GPU, where a pass is
limited by reading the weights; growing with k on a CPU, where the arithmetic grows with the tokens).
Plain decoding costs 1 per token, so speedup = expected tokens per round / cost of a round.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from specviz.core.limits import MAX_DRAFT_TOKENS


@dataclass(frozen=True)
class VerifyCurve:
    """c_verify(k): a target pass over k+1 tokens divided by a 1-token pass, measured for k = 0..len-1.

    costs[0] is 1 by definition. Past the last measured k the curve goes on along a straight line through
    its last two points (a pass over more tokens costs at least as much as one over fewer)."""

    costs: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.costs) < 2:
            raise ValueError("A verify-cost curve needs at least k = 0 and k = 1.")
        for k, v in enumerate(self.costs):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"verify cost at k = {k} must be a positive number; got {v!r}.")

    @classmethod
    def from_pass_ms(cls, pass_ms: Sequence[float]) -> VerifyCurve:
        """pass_ms[n-1] = time of a pass over n new tokens, n = 1..; returns those times over the first."""
        if len(pass_ms) < 2 or not (pass_ms[0] > 0):
            raise ValueError("Need the times of passes over 1 and 2 or more tokens, the first above 0.")
        return cls(tuple(float(t) / float(pass_ms[0]) for t in pass_ms))

    @property
    def k_max(self) -> int:
        """The largest k measured."""
        return len(self.costs) - 1

    def at(self, k: int) -> float:
        if k < 0:
            raise ValueError(f"k must be >= 0; got {k}.")
        if k <= self.k_max:
            return float(self.costs[k])
        step = max(0.0, self.costs[-1] - self.costs[-2])
        return float(self.costs[-1] + step * (k - self.k_max))


VerifyCost = float | VerifyCurve  # one number for every k, or a measured curve


def verify_cost_at(verify_cost: VerifyCost, k: int) -> float:
    """The verify cost of a round that drafted k tokens."""
    return verify_cost.at(k) if isinstance(verify_cost, VerifyCurve) else float(verify_cost)


def _check(alpha: float, k: int | None = None, c: float | None = None, verify_cost: VerifyCost | None = None) -> None:
    if not (0.0 <= alpha <= 1.0):
        raise ValueError(f"alpha is a probability: it must be between 0 and 1; got {alpha}.")
    if k is not None and (int(k) != k or k < 0):
        raise ValueError(f"k (tokens drafted per round) must be a whole number >= 0; got {k}.")
    if c is not None and not (c >= 0.0):
        raise ValueError(f"c (draft cost relative to the target) must be >= 0; got {c}.")
    if verify_cost is not None and not isinstance(verify_cost, VerifyCurve) and not (verify_cost > 0.0):
        raise ValueError(f"verify_cost (a (k+1)-token pass relative to a 1-token pass) must be > 0; got {verify_cost}.")


def expected_tokens(alpha: float, k: int) -> float:
    """Expected tokens emitted per target pass: (1 - alpha^(k+1)) / (1 - alpha); k+1 at alpha = 1.

    The accepted drafts form a run that stops at the first rejection, and every round adds one more
    token (the resampled one, or the bonus token when all k survive)."""
    _check(alpha, k)
    if alpha == 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def round_cost(k: int, c: float, verify_cost: VerifyCost = 1.0) -> float:
    """Cost of one round in units of a 1-token target pass: k draft forwards and one verify pass."""
    _check(0.0, k, c, verify_cost)
    return verify_cost_at(verify_cost, k) + k * c


def speedup(alpha: float, k: int, c: float, verify_cost: VerifyCost = 1.0) -> float:
    """Expected wall-clock speedup over plain decoding: expected_tokens / (c_verify(k) + k*c).

    At k = 0 with a constant verify cost this is 1 / verify_cost: a round with no drafts is a plain 1-token
    pass charged as a verify (a measured curve has c_verify(0) = 1)."""
    return expected_tokens(alpha, k) / round_cost(k, c, verify_cost)


def best_k(alpha: float, c: float, verify_cost: VerifyCost = 1.0, k_max: int = MAX_DRAFT_TOKENS) -> int:
    """The k in 1..k_max with the highest expected speedup (the smallest such k on ties)."""
    if not (1 <= k_max <= 64):
        raise ValueError(f"k_max must be between 1 and 64; got {k_max}.")
    _check(alpha, None, c, verify_cost)
    return max(range(1, k_max + 1), key=lambda k: (speedup(alpha, k, c, verify_cost), -k))


def acceptance_rate(alpha: float, k: int) -> float:
    """accepted/drafted that alpha implies at a fixed k, when positions are independent.

    A round accepts i tokens with probability alpha^i (1 - alpha) (i < k), so the mean accepted count
    is alpha (1 - alpha^k) / (1 - alpha), out of k drafted (discarded drafts count as drafted)."""
    _check(alpha, k)
    if k == 0:
        raise ValueError("accepted/drafted is undefined when nothing is drafted (k = 0).")
    return (expected_tokens(alpha, k) - 1.0) / k


def alpha_from_acceptance_rate(rate: float, k: int) -> float:
    """Invert acceptance_rate: the per-token alpha that gives this accepted/drafted at this k (bisection).

    Only an estimate: it assumes every round drafted exactly k tokens and that positions are independent."""
    if not (0.0 <= rate <= 1.0):
        raise ValueError(f"accepted/drafted must be between 0 and 1; got {rate}.")
    _check(0.0, k)
    if k == 0:
        raise ValueError("accepted/drafted is undefined when nothing is drafted (k = 0).")
    lo, hi = 0.0, 1.0
    for _ in range(60):  # acceptance_rate rises monotonically in alpha
        mid = (lo + hi) / 2.0
        if acceptance_rate(mid, k) < rate:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def expected_tokens_by_position(acceptance: Sequence[float], k: int) -> float:
    """Expected tokens per round when the draft at position i (1-based) survives with probability
    acceptance[i-1] given that position i was reached: 1 + a1 + a1*a2 + ... + a1*...*ak.

    With acceptance = (alpha,)*k this is expected_tokens(alpha, k). Positions past the end of the
    list reuse its last value."""
    if not acceptance:
        raise ValueError("Need the acceptance of at least one draft position.")
    for i, a in enumerate(acceptance):
        if not (0.0 <= a <= 1.0):
            raise ValueError(f"acceptance at position {i + 1} must be between 0 and 1; got {a}.")
    _check(0.0, k)
    total, reach = 1.0, 1.0
    for i in range(k):
        reach *= acceptance[min(i, len(acceptance) - 1)]
        total += reach
    return total


def best_k_by_position(acceptance: Sequence[float], c: float, verify_cost: VerifyCost = 1.0, k_max: int = MAX_DRAFT_TOKENS) -> int:
    """best_k with per-position acceptance instead of one alpha (smallest k on ties)."""
    if not (1 <= k_max <= 64):
        raise ValueError(f"k_max must be between 1 and 64; got {k_max}.")
    return max(range(1, k_max + 1), key=lambda k: (expected_tokens_by_position(acceptance, k) / round_cost(k, c, verify_cost), -k))


# --- B streams at once -------------------------------------------------------------------------------
# A pass over B rows each adding t tokens costs pass_ms[t-1] (measured; specviz profile --batch). Plain decoding
# commits B tokens per 1-token pass; a speculative round commits B * expected_tokens(alpha, k) for one pass over
# k+1 tokens per row plus B*k drafted tokens. At batch 1 that pass costs little more than a 1-token pass (the
# arithmetic is spare); at batch B the B*(k+1) tokens of one pass keep the cores busy, and the ratio falls.
#
# Two things the profile's pass does not show, both charged in batch_round_ms, the one place a round is priced:
# - the width. A batched verify is as wide as its widest row (1 + the most drafts any row proposed), not k+1:
#   prompt lookup drafts nothing on a miss, so at small B many passes are 1 or a few tokens wide. With the
#   measured passes' shapes (`specviz batch` records, per side, how many passes had r rows and width T) the
#   prediction prices each shape; the slider curve, without them, assumes k drafts per row (width k+1).
# - the per-row work outside the forward: the rule, the commit, the rollback, the host transfer, the Python loop,
#   paid by every row every round on BOTH sides. It is taken from the plain side of the same `specviz batch`
#   run (its rounds' wall clock minus its forwards, per row-pass): a measurement of the denominator's machinery,
#   never of the speculative time being predicted, and not fitted to the ratio. It is a lower bound for the
#   speculative side (its rule checks m+1 positions, its drafter rolls back), so an error left over points there.


def _between(xs: Sequence[float], x: float) -> tuple[int, int, float]:
    """Indices i, j of sorted xs around x and the weight of j (linear; past the ends along the last two, clamped below)."""
    if len(xs) == 1 or x <= xs[0]:
        return 0, 0, 0.0
    j = next((n for n, v in enumerate(xs) if v >= x), len(xs) - 1)
    i = j - 1
    return i, j, (x - xs[i]) / (xs[j] - xs[i])


def pass_ms_at(pass_ms: Sequence[float], tokens: float) -> float:
    """ms of a pass adding ``tokens`` per row, from pass_ms[t-1] (t = 1..): linear between whole widths (a mean
    width may be fractional), extrapolated like VerifyCurve past the end."""
    if tokens < 1:
        raise ValueError(f"A pass adds at least one token per row; got {tokens}.")
    curve, base = VerifyCurve.from_pass_ms(pass_ms), float(pass_ms[0])
    lo = int(math.floor(tokens))
    frac = tokens - lo
    low = curve.at(lo - 1) * base
    return low if frac == 0 else low + frac * (curve.at(lo) * base - low)


def batch_pass_ms(table: Mapping[int, Sequence[float]], rows: float, width: float) -> float:
    """ms of one pass over ``rows`` rows each fed ``width`` ids, from a profile's batch_pass_ms {B: [ms, t = 1..]}:
    linear in the rows between the profiled batch sizes around them (the batch shrinks as streams end), past the
    largest along the last two, below the smallest that size's own."""
    if not table:
        raise ValueError("No batched passes to predict from: `python -m specviz profile --batch 1,2,4,8,16` measures them.")
    if rows <= 0:
        raise ValueError(f"A pass holds at least one row; got {rows}.")
    sizes = sorted(table)
    i, j, w = _between(sizes, rows)
    low = pass_ms_at(table[sizes[i]], width)
    return max(0.0, low + w * (pass_ms_at(table[sizes[j]], width) - low)) if j != i else low


def batch_round_ms(table: Mapping[int, Sequence[float]], rows: float, width: float, overhead_ms_per_row: float = 0.0,
                   draft_ms: float = 0.0) -> float:  # fmt: skip
    """One batched round (plain step or speculative round): the pass over rows x width, each row's work outside the
    forward, and the round's drafting (ms over all its rows)."""
    if not (math.isfinite(overhead_ms_per_row) and math.isfinite(draft_ms) and draft_ms >= 0):
        raise ValueError(f"overhead and drafting must be finite ms, drafting >= 0; got {overhead_ms_per_row} and {draft_ms}.")
    return batch_pass_ms(table, rows, width) + rows * overhead_ms_per_row + draft_ms


def batch_plain_tokens_per_s(batch_size: int, pass_ms: Sequence[float], overhead_ms_per_row: float = 0.0) -> float:
    """Plain decoding at batch B: B tokens per round of one 1-token pass over B rows plus B rows' overhead."""
    return batch_size * 1000.0 / batch_round_ms({batch_size: pass_ms}, batch_size, 1, overhead_ms_per_row)


def batch_speculative_tokens_per_s(
    batch_size: int, pass_ms: Sequence[float], alpha: float, k: int, draft_ms_per_token: float = 0.0,
    overhead_ms_per_row: float = 0.0, width: float | None = None, drafted_per_row: float | None = None,
) -> float:  # fmt: skip
    """Speculative decoding at batch B: every row commits expected_tokens(alpha, k) per round; a round is one pass over
    B rows of ``width`` ids (default k+1), B rows' overhead and B*drafted_per_row (default k) drafts at
    draft_ms_per_token each (about 0 for prompt lookup)."""
    _check(alpha, k, draft_ms_per_token)
    width = k + 1 if width is None else width
    drafted = k if drafted_per_row is None else drafted_per_row
    round_ms = batch_round_ms({batch_size: pass_ms}, batch_size, width, overhead_ms_per_row, batch_size * drafted * draft_ms_per_token)
    return batch_size * expected_tokens(alpha, k) * 1000.0 / round_ms


Schedule = Sequence[tuple[int, int, int]]  # (rows, width, passes): how many batched passes had that shape


def schedule_ms(table: Mapping[int, Sequence[float]], schedule: Schedule, overhead_ms_per_row: float = 0.0, draft_ms: float = 0.0) -> float:
    """Predicted ms of a whole batched run from its passes' shapes: every pass priced by batch_round_ms, plus the
    run's drafting (ms over every row and round)."""
    if not schedule:
        raise ValueError("No passes to price: a run's schedule lists (rows, width, passes).")
    return sum(n * batch_round_ms(table, rows, width, overhead_ms_per_row) for rows, width, n in schedule) + draft_ms


def predicted_batch_ratio(table: Mapping[int, Sequence[float]], plain: Schedule, spec: Schedule, plain_tokens: int, spec_tokens: int,
                          overhead_ms_per_row: float, spec_draft_ms: float = 0.0) -> float:  # fmt: skip
    """Speculative over plain tokens/s of two batched runs, predicted from the profile's passes at each run's own
    shapes and one per-row overhead charged to both sides (measured on the plain side; see the notes above)."""
    if plain_tokens <= 0 or spec_tokens <= 0:
        raise ValueError(f"Both runs must have committed tokens; got {plain_tokens} and {spec_tokens}.")
    plain_ms = schedule_ms(table, plain, overhead_ms_per_row)
    spec_ms = schedule_ms(table, spec, overhead_ms_per_row, spec_draft_ms)
    return (spec_tokens / spec_ms) / (plain_tokens / plain_ms)


def crossover_batch(batch_sizes: Sequence[int], ratios: Sequence[float]) -> float | None:
    """The batch size where the speculative/plain ratio first falls below 1, interpolated in log2(B) between the
    measured sizes around it; the smallest B if it starts below 1; None if it never does."""
    points = sorted(zip(batch_sizes, ratios))
    for i, (b, r) in enumerate(points):
        if r < 1.0:
            if i == 0:
                return float(b)
            b0, r0 = points[i - 1]
            x0, x1 = math.log2(b0), math.log2(b)
            return float(2 ** (x0 + (r0 - 1.0) / (r0 - r) * (x1 - x0)))
    return None


def best_speedups(alpha: float, costs: Mapping[str, float], verify_cost: VerifyCost = 1.0, k_max: int = MAX_DRAFT_TOKENS) -> dict[str, tuple[int, float]]:
    """name -> (best k, its speedup) at one α for each drafting cost c: the same drafter at several costs (the same
    heads over the full and a reduced vocabulary) set side by side. On a small target a drafting step is a large
    share of a pass, so c moves the best k and the speedup as much as α does."""
    out = {}
    for name, c in costs.items():
        k = best_k(alpha, c, verify_cost, k_max)
        out[name] = (k, speedup(alpha, k, c, verify_cost))
    return out


def vocab_pairs(costs: Mapping[str, float]) -> list[tuple[str, str]]:
    """(full, reduced) names of a profile's drafting costs that time the same drafter over the full vocabulary and
    a draft vocabulary ("medusa" and "medusa@8192"), in the order the profile lists them."""
    return [(name.split("@")[0], name) for name in costs if "@" in name and name.split("@")[0] in costs]
