"""Token recycling and EAGLE in the app on the tiny llama: the sidebar offers both (labels from the DRAFTERS table) and
EAGLE's head folder and the draft vocabulary, a recycle Step draws which table entry proposed each token, an EAGLE run
with a draft vocabulary steps, the exactness lab offers both, and the theory page draws the drafting-cost chart from a
profile that timed a drafter over the full and a draft vocabulary."""

from __future__ import annotations

from specviz.config import RunConfig
from specviz.core.metrics import table_slots
from specviz.experiments.lab import LAB_DRAFTERS, greedy_side_by_side, sample_real
from specviz.runs import RunModels
from tests.test_app_compare_tree import PAGES, click, local, step_page  # noqa: F401  (local is a fixture)
from tests.test_eagle import eagle_dir  # noqa: F401  (a fixture)

STATE = "specviz_step_through"


def test_the_lab_and_the_menu_offer_both_new_drafters():
    assert {"recycle", "eagle"} <= set(LAB_DRAFTERS)


def test_a_recycle_round_shows_the_table_entry_of_every_drafted_token(local):  # noqa: F811
    at = step_page(local, drafter="recycle", num_draft_tokens=4, prompt="the cat sat on the mat and the dog sat on the log the cat sat on the")
    assert any("token recycling" in o for o in at.selectbox(key="drafter").options)
    click(at, "step")
    assert not at.error, [e.value for e in at.error]
    run = at.session_state[STATE].session.runs[0]
    record = run.records[0]
    assert record.num_drafted  # the prefill read the prompt: the first round follows the table
    table = next(d.value for d in at.dataframe if "row" in d.value.columns)
    assert list(table["column"]) == [c for _, c in table_slots(record)]
    assert len(table) == record.num_drafted
    assert any("Which table entry proposed each drafted token" in c.value for c in at.caption)


def test_an_eagle_run_with_a_draft_vocabulary_steps_in_the_app(local, eagle_dir):  # noqa: F811
    at = step_page(local, drafter="eagle", eagle_head=str(eagle_dir), draft_vocab=0, num_draft_tokens=3)
    assert at.text_input(key="eagle_head").value == str(eagle_dir)
    assert at.selectbox(key="draft_vocab").value == 0
    click(at, "step")
    assert not at.error, [e.value for e in at.error]
    run = at.session_state[STATE].session.runs[0]
    assert run.config.drafter == "eagle" and run.config.eagle_head == str(eagle_dir)
    assert run.records[0].num_drafted


def test_a_forced_draft_vocabulary_outside_the_menu_is_refused(local):  # noqa: F811
    at = step_page(local, drafter="medusa", draft_vocab=12345)
    assert at.session_state["draft_vocab"] == 0
    assert any("draft vocabulary" in e.value for e in at.error)


def test_the_lab_runs_both_new_drafters(tiny_models, eagle_dir):  # noqa: F811
    target = tiny_models["llama"]
    for drafter, extra in (("recycle", {}), ("eagle", {"eagle_head": str(eagle_dir)})):
        config = RunConfig(target="tiny", drafter=drafter, num_draft_tokens=1, auto_k=False, temperature=1.0, max_new_tokens=2, chat=False, **extra)
        fast = sample_real(config, RunModels(target), "the cat sat on the mat and the cat sat on the", "fast", 2_000)
        assert len(fast.spec_tokens) == 2_000
        greedy = greedy_side_by_side(RunConfig(**(config.to_dict() | {"temperature": 0.0, "max_new_tokens": 12})), RunModels(target), "the quick brown fox")
        assert greedy.identical


def test_the_policy_refuses_an_eagle_folder_not_on_the_list():
    from specviz.workshop.policy import load_policy

    policy = load_policy({"SPECVIZ_MODE": "shared", "SPECVIZ_MEDUSA_HEADS": "/srv/eagle"})
    assert policy.enforce(RunConfig(drafter="eagle", eagle_head="/srv/eagle"))[1] == []
    config, refusals, _ = policy.enforce(RunConfig(drafter="eagle", eagle_head="/etc"))
    assert config.eagle_head is None and any("EAGLE head" in m for m in refusals)


def test_the_theory_page_draws_the_drafting_cost_chart(monkeypatch, tmp_path):
    """A profile with "medusa" and "medusa@8192": the chart and its caption; none: the command to measure one."""
    import json

    from streamlit.testing.v1 import AppTest

    from specviz.experiments import cost_profile
    from specviz.ui.labs import theory as ui_theory
    from specviz.ui.labs.theory import drafting_lesson

    profile = cost_profile.CostProfile(
        target="t", device="cpu", device_name="test CPU", dtype="fp16-weights", torch_version="x", threads=2, clock="wall",
        context_length=256, repeats=3, pass_ms=(25.0, 28.0, 31.0, 34.0, 37.0), label="test profile",
        draft_ms_per_token={"ngram": 0.1, "medusa": 1.5, "medusa@8192": 0.4},
    )  # fmt: skip
    lesson = drafting_lesson(None, {"test": profile}, 0.5)
    assert lesson is not None and "0.060" in lesson.caption and "0.016" in lesson.caption
    assert len(lesson.figure["data"]) == 2  # the same heads at two costs
    assert drafting_lesson(None, {"old": profile.__class__(**(profile.__dict__ | {"draft_ms_per_token": {"medusa": 1.5}}))}, 0.5) is None
    (tmp_path / "profile_test.json").write_text(json.dumps(profile.to_json()), encoding="utf-8")
    monkeypatch.setattr(ui_theory, "shipped_profiles", lambda: cost_profile.shipped_profiles(tmp_path))
    at = AppTest.from_file(str(PAGES / "theory.py"), default_timeout=60)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("Why drafting cost decides" in h.value for h in at.header)
    assert any("draft vocabulary" in c.value for c in at.caption)
