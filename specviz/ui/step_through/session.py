"""Per-session state of the step-through page: the runs (decoders and their records) and the baseline that times them.

Everything lives in st.session_state; models come from the shared caches in specviz.ui.common.models. Every model pass
(prefill and rounds) takes a turn in the model's queue (specviz.ui.common.turns.model_turn), one whole round per turn, so
the engine's timings never include the wait and one session's Play or Run to end cannot starve the others.

The API the page (and other features) use:
    state = page_state()                                   # this browser session's PageState
    session = start_session(state, config, compare, prompt)  # prefill in a turn; asks for the shared baseline
    step_session(session)                                  # one round of every run, one turn; never waits for the baseline
    session.baseline.covers(n)                             # has plain decoding measured n tokens yet ("measuring…")

The plain-decoding baseline is not on a Step's path: start_session asks specviz.workshop.baselines for it (shared between
sessions with the same target, precision, prompt ids, sampling, seed and length) and a worker thread measures it in
background turns of the same queue, after every waiting round."""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass, field

import streamlit as st

from specviz.config import FIELDS, RunConfig, validate_prompt
from specviz.core.decoding import SpeculativeDecoder
from specviz.core.records import StepRecord
from specviz.drafters.specs import branches, short_name
from specviz.models import LoadedModel
from specviz.runs import RunModels, build_decoder, kv_tokens
from specviz.ui.common import budgets, timing
from specviz.ui.common.errors import friendly_error
from specviz.ui.common.keys import STEP_THROUGH_KEY
from specviz.ui.common.models import TokenTexts, load_target, run_models
from specviz.ui.common.turns import model_turn, target_queue
from specviz.viz.markdown import md_text
from specviz.workshop.baselines import BaselineRun, baseline_worker
from specviz.workshop.budgets import Reservation

log = logging.getLogger(__name__)

STATE_KEY = STEP_THROUGH_KEY
# RunConfig fields that change only the drafter (drafter_only in the table): plain decoding of the same prompt does not depend on them
DRAFTER_FIELDS = frozenset(s.name for s in FIELDS if s.drafter_only)


def run_name(config: RunConfig) -> str:
    """The drafter's short name, with the tree width when the run drafts trees: 'n-gram model, tree W=2'."""
    name = short_name(config.drafter)
    width = branches(config.drafter, config.tree_width)
    return f"{name}, tree W={width}" if width > 1 else name


@dataclass
class Run:
    label: str
    config: RunConfig
    decoder: SpeculativeDecoder
    error: str | None = None  # a failed round: the run keeps its records but cannot continue

    @property
    def records(self) -> list[StepRecord]:
        return self.decoder.records

    @property
    def done(self) -> bool:
        return self.decoder.done or self.error is not None

    @property
    def device_type(self) -> str:
        return self.decoder.device.type


@dataclass
class StepSession:
    """One prompt decoded by one run (or two, side by side), and the baseline that times them."""

    prompt: str
    config: RunConfig
    compare: RunConfig | None
    prompt_ids: list[int]
    token_text: TokenTexts
    runs: list[Run]
    baseline: BaselineRun  # shared, measured in the background (read-only here; tests hand tests/plain_baseline.py's)
    target: LoadedModel | None = None  # whose queue the rounds wait in
    memo: dict = field(default_factory=dict, repr=False, compare=False)  # frames and figures per round (specviz.ui.common.memo)
    run_token: str | None = None  # its key in the run directory once saved (specviz.ui.room.saved_runs)
    reservation: Reservation | None = field(default=None, repr=False, compare=False)  # its KV cache's share (hold())

    def hold(self, reservation: Reservation) -> StepSession:
        """Keep the runs' share of the server's KV budget until release(), or until this session object goes away."""
        self.reservation = reservation
        weakref.finalize(self, reservation.release)
        return self

    def release(self) -> None:
        """Give the runs' KV share back (Reset, a new run, the sweeper freeing the session)."""
        if self.reservation is not None:
            self.reservation.release()

    @property
    def done(self) -> bool:
        return all(r.done for r in self.runs)

    @property
    def num_rounds(self) -> int:
        return max(len(r.records) for r in self.runs)

    @property
    def prompt_texts(self) -> list[str]:
        return [self.token_text(t) for t in self.prompt_ids]

    def matches(self, config: RunConfig | None, compare: RunConfig | None, prompt: str) -> bool:
        # compare field values, not objects: a dev server that reloads edited modules makes a new RunConfig class
        return _fields(config) == _fields(self.config) and _fields(compare) == _fields(self.compare) and prompt == self.prompt

    def changes(self, config: RunConfig | None, compare: RunConfig | None, prompt: str) -> list[str]:
        """What differs between this run's settings and the sidebar's, for the notice."""
        out = ["the prompt"] if prompt != self.prompt else []
        out += describe_changes(self.config, config)
        before, after = (run_name(c) if c else "off" for c in (self.compare, compare))
        if before != after:
            out.append(f"compare: {before} → {after}")
        return out


