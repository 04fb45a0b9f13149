"""AppTest for the Speedup theory, Exactness lab and Benchmark pages. Model loading is patched to a tiny local model."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from specviz.core.theory import VerifyCurve, best_k, expected_tokens, speedup
from specviz.experiments.bench import COLUMNS
from specviz.ui.common.keys import BENCH_RESULTS_KEY

PAGES = Path(__file__).resolve().parent.parent / "pages"
SHIPPED_TABLE = PAGES.parent / "assets" / "bench_cpu.csv"
TIMEOUT = 180


def page(name: str) -> AppTest:
    return AppTest.from_file(str(PAGES / name), default_timeout=TIMEOUT)


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


@pytest.fixture()
def tiny_target(tiny_models, monkeypatch):
    """Every get_model call on these pages returns the tiny llama, whatever the source."""
    import specviz.ui.common.models as ui_models

    model = tiny_models["llama"]
    monkeypatch.setattr(ui_models, "get_model", lambda *args, **kwargs: model)
    return model


# --- Speedup theory ------------------------------------------------------------------------------


def test_theory_page_numbers():
    at = page("theory.py").run()
    assert not at.exception
    m = metrics(at)
    assert m["tokens per target pass"] == f"{expected_tokens(0.7, 4):.2f}"
    assert m["expected speedup"] == f"{speedup(0.7, 4, 0.05, 1.0):.2f}×"
    assert m["best k"] == str(best_k(0.7, 0.05, 1.0))
    assert not at.warning
    at.slider(key="theory_alpha").set_value(0.2).run()
    at.slider(key="theory_verify_cost").set_value(1.6).run()
    assert not at.exception
    assert metrics(at)["expected speedup"] == f"{speedup(0.2, 4, 0.05, 1.6):.2f}×"
    assert any("beats plain decoding" in w.value for w in at.warning)  # no k wins at alpha 0.2 with a 1.6x verify pass


def test_theory_page_overlays_session_runs():
    at = page("theory.py")
    row = {c: None for c in COLUMNS} | dict(category="copy", prompt="p", drafter="lookup", k=4, temperature=0.0, alpha=None, alpha_implied=0.8, speedup=1.7)
    at.session_state[BENCH_RESULTS_KEY] = pd.DataFrame([row], columns=list(COLUMNS))
    at.session_state["specviz_step_through"] = object()  # another page's state of an unexpected shape is ignored
    at.run()
    assert not at.exception
    assert any("Measured runs drawn above (1)" in e.label for e in at.expander)


def test_theory_page_overlays_step_through_runs(tiny_models):
    """The step-through page's PageState is read through its types: session.runs[i].records and session.baseline.records."""
    from specviz.config import RunConfig
    from specviz.runs import RunModels, build_decoder
    from specviz.ui.common.models import TokenTexts
    from specviz.ui.step_through.session import STATE_KEY, PageState, Run, StepSession
    from tests.plain_baseline import Baseline
    from tests.toys import fake_clock

    target = tiny_models["llama"]
    ids = target.tokenizer("the cat sat on the mat and the cat sat on the")["input_ids"]
    config = RunConfig(target="tiny", drafter="lookup", num_draft_tokens=3, auto_k=False, max_new_tokens=8, chat=False)
    spec, plain = build_decoder(config, RunModels(target), ids), build_decoder(config, RunModels(target), ids, baseline=True)
    fake_clock(spec, 1.0), fake_clock(plain, 0.8)  # a plain pass 0.8 of a round: a speedup the physics allows, on any machine
    spec.run(), plain.run()
    session = StepSession("p", config, None, ids, TokenTexts(target.tokenizer), [Run("prompt lookup", config, spec)], Baseline(plain))
    at = page("theory.py")
    at.session_state[STATE_KEY] = PageState(session=session)
    at.run()
    assert not at.exception
    assert any("Measured runs drawn above (1)" in e.label for e in at.expander)


