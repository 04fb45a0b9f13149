"""Every metric by its name, on hand-built StepRecords with numbers worked out by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specviz.core.metrics import METRIC_INFO, position_acceptance, run_metrics
from specviz.core.records import StepRecord


def rec(fates: str, emitted: int, round_ms: float = 10.0, overlap: tuple[float, ...] | None = None, p: float = 0.5) -> StepRecord:
    """A round from a fate string: a = accepted, r = rejected, d = discarded (one letter per drafted token)."""
    names = {"a": "accepted", "r": "rejected", "d": "discarded"}
    m = len(fates)
    has_q = overlap is not None
    return StepRecord(
        index=0, context_length=10, num_draft_tokens=max(m, 1), drafted=tuple(range(m)), p_target=(p,) * m, q_draft=(1.0,) * m,
        accept_prob=(p,) * m, uniforms=(0.1,) * m, draft_fates=tuple(names[f] for f in fates), emitted=tuple(range(emitted)),
        emitted_fates=("target",) * emitted, emitted_margin=(1.0,) * emitted, next_p_target=1.0, next_residual=None,
        overlap=overlap or (), dists=(), has_q=has_q, draft_ms=1.0, verify_ms=5.0, round_ms=round_ms, record_ms=0.1, finished=False,
    )


RECORDS = [
    rec("aaaa", 5, overlap=(0.9, 0.8, 0.7, 0.6)),  # all four kept + bonus
    rec("arddd"[:4], 2, overlap=(0.9, 0.2)),  # kept 1, rejected at 2, two discarded
    rec("rddd", 1, overlap=(0.1,)),  # rejected at 1
    rec("", 1),  # the drafter had nothing: a plain step
    rec("aard", 3, overlap=(0.8, 0.7, 0.3)),  # kept 2, rejected at 3
]


def test_position_acceptance_by_hand():
    pos = position_acceptance(RECORDS)
    assert [(p.position, p.reached, p.accepted) for p in pos] == [(1, 4, 3), (2, 3, 2), (3, 2, 1), (4, 1, 1)]
    assert pos[0].rate == pytest.approx(3 / 4) and pos[1].rate == pytest.approx(2 / 3) and pos[2].rate == pytest.approx(0.5)
    # vLLM divides by the drafting rounds (4): unconditional, the product of the conditional rates
    assert [p.unconditional for p in pos] == pytest.approx([3 / 4, 2 / 4, 1 / 4, 1 / 4])
    assert pos[1].unconditional == pytest.approx(pos[0].rate * pos[1].rate)


def test_run_metrics_by_hand():
    base = [rec("", 1, round_ms=8.0) for _ in range(12)]
    m = run_metrics(RECORDS, base)
    assert (m.rounds, m.drafting_rounds, m.new_tokens, m.drafted, m.accepted) == (5, 4, 12, 16, 7)
    assert m.acceptance_rate == pytest.approx(7 / 16)  # vLLM / llama.cpp
    assert m.mean_acceptance_length == pytest.approx(1 + 7 / 4)  # vLLM: per drafting round
    assert m.tokens_per_target_pass == pytest.approx(12 / 5)  # EAGLE tau / Spec-Bench: every pass
    assert m.alpha == pytest.approx(sum([0.9, 0.8, 0.7, 0.6, 0.9, 0.2, 0.1, 0.8, 0.7, 0.3]) / 10)
    assert m.speedup == pytest.approx(96 / 50)  # plain decoding took 8 ms a token: 96 ms for 12; this run 50 ms
    ended = [*base[:5], replace(base[5], finished=True)]  # plain decoding stopped at EOS after 6 tokens
    assert run_metrics(RECORDS, ended).speedup == pytest.approx(96 / 50)  # past a finished baseline: its mean pace
    short = run_metrics(RECORDS, base[:6])  # still being measured: past its end there is no time to compare with
    assert short.speedup is None and not short.speedup_disturbed and short.to_json()["speedup"] is None
    assert m.speedup <= m.tokens_per_target_pass and not m.speedup_disturbed
    obj = m.to_json()
    assert obj["position_acceptance"][0] == {"position": 1, "reached": 4, "accepted": 3, "rate": 0.75, "unconditional": 0.75}
    assert {i.key for i in METRIC_INFO} <= set(obj)


def test_alpha_without_q_is_mean_p_target_of_checked_drafts():
    m = run_metrics([rec("ar", 2, p=0.4), rec("rd", 1, p=0.2)])
    assert m.alpha == pytest.approx((0.4 + 0.4 + 0.2) / 3)  # the discarded draft was never checked
    assert m.speedup is None  # no baseline, no measured speedup


def test_empty_and_plain_runs():
    m = run_metrics([])
    assert m.acceptance_rate is None and m.mean_acceptance_length is None and m.tokens_per_target_pass is None
    assert m.position_acceptance == ()
    plain = run_metrics([rec("", 1), rec("", 1)])
    assert plain.tokens_per_target_pass == 1.0 and plain.mean_acceptance_length is None and plain.alpha is None


def test_metrics_frames_and_decay_note():
    from specviz.viz.metrics import decay_note, metrics_frame, position_figure, positions_frame

    runs = {"<b>n-gram</b>": run_metrics(RECORDS)}
    table = metrics_frame(runs)
    assert list(table["metric"]) == [i.name for i in METRIC_INFO]
    assert table.iloc[1]["<b>n-gram</b>"] == "0.438 (7/16)"
    pos = positions_frame(runs)
    assert list(pos["reached"]) == [4, 3, 2, 1]
    fig = position_figure(pos)
    assert all("<b>" not in str(t.name) for t in fig.data)  # run labels are escaped
    assert "Too few rounds" in decay_note(runs["<b>n-gram</b>"], 0.0, 1.0, "a verify cost of 1")
    decaying = [rec("a" * i + "r" + "d" * (3 - i), i + 1, overlap=(0.5,) * (i + 1)) for i in (0, 0, 0, 1, 1, 1, 2, 3, 3, 3, 3, 3, 3)]
    note = decay_note(run_metrics(decaying), 0.0, 1.0, "a verify cost of 1")
    assert "position" in note and "best k" in note


# --- the step-through page's metrics panel (AppTest on a tiny model) ----------------------------


def test_step_through_shows_the_metrics_table(tiny_models, monkeypatch):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    import specviz.ui.common.models as ui_models

    model = tiny_models["llama"]
    monkeypatch.setattr(ui_models, "get_model", lambda *args, **kwargs: model)
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "pages" / "step_through.py"), default_timeout=180)
    at.run()
    at.text_area(key="prompt").set_value("the cat sat on the mat and the cat sat on the mat and the cat sat on the")
    at.selectbox(key="drafter").set_value("lookup")
    at.number_input(key="max_new_tokens").set_value(12)
    at.run()
    at.button(key="run_all").click().run()
    assert not at.exception, at.exception
    tables = [d.value for d in at.dataframe if "metric" in d.value.columns]
    assert len(tables) == 1
    table = tables[0]
    assert list(table["metric"]) == [i.name for i in METRIC_INFO]
    assert {"definition", "printed by"} <= set(table.columns)
    assert any("Acceptance by draft position" in h.value for h in at.subheader)
    # beside it, vLLM's acceptance histogram of the same run: its bars are the run's own counts, as shares
    import json

    charts = [json.loads(el.proto.spec) for el in at.get("plotly_chart") if "acceptance_histogram" in el.proto.spec]
    assert len(charts) == 1
    steps = run_metrics(at.session_state["specviz_step_through"].session.runs[0].records).spec_decode
    bars = charts[0]["data"]
    assert steps.num_spec_steps and len(bars) == 1 and [int(t[2:]) for t in bars[0]["text"]] == list(steps.acceptance_histogram)
    assert any("a tall bar at 0 is drafting wasted" in c.value for c in at.caption)
    assert any("best k" in m.value or "Too few rounds" in m.value for m in at.markdown)


def test_tree_acceptance_is_by_depth_not_by_node_order():
    """Nodes 0 and 1 hang under the root (depth 1), 2 under 0 and 3 under 1 (depth 2). The rule rejected node 0,
    accepted its sibling 1, then rejected 1's child 3: depth 1 kept, depth 2 tried and refused. Walking the
    fates in node order would read 'position 1 rejected, position 2 accepted'."""
    import dataclasses

    tree = dataclasses.replace(
        rec("rard", 2), tree_parents=(-1, -1, 0, 1), accepted_path=(1,), tree_width=2,
        draft_fates=("rejected", "accepted", "discarded", "rejected"),
    )  # fmt: skip
    pos = position_acceptance([tree])
    assert [(p.position, p.reached, p.accepted) for p in pos] == [(1, 1, 1), (2, 1, 0)]
    assert run_metrics([tree]).mean_acceptance_length == pytest.approx(2.0)


def test_vllm_spec_decode_object_by_hand():
    """vLLM's per-request metrics.speculative_decoding from the same records: the drafting rounds are its verify steps
    (accepted 4, 1, 0, 2 of 4 each; the round that drafted nothing is no step), the histogram counts them by drafts kept."""
    from specviz.core.metrics import SpecDecodeSteps

    steps = SpecDecodeSteps.of(RECORDS)
    out = steps.to_json(detailed=True)
    assert out == {
        "mean_acceptance_length": pytest.approx(1 + 7 / 4), "draft_acceptance_rate": pytest.approx(7 / 16),
        "acceptance_histogram": [1, 1, 1, 0, 1], "num_spec_steps": 4, "num_accepted_draft_tokens": 7, "num_draft_tokens": 16,
        "num_spec_tokens": 4, "per_step_accepted": [4, 1, 0, 2], "per_step_drafted": [4, 4, 4, 4],
    }  # fmt: skip
    assert "per_step_accepted" not in steps.to_json() and set(steps.to_json()) < set(out)
    hist = out["acceptance_histogram"]  # the checks aiperf makes before it keeps a request
    assert sum(hist) == out["num_spec_steps"] and sum(j * h for j, h in enumerate(hist)) == out["num_accepted_draft_tokens"]
    # the same numbers as the run's own metrics, and vLLM's per-position numerator is position acceptance's
    m = run_metrics(RECORDS)
    assert m.spec_decode == steps and m.to_json()["speculative_decoding"] == out
    assert (m.mean_acceptance_length, m.acceptance_rate, m.drafting_rounds) == (out["mean_acceptance_length"], out["draft_acceptance_rate"], 4)
    assert steps.accepted_by_position == tuple(p.accepted for p in position_acceptance(RECORDS)) == (3, 2, 1, 1)
    # k comes from the service when no round drafted; the histogram always has k + 1 bins
    assert SpecDecodeSteps.of([RECORDS[3]], 4).to_json()["acceptance_histogram"] == [0, 0, 0, 0, 0]
    # no verify step: vLLM's wire values 1.0 and 0.0 beside an all-zero histogram, never null (aiperf 0.13.0 drops a
    # null as malformed; its adapter's own test takes this shape from vLLM PR #48915); the run's metrics stay undefined
    empty = SpecDecodeSteps.of([], 3)
    assert empty.to_json() == {"mean_acceptance_length": 1.0, "draft_acceptance_rate": 0.0, "acceptance_histogram": [0, 0, 0, 0],
                               "num_spec_steps": 0, "num_accepted_draft_tokens": 0, "num_draft_tokens": 0, "num_spec_tokens": 3}  # fmt: skip
    assert empty.totals.mean_acceptance_length is None and empty.totals.acceptance_rate is None


def test_a_tree_step_counts_its_kept_path_as_accepted_and_its_nodes_as_drafted():
    """Nodes 0 and 1 at depth 1, 2 under 0, 3 under 1, 4 under 2: the path 0 -> 2 kept, 4 rejected, 1 and 3 not reached."""
    from specviz.core.metrics import SpecDecodeSteps

    tree = replace(rec("adadr", 3), tree_parents=(-1, -1, 0, 1, 2), tree_width=2, accepted_path=(0, 2))
    steps = SpecDecodeSteps.of([tree])
    assert (steps.per_step_accepted, steps.per_step_drafted, steps.num_spec_tokens) == ((2,), (5,), 5)
    assert steps.acceptance_histogram == (0, 0, 1, 0, 0, 0) and steps.accepted_by_position[:3] == (1, 1, 0)


def test_acceptance_histogram_frame_and_figure():
    """The histogram's frame and figure carry SpecDecodeSteps' counts as they are (shares of the verify steps), one bar
    group per run; a run with no verify step draws nothing."""
    from specviz.core.metrics import SpecDecodeSteps
    from specviz.viz.metrics import HISTOGRAM_COLUMNS, histogram_figure, histogram_frame

    steps = SpecDecodeSteps.of(RECORDS)
    assert steps.acceptance_shares == pytest.approx((0.25, 0.25, 0.25, 0.0, 0.25)) and SpecDecodeSteps(3).acceptance_shares == ()
    df = histogram_frame({"lookup": steps.acceptance_histogram, "plain": SpecDecodeSteps.of([RECORDS[3]], 4).acceptance_histogram})
    assert list(df.columns) == HISTOGRAM_COLUMNS and set(df["run"]) == {"lookup"}
    assert list(df["accepted"]) == [0, 1, 2, 3, 4] and list(df["steps"]) == [1, 1, 1, 0, 1]
    assert df["share"].sum() == pytest.approx(1.0) and set(df["num_spec_steps"]) == {4} and set(df["num_spec_tokens"]) == {4}
    fig = histogram_figure(df)
    assert len(fig.data) == 1 and list(fig.data[0].y) == pytest.approx([0.25, 0.25, 0.25, 0.0, 0.25])
    assert "acceptance_histogram" in fig.layout.title.text and "acceptance length" in fig.layout.xaxis.title.text
    two = histogram_figure(histogram_frame({"a": steps.acceptance_histogram, "b": SpecDecodeSteps.of(RECORDS[:2]).acceptance_histogram}))
    assert [t.marker.color for t in two.data][0] != two.data[1].marker.color  # one palette colour per run
    # several runs pooled bin by bin (a category's prompts), a smaller k's histogram padded
    from specviz.core.metrics import pooled_histogram

    assert pooled_histogram([(1, 1, 1, 0, 1), (2, 0, 1), ()]) == (3, 1, 2, 0, 1) and pooled_histogram([]) == ()


def test_the_acceptance_histogram_follows_each_step(tiny_models, monkeypatch):
    """Live: after each Step the histogram beside acceptance by position holds every verify step so far."""
    import json
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    import specviz.ui.common.models as ui_models

    monkeypatch.setattr(ui_models, "get_model", lambda *args, **kwargs: tiny_models["llama"])
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "pages" / "step_through.py"), default_timeout=180)
    at.run()
    at.text_area(key="prompt").set_value("the cat sat on the mat and the cat sat on the mat and the cat sat on the")
    at.selectbox(key="drafter").set_value("lookup")
    at.number_input(key="max_new_tokens").set_value(16)
    at.run()
    for steps in (1, 2, 3):
        at.button(key="step").click().run()
        assert not at.exception, at.exception
        records = at.session_state["specviz_step_through"].session.runs[0].records
        assert len(records) == steps
        charts = [json.loads(el.proto.spec) for el in at.get("plotly_chart") if "acceptance_histogram" in el.proto.spec]
        expected = run_metrics(records).spec_decode
        assert expected.num_spec_steps >= 1  # the prompt repeats itself: lookup drafts from the first round
        assert len(charts) == 1 and sum(int(t[2:]) for t in charts[0]["data"][0]["text"]) == expected.num_spec_steps


def test_every_counter_of_totals_is_summed_by_pooled_and_after():
    """Totals' counters are derived from its fields: every int or float field (all but the baseline's, None without
    one) is summed by pooled() and accumulated by after(), so a counter added to Totals cannot pool to 0 unlisted."""
    from dataclasses import fields

    from specviz.core.metrics import COUNTERS, Totals, pooled, running_totals

    assert set(COUNTERS) == {f.name for f in fields(Totals) if f.type in ("int", "float")}
    a = Totals(**{name: i + 1 for i, name in enumerate(COUNTERS)})
    b = Totals(**{name: 10 * (i + 1) for i, name in enumerate(COUNTERS)}, baseline_ms=3.0)
    both = pooled([a, b])
    assert all(getattr(both, name) == 11 * (i + 1) for i, name in enumerate(COUNTERS))
    assert both.baseline_ms is None  # pooled: no baseline (a speedup is measured per run)
    last = running_totals(RECORDS)[-1]
    assert all(getattr(last, name) > 0 for name in COUNTERS)  # a round's own counts (of_round) fill every counter
    assert last == pooled(Totals.of_round(r) for r in RECORDS)


def test_a_chain_reads_as_the_tree_of_one_shape():
    """StepRecord.node_parents / node_path: a chain's node i hangs under node i - 1 and its accepted nodes are the
    leading run (after an EOS / length cut too); a tree's are its tree_parents and accepted_path."""
    from specviz.core.metrics import accepted_depth, draft_depth, draft_heads, table_slots

    chain = rec("aard", 3)
    assert (chain.node_parents, chain.node_path) == ((-1, 0, 1, 2), (0, 1))
    assert rec("", 1).node_parents == () and rec("", 1).node_path == ()
    cut = rec("addd", 1)  # three kept, then an EOS at the first: the rest discarded
    assert cut.node_path == (0,)
    tree = replace(rec("adadr", 3), tree_parents=(-1, -1, 0, 1, 2), tree_width=2, accepted_path=(0, 2))
    assert (tree.node_parents, tree.node_path) == ((-1, -1, 0, 1, 2), (0, 2))
    assert (accepted_depth(chain), draft_depth(chain), draft_heads(chain)) == ((2, True), 4, (1, 2, 3, 4))
    assert table_slots(chain) == ((-1, 0), (0, 0), (1, 0), (2, 0))
    assert (accepted_depth(tree), draft_depth(tree), draft_heads(tree)) == ((2, True), 3, (1, 1, 2, 2, 3))
    assert table_slots(tree) == ((-1, 0), (-1, 1), (0, 0), (1, 0), (2, 0))