def _fields(config: RunConfig | None) -> dict | None:
    return None if config is None else config.to_dict()


@dataclass
class PageState:
    session: StepSession | None = None
    playing: bool = False
    freed: bool = False  # the runs were freed after the session sat idle (the page says so once)
    freed_token: str | None = None  # the freed run's saved file: the page restores it on its next rerun

    def free(self) -> None:
        """Drop the runs (the decoders and their caches): the session sat idle, its tab is gone, or the server's
        budget needed its share for another client. A baseline still being measured for this session alone is then
        dropped by the worker too (it holds it weakly)."""
        if self.session is not None:
            self.freed, self.freed_token = True, self.session.run_token
            self.session.release()
        self.session, self.playing = None, False


def evict_when_idle(state: PageState, session: StepSession) -> None:
    """Let the server's KV budget free this run while it sits idle and its client holds more than its fair share
    (specviz.workshop.budgets): the page drops it as the idle sweep does, and restores it from its saved file at the
    same round on its next rerun (specviz.ui.room.saved_runs.restore_run). Weak references: nothing kept alive."""
    if session.reservation is None:
        return
    state_ref, session_ref = weakref.ref(state), weakref.ref(session)

    def evict() -> None:
        page = state_ref()
        if page is not None and page.session is not None and page.session is session_ref():
            page.free()

    session.reservation.evictable(evict)


def page_state() -> PageState:
    if STATE_KEY not in st.session_state:
        st.session_state[STATE_KEY] = PageState()
    state = st.session_state[STATE_KEY]
    if getattr(state, "freed", False):
        if getattr(state, "freed_token", None):
            st.info("This session sat idle, so its runs were freed to make room for others; it comes back from its saved file.")
        else:
            st.info("This session sat idle, so its runs were freed to make room for others. Press **Step** to start again.")
        state.freed = False
    return state


def describe_changes(old: RunConfig, new: RunConfig | None) -> list[str]:
    """'k: 4 → 6'-style lines for the fields that differ."""
    if new is None:
        return []
    a, b = old.to_dict(), new.to_dict()
    return [f"{name}: {a[name]!r} → {b[name]!r}" for name in a if a[name] != b[name]]


def decode_key(config: RunConfig) -> tuple:
    """What plain decoding under this config depends on: every field but the drafter's (a field added later counts
    until the field table marks it drafter_only, so a new setting can only make sharing rarer, never wrong)."""
    return tuple(sorted((k, v) for k, v in config.to_dict().items() if k not in DRAFTER_FIELDS))


def baseline_key(config: RunConfig, prompt: str) -> tuple:
    """What plain decoding's output and speed depend on: the target, where it runs, the sampling, the prompt."""
    return (decode_key(config), prompt)


