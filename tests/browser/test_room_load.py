"""The room under load (scripts/room_load_test.py): `python -m specviz room --replicas 2` (real HAProxy, real
replicas, a tiny local model), 4 protocol sessions spread over both replicas, one replica SIGKILLed after Step 2 of
3: its sessions reconnect through the balancer with their `?run=` URL, get their run back at round 2, and every
session's stream after every Step equals its solo run. No browser: the protocol client speaks Streamlit's websocket."""

from __future__ import annotations

import os

import pytest

from specviz.loadtest import room_load as rlt
from specviz.loadtest.room import room

HAPROXY = next((p for p in ("/usr/sbin/haproxy", "/usr/bin/haproxy") if os.path.exists(p)), None)


@pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (scripts/test.sh installs it: apt-get install haproxy)")
def test_killing_a_replica_loses_no_run(tiny_dir):
    args = rlt.parse_args(["--replicas", "2", "--sessions", "4", "--steps", "3", "--kill-one-at", "2", "--think-s", "0.3", "--max-new-tokens", "12", "--settle-s", "0"])
    result = rlt.run(args, env={"SPECVIZ_TARGETS": str(tiny_dir["llama"])})
    assert result["killed"] == "r1" and set(result["split"]) == {"r1", "r2"}, result  # both replicas served someone
    assert result["reconnects"] == result["split"]["r1"], result  # every session of r1, and only those, reconnected
    assert result["lost_runs"] == 0 and result["unequal_streams"] == 0 and result["all_equal_solo"], result
    assert result["exceptions"] == 0 and result["steps"] == 4 * 3, result
    assert all(r["steps"] > 0 and r["server_step_s"]["p95"] is not None for r in result["per_replica"].values()), result


@pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (scripts/test.sh installs it: apt-get install haproxy)")
def test_forks_of_the_presentation_continue_as_the_solo_run(tiny_dir):
    """`--presenter --fork` in small: 2 replicas, 2 participants who follow, fork at round 2 and Step 3 times each."""
    from specviz.loadtest.forks import run_forks

    args = rlt.parse_args(["--presenter", "--fork", "--replicas", "2", "--sessions", "2", "--steps", "3", "--think-s", "0.3", "--max-new-tokens", "16", "--settle-s", "0"])
    result = run_forks(args, room, env={"SPECVIZ_TARGETS": str(tiny_dir["llama"])})
    assert result["forked_at"] == 2 and result["unequal_streams"] == 0 and result["all_equal_solo"], result
    assert result["exceptions"] == 0 and result["server_step_s"]["steps"] == 2 * 3 and result["ok"], result
    assert set(result["split"]) == {"r1", "r2"}, result  # both replicas served a fork


@pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (scripts/test.sh installs it: apt-get install haproxy)")
def test_followers_are_redrawn_from_the_server_and_one_who_stops_following_is_left_alone(tiny_dir, tmp_path):
    """A real room, the protocol client: after the presenter's Step each follower receives a run it never asked for
    (its stage fragment, pushed by the replica's watcher: the client sends no timer ticks) showing the new round.
    A follower who turned *Follow the presenter* off gets no such run and keeps their own run."""
    from specviz.loadtest.presenter import PRESENTER, shown_round
    from specviz.loadtest.protocol import StSession
    from specviz.workshop.presenter_key import generate_key

    key = generate_key()
    env = {"SPECVIZ_TARGETS": str(tiny_dir["llama"]), "SPECVIZ_PRESENTER_KEY": key}
    with room(2, tmp_path, env) as handle:
        teacher = StSession(handle.url, PRESENTER.query(24))
        teacher.open()
        teacher.click("step")
        teacher.set_widget("present_key", key)
        teacher.click("present")
        followers = [StSession(handle.url) for _ in range(3)]
        for f in followers:
            f.open()
            assert shown_round(f) == 1, f.alerts()
        leaver = followers[-1]
        leaver.set_widget("follow", False)
        assert shown_round(leaver) is None
        teacher.click("step")
        for f in followers[:-1]:
            pushed = f.wait_for_run(timeout_s=30)
            while pushed is not None and shown_round(f) != 2:
                pushed = f.wait_for_run(timeout_s=30)
            assert pushed is not None and pushed.fragment and shown_round(f) == 2, f.alerts()
        assert leaver.wait_for_run(timeout_s=3) is None
        leaver.rerun()  # its own next run (as a click would make it) still shows its own run, not the presenter's
        assert shown_round(leaver) is None
        for s in [teacher, *followers]:
            s.close()
