"""AppTest: the step-through page draws a token-tree run (replayed from a recording of the tiny llama, no model
loaded) as a tree beside its attention mask, with hostile token texts escaped; chain runs draw no tree."""

from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from specviz.recording.build import dumps
from tests.test_app_replay import HOSTILE, click, fresh, upload


def tree_specs(at: AppTest) -> list[str]:
    return [el.proto.spec for el in at.get("plotly_chart") if "Tree attention mask" in el.proto.spec or "a tree of" in el.proto.spec]


@pytest.mark.usefixtures("no_model")
def test_a_replayed_tree_run_is_drawn_as_a_tree_beside_its_mask(tree_compare):
    raw = json.loads(dumps(tree_compare[2]))
    raw["token_texts"] = {k: HOSTILE + v for k, v in raw["token_texts"].items()}
    at = fresh()
    upload(at, "tree.json", json.dumps(raw).encode("utf-8"))
    assert not at.error, [e.value for e in at.error]
    click(at, "step")
    specs = tree_specs(at)
    assert len(specs) == 2, "a tree figure and a mask figure"
    assert all("<script>" not in s and "&lt;script&gt;" in s for s in specs)
    assert any("Look at which branch survived" in c.value for c in at.caption)
    click(at, "run_all")
    assert len(tree_specs(at)) == 2
    rounds = next(s for s in at.select_slider if s.key.startswith("tree_round_A: tree"))
    assert str(rounds.value + 1) == rounds.options[-1]  # the latest tree round by default (shown counted from 1)
    rounds.set_value(int(rounds.options[0]) - 1).run()
    assert not at.exception, at.exception
    assert len(tree_specs(at)) == 2


@pytest.mark.usefixtures("no_model")
def test_a_chain_only_recording_draws_no_tree(tree_compare):
    raw = json.loads(dumps(tree_compare[2]))
    raw["runs"] = raw["runs"][1:]  # keep the chain run only
    at = fresh()
    upload(at, "chain.json", json.dumps(raw).encode("utf-8"))
    click(at, "run_all")
    assert not tree_specs(at)
