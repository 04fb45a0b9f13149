"""The speculative decoding loop: prefill once, then draft -> verify in one target pass -> commit -> roll back,
and only then, with the round's clock stopped, build its record.

A drafter that reads the target's hidden state (Medusa heads, reads_hidden) is handed, after the prefill and after
every verify pass, the hidden state of the row whose LM-head output chose the newest committed token: from there
head i guesses the token i places after the newest. The target kept it from the pass the round ran anyway. A drafter
that reads the target's features (EAGLE, reads_features) is handed the rows that chose every committed token, and one
that learns from the target's logits (Token Recycling, reads_logits) every row of every pass; a round's hand-overs
wait for the next draft phase, so their cost is timed as drafting (the prefill's are part of the prefill). For a
logits reader the prefill computes every row's logits (in chunks), which a plain prefill skips.

A round stays on the target's device: the warp, the rule and every draw run there, with a generator there.
The host reads the device back a constant number of times per round (the rule's outcome; the record), never
once per drafted token, and reads the clock only after the device has synchronised.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple, cast

import torch

from specviz.core.auto_k import AutoCosts, AutoK
from specviz.core.limits import MAX_DRAFT_TOKENS
from specviz.core.metrics import RunMetrics, draft_depth, run_metrics
from specviz.core.protocols import (
    CachedLM,
    Drafter,
    HiddenStateLM,
    Readers,
    extend_last,
    pause_point,
    paused_s,
    readers,
)
from specviz.core.records import RoundContext, RoundTimes, StepRecord, build_record
from specviz.core.resume import Features, HandOvers, PassLogits, RunState, generator_state, set_generator_state
from specviz.core.rounds import ChainRound, Drafted, Round, Verified, cut_emitted
from specviz.core.sampling import SamplingConfig
from specviz.core.tree import MAX_TREE_WIDTH
from specviz.core.tree_round import TreeRound, tree_round
from specviz.core.verify import EmitFate

PREFILL_CHUNK = 256  # a logits reader's prefill: rows of (chunk, V) logits at a time, not (prompt, V) at once
logger = logging.getLogger(__name__)


class Carried(NamedTuple):
    """The newest committed token's row, computed by the prefill (SpeculativeDecoder._start)."""

    length: int  # committed tokens when it was computed: it serves while the cache holds exactly these
    logits: torch.Tensor  # (1, V)
    hidden: torch.Tensor | None  # (1, H) its hidden state, for a drafter that reads the target's hidden rows


@dataclass(frozen=True)
class DecodeConfig:
    num_draft_tokens: int = 4  # k: tokens drafted per round (the first round's k when adaptive; unused under auto)
    sampling: SamplingConfig = SamplingConfig()
    seed: int = 0  # seeds the one generator every random draw of the run comes from
    max_new_tokens: int = 64
    eos_token_ids: tuple[int, ...] = ()  # generation stops after the first of these
    top_n: int = 20  # entries of p, q and the residual kept per verified position for charts
    adaptive_k: bool = False  # grow k by 2 after an all-accepted round, shrink by 1 after a rejection
    max_draft_tokens: int = MAX_DRAFT_TOKENS  # ceiling for adaptive k and for auto k
    tree_width: int = 1  # children per tree node; 1 drafts a chain, more a token tree of at most k nodes
    auto: AutoCosts | None = None  # k: auto (specviz.core.auto_k) from these costs; None: a fixed or adaptive k

    def __post_init__(self) -> None:
        if self.auto is not None and self.adaptive_k:
            raise ValueError("Choose one k policy: auto k or adaptive k, not both.")
        if not (0 <= self.num_draft_tokens <= MAX_DRAFT_TOKENS):
            raise ValueError(f"num_draft_tokens must be between 0 and {MAX_DRAFT_TOKENS}; got {self.num_draft_tokens}.")
        if not (1 <= self.max_draft_tokens <= MAX_DRAFT_TOKENS):
            raise ValueError(f"max_draft_tokens must be between 1 and {MAX_DRAFT_TOKENS}; got {self.max_draft_tokens}.")
        if self.adaptive_k and self.num_draft_tokens > self.max_draft_tokens:
            raise ValueError(
                f"num_draft_tokens ({self.num_draft_tokens}) is above max_draft_tokens ({self.max_draft_tokens}), "
                "the ceiling for adaptive k; lower it or raise the ceiling."
            )
        if not (1 <= self.tree_width <= MAX_TREE_WIDTH):
            raise ValueError(f"tree_width must be between 1 (a chain) and {MAX_TREE_WIDTH}; got {self.tree_width}.")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1; got {self.max_new_tokens}.")
        if self.top_n < 1:
            raise ValueError(f"top_n must be at least 1; got {self.top_n}.")


