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
  kept and a draft at i). For a token tree, position i is depth i: reached when the accepted path got to
  depth i-1 and a node at depth i was tried. Under Leviathan's independence assumption it equals alpha at every i.
  vLLM's "Per-position acceptance rate" is unconditional (accepted at i / drafting rounds), the product
  of the conditional rates up to i.
* acceptance by head (Medusa): the token at draft depth d comes from head d + 1 (draft_heads), so head i's
  conditional rate is the rate at position i; head_acceptance adds how many of the head's tokens the rule tried
  (a tree tries up to W siblings) and the mean probability the head itself gave them (its q_draft there).
* measured speedup: plain decoding's decode time for as many tokens / this run's decode time. It can never exceed
  tokens per target pass: each round is one target pass over k+1 tokens, which costs at least a 1-token pass. A
  measured speedup above it means a clock was disturbed (speedup_disturbed), and it is not reported as a result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specviz.core.records import StepRecord
from specviz.core.tree import tree_depths


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
    speedup: float | None  # None where undefined or disturbed
    speedup_disturbed: bool = False  # measured above tokens per target pass: a clock was disturbed, no result

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
            "speedup_disturbed": self.speedup_disturbed,
        }


def _verified(record: StepRecord) -> int:
    """Drafted positions the rule looked at: the kept ones plus the first rejection (cut drafts are 'discarded')."""
    return sum(f in ("accepted", "rejected") for f in record.draft_fates)


def accepted_depth(record: StepRecord) -> tuple[int, bool]:
    """(n, rejected_next): the depth the rule accepted to (a chain's leading run, a tree's path), and whether it
    tried and rejected something at depth n+1 (a chain's rejected draft; a tree's rejected children)."""
    fates = record.draft_fates
    n = sum(f == "accepted" for f in fates)  # a tree's accepted nodes are its path, one per depth
    depths = tree_depths(record.tree_parents) if record.is_tree else range(len(fates))
    return n, any(f == "rejected" and d == n for f, d in zip(fates, depths))


def draft_depth(record: StepRecord) -> int:
    """How many draft positions (depths) the round drafted: k for a chain, the deepest level for a tree."""
    if record.is_tree:
        return max(tree_depths(record.tree_parents)) + 1
    return record.num_drafted


def position_acceptance(records: Sequence[StepRecord]) -> tuple[PositionAcceptance, ...]:
    """Conditional acceptance at each draft position (a tree's depth) 1..deepest drafted, with counts."""
    depth = max((draft_depth(r) for r in records), default=0)
    reached, accepted = [0] * depth, [0] * depth
    for r in records:
        n, rejected_next = accepted_depth(r)
        for i in range(n + rejected_next):
            reached[i] += 1
            accepted[i] += i < n
    drafting = sum(r.num_drafted > 0 for r in records)
    return tuple(PositionAcceptance(i + 1, reached[i], accepted[i], drafting) for i in range(depth))


def draft_heads(record: StepRecord) -> tuple[int, ...]:
    """The Medusa head (1-based) that proposed each drafted token of a round: a chain's position i and a tree node at
    depth d come from head i + 1 and d + 1. The one place a head is derived; meaningful for a heads drafter only."""
    depths = tree_depths(record.tree_parents) if record.is_tree else range(record.num_drafted)
    return tuple(d + 1 for d in depths)


def table_slots(record: StepRecord) -> tuple[tuple[int, int], ...]:
    """Per drafted node of a token-recycling round: (its parent node, -1 for the newest committed token; its column in
    the parent token's table row). The drafter follows the table, so a node came from its parent token's row, at its
    place among its siblings: a chain's node i is column 0 of node i - 1's row. Meaningful for that drafter only."""
    seen: dict[int, int] = {}
    out = []
    for parent in record.tree_parents if record.is_tree else range(-1, record.num_drafted - 1):
        out.append((parent, seen.get(parent, 0)))
        seen[parent] = seen.get(parent, 0) + 1
    return tuple(out)


@dataclass(frozen=True)
class HeadAcceptance:
    """Medusa head i over a run: its conditional acceptance (position i's) and what it said of the tokens tried."""

    head: int  # 1-based: head i guesses the token i places after the newest committed one
    acceptance: PositionAcceptance  # rounds that tried a token of head i (every earlier head's kept), and kept one
    tokens_tried: int  # the head's tokens the rule tried (a tree tries up to W siblings a round)
    mean_q: float | None  # the head's mean probability (q_draft) for the tokens tried
    mean_p: float | None  # the target's mean p_target for them (at their parent context)

    @property
    def rate(self) -> float | None:
        return self.acceptance.rate