def test_theory_page_marks_what_k_auto_chose_in_the_current_run(tiny_models):
    """A step-through run under k: auto is drawn at the k auto chose (its mean over the rounds), and says so."""
    from specviz.config import RunConfig
    from specviz.runs import RunModels, build_decoder
    from specviz.ui.common.models import TokenTexts
    from specviz.ui.step_through.session import STATE_KEY, PageState, Run, StepSession
    from tests.plain_baseline import Baseline
    from tests.toys import fake_clock

    target = tiny_models["llama"]
    ids = target.tokenizer("the cat sat on the mat and the cat sat on the")["input_ids"]
    config = RunConfig(target="tiny", drafter="lookup", max_new_tokens=8, chat=False)
    assert config.k_policy == "auto"
    spec, plain = build_decoder(config, RunModels(target), ids), build_decoder(config, RunModels(target), ids, baseline=True)
    fake_clock(spec, 1.0), fake_clock(plain, 0.8)
    spec.run(), plain.run()
    session = StepSession("p", config, None, ids, TokenTexts(target.tokenizer), [Run("prompt lookup", config, spec)], Baseline(plain))
    at = page("theory.py")
    at.session_state[STATE_KEY] = PageState(session=session)
    at.run()
    assert not at.exception
    labels = [str(v) for df in at.dataframe for v in df.value.get("label", [])]
    assert any("k: auto chose about" in label for label in labels), labels


def test_theory_page_uses_a_shipped_profile():
    from specviz.experiments.cost_profile import shipped_profiles

    cpu = shipped_profiles()["profile_cpu"]
    at = page("theory.py").run()
    options = at.selectbox(key="theory_verify_source").options
    assert options[0].startswith("one constant") and any(cpu.name in o for o in options)
    at.selectbox(key="theory_verify_source").set_value(next(o for o in options if cpu.name in o)).run()
    assert not at.exception
    m = metrics(at)
    assert m["expected speedup"] == f"{speedup(0.7, 4, 0.05, cpu.curve):.2f}×"
    assert m["best k"] == str(best_k(0.7, 0.05, cpu.curve))
    assert at.slider(key="theory_verify_cost").disabled


def test_theory_page_measures_this_machine(tiny_target, monkeypatch):
    """The button measures (patched to a fast fake), shows progress, and selects the new curve at once."""
    import specviz.experiments.cost_profile as profile_module

    def fake_measure(target, on_progress=None, **kwargs):
        for i in range(1, 4):
            on_progress(i, 3, f"pass {i}")
        return profile_module.CostProfile(
            target=target.name, device="cpu", device_name="fake CPU", dtype="float32", torch_version="x", threads=1, clock="wall",
            context_length=8, repeats=1, pass_ms=tuple(10.0 + 3.0 * n for n in range(17)), draft_ms_per_token={"ngram": 0.01},
            label="this machine, measured now",
        )

    monkeypatch.setattr(profile_module, "measure_profile", fake_measure)
    at = page("theory.py").run()
    at.button(key="theory_measure").click().run()
    assert not at.exception, at.exception
    assert at.selectbox(key="theory_verify_source").value == "this machine (measured now)"
    curve = VerifyCurve.from_pass_ms([10.0 + 3.0 * n for n in range(17)])
    assert metrics(at)["expected speedup"] == f"{speedup(0.7, 4, 0.05, curve):.2f}×"


# --- Exactness lab -------------------------------------------------------------------------------


def test_lab_toy_exact_then_broken():
    at = page("exactness.py").run()
    assert not at.exception
    assert float(metrics(at)["TV from p_target"]) < 0.03
    assert at.success and "consistent with p_target" in at.success[0].value
    assert any("typical acceptance" in o for o in at.radio(key="lab_variant").options)  # the rule a serving stack ships, offered as a control
    for variant in ("resample_from_target", "greedy_draft_soft_q", "typical_acceptance"):
        at.radio(key="lab_variant").set_value(variant).run()
        assert not at.exception
        assert float(metrics(at)["TV from p_target"]) > 0.1
        assert float(metrics(at)["chi-square p-value"]) < 1e-6
        assert any("NOT distributed as p_target" in e.value for e in at.error)
    assert any("evaluate_posterior" in c.value for c in at.caption)  # says what Medusa does and why it is not exact


def test_lab_toy_rejects_a_bad_table():
    at = page("exactness.py").run()
    at.session_state["lab_vocab"] = {"edited_rows": {str(i): {"q_draft": 0.0} for i in range(6)}, "added_rows": [], "deleted_rows": []}
    at.run()
    assert not at.exception
    assert any("all zero" in e.value for e in at.error)


