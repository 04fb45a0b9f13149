"""The server's garbage collection: no full collection after every rerun, and the models' objects frozen out of the
collector once loaded (docs/performance.md, "Settings"). A full walk over torch, transformers and plotly holds the GIL
for about 0.25 s; py-spy found it under 28% of a loaded server's busy samples."""

from __future__ import annotations

import gc
import tomllib
import weakref
from pathlib import Path

import pytest

from specviz.ui.common import models as ui_models

REPO = Path(__file__).resolve().parents[1]


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cycle collector frees it


@pytest.fixture
def unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_streamlit_runs_no_full_collection_after_each_rerun():
    config = tomllib.loads((REPO / ".streamlit" / "config.toml").read_text())
    assert config["runner"]["postScriptGC"] is False
    assert config["server"]["fileWatcherType"] == "none"


def test_loading_a_model_freezes_what_is_alive(monkeypatch, unfrozen):
    monkeypatch.setattr(ui_models, "check_fits", lambda source, device: None)
    monkeypatch.setattr(ui_models, "load_model", lambda *args, **kwargs: object())
    ui_models._cached_model.clear()
    try:
        assert gc.get_freeze_count() == 0
        ui_models._cached_model("tiny-for-gc-test", "cpu", "float32", False, False, False)
        assert gc.get_freeze_count() > 0
    finally:
        ui_models._cached_model.clear()


def test_what_sessions_make_after_the_freeze_is_still_collected(unfrozen):
    ui_models.freeze_long_lived()
    later = _Node()
    ref = weakref.ref(later)
    del later
    gc.collect()
    assert ref() is None


def test_frozen_garbage_is_collected_at_the_next_load(unfrozen):
    before = _Node()
    ref = weakref.ref(before)
    ui_models.freeze_long_lived()  # `before` is alive here: frozen
    del before
    gc.collect()
    assert ref() is not None, "a frozen cycle is not collected (if this fails, freezing does nothing)"
    ui_models.freeze_long_lived()  # the next load unfreezes and collects first
    assert ref() is None
