"""AppTest of the Speedup theory page's *At batch B* section: hidden behind a hint without batched passes; with a
profile that has them, the predicted crossover, the two charts and the shipped measured points; *Measure on this
machine* (the measurement patched) draws this session's points instead of the shipped ones."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from specviz.core.profile import SCHEMA, CostProfile
from specviz.core.theory import batch_plain_tokens_per_s, batch_speculative_tokens_per_s, crossover_batch
from tests.test_app_pages import PAGES, TIMEOUT

# A CPU-like profile: a pass over B rows of t tokens costs 10 ms + 1 ms per row-token, so speculation pays at
# small B and loses at large B.
BATCHES = {b: tuple(10.0 + 1.0 * b * t for t in range(1, 18)) for b in (1, 2, 4, 8, 16, 32)}
PROFILE = CostProfile.from_json({
    "schema": SCHEMA, "target": "t", "device": "cpu", "device_name": "toy CPU", "dtype": "float32", "torch_version": "2",
    "threads": 2, "clock": "wall", "context_length": 256, "repeats": 1, "pass_ms": list(BATCHES[1]),
    "batch_pass_ms": {str(b): list(v) for b, v in BATCHES.items()}, "label": "toy batched CPU",
})  # fmt: skip


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


@pytest.fixture()
def batched_profile(monkeypatch):
    import specviz.ui.labs.theory as ui_theory

    monkeypatch.setattr(ui_theory, "shipped_profiles", lambda: {"profile_toy": PROFILE})
    monkeypatch.setattr(ui_theory.batch_results, "load_batch_points", lambda: ({"drafter": "lookup", "k": 4, "category": ["copy"]}, [(1, 90.0, 160.0), (8, 500.0, 420.0)]))


def test_without_batched_passes_the_section_says_how_to_measure(monkeypatch):
    import specviz.ui.labs.theory as ui_theory

    monkeypatch.setattr(ui_theory, "shipped_profiles", lambda: {})
    at = AppTest.from_file(str(PAGES / "theory.py"), default_timeout=TIMEOUT).run()
    assert not at.exception
    assert any(h.value == "At batch B" for h in at.header)
    assert any("profile --batch" in i.value for i in at.info)


def test_the_section_predicts_the_crossover_and_draws_measured_points(batched_profile):
    at = AppTest.from_file(str(PAGES / "theory.py"), default_timeout=TIMEOUT).run()
    assert not at.exception
    alpha, k, c = 0.7, 4, 0.05  # the sidebar's defaults
    ratios = [batch_speculative_tokens_per_s(b, v, alpha, k, c * BATCHES[1][0]) / batch_plain_tokens_per_s(b, v) for b, v in BATCHES.items()]
    crossover = crossover_batch(list(BATCHES), ratios)
    assert crossover is not None and 1 < crossover < 32 and ratios[0] > 1 > ratios[-1]
    m = metrics(at)
    assert m["speculation stops paying at"] == f"B ≈ {crossover:.1f}"
    assert m["speculative ÷ plain at B = 1"] == f"{ratios[0]:.2f}×"
    assert any("Measured: `specviz batch`, lookup" in cap.value for cap in at.caption)
    assert any("turns speculation off" in cap.value for cap in at.caption)
    at.slider(key="theory_alpha").set_value(0.95).run()  # a better drafter pays for longer
    assert not at.exception
    later = metrics(at)["speculation stops paying at"]
    assert later.startswith("B ≈ ") and float(later[4:]) > crossover


def test_the_last_measured_runs_alpha_can_drive_the_section(batched_profile, monkeypatch):
    import pandas as pd

    import specviz.ui.labs.measured as measured

    at = AppTest.from_file(str(PAGES / "theory.py"), default_timeout=TIMEOUT)
    row = {"source": "benchmark", "label": "lookup k=4", "alpha": 0.95, "k": 4, "speedup": 1.7}
    monkeypatch.setattr(measured, "step_through_points", lambda: pd.DataFrame([row]))
    at.run()
    assert not at.exception
    before = metrics(at)["speculation stops paying at"]
    at.radio(key="theory_batch_alpha_source").set_value("the last measured run's α (0.95)").run()
    assert not at.exception and metrics(at)["speculation stops paying at"] != before


def measured_batch_sizes(at: AppTest) -> list[int]:
    """The B of the measured markers on the section's ratio chart (plotly may pack the x values as typed bytes)."""
    import base64
    import json

    import numpy as np

    spec = json.loads(at.get("plotly_chart")[-1].proto.spec)
    xs = [t["x"] for t in spec["data"] if t.get("name") == "measured"]
    if not xs:
        return []
    x = xs[0]
    return [int(v) for v in (np.frombuffer(base64.b64decode(x["bdata"]), dtype=x["dtype"]) if isinstance(x, dict) else x)]


