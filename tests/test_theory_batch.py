"""The batch-B arithmetic of specviz.core.theory by hand, its frames, and the lesson the theory page draws."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from specviz.core.theory import (
    batch_pass_ms,
    batch_plain_tokens_per_s,
    batch_round_ms,
    batch_speculative_tokens_per_s,
    crossover_batch,
    expected_tokens,
    pass_ms_at,
    predicted_batch_ratio,
    schedule_ms,
)
from specviz.viz.theory import batch_frame, batch_ratio_figure, batch_ratios, batch_throughput_figure
from tests.test_app_theory_batch import BATCHES, PROFILE


def test_batch_throughput_by_hand():
    pass_ms = [10.0, 12.0, 14.0]
    assert pass_ms_at(pass_ms, 1) == 10.0 and pass_ms_at(pass_ms, 3) == 14.0 and pass_ms_at(pass_ms, 5) == pytest.approx(18.0)
    assert batch_plain_tokens_per_s(4, pass_ms) == 400.0
    # 4 rows x (1 + 0.5 + 0.25) tokens per round of one 3-token pass (14 ms) plus 4*2 drafted tokens at 0.5 ms
    assert batch_speculative_tokens_per_s(4, pass_ms, 0.5, 2, 0.5) == pytest.approx(4 * 1.75 * 1000 / (14 + 4))
    assert batch_speculative_tokens_per_s(1, pass_ms, 0.0, 2) == pytest.approx(1000 / 14)  # nothing accepted: a longer plain pass
    with pytest.raises(ValueError):
        batch_speculative_tokens_per_s(1, pass_ms, 1.5, 2)


TABLE = {1: [10.0, 12.0, 14.0], 4: [16.0, 30.0, 40.0]}  # ms of a pass over B rows adding t = 1, 2, 3 ids each


def test_a_pass_priced_at_its_rows_and_width():
    assert pass_ms_at(TABLE[1], 1.5) == pytest.approx(11.0)  # a mean width between whole widths
    assert batch_pass_ms(TABLE, 4, 2) == 30.0 and batch_pass_ms(TABLE, 1, 3) == 14.0
    assert batch_pass_ms(TABLE, 2, 1) == pytest.approx(12.0)  # a third of the way from B = 1 to B = 4
    assert batch_pass_ms(TABLE, 2.5, 2.5) == pytest.approx((13.0 + 35.0) / 2)
    assert batch_pass_ms(TABLE, 7, 1) == pytest.approx(22.0)  # past the largest B, along the last two
    assert batch_pass_ms({4: TABLE[4]}, 2, 1) == 16.0  # below the smallest profiled B: its own
    assert batch_round_ms(TABLE, 4, 2, overhead_ms_per_row=0.5, draft_ms=1.0) == pytest.approx(30.0 + 2.0 + 1.0)
    for bad in (lambda: batch_pass_ms({}, 1, 1), lambda: batch_pass_ms(TABLE, 0, 1), lambda: pass_ms_at(TABLE[1], 0.5),
                lambda: batch_round_ms(TABLE, 1, 1, float("nan"))):  # fmt: skip
        with pytest.raises(ValueError):
            bad()


def test_overhead_is_charged_to_both_sides_and_the_width_is_the_measured_one():
    # plain at B = 4 with 1 ms per row outside the forward: 4 tokens per (16 + 4) ms
    assert batch_plain_tokens_per_s(4, TABLE[4], overhead_ms_per_row=1.0) == pytest.approx(4000 / 20)
    # k = 2 but rows fed only one draft each (width 2): 4 x 1.75 tokens per (30 + 4) ms
    spec = batch_speculative_tokens_per_s(4, TABLE[4], 0.5, 2, overhead_ms_per_row=1.0, width=2, drafted_per_row=1)
    assert spec == pytest.approx(4 * 1.75 * 1000 / 34)
    # the same overhead on both sides narrows the gap the forward alone would show
    bare = batch_speculative_tokens_per_s(4, TABLE[4], 0.5, 2) / batch_plain_tokens_per_s(4, TABLE[4])
    loaded = batch_speculative_tokens_per_s(4, TABLE[4], 0.5, 2, overhead_ms_per_row=5.0) / batch_plain_tokens_per_s(4, TABLE[4], 5.0)
    assert bare == pytest.approx(1.75 * 16 / 40) and loaded == pytest.approx(1.75 * 36 / 60) and loaded > bare


def test_a_measured_run_priced_from_its_schedule():
    plain = [(4, 1, 10), (1, 1, 2)]  # 10 passes over 4 rows, then 2 over the one row left: 42 tokens
    spec = [(4, 3, 3), (4, 1, 2), (1, 2, 2)]  # wide passes where some row drafted, 1-wide where every row missed
    assert schedule_ms(TABLE, plain, 0.5) == pytest.approx(10 * (16 + 2) + 2 * (10 + 0.5))
    assert schedule_ms(TABLE, spec, 0.5, draft_ms=3.0) == pytest.approx(3 * 42 + 2 * 18 + 2 * 12.5 + 3.0)
    ratio = predicted_batch_ratio(TABLE, plain, spec, 42, 42, 0.5, 3.0)
    assert ratio == pytest.approx((10 * 18 + 2 * 10.5) / (3 * 42 + 2 * 18 + 2 * 12.5 + 3.0))
    with pytest.raises(ValueError):
        predicted_batch_ratio(TABLE, plain, [], 42, 42, 0.5)
    with pytest.raises(ValueError):
        predicted_batch_ratio(TABLE, plain, spec, 0, 42, 0.5)


def test_crossover_by_hand():
    assert crossover_batch([1, 2, 4], [2.0, 1.5, 1.2]) is None
    assert crossover_batch([1, 2, 4], [0.9, 0.8, 0.7]) == 1.0
    assert crossover_batch([4, 8], [1.5, 0.5]) == pytest.approx(2 ** 2.5)  # halfway in log2(B)
    assert crossover_batch([8, 1, 2], [0.5, 2.0, 1.0 + 1e-9]) == pytest.approx(2 ** (1 + 1e-9 / (0.5 + 1e-9)), rel=1e-6)


def test_batch_frames_and_figures():
    frame = batch_frame(BATCHES, 0.7, 4, 0.0, measured=[(2, 100.0, 150.0)])
    assert set(frame["source"]) == {"predicted", "measured"} and len(frame) == 2 * len(BATCHES) + 2
    ratios = batch_ratios(frame)
    measured = ratios[ratios["source"] == "measured"].iloc[0]
    assert measured["ratio"] == 1.5
    predicted = ratios[ratios["source"] == "predicted"].set_index("batch_size")["ratio"]
    assert predicted[1] == pytest.approx(expected_tokens(0.7, 4) * BATCHES[1][0] / BATCHES[1][4])
    assert list(predicted.index) == sorted(BATCHES) and predicted.is_monotonic_decreasing
    assert len(batch_throughput_figure(frame).data) == 4
    fig = batch_ratio_figure(ratios, 6.0)
    assert len(fig.data) == 2 and any(math.isclose(s.x0, 6.0) for s in fig.layout.shapes if s.x0 is not None)


def test_the_lesson_prefers_the_selected_profile_and_tolerates_none(monkeypatch):
    import dataclasses

    import specviz.ui.labs.theory as ui_theory

    monkeypatch.setattr(ui_theory.batch_results, "load_batch_points", lambda: None)
    plain = dataclasses.replace(PROFILE, batch_pass_ms={}, label="no batches")
    assert ui_theory.batch_lesson(plain, {"a": plain}, 0.7, 4, 0.0) is None
    lesson = ui_theory.batch_lesson(plain, {"a": plain, "b": PROFILE}, 0.7, 40, 0.0)
    assert lesson.profile_name == PROFILE.name and lesson.k == 16  # k cut to the longest pass measured
    assert "No measured points shipped" in lesson.measured_note
    assert ui_theory.last_run_alpha(pd.DataFrame({"alpha": [0.5, None, 0.8, None]})) == 0.8
    assert ui_theory.last_run_alpha(pd.DataFrame(columns=["alpha"])) is None


def test_the_lesson_charges_the_measured_overhead_to_both_sides(tmp_path, monkeypatch):
    import specviz.ui.labs.theory as ui_theory
    from specviz.experiments.batch import BatchPoint, typical_overhead_ms_per_row

    shaped = lambda b, o: BatchPoint(b, 10.0, 12.0, 2.0, 8, 8, "", (), 8, 4, 3.0, 1.0, 5.0, 6.0, o, o + 1, ((b, 1, 8),), ((b, 3, 4),))  # noqa: E731
    assert typical_overhead_ms_per_row([shaped(1, 1.0), shaped(2, 3.0), shaped(4, 2.0), BatchPoint(8, 1.0, 1.0, 1.0, 1, 1, "")]) == 2.0
    lesson = ui_theory.batch_lesson(PROFILE, {"a": PROFILE}, 0.7, 4, 0.0, ([(1, 90.0, 160.0)], "mine", 2.0))
    predicted = lesson.frame[(lesson.frame["source"] == "predicted") & (lesson.frame["side"] == "plain")].set_index("batch_size")
    b = max(BATCHES)
    assert predicted.loc[b, "tokens_per_s"] == pytest.approx(b * 1000 / (BATCHES[b][0] + 2.0 * b))
    monkeypatch.setattr(ui_theory.batch_results, "load_batch_points", lambda: ({"plain_overhead_ms_per_row": 1.5}, []))
    assert ui_theory._measured_points()[2] == 1.5


def test_the_batch_axis_spans_the_bs_drawn_and_the_crossover_label_sits_on_it():
    """Issue 43: the crossover's label was placed at x = B on a log axis, which plotly reads as log10(B), so the
    axis ran to 10^B (17,179,869,184 at B ≈ 10) with ~30 overlapping power-of-two ticks."""
    ratios = batch_ratios(batch_frame(BATCHES, 0.7, 4, 0.0))
    crossover = 10.24
    fig = batch_ratio_figure(ratios, crossover)
    lo, hi = fig.layout.xaxis.range
    assert 10**lo <= min(BATCHES) and max(BATCHES, default=0) <= 10**hi < 2 * max(max(BATCHES), crossover)
    assert list(fig.layout.xaxis.tickvals) == sorted(BATCHES) and len(fig.layout.xaxis.tickvals) <= 12
    (label,) = [a for a in fig.layout.annotations if a.text.startswith("B ≈")]
    assert lo <= label.x <= hi and label.x == pytest.approx(math.log10(crossover))
    throughput = batch_throughput_figure(batch_frame(BATCHES, 0.7, 4, 0.0)).layout.xaxis
    assert list(throughput.tickvals) == sorted(BATCHES)
