"""The room follows the teacher, in the app (AppTest, the tiny llama in shared mode, one run directory): the
*Present to the room* expander and its key (off, empty, wrong and rate-limited, never through the URL or session
state), following (the presenter's run at the presenter's round, read-only controls), fork from here (continues
exactly as the presenter's run), the board's point, an evicted presented run, takeover and stop."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from specviz.ui import presenting
from specviz.workshop.presentation import PresentationStore
from specviz.workshop.saved_runs import RunStore
from tests.test_app_saved_runs import generated, page, room_env, token  # noqa: F401  (room_env is a fixture)
from tests.test_app_shared import PAGES, STATE, click

KEY = "correct horse battery staple"


@pytest.fixture()
def room(room_env, monkeypatch):  # noqa: F811
    monkeypatch.setenv("SPECVIZ_PRESENTER_KEY", KEY)
    return room_env


def texts(at: AppTest) -> str:
    return " ".join(e.value for kind in (at.error, at.warning, at.info, at.success, at.caption) for e in kind)


def present(at: AppTest, key: str = KEY) -> AppTest:
    at.text_input(key="present_key").input(key)
    return click(at, "present")


def presenter(steps: int = 2) -> AppTest:
    at = page()
    if [t for t in at.toggle if t.key == "follow"]:  # someone presents already: step a run of one's own first
        at.toggle(key="follow").set_value(False).run()
    for _ in range(steps):
        click(at, "step")
    present(at)
    assert "You are presenting" in texts(at)
    return at


def shown_rounds(at: AppTest) -> int:
    session = at.session_state[presenting.VIEW_KEY][2]
    return session.num_rounds


def test_no_key_configured_says_presenting_is_off(room_env):  # noqa: F811
    at = page()
    assert "Presenting is off on this server" in texts(at)
    assert not [w for w in at.text_input if w.key == "present_key"] and not [t for t in at.toggle if t.key == "follow"]


def test_empty_wrong_and_rate_limited_keys_and_the_key_leaves_session_state(room):
    at = page()
    click(at, "step")
    click(at, "present")
    assert "Type the presenter key first" in texts(at)
    for _ in range(2):
        present(at, "guess")
        assert "not the presenter key" in texts(at)
    present(at, "guess")
    assert "wait 5 s" in texts(at)
    present(at, KEY)  # locked: even the right key waits
    assert "Too many wrong keys" in texts(at) and PresentationStore(room).read() is None
    assert at.session_state["present_key"] == ""  # the key is never kept


def test_a_key_in_the_url_or_session_state_does_not_present(room):
    at = AppTest.from_file(str(PAGES / "step_through.py"), default_timeout=120)
    at.query_params["present_key"] = KEY
    at.query_params["present"] = "true"
    at.session_state[presenting.PRESENTING_KEY] = "A" * 22
    at.run()
    assert "present_key" in texts(at) and "not a setting of this page" in texts(at)
    click(at, "step")
    assert PresentationStore(room).read() is None and at.session_state["present_key"] == ""
    assert KEY not in " ".join(str(v) for v in at.query_params.values())


def test_followers_see_the_presenters_round_read_only_and_fork_exactly(room):
    solo = page()
    for _ in range(4):
        click(solo, "step")
    teacher = presenter(steps=2)
    follower = page()
    assert follower.toggle(key="follow").value and shown_rounds(follower) == 2
    assert follower.button(key="step").disabled and "Following the presenter" in texts(follower)
    assert follower.session_state[STATE].session is None  # following takes no model time and starts no run of its own
    click(teacher, "step")
    follower.run()
    assert shown_rounds(follower) == 3
    click(follower, "fork")
    own = follower.session_state[STATE].session
    assert own is not None and own.num_rounds == 3 and token(follower) != token(teacher)
    assert not follower.toggle(key="follow").value and follower.session_state["temperature"] == 1.0
    click(follower, "step")
    assert generated(follower) == generated(solo)  # the fork continues as the presenter's run would
    board = PresentationStore(room).points(PresentationStore(room).read().id)
    assert len(board) == 1 and board[0].rounds == 4 and board[0].drafter == "ngram"
    assert RunStore(room).load(token(teacher)).num_rounds == 3  # the presenter's run is untouched
    teacher.run()
    assert "The room board" in [s.value for s in teacher.subheader]


def test_an_evicted_presented_run_says_so_and_the_follower_keeps_their_own(room):
    mine = page()
    click(mine, "step")
    own = generated(mine)
    teacher = presenter(steps=1)
    (room / f"{token(teacher)}.json").unlink()
    mine.run()
    assert "cannot be shown" in texts(mine)
    assert generated(mine) == own and not mine.button(key="step").disabled


def test_takeover_and_stop(room):
    first = presenter(steps=1)
    follower = page()
    assert shown_rounds(follower) == 1
    second = presenter(steps=2)
    first.run()
    assert "took over" in texts(first)
    follower.run()
    assert shown_rounds(follower) == 2
    click(second, "stop_present")
    assert PresentationStore(room).read() is None
    follower.run()
    assert "The presenter stopped presenting" in texts(follower)
    assert not [t for t in follower.toggle if t.key == "follow"]