def fake_points(models, setup, batch_sizes, on_progress=None, turn=None):
    """measure_batches without decoding: plain throughput grows with B, speculation's edge shrinks."""
    from specviz.experiments.batch import BatchPoint

    points = []
    for done, b in enumerate(batch_sizes, start=1):
        points.append(BatchPoint(b, 50.0 * b, 50.0 * b * (2.0 - 0.2 * b), 2.5, 8 * b, 8 * b, "before 0.1, after 0.1"))
        if on_progress:
            on_progress(done, len(batch_sizes), f"batch {b}")
    return points


def test_measure_on_this_machine_draws_this_sessions_points(tiny_models, monkeypatch):
    """The button runs the batch measurement (patched) with a progress bar; its points replace the shipped ones,
    even where no profile has batched passes, and a caption says which are shown."""
    import specviz.ui.common.models as ui_models
    import specviz.ui.labs.batch as batch_lab
    import specviz.ui.labs.theory as ui_theory

    monkeypatch.setattr(ui_theory, "shipped_profiles", lambda: {})
    monkeypatch.setattr(ui_models, "get_model", lambda *a, **k: tiny_models["llama"])
    monkeypatch.setattr(batch_lab, "measure_batches", fake_points)
    at = AppTest.from_file(str(PAGES / "theory.py"), default_timeout=TIMEOUT).run()
    assert not at.exception
    at.button(key="batch_measure").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    mine = at.session_state["theory_batch_measured"]
    assert [p.batch_size for p in mine.points] == [1, 2, 4, 8]
    assert mine.plan.max_new_tokens == 32 and mine.plan.repeats == 3  # local mode: the page's settings, uncapped
    assert any("Measured on this machine just now" in cap.value and "B = 1, 2, 4, 8" in cap.value for cap in at.caption)
    assert any("profile --batch" in i.value for i in at.info)  # still no predicted curve: the points alone
    assert measured_batch_sizes(at) == [1, 2, 4, 8]


def test_this_sessions_points_replace_the_shipped_ones_beside_the_prediction(batched_profile, tiny_models, monkeypatch):
    import specviz.ui.common.models as ui_models
    import specviz.ui.labs.batch as batch_lab

    monkeypatch.setattr(ui_models, "get_model", lambda *a, **k: tiny_models["llama"])
    monkeypatch.setattr(batch_lab, "measure_batches", fake_points)
    at = AppTest.from_file(str(PAGES / "theory.py"), default_timeout=TIMEOUT).run()
    assert any("Measured: `specviz batch`, lookup" in cap.value for cap in at.caption)
    assert measured_batch_sizes(at) == [1, 8]  # the shipped points
    at.button(key="batch_measure").click().run()
    assert not at.exception
    captions = [cap.value for cap in at.caption]
    assert any("Measured on this machine just now" in c for c in captions)
    assert not any("Measured: `specviz batch`" in c for c in captions)
    assert measured_batch_sizes(at) == [1, 2, 4, 8]
    assert "speculation stops paying at" in metrics(at)  # the prediction is still drawn
