"""What one session may write to the run directory, in the app (AppTest, the tiny llama in shared mode): a session
alternating ?run=A / ?run=B forks each token once, a session over its quota replaces its own oldest run and never
another's, a Step of a finished run writes nothing and adds no board point, a fork's board points are one per round
it ran, a restore that failed for a passing reason keeps its token with Try again while a token that can never work
is dropped and named, adaptive k stays within the owner's cap (restored runs too), and a full disk says so plainly
wherever the app writes (issue 32, item 6)."""

from __future__ import annotations

import errno

import pytest

from specviz.ui.common.keys import PRESENTING_KEY
from specviz.ui.room import fork
from specviz.ui.room import saved_runs as page_runs
from specviz.workshop.presentation import PresentationStore
from specviz.workshop.saved_runs import RunStore, new_token
from tests.store_helpers import backdate, stems
from tests.test_app_present import KEY, present, presenter, texts
from tests.test_app_saved_runs import generated, page, room_env, room_runs, token  # noqa: F401  (room_env, room_runs: fixtures)
from tests.test_app_shared import STATE, click

NO_SPACE = OSError(errno.ENOSPC, "No space left on device", "/srv/secret/specviz-runs/x.json")


@pytest.fixture()
def room(room_env, monkeypatch):  # noqa: F811
    monkeypatch.setenv("SPECVIZ_PRESENTER_KEY", KEY)
    return room_env


def stepped(steps: int = 1, **extra):
    at = page(**extra)
    for _ in range(steps):
        click(at, "step")
    return at


def test_alternating_two_tokens_forks_each_once(room_runs):  # noqa: F811
    a, b = token(stepped()), token(stepped())
    attacker = page()
    for _ in range(6):
        for source in (a, b):
            attacker.query_params["run"] = source
            attacker.run()
            assert not attacker.exception and "Restored this run" in texts(attacker)
    assert len(stems(room_runs.store)) == 4  # A, B and one fork of each: not one file per rerun
    forks = attacker.session_state[page_runs.FORKS_KEY]
    assert set(forks) == {a, b} and token(attacker) == forks[b]
    click(attacker, "step")  # the fork it holds goes on as its own run
    assert room_runs.load(forks[b]).num_rounds == 2 and room_runs.load(b).num_rounds == 1


def test_a_session_over_its_quota_replaces_its_own_oldest_run(room_runs, monkeypatch):  # noqa: F811
    monkeypatch.setenv("SPECVIZ_MAX_SAVED_RUNS", "2")
    other = token(stepped())
    at = page()
    mine = []
    for _ in range(4):
        click(at, "step")
        mine.append(token(at))
        click(at, "reset")
    assert len(set(mine)) == 4
    assert stems(room_runs.store) == {other, *mine[-2:]}  # its two newest; the other session's run untouched
    assert at.session_state[page_runs.OWN_KEY] == mine[-2:]


def test_a_step_of_a_finished_run_writes_nothing(room_runs, monkeypatch):  # noqa: F811
    """Counted at RunStore.save, not by the file's mtime: the session sweeper touches a live session's run every few
    seconds (hold_live_runs), which moves the mtime without writing it."""
    at = page(max_new_tokens=6)
    click(at, "run_all")
    assert at.session_state[STATE].session.done
    name = f"{token(at)}.json"
    before = room_runs.store.get(name, 10**7)
    saves, save = [], RunStore.save

    def counted(self, token, run):  # the real save, counted
        saves.append(token)
        save(self, token, run)

    monkeypatch.setattr(RunStore, "save", counted)
    for _ in range(3):
        click(at, "step")
    assert saves == []
    assert room_runs.store.get(name, 10**7) == before


def test_a_forks_board_gets_one_point_per_round_it_ran(room):
    teacher = presenter(steps=1)
    follower = page(max_new_tokens=6)
    click(follower, "fork")
    click(follower, "run_all")
    assert follower.session_state[STATE].session.done
    board = room / PresentationStore.board_name(PresentationStore(room).read().id)
    lines = board.read_bytes().count(b"\n")
    rounds = follower.session_state[STATE].session.num_rounds - 1  # the rounds the fork ran itself
    assert lines == rounds
    for _ in range(5):
        click(follower, "step")  # finished: no round, no point
    assert board.read_bytes().count(b"\n") == lines
    fork_id = follower.session_state[fork.FORK_KEY]["fork"]
    follower.toggle(key="follow").set_value(True).run()
    click(follower, "fork")  # forking again: the same anonymous id, so the board shows this participant once
    click(follower, "step")
    assert follower.session_state[fork.FORK_KEY]["fork"] == fork_id
    assert len(PresentationStore(room).points(PresentationStore(room).read().id)) == 1
    assert teacher.session_state[PRESENTING_KEY] is not None


