"""A measured speedup the physics allows: never above the tokens per target pass (specviz.core.metrics), and a
baseline that background work measures only while no rerun is in flight (specviz.workshop.foreground), taking
again any plain step a rerun overlapped (SpeculativeDecoder.checkpoint / restore)."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest

from specviz.config import RunConfig
from specviz.core.decoding import DecodeConfig, SpeculativeDecoder
from specviz.core.metrics import run_metrics, speedup_disturbed
from specviz.core.sampling import SamplingConfig
from specviz.drafters.base import NoDrafter
from specviz.drafters.lookup import PromptLookupDrafter
from specviz.models import encode_prompt
from specviz.runs import RunModels, build_decoder
from specviz.viz.frames import rounds_frame
from specviz.viz.metrics import DISTURBED, metric_values
from specviz.workshop.baselines import BaselineWorker, _outlier
from specviz.workshop.foreground import Foreground
from specviz.workshop.queues import ModelQueue
from tests.toys import RepeatLM, TableLM, fake_clock

PROMPT_IDS = [0, 1, 2, 3, 4, 5, 6, 7, 0, 1]  # RepeatLM counts up: prompt lookup's drafts are all kept


def runs(baseline_ms_per_read: float):
    config = DecodeConfig(num_draft_tokens=4, max_new_tokens=20)
    spec = fake_clock(SpeculativeDecoder(RepeatLM(8), PromptLookupDrafter(), PROMPT_IDS, config), 1.0)
    plain = fake_clock(SpeculativeDecoder(RepeatLM(8), NoDrafter(), PROMPT_IDS, config), baseline_ms_per_read)
    return spec.run(), plain.run()


def test_a_speedup_above_the_tokens_per_pass_is_detected_not_shown():
    records, baseline = runs(1.0)  # a round costs what a plain step costs: the speedup is exactly tau, the bound
    m = run_metrics(records, baseline)
    assert m.tokens_per_target_pass == pytest.approx(5.0) and m.speedup == pytest.approx(5.0) and not m.speedup_disturbed
    records, inflated = runs(1.5)  # plain decoding timed 1.5x slow (the page's background baseline beside a rerun)
    m = run_metrics(records, inflated)
    assert m.speedup is None and m.speedup_disturbed and m.to_json()["speedup_disturbed"] is True
    assert metric_values(m)["speedup"] == DISTURBED
    df = rounds_frame(records, "lookup", inflated)
    assert df["speedup_disturbed"].all() and df["speedup"].isna().all()  # the curve draws no impossible point
    df = rounds_frame(records, "lookup", runs(0.8)[1])  # a verify pass at 1.25x a plain step: 4x at 5 tokens per pass
    assert not df["speedup_disturbed"].any() and df["speedup"].to_numpy() == pytest.approx(4.0)


def test_the_bound_is_the_tokens_per_pass():
    assert not speedup_disturbed(2.0, 2.0) and speedup_disturbed(2.01, 2.0)
    assert not speedup_disturbed(None, 2.0) and not speedup_disturbed(3.0, None)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_restore_takes_the_same_step_again(temperature):
    config = DecodeConfig(num_draft_tokens=0, max_new_tokens=12, sampling=SamplingConfig(temperature=temperature))
    whole = SpeculativeDecoder(TableLM(3), NoDrafter(), [1, 2, 3], config)
    whole.run()
    again = SpeculativeDecoder(TableLM(3), NoDrafter(), [1, 2, 3], config)
    while not again.done:
        mark = again.state()
        first = again.step()
        again.restore(mark)  # thrown away, as a disturbed baseline step is
        carried = mark.num_rounds == 0  # back to the prefill, which cached the newest token and kept its row
        assert len(again.records) == mark.num_rounds and len(again.target.tokens) == len(again.tokens) - (0 if carried else 1)
        assert again.step().emitted == first.emitted  # the same draw again
    assert again.generated == whole.generated


def test_restore_undoes_a_bad_variant():
    """Control: without restoring the generator a sampled step draws differently, so the test above can fail."""
    config = DecodeConfig(num_draft_tokens=0, max_new_tokens=30, sampling=SamplingConfig(temperature=1.0))
    whole = SpeculativeDecoder(TableLM(3), NoDrafter(), [1, 2, 3], config)
    whole.run()
    bad = SpeculativeDecoder(TableLM(3), NoDrafter(), [1, 2, 3], config)
    while not bad.done:
        mark = bad.state()
        bad.step()
        rng = bad.generator.get_state()
        bad.restore(mark)
        bad.generator.set_state(rng)  # the known-bad variant: keep the advanced generator
        bad.step()
    assert bad.generated != whole.generated


def _plain_job(tiny_models, max_new: int = 8):
    target = tiny_models["llama"]
    config = RunConfig(target="tiny", max_new_tokens=max_new, chat=False, temperature=1.0, seed=3)
    ids = encode_prompt(target.tokenizer, "the cat sat on the mat", chat=False)
    return target, config, ids, (lambda: build_decoder(config, RunModels(target), ids, baseline=True))


class SeenWaiting(Foreground):
    """A Foreground that says when background work has waited on it: a poll of wait_idle passed (check_stop is
    called) and the work was still held back."""

    def __init__(self, settle_s: float = 0.0) -> None:
        super().__init__(settle_s=settle_s)
        self.waited = threading.Event()

    def wait_idle(self, check_stop=lambda: None, poll_s: float = 0.25) -> int:
        def check() -> None:
            self.waited.set()
            check_stop()

        return super().wait_idle(check, poll_s)


def test_background_baseline_makes_no_progress_while_a_step_is_in_flight(tiny_models):
    _, _, _, make = _plain_job(tiny_models)
    busy = SeenWaiting()
    worker = BaselineWorker(busy=busy)
    with busy.busy():  # a Step (its round, then its drawing) in flight in this process
        run = worker.request(("k",), make, ModelQueue("tiny"), 8)
        assert busy.waited.wait(30)  # the worker ran, reached the measurement and was held back
        assert run.prefill_ms is None and run.records == ()  # not even the prefill
    assert run.wait_for(8, timeout_s=60) and run.finished
    worker.stop()


def test_a_plain_step_that_a_rerun_overlapped_is_taken_again(tiny_models):
    """Reruns start while the worker steps: every step they overlap is thrown away and taken again, and what is
    kept is still plain decoding's own output (sampled: the generator is restored with the cache)."""
    _, config, ids, make = _plain_job(tiny_models, max_new=16)
    target = tiny_models["llama"]
    busy = Foreground(settle_s=0.0)
    worker = BaselineWorker(busy=busy)
    run = worker.request(("k",), make, ModelQueue("tiny"), 16)
    stop = threading.Event()

    def reruns():  # short reruns, back to back with short gaps
        while not stop.is_set():
            with busy.busy():
                time.sleep(0.003)
            time.sleep(0.002)

    thread = threading.Thread(target=reruns)
    thread.start()
    try:
        assert run.wait_for(16, timeout_s=120)
    finally:
        stop.set()
        thread.join(5)
    worker.stop()
    plain = build_decoder(config, RunModels(target), ids, baseline=True)
    plain.run()
    assert run.generated == plain.generated
    assert worker.disturbed > 0  # the overlap was seen (and the step taken again), not timed


