"""The room load test's report, on made-up timing lines: the overall Step percentiles pool every replica's Steps
(issue 24: the overall p95 equalled one replica's), and the presenter mode's figures come from the right sessions."""

from __future__ import annotations

from specviz.loadtest.presenter import Follower, presenter_summary
from specviz.loadtest.room_load import pooled_steps


def line(session: str, script_s: float, steps: int = 1, round_s: float = 0.0) -> dict:
    return {"session": session, "page": "step-through", "fragment": True, "script_s": script_s, "queue_wait_s": 0.0, "round_s": round_s, "steps": steps}


def test_the_overall_step_percentiles_pool_every_replica():
    by_replica = {"r1": [line("a", 0.1)] * 19 + [line("a", 1.7)], "r2": [line("b", 2.07)] * 20 + [line("b", 9.0, steps=0)]}
    pooled = pooled_steps(by_replica)
    assert pooled["steps"] == 40  # every replica's Steps; the rerun without a round is not a Step
    assert pooled["p95"] == 2.07 and pooled["worst_replica_p95"] == 2.07


def test_the_presenter_report_reads_latency_model_time_and_memory():
    a, b = Follower(0, "r1", "aaaaaaaa", {2: 10.4, 3: 20.9}), Follower(1, "r2", "bbbbbbbb", {2: 10.6})
    lines = [line("tttttttt", 0.3), line("tttttttt", 0.2), line("aaaaaaaa", 0.05, steps=0), line("bbbbbbbb", 0.04, steps=0)]
    result = presenter_summary([a, b], {2: 10.0, 3: 20.0}, lines, "tttttttt-full-id", {"before": 100.0, "with_followers": 150.0, "after": 105.0}, 0)
    assert result["follower_redraw_s"]["n"] == 3 and result["follower_redraw_s"]["missed"] == 1
    assert result["presenter_server_step_s"]["p95"] == 0.3 and result["followers_round_s"] == 0.0
    assert result["split"] == {"r1": 1, "r2": 1} and not result["ok"]  # a missed round fails it
    b.seen[3] = 21.0
    assert presenter_summary([a, b], {2: 10.0, 3: 20.0}, lines, "tttttttt", {"before": 100.0, "with_followers": 150.0, "after": 105.0}, 0)["ok"]
    finished = presenter_summary([a, b], {2: 10.0, 3: 20.0, 4: 30.0}, lines, "tttttttt", {"before": 100.0, "with_followers": 150.0, "after": 105.0}, 0)
    assert finished["ok"] and finished["presenter_rounds"] == 2  # a Step after the run ended makes no round to miss
    model_time = lines + [line("aaaaaaaa", 0.2, steps=1, round_s=0.1)]
    assert not presenter_summary([a, b], {2: 10.0, 3: 20.0}, model_time, "tttttttt", {"before": 100.0, "with_followers": 150.0, "after": 105.0}, 0)["ok"]


def test_the_fork_report_checks_each_fork_against_the_solo_run_from_the_same_round():
    from specviz.loadtest.forks import Fork, fork_summary
    from specviz.loadtest.harness import Outcome, people

    solo = Outcome(people(1)[0], streams=[["a"], ["a", "b"], ["a", "b", "c"], ["a", "b", "c", "d"]])
    good = Fork(0, "r1", 2, "2", [["a", "b", "c"], ["a", "b", "c", "d"]], 0.4)
    other = Fork(1, "r2", 2, "2", [["a", "b", "c"], ["a", "b", "c", "d"]], 0.6)
    by_replica = {"r1": [line("f1", 0.5), line("f1", 0.2, steps=0)], "r2": [line("f2", 3.5)]}
    result = fork_summary(solo, 2, [good, other], by_replica, 0, {"before": None, "after": None})
    assert result["ok"] and result["unequal_streams"] == 0 and result["forked_at"] == 2
    assert result["split"] == {"r1": 1, "r2": 1} and result["server_step_s"]["steps"] == 2 and result["server_step_s"]["p95"] == 3.5
    assert result["per_replica"]["r1"]["p95"] == 0.5  # each replica's own figure next to the pool
    bad = Fork(1, "r2", 2, "2", [["a", "b", "x"], ["a", "b", "x", "d"]], 0.6)  # the known-bad control: a stream that drifted
    assert not fork_summary(solo, 2, [good, bad], by_replica, 0, {})["ok"]
    late = Fork(1, "r2", 3, "3", [["a", "b", "c", "d"]], 0.6)  # forked a round late: the right stream, the wrong round
    assert not fork_summary(solo, 2, [good, late], by_replica, 0, {})["ok"]
    assert not fork_summary(solo, 2, [good, other], by_replica, 1, {})["ok"]  # a replica's traceback fails it
    empty = Outcome(people(1)[0], streams=[[], [], [], []])
    blank = [Fork(0, "r1", 2, "2", [[], []], 0.4)]
    assert not fork_summary(empty, 2, blank, by_replica, 0, {})["ok"]  # no tokens drawn is not "equal"
