"""Every acceptance and speed metric by the name each tool gives it, computed from one run's records.

Tools print different quantities under similar names, so "the acceptance rate" of two tools rarely
agree. Here all of them come from the same StepRecords:

* alpha (Leviathan et al. 2023, section 3): E[sum_v min(p_target(v), q_draft(v))] over the drafted
  positions the rule checked; the chance that one draft survives, read off the two distributions.
* acceptance rate = accepted / drafted (vLLM's "Avg Draft acceptance rate", llama.cpp's "accept"):
  drafts discarded unexamined after a rejection count as drafted, so it falls as k grows.
* mean acceptance length = 1 + accepted / drafting rounds (vLLM's "Mean acceptance length").
* vLLM's per-request object (SpecDecodeSteps, ``metrics.speculative_decoding``): the same counts per verify step
  (a round that drafted), and the acceptance histogram: index j = verify steps that kept exactly j drafts, j = 0..k.
  A token tree's step counts the kept path's drafted tokens as accepted and every node it scored as drafted.
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
  Plain decoding's time for n tokens follows one rule (BaselineClock): measured up to its end; past the end of a
  baseline that finished sooner (EOS), extrapolated at its mean pace; past the end of one still being measured, none.

Every scalar metric is a property of Totals, one formula each; the final numbers (run_metrics) are the last of the
running ones (running_totals), so the page's curves, its metrics table, the CLI and recordings print one number.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace

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
class BaselineClock:
    """Plain decoding's measured decode time, and the one baseline-time rule every speedup in specviz uses.

    Up to the tokens it has measured, its own time (a round's round_ms shared by the tokens it emitted). Past the end
    of a finished baseline (it stopped at EOS or its length sooner than the run), extrapolated at its mean pace per
    token: nothing more will be measured. Past the end of an unfinished one (still being measured, or stopped by an
    error), None: not measured that far, so there is no speedup yet (the page says "measuring…"), never a guess."""

    cumulative_ms: tuple[float, ...]  # decode time after 1, 2, ... tokens
    finished: bool  # its last round reached EOS or its length

    @classmethod
    def of(cls, baseline: Sequence[StepRecord]) -> BaselineClock | None:
        cumulative, total = [], 0.0
        for r in baseline:
            for _ in r.emitted:
                total += r.round_ms / len(r.emitted)
                cumulative.append(total)
        return cls(tuple(cumulative), bool(baseline[-1].finished)) if cumulative else None

    @property
    def ms_per_token(self) -> float:
        return self.cumulative_ms[-1] / len(self.cumulative_ms)

    def ms_for(self, tokens: int) -> float | None:
        """Plain decoding's decode time for its first ``tokens`` tokens, by the rule above."""
        if tokens <= 0:
            return 0.0
        if tokens <= len(self.cumulative_ms):
            return self.cumulative_ms[tokens - 1]
        return self.ms_per_token * tokens if self.finished else None


@dataclass(frozen=True)
class Totals:
    """A run's counts and clocks after its first ``rounds`` rounds, with every scalar metric of METRIC_INFO as a
    property: one formula each, for the run's final numbers (RunMetrics) and its running ones (running_totals)."""

    rounds: int = 0  # target passes (one per round; the prefill is not counted)
    drafting_rounds: int = 0  # rounds that drafted at least one token (vLLM's num_drafts)
    new_tokens: int = 0
    drafted: int = 0
    accepted: int = 0
    checked: int = 0  # drafted positions the rule looked at: the kept ones plus the first rejection
    overlap_sum: float = 0.0  # Σ over them of Σ_v min(p_target(v), q_draft(v)) (one-hot q: p_target of the draft)
    draft_ms: float = 0.0
    decode_ms: float = 0.0  # Σ round_ms: drafting, verify, rule, commit, rollback (record building and prefill excluded)
    baseline_ms: float | None = None  # plain decoding's time for new_tokens (BaselineClock.ms_for); None without it
    baseline_ms_per_token: float | None = None  # plain decoding's mean pace so far (for c); None without a baseline

    @classmethod
    def of_round(cls, r: StepRecord) -> Totals:
        """One round's own counts and clocks (no baseline): what after() adds."""
        return cls(**_round_counts(r))

    def plus(self, other: Totals) -> Totals:
        """Every counter (COUNTERS) summed; the baseline fields left as self's (they are read off a clock)."""
        return replace(self, **{name: getattr(self, name) + getattr(other, name) for name in COUNTERS})

    def after(self, r: StepRecord, clock: BaselineClock | None) -> Totals:
        """These totals with one more round."""
        one = _round_counts(r)
        counts = {name: getattr(self, name) + one[name] for name in COUNTERS}  # a counter _round_counts lacks: KeyError
        return Totals(
            **counts,
            baseline_ms=clock.ms_for(counts["new_tokens"]) if clock else None,
            baseline_ms_per_token=clock.ms_per_token if clock else None,
        )

    @property
    def alpha(self) -> float | None:
        return self.overlap_sum / self.checked if self.checked else None

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def mean_acceptance_length(self) -> float | None:
        return 1.0 + self.accepted / self.drafting_rounds if self.drafting_rounds else None

    @property
    def tokens_per_target_pass(self) -> float | None:
        return self.new_tokens / self.rounds if self.rounds else None

    @property
    def measured_speedup(self) -> float | None:
        """Plain decoding's decode time for as many tokens ÷ this run's, disturbed or not; None without both."""
        if not self.new_tokens or not self.decode_ms > 0 or not self.baseline_ms:
            return None
        return self.baseline_ms / self.decode_ms

    @property
    def speedup_disturbed(self) -> bool:
        return speedup_disturbed(self.measured_speedup, self.tokens_per_target_pass)

    @property
    def speedup(self) -> float | None:
        """The measured speedup as a result: None where undefined, not measured yet, or disturbed."""
        return None if self.speedup_disturbed else self.measured_speedup

    @property
    def draft_cost(self) -> float | None:
        """c: draft time per drafted token ÷ plain decoding's time per token (0 before any draft; None without a baseline)."""
        if not self.baseline_ms_per_token:
            return None
        return self.draft_ms / self.drafted / self.baseline_ms_per_token if self.drafted else 0.0

    def disturbance(self) -> str | None:
        """Why the measured speedup is no result (it is above the tokens per target pass), or None."""
        if not self.speedup_disturbed:
            return None
        return disturbance_note(
            self.measured_speedup, self.tokens_per_target_pass, self.baseline_ms / self.new_tokens, self.decode_ms / self.rounds,
        )  # fmt: skip


def _round_counts(r: StepRecord) -> dict[str, int | float]:
    """One round's value of every counter (COUNTERS), by name."""
    values = overlap_values(r)
    return {
        "rounds": 1,
        "drafting_rounds": int(r.num_drafted > 0),
        "new_tokens": len(r.emitted),
        "drafted": r.num_drafted,
        "accepted": r.num_accepted,
        "checked": len(values),
        "overlap_sum": float(sum(values)),
        "draft_ms": r.draft_ms,
        "decode_ms": r.round_ms,
    }


COUNTERS: tuple[str, ...] = tuple(f.name for f in fields(Totals) if f.default is not None)
"""Totals' summed fields (after, pooled): every field that defaults to a number rather than None (the baseline's,
read off a clock), so a counter added to Totals is pooled without being listed again, and after() fails loudly
until _round_counts gives a round's value of it."""


@dataclass(frozen=True)
class SpecDecodeSteps:
    """vLLM's per-request speculative decoding metrics (``metrics.speculative_decoding``), one entry per verify step
    (a round that drafted; vLLM's num_drafts), in order. Its counts are Totals' (drafting_rounds, accepted, drafted)
    and its two rates Totals' formulas; the histogram is only here."""

    num_spec_tokens: int  # k: the most drafts a step asked for
    per_step_accepted: tuple[int, ...] = ()  # drafts kept (a tree: the kept path's drafted tokens)
    per_step_drafted: tuple[int, ...] = ()  # drafts scored (a tree: its nodes)

    @classmethod
    def of(cls, records: Iterable[StepRecord], num_spec_tokens: int = 0) -> SpecDecodeSteps:
        """From a run's records; num_spec_tokens: the configured k (raised to the largest k a round asked for)."""
        steps = [r for r in records if r.num_drafted > 0]
        k = max([num_spec_tokens, *(r.num_draft_tokens for r in steps)])
        return cls(k, tuple(r.num_accepted for r in steps), tuple(r.num_drafted for r in steps))

    @property
    def totals(self) -> Totals:
        return Totals(drafting_rounds=self.num_spec_steps, drafted=self.num_draft_tokens, accepted=self.num_accepted_draft_tokens)

    @property
    def num_spec_steps(self) -> int:
        return len(self.per_step_accepted)

    @property
    def num_accepted_draft_tokens(self) -> int:
        return sum(self.per_step_accepted)

    @property
    def num_draft_tokens(self) -> int:
        """Drafted tokens in all (vLLM's name; not the k of specviz's configs, which is num_spec_tokens here)."""
        return sum(self.per_step_drafted)

    @property
    def acceptance_histogram(self) -> tuple[int, ...]:
        """Index j = verify steps that kept exactly j drafts, j = 0..k: sums to num_spec_steps, Σ j·h[j] = accepted."""
        out = [0] * (max([self.num_spec_tokens, *self.per_step_accepted]) + 1)
        for n in self.per_step_accepted:
            out[n] += 1
        return tuple(out)

    @property
    def acceptance_shares(self) -> tuple[float, ...]:
        """The histogram as shares of the verify steps (histogram_shares)."""
        return histogram_shares(self.acceptance_histogram)

    @property
    def accepted_by_position(self) -> tuple[int, ...]:
        """Index i = verify steps that kept the draft at position i + 1 (a tree: depth i + 1), i = 0..k-1: vLLM's
        num_accepted_tokens_per_pos, the histogram's tail sums."""
        hist = self.acceptance_histogram
        return tuple(sum(hist[i + 1 :]) for i in range(len(hist) - 1))

    def to_json(self, detailed: bool = False) -> dict:
        """vLLM's object, field for field (per_step_* only when detailed). Before any verify step vLLM sends 1.0 and 0.0
        (nothing accepted), never null: aiperf drops a null as a malformed payload. Totals' own rates stay None there."""
        totals, stepped = self.totals, self.num_spec_steps > 0
        out = {
            "mean_acceptance_length": totals.mean_acceptance_length if stepped else 1.0,  # 1 + accepted / verify steps: the bonus token counted
            "draft_acceptance_rate": totals.acceptance_rate if stepped else 0.0,  # accepted / drafted
            "acceptance_histogram": list(self.acceptance_histogram),
            "num_spec_steps": self.num_spec_steps,
            "num_accepted_draft_tokens": self.num_accepted_draft_tokens,
            "num_draft_tokens": self.num_draft_tokens,
            "num_spec_tokens": self.num_spec_tokens,
        }
        if detailed:
            out |= {"per_step_accepted": list(self.per_step_accepted), "per_step_drafted": list(self.per_step_drafted)}
        return out


def histogram_shares(histogram: Sequence[int]) -> tuple[float, ...]:
    """An acceptance histogram as shares of its verify steps (each 0..1, summing to 1; empty before any verify step)."""
    n = sum(histogram)
    return tuple(h / n for h in histogram) if n else ()


def pooled_histogram(histograms: Iterable[Sequence[int]]) -> tuple[int, ...]:
    """Several runs' acceptance histograms summed bin by bin (the longest one's bins; a shorter one had a smaller k)."""
    out: list[int] = []
    for h in histograms:
        out += [0] * (len(h) - len(out))
        for j, n in enumerate(h):
            out[j] += n
    return tuple(out)


@dataclass(frozen=True)
class RunMetrics(Totals):
    """The metrics of METRIC_INFO for one run (None where undefined, e.g. no drafts or no baseline): its totals after
    the last round, the acceptance by position, and the timing block (the prefill beside the rounds' decode_ms).
    What decoder.stats(), the CLI's JSON, recordings, the Benchmark table and the step-through panel read; to_json
    is the one JSON form of it."""

    position_acceptance: tuple[PositionAcceptance, ...] = ()
    prefill_ms: float = 0.0  # the timing block: the prefill here, the rounds' decode_ms in the totals
    has_baseline: bool = False  # plain decoding's records were given: the speedup was asked for
    spec_decode: SpecDecodeSteps = SpecDecodeSteps(0)  # vLLM's per-request object (to_json: "speculative_decoding")

    @property
    def target_passes(self) -> int:
        """Verify passes, one per round; the prefill is not counted."""
        return self.rounds

    @property
    def wall_s(self) -> float:
        """Prefill plus every round's round_ms (record building excluded)."""
        return (self.prefill_ms + self.decode_ms) / 1000.0

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s > 0 else 0.0

    def to_json(self) -> dict:
        """The run's stats as the CLI prints them and recordings store them; speedup keys only with a baseline."""
        return {
            "new_tokens": self.new_tokens,
            "target_passes": self.target_passes,
            "tokens_per_target_pass": self.tokens_per_target_pass,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance_rate": self.acceptance_rate,
            "alpha": self.alpha,
            "wall_s": self.wall_s,
            "tokens_per_s": self.tokens_per_s,
            "mean_acceptance_length": self.mean_acceptance_length,  # vLLM: 1 + accepted per drafting round
            "drafting_rounds": self.drafting_rounds,
            "position_acceptance": [  # per draft position: reached, accepted, rate (conditional), unconditional (vLLM)
                {"position": p.position, "reached": p.reached, "accepted": p.accepted, "rate": p.rate, "unconditional": p.unconditional}
                for p in self.position_acceptance
            ],
            "speculative_decoding": self.spec_decode.to_json(detailed=True),  # vLLM's names, per verify step
            **({"speedup": self.speedup, "speedup_disturbed": self.speedup_disturbed} if self.has_baseline else {}),
        }


def _verified(record: StepRecord) -> int:
    """Drafted positions the rule looked at: the kept ones plus the first rejection (cut drafts are 'discarded')."""
    return sum(f in ("accepted", "rejected") for f in record.draft_fates)


def accepted_depth(record: StepRecord) -> tuple[int, bool]:
    """(n, rejected_next): the depth the rule accepted to (a chain's leading run, a tree's path), and whether it
    tried and rejected something at depth n+1 (a chain's rejected draft; a tree's rejected children)."""
    fates = record.draft_fates
    n = sum(f == "accepted" for f in fates)  # a tree's accepted nodes are its path, one per depth
    depths = tree_depths(record.node_parents)
    return n, any(f == "rejected" and d == n for f, d in zip(fates, depths))


def draft_depth(record: StepRecord) -> int:
    """How many draft positions (depths) the round drafted: k for a chain, the deepest level for a tree."""
    return 1 + max(tree_depths(record.node_parents), default=-1)


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
    return tuple(d + 1 for d in tree_depths(record.node_parents))


def table_slots(record: StepRecord) -> tuple[tuple[int, int], ...]:
    """Per drafted node of a token-recycling round: (its parent node, -1 for the newest committed token; its column in
    the parent token's table row). The drafter follows the table, so a node came from its parent token's row, at its
    place among its siblings: a chain's node i is column 0 of node i - 1's row. Meaningful for that drafter only."""
    seen: dict[int, int] = {}
    out = []
    for parent in record.node_parents:
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


def overlap_values(record: StepRecord) -> tuple[float, ...]:
    """Σ_v min(p_target, q_draft) per drafted position the rule checked; a drafter without a q proposes a one-hot q,
    for which the sum is p_target of the drafted token."""
    return tuple(record.overlap) if record.has_q else tuple(record.p_target[: _verified(record)])


def speedup_disturbed(speedup: float | None, tokens_per_target_pass: float | None) -> bool:
    """True when a measured speedup is above the tokens per target pass, which no real one can be (a round costs at
    least one plain pass): one of the two clocks was disturbed (contention, a slow baseline), so it is no result."""
    return speedup is not None and tokens_per_target_pass is not None and speedup > tokens_per_target_pass * (1.0 + 1e-9)  # float sums


def disturbance_note(speedup: float, tokens_per_target_pass: float, baseline_ms_per_token: float, run_ms_per_pass: float) -> str:
    """Why a speedup is not shown, for the log and the page's small print."""
    return (
        f"measured speedup {speedup:.2f}× is above the {tokens_per_target_pass:.2f} tokens per target pass, which no speedup can "
        f"exceed: plain decoding was timed at {baseline_ms_per_token:.1f} ms per token and this run at {run_ms_per_pass:.1f} ms "
        "per target pass, so one of the two clocks was disturbed (other work on the cores)."
    )


def running_totals(records: Sequence[StepRecord], baseline: Sequence[StepRecord] = ()) -> list[Totals]:
    """The totals after each round (the running metrics the curves draw); baseline: plain decoding's records, for the
    speedup by BaselineClock's rule."""
    clock = BaselineClock.of(baseline)
    out: list[Totals] = []
    totals = Totals()
    for r in records:
        totals = totals.after(r, clock)
        out.append(totals)
    return out


def pooled(totals: Iterable[Totals]) -> Totals:
    """Several runs' counts and clocks summed (a category's prompts), so each metric pools every position and pass;
    no baseline (a speedup is measured per run)."""
    out = Totals()
    for t in totals:
        out = out.plus(t)
    return out


def run_metrics(records: Sequence[StepRecord], baseline: Sequence[StepRecord] = (), prefill_ms: float = 0.0) -> RunMetrics:
    """All the metrics of one run from its records (and, for the speedup, plain decoding's records): the last of
    running_totals, so the final numbers are the curves' last points."""
    running = running_totals(records, baseline)
    last = running[-1] if running else Totals()
    return RunMetrics(
        **{f.name: getattr(last, f.name) for f in fields(Totals)},
        position_acceptance=position_acceptance(records),
        prefill_ms=prefill_ms,
        has_baseline=bool(baseline),
        spec_decode=SpecDecodeSteps.of(records),
    )
