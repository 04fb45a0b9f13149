"""Tree rounds in records, recordings, the CLI and the viz: a compare session (tree beside chain) replays
view for view from its recording, a broken tree record is a clear error, the CLI lists nodes and the
accepted path, and token texts are escaped in the tree's hover text."""

from __future__ import annotations

import json

import pytest

from specviz.recording.build import dumps
from specviz.recording.load import load_recording
from specviz.recording.schema import RecordingError
from specviz.viz.tree import mask_figure, mask_frame, tree_figure, tree_frame
from tests.test_cli import parse_one_json, run_main
from tests.test_recording import HOSTILE, PROMPT, assert_same_views, views_of

pytestmark = pytest.mark.usefixtures("one_thread")


def test_tree_runs_replay_view_for_view(tree_compare):
    from specviz.ui.step_through.replay import ReplaySession

    session, snapshots, recording = tree_compare
    trees = [r for r in session.runs[0].records if r.is_tree]
    assert trees and not any(r.is_tree for r in session.runs[1].records)
    assert any("rejected" in r.draft_fates for r in trees) and any(r.accepted_path for r in trees)
    loaded = load_recording(dumps(recording).encode("utf-8"))
    assert loaded == recording
    assert loaded.runs[0].records[0].tree_parents == trees[0].tree_parents
    for n, expected in enumerate(snapshots, start=1):
        assert_same_views(expected, views_of(ReplaySession.open(loaded, "test", shown=n)))


def test_old_records_without_tree_fields_still_load(tree_compare):
    raw = json.loads(dumps(tree_compare[2]))
    for rec in raw["runs"][1]["records"]:
        for key in ("tree_width", "tree_parents", "accepted_path", "tree_p_current"):
            rec.pop(key)
    loaded = load_recording(json.dumps(raw).encode("utf-8"))
    assert all(not r.is_tree and r.tree_width == 1 for r in loaded.runs[1].records)
    # the chain-as-tree view is derived, never stored: an old chain record reads node i under node i - 1
    assert all(r.node_parents == tuple(range(-1, r.num_drafted - 1)) for r in loaded.runs[1].records)
    assert all(r.node_path == tuple(range(r.num_accepted)) for r in loaded.runs[1].records)


def test_a_broken_tree_record_is_a_clear_error(tree_compare):
    raw = json.loads(dumps(tree_compare[2]))
    rec = next(r for r in raw["runs"][0]["records"] if r["accepted_path"])
    rec["accepted_path"] = [len(rec["drafted"]) + 3]
    with pytest.raises(RecordingError, match="accepted path"):
        load_recording(json.dumps(raw).encode("utf-8"))


def test_tree_frames_and_figures(tree_compare):
    session = tree_compare[0]
    rec = next(r for r in session.runs[0].records if r.is_tree and "rejected" in r.draft_fates)
    frame = tree_frame(rec, lambda t: HOSTILE)
    assert len(frame) == rec.num_drafted and frame["on_path"].sum() == len(rec.accepted_path)
    fig = tree_figure(rec, lambda t: HOSTILE).to_json()
    assert "<script>" not in fig and "&lt;script&gt;" in fig
    mask = mask_frame(rec, str)
    assert len(mask) == (rec.num_drafted + 1) ** 2 and mask["sees"].sum() > rec.num_drafted
    assert "<script>" not in mask_figure(rec, lambda t: HOSTILE).to_json()


def test_cli_json_lists_tree_nodes_and_the_accepted_path(capsys, tiny_dir):
    args = ["generate", "--target", str(tiny_dir["llama"]), "--drafter", "early-exit", "--exit-layer", "1", "--no-chat", "--fixed-k"]
    code, stdout, _ = run_main(capsys, *args, "--prompt", PROMPT, "--json", "--max-new-tokens", "10", "-k", "5", "--tree-width", "2")
    assert code == 0
    out = parse_one_json(stdout)
    steps = out["samples"][0]["steps"]
    trees = [s["tree"] for s in steps if "tree" in s]
    assert trees and out["config"]["tree_width"] == 2
    for tree in trees:
        assert {"token", "parent", "q_draft", "p_target", "fate"} <= set(tree["nodes"][0])
        assert all(tree["nodes"][i]["fate"] == "accepted" for i in tree["accepted_path"])
    code, _, err = run_main(capsys, *args, "--prompt", PROMPT, "--tree-width", "9")
    assert code == 2 and "tree width" in err