def test_lab_real_model_and_greedy(tiny_target):
    at = page("exactness.py").run()
    at.text_input(key="lab_real_prompt").set_value("the quick brown fox")
    at.select_slider(key="lab_real_n_fast").set_value(10_000)
    at.button(key="lab_real_run").click().run()  # fast: the rule on the real first-position distributions
    assert not at.exception, at.exception
    m = metrics(at)
    assert float(m["speculative: TV from p_target"]) < 0.05  # 10,000 exact draws sit close to p_target
    assert float(m["target alone: TV from p_target"]) < 0.05
    at.radio(key="lab_real_mode").set_value("engine").run()
    at.select_slider(key="lab_real_n").set_value(10)
    at.button(key="lab_real_run").click().run()  # end to end: fresh engine runs
    assert not at.exception, at.exception
    assert 0.0 <= float(metrics(at)["target alone: chi-square p"]) <= 1.0
    at.text_input(key="lab_greedy_prompt").set_value("the cat sat on the mat and the cat sat on the")
    at.button(key="lab_greedy_run").click().run()
    assert not at.exception, at.exception
    assert any("Identical" in s.value for s in at.success)  # greedy speculative == plain greedy


# --- Benchmark -----------------------------------------------------------------------------------


def test_benchmark_page_runs_a_sweep(tiny_target):
    at = page("benchmark.py").run()
    assert not at.exception
    at.multiselect(key="bench_drafters").set_value(["lookup", "early-exit"])
    at.multiselect(key="bench_ks").set_value([2])
    at.multiselect(key="bench_temperatures").set_value([0.0, 1.0])
    at.slider(key="bench_max_new_tokens").set_value(8)
    at.slider(key="bench_repeats").set_value(2)
    at.run()
    at.button(key="bench_run").click().run()
    assert not at.exception, at.exception
    frame = at.session_state[BENCH_RESULTS_KEY]
    assert tuple(frame.columns) == COLUMNS
    assert len(frame) == 1 * 2 * 2  # one copy prompt x two temperatures x two drafters
    assert (frame["repeats"] == 2).all()
    assert (frame["speedup_low"] <= frame["speedup"]).all() and (frame["speedup"] <= frame["speedup_high"]).all()
    assert frame.loc[frame["temperature"] == 0, "same_as_baseline"].all()
    assert any(b.label == "Download CSV" for b in at.get("download_button"))
    # issue 43: the shipped table stays, in a tab beside this session's sweep, and headers are plain words
    assert [t.label for t in at.tabs] == ["This session's sweep", "Measured earlier on a 2-core CPU"]
    shipped_rows = len(pd.read_csv(SHIPPED_TABLE))
    assert shipped_rows == 48 and any(len(d.value) == shipped_rows for d in at.dataframe)
    configs = " ".join(d.proto.columns for d in at.dataframe)
    assert "tokens per target pass" in configs and "accepted / drafted" in configs
    # issue 45: this sweep's acceptance histogram per setting (the copy prompt's), and the shipped table, written before
    # bench carried the column, says so
    charts = [c.proto.spec for c in at.get("plotly_chart") if "acceptance_histogram" in c.proto.spec]
    assert len(charts) == 1 and "lookup k=2 T=0" in charts[0] and "early-exit k=2 T=1" in charts[0]
    assert any("a tall bar at 0 is drafting wasted" in c.value for c in at.caption)
    assert any("before `bench` wrote vLLM's acceptance_histogram" in i.value for i in at.info)


def test_benchmark_page_sweeps_tree_widths(tiny_target):
    at = page("benchmark.py").run()
    assert at.multiselect(key="bench_tree_widths").value == [1]
    at.multiselect(key="bench_drafters").set_value(["ngram"])
    at.multiselect(key="bench_ks").set_value([4])
    at.multiselect(key="bench_tree_widths").set_value([1, 2])
    at.slider(key="bench_max_new_tokens").set_value(8)
    at.slider(key="bench_repeats").set_value(1)
    at.run()
    assert any("× 2 tree widths)" in m.value for m in at.markdown), [m.value for m in at.markdown]
    at.button(key="bench_run").click().run()
    assert not at.exception, at.exception
    frame = at.session_state[BENCH_RESULTS_KEY]
    assert sorted(frame["tree_width"]) == [1, 2]
    assert frame["same_as_baseline"].all()  # greedy: the tree, the chain and plain decoding agree
    tables = [t.value for t in at.dataframe]
    assert any("tree_width" in t and sorted(t["tree_width"]) == [1, 2] for t in tables)  # the summary keeps the widths apart
    assert any("W=2" in el.proto.spec for el in at.get("plotly_chart"))
    at.multiselect(key="bench_tree_widths").set_value([]).run()
    assert any("choose at least one, between 1" in i.value for i in at.info)


def test_benchmark_page_asks_for_a_choice():
    at = page("benchmark.py").run()
    at.multiselect(key="bench_drafters").set_value([]).run()
    assert not at.exception
    assert any("at least one drafter" in i.value for i in at.info)