def shared_baseline_key(config: RunConfig, target: LoadedModel, prompt_ids: list[int]) -> tuple:
    """The key sessions share a baseline under: the loaded model (name, device, precision), the prompt's ids and
    the decoding settings."""
    return (target.name, str(target.device), str(target.dtype), tuple(prompt_ids), decode_key(config))


def request_baseline(config: RunConfig, target: LoadedModel, prompt_ids: list[int]) -> BaselineRun:
    """The shared baseline for this run (measured once per key, in the background); never waits for the model."""
    ids = list(prompt_ids)

    def make_decoder() -> SpeculativeDecoder:  # holds the model, the config and the ids: no session object
        return build_decoder(config, RunModels(target), ids, baseline=True)

    return baseline_worker().request(shared_baseline_key(config, target, ids), make_decoder, target_queue(target), config.max_new_tokens)


def session_kv_tokens(configs: list[RunConfig], models: list[RunModels], num_prompt_tokens: int) -> int:
    """What a session's runs can hold at once: every run's caches (specviz.runs.kv_tokens) and the plain-decoding
    baseline's, measured for it in the background."""
    runs = sum(kv_tokens(c, m, num_prompt_tokens) for c, m in zip(configs, models))
    return runs + kv_tokens(configs[0], RunModels(models[0].target), num_prompt_tokens, baseline=True)


def start_session(state: PageState, config: RunConfig, compare: RunConfig | None, prompt: str) -> StepSession:
    """Load models (cached), check and encode the prompt, reserve the runs' KV cache, build the run(s) (the prefill,
    in a model turn) and fetch or start the baseline. Raises ValueError with a message for the user, before any model
    turn when the prompt is over the budgets."""
    validate_prompt(prompt)  # the characters, before a model loads for nothing
    configs = [config] + ([compare] if compare is not None else [])
    target = load_target(config)
    ids = budgets.prompt_ids(target, prompt, config.chat, max(c.max_new_tokens for c in configs), max(c.k_ceiling for c in configs))
    labels = [run_name(c) for c in configs]
    if compare is not None:
        labels = [f"A: {labels[0]}", f"B: {labels[1]}"]
    models = [run_models(c, target=target) for c in configs]  # loaded (cached) before a turn: a slow load must not hold the queue
    reservation = budgets.reserve("step-through", target, session_kv_tokens(configs, models, len(ids)))
    try:
        with model_turn(target, "your prefill"):  # building a decoder runs the prefill: a model pass like any round
            runs = [Run(label, c, build_decoder(c, m, ids)) for label, c, m in zip(labels, configs, models)]
    except BaseException:
        reservation.release()
        raise
    baseline = request_baseline(config, target, ids)
    session = StepSession(prompt, config, compare, ids, TokenTexts(target.tokenizer), runs, baseline, target).hold(reservation)
    if state.session is not None:
        state.session.release()  # the new run replaces the old one
    evict_when_idle(state, session)
    return session


def step_session(session: StepSession) -> bool:
    """One round of every unfinished run. Errors stay on the run. The baseline is not stepped here: it is measured
    in the background (the speedup says "measuring…" until it covers the run).

    The whole round is one turn in the target's queue. Returns False when the wait timed out (a warning says so;
    nothing ran and the runs can continue later), so loops like Run to end stop instead of waiting forever.
    The wait and the round's time go to this rerun's timing line (specviz.ui.common.timing); a Step of runs that have all
    finished runs nothing and counts no round."""
    if session.done:
        return True
    if session.reservation is not None:
        session.reservation.touch()  # in use: not idle
    if session.target is None:
        with timing.round_clock():
            _round(session)
        return True
    try:
        with model_turn(session.target):
            with timing.round_clock():
                _round(session)
    except ValueError as exc:
        st.warning(md_text(exc))
        return False
    return True


def _round(session: StepSession) -> None:
    for run in session.runs:
        if run.done:
            continue
        try:
            run.decoder.step()
        except Exception as exc:
            run.error = friendly_error(exc)