def head_acceptance(records: Sequence[StepRecord]) -> tuple[HeadAcceptance, ...]:
    """Acceptance by head 1..deepest drafted, for a heads drafter's records (see draft_heads)."""
    positions = position_acceptance(records)
    q_sums, p_sums, tried = [0.0] * len(positions), [0.0] * len(positions), [0] * len(positions)
    for r in records:
        for node, head in enumerate(draft_heads(r)):
            if r.draft_fates[node] in ("accepted", "rejected"):
                tried[head - 1] += 1
                q_sums[head - 1] += r.q_draft[node]
                p_sums[head - 1] += r.p_target[node]
    return tuple(
        HeadAcceptance(
            p.position, p, tried[i], q_sums[i] / tried[i] if tried[i] else None, p_sums[i] / tried[i] if tried[i] else None,
        )
        for i, p in enumerate(positions)
    )  # fmt: skip


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


def speedup_disturbed(speedup: float | None, tokens_per_pass: float | None) -> bool:
    """True when a measured speedup is above the tokens per target pass, which no real one can be (a round costs at
    least one plain pass): one of the two clocks was disturbed (contention, a slow baseline), so it is no result."""
    return speedup is not None and tokens_per_pass is not None and speedup > tokens_per_pass * (1.0 + 1e-9)  # float sums


def disturbance_note(speedup: float, tokens_per_pass: float, baseline_ms_per_token: float, run_ms_per_pass: float) -> str:
    """Why a speedup is not shown, for the log and the page's small print."""
    return (
        f"measured speedup {speedup:.2f}× is above the {tokens_per_pass:.2f} tokens per target pass, which no speedup can "
        f"exceed: plain decoding was timed at {baseline_ms_per_token:.1f} ms per token and this run at {run_ms_per_pass:.1f} ms "
        "per target pass, so one of the two clocks was disturbed (other work on the cores)."
    )


def run_metrics(records: Sequence[StepRecord], baseline: Sequence[StepRecord] = ()) -> RunMetrics:
    """All the metrics of one run from its records (and, for the speedup, plain decoding's records)."""
    new_tokens = sum(len(r.emitted) for r in records)
    drafted = sum(r.num_drafted for r in records)
    accepted = sum(r.num_accepted for r in records)
    drafting = sum(r.num_drafted > 0 for r in records)
    tokens_per_pass = new_tokens / len(records) if records else None
    speedup = measured_speedup(records, baseline) if baseline else None
    disturbed = speedup_disturbed(speedup, tokens_per_pass)
    return RunMetrics(
        rounds=len(records),
        drafting_rounds=drafting,
        new_tokens=new_tokens,
        drafted=drafted,
        accepted=accepted,
        alpha=alpha_of(records),
        acceptance_rate=accepted / drafted if drafted else None,
        mean_acceptance_length=1.0 + accepted / drafting if drafting else None,
        tokens_per_target_pass=tokens_per_pass,
        position_acceptance=position_acceptance(records),
        speedup=None if disturbed else speedup,
        speedup_disturbed=disturbed,
    )


@dataclass(frozen=True)
class RunStats:
    """A run's totals and clocks, with its acceptance numbers taken from run_metrics() (the same α,
    acceptance rate and tokens per pass the step-through panel, the Benchmark table and recordings show)."""

    new_tokens: int
    target_passes: int  # verify passes; the prefill is not counted
    tokens_per_target_pass: float
    drafted: int
    accepted: int
    acceptance_rate: float | None  # accepted / drafted, as vLLM and llama.cpp print it
    alpha: float | None  # Leviathan's alpha (alpha_of): mean over checked positions of sum_v min(p, q)
    wall_s: float  # prefill plus every round's round_ms (record building excluded)
    tokens_per_s: float
    mean_acceptance_length: float | None = None  # vLLM: 1 + accepted per drafting round


def summarize(records: Sequence[StepRecord], prefill_ms: float = 0.0) -> RunStats:
    """Derive run statistics from the records alone (acceptance from run_metrics, time from round_ms)."""
    m = run_metrics(records)
    wall_s = (prefill_ms + decode_ms(records)) / 1000.0
    return RunStats(
        new_tokens=m.new_tokens,
        target_passes=m.rounds,
        tokens_per_target_pass=m.tokens_per_target_pass or 0.0,
        drafted=m.drafted,
        accepted=m.accepted,
        acceptance_rate=m.acceptance_rate,
        alpha=m.alpha,
        wall_s=wall_s,
        tokens_per_s=m.new_tokens / wall_s if wall_s > 0 else 0.0,
        mean_acceptance_length=m.mean_acceptance_length,
    )
