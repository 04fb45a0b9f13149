"""Every acceptance and speed metric by the name each tool gives it, computed from one run's records.

Tools print different quantities under similar names, so "the acceptance rate" of two tools rarely
agree. Here all of them come from the same StepRecords:

* alpha (Leviathan et al. 2023, section 3): E[sum_v min(p_target(v), q_draft(v))] over the drafted
  positions the rule checked; the chance that one draft survives, read off the two distributions.
* acceptance rate = accepted / drafted (vLLM's "Avg Draft acceptance rate", llama.cpp's "accept"):
  drafts discarded unexamined after a rejection count as drafted, so it falls as k grows.
* mean acceptance length = 1 + accepted / drafting rounds (vLLM's "Mean acceptance length").
* tokens per target pass = new tokens / target passes (EAGLE's average acceptance length tau,
  Spec-Bench's mean accepted tokens): every round counts, drafting or not, and EOS / length cuts too.
* acceptance at draft position i, conditional: accepted at i / rounds that reached i (drafts 1..i-1
  kept and a draft at i). Under Leviathan's independence assumption it equals alpha at every i.
  vLLM's "Per-position acceptance rate" is unconditional (accepted at i / drafting rounds), the product
  of the conditional rates up to i.
* measured speedup: plain decoding's decode time for as many tokens / this run's decode time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specviz.core.records import StepRecord


@dataclass(frozen=True)
class PositionAcceptance:
    """Draft position i (1-based) over a run: how often the rule reached it, and how often it kept it."""

    position: int
    reached: int  # rounds where drafts 1..i-1 were kept and a draft at i was checked
    accepted: int
    drafting_rounds: int  # rounds that drafted at least one token (vLLM's num_drafts)

    @property
    def rate(self) -> float | None:
        """Conditional: accepted at i given position i was reached."""
        return self.accepted / self.reached if self.reached else None

    @property
    def unconditional(self) -> float | None:
        """vLLM's per-position rate: accepted at i / drafting rounds."""
        return self.accepted / self.drafting_rounds if self.drafting_rounds else None


@dataclass(frozen=True)
class MetricInfo:
    key: str  # the JSON key (CLI stats)
    name: str
    definition: str
    printed_by: str


METRIC_INFO: tuple[MetricInfo, ...] = (
    MetricInfo(
        "alpha", "α (Leviathan)",
        "E[Σ_v min(p_target(v), q_draft(v))] over the drafted positions the rule checked: the chance one draft survives, "
        "read off the full distributions. A drafter with no q (prompt lookup) proposes a one-hot q, so this is the mean p_target of its drafts.",
        "Leviathan et al. 2023 (α, §3); specviz",
    ),
    MetricInfo(
        "acceptance_rate", "acceptance rate (accepted / drafted)",
        "Kept drafts over all drafted tokens, counting the ones discarded unexamined after a rejection, so it falls as k grows even when α does not.",
        "vLLM (“Avg Draft acceptance rate”), llama.cpp (“accept”, draft acceptance rate)",
    ),
    MetricInfo(
        "mean_acceptance_length", "mean acceptance length",
        "1 + accepted drafts per drafting round: tokens a drafting round yields, the target's own token included. Rounds that drafted nothing are left out.",
        "vLLM (“Mean acceptance length”)",
    ),
    MetricInfo(
        "tokens_per_target_pass", "tokens per target pass",
        "New tokens ÷ target passes, every round counted (drafting or not, EOS and length cuts included): the compression of the target's passes.",
        "EAGLE (average acceptance length τ), Spec-Bench (mean accepted tokens), Medusa (acceleration rate)",
    ),
    MetricInfo(
        "position_acceptance", "acceptance at draft position i",
        "Accepted at i ÷ rounds that reached i (drafts 1…i−1 kept), with the count. Leviathan's formula assumes it is α at every i. "
        "vLLM's per-position rate divides by all drafting rounds instead: the product of these up to i.",
        "specviz (conditional); vLLM (“Per-position acceptance rate”, unconditional)",
    ),
    MetricInfo(
        "speedup", "measured speedup",
        "Plain decoding's decode time for as many tokens ÷ this run's, same target, prompt and sampling, measured in the same process (prefill excluded).",
        "Spec-Bench, EAGLE and most papers (“speedup”, wall clock)",
    ),
)


