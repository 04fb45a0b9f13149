"""Long jobs share the model like rounds: a sweep, the lab's samplers, the cost profile, the numerics comparison and the
batch measurement take one model turn per run (or per pass), never one for the whole job; a Step waiting behind a sweep gets the
model after one run, not after the sweep; in shared mode a participant's second long job is refused with a message."""

from __future__ import annotations

import contextlib
import importlib
import json
import threading
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from specviz.config import RunConfig
from specviz.experiments.bench import SweepSpec, run_sweep
from specviz.experiments.prompts import load_prompts
from specviz.runs import RunModels
from specviz.workshop.queues import ModelQueue

# Modules that bind get_model by name, imported before any test here patches specviz.ui.common.models.get_model: one
# first imported while the patch is on would keep the stand-in for the rest of the process (and load a tiny model
# for any name in later tests).
KEEP_REAL_GET_MODEL = (importlib.import_module("specviz.ui.room.saved_runs"), importlib.import_module("specviz.ui.step_through.session"))

PAGES = Path(__file__).resolve().parents[1] / "pages"
PROMPTS = [{"category": "copy", "title": "cat", "prompt": "the cat sat on the mat and the dog sat on the log the cat sat on the"}]


class CountingTurn:
    """A Turn that counts its turns and checks they never overlap (a real ModelQueue underneath)."""

    def __init__(self, queue: ModelQueue | None = None) -> None:
        self.queue = queue or ModelQueue("test")
        self.count = 0
        self.held = False

    @contextlib.contextmanager
    def __call__(self):
        with self.queue.turn():
            assert not self.held
            self.held, self.count = True, self.count + 1
            try:
                yield
            finally:
                self.held = False


@pytest.fixture()
def prompts(tmp_path):
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps(PROMPTS), encoding="utf-8")
    return load_prompts(path)


def test_a_sweep_takes_one_turn_per_run_at_least(tiny_models, prompts):
    spec = SweepSpec(drafters=("lookup",), ks=(2,), temperatures=(0.0,), max_new_tokens=8, chat=False, repeats=2, warmup=1)
    turn = CountingTurn()
    rows = run_sweep(RunModels(tiny_models["llama"]), prompts, spec, turn=turn)
    assert turn.count >= spec.num_runs(1) == 6  # one per run; a run over SLICE_S takes more
    assert rows[0].same_as_baseline


def test_a_long_run_gives_the_model_back_between_rounds_and_waits_are_not_charged(tiny_models, prompts):
    from specviz.experiments.timed_runs import run_in_turns

    turn, gaps = CountingTurn(), []

    @contextlib.contextmanager
    def turn_then_someone_else():
        with turn():
            yield
        time.sleep(0.05)  # another session's round between two of ours
        gaps.append(0.05)

    make = lambda: _plain_decoder(tiny_models["llama"], prompts[0].prompt, 12)  # noqa: E731
    start = time.perf_counter()
    decoder, wall_s, _ = run_in_turns(make, turn_then_someone_else, slice_s=0.0)  # every round its own turn
    elapsed = time.perf_counter() - start
    assert decoder.done and turn.count == len(decoder.records) >= 2  # the first turn holds the prefill and round 0
    straight = _plain_decoder(tiny_models["llama"], prompts[0].prompt, 12)
    straight.run()
    assert decoder.generated == straight.generated  # taking turns changes the timing only, never the tokens
    assert wall_s + sum(gaps) <= elapsed + 1e-3, "the time between turns is not the run's time"


def _plain_decoder(target, prompt: str, max_new_tokens: int):
    from specviz.models import encode_prompt
    from specviz.runs import build_decoder

    config = RunConfig(target=target.name, drafter="lookup", num_draft_tokens=2, auto_k=False, temperature=0.0, max_new_tokens=max_new_tokens, chat=False)
    return build_decoder(config, RunModels(target), encode_prompt(target.tokenizer, prompt, False))


def test_a_step_behind_a_sweep_waits_for_one_run_not_the_sweep(tiny_models, prompts):
    queue = ModelQueue("fair")
    spec = SweepSpec(drafters=("lookup",), ks=(2, 4), temperatures=(0.0,), max_new_tokens=16, chat=False, repeats=3, warmup=1)
    started, waits = threading.Event(), []
    sweep_turn = CountingTurn(queue)

    def sweep():
        started.set()
        run_sweep(RunModels(tiny_models["llama"]), prompts, spec, turn=sweep_turn)

    t = threading.Thread(target=sweep)
    t.start()
    started.wait(5)
    while t.is_alive() and len(waits) < 5:
        with queue.turn() as waited:  # a Step: one short turn
            waits.append(waited)
        time.sleep(0.01)
    t.join(120)
    assert len(waits) == 5 and sweep_turn.count >= spec.num_runs(1)
    assert max(waits) < 10.0  # one run of a tiny model, far below the sweep's length


