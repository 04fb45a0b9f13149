"""The protocol client (specviz/loadtest/protocol.py) against a real shared-mode server, 3 sessions: every stream after
every Step equals its solo run, a Step reruns only the fragment (no sidebar delta, a fragment run on the server's
timing log), and the server logs one timing line per rerun. No browser: it speaks Streamlit's websocket protocol."""

from __future__ import annotations

import pytest

from specviz.loadtest import harness as lp
from specviz.loadtest.protocol import FINISHED, StSession
from specviz.ui.common.timing import parse_line
from tests.browser.conftest import run_app

pytestmark = pytest.mark.smollm
STEPS, MAX_NEW = 2, 12


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    with run_app(tmp_path_factory.mktemp("protocol") / "server.log", env={"SPECVIZ_MODE": "shared"}) as server:
        yield server


def test_a_step_reruns_the_fragment_only(shared_server):
    with StSession(shared_server.url, {"drafter": "lookup", "max_new_tokens": str(MAX_NEW)}) as session:
        assert session.widget("prompt").kind == "text_area" and not session.exceptions()
        result = session.click("Step")
        assert result.status == FINISHED.FINISHED_FRAGMENT_RUN_SUCCESSFULLY
        assert result.fragment and result.paths and not result.touched_sidebar
        assert session.metric("rounds") == "1" and session.token_stream()
        assert session.widget("prompt")  # the sidebar is still there: a fragment run leaves it alone
    lines = [t for line in shared_server.log().splitlines() if (t := parse_line(line))]
    steps = [t for t in lines if t["steps"] >= 1]
    assert steps and all(t["fragment"] and t["page"] == "step-through" for t in steps), steps
    assert {"session", "script_s", "queue_wait_s", "round_s"} <= set(steps[0])


def test_three_sessions_together_equal_their_solo_runs(shared_server):
    crowd = lp.people(3)
    solo = lp.solo_runs(shared_server.url, crowd, STEPS, MAX_NEW)
    assert all(len(s.streams) == STEPS and not s.errors for s in solo), [s.errors for s in solo]
    offset = lp.log_size(shared_server.log_path)
    outcomes, wall_s = lp.together(shared_server.url, crowd, STEPS, MAX_NEW, think_s=0.5)
    assert [o.errors for o in outcomes] == [[], [], []]
    assert all(o.sidebar_reruns == 0 for o in outcomes)
    result = lp.summary(crowd, solo, outcomes, lp.timing_lines(shared_server.log_path, offset), wall_s, {"before": None, "peak": None, "after": None}, 0)
    assert result["all_equal_solo"] and result["exceptions"] == 0 and result["steps"] == 3 * STEPS
    assert result["server_step_s"]["p50"] is not None and result["queue_wait_s"]["p95"] is not None