def next_k(k: int, num_drafted: int, num_accepted: int, config: DecodeConfig) -> int:
    """Adaptive k (the schedule of transformers' assisted generation): +2 after a round where every drafted
    token was kept, -1 after a rejection, always within [1, max_draft_tokens]; a round that drafted nothing
    carries no evidence and leaves k alone. The k asked each round is StepRecord.num_draft_tokens."""
    if not config.adaptive_k or num_drafted == 0:
        return k
    if num_accepted == num_drafted:
        return min(config.max_draft_tokens, k + 2)
    return max(1, k - 1)


def sync(device: torch.device) -> None:
    """Wait until the device finished its queued work (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


class SpeculativeDecoder:
    """One run: owns the target's cache, the drafter, the generators and the round (a chain or a tree, chosen here
    once). Call step() until done.

    Every draw comes from generators seeded with config.seed: one on the target's device for the rule (and
    for a drafter sampling there), one on the CPU for host-side drafters when the target is elsewhere.
    records: a run continued from these rounds (resume()): the committed tokens are the prompt and what they emitted,
    prefilled in one pass; prefill_ms then is the original run's prefill time, not the re-prefill's."""

    def __init__(self, target: CachedLM, drafter: Drafter, prompt_ids: Sequence[int], config: DecodeConfig, *,
                 records: Sequence[StepRecord] = (), prefill_ms: float | None = None) -> None:  # fmt: skip
        if len(prompt_ids) == 0:
            raise ValueError("The prompt is empty: type some text to continue.")
        self.target = target
        self.drafter = drafter
        self.config = config
        self.prompt_length = len(prompt_ids)
        self.tokens: list[int] = [*prompt_ids, *(t for r in records for t in r.emitted)]  # prompt + every committed token
        self.records: list[StepRecord] = list(records)
        self.device = torch.device(target.device)
        draft_device = torch.device(drafter.device)  # the CPU for host-side drafters
        self.generator = torch.Generator(device=self.device).manual_seed(config.seed)
        self.draft_generator = (
            self.generator if draft_device == self.device else torch.Generator(device=draft_device).manual_seed(config.seed)
        )
        self._devices = {self.device, draft_device}
        self.k = config.num_draft_tokens
        self.auto = None if config.auto is None or config.num_draft_tokens == 0 else AutoK(config.auto, config.tree_width)
        self._replay_auto()  # a continued run: auto's evidence from the rounds it already has
        self.finished = False
        self.readers: Readers = readers(drafter)  # the drafter's declared capabilities, each as its protocol
        tree = tree_round(target, drafter, config.tree_width, config.sampling) if config.tree_width > 1 else None
        self.chain = ChainRound(target, drafter, config.sampling)  # also a tree run's rounds that draft nothing
        self.round: Round = tree if tree is not None else self.chain
        self.hidden: torch.Tensor | None = None  # (H,) the newest committed token's hidden row, for a drafter reading it
        self.features: Features | None = None  # rows for a features reader, handed over at the next draft
        self.pass_logits: PassLogits | None = None  # the latest verify pass for a logits reader, handed over at the next draft
        self.carried: Carried | None = None  # the newest token's row when the prefill computed it (see _start)
        self._round_hidden: torch.Tensor | None = None  # a carried round's hidden rows, the carried one first (see verify)
        measured_ms = self._start()
        self.prefill_ms = measured_ms if prefill_ms is None else prefill_ms

    def _start(self) -> float:
        """Prefill: the target caches every committed token and the run keeps the newest one's row (carried), as
        transformers' generate takes its first token from the prefill: the first round feeds only its drafts (a chain,
        or a tree whose root's children follow the cache), and a plain run saves a pass. The drafter prepares and is
        handed what the prefill left it: the rows up to the one that chose the newest token (a reader of the pass's
        hidden rows, features or logits is handed the carried row itself by the first round, with its pass's rows).
        Returns the ms it took."""
        start, paused = self._clock(), paused_s()
        self.drafter.prepare(self.tokens)
        row = self.prefill(self.tokens)
        hidden = self._hidden_rows(self._last_hidden(), 1)[-1:].clone() if self.readers.hidden or self.readers.features else None  # (1, H)
        self.carried = Carried(len(self.tokens), row, hidden)
        self.observe(-2 if len(self.tokens) > 1 else None)  # the prefill's row that chose the newest token (none for a one-token prompt)
        self.hand_over()  # a features reader is handed the prompt's rows (EAGLE feeds them at its first draft)
        return (self._clock() - start - (paused_s() - paused)) * 1000.0  # a long prefill's waits between chunks are not its time

    @property
    def carried_row(self) -> torch.Tensor | None:
        """(1, V): the newest committed token's logits when the prefill computed them and the cache holds exactly the
        committed tokens (before the first round, or restored to it); else None."""
        carried = self.carried
        return carried.logits if carried is not None and carried.length == len(self.tokens) else None

    def prefill(self, ids: list[int]) -> torch.Tensor:
        """Cache ids, every committed token, in the target -> (1, V) the newest one's logits. No (L, V) logits for a
        prompt of L tokens, unless the drafter learns from them: then chunk by chunk, each handed over at once. A
        features reader gets the rows' hidden states (start 0). The newest token's row chose a token not committed yet,
        so the drafter is handed every row but that one (the first round hands it over with its pass)."""
        logits_reader = self.readers.logits
        seen = len(ids) - 1  # the rows handed to the drafter
        if logits_reader is None:
            last = extend_last(self.target, ids).view(1, -1)
            rows = self._last_hidden() if self.readers.features else None
        else:
            kept = []
            for s in range(0, len(ids), PREFILL_CHUNK):
                if s:
                    pause_point()  # on a shared server a waiting participant's turn may go first (as extend_last's chunks)
                chunk = ids[s : s + PREFILL_CHUNK]
                logits = self.target.extend(chunk)
                if seen > s:
                    logits_reader.observe_logits(chunk[: seen - s], logits[: seen - s])
                last = logits[-1:].clone()  # not a view that would keep the chunk's (T, V) rows alive
                if self.readers.features:
                    kept.append(self._last_hidden())
            rows = torch.cat(kept) if kept else None
        if self.readers.features and seen:
            self.features = (0, self._hidden_rows(rows, len(ids))[:seen], tuple(self.tokens[1 : seen + 1]))
        return last

    @property
    def generated(self) -> list[int]:
        return self.tokens[self.prompt_length :]

    @property
    def done(self) -> bool:
        return self.finished or len(self.generated) >= self.config.max_new_tokens

    @property
    def use_tree(self) -> bool:
        """Whether this run drafts token trees (it asked for a width above 1, and the drafter and target can)."""
        return isinstance(self.round, TreeRound)

    def stats(self, baseline: Sequence[StepRecord] = ()) -> RunMetrics:
        """The run's metrics and timing from its records (with plain decoding's records, the measured speedup too)."""
        return run_metrics(self.records, baseline, self.prefill_ms)

    def run(self) -> list[StepRecord]:
        while not self.done:
            self.step()
        return self.records

    def step(self) -> StepRecord:
        """One round. The clock reads after the device synchronises and stops before the record."""
        if self.done:
            raise RuntimeError("This run is finished; reset to start again.")
        room = self.config.max_new_tokens - len(self.generated) - 1  # a round emits up to k+1 tokens
        choice = None
        if self.auto is not None:  # carried: a plain round here takes its token from the prefill's row, no pass
            choice = self.auto.choose(min(self.config.max_draft_tokens, room), free_plain=self.carried_row is not None)
        k = choice.k if choice is not None else min(self.k, room)
        t0 = self._clock()
        drafted = self.draft(k)
        t1 = self._clock()
        verified = self.verify(drafted)
        t2 = self._clock()
        newest = self.tokens[-1]
        emitted, fates = self.commit(drafted, verified)
        self.rollback(verified)
        self.keep_for_drafter(newest, drafted, verified, len(emitted))
        t3 = self._clock()
        context = RoundContext(len(self.records), len(self.tokens) - len(emitted), k, self.round.width, self.config.top_n, self.done, choice,
                               self.config.sampling.greedy)  # fmt: skip
        record = build_record(context, drafted, verified, emitted, fates, RoundTimes(t0, t1, t2, t3))
        self.records.append(record)
        self.k = next_k(self.k, record.num_drafted, record.num_accepted, self.config)
        self._observe_auto(record, opening=len(self.records) == 1)
        return record

    def _replay_auto(self) -> None:
        """Auto's evidence afresh from every record this run holds, in order, the first as the run's opening round."""
        if self.auto is not None:
            self.auto = AutoK(self.auto.costs, self.auto.width)
            for i, record in enumerate(self.records):
                self._observe_auto(record, opening=i == 0)

    def _observe_auto(self, record: StepRecord, opening: bool) -> None:
        """Fold a round into auto's evidence: what it drafted, over how many positions, and how many it kept (opening:
        the run's first round, drafted from the prompt's end)."""
        if self.auto is not None:
            self.auto.observe(record.num_drafted, record.num_accepted, draft_depth(record), opening)

    def draft(self, k: int) -> Drafted:
        """1. What the last pass left for the drafter (hand_over), then up to k drafted tokens (a chain, or a tree of
        at most k nodes) and the drafter's q_draft when it has one, moved to the target's device."""
        self.hand_over()
        return self.round.draft(self.tokens, k, self.draft_generator)

    def shape(self, drafted: bool) -> Round:
        """The round that verifies and keeps a proposal: the run's (a chain or a tree) when it drafted anything; a
        proposal of nothing is a plain pass, the chain's (a tree run's plain round would pay a tree mask over the whole
        context, and a compaction of its cache, for one token)."""
        return self.round if drafted else self.chain

    def verify(self, drafted: Drafted) -> Verified:
        """2. One target pass over the committed tokens not yet cached plus every draft (m+1 distributions),
        then the rule: for a chain all on the device, the host learning only n and the next token (one
        transfer); for a tree the tree rule (specviz.core.tree_round)."""
        pending = self.tokens[len(self.target.tokens) :]
        self._round_hidden = None
        if pending:
            return self.shape(bool(drafted.ids)).verify(pending, drafted, self.generator)
        row = self.carried_row
        if row is None:
            raise RuntimeError("The target has cached the newest token, but no row of it was kept.")
        verified = self.shape(bool(drafted.ids)).verify(pending, drafted, self.generator, row)
        hidden = cast(Carried, self.carried).hidden
        if hidden is not None:  # the carried row's hidden state, then the pass's (when it ran): one per row of the logits
            self._round_hidden = torch.cat([hidden, self._target_hidden()]) if drafted.ids else hidden
        return verified

    def commit(self, drafted: Drafted, verified: Verified) -> tuple[list[int], list[EmitFate]]:
        """3. Commit the accepted path, then the resampled / bonus token; cut at EOS or the length limit."""
        emitted = [drafted.ids[i] for i in verified.path] + [verified.next_token]
        fates: list[EmitFate] = ["accepted"] * len(verified.path) + [verified.next_fate]
        room = self.config.max_new_tokens - len(self.generated)
        emitted, fates, self.finished = cut_emitted(emitted, fates, self.config.eos_token_ids, room)
        self.tokens.extend(emitted)
        return emitted, fates

    def rollback(self, verified: Verified) -> None:
        """4. Both caches keep only what was committed. The target cached every draft: the round keeps what it must
        (a tree drops every node off the accepted path; nothing is recomputed); then the committed tokens before the
        newest one lead the cache, so cropping by length is enough (and costs nothing). A drafter reading hidden
        states is handed the pass's row that chose the newest token."""
        self.shape(bool(verified.node_fates)).keep(verified)  # the round that verified it (a fate per drafted node)
        self.target.crop(len(self.tokens) - 1)
        self.drafter.rollback(self.tokens)
        self.observe(verified.next_row)

    def hand_over(self) -> None:
        """Give a features reader the rows that chose the tokens committed since, and a logits reader the latest pass."""
        if self.features is not None and self.readers.features is not None:
            self.readers.features.observe_features(*self.features)
            self.features = None
        if self.pass_logits is not None and self.readers.logits is not None:
            self.readers.logits.observe_logits(*self.pass_logits)
            self.pass_logits = None

    def keep_for_drafter(self, newest: int, drafted: Drafted, verified: Verified, num_emitted: int) -> None:
        """What the next draft phase hands a features reader (the rows that chose the committed tokens, from the
        position of the token before them) and a logits reader (the pass: the newest token's row, then every node's)."""
        if self.readers.features:
            index = torch.tensor(verified.rows[:num_emitted], dtype=torch.long, device=self.device)
            chosen = self._hidden_rows(self._last_hidden(), 1 + max(verified.rows)).index_select(0, index)  # (e, H)
            start = len(self.tokens) - num_emitted - 1
            self.features = (start, chosen, tuple(self.tokens[start + 1 :]))
        if self.readers.logits:
            self.pass_logits = ((newest, *drafted.ids), verified.logits)

    def observe(self, row: int | None) -> None:
        """Hand a drafter that reads hidden states (reads_hidden) row ``row`` of the target's latest pass: the row
        whose LM-head output chose the newest committed token (None: no pass yet, a prompt of one token)."""
        if self.readers.hidden is None:
            return
        hidden = None
        if row is not None:
            hidden = self._hidden_rows(self._last_hidden(), 1)[row]  # (H,)
        self.hidden = hidden
        self.readers.hidden.observe(hidden)

    def state(self) -> RunState:
        """The run as it stands, generators included: for restore() (plain decoding whose step a rerun disturbed
        takes it again, specviz.workshop.baselines: the same tokens from the same draws) and for a saved run
        (RunState.to_dict). A stateful drafter is handed the latest pass's logits first (that only queues them: it
        still folds them in at its next proposal), so its saved state is complete without the hand-overs."""
        drafter_state = None
        if self.readers.state is not None:
            if self.readers.logits is not None and self.pass_logits is not None:
                self.readers.logits.observe_logits(*self.pass_logits)
                self.pass_logits = None
            drafter_state = self.readers.state.save_state()
        shared = self.draft_generator is self.generator
        return RunState(
            num_rounds=len(self.records),
            k=self.k,
            finished=self.finished,
            generator=generator_state(self.generator),
            draft_generator=None if shared else generator_state(self.draft_generator),
            drafter_state=drafter_state,
            hand_overs=HandOvers(self.hidden, self.features, self.pass_logits),
        )

    def restore(self, state: RunState) -> None:
        """Back to state: the tokens, records and draws after it are forgotten, the target's cache cropped.
        The drafter is told the shorter commit; one that learns from committed text (the n-gram model) would keep
        what it learned, so this is for drafters that keep nothing of it (plain decoding, prompt lookup, a model) or
        that declare their state (keeps_state: loaded back) or read features (handed the state's rows again).
        A saved state (no hand-overs) continues a run whose prefill derived them (resume()). Raises ValueError
        when the state does not fit this run."""
        self._check_fits(state)
        set_generator_state(self.generator, state.generator)
        if state.draft_generator is not None:
            set_generator_state(self.draft_generator, state.draft_generator)
        num_tokens = self.prompt_length + sum(len(r.emitted) for r in self.records[: state.num_rounds])
        cut = len(self.tokens) > num_tokens
        del self.tokens[num_tokens:]
        del self.records[state.num_rounds :]
        self.finished = state.finished
        self.k = min(state.k, self.config.max_draft_tokens) if self.config.adaptive_k else state.k  # a ceiling lowered since a save holds
        self._replay_auto()  # auto's evidence is derived from the records, so a saved state needs nothing more
        if cut:
            keep = len(self.tokens) if self.carried_row is not None else len(self.tokens) - 1  # back to the prefill: its row again
            self.target.crop(min(len(self.target.tokens), keep))
            self.drafter.rollback(self.tokens)
        if state.hand_overs is not None:
            self._hand_back(state.hand_overs)
        if self.readers.state is not None and state.drafter_state is not None:
            self.readers.state.load_state(state.drafter_state)

    def _check_fits(self, state: RunState) -> None:
        """ValueError when a state cannot be this run's: from a later round, other generators, a drafter's state missing."""
        if state.num_rounds > len(self.records):
            raise ValueError("the saved state is from a later round than the saved records")
        if (self.draft_generator is self.generator) != (state.draft_generator is None):
            raise ValueError("the saved run drew from a different set of generators (another device?)")
        if self.readers.state is not None and state.drafter_state is None:
            raise ValueError(f"the saved run carries no state for the {self.drafter.name} drafter, so it cannot continue exactly")

    def _hand_back(self, hand_overs: HandOvers) -> None:
        """What the pass before a state() left for the drafter: pending again, and the hidden row handed again."""
        self.features, self.pass_logits = hand_overs.features, hand_overs.pass_logits
        if self.readers.hidden is not None:
            self.hidden = hand_overs.hidden
            self.readers.hidden.observe(self.hidden)

    def _last_hidden(self) -> torch.Tensor | None:
        """The hidden rows of the latest round, one per row of its logits (a carried round's carried row first), or
        of the prefill (only a drafter reading them asks: it needs a HiddenStateLM)."""
        return self._round_hidden if self._round_hidden is not None else self._target_hidden()

    def _target_hidden(self) -> torch.Tensor | None:
        """The target's hidden rows of its latest pass."""
        return cast(HiddenStateLM, self.target).last_hidden

    def _hidden_rows(self, rows: torch.Tensor | None, need: int) -> torch.Tensor:
        """The target's kept hidden rows, checked: a drafter reading them needs at least ``need`` of them."""
        if rows is None or rows.shape[0] < need:
            raise ValueError(
                f"The {self.drafter.name} drafter reads the target's hidden states, but this target keeps none "
                "(build its cached view with keep_hidden=True)."
            )
        return rows

    def _clock(self) -> float:
        """Seconds, read only after every device of the run finished its queued work."""
        for device in self._devices:
            sync(device)
        return time.perf_counter()


def resume(
    target: CachedLM,
    drafter: Drafter,
    prompt_ids: Sequence[int],
    generated: Sequence[int],
    records: Sequence[StepRecord],
    config: DecodeConfig,
    state: RunState,
    prefill_ms: float = 0.0,
) -> SpeculativeDecoder:
    """A decoder at the round where state() left a saved run (specviz.core.resume): the target and the drafter
    prefilled with prompt + generated, the records kept, the generators, k and finished restored. Raises ValueError
    if the pieces do not fit."""
    if [t for r in records for t in r.emitted] != list(generated):
        raise ValueError("the saved tokens are not the ones the saved rounds emitted")
    if state.num_rounds != len(records):
        raise ValueError("the saved state is not from the saved run's latest round")
    decoder = SpeculativeDecoder(target, drafter, prompt_ids, config, records=records, prefill_ms=prefill_ms)  # one prefill of everything
    decoder.restore(replace(state, hand_overs=None))  # the re-prefill derived them
    return decoder