def test_lab_profile_and_numerics_take_many_turns(tiny_models):
    from specviz.experiments.cost_profile import measure_profile
    from specviz.experiments.lab import sample_real
    from specviz.experiments.numerics import compare
    from specviz.runs import RunModels

    target = tiny_models["llama"]
    turn = CountingTurn()
    config = RunConfig(target=target.name, drafter="lookup", num_draft_tokens=1, auto_k=False, temperature=1.0, max_new_tokens=2, chat=False)
    sample_real(config, RunModels(target), "the cat sat on the cat sat on", "engine", 4, turn=turn)
    assert turn.count == 4  # one per pair of runs
    turn.count = 0
    measure_profile(target, max_tokens=3, context_length=8, repeats=2, number=1, drafters=("lookup",), turn=turn)
    assert turn.count >= 2 * 4  # one per measurement (3 pass sizes + a drafter, twice) plus the setup
    turn.count = 0
    ids = target.tokenizer("the cat sat on the mat")["input_ids"]
    compare({"float32": target}, ids, max_new_tokens=4, k=2, drafter="lookup", turn=turn)
    assert turn.count >= 4 + 1 + 2 + 4 + 2  # one per pass: the plain decode's 4 rounds, at least one speculative round,
    # the scoring sweep's two prefills, its four 1-token passes and its two 3-token passes


class PassTurn(CountingTurn):
    """A CountingTurn that also counts the model passes (HFCachedLM.extend) inside each turn and outside any."""

    def __init__(self, queue: ModelQueue | None = None) -> None:
        super().__init__(queue)
        self.per_turn: list[int] = []
        self.outside = 0

    @contextlib.contextmanager
    def __call__(self):
        with super().__call__():
            self.per_turn.append(0)
            yield

    def watch(self, monkeypatch) -> None:
        from specviz.models import HFCachedLM

        extend = HFCachedLM.extend

        def counted(lm, *args, **kwargs):
            if self.held:
                self.per_turn[-1] += 1
            else:
                self.outside += 1
            return extend(lm, *args, **kwargs)

        monkeypatch.setattr(HFCachedLM, "extend", counted)


def _numerics_models(tiny_models) -> tuple[dict, list[int]]:
    target = tiny_models["llama"]
    return {"float32": target, "bfloat16": target}, target.tokenizer(PROMPTS[0]["prompt"])["input_ids"]  # two names: two sweeps


def test_the_numerics_lab_takes_one_model_turn_per_pass(tiny_models, monkeypatch):
    """Issue 26: Measure held the model for its whole batch-invariance check (140 s with a long prompt). Now every
    model pass is its own turn; only a speculative decode's first turn holds two (the prefill and its first round's
    drafts). A plain decode's first round runs no pass: the prefill computed the row it reads."""
    from specviz.experiments.numerics import batch_invariance, compare

    models, ids = _numerics_models(tiny_models)
    turn = PassTurn()
    turn.watch(monkeypatch)
    report = batch_invariance(models, ids, max_new_tokens=12, k=3, turn=turn)
    scoring = 2 * (2 + 12 + 3)  # per precision: two prefills, twelve 1-token passes, ceil(12 / 4) verify-sized passes
    assert turn.outside == 0 and len(report.tokens) == 12
    assert turn.count == 12 + scoring and max(turn.per_turn) == 1  # one plain decode: its prefill computed its first row
    turn = PassTurn()
    turn.watch(monkeypatch)
    compare(models, ids, max_new_tokens=12, k=3, drafter="lookup", turn=turn)
    # four decodes: the two speculative ones' first turns hold two passes (the prefill, then the first round's drafts);
    # the two plain ones' first rounds run no pass
    assert turn.outside == 0 and max(turn.per_turn) == 2 and turn.per_turn.count(2) == 2
    assert turn.count >= 2 * 12 + 2 + scoring


def test_a_step_behind_the_numerics_lab_waits_for_one_pass_not_the_measurement(tiny_models):
    from specviz.experiments.numerics import batch_invariance

    models, ids = _numerics_models(tiny_models)
    queue, started, done = ModelQueue("numerics"), threading.Event(), []
    lab_turn = CountingTurn(queue)

    @contextlib.contextmanager
    def lab():
        with lab_turn():
            started.set()
            yield

    t = threading.Thread(target=lambda: done.append(batch_invariance(models, ids, max_new_tokens=64, k=8, turn=lab)))
    t.start()
    started.wait(10)
    waits, lab_turns_then = [], []
    for _ in range(3):
        with queue.turn() as waited:  # another participant's Step: one short turn
            waits.append(waited)
            lab_turns_then.append(lab_turn.count)
        time.sleep(0.005)
    t.join(120)
    assert done, "the measurement did not finish"
    assert all(n < lab_turn.count for n in lab_turns_then)  # each Step got in while the lab still had passes to make
    assert max(waits) < 5.0  # one pass of a tiny model


