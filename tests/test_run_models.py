"""Which models a run needs is decided in one place: each drafter's row in the table names its model source
(DrafterSpec.source), resolve_models loads exactly those, and make_drafter builds from them. Stand-in loaders here:
no model is loaded."""

from __future__ import annotations

import dataclasses
from typing import get_args

import pytest

from specviz.config import RunConfig
from specviz.drafters.specs import DRAFTER_KINDS, DRAFTERS, ModelSource, drafter_spec
from specviz.runs import SOURCES, RunModels, resolve_models

PARTS = tuple(f.name for f in dataclasses.fields(RunModels) if f.name != "target")  # what a source may load


def test_every_model_source_is_a_run_models_field_or_the_target_or_none():
    assert set(get_args(ModelSource)) == {"none", "target", *PARTS}
    assert set(SOURCES) == set(get_args(ModelSource))  # make_drafter knows every source
    assert {d.source for d in DRAFTERS} == set(get_args(ModelSource))  # and every source is some drafter's


def _resolve(drafters: list[str]) -> tuple[RunModels, list[str]]:
    """resolve_models with stand-in loaders that record what they were asked to load."""
    calls: list[str] = []
    target = object()

    def load(source: str):
        calls.append(f"load {source}")
        return f"model {source}"

    def part(name: str):
        return lambda *args: calls.append(name) or name

    config = RunConfig(draft="d", exit_layer=1)
    models = resolve_models(config, load, part("early_exit"), part("heads"), target=target, drafters=drafters, eagle_of=part("eagle"))  # type: ignore[arg-type]
    assert models.target is target
    return models, calls


@pytest.mark.parametrize("kind", DRAFTER_KINDS)
def test_resolve_models_loads_exactly_the_source_a_drafter_names(kind):
    models, calls = _resolve([kind])
    source = drafter_spec(kind).source
    loaded = {part: getattr(models, part) for part in PARTS if getattr(models, part) is not None}
    if source in PARTS:
        assert list(loaded) == [source] and len(calls) == 1
        assert calls == (["load d"] if source == "draft" else [source])
    else:  # the target's own passes, or the context alone: nothing more to load
        assert loaded == {} and calls == []


def test_a_sweep_loads_each_source_once_in_order():
    models, calls = _resolve(list(DRAFTER_KINDS) + list(DRAFTER_KINDS))
    assert calls == ["load d", "early_exit", "heads", "eagle"]
    assert (models.draft, models.early_exit, models.heads, models.eagle) == ("model d", "early_exit", "heads", "eagle")


def test_a_missing_draft_model_is_named_before_anything_loads():
    calls: list[str] = []
    with pytest.raises(ValueError, match="draft"):
        resolve_models(RunConfig(), lambda s: calls.append(s), target=object(), drafters=["model"])  # type: ignore[arg-type]
    assert calls == []


def test_a_sweep_builds_each_missing_part_its_drafters_name_once(monkeypatch):
    import types

    import specviz.runs
    from specviz.experiments.bench import SweepModels, SweepSpec

    calls: list[str] = []
    monkeypatch.setattr(specviz.runs, "load_target_heads", lambda folder, target: calls.append("heads") or "heads")
    monkeypatch.setattr(specviz.runs, "load_target_eagle", lambda folder, target: calls.append("eagle") or "eagle")
    target = types.SimpleNamespace(name="t")
    spec = SweepSpec(drafters=("lookup", "early-exit", "medusa", "eagle", "recycle"))
    models = SweepModels(target, spec, early_exit="handed in").resolved()  # type: ignore[arg-type]
    assert calls == ["heads", "eagle"]
    assert (models.early_exit, models.heads, models.eagle, models.draft) == ("handed in", "heads", "eagle", None)
    assert SweepModels(target, SweepSpec(drafters=("lookup", "ngram"))).resolved().run_models == specviz.runs.RunModels(target)  # type: ignore[arg-type]
