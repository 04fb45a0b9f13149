"""Medusa in the views: the head of each drafted token (depth + 1), acceptance by head, the round inspector's head
table and the tree drawn by head, on hand-built StepRecords (the app tests run the real drafter)."""

from __future__ import annotations

import dataclasses

import pytest

from specviz.core.metrics import draft_heads, head_acceptance, position_acceptance
from tests.test_metrics import RECORDS, rec


def _with_q(record, q):
    return dataclasses.replace(record, q_draft=tuple(q[: record.num_drafted]))


def test_a_chain_position_i_comes_from_head_i_plus_one():
    assert draft_heads(rec("aard", 3)) == (1, 2, 3, 4)
    assert draft_heads(rec("", 1)) == ()


def test_a_tree_node_at_depth_d_comes_from_head_d_plus_one():
    tree = dataclasses.replace(rec("rard", 2), tree_parents=(-1, -1, 0, 1), accepted_path=(1,), tree_width=2)
    assert draft_heads(tree) == (1, 1, 2, 2)


def test_acceptance_by_head_is_acceptance_by_position_with_the_heads_probability():
    records = [_with_q(r, (0.8, 0.6, 0.4, 0.2)) for r in RECORDS]
    heads = head_acceptance(records)
    positions = position_acceptance(records)
    assert [h.head for h in heads] == [1, 2, 3, 4]
    assert [(h.acceptance.reached, h.acceptance.accepted) for h in heads] == [(p.reached, p.accepted) for p in positions]
    assert heads[0].rate == pytest.approx(3 / 4)
    # tokens tried: head 1 in four rounds, head 2 in three (the 'rddd' round never tried it), ...
    assert [h.tokens_tried for h in heads] == [4, 3, 2, 1]
    assert [h.mean_q for h in heads] == pytest.approx([0.8, 0.6, 0.4, 0.2])
    assert heads[0].mean_p == pytest.approx(0.5)
    assert head_acceptance([]) == ()


def test_a_tree_tries_several_tokens_of_one_head():
    tree = dataclasses.replace(
        rec("rard", 2), tree_parents=(-1, -1, 0, 1), accepted_path=(1,), tree_width=2,
        draft_fates=("rejected", "accepted", "discarded", "rejected"), q_draft=(0.5, 0.3, 0.4, 0.2),
    )  # fmt: skip
    heads = head_acceptance([tree])
    assert [(h.acceptance.reached, h.acceptance.accepted, h.tokens_tried) for h in heads] == [(1, 1, 2), (1, 0, 1)]
    assert heads[0].mean_q == pytest.approx(0.4) and heads[1].mean_q == pytest.approx(0.2)


def test_head_figure_and_frames_escape_what_they_draw():
    from specviz.viz.frames import head_drafts_frame
    from specviz.viz.metrics import head_figure, heads_frame

    records = [_with_q(r, (0.8, 0.6, 0.4, 0.2)) for r in RECORDS]
    df = heads_frame({"<b>run</b>": head_acceptance(records)})
    assert df["head"].tolist() == [1, 2, 3, 4] and df["rate"].iloc[0] == pytest.approx(0.75)
    fig = head_figure(df)
    assert all("<b>" not in (t.name or "") for t in fig.data)
    drafts = head_drafts_frame(records[0], lambda t: "<script>\n", draft_heads(records[0]))
    assert drafts["head"].tolist() == [1, 2, 3, 4] and drafts["q_draft"].tolist() == [0.8, 0.6, 0.4, 0.2]
    assert "\n" not in drafts["token"].iloc[0]  # whitespace made visible for the table


def test_tree_figure_labels_depth_by_head():
    from specviz.viz.tree import tree_figure, tree_frame

    tree = dataclasses.replace(
        rec("rard", 2), tree_parents=(-1, -1, 0, 1), accepted_path=(1,), tree_width=2, tree_p_current=(0.5,) * 4,
        draft_fates=("rejected", "accepted", "discarded", "rejected"),
    )  # fmt: skip
    heads = draft_heads(tree)
    assert tree_frame(tree, str, heads)["head"].tolist() == [1, 1, 2, 2]
    fig = tree_figure(tree, lambda t: "<i>x</i>", heads=heads)
    assert list(fig.layout.xaxis.ticktext) == ["context", "head 1", "head 2"]
    assert any("Medusa head 1" in h for t in fig.data if t.hovertext for h in t.hovertext)
    plain = tree_figure(tree, str)
    assert plain.layout.xaxis.ticktext is None