def test_a_second_long_job_of_one_participant_is_refused_with_a_message(tiny_models, monkeypatch):
    import specviz.ui.common.models as ui_models
    import specviz.ui.common.turns as turns

    monkeypatch.setenv("SPECVIZ_MODE", "shared")
    monkeypatch.setenv("SPECVIZ_TARGETS", tiny_models["llama"].name)
    monkeypatch.setattr(ui_models, "get_model", lambda *a, **k: tiny_models["llama"])
    monkeypatch.setattr(turns, "session_id_now", lambda: "participant-1")
    at = AppTest.from_file(str(PAGES / "benchmark.py"), default_timeout=120)
    at.run()
    with turns._jobs.hold("participant-1", "the cost profile"):
        at.button(key="bench_run").click().run()
    assert not at.exception
    assert any("already have the cost profile running" in e.value for e in at.error), [e.value for e in at.error]
    at.slider(key="bench_max_new_tokens").set_value(8).run()
    at.button(key="bench_run").click().run()  # the slot is free again: the sweep runs
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert "Run benchmark" in [b.label for b in at.button] and "One long job per participant" in at.button(key="bench_run").help


def test_the_batch_plan_keeps_to_the_owners_caps():
    from specviz.ui.labs.batch import PAGE_BATCH_SIZES, PAGE_MAX_NEW_TOKENS, batch_plan
    from specviz.workshop.policy import Policy

    roomy = batch_plan(4, Policy())
    assert roomy.batch_sizes == PAGE_BATCH_SIZES and roomy.max_new_tokens == PAGE_MAX_NEW_TOKENS and roomy.k == 4
    assert roomy.repeats == 1 and not roomy.limits and roomy.batched_runs == 4 * 2 * 2 <= Policy().max_runs
    tight = batch_plan(4, Policy(max_runs=12, max_new_tokens=8, max_draft_tokens=2))
    assert tight.batch_sizes == (1, 2, 4) and tight.batched_runs == 12  # the largest B goes until the runs fit
    assert (tight.k, tight.max_new_tokens) == (2, 8)
    assert len(tight.limits) == 3 and "B is limited to 4" in tight.limits[0]
    assert batch_plan(4, Policy(max_runs=3)).batch_sizes == (1,)  # at least B = 1, whatever the cap
    assert batch_plan(16, Policy.local()).repeats == 3


def test_the_batch_measurement_takes_one_turn_per_batched_run_within_the_caps(tiny_models, monkeypatch):
    """Shared mode: *Measure on this machine* on the theory page runs `specviz batch`'s measurement as a long job,
    one model turn per batched run (B × side × run), never overlapping, at the owner's caps on B, k and new tokens."""
    import specviz.ui.common.models as ui_models
    import specviz.ui.common.turns as turns
    import specviz.ui.labs.batch as batch_lab

    monkeypatch.setenv("SPECVIZ_MODE", "shared")
    monkeypatch.setenv("SPECVIZ_TARGETS", tiny_models["llama"].name)
    for name, value in (("SPECVIZ_MAX_RUNS", "12"), ("SPECVIZ_MAX_NEW_TOKENS", "8"), ("SPECVIZ_MAX_DRAFT_TOKENS", "2")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(ui_models, "get_model", lambda *a, **k: tiny_models["llama"])
    monkeypatch.setattr(turns, "session_id_now", lambda: "participant-1")
    seen, counting = {}, CountingTurn()
    real = batch_lab.measure_batches

    def counted(models, setup, batch_sizes, on_progress=None, turn=None):
        @contextlib.contextmanager
        def each():
            with turn(), counting():  # the job's own turn (the server's queue) and our count inside it
                yield

        seen.update(setup=setup, sizes=tuple(batch_sizes))
        return real(models, setup, batch_sizes, on_progress=on_progress, turn=each)

    monkeypatch.setattr(batch_lab, "measure_batches", counted)
    at = AppTest.from_file(str(PAGES / "theory.py"), default_timeout=120).run()
    at.button(key="batch_measure").click().run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert any("B is limited to 4" in e for e in errors) and any("k is limited to 2" in e for e in errors), errors
    assert not any("Could not measure" in e for e in errors), errors
    mine = at.session_state["theory_batch_measured"]
    config = seen["setup"].config
    assert seen["sizes"] == (1, 2, 4) and (config.num_draft_tokens, config.max_new_tokens) == (2, 8)
    assert seen["setup"].repeats == 1 and seen["setup"].warmup == 1  # one timed run in shared mode
    margins = sum(len(p.mismatches) for p in mine.points)  # a greedy row that parts from plain: one margin pass each
    assert counting.count == len(seen["sizes"]) * 2 * 2 + margins == mine.plan.batched_runs + margins
    assert all(p.plain_new_tokens <= 8 * p.batch_size for p in mine.points)
    with turns._jobs.hold("participant-1", "a benchmark sweep"):  # one long job per participant
        at.button(key="batch_measure").click().run()
    assert any("already have a benchmark sweep running" in e.value for e in at.error)
