"""Runs that survive in the app (AppTest, the tiny llama in shared mode): after each Step the run is saved and its
token put in the URL; a new session opening that URL restores the run at the same round as its own fork (a new token)
and Step continues it exactly; bad tokens and an unwritable run directory give a clear message and never crash."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from specviz.workshop.queues import reset_queues
from specviz.workshop.saved_runs import RunStore, new_token
from tests.store_helpers import needs_redis
from tests.test_app_shared import OWNER_ENV, PAGES, PROMPT, STATE, click

SETTINGS = {"prompt": PROMPT, "drafter": "ngram", "temperature": 1.0, "seed": 3, "max_new_tokens": 24, "num_draft_tokens": 3}


def _shared_room(monkeypatch, tiny_dir) -> None:
    for key in OWNER_ENV:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("SPECVIZ_MODE", "shared")
    monkeypatch.setenv("SPECVIZ_TARGETS", str(tiny_dir["llama"]))


@pytest.fixture()
def room_env(monkeypatch, tiny_dir, tmp_path):
    """A room on the directory backend: yields its run directory."""
    _shared_room(monkeypatch, tiny_dir)
    monkeypatch.delenv("SPECVIZ_STORE", raising=False)
    monkeypatch.setenv("SPECVIZ_RUN_DIR", str(tmp_path / "runs"))
    reset_queues()
    yield tmp_path / "runs"
    reset_queues()


@pytest.fixture()
def room_runs(store_env, monkeypatch, tiny_dir):
    """A room on each backend in turn (the directory, a real redis-server: tests/store_helpers.py): yields the
    RunStore its pages use."""
    _shared_room(monkeypatch, tiny_dir)
    reset_queues()
    yield RunStore.from_env()
    reset_queues()


def page(run: str | None = None, **extra) -> AppTest:
    at = AppTest.from_file(str(PAGES / "step_through.py"), default_timeout=120)
    for key, value in (SETTINGS | extra).items():
        at.session_state[key] = value
    if run is not None:
        at.query_params["run"] = run
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def generated(at: AppTest) -> list[int]:
    return list(at.session_state[STATE].session.runs[0].decoder.generated)


def token(at: AppTest) -> str:
    value = at.query_params["run"]
    return value[-1] if isinstance(value, list) else value


def test_a_saved_run_restores_as_a_fork_and_continues_exactly(room_runs):
    solo = page()
    for _ in range(4):
        click(solo, "step")
    first = page()
    click(first, "step")
    click(first, "step")
    saved = token(first)
    assert room_runs.load(saved).num_rounds == 2
    other = page(run=saved)  # another session (a reload, another replica, another browser)
    assert any("Restored this run at round 2" in i.value for i in other.info)
    assert token(other) != saved  # its own copy: stepping it never touches the first session's run
    assert generated(other) == generated(first)
    click(other, "step")
    click(other, "step")
    assert generated(other) == generated(solo)
    assert room_runs.load(saved).num_rounds == 2 and room_runs.load(token(other)).num_rounds == 4
    assert not any("run" in w.value.lower() and saved in w.value for w in other.warning)


@pytest.mark.parametrize("bad", ["nope", "../../etc/passwd", "A" * 23, "<script>alert(1)</script>", None])
def test_bad_tokens_say_so_and_start_fresh(room_env, bad):
    at = page(run=new_token() if bad is None else bad)
    texts = " ".join(w.value for w in at.warning)
    assert ("malformed" in texts) if bad is not None else ("No saved run" in texts)
    assert "run" not in at.query_params  # the URL forgets it
    assert at.session_state[STATE].session is None
    click(at, "step")
    assert len(at.session_state[STATE].session.runs[0].records) == 1 and token(at) != bad  # a fresh run, its own token


def test_an_unwritable_run_directory_warns_and_the_run_goes_on(room_env, monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("SPECVIZ_RUN_DIR", str(blocker / "runs"))
    at = page()
    click(at, "step")
    assert any("cannot be saved" in w.value for w in at.warning)
    click(at, "step")
    assert len(at.session_state[STATE].session.runs[0].records) == 2 and not at.exception


def test_the_run_token_is_a_known_parameter_never_listed_nor_shared():
    from specviz.config import RunConfig
    from specviz.ui.room.share import SHARED_KEYS, link_for, parse_query

    restored = parse_query({"run": new_token(), "seed": "3"})
    assert restored.values == {"seed": 3} and restored.warnings == ()
    unknown = parse_query({"bogus": "1"})
    assert "run" not in " ".join(unknown.warnings).split("carry:")[-1] and "run" not in SHARED_KEYS
    assert "run" not in link_for(RunConfig(seed=3), "p", "default").query


def test_a_compare_session_restores_both_runs(room_runs, monkeypatch):
    from specviz.ui.room import saved_runs

    solo = page(compare="lookup")
    for _ in range(3):
        click(solo, "step")
    first = page(compare="lookup")
    click(first, "step")
    resolved = []
    resolve = saved_runs.run_models
    monkeypatch.setattr(saved_runs, "run_models", lambda config, **kw: resolved.append(config.drafter) or resolve(config, **kw))
    other = page(run=token(first), compare="lookup")
    assert resolved == ["ngram", "lookup"]  # which models each run needs: decided once per run (specviz.runs.resolve_models)
    assert len(other.session_state[STATE].session.runs) == 2
    click(other, "step")
    click(other, "step")
    got = [r.decoder.generated for r in other.session_state[STATE].session.runs]
    assert got == [r.decoder.generated for r in solo.session_state[STATE].session.runs]


@needs_redis
def test_steps_go_on_while_redis_is_away_and_the_run_is_saved_when_it_returns(redis_server, monkeypatch, tiny_dir, tmp_path):
    """Item 4 of issue 46: a participant's run lives in their replica, so Steps go on; saving says the room's store
    is unreachable and tries again on every Step; once Redis is back the next Step saves the run at its round."""
    _shared_room(monkeypatch, tiny_dir)
    monkeypatch.setenv("SPECVIZ_RUN_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("SPECVIZ_STORE", redis_server.url)
    reset_queues()
    at = page()
    click(at, "step")
    saved = token(at)
    runs = RunStore.from_env()
    assert runs.load(saved).num_rounds == 1
    redis_server.stop()  # Redis goes away mid-workshop
    click(at, "step")
    shown = " ".join(w.value for w in at.warning)  # said once, until a save works again
    assert "not saved" in shown and "the room's store" in shown and "unreachable" in shown and "tries to save it again" in shown
    click(at, "step")
    assert not at.exception and at.session_state[STATE].session.num_rounds == 3  # Steps keep working
    redis_server.start()  # back, with what it held
    assert runs.load(saved).num_rounds == 1  # nothing lost: the run as it was saved before
    click(at, "step")
    assert not at.warning and any("saved again" in t.value for t in at.toast)
    assert token(at) == saved and runs.load(saved).num_rounds == 4  # the same token, now at its latest round
    reset_queues()
