"""Fork from here, exactly: the presenter's run saved after round N (the file a replica wrote), loaded on another
and continued by the follower's own decoder (the path specviz.ui.room.fork takes: rebuild_session ->
specviz.ui.room.saved_runs._resumed) emits exactly what the presenter's run emits next, at T=0 and at T=1. The known-bad
control forks without restoring the generators (the seed's state) and must differ at T=1."""

from __future__ import annotations

import dataclasses

import pytest

from specviz.config import RunConfig
from specviz.recording.build import build_recording, recorded_run
from specviz.runs import RunModels, build_decoder
from specviz.ui.room.saved_runs import _resumed
from specviz.workshop.saved_runs import RunStore, SavedRun, new_token
from tests.test_models import prompt_ids
from tests.test_saved_runs import ENV

FORK_AT = 3


def _presented(target, config: RunConfig, tmp_path) -> tuple[object, SavedRun]:
    """The presenter's decoder after FORK_AT rounds, and its saved run as another replica reads it back."""
    ids = prompt_ids(target)
    dec = build_decoder(config, RunModels(target), ids)
    for _ in range(FORK_AT):
        dec.step()
    recording = build_recording(
        prompt="the prompt", prompt_ids=ids, runs=[recorded_run("n-gram model", config, dec.records, prefill_ms=dec.prefill_ms)], baseline=None,
        token_text=lambda i: f"t{i}", environment=ENV | {"vocab_size": target.vocab_size},
    )  # fmt: skip
    store, token = RunStore(tmp_path), new_token()
    store.save(token, SavedRun(recording, (dec.state(),)))
    return dec, store.load(token)


def _config(temperature: float) -> RunConfig:
    return RunConfig(target="llama", drafter="ngram", temperature=temperature, seed=11, max_new_tokens=32, num_draft_tokens=3, auto_k=False, ngram_threshold=0.0)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_fork_continues_exactly_as_the_presenters_run(tiny_models, tmp_path, temperature, one_thread):
    target = tiny_models["llama"]
    presenter, saved = _presented(target, _config(temperature), tmp_path)
    fork = _resumed(saved.recording.runs[0], saved.states[0], RunModels(target), list(saved.recording.prompt_ids))
    assert fork.generated == presenter.generated and len(fork.records) == FORK_AT
    presenter.run()
    fork.run()
    assert fork.generated == presenter.generated
    assert [r.emitted for r in fork.records] == [r.emitted for r in presenter.records]


def test_known_bad_control_a_fork_without_the_generator_state_differs(tiny_models, tmp_path, one_thread):
    target = tiny_models["llama"]
    config = _config(1.0)
    presenter, saved = _presented(target, config, tmp_path)
    seed_state = build_decoder(config, RunModels(target), prompt_ids(target)).state()  # what a fork that ignores the saved state uses
    naive = dataclasses.replace(saved.states[0], generator=seed_state.generator)
    fork = _resumed(saved.recording.runs[0], naive, RunModels(target), list(saved.recording.prompt_ids))
    presenter.run()
    fork.run()
    assert fork.generated != presenter.generated
