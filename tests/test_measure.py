"""The measurement harness: rotation, warm-up, pairing. No clocks are asserted (timings are noisy)."""

import pytest

from specviz.experiments.measure import Spread, interleave, paired_ratio, timed


def test_interleave_rotates_the_order_and_drops_the_warmup():
    calls: list[str] = []

    def contender(name):
        def run():
            calls.append(name)
            return len(calls)

        return run

    out = interleave({"a": contender("a"), "b": contender("b"), "c": contender("c")}, repeats=3, warmup=1)
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b", "a", "b", "c"]
    assert out == {"a": [6, 8, 10], "b": [4, 9, 11], "c": [5, 7, 12]}


def test_interleave_reports_progress_and_checks_arguments():
    seen = []
    interleave({"x": lambda: 1}, repeats=2, warmup=0, on_progress=lambda d, t, m: seen.append((d, t)))
    assert seen == [(1, 2), (2, 2)]
    with pytest.raises(ValueError, match="repeats"):
        interleave({"x": lambda: 1}, repeats=0)


def test_paired_ratio_and_spread():
    s = paired_ratio([2.0, 3.0, 8.0], [1.0, 1.0, 2.0])
    assert (s.median, s.low, s.high, s.n) == (3.0, 2.0, 4.0, 3)
    assert Spread.of([float("nan")]).n == 0
    assert str(Spread.of([1.0, 2.0, 3.0])) == "2.00 [1.00–3.00]"


def test_timed_returns_the_value_and_nonnegative_clocks():
    t = timed(lambda: 42)
    assert t.value == 42 and t.wall_s >= 0 and t.cpu_s >= 0
