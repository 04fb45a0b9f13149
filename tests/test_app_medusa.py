"""Medusa in the app on the tiny llama with tiny random heads (saved in Medusa's layout into a temporary folder):
the sidebar offers the drafter and its heads field, a Step draws the head table, the acceptance-by-head chart beside
acceptance by position, and a tree run's tree labelled by head; the exactness lab's fast sampler drafts with heads."""

from __future__ import annotations

import pytest

from specviz.config import RunConfig
from specviz.experiments.lab import LAB_DRAFTERS, sample_real
from specviz.runs import RunModels
from tests.test_app_compare_tree import click, local, step_page  # noqa: F401  (local is a fixture)

STATE = "specviz_step_through"


def charts(at) -> list[str]:
    return [el.proto.spec for el in at.get("plotly_chart")]


def test_the_lab_offers_medusa():
    assert "medusa" in LAB_DRAFTERS


def test_a_medusa_chain_shows_each_tokens_head_and_acceptance_by_head(local, tiny_heads):  # noqa: F811
    at = step_page(local, drafter="medusa", medusa_heads=str(tiny_heads), num_draft_tokens=3)
    assert at.selectbox(key="drafter").value == "medusa"
    assert any("Medusa heads" in o for o in at.selectbox(key="drafter").options)  # its label, from the DRAFTERS table
    assert at.text_input(key="medusa_heads").value == str(tiny_heads)
    click(at, "step")
    assert not at.error, [e.value for e in at.error]
    run = at.session_state[STATE].session.runs[0]
    assert run.config.drafter == "medusa" and run.config.medusa_heads == str(tiny_heads)
    assert run.records[0].num_drafted  # the prefill's hidden state: the first round drafts
    table = next(d.value for d in at.dataframe if "head" in d.value.columns)
    assert list(table["head"]) == list(range(1, run.records[0].num_drafted + 1))  # a chain: position i from head i
    assert list(table["q_draft"]) == pytest.approx(run.records[0].q_draft)  # with the probability the head gave it
    click(at, "run_all")
    specs = charts(at)
    assert any("acceptance by Medusa head" in s for s in specs) and any("acceptance by draft position" in s for s in specs)
    captions = " ".join(c.value for c in at.caption)
    assert "Head i guesses the token i places ahead" in captions and "prompt lookup wins" in captions
    positions = next(r for r in at.radio if r.key and r.key.startswith("inspect_pos_"))
    assert any("head 1" in o for o in positions.options) or not run.records[-1].num_drafted
    assert any("Medusa head" in m.value for m in at.markdown) or not run.records[-1].num_drafted


def test_a_medusa_tree_is_drawn_by_head(local, tiny_heads):  # noqa: F811
    at = step_page(local, drafter="medusa", medusa_heads=str(tiny_heads), num_draft_tokens=6, tree_width=2)
    click(at, "step")
    assert not at.error, [e.value for e in at.error]
    run = at.session_state[STATE].session.runs[0]
    assert any(r.is_tree for r in run.records)
    tree = next(s for s in charts(at) if "a tree of" in s)
    assert "head 1" in tree and "Medusa head" in tree
    assert any("Medusa's tree" in c.value for c in at.caption)


def test_a_bad_heads_folder_is_a_message(local, tmp_path):  # noqa: F811
    at = step_page(local, drafter="medusa", medusa_heads=str(tmp_path / "nowhere"))
    at.button(key="step").click().run()
    assert not at.exception, at.exception
    assert any("heads" in e.value.lower() for e in at.error)


def test_the_lab_samples_first_tokens_with_heads(tiny_models, tiny_heads):
    config = RunConfig(target="tiny", drafter="medusa", medusa_heads=str(tiny_heads), num_draft_tokens=1, auto_k=False, temperature=1.0, max_new_tokens=2, chat=False)
    fast = sample_real(config, RunModels(tiny_models["llama"]), "the quick brown fox", "fast", 5_000)
    assert fast.drafted_runs == 5_000 and fast.q_draft is not None  # head 1 drafted, with its real q
    typical = sample_real(config, RunModels(tiny_models["llama"]), "the quick brown fox", "fast", 5_000, "typical_acceptance")
    assert typical.variant == "typical_acceptance" and len(typical.spec_tokens) == 5_000


def test_the_policy_allows_the_owners_heads_only():
    from specviz.workshop.policy import Policy, load_policy

    policy = load_policy({"SPECVIZ_MODE": "shared", "SPECVIZ_MEDUSA_HEADS": "/srv/heads_a, /srv/heads_b"})
    assert policy.allowed_medusa_heads == ("/srv/heads_a", "/srv/heads_b")
    assert policy.allows_heads(None) and policy.allows_heads("/srv/heads_a") and not policy.allows_heads("/etc")
    config, refusals, _ = policy.enforce(RunConfig(drafter="medusa", medusa_heads="/etc"))
    assert config.medusa_heads is None and any("Medusa heads" in m for m in refusals)
    assert Policy.local().allows_heads("/anywhere")


def test_shared_mode_picks_heads_from_the_owners_list(monkeypatch, tiny_heads):
    from tests.test_app_shared import OWNER_ENV, errors
    from tests.test_app_shared import step_page as shared_page

    for key in OWNER_ENV:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("SPECVIZ_MODE", "shared")
    at = shared_page(drafter="medusa")
    assert not [w for w in at.text_input if w.key == "medusa_heads"]  # participants never type a path
    assert not [w for w in at.selectbox if w.key == "medusa_heads"]  # no list: the shipped heads, no menu
    monkeypatch.setenv("SPECVIZ_MEDUSA_HEADS", str(tiny_heads))
    at = shared_page(drafter="medusa", medusa_heads="/etc/passwd")  # forced through session state
    assert any("not on this server's list" in e for e in errors(at))
    menu = at.selectbox(key="medusa_heads")
    assert menu.options == ["the shipped heads", str(tiny_heads)] and menu.value == ""
