"""The token and memory budgets on the pages (AppTest, the tiny llama: one token a word, a context of 256): a prompt
over the owner's token budget, or a run past the model's context, is refused with a message naming the numbers
before any model turn, on the step-through page (its compare run and a restored run too), the exactness lab (every
mode) and the numerics lab; a run that would pass the server's KV-cache budget is refused with a message, and Reset
gives its share back; Medusa heads load once per (folder, target)."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from specviz.workshop.budgets import kv_budget, reset_kv_budget
from specviz.workshop.queues import reset_queues
from tests.test_app_shared import OWNER_ENV, PAGES, PROMPT, STATE, click, errors

BUDGET_ENV = ("SPECVIZ_MAX_PROMPT_TOKENS", "SPECVIZ_MAX_KV_TOKENS", "SPECVIZ_MAX_SESSIONS_PER_CLIENT", "SPECVIZ_RUN_DIR")
OVER = "Your prompt is 13 tokens; this server allows 8. Shorten it."  # PROMPT is 13 words


@pytest.fixture()
def shared(monkeypatch, tiny_dir, tmp_path):
    """Shared mode, the tiny llama the only target, runs saved in a temporary folder."""
    for key in (*OWNER_ENV, *BUDGET_ENV):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("SPECVIZ_MODE", "shared")
    monkeypatch.setenv("SPECVIZ_TARGETS", str(tiny_dir["llama"]))
    monkeypatch.setenv("SPECVIZ_RUN_DIR", str(tmp_path / "runs"))
    reset_queues(), reset_kv_budget()
    yield str(tiny_dir["llama"])
    reset_queues(), reset_kv_budget()


@pytest.fixture()
def no_turns(monkeypatch):
    """Every model turn the pages could take, counted (the budgets must refuse before the first)."""
    import specviz.ui.common.turns
    import specviz.ui.room.saved_runs
    import specviz.ui.step_through.session

    taken: list[str] = []
    real = specviz.ui.common.turns.model_turn

    def counting(model, what: str = "your round", slot=None, **kwargs):
        taken.append(what)
        return real(model, what, slot, **kwargs)

    for module in (specviz.ui.common.turns, specviz.ui.step_through.session, specviz.ui.room.saved_runs):
        monkeypatch.setattr(module, "model_turn", counting)
    return taken


def step_page(run: str | None = None, **state) -> AppTest:
    at = AppTest.from_file(str(PAGES / "step_through.py"), default_timeout=120)
    for key, value in {"prompt": PROMPT, "drafter": "lookup", "max_new_tokens": 12, "num_draft_tokens": 4, "auto_k": False, **state}.items():
        at.session_state[key] = value
    if run is not None:
        at.query_params["run"] = run
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_a_prompt_over_the_token_budget_is_refused_before_any_model_turn(shared, no_turns, monkeypatch):
    monkeypatch.setenv("SPECVIZ_MAX_PROMPT_TOKENS", "8")
    at = click(step_page(), "step")
    assert OVER in errors(at) and at.session_state[STATE].session is None
    assert no_turns == [] and kv_budget().in_use == 0
    compare = click(step_page(compare="ngram"), "step")  # the compare run is the same prompt: the same check
    assert OVER in errors(compare) and no_turns == []
    monkeypatch.setenv("SPECVIZ_MAX_PROMPT_TOKENS", "13")
    at = click(step_page(), "step")
    assert not errors(at) and len(at.session_state[STATE].session.runs[0].records) == 1 and no_turns == ["your prefill", "your round"]


def test_a_run_past_the_models_context_is_refused_in_local_mode_too(monkeypatch, tiny_dir, no_turns):
    """The issue's 12,000 tokens past an 8,192 context ran without a word. Here 13 + 240 + k + 1 = 258 > 256
    (the old check, prompt + max new tokens = 253, let it run)."""
    for key in (*OWNER_ENV, *BUDGET_ENV):
        monkeypatch.delenv(key, raising=False)
    reset_kv_budget()
    at = step_page(target=str(tiny_dir["llama"]), max_new_tokens=240, chat=False)
    click(at, "step")
    assert any("needs 258 positions; the model's context is 256" in e for e in errors(at)), errors(at)
    assert no_turns == [] and at.session_state[STATE].session is None


def test_a_full_kv_budget_refuses_a_run_with_the_numbers_and_reset_gives_the_share_back(shared, no_turns, monkeypatch):
    monkeypatch.setenv("SPECVIZ_MAX_KV_TOKENS", "200")
    other = kv_budget().reserve(("another participant", "step-through"), 150, limit=200)
    at = click(step_page(), "step")
    needed = (13 + 12 + 4 + 1) + (13 + 12 + 1)  # the run, and the plain-decoding baseline measured for it
    assert any(f"needs {needed} tokens of KV cache and 50 of its 200 are free" in e for e in errors(at)), errors(at)
    assert no_turns == [] and at.session_state[STATE].session is None
    other.release()
    click(at, "step")
    assert not errors(at) and kv_budget().in_use == needed
    click(at, "reset")
    assert at.session_state[STATE].session is None and kv_budget().in_use == 0


def test_a_run_dropped_any_other_way_gives_its_share_back(shared):
    """A session object replaced or dropped without release() (a restore, a fork, a changed setting at round 0, the
    whole session state deleted) gives its share back when it goes (a weakref finalizer), at the latest after the next
    rerun (a widget callback of the page holds the session until then)."""
    import gc

    at = click(step_page(), "step")
    assert kv_budget().in_use == 56
    at.session_state[STATE].session = None
    del at.query_params["run"]  # (else the page would restore it from the run directory)
    at.run()  # the widgets' callbacks of the last run referred to it until this one replaced them
    gc.collect()
    assert kv_budget().in_use == 0


def test_the_idle_sweep_gives_the_share_back(shared):
    at = click(step_page(), "step")
    assert kv_budget().in_use > 0
    at.session_state[STATE].free()  # what the sweeper does to an idle session
    assert kv_budget().in_use == 0


def test_a_restored_run_passes_the_token_budget_too(shared, no_turns, monkeypatch):
    at = click(step_page(), "step")
    token = at.query_params["run"]
    token = token[-1] if isinstance(token, list) else token
    monkeypatch.setenv("SPECVIZ_MAX_PROMPT_TOKENS", "8")  # the owner lowered the budget since
    reset_kv_budget()
    no_turns.clear()
    other = step_page(run=token)
    assert any(OVER in w.value for w in other.warning), [w.value for w in other.warning]
    assert other.session_state[STATE].session is None and no_turns == []


def exactness(prompt_key: str, prompt: str) -> AppTest:
    at = AppTest.from_file(str(PAGES / "exactness.py"), default_timeout=120)
    at.session_state[prompt_key] = prompt
    at.session_state["lab_real_drafter"] = "lookup"
    at.session_state["lab_greedy_drafter"] = "lookup"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.mark.parametrize("mode", ["fast", "engine"])
def test_the_exactness_labs_sampler_keeps_to_the_token_budget(shared, no_turns, monkeypatch, mode):
    """The issue's 108 s turn: 12,000 tokens in the lab's fast mode, no check at all."""
    monkeypatch.setenv("SPECVIZ_MAX_PROMPT_TOKENS", "8")
    at = exactness("lab_real_prompt", PROMPT)
    at.radio(key="lab_real_mode").set_value(mode).run()
    click(at, "lab_real_run")
    assert OVER in errors(at) and no_turns == [] and kv_budget().in_use == 0
    monkeypatch.setenv("SPECVIZ_MAX_PROMPT_TOKENS", "13")
    click(at, "lab_real_run")
    assert not errors(at) and no_turns and kv_budget().in_use == 0  # the job's share is back once it ends


def test_the_exactness_labs_greedy_check_keeps_to_the_token_budget(shared, no_turns, monkeypatch):
    monkeypatch.setenv("SPECVIZ_MAX_PROMPT_TOKENS", "8")
    at = click(exactness("lab_greedy_prompt", PROMPT), "lab_greedy_run")
    assert OVER in errors(at) and no_turns == []


def test_the_numerics_lab_keeps_to_the_token_budget(shared, no_turns, monkeypatch):
    monkeypatch.setenv("SPECVIZ_MAX_PROMPT_TOKENS", "8")
    at = AppTest.from_file(str(PAGES / "numerics.py"), default_timeout=180)
    at.run()
    at.text_area(key="num_prompt").set_value(PROMPT)
    at.selectbox(key="num_drafter").set_value("lookup")
    click(at, "num_run")
    assert any(OVER in e for e in errors(at)), errors(at)
    assert no_turns == []


def test_medusa_heads_load_once_per_folder_and_target(monkeypatch, tiny_dir, tiny_heads):
    """Issue 32: heads were read from disk and allocated twice when a run started and once more inside its turn, per
    session. Now two sessions starting Medusa runs read them once."""
    import specviz.runs
    import specviz.ui.common.models

    for key in (*OWNER_ENV, *BUDGET_ENV):
        monkeypatch.delenv(key, raising=False)
    reset_kv_budget()
    specviz.ui.common.models._cached_heads.clear()
    reads: list[str] = []
    real = specviz.runs.load_heads
    monkeypatch.setattr(specviz.runs, "load_heads", lambda path, *a, **k: reads.append(str(path)) or real(path, *a, **k))
    for _ in range(2):
        at = step_page(target=str(tiny_dir["llama"]), drafter="medusa", medusa_heads=str(tiny_heads), num_draft_tokens=3, chat=False)
        click(at, "step")
        assert not errors(at) and at.session_state[STATE].session.runs[0].records[0].num_drafted
    assert reads == [str(tiny_heads)]


def test_a_hogs_idle_run_is_freed_for_another_address_and_comes_back_from_its_file(shared, monkeypatch):
    """Issue 42, item 5: three sessions of one address fill the budget; another address's Step frees the hog's oldest
    idle run instead of being refused, and that run comes back from its saved file at the same round."""
    import types

    import specviz.ui.common.budgets
    import specviz.workshop.budgets

    per_session = (13 + 12 + 4 + 1) + (13 + 12 + 1)
    monkeypatch.setenv("SPECVIZ_MAX_KV_TOKENS", str(3 * per_session))
    monkeypatch.setattr(specviz.workshop.budgets, "IDLE_S", 0.0)  # every run not in a Step right now is idle
    reset_kv_budget()
    who = {"address": "198.51.100.1", "session": ""}  # AppTest has one session id and no address: say them here
    monkeypatch.setattr(specviz.ui.common.budgets, "current_client", lambda: types.SimpleNamespace(address=who["address"]))
    monkeypatch.setattr(specviz.ui.common.budgets, "session_id_now", lambda: who["session"])
    hogs = []
    for i in range(3):
        who["session"] = f"hog-{i}"
        hogs.append(click(step_page(), "step"))
    assert kv_budget().in_use == 3 * per_session and all(h.session_state[STATE].session is not None for h in hogs)
    who.update(address="198.51.100.2", session="victim")
    victim = click(step_page(), "step")
    assert not errors(victim) and victim.session_state[STATE].session.num_rounds == 1  # before: "memory for runs is full"
    assert hogs[0].session_state[STATE].session is None and hogs[1].session_state[STATE].session is not None  # the oldest
    assert kv_budget().by_client() == {"198.51.100.1": 2 * per_session, "198.51.100.2": per_session}
    click(victim, "reset")
    who.update(address="198.51.100.1", session="hog-0")
    hogs[0].run()
    restored = hogs[0].session_state[STATE].session
    assert restored is not None and restored.num_rounds == 1, [i.value for i in hogs[0].info]  # from its file, at the same round
    assert any("Restored this run at round 1" in i.value for i in hogs[0].info)