def test_a_transient_restore_failure_keeps_the_token_and_offers_try_again(room_runs, monkeypatch):  # noqa: F811
    saved = token(stepped(2))
    real = page_runs.rebuild_session

    def timed_out(run):
        raise ValueError("Waited 120 s for the model (1 ahead) without a turn.")

    monkeypatch.setattr(page_runs, "rebuild_session", timed_out)
    at = page(run=saved)
    shown = " ".join(w.value for w in at.warning)
    assert "Waited 120 s" in shown and saved in shown and "Try again" in shown
    assert token(at) == saved and at.session_state[STATE].session is None  # the URL keeps it
    at.run()
    assert token(at) == saved and [b for b in at.button if b.key == "restore_retry"]  # still offered
    monkeypatch.setattr(page_runs, "rebuild_session", real)
    click(at, "restore_retry")
    assert "Restored this run at round 2" in texts(at) and at.session_state[STATE].session.num_rounds == 2
    assert token(at) != saved  # restored as its own fork, as always


def test_a_token_that_can_never_work_is_dropped_and_named(room_runs):  # noqa: F811
    unknown = new_token()
    at = page(run=unknown)
    shown = " ".join(w.value for w in at.warning)
    assert "No saved run" in shown and unknown in shown and "run" not in at.query_params
    hostile = "x" * 5000
    at = page(run=hostile)
    shown = " ".join(w.value for w in at.warning)
    assert "malformed" in shown and "x" * 39 + "…" in shown and "x" * 41 not in shown


def test_adaptive_k_stays_within_the_owners_cap_and_a_restored_run_keeps_it(room_env, monkeypatch):  # noqa: F811
    monkeypatch.setenv("SPECVIZ_MAX_DRAFT_TOKENS", "2")
    settings = dict(adaptive_k=True, num_draft_tokens=2, ngram_threshold=0.0, temperature=0.0, max_new_tokens=48)
    at = page(**settings)
    for _ in range(6):
        click(at, "step")
    other = page(run=token(at), **settings)  # restored on another session (a reload, another replica)
    for session in (at, other):
        click(session, "run_all")
        records = session.session_state[STATE].session.runs[0].records
        assert records and all(r.num_draft_tokens <= 2 and len(r.emitted) <= 3 for r in records), [r.num_draft_tokens for r in records]
    assert other.session_state[STATE].session.config.max_draft_tokens == 2


def test_a_full_disk_says_so_without_a_path_and_the_run_goes_on(room_env, monkeypatch):  # noqa: F811
    def full(self, token, run):
        raise NO_SPACE

    monkeypatch.setattr(RunStore, "save", full)
    at = stepped()
    shown = " ".join(w.value for w in at.warning)
    assert "disk is full" in shown and "/srv/secret" not in shown
    click(at, "step")
    assert at.session_state[STATE].session.num_rounds == 2


def test_a_full_disk_when_presenting_or_adding_a_board_point_says_so(room, monkeypatch):
    at = stepped()

    def full(*args, **kwargs):
        raise NO_SPACE

    monkeypatch.setattr(PresentationStore, "_write", full)
    present(at)
    assert "could not be started" in texts(at) and "disk is full" in texts(at) and "/srv/secret" not in texts(at)
    monkeypatch.undo()
    monkeypatch.setenv("SPECVIZ_PRESENTER_KEY", KEY)
    presenter(steps=1)
    follower = page()
    click(follower, "fork")
    monkeypatch.setattr(PresentationStore, "add_point", full)
    click(follower, "step")
    assert "board did not get this round" in texts(follower) and "disk is full" in texts(follower)
    assert follower.session_state[fork.FORK_KEY] is not None  # the presentation is still live: later points go on


def test_the_sweeper_keeps_the_runs_of_live_sessions_fresh(room_runs, monkeypatch):  # noqa: F811
    """Each replica's session sweeper touches the runs its live sessions hold (specviz.ui.common.sessions.hold_live_runs), so
    no replica's eviction takes them; a freed session (no run) and other pages hold nothing."""
    import time
    from types import SimpleNamespace

    from specviz.ui.common.sessions import hold_live_runs, live_run_tokens
    from specviz.ui.step_through.session import PageState
    from specviz.workshop.saved_runs import LIVE_WINDOW_S
    from specviz.workshop.sessions import SessionRegistry

    held, idle = token(stepped()), token(stepped())
    for t in (held, idle):
        backdate(room_runs.store, f"{t}.json", 10 * LIVE_WINDOW_S)
    registry = SessionRegistry()
    registry.touch("a", {STATE: PageState(session=SimpleNamespace(run_token=held))})
    registry.touch("b", {STATE: PageState()})  # freed
    registry.touch("c", {"something else": 1})  # another page
    assert live_run_tokens(registry.states()) == [held]
    assert hold_live_runs(registry.states()) == 1
    assert time.time() - room_runs.store.stat(f"{held}.json").mtime < LIVE_WINDOW_S
    assert time.time() - room_runs.store.stat(f"{idle}.json").mtime > LIVE_WINDOW_S
