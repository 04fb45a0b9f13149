"""Bursts in a token stream, read from arrival times alone: what speculative decoding looks like from outside.

A server that speculates commits a round's tokens together: one target pass, then several tokens at once. Seen
from the client, the gaps between tokens are bimodal: near zero inside a round (the tokens came in one chunk, or in
chunks written back to back) and about one target pass between rounds. Plain decoding commits one token per pass,
an even cadence. So, from the arrival times (and the tokens each chunk carried):

1. gaps: the time between consecutive tokens after the first (the first token's wait is the time to first token,
   prefill included, and says nothing of the cadence); tokens of one chunk have a gap of zero;
2. the burst threshold, taken from the data: the valley of the log-gap histogram, found as Otsu's split (the cut
   that best separates two groups), placed in the middle of the empty stretch between them; only when the two
   groups' medians lie at least 10x apart is the stream called bimodal, otherwise the fallback threshold is a quarter
   of the median gap (an even stream then has no gap under it);
3. bursts: runs of tokens joined by gaps under the threshold; tokens per burst estimates tau, the tokens each target
   pass commits (new tokens / bursts, EAGLE's average acceptance length);
4. a verdict, with what else makes a stream burst: a server or proxy that buffers its output, or sends fixed-size
   chunks, also bursts, but in bursts of about one size; speculation's bursts vary (a rejected first draft gives
   a burst of one token, a fully accepted round k+1), and never exceed k+1 tokens (17 here).

Plain Python and numpy: no torch, nothing of specviz.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from specviz.core.limits import MAX_DRAFT_TOKENS

FLOOR_S = 1e-6  # a gap of zero (tokens that came in one chunk) is drawn and split at 1 µs
MIN_GAPS = 8  # fewer gaps than this say nothing about a cadence
SEPARATION = 1.0  # log10: the two groups' medians at least 10x apart for the stream to count as bimodal
FALLBACK_FRACTION = 0.25  # not bimodal: the threshold is a quarter of the median gap
MAX_ROUND_TOKENS = MAX_DRAFT_TOKENS + 1  # a speculative round commits at most k+1 tokens (k <= 16 here, and in most servers)
REGULAR_CV = 0.15  # burst sizes this even (coefficient of variation) look like a buffer or fixed-size chunks
EVEN_TAU = 1.1  # at most this many tokens per burst: no sign of speculation
FAST_GAP_S, SLOW_GAP_S = 1e-3, 10e-3  # the shares of gaps under 1 ms and over 10 ms (the measured table's columns)

Verdict = Literal["speculating", "even", "regular", "long-runs", "too-little"]

CAVEATS = (
    "A server or proxy that buffers its output (flushes every few tokens or milliseconds) or sends fixed-size chunks "
    "also streams in bursts. The probe tells them apart by the burst sizes: a buffer's bursts are about one size, "
    "speculation's vary from one token (a rejected first guess) to k+1 (every guess kept) and never pass k+1.",
    "Chunks that carry several tokens are counted as several tokens arriving at once (a gap of zero): a service that "
    "sends one chunk per round shows its rounds in the chunk sizes, one that sends one chunk per token in the gaps.",
    "Speculation that keeps nearly every guess (copying text) gives bursts of one size too: probe the same service on "
    "prose, where speculation's bursts shrink and a buffer's do not.",
    "The first token waits for the prompt's prefill and is left out of the cadence; a busy server (other users' requests "
    "batched with yours) or a slow network adds gaps the model did not make.",
)


@dataclass(frozen=True)
class Arrivals:
    """One streamed response: when each chunk arrived and how many tokens it carried."""

    times_s: tuple[float, ...]  # per chunk with text, seconds since the request was sent, non-decreasing
    tokens: tuple[int, ...]  # per chunk: tokens it carried (1 per chunk when counted as chunks)

    def __post_init__(self) -> None:
        if len(self.times_s) != len(self.tokens):
            raise ValueError(f"Arrivals need one token count per chunk; got {len(self.times_s)} times and {len(self.tokens)} counts.")
        if any(not math.isfinite(t) or t < 0 for t in self.times_s):
            raise ValueError("Arrival times must be finite seconds since the request, at least 0.")
        if any(b < a for a, b in zip(self.times_s, self.times_s[1:])):
            raise ValueError("Arrival times must not decrease.")
        if any(n < 0 for n in self.tokens):
            raise ValueError("A chunk carries at least 0 tokens.")

    @classmethod
    def of(cls, times_s: Sequence[float], tokens: Sequence[int] | None = None) -> Arrivals:
        """Chunks with text only (a chunk of 0 tokens is dropped); tokens None: one token per chunk."""
        counts = [1] * len(times_s) if tokens is None else [int(n) for n in tokens]
        kept = [(float(t), n) for t, n in zip(times_s, counts) if n > 0]
        return cls(tuple(t for t, _ in kept), tuple(n for _, n in kept))

    @property
    def num_tokens(self) -> int:
        return sum(self.tokens)

    def token_times(self) -> np.ndarray:
        """(num_tokens,) each token's arrival: a chunk's time once per token it carried."""
        return np.repeat(np.asarray(self.times_s, dtype=np.float64), np.asarray(self.tokens, dtype=np.int64))

    def gaps(self) -> np.ndarray:
        """(num_tokens - 1,) seconds between consecutive tokens after the first; 0 inside a chunk."""
        times = self.token_times()
        return np.diff(times) if len(times) > 1 else np.zeros(0)

    @property
    def ttft_s(self) -> float | None:
        return self.times_s[0] if self.times_s else None

    @property
    def last_s(self) -> float | None:
        return self.times_s[-1] if self.times_s else None

    def decode_tokens_per_s(self) -> float | None:
        """Tokens after the first chunk / the time from the first chunk to the last: the decoding rate, prefill left out."""
        if len(self.times_s) < 2 or self.times_s[-1] <= self.times_s[0]:
            return None
        return (self.num_tokens - self.tokens[0]) / (self.times_s[-1] - self.times_s[0])


@dataclass(frozen=True)
class Threshold:
    """Where gaps stop counting as 'within a burst'."""

    seconds: float
    bimodal: bool  # True: the valley between two groups 10x apart; False: the fallback (a quarter of the median)
    short_median_s: float | None = None  # the two groups' medians when bimodal
    long_median_s: float | None = None


def log_gaps(gaps: Sequence[float] | np.ndarray) -> np.ndarray:
    """log10 of the gaps, zeros floored at FLOOR_S."""
    return np.log10(np.maximum(np.asarray(gaps, dtype=np.float64), FLOOR_S))


def split_threshold(gaps: Sequence[float] | np.ndarray) -> Threshold:
    """The burst threshold of a set of gaps: Otsu's split of their logs, at the middle of the empty stretch between
    the two groups, when the groups' medians are SEPARATION decades apart; else FALLBACK_FRACTION of the median gap."""
    values = np.sort(log_gaps(gaps))
    n = len(values)
    if n == 0:
        return Threshold(FLOOR_S, False)
    fallback = Threshold(max(FLOOR_S, FALLBACK_FRACTION * float(10 ** np.median(values))), False)
    if n < MIN_GAPS or values[0] == values[-1]:
        return fallback
    # between-class variance w0 * w1 * (m0 - m1)^2 for every cut between values[i-1] and values[i]
    sums = np.cumsum(values)
    i = np.arange(1, n)
    w0, w1 = i / n, (n - i) / n
    m0 = sums[:-1] / i
    m1 = (sums[-1] - sums[:-1]) / (n - i)
    between = w0 * w1 * (m0 - m1) ** 2
    between[values[1:] == values[:-1]] = -1.0  # cut only between different values
    cut = int(np.argmax(between)) + 1
    short, long = values[:cut], values[cut:]
    short_med, long_med = float(np.median(short)), float(np.median(long))
    if long_med - short_med < SEPARATION:
        return fallback
    # the valley: the widest empty stretch of sorted values between the two medians (the Otsu cut lies in one)
    lo, hi = np.searchsorted(values, short_med, "right"), np.searchsorted(values, long_med, "left")
    stretch = values[max(lo - 1, 0) : hi + 1]
    widest = int(np.argmax(np.diff(stretch))) if len(stretch) > 1 else 0
    middle = (stretch[widest] + stretch[widest + 1]) / 2 if len(stretch) > 1 else (values[cut - 1] + values[cut]) / 2
    return Threshold(float(10**middle), True, float(10**short_med), float(10**long_med))


