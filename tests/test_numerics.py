"""The numerics lab on tiny models: float32 plain == speculative, 1-token vs (k+1)-token logits, the page."""

from __future__ import annotations

from pathlib import Path

import pytest

from specviz.experiments.numerics import GreedyTrace, compare, first_divergence, pass_differences

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = "the cat sat on the mat and the dog sat on the log and the cat sat on the"


@pytest.fixture(scope="module")
def dtype_models(tiny_dir):
    from specviz.models import load_model

    return {d: load_model(str(tiny_dir["llama"]), "cpu", d) for d in ("float32", "bfloat16")}


def test_first_divergence_by_hand():
    a = GreedyTrace("a", "float32", False, (1, 2, 3, 4), (0.5, 0.4, 0.3, 0.2))
    b = GreedyTrace("b", "bfloat16", False, (1, 2, 9), (0.5, 0.4, 0.01))
    d = first_divergence(a, b)
    assert (d.position, d.token_a, d.token_b, d.margin_a, d.margin_b, d.compared) == (2, 3, 9, 0.3, 0.01, 3)
    assert first_divergence(a, a).position is None


def test_compare_on_a_tiny_model(dtype_models):
    ids = dtype_models["float32"].tokenizer(PROMPT)["input_ids"]
    seen = []
    report = compare(dtype_models, ids, max_new_tokens=12, k=3, drafter="lookup", on_progress=lambda *a: seen.append(a))
    assert seen[-1][:2] == (6, 6)
    names = [t.name for t in report.traces]
    assert names == ["float32 · plain", "float32 · speculative", "bfloat16 · plain", "bfloat16 · speculative"]
    fp32_plain, fp32_spec = report.traces[0], report.traces[1]
    assert fp32_plain.ids == fp32_spec.ids  # the float32 guarantee
    assert report.divergences[0].position is None
    assert len(fp32_plain.margins) == len(fp32_plain.ids)
    df = report.pass_diffs
    assert set(df["dtype"]) == {"float32", "bfloat16"} and len(df) == 2 * len(fp32_plain.ids)
    fp32 = df[df["dtype"] == "float32"]
    assert fp32["max_abs_diff"].max() < 1e-3 and not fp32["flipped"].any()
    assert (df[df["dtype"] == "bfloat16"]["max_abs_diff"] >= 0).all()  # a tiny model's logits are too small to show much


@pytest.mark.smollm
def test_bfloat16_moves_the_logits_of_the_embedded_model(smollm):
    """On SmolLM2 the (k+1)-token pass moves bfloat16 logits far more than float32 ones."""
    from specviz.models import EMBEDDED_TARGET, encode_prompt, load_model

    models = {"float32": smollm, "bfloat16": load_model(EMBEDDED_TARGET, "cpu", "bfloat16")}
    ids = encode_prompt(smollm.tokenizer, "Write a Python function that reverses a string.", True)
    report = compare(models, ids, max_new_tokens=16, k=4)
    assert report.divergences[0].position is None  # float32: speculative == plain
    by = report.pass_diffs.groupby("dtype")["max_abs_diff"].max()
    assert by["float32"] < 1e-3 < by["bfloat16"]


def test_pass_differences_rows_line_up(dtype_models):
    """The 1-token rows are exactly plain greedy's: their argmax is the next generated token."""
    target = dtype_models["float32"]
    ids = target.tokenizer(PROMPT)["input_ids"]
    report = compare({"float32": target}, ids, max_new_tokens=8, k=2, drafter="lookup")
    df = pass_differences(target, ids, report.traces[0].ids, 2)
    assert list(df["argmax_one"]) == list(report.traces[0].ids)


def test_compare_rejects_bad_input(dtype_models):
    ids = [1, 2, 3]
    with pytest.raises(ValueError):
        compare({"bfloat16": dtype_models["bfloat16"]}, ids)
    with pytest.raises(ValueError):
        compare(dtype_models, ids, max_new_tokens=0)
    with pytest.raises(ValueError):
        compare(dtype_models, [], max_new_tokens=4)


def test_numerics_page(dtype_models, monkeypatch):
    from streamlit.testing.v1 import AppTest

    import specviz.ui.common.models as ui_models

    monkeypatch.setattr(ui_models, "get_model", lambda source, device="auto", dtype="auto", **kw: dtype_models["bfloat16" if dtype == "bfloat16" else "float32"])
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "pages" / "numerics.py"), default_timeout=180)
    at.run()
    assert not at.exception
    assert any("Press **Run**" in i.value for i in at.info)
    at.text_area(key="num_prompt").set_value(PROMPT)
    at.slider(key="num_new").set_value(16)
    at.selectbox(key="num_drafter").set_value("lookup")
    at.button(key="num_run").click().run()
    assert not at.exception, at.exception
    m = {x.label: x.value for x in at.metric}
    assert m["float32 · plain vs float32 · speculative"] == "identical"
    assert "bfloat16 · plain vs bfloat16 · speculative" in m and "float32 · plain vs bfloat16 · plain" in m
    assert any("float32 guarantee" in h.value for h in at.header)
    at.text_area(key="num_prompt").set_value("   ")
    at.button(key="num_run").click().run()
    assert not at.exception and any("empty" in e.value for e in at.error)


