"""k: auto. Before each round, pick the k (a tree's node budget) that maximises the expected tokens per unit of
wall time, from past rounds only, so the output keeps the target's distribution exactly (the verify rule is exact
for any k chosen before the drafts are seen).

The model, after Leviathan, Kalman & Matias (2023), section 3, with acceptance by position: a round that drafts k
tokens commits 1 + a1 + a1*a2 + ... + a1*...*ad tokens on average (d = k for a chain, about k / width levels for a
tree) and costs c_verify(k) + k*c + r one-token passes (specviz.core.theory). Plain decoding commits 1 token per pass,
so a k pays when its tokens per pass-equivalent beat 1; when none does, auto picks k = 0, a plain pass.

Where the numbers come from:
- c_verify(k) and c: the machine's cost profile (`specviz profile`, or a shipped one for this class of machine),
  fixed for the run, so a run's k sequence repeats exactly with the same seed; r, a drafted round's fixed cost beyond
  c per token (the drafter's per-round work the profile's per-token cost leaves out), is charged once per drafted round;
- a_i: this run's acceptance at draft position i, counted from its records and forgotten at ``decay`` (0.8) per drafted
  round (the text changes: at 0.8 the counts are worth at most 5 rounds, so k follows text that stops or starts
  copying within a few rounds), mixed with a prior from the benchmark worth ``prior_weight`` rounds (capped, at each
  position, by the estimate at the position before).
A k must beat a plain pass by ``margin`` (5 %): one that barely pays on the model's numbers loses on the machine
(the engine's own work around a drafted round is not in the profile). When no k does, auto probes at ``probe_k`` (1, or
the smallest k that would pay if every draft were kept; no probe when none would): on the first round, and after
``probe_every`` plain rounds in a row, a wait that doubles after each probe that kept nothing (up to 2**max_backoff
times) and starts again after a round that kept a draft, to notice when the text turns copyable at the price of one
cheap round. ``probe_k`` "best" probes at the k worth most on the estimate instead, "prior" at the k the prior alone
picks; ``probe_first`` False skips the first round's probe (both as c0551ae did, for A/B checks). ``plain_decay`` < 1
lets the evidence fade back toward the prior during plain rounds (priced, not adopted: below).

Tuned on the modeled time of ``scripts/auto_k_check.py --modeled`` (each round charged c_verify + k*c + r from the
profile, a plain round 1: deterministic on a busy machine), replaying greedy n-gram and prompt-lookup rounds over every
prompt (48 tokens; their drafts depend on the tokens only, so one pass per prompt prices any policy): on the
re-measured profile, margin 0 / 0.02 / 0.05, the backoff (none, 2x, 8x), probing at k = 1 or at the best k, and the
first round's probe moved no cell across a goal; a faster decay (0.8 against 0.9) raised the worst auto / best fixed
k from 0.95x to 0.96x and lost nothing against plain decoding; a lighter prior (prior_weight 1) lost the copy cells
(0.87x the best k), a heavier one (4) one more (docs/benchmarks.md). Over every cell (5 drafters x 4 categories x
T 0/0.7, all 13 prompts), probing after 4 plain rounds instead of 8 met both goals in 27 of 40 cells instead of 24
(Medusa, EAGLE and recycling on code: one rejected first round no longer keeps them plain for most of a run) at the
same worst auto / plain (0.97x); evidence fading back to the prior during plain rounds (plain_decay 0.8) won the T = 0.7
code cells but fell below plain decoding on prose (23 of 40), and backing off once at most (max_backoff 1) 25 of 40.
At T = 0.7, where each setup samples its own text (the check takes each setup's median over 4 seeds a prompt), taking
the longest k worth at least 95 % of the best (longer_within 0.05) met the same 12 of 20 cells and 90 % (0.1) 10 of
20, so the default takes the best k itself. A run's first round takes its token from the prefill's row when it drafts
nothing, with no pass at all; probe_free=False makes the first-round probe wait one round (where it costs a wider
pass's difference, not a whole pass): modeled with that round charged as the engine runs it, recycling (the one
drafter whose prior pays for no k) met both goals in 2 of its 4 greedy cells over all 13 prompts instead of 0, its
worst auto / plain 0.99x instead of 0.95x, at the price of its code cell (auto / best fixed k 0.91x -> 0.83x). Not the
default: a recycling run's first Step in the app would then draft nothing (the step-through page's first Step shows a
drafted round, issue 43).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from specviz.core.limits import MAX_DRAFT_TOKENS
from specviz.core.theory import VerifyCost, VerifyCurve, expected_tokens_by_position, verify_cost_at

PROBE_KS = ("best", "prior")  # AutoCosts.probe_k besides a number


@dataclass(frozen=True)
class AutoCosts:
    """What auto weighs, fixed for a run: the machine's costs and the drafter's prior acceptance."""

    verify: VerifyCost  # c_verify(k): a pass over k+1 tokens / a 1-token pass (a measured VerifyCurve, or one number)
    draft_cost: float  # c: drafting one token / a 1-token target pass
    prior: tuple[float, ...] = (0.5,)  # acceptance by draft position before any evidence (the last repeats)
    prior_weight: float = 2.0  # how many drafted rounds the prior counts as
    decay: float = 0.8  # each drafted round, earlier evidence counts this much less (the text changes)
    probe_every: int = 4  # after this many plain rounds in a row, draft once again (doubled after each failed probe)
    source: str = ""  # where the costs come from, for the record's sentence ("profile_cpu (shipped)")
    round_cost: float = 0.0  # r: a drafted round's fixed drafting cost / a 1-token target pass, beyond c per token
    margin: float = 0.05  # a k must beat a plain pass by this fraction of its tokens per pass-equivalent
    probe_k: int | str = 1  # a probe drafts this many tokens; "best": the k > 0 worth most on the estimate so far;
    # "prior": the k the prior alone picks (c0551ae)
    max_backoff: int = 3  # the probe wait doubles at most this many times (4 -> 32 plain rounds)
    probe_first: bool = True  # probe on the first round when no k pays on the prior alone
    plain_decay: float = 1.0  # each plain round, the evidence counts this much less: it fades back toward the prior
    longer_within: float = 0.0  # pick the longest k worth at least (1 - this) of the best k's tokens per pass-equivalent
    probe_free: bool = True  # probe on the first round even when its plain pass is free (False: wait a round)
    opening_evidence: bool = False  # count a run's first round as evidence (False: its drafts guess the answer's
    # opening from the prompt's end, which the drafters that read the target keep almost never: docs/engine.md)

    def __post_init__(self) -> None:
        if not isinstance(self.verify, VerifyCurve) and not (math.isfinite(self.verify) and self.verify > 0):
            raise ValueError(f"auto k: the verify cost must be a number > 0 (or a measured curve); got {self.verify}.")
        if not (math.isfinite(self.draft_cost) and self.draft_cost >= 0):
            raise ValueError(f"auto k: the drafting cost must be a number >= 0; got {self.draft_cost}.")
        if not self.prior or not all(0.0 <= a <= 1.0 for a in self.prior):
            raise ValueError(f"auto k: the prior acceptance must be probabilities; got {self.prior}.")
        if not (self.prior_weight > 0 and 0.0 < self.decay <= 1.0 and 0.0 < self.plain_decay <= 1.0 and self.probe_every >= 1):
            raise ValueError("auto k: prior_weight > 0, 0 < decay <= 1, 0 < plain_decay <= 1 and probe_every >= 1, please.")
        if not (
            math.isfinite(self.round_cost)
            and self.round_cost >= 0
            and 0.0 <= self.margin < 1.0
            and 0.0 <= self.longer_within < 1.0
        ):
            raise ValueError(
                "auto k: the round cost must be >= 0, the margin and longer_within in [0, 1); "
                f"got {self.round_cost}, {self.margin}, {self.longer_within}."
            )
        if not ((self.probe_k in PROBE_KS or (isinstance(self.probe_k, int) and self.probe_k >= 1)) and self.max_backoff >= 0):
            raise ValueError(f"auto k: probe_k >= 1 (or one of {PROBE_KS}) and max_backoff >= 0, please; got {self.probe_k}.")

    def probe_wait(self, failed_probes: int) -> int:
        """Plain rounds in a row before the next probe: probe_every, doubled after each probe that kept nothing."""
        return self.probe_every * 2 ** min(failed_probes, self.max_backoff)


@dataclass(frozen=True)
class Evidence:
    """This run's acceptance so far: per draft position (from 1), how often it was reached and accepted (decayed
    counts), how many plain rounds ran since the last drafted one, and how many drafted rounds in a row that came after
    plain rounds (probes) kept nothing."""

    reached: tuple[float, ...] = ()
    accepted: tuple[float, ...] = ()
    plain_streak: int = 0
    failed_probes: int = 0


@dataclass(frozen=True)
class KChoice:
    """Why auto chose a round's k (kept on the round's record)."""

    k: int
    acceptance: tuple[float, ...]  # the estimated acceptance at positions 1..depth(k)
    verify_cost: float  # c_verify(k), in 1-token passes
    draft_cost: float  # c per drafted token
    tokens_per_pass: float  # expected tokens per pass-equivalent at k (1.0 for k = 0)
    next_k: int  # the runner-up k (the next larger, or 1 when k = 0)
    next_tokens_per_pass: float
    probe: bool = False  # drafted only to look again after plain rounds
    source: str = ""
    round_cost: float = 0.0  # r per drafted round
    margin: float = 0.0  # how much a k had to beat a plain pass by

    def sentence(self) -> str:
        """One line for the round inspector."""
        if self.k == 0:
            by = f" by {self.margin:.0%}" if self.margin else ""
            return (f"k = 0 (a plain pass): no k pays here{by}; the best, k = {self.next_k}, would give "
                    f"{self.next_tokens_per_pass:.2f} tokens per pass-equivalent.")  # fmt: skip
        acc = " / ".join(f"{a:.2f}" for a in self.acceptance)
        why = "a probe, no k paying on the evidence so far: " if self.probe else ""
        per_round = f" and {self.round_cost:.2f} a round" if self.round_cost else ""
        return (f"k = {self.k}: {why}acceptance by position {acc}, verify of {self.k + 1} costs {self.verify_cost:.2f} passes, "
                f"drafting {self.draft_cost:.2f} a token{per_round} → {self.tokens_per_pass:.2f} tokens per pass-equivalent; "
                f"k = {self.next_k} would give {self.next_tokens_per_pass:.2f}.")  # fmt: skip


def depth(k: int, width: int) -> int:
    """Draft positions a round of k drafted tokens reaches: k for a chain; a tree spends about ``width`` nodes a level."""
    return k if width <= 1 else math.ceil(k / width)


def acceptance(costs: AutoCosts, evidence: Evidence, positions: int) -> tuple[float, ...]:
    """The estimated acceptance at positions 1..positions: this run's counts mixed with the prior. A position's prior is
    at most the estimate of the position before it (a later draft is no easier to guess, until counts say so), so
    drafts rejected at position 1 do not leave position 2 at an optimistic prior; past the positions drafted so far,
    the prior is the estimate at the position before (the text's own acceptance, carried on), so a run whose
    drafts all pass tries a longer k instead of stopping where the benchmark's average acceptance stops it."""
    out: list[float] = []
    for i in range(positions):
        prior = min(costs.prior[min(i, len(costs.prior) - 1)], out[-1] if out else 1.0)
        reached = evidence.reached[i] if i < len(evidence.reached) else 0.0
        if out and evidence.reached and evidence.reached[0] >= 1.0:
            prior = out[-1]  # once this run has evidence, each position leans on the one before: copyable text lets k grow
        accepted = evidence.accepted[i] if i < len(evidence.accepted) else 0.0
        out.append((accepted + costs.prior_weight * prior) / (reached + costs.prior_weight))
    return tuple(out)


def value(k: int, acc: Sequence[float], costs: AutoCosts, width: int) -> tuple[float, float]:
    """(expected tokens per pass-equivalent, c_verify(k)) of drafting k tokens: E[tokens] / (c_verify(k) + k*c + r)."""
    verify = verify_cost_at(costs.verify, k)
    if not k:
        return 1.0, verify
    return expected_tokens_by_position(acc, depth(k, width)) / (verify + k * costs.draft_cost + costs.round_cost), verify


def best(acc: Sequence[float], costs: AutoCosts, width: int, k_max: int) -> tuple[int, list[float]]:
    """The k in 0..k_max with the most tokens per pass-equivalent (the smallest on ties), and every k's value; a k > 0
    only when it beats a plain pass by the margin. One pass over the positions (this runs before every round)."""
    tokens, reach, levels = [1.0], 1.0, depth(k_max, width)
    for i in range(levels):  # tokens[d]: expected tokens of a round reaching d positions
        reach *= acc[min(i, len(acc) - 1)]
        tokens.append(tokens[-1] + reach)
    values = [1.0] + [tokens[depth(k, width)] / (verify_cost_at(costs.verify, k) + k * costs.draft_cost + costs.round_cost)
                      for k in range(1, k_max + 1)]  # fmt: skip
    k = max(range(k_max + 1), key=lambda j: (values[j], -j))
    if values[k] < 1.0 + costs.margin:
        return 0, values
    if costs.longer_within:
        k = max(j for j in range(k, k_max + 1) if values[j] >= (1.0 - costs.longer_within) * values[k])
    return k, values


def probe_k(costs: AutoCosts, width: int, k_max: int, values: Sequence[float] = ()) -> int:
    """The k a probe drafts: the smallest k >= probe_k that would pay by the margin if every draft were kept; 0 (no
    probe) when none would, e.g. a drafter nearly as dear as the target, which no text can make pay. probe_k "best":
    the k > 0 with the most tokens per pass-equivalent in ``values`` (this round's estimate), "prior": max(1, the k
    the prior alone picks), as c0551ae probed (even where no k could pay)."""
    if costs.probe_k == "prior":
        return max(1, best(acceptance(costs, Evidence(), depth(k_max, width)), costs, width, k_max)[0]) if k_max else 0
    perfect = best((1.0,), costs, width, k_max)[1]
    pays = [k for k in range(1, k_max + 1) if perfect[k] >= 1.0 + costs.margin]
    if costs.probe_k == "best":
        return max(pays, key=lambda j: (values[j], -j)) if pays and values else 0
    return next((k for k in pays if k >= min(int(costs.probe_k), k_max)), 0)


def choose_k(costs: AutoCosts, evidence: Evidence, width: int, k_max: int, free_plain: bool = False) -> KChoice:
    """The round's k from the costs and past rounds only. k = 0 when no k pays by the margin; then a probe at probe_k
    on the first rounds (before anything was drafted) and after probe_wait plain rounds in a row. free_plain: this
    round's plain pass costs nothing (the prefill computed the newest token's row): with costs.probe_free False a
    first-round probe waits for the next round, where it costs a pass's width over plain decoding's instead of a whole
    pass."""
    k_max = max(0, min(k_max, MAX_DRAFT_TOKENS))
    acc = acceptance(costs, evidence, depth(k_max, width))
    k, values = best(acc, costs, width, k_max)
    first = not evidence.reached and costs.probe_first and (costs.probe_free or not free_plain)
    due = first or evidence.plain_streak >= costs.probe_wait(evidence.failed_probes)
    probe_at = probe_k(costs, width, k_max, values) if k == 0 and due else 0
    probe = probe_at > 0
    if probe:
        k = probe_at
    if k == 0:
        runner = max(range(1, k_max + 1), key=lambda j: (values[j], -j)) if k_max else 0
    else:
        runner = k + 1 if k < k_max else k - 1
    tokens, verify = value(k, acc, costs, width)
    return KChoice(k=k, acceptance=acc[: depth(k, width)], verify_cost=verify, draft_cost=costs.draft_cost, tokens_per_pass=tokens,
                   next_k=runner, next_tokens_per_pass=values[runner] if k_max else 1.0, probe=probe, source=costs.source,
                   round_cost=costs.round_cost, margin=costs.margin)  # fmt: skip


def observe(costs: AutoCosts, evidence: Evidence, num_drafted: int, num_accepted: int, levels: int, opening: bool = False) -> Evidence:
    """Evidence after a round that drafted num_drafted tokens over ``levels`` positions (a chain: num_drafted; a tree:
    its depth) and accepted num_accepted of them along one path. A round that drafted nothing adds to the plain streak.
    A drafted round after plain rounds (a probe, or prompt lookup finding a match again) that keeps nothing counts as
    a failed probe; any round that keeps a draft clears the count. opening: the run's first round, whose drafts guess
    the answer's first tokens from the prompt's end; unless costs.opening_evidence, it counts as drafted (no second
    first-round probe) but leaves the acceptance at the prior: Medusa and token recycling kept 0 of 39 such drafts
    at T = 0.7 where their later rounds keep 26-31 % (docs/engine.md)."""
    if opening and num_drafted and levels and not costs.opening_evidence:
        return Evidence((0.0,) * levels, (0.0,) * levels, 0, evidence.failed_probes)  # positions reached 0 times: the
        # prior's, while a non-empty `reached` tells choose_k the first-round probe is spent
    if num_drafted == 0 or levels == 0:
        fade = costs.plain_decay
        reached, accepted = (evidence.reached, evidence.accepted) if fade == 1.0 else (
            tuple(fade * r for r in evidence.reached), tuple(fade * a for a in evidence.accepted))  # fmt: skip
        return Evidence(reached, accepted, evidence.plain_streak + 1, evidence.failed_probes)
    failed = 0 if num_accepted > 0 else evidence.failed_probes + int(evidence.plain_streak > 0)
    reached_to = min(num_accepted + 1, levels)  # positions tried: up to the first rejection
    size = max(len(evidence.reached), levels)
    reached = [costs.decay * (evidence.reached[i] if i < len(evidence.reached) else 0.0) + (i < reached_to) for i in range(size)]
    accepted = [
        costs.decay * (evidence.accepted[i] if i < len(evidence.accepted) else 0.0) + (i < num_accepted) for i in range(size)
    ]
    return Evidence(tuple(reached), tuple(accepted), 0, failed)


@dataclass
class AutoK:
    """The policy over one run: fold each round in with observe(), ask choose() before the next."""

    costs: AutoCosts
    width: int = 1
    evidence: Evidence = field(default_factory=Evidence)

    def choose(self, k_max: int, free_plain: bool = False) -> KChoice:
        return choose_k(self.costs, self.evidence, self.width, k_max, free_plain)

    def observe(self, num_drafted: int, num_accepted: int, levels: int, opening: bool = False) -> None:
        self.evidence = observe(self.costs, self.evidence, num_drafted, num_accepted, levels, opening)