def burst_sizes(arrivals: Arrivals, threshold_s: float) -> list[int]:
    """Tokens per burst: runs of tokens whose gaps are under the threshold (a zero gap always joins)."""
    gaps = arrivals.gaps()
    if arrivals.num_tokens == 0:
        return []
    sizes, current = [], 1
    for gap in gaps:
        if max(gap, FLOOR_S) < threshold_s or gap <= 0:
            current += 1
        else:
            sizes.append(current)
            current = 1
    sizes.append(current)
    return sizes


@dataclass(frozen=True)
class BurstReport:
    """What a set of streamed responses says about the server that sent them."""

    num_streams: int
    tokens: int
    chunks: int
    gaps_s: tuple[float, ...]  # every stream's gaps, pooled
    threshold: Threshold
    sizes: tuple[int, ...]  # tokens per burst, every stream's, pooled
    tau: float | None  # tokens / bursts: the estimate of tokens per target pass
    tokens_per_s: float | None  # median over streams of the decoding rate after the first chunk
    ttft_s: float | None  # median time to first token
    share_fast: float | None  # share of gaps under FAST_GAP_S
    share_slow: float | None  # share of gaps over SLOW_GAP_S
    size_cv: float | None  # coefficient of variation of burst sizes
    verdict: Verdict
    summary: str  # one line for people
    caveats: tuple[str, ...] = CAVEATS

    def to_json(self) -> dict:
        return {
            "streams": self.num_streams, "tokens": self.tokens, "chunks": self.chunks,
            "threshold_s": self.threshold.seconds, "bimodal": self.threshold.bimodal,
            "short_median_s": self.threshold.short_median_s, "long_median_s": self.threshold.long_median_s,
            "bursts": len(self.sizes), "tau": self.tau, "burst_sizes": size_counts(self.sizes),
            "tokens_per_s": self.tokens_per_s, "ttft_s": self.ttft_s,
            "share_gaps_under_1ms": self.share_fast, "share_gaps_over_10ms": self.share_slow, "burst_size_cv": self.size_cv,
            "verdict": self.verdict, "summary": self.summary, "caveats": list(self.caveats),
        }  # fmt: skip