@dataclass(frozen=True)
class RunMetrics:
    """The metrics of METRIC_INFO for one run (None where undefined, e.g. no drafts or no baseline)."""

    rounds: int
    drafting_rounds: int
    new_tokens: int
    drafted: int
    accepted: int
    alpha: float | None
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    tokens_per_target_pass: float | None
    position_acceptance: tuple[PositionAcceptance, ...]
    speedup: float | None

    def to_json(self) -> dict:
        return {
            "alpha": self.alpha,
            "acceptance_rate": self.acceptance_rate,
            "mean_acceptance_length": self.mean_acceptance_length,
            "tokens_per_target_pass": self.tokens_per_target_pass,
            "drafting_rounds": self.drafting_rounds,
            "position_acceptance": [
                {"position": p.position, "reached": p.reached, "accepted": p.accepted, "rate": p.rate, "unconditional": p.unconditional}
                for p in self.position_acceptance
            ],
            "speedup": self.speedup,
        }


def _verified(record: StepRecord) -> int:
    """Drafted positions the rule looked at: the kept ones plus the first rejection (cut drafts are 'discarded')."""
    return sum(f in ("accepted", "rejected") for f in record.draft_fates)


def position_acceptance(records: Sequence[StepRecord]) -> tuple[PositionAcceptance, ...]:
    """Conditional acceptance at each draft position 1..max drafted, with counts."""
    depth = max((r.num_drafted for r in records), default=0)
    reached, accepted = [0] * depth, [0] * depth
    for r in records:
        for i, fate in enumerate(r.draft_fates):
            if fate not in ("accepted", "rejected"):
                break
            reached[i] += 1
            accepted[i] += fate == "accepted"
    drafting = sum(r.num_drafted > 0 for r in records)
    return tuple(PositionAcceptance(i + 1, reached[i], accepted[i], drafting) for i in range(depth))


def alpha_of(records: Sequence[StepRecord]) -> float | None:
    """Leviathan's alpha; for drafters without a q, the mean p_target of the checked drafts (Σ min(p, one-hot q))."""
    values: list[float] = []
    for r in records:
        values.extend(r.overlap if r.has_q else r.p_target[: _verified(r)])
    return sum(values) / len(values) if values else None


def decode_ms(records: Sequence[StepRecord]) -> float:
    return sum(r.round_ms for r in records)


def baseline_ms_for(baseline: Sequence[StepRecord], tokens: int) -> float | None:
    """Plain decoding's decode time for its first ``tokens`` tokens; past its end, extrapolated at its mean pace."""
    per_token = [r.round_ms / len(r.emitted) for r in baseline for _ in r.emitted]
    if not per_token:
        return None
    if tokens <= len(per_token):
        return sum(per_token[:tokens])
    return sum(per_token) / len(per_token) * tokens


def measured_speedup(records: Sequence[StepRecord], baseline: Sequence[StepRecord]) -> float | None:
    """Plain decoding's decode time for as many tokens ÷ this run's (round_ms, prefill excluded); None without both."""
    tokens, ms = sum(len(r.emitted) for r in records), decode_ms(records)
    base_ms = baseline_ms_for(baseline, tokens)
    if not tokens or not ms > 0 or not base_ms:
        return None
    return base_ms / ms


def run_metrics(records: Sequence[StepRecord], baseline: Sequence[StepRecord] = ()) -> RunMetrics:
    """All the metrics of one run from its records (and, for the speedup, plain decoding's records)."""
    new_tokens = sum(len(r.emitted) for r in records)
    drafted = sum(r.num_drafted for r in records)
    accepted = sum(r.num_accepted for r in records)
    drafting = sum(r.num_drafted > 0 for r in records)
    return RunMetrics(
        rounds=len(records),
        drafting_rounds=drafting,
        new_tokens=new_tokens,
        drafted=drafted,
        accepted=accepted,
        alpha=alpha_of(records),
        acceptance_rate=accepted / drafted if drafted else None,
        mean_acceptance_length=1.0 + accepted / drafting if drafting else None,
        tokens_per_target_pass=new_tokens / len(records) if records else None,
        position_acceptance=position_acceptance(records),
        speedup=measured_speedup(records, baseline) if baseline else None,
    )
