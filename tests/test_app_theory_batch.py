"""AppTest of the Speedup theory page's *At batch B* section: hidden behind a hint without batched passes; with a
profile that has them, the predicted crossover, the two charts and the shipped measured points."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from specviz.core.theory import batch_plain_tokens_per_s, batch_speculative_tokens_per_s, crossover_batch
from specviz.experiments.cost_profile import SCHEMA, CostProfile
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
    import specviz.ui.theory as ui_theory

    monkeypatch.setattr(ui_theory, "shipped_profiles", lambda: {"profile_toy": PROFILE})
    monkeypatch.setattr(ui_theory.batch_results, "load_batch_points", lambda: ({"drafter": "lookup", "k": 4, "category": ["copy"]}, [(1, 90.0, 160.0), (8, 500.0, 420.0)]))


def test_without_batched_passes_the_section_says_how_to_measure(monkeypatch):
    import specviz.ui.theory as ui_theory

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

    import specviz.ui.measured as measured

    at = AppTest.from_file(str(PAGES / "theory.py"), default_timeout=TIMEOUT)
    row = {"source": "benchmark", "label": "lookup k=4", "alpha": 0.95, "k": 4, "speedup": 1.7}
    monkeypatch.setattr(measured, "step_through_points", lambda: pd.DataFrame([row]))
    at.run()
    assert not at.exception
    before = metrics(at)["speculation stops paying at"]
    at.radio(key="theory_batch_alpha_source").set_value("the last measured run's α (0.95)").run()
    assert not at.exception and metrics(at)["speculation stops paying at"] != before