@pytest.fixture()
def shared_lab(monkeypatch, loud_dir):
    """Shared mode, the owner's only target the loud tiny llama, participants may not choose a dtype."""
    for key in ("SPECVIZ_MODE", "SPECVIZ_ALLOW_DEVICE", "SPECVIZ_TARGETS", "SPECVIZ_ALLOW_CUSTOM_MODELS"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("SPECVIZ_MODE", "shared")
    monkeypatch.setenv("SPECVIZ_TARGETS", str(loud_dir))
    return loud_dir


def test_the_lab_loads_the_precision_it_shows_in_shared_mode(shared_lab):
    """Issue 16's bug: shared mode forced dtype 'auto', so the lab compared float32 with itself. Real models, no patches."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "pages" / "numerics.py"), default_timeout=180)
    at.run()
    assert not at.exception
    at.text_area(key="num_prompt").set_value(PROMPT)
    at.slider(key="num_new").set_value(8)
    at.selectbox(key="num_drafter").set_value("lookup")
    at.selectbox(key="num_dtype").set_value("int8-dynamic")
    at.button(key="num_run").click().run()
    assert not at.exception, at.exception
    labels = {x.label for x in at.metric}
    assert "int8-dynamic · plain vs int8-dynamic · speculative" in labels and "float32 · plain vs int8-dynamic · plain" in labels


def test_the_three_way_batch_invariance_comparison(shared_lab):
    """float32 and fp16 weights stay at rounding level inside a (k+1)-token pass; per-tensor int8 moves by far more."""
    from streamlit.testing.v1 import AppTest

    from tests.conftest import skip_unless_precision_runs

    skip_unless_precision_runs("fp16-weights")
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "pages" / "numerics.py"), default_timeout=180)
    at.run()
    assert any("Press **Measure**" in i.value for i in at.info)
    at.text_area(key="num_prompt").set_value(PROMPT)
    at.slider(key="num_new").set_value(16)
    at.slider(key="num_k").set_value(8)
    at.button(key="num_inv_run").click().run()
    assert not at.exception, at.exception
    moved = {x.label: float(x.value) for x in at.metric if x.label in ("float32", "float16 weights, float32 math", "bfloat16", "int8 dynamic (per-tensor scales)")}
    assert set(moved) == {"float32", "float16 weights, float32 math", "bfloat16", "int8 dynamic (per-tensor scales)"}
    assert moved["float32"] < 1e-3 and moved["float16 weights, float32 math"] < 1e-3
    assert moved["int8 dynamic (per-tensor scales)"] > 0.1
    assert any("Why a verify pass must score" in h.value for h in at.header)
    assert len(at.get("plotly_chart")) >= 1


def _lab_page(dtype_models, monkeypatch, **state):
    """The lab's page on the tiny models, with `state` forced into session state before its first run."""
    from streamlit.testing.v1 import AppTest

    import specviz.ui.common.models as ui_models

    monkeypatch.setattr(ui_models, "get_model", lambda source, device="auto", dtype="auto", **kw: dtype_models["bfloat16" if dtype == "bfloat16" else "float32"])
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "pages" / "numerics.py"), default_timeout=180)
    for key, value in state.items():
        at.session_state[key] = value
    at.run()
    assert not at.exception, at.exception
    return at


def test_run_and_measure_on_the_page_take_one_model_turn_per_pass(dtype_models, monkeypatch):
    """Issue 26: the page held one model turn for the whole batch-invariance measurement (140 s with a long prompt)."""
    import contextlib

    import specviz.ui.common.turns as ui_turns

    turns, depth = [], []

    @contextlib.contextmanager
    def recorded(model, what="your round", slot=None, **kwargs):
        depth.append(1)
        turns.append((what, len(depth)))
        try:
            yield 0.0
        finally:
            depth.pop()

    monkeypatch.setattr(ui_turns, "model_turn", recorded)
    at = _lab_page(dtype_models, monkeypatch)
    at.text_area(key="num_prompt").set_value(PROMPT)
    at.slider(key="num_new").set_value(8)
    at.slider(key="num_k").set_value(2)
    at.button(key="num_inv_run").click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    scoring = 2 + 8 + 3  # per precision: two prefills, eight 1-token passes, ceil(8 / 3) verify-sized passes
    assert len(turns) >= 8 + 2 * scoring and {t for t in turns} == {("its next pass", 1)}  # never nested, never one for all
    turns.clear()
    at.selectbox(key="num_drafter").set_value("lookup")
    at.button(key="num_run").click().run()
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert len(turns) >= 2 * (8 + 1 + scoring) and {t for t in turns} == {("its next pass", 1)}


