"""The batch-B arithmetic of specviz.core.theory by hand, its frames, and the lesson the theory page draws."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from specviz.core.theory import (
    batch_plain_tokens_per_s,
    batch_speculative_tokens_per_s,
    crossover_batch,
    expected_tokens,
    pass_ms_at,
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

    import specviz.ui.theory as ui_theory

    monkeypatch.setattr(ui_theory.batch_results, "load_batch_points", lambda: None)
    plain = dataclasses.replace(PROFILE, batch_pass_ms={}, label="no batches")
    assert ui_theory.batch_lesson(plain, {"a": plain}, 0.7, 4, 0.0) is None
    lesson = ui_theory.batch_lesson(plain, {"a": plain, "b": PROFILE}, 0.7, 40, 0.0)
    assert lesson.profile_name == PROFILE.name and lesson.k == 16  # k cut to the longest pass measured
    assert "No measured points shipped" in lesson.measured_note
    assert ui_theory.last_run_alpha(pd.DataFrame({"alpha": [0.5, None, 0.8, None]})) == 0.8
    assert ui_theory.last_run_alpha(pd.DataFrame(columns=["alpha"])) is None
