"""Runs that survive their process: a run captured after a round and resumed in a fresh decoder (fresh caches,
fresh drafter, generators restored) continues with exactly the tokens the uninterrupted run emits."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from specviz.config import RunConfig
from specviz.core.resume import RunState
from specviz.runs import RunModels, SavedDecoder, build_decoder, resume_decoder
from tests.test_models import prompt_ids

MAX_NEW = 32
CASES = [  # (drafter, tree width): every drafter as a chain, the tree drafters as a width-2 tree
    ("ngram", 1), ("lookup", 1), ("model", 1), ("early-exit", 1), ("none", 1),
    ("ngram", 2), ("model", 2), ("early-exit", 2),
]  # fmt: skip


def _config(drafter: str, width: int, temperature: float, adaptive: bool = True) -> RunConfig:
    return RunConfig(
        target="llama", drafter=drafter, draft="d" if drafter == "model" else None, exit_layer=1, num_draft_tokens=3,
        tree_width=width, ngram_threshold=0.0, temperature=temperature, seed=7, max_new_tokens=MAX_NEW, adaptive_k=adaptive,
    )  # fmt: skip


def _saved(dec) -> SavedDecoder:
    """What the run directory keeps, through JSON like the file (records stay objects: the recording carries them)."""
    state = RunState.from_dict(json.loads(json.dumps(dec.state().to_dict())), len(dec.records))
    return SavedDecoder(list(dec.generated), list(dec.records), state, dec.config.seed, dec.prefill_ms)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize(("drafter", "width"), CASES)
def test_a_resumed_run_continues_the_uninterrupted_stream(tiny_models, drafter, width, temperature, one_thread):
    target, draft = tiny_models["llama"], tiny_models["llama_draft"] if drafter == "model" else None
    config, ids = _config(drafter, width, temperature), prompt_ids(tiny_models["llama"])
    solo = build_decoder(config, RunModels(target, draft), ids)
    solo.run()
    for stop_after in (1, 3):
        dec = build_decoder(config, RunModels(target, draft), ids)
        for _ in range(stop_after):
            dec.step()
        resumed = resume_decoder(config, RunModels(target, draft), ids, _saved(dec))
        assert len(resumed.records) == stop_after and resumed.generated == dec.generated
        resumed.run()
        assert resumed.generated == solo.generated, (drafter, width, temperature, stop_after)
        assert [r.emitted for r in resumed.records] == [r.emitted for r in solo.records]
        assert [r.num_draft_tokens for r in resumed.records] == [r.num_draft_tokens for r in solo.records]  # adaptive k


def test_known_bad_control_a_resume_without_the_generator_state_diverges(tiny_models, one_thread):
    """Restarting the generators from the seed (instead of their saved state) redraws used uniforms: at T=1 the
    continued stream must differ from the uninterrupted one, or the test above could not tell."""
    target, ids = tiny_models["llama"], prompt_ids(tiny_models["llama"])
    config = _config("ngram", 1, 1.0)
    solo = build_decoder(config, RunModels(target), ids)
    solo.run()
    dec = build_decoder(config, RunModels(target), ids)
    for _ in range(3):
        dec.step()
    saved = _saved(dec)
    fresh_state = replace(build_decoder(config, RunModels(target), ids).state(), num_rounds=len(saved.records))  # the seed's: what a naive restore uses
    bad = resume_decoder(config, RunModels(target), ids, SavedDecoder(saved.generated, saved.records, fresh_state, saved.seed))
    bad.run()
    assert bad.generated != solo.generated


@pytest.mark.parametrize(
    "raw",
    [None, [], {"generator": 1, "draft_generator": None, "k": 1, "finished": False}, {"generator": "!!", "draft_generator": None, "k": 1, "finished": False},
     {"generator": "AA==", "draft_generator": None, "k": -1, "finished": False}, {"generator": "AA==", "draft_generator": None, "k": 1, "finished": "no"}],
)  # fmt: skip
def test_bad_saved_states_are_refused(raw):
    with pytest.raises(ValueError):
        RunState.from_dict(raw, 0)


def test_a_state_that_does_not_fit_the_generator_is_a_value_error(tiny_models):
    target, ids = tiny_models["llama"], prompt_ids(tiny_models["llama"])
    config = _config("ngram", 1, 1.0)
    dec = build_decoder(config, RunModels(target), ids)
    dec.step()
    saved = _saved(dec)
    broken = RunState.from_dict({"generator": "AAAA", "draft_generator": None, "k": 3, "finished": False}, len(saved.records))
    with pytest.raises(ValueError, match="does not fit"):
        resume_decoder(config, RunModels(target), ids, SavedDecoder(saved.generated, saved.records, broken, saved.seed))
    with pytest.raises(ValueError, match="not the ones"):
        resume_decoder(config, RunModels(target), ids, SavedDecoder([1, 2], saved.records, saved.state, saved.seed))
