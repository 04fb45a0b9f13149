"""The burst analysis (specviz/core/bursts.py) on synthetic arrival times with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from specviz.core.bursts import MAX_ROUND_TOKENS, Arrivals, analyze, burst_sizes, gap_shares, split_threshold

PASS_S = 0.030  # one target pass
INNER_S = 20e-6  # tokens of one round written back to back


def even(n: int, gap: float = PASS_S, jitter: float = 0.0, seed: int = 0) -> Arrivals:
    rng = np.random.default_rng(seed)
    gaps = gap * (rng.lognormal(0.0, jitter, n) if jitter else np.ones(n))
    return Arrivals.of(list(0.2 + np.cumsum(gaps)))


def rounds(sizes: list[int], per_token_chunks: bool, jitter: float = 0.0, seed: int = 0) -> Arrivals:
    """A speculating server: each round one pass, then its tokens at once (one chunk, or one chunk per token)."""
    rng = np.random.default_rng(seed)
    times, tokens, t = [], [], 0.2
    for size in sizes:
        t += PASS_S * (rng.lognormal(0.0, jitter) if jitter else 1.0)
        if per_token_chunks:
            for i in range(size):
                times.append(t + i * INNER_S)
                tokens.append(1)
            t += (size - 1) * INNER_S
        else:
            times.append(t)
            tokens.append(size)
    return Arrivals.of(times, tokens)


KNOWN_SIZES = [1, 4, 9, 2, 9, 1, 3, 6, 9, 1, 2, 5, 7, 1, 9, 4, 3, 1, 8, 2] * 3


def test_an_even_cadence_shows_no_sign_of_speculation():
    report = analyze([even(120)])
    assert report.verdict == "even" and report.tau == pytest.approx(1.0)
    assert not report.threshold.bimodal
    assert report.tokens_per_s == pytest.approx(1 / PASS_S, rel=1e-6)
    assert "no sign of speculation" in report.summary


def test_jitter_alone_is_not_a_burst():
    report = analyze([even(200, jitter=0.3, seed=s) for s in range(3)])
    assert report.verdict == "even"
    assert report.tau < 1.1


@pytest.mark.parametrize("per_token_chunks", [True, False], ids=["one chunk per token", "one chunk per round"])
def test_bursts_of_known_sizes_give_them_back(per_token_chunks):
    stream = rounds(KNOWN_SIZES, per_token_chunks, jitter=0.15)
    report = analyze([stream])
    assert report.threshold.bimodal
    assert INNER_S < report.threshold.seconds < PASS_S * 0.5
    assert list(report.sizes) == KNOWN_SIZES
    assert report.tau == pytest.approx(sum(KNOWN_SIZES) / len(KNOWN_SIZES))
    assert report.verdict == "speculating" and "probably speculating" in report.summary
    fast, slow = gap_shares(stream.gaps())
    assert fast == pytest.approx(1 - (len(KNOWN_SIZES) - 1) / (sum(KNOWN_SIZES) - 1))  # every gap inside a round
    assert fast + slow == pytest.approx(1.0)


def test_several_streams_pool_their_gaps():
    streams = [rounds(KNOWN_SIZES[i::3], True, jitter=0.1, seed=i) for i in range(3)]
    report = analyze(streams)
    assert report.num_streams == 3 and report.tokens == sum(KNOWN_SIZES)
    assert sorted(report.sizes) == sorted(KNOWN_SIZES)


def test_chunks_that_carry_several_tokens_count_as_several_tokens():
    stream = Arrivals.of([0.1, 0.2, 0.3], [3, 0, 2])  # the empty chunk (a role header, a finish chunk) is dropped
    assert stream.num_tokens == 5 and stream.tokens == (3, 2)
    assert list(stream.gaps()) == pytest.approx([0, 0, 0.2, 0])
    assert burst_sizes(stream, 0.05) == [3, 2]


def test_a_buffering_server_bursts_regularly_and_is_not_called_speculating():
    """Plain decoding at 30 ms per token behind a buffer that flushes every 150 ms: bursts of 5, always."""
    token_times = 0.2 + PASS_S * np.arange(1, 151)
    flushes = np.ceil(token_times / 0.150) * 0.150
    times, counts = np.unique(np.round(flushes, 9), return_counts=True)
    report = analyze([Arrivals.of(list(times), list(counts))])
    assert report.threshold.bimodal
    assert report.verdict == "regular", report.summary
    assert "buffers" in report.summary and "prose" in report.summary


def test_fixed_size_chunks_are_regular_too():
    report = analyze([Arrivals.of([0.2 + 4 * PASS_S * i for i in range(1, 40)], [4] * 39)])
    assert report.verdict == "regular"


def test_rare_stalls_are_long_runs_not_speculation():
    gaps = np.full(300, PASS_S)
    gaps[::60] = 0.8  # a pause every 60 tokens
    report = analyze([Arrivals.of(list(0.2 + np.cumsum(gaps)))])
    assert report.verdict == "long-runs"
    assert min(report.sizes) > MAX_ROUND_TOKENS


def test_too_few_tokens_to_tell():
    report = analyze([Arrivals.of([0.1, 0.2, 0.25])])
    assert report.verdict == "too-little"
    assert analyze([]).verdict == "too-little"


def test_the_threshold_sits_in_the_valley():
    gaps = [1e-5] * 30 + [2e-5] * 10 + [0.03] * 20 + [0.04] * 5
    threshold = split_threshold(gaps)
    assert threshold.bimodal
    assert threshold.seconds == pytest.approx(10 ** ((np.log10(2e-5) + np.log10(0.03)) / 2))
    assert not split_threshold([0.03, 0.031, 0.029] * 5).bimodal


def test_report_json_round_numbers():
    report = analyze([rounds(KNOWN_SIZES, False)])
    data = report.to_json()
    assert data["burst_sizes"]["9"] == KNOWN_SIZES.count(9)
    assert data["bursts"] == len(KNOWN_SIZES) and data["verdict"] == "speculating"


def test_bad_arrivals_are_refused():
    with pytest.raises(ValueError, match="decrease"):
        Arrivals.of([0.2, 0.1])
    with pytest.raises(ValueError, match="finite"):
        Arrivals.of([float("nan")])
