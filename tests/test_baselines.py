"""The plain-decoding baseline off the Step's path (specviz.workshop.baselines): shared between sessions with the same settings,
measured once, in background turns of the model's queue; a Step never waits for it. Real models and decoders."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from specviz.config import RunConfig
from specviz.models import encode_prompt
from specviz.runs import RunModels, build_decoder
from specviz.workshop.baselines import BaselineWorker, reset_baselines
from specviz.workshop.queues import ModelQueue
from tests.service_helpers import wait_until

PROMPT = "the cat sat on the mat"


@pytest.fixture(autouse=True)
def _fresh_worker():
    reset_baselines()
    yield
    reset_baselines()


def _plain(config: RunConfig, target, ids, calls: list | None = None):
    def make():
        if calls is not None:
            calls.append(1)
        return build_decoder(config, RunModels(target), ids, baseline=True)

    return make


def test_two_requests_with_the_same_key_compute_one_baseline_equal_to_plain_decoding(tiny_models):
    target = tiny_models["llama"]
    config = RunConfig(target="tiny", max_new_tokens=8, chat=False)
    ids = encode_prompt(target.tokenizer, PROMPT, chat=False)
    worker, queue, calls = BaselineWorker(), ModelQueue("tiny"), []
    first = worker.request(("k", 0), _plain(config, target, ids, calls), queue, 8)
    second = worker.request(("k", 0), _plain(config, target, ids, calls), queue, 8)
    assert first is second and worker.started == 1
    assert first.wait_for(8, timeout_s=60) and first.finished
    plain = build_decoder(config, RunModels(target), ids, baseline=True)
    plain.run()
    assert first.generated == plain.generated and len(calls) == 1  # measured once, the same tokens
    third = worker.request(("k", 0), _plain(config, target, ids, calls), queue, 8)  # finished: from the cache
    assert third is first and worker.started == 1
    other = worker.request(("k", 1), _plain(config, target, ids, calls), queue, 8)  # another key: its own run
    assert other is not first and worker.started == 2
    worker.stop()


def test_background_turns_wait_behind_rounds_and_an_orphaned_job_is_dropped(tiny_models):
    target = tiny_models["llama"]
    config = RunConfig(target="tiny", max_new_tokens=8, chat=False)
    ids = encode_prompt(target.tokenizer, PROMPT, chat=False)
    worker, queue = BaselineWorker(), ModelQueue("tiny")
    gate, held = threading.Event(), threading.Event()

    def a_long_round():
        with queue.turn():
            held.set()
            gate.wait(10)

    holder = threading.Thread(target=a_long_round)
    holder.start()
    assert held.wait(5)
    run = worker.request(("k",), _plain(config, target, ids), queue, 8)
    wait_until(lambda: queue.waiting_background == 1, 30, "the baseline's turn joining the line behind the round")
    assert run.records == () and run.prefill_ms is None  # nothing measured while a round holds the model
    del run  # the only session that wanted it is gone: the job stops without measuring it
    gate.set()
    holder.join(5)
    wait_until(lambda: worker.jobs == 0, 10, "the orphaned job being dropped")
    assert len(worker) == 0
    worker.stop()
    assert not worker._thread.is_alive() and worker._thread.daemon


# --- the page: a Step does not wait for a slow baseline ---------------------------------------------------------

PAGE = str(Path(__file__).resolve().parents[1] / "pages" / "step_through.py")
SLOW_STEP_S = 2.0  # each plain step of the baseline, on purpose


def test_a_step_does_not_wait_for_a_slow_baseline(monkeypatch, smollm):
    import specviz.ui.step_through.session as session_module

    real = session_module.build_decoder

    def slow_baseline(config, target, prompt_ids, *args, baseline=False, **kwargs):
        decoder = real(config, target, prompt_ids, *args, baseline=baseline, **kwargs)
        if baseline:  # this decoder only (nothing shared is changed): every plain step takes SLOW_STEP_S
            step = decoder.step

            def slow():
                time.sleep(SLOW_STEP_S)
                return step()

            decoder.step = slow
        return decoder

    monkeypatch.setattr(session_module, "build_decoder", slow_baseline)
    at = AppTest.from_file(PAGE, default_timeout=180)
    at.run()
    for key, value in {"prompt": "Repeat exactly: red green blue, red green blue.", "drafter": "lookup", "seed": 7}.items():
        next(w for kind in ("text_area", "selectbox", "number_input") for w in getattr(at, kind) if w.key == key).set_value(value)
    at.number_input(key="max_new_tokens").set_value(8)
    at.run()
    for _ in range(2):
        at.button(key="step").click().run()
        assert not at.exception, at.exception
    session = at.session_state["specviz_step_through"].session
    run_tokens = len(session.runs[0].decoder.generated)
    assert run_tokens >= 2 and session.baseline.num_tokens < run_tokens  # the Steps came back before the baseline
    assert next(m.value for m in at.metric if m.label == "speedup") == "measuring…"
    assert session.baseline.wait_for(run_tokens, timeout_s=120)
    at.run()
    shown = next(m.value for m in at.metric if m.label == "speedup")
    # measured, not guessed: a number, or (on a machine busy with other processes) no number and a sentence saying why
    disturbed = any(c.value.startswith("No speedup is shown: the machine was busy") for c in at.caption)
    assert shown.endswith("×") or (shown == "–" and disturbed), shown