def size_counts(sizes: Sequence[int]) -> dict[str, int]:
    """{"1": bursts of one token, "2": ..., ...}: the burst-size histogram, JSON-ready."""
    counts: dict[str, int] = {}
    for size in sorted(sizes):
        counts[str(size)] = counts.get(str(size), 0) + 1
    return counts


def gap_shares(gaps: Sequence[float] | np.ndarray) -> tuple[float | None, float | None]:
    """(share of gaps under 1 ms, share over 10 ms); None without gaps."""
    values = np.asarray(gaps, dtype=np.float64)
    if len(values) == 0:
        return None, None
    return float(np.mean(values < FAST_GAP_S)), float(np.mean(values > SLOW_GAP_S))


def analyze(streams: Sequence[Arrivals]) -> BurstReport:
    """Pool the streams' gaps, take the threshold from them, cut every stream into bursts, and judge."""
    gaps = np.concatenate([s.gaps() for s in streams]) if streams else np.zeros(0)
    threshold = split_threshold(gaps)
    sizes = [n for s in streams for n in burst_sizes(s, threshold.seconds)]
    tokens = sum(s.num_tokens for s in streams)
    rates = [r for s in streams if (r := s.decode_tokens_per_s()) is not None]
    ttfts = [t for s in streams if (t := s.ttft_s) is not None]
    tau = tokens / len(sizes) if sizes else None
    cv = float(np.std(sizes) / np.mean(sizes)) if len(sizes) > 1 else None
    fast, slow = gap_shares(gaps)
    verdict, summary = judge(len(gaps), threshold, sizes, tau, cv)
    return BurstReport(
        len(streams), tokens, sum(len(s.times_s) for s in streams), tuple(float(g) for g in gaps), threshold, tuple(sizes), tau,
        statistics.median(rates) if rates else None, statistics.median(ttfts) if ttfts else None, fast, slow, cv, verdict, summary,
    )  # fmt: skip


def judge(num_gaps: int, threshold: Threshold, sizes: Sequence[int], tau: float | None, cv: float | None) -> tuple[Verdict, str]:
    """The verdict and its one-line summary (see the module docstring for the reasoning)."""
    if num_gaps < MIN_GAPS or tau is None:
        return "too-little", f"Too few tokens to tell ({num_gaps} gaps; at least {MIN_GAPS} needed): ask for longer answers or more requests."
    if not threshold.bimodal or tau <= EVEN_TAU:
        note = "" if tau <= EVEN_TAU else (
            " Some tokens came together, but the gaps have no second mode: a busy client, network or proxy does that."
        )
        return "even", f"Even cadence: no sign of speculation (τ ≈ {tau:.2f} tokens per burst).{note}"
    typical = statistics.median(sizes)
    if typical > MAX_ROUND_TOKENS:
        return "long-runs", (
            f"Bursty, but in long runs ({typical:.0f} tokens typical) between rare pauses: longer than any speculative round "
            f"(at most {MAX_ROUND_TOKENS} tokens), so stalls or buffering, not speculation."
        )
    if cv is not None and cv < REGULAR_CV:
        return "regular", (
            f"Regular bursts of about {typical:.0f} tokens: a server that buffers or sends fixed-size chunks looks like this, "
            "and so does speculation that keeps every guess; probe it on prose to tell them apart."
        )
    return "speculating", f"Bursty: probably speculating, τ ≈ {tau:.2f} tokens per target pass."
