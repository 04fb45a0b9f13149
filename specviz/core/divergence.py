"""Where a greedy run left its baseline, and how close the call was there.

Greedy speculative decoding is token-identical to plain greedy decoding in float32. In bfloat16 or float16
the verify pass scores k+1 positions in one batched matmul while plain decoding scores one, and the two can
round differently: where the target's top two logits are nearly tied, the argmax can flip. This module names
the first position where two greedy outputs differ and the top-1 minus top-2 logit margin each run saw there,
so a difference can be told apart from a bug (a bug rarely strikes at a near-tie).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from specviz.core.records import StepRecord


@dataclass(frozen=True)
class Divergence:
    position: int  # index into the generated tokens (0 = the first new token)
    token: int | None  # this run's token there; None when this run ended before it
    baseline_token: int | None  # the baseline's token there; None when the baseline ended before it
    margin: float | None  # this run's top-1 minus top-2 target logit at that position
    baseline_margin: float | None  # the baseline's

    def to_dict(self) -> dict:
        return asdict(self)


def emitted_margins(records: Sequence[StepRecord]) -> list[float]:
    """Per generated token, the top-2 logit margin of the target row that chose it (in output order)."""
    return [m for r in records for m in r.emitted_margin]


def first_difference(ids: Sequence[int], other: Sequence[int], *, prefix_only: bool = False) -> int | None:
    """The first index where two token sequences differ; where one ends first, its length; None when equal.
    prefix_only: compare only as far as the shorter one goes. The one first-difference rule of specviz."""
    for i, (a, b) in enumerate(zip(ids, other)):
        if a != b:
            return i
    if prefix_only or len(ids) == len(other):
        return None
    return min(len(ids), len(other))


def first_divergence(
    ids: Sequence[int],
    margins: Sequence[float],
    baseline_ids: Sequence[int],
    baseline_margins: Sequence[float],
    *,
    prefix_only: bool = False,
) -> Divergence | None:
    """The first position where two greedy outputs differ, with both margins there; None when identical.
    prefix_only: compare only as far as the shorter one goes (a baseline still being stepped)."""
    i = first_difference(ids, baseline_ids, prefix_only=prefix_only)
    if i is None:
        return None
    return Divergence(i, _at(ids, i), _at(baseline_ids, i), _at(margins, i), _at(baseline_margins, i))


def _at(xs: Sequence, i: int):
    return xs[i] if i < len(xs) else None