def test_background_work_waits_for_the_browser_to_draw_the_last_rerun():
    now = [100.0]
    busy = Foreground(settle_s=0.5, clock=lambda: now[0])
    assert busy.wait_idle() == 0  # nothing ran yet: idle at once
    with busy.busy():
        pass
    polled = threading.Event()
    waiter = threading.Thread(target=busy.wait_idle, kwargs={"check_stop": polled.set, "poll_s": 0.01})
    waiter.start()
    assert polled.wait(5)  # a poll passed and it did not return: the rerun ended 0 s ago (fake clock), its page may still be drawing
    assert waiter.is_alive()
    now[0] += 0.6
    waiter.join(5)
    assert not waiter.is_alive()


def test_a_plain_step_far_slower_than_its_neighbours_is_an_outlier():
    def plain(ms: float):
        return replace(runs(1.0)[1][0], round_ms=ms)

    steady = tuple(plain(ms) for ms in (20.0, 21.0, 22.0, 20.5))
    assert _outlier(plain(40.0), steady) and not _outlier(plain(25.0), steady)
    assert not _outlier(plain(400.0), steady[:2])  # too few steps to judge


def test_a_server_runs_torch_on_one_thread_unless_the_owner_says_otherwise():
    from specviz.workshop.queues import server_threads

    assert server_threads({}) == 1  # many threads run torch in a server: one intra-op thread each
    assert server_threads({"OMP_NUM_THREADS": "2"}) is None  # the room (or the owner) set it: torch follows it
    assert server_threads({"SPECVIZ_TORCH_THREADS": "4", "OMP_NUM_THREADS": "2"}) == 4
    for bad in ("0", "two", "-1"):
        with pytest.raises(ValueError, match="SPECVIZ_TORCH_THREADS"):
            server_threads({"SPECVIZ_TORCH_THREADS": bad})