def test_the_labs_prompt_new_tokens_and_k_keep_within_the_owners_caps(dtype_models, monkeypatch):
    """Issue 26: in shared mode the lab's prompt length and sliders were not capped by the owner's policy."""
    caps = {"SPECVIZ_MODE": "shared", "SPECVIZ_MAX_NEW_TOKENS": "16", "SPECVIZ_MAX_DRAFT_TOKENS": "3", "SPECVIZ_MAX_PROMPT_CHARS": "60"}
    for key, value in caps.items():
        monkeypatch.setenv(key, value)
    long_prompt = "the cat sat on the mat " * 180  # 4,140 characters, past the box's limit
    at = _lab_page(dtype_models, monkeypatch, num_new=128, num_k=8, num_prompt=long_prompt)  # forced past the widgets
    assert (at.slider(key="num_new").max, at.slider(key="num_k").max) == (16, 3)
    assert at.text_area(key="num_prompt").proto.max_chars == 60
    errors = [e.value for e in at.error]
    assert any("max new tokens is limited to 16" in e for e in errors) and any("k is limited to 3" in e for e in errors), errors
    assert (at.slider(key="num_new").value, at.slider(key="num_k").value) == (16, 3)
    at.button(key="num_inv_run").click().run()  # the box sends its value back, cut at its limit
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    assert at.text_area(key="num_prompt").value == long_prompt[:60]
    assert not any("Press **Measure**" in i.value for i in at.info)  # measured, on the capped prompt and sliders


def test_the_labs_plumbing_caps_whatever_the_widgets_sent(monkeypatch):
    """The page's widgets keep within the caps; its plumbing checks again (a value that never went through a widget)."""
    from specviz.ui.labs.numerics import within_caps

    for key, value in {"SPECVIZ_MODE": "shared", "SPECVIZ_MAX_NEW_TOKENS": "16", "SPECVIZ_MAX_DRAFT_TOKENS": "3", "SPECVIZ_MAX_PROMPT_CHARS": "60"}.items():
        monkeypatch.setenv(key, value)
    assert within_caps(PROMPT[:60], 128, 8) == (16, 3)
    with pytest.raises(ValueError, match=r"limited to 60 on this server \(asked for 4,000\)\. Shorten it"):
        within_caps("x" * 4_000, 8, 2)
    with pytest.raises(ValueError, match="empty"):
        within_caps("  ", 8, 2)


def test_a_long_prompt_pasted_in_shared_mode_is_cut_at_the_default_cap(dtype_models, monkeypatch):
    """The issue's 4,000-character paste: the box keeps the owner's default 2,000 characters."""
    from specviz.workshop.policy import Policy

    monkeypatch.setenv("SPECVIZ_MODE", "shared")
    for key in ("SPECVIZ_MAX_PROMPT_CHARS", "SPECVIZ_MAX_NEW_TOKENS", "SPECVIZ_MAX_DRAFT_TOKENS"):
        monkeypatch.delenv(key, raising=False)
    at = _lab_page(dtype_models, monkeypatch)
    at.text_area(key="num_prompt").set_value("x" * 4_000).run()
    assert not at.exception and len(at.text_area(key="num_prompt").value) == Policy().max_prompt_chars == 2_000


def test_the_invariance_limit_label_sits_on_its_line():
    """A log axis reads an annotation's y in log10 units: the 1e-3 label placed at y = 1e-3 sat at 10^0.001 ≈ 1 and
    stretched the axis up to 1 (issue 43, labels that read as errors)."""
    import math
    from types import SimpleNamespace

    import pandas as pd

    from specviz.viz.numerics import invariance_figure

    diffs = pd.DataFrame({"dtype": ["bfloat16"] * 3, "position": [0, 1, 2], "max_abs_diff": [1e-6, 2e-6, 5e-7]})
    fig = invariance_figure(SimpleNamespace(pass_diffs=diffs, k=4))
    (label,) = [a for a in fig.layout.annotations if "fit to verify" in a.text]
    assert label.y == pytest.approx(math.log10(1e-3)) and label.yref == "y"
