"""AppTest: compare mode sets a chain against a token tree (the same n-gram drafter on the tiny llama, run B with
tree width 2); both runs step, run B records tree rounds, and at temperature 0 both equal plain greedy. A drafter
that cannot branch asked for a tree, and run B identical to run A, are messages, not runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

PAGES = Path(__file__).resolve().parents[1] / "pages"
STATE = "specviz_step_through"
PROMPT = "the quick brown fox jumps over the lazy dog the quick brown fox"


@pytest.fixture()
def local(monkeypatch, tiny_dir):
    for key in ("SPECVIZ_MODE", "SPECVIZ_TARGETS", "SPECVIZ_DRAFTS"):
        monkeypatch.delenv(key, raising=False)
    return str(tiny_dir["llama"])


def step_page(target: str, **state) -> AppTest:
    at = AppTest.from_file(str(PAGES / "step_through.py"), default_timeout=120)
    values = {"prompt": PROMPT, "target": target, "drafter": "ngram", "num_draft_tokens": 4, "temperature": 0.0,
              "max_new_tokens": 12, "chat": False, **state}  # fmt: skip
    for key, value in values.items():
        at.session_state[key] = value
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def click(at: AppTest, key: str) -> AppTest:
    at.button(key=key).click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_compare_a_chain_against_a_tree_of_the_same_drafter(local):
    at = step_page(local, compare="ngram", compare_tree_width=2)
    assert not at.error, [e.value for e in at.error]
    assert at.slider(key="compare_tree_width").value == 2
    click(at, "step")
    session = at.session_state[STATE].session
    a, b = session.runs
    assert (a.label, b.label) == ("A: n-gram model", "B: n-gram model, tree W=2")
    assert (a.config.tree_width, b.config.tree_width) == (1, 2) and a.config.drafter == b.config.drafter == "ngram"
    assert len(a.records) == len(b.records) == 1
    assert {s.value for s in at.subheader} >= {a.label, b.label}
    click(at, "run_all")
    assert a.decoder.done and b.decoder.done
    assert not any(r.is_tree for r in a.records)
    assert any(r.is_tree for r in b.records) and all(r.tree_width == 2 for r in b.records)
    assert session.baseline.wait_for(len(a.decoder.generated), timeout_s=120)  # measured in the background
    assert a.decoder.generated == b.decoder.generated == session.baseline.generated[: len(a.decoder.generated)]  # greedy: all equal plain greedy


def test_compare_a_tree_against_a_chain_of_another_drafter(local):
    at = step_page(local, tree_width=3, compare="lookup", compare_tree_width=1)
    click(at, "run_all")
    a, b = at.session_state[STATE].session.runs
    assert (a.label, b.label) == ("A: n-gram model, tree W=3", "B: prompt lookup")
    assert a.decoder.generated == b.decoder.generated


@pytest.mark.parametrize(
    "state, message",
    [
        ({"compare": "lookup", "compare_tree_width": 2}, "drafts chains only"),
        ({"compare": "none", "compare_tree_width": 3}, "drafts chains only"),
        ({"compare": "ngram", "compare_tree_width": 1}, "would repeat run A"),
    ],
)
def test_a_compare_run_that_cannot_be_is_a_message(local, state, message):
    at = step_page(local, **state)
    assert any(message in e.value for e in at.error), [e.value for e in at.error]
    click(at, "step")
    assert len(at.session_state[STATE].session.runs) == 1  # run A alone; nothing crashed


def test_run_b_of_another_drafter_takes_its_own_measured_best(local):
    """Compare mode used to hand run B run A's k: each run now gets its own drafter's settings."""
    from specviz.drafters.specs import MEASURED_BEST

    at = step_page(local, num_draft_tokens=3, compare="lookup")
    click(at, "step")
    a, b = at.session_state[STATE].session.runs
    assert (a.config.drafter, a.config.num_draft_tokens) == ("ngram", 3)
    assert (b.config.drafter, b.config.num_draft_tokens) == ("lookup", MEASURED_BEST["lookup"].num_draft_tokens) != (b.config.drafter, 3)


def test_compare_config_gives_each_drafter_its_own_settings():
    from specviz.config import RunConfig
    from specviz.drafters.specs import MEASURED_BEST
    from specviz.ui.step_through.sidebar import Settings
    from specviz.workshop.policy import Policy

    a = RunConfig(drafter="lookup", num_draft_tokens=5)
    medusa = Settings(a, "p", "medusa", 1.0).compare_config()
    assert (medusa.num_draft_tokens, medusa.draft_vocab) == (MEASURED_BEST["medusa"].num_draft_tokens, MEASURED_BEST["medusa"].draft_vocab)
    capped = Settings(a, "p", "ngram", 1.0, policy=Policy(max_draft_tokens=2)).compare_config()
    assert capped.num_draft_tokens == 2  # within the owner's k cap
    same = Settings(RunConfig(drafter="ngram", num_draft_tokens=5), "p", "ngram", 1.0, compare_tree_width=2).compare_config()
    assert (same.num_draft_tokens, same.tree_width) == (5, 2)  # the same drafter keeps run A's k
