"""The one measurement harness: interleaved repeats, a discarded warm-up, medians with min–max.

Every speed number specviz prints comes through here (``python -m specviz bench``, the Benchmark page,
``scripts/compare_drafters.py``, ``scripts/vs_transformers.py``). A machine is noisy, and it drifts: a run
measured always first, or always right after another, inherits that order's bias. So each repeat calls
every contender once, in an order that rotates from repeat to repeat, and a ratio is the median of the
per-repeat (paired) ratios, which cancels slow drift that hits both sides of a pair alike.
Plain Python, no torch: the callables do the work and synchronise their own device.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

R = TypeVar("R")
ProgressFn = Callable[[int, int, str], None]  # (calls done, calls in total, what just finished)


@dataclass(frozen=True)
class Spread:
    """Median and range of repeated measurements."""

    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        vals = [v for v in values if v == v]  # drop NaN
        if not vals:
            return cls(float("nan"), float("nan"), float("nan"), 0)
        return cls(statistics.median(vals), min(vals), max(vals), len(vals))

    def __str__(self) -> str:
        return f"{self.median:.2f} [{self.low:.2f}–{self.high:.2f}]"


@dataclass(frozen=True)
class Timed(Generic[R]):
    """What one call returned, and the wall-clock and process CPU seconds it took."""

    value: R
    wall_s: float
    cpu_s: float


def timed(fn: Callable[[], R]) -> Timed[R]:
    """Call fn once under both clocks. fn must synchronise its device before returning."""
    wall, cpu = time.perf_counter(), time.process_time()
    value = fn()
    return Timed(value, time.perf_counter() - wall, time.process_time() - cpu)


def interleave(
    contenders: Mapping[str, Callable[[], R]],
    repeats: int = 3,
    warmup: int = 1,
    on_progress: ProgressFn | None = None,
) -> dict[str, list[R]]:
    """Call each contender once per repeat, rotating the order every repeat; the first ``warmup``
    repeats are run and thrown away (allocation, kernel selection, caches). Returns name -> the
    ``repeats`` kept results, in repeat order, so results[a][i] and results[b][i] form a pair."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1; got {repeats}.")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0; got {warmup}.")
    names = list(contenders)
    results: dict[str, list[R]] = {name: [] for name in names}
    total, done = (repeats + warmup) * len(names), 0
    for rep in range(warmup + repeats):
        shift = rep % len(names) if names else 0
        for name in names[shift:] + names[:shift]:
            value = contenders[name]()
            done += 1
            if rep >= warmup:
                results[name].append(value)
            if on_progress:
                on_progress(done, total, f"{name} ({'warm-up' if rep < warmup else f'repeat {rep - warmup + 1}/{repeats}'})")
    return results


def paired_ratio(numerator: Sequence[float], denominator: Sequence[float]) -> Spread:
    """Median and range of numerator[i] / denominator[i] over the repeats (e.g. speed / baseline speed)."""
    if len(numerator) != len(denominator):
        raise ValueError("paired_ratio needs as many measurements on each side.")
    return Spread.of([a / b if b > 0 else float("nan") for a, b in zip(numerator, denominator)])
