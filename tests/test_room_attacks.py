"""The room attacks' report (scripts/room_attacks.py) on made-up samples and outcomes, no server: which Steps and
readings fall in an attack's window, each goal of issue 32 caught (and a run that meets them passes), the key replies
classified by outcome, the table's cells, the exit code; issue 42's attacks (items 5-8) each judged on a good and a
bad outcome, and the help that says how to run them all for docs/workshop-safety.md's table. The last test runs
those attacks, tiny (--quick), against a real room of one replica and a real `specviz serve` (a few minutes here;
skipped without haproxy): each ran and did what it is for; their timings are not judged on a test machine."""

from __future__ import annotations

import json

import pytest

from specviz.loadtest.attacks.catalogue import ATTACKS, BY_NAME, KV_HOG_BUDGET, groups, parse_attacks
from specviz.loadtest.attacks.goals import (
    SERVE_DEADLINE_S,
    Goals,
    ProcSample,
    StepSample,
    classify_key_reply,
    resource_stats,
    shows_internals,
    verdict,
    victim_stats,
)
from specviz.loadtest.attacks.harness import Config
from specviz.loadtest.attacks.run import config_from, exit_code, main, parse_args
from specviz.loadtest.attacks.table import build_row, describe, markdown_table
from tests.test_room_supervisor import needs_haproxy

GOALS = Goals(rss_budget_mb=2000.0, thread_slack=2, max_guesses_per_min=10.0)


def steps(*pairs) -> list[StepSample]:
    """(t, seconds[, ok]) -> StepSamples."""
    return [StepSample(p[0], p[1], p[2] if len(p) > 2 else True, None if (len(p) < 3 or p[2]) else "rounds 3 -> 3: Waited 120 s") for p in pairs]


def procs(replica: str, *rows) -> list[ProcSample]:
    """(t, pid, rss, threads) -> ProcSamples of one replica."""
    return [ProcSample(t, replica, pid, rss, threads) for t, pid, rss, threads in rows]


def test_the_victim_counts_the_steps_clicked_inside_the_window():
    samples = steps((5.0, 9.0), (10.0, 0.5), (11.0, 0.7), (12.0, 105.0, False), (130.0, 0.6), (200.0, 50.0))
    v = victim_stats(samples, 10.0, 130.0)
    assert v["steps"] == 4 and v["failures"] == 1 and v["max"] == 105.0  # the Steps at 5 and 200 are another attack's
    assert v["p50"] == 0.7 and v["p95"] == 105.0 and v["errors"] == ["rounds 3 -> 3: Waited 120 s"]
    assert victim_stats(samples, 300.0, 400.0) == {"steps": 0, "p50": None, "p95": None, "max": None, "failures": 0, "errors": []}


def test_resources_read_before_peak_after_and_a_restarted_replica():
    samples = procs("r1", (0.0, 11, 1100.0, 14), (9.5, 11, 1110.0, 14), (11.0, 11, 4900.0, 15), (20.0, 11, 3000.0, 22), (31.0, 11, 9000.0, 30))
    samples += procs("r2", (9.0, 21, 1000.0, 12), (15.0, 22, 600.0, 12), (29.0, 22, 700.0, 12))
    r = resource_stats(samples, 10.0, 30.0)
    assert r["r1"] == {"rss_before_mb": 1110.0, "rss_peak_mb": 4900.0, "rss_after_mb": 3000.0, "threads_before": 14, "threads_after": 22, "pids": [11], "restarted": False}
    assert r["r2"]["restarted"] and r["r2"]["pids"] == [21, 22] and r["r2"]["rss_peak_mb"] == 1000.0
    late = resource_stats(procs("r3", (12.0, 31, 500.0, 5)), 10.0, 30.0)
    assert late["r3"]["rss_before_mb"] == 500.0  # no reading before the window: the first one inside it


def row(victim=None, replicas=None, followers=None, outcome=None, name="clear-cache") -> dict:
    return build_row(BY_NAME[name], outcome or {}, victim, replicas or {}, followers, GOALS)


GOOD_VICTIM = {"steps": 30, "p50": 0.9, "p95": 1.4, "max": 2.0, "failures": 0, "errors": []}
GOOD_REPLICAS = {"r1": {"rss_before_mb": 1100.0, "rss_peak_mb": 1300.0, "rss_after_mb": 1150.0, "threads_before": 14, "threads_after": 15, "pids": [1], "restarted": False}}
GOOD_FOLLOWERS = {"n": 12, "p50": 0.3, "p95": 0.6, "missed": 0}


def test_a_row_that_meets_every_goal_says_so_and_each_goal_is_caught():
    good = row(GOOD_VICTIM, GOOD_REPLICAS, GOOD_FOLLOWERS, {"clears": 20, "model_loads": 0, "pushes_per_step_before": 1.0, "pushes_per_step_after": 1.0})
    assert good["missed"] == [] and exit_code([good]) == 0
    bad = {
        "victim p95": row({**GOOD_VICTIM, "p95": 105.0}, GOOD_REPLICAS),
        "failed": row({**GOOD_VICTIM, "failures": 2}, GOOD_REPLICAS),
        "no Step": row({**GOOD_VICTIM, "steps": 0, "p95": None}, GOOD_REPLICAS),
        "RSS": row(GOOD_VICTIM, {"r1": {**GOOD_REPLICAS["r1"], "rss_peak_mb": 5000.0}}),
        "threads": row(GOOD_VICTIM, {"r1": {**GOOD_REPLICAS["r1"], "threads_after": 22}}),
        "started again": row(GOOD_VICTIM, {"r1": {**GOOD_REPLICAS["r1"], "pids": [1, 2], "restarted": True}}),
        "redraw p95": row(GOOD_VICTIM, GOOD_REPLICAS, {**GOOD_FOLLOWERS, "p95": 2.4}),
        "missed 3": row(GOOD_VICTIM, GOOD_REPLICAS, {**GOOD_FOLLOWERS, "missed": 3}),
        "model loads": row(GOOD_VICTIM, GOOD_REPLICAS, outcome={"clears": 20, "model_loads": 20}),
        "pushes per presenter Step": row(GOOD_VICTIM, GOOD_REPLICAS, outcome={"pushes_per_step_before": 1.0, "pushes_per_step_after": 9.0}),
        "back-off": row(GOOD_VICTIM, GOOD_REPLICAS, outcome={"backoff_after_clears": "checked"}),
        "did not run": row(GOOD_VICTIM, GOOD_REPLICAS, outcome={"error": "RuntimeError: boom"}),
    }
    for what, r in bad.items():
        assert len(r["missed"]) == 1 and what in r["missed"][0], (what, r["missed"])
        assert exit_code([good, r]) == 1
    assert row(None, GOOD_REPLICAS)["missed"] == []  # no victim in this room (the owner probe): nothing to judge
    assert verdict(bad["RSS"], Goals(rss_budget_mb=0.0)) == []  # no budget given: RSS not judged


@pytest.mark.parametrize(
    ("name", "outcome", "missed"),
    [
        ("key-guess", {"by_threads": {1: {"checked_per_min": 706.0, "limited": 0, "errors": 0, "sessions": 1}, 4: {"checked_per_min": 2280.0, "limited": 0, "errors": 0, "sessions": 4}}}, 2),
        ("key-guess", {"by_threads": {1: {"checked_per_min": 3.0, "limited": 400, "errors": 0, "sessions": 90}, 4: {"checked_per_min": 6.0, "limited": 900, "errors": 0, "sessions": 300}}}, 0),
        ("key-guess", {"by_threads": {1: {"checked_per_min": 3.0, "limited": 1, "errors": 0, "sessions": 1, "presenting": 1}}}, 1),
        ("key-guess", {"by_threads": {}, "teacher_presented": False, "lockers_checked": 10, "lockers_limited": 0}, 1),  # issue 42, item 4
        ("key-guess", {"by_threads": {}, "teacher_presented": True, "lockers_checked": 11, "lockers_limited": 0}, 0),
        ("owner", {"setups": [{"setup": "a", "participant": True, "owner_widgets": ["trust_remote_code"]}, {"setup": "owner", "participant": False, "owner_widgets": ["trust_remote_code"]}]}, 1),
        ("owner", {"setups": [{"setup": "a", "participant": True, "owner_widgets": []}, {"setup": "owner", "participant": False, "owner_widgets": ["trust_remote_code"]}]}, 0),
        ("run-flood", {"victim_run_kept": False, "presented_run_kept": False, "board_bytes_added": 3520}, 3),
        ("run-flood", {"victim_run_kept": True, "presented_run_kept": True, "board_bytes_added": 0}, 0),
        ("presenter-reload", {"stop_button_after_reload": False, "reclaimed": True, "stopped": True, "board_kept": False, "round_kept": True}, 1),
        ("presenter-reload", {"stop_button_after_reload": False, "reclaimed": False, "stopped": False}, 1),
        ("presenter-reload", {"stop_button_after_reload": True, "stopped": True}, 0),
        ("adaptive-k", {"cap": 2, "k_per_round": [2, 2, 4, 6, 5, 5, 5, 7, 9, 11], "tokens_per_round": [3, 3, 5, 7, 10]}, 2),
        ("adaptive-k", {"cap": 2, "k_per_round": [2, 2, 2, 1, 2], "tokens_per_round": [3, 3, 1, 2, 3]}, 0),
        ("malformed", {"cases": [{"exceptions": 1, "internals": True, "recovered": False}, {"exceptions": 0, "internals": False, "recovered": True}]}, 2),
        ("malformed", {"cases": [{"exceptions": 0, "internals": False, "recovered": True}]}, 0),
        ("memory", {"eleventh": {"ran": False, "message": "Over this server's memory budget", "exceptions": []}}, 0),
        ("memory", {"eleventh": {"ran": False, "message": None, "exceptions": ["torch.OutOfMemoryError: ..."]}}, 1),
        ("backmsgs", {"one_name_answered": True, "two_names_answered": True, "frame_names": 1_000_000, "frame_answered": True, "health_s": 13.7}, 3),
        ("backmsgs", {"one_name_answered": True, "two_names_answered": False, "frame_names": 1_000_000, "frame_answered": False, "health_s": 0.01, "closed": "1009"}, 0),
        ("uploads", {"upload_mb": 10, "made_up": {204: 20}, "minted": {204: 20}, "over_largest": 413, "over_race_cap": -1}, 3),
        ("uploads", {"upload_mb": 10, "made_up": {403: 20}, "minted": {204: 3, 413: 17}, "over_largest": 413, "over_race_cap": 413}, 0),
        # issue 42, items 5-8
        ("kv-hog", {"budget": 2600, "hog_sessions": 8, "hog_refused": None, "newcomer": {"ran": False, "message": "This server's memory for runs is full"},
                    "extra": {"ran": True}, "hogs_stepped_again": 8, "exceptions": 1}, 4),
        ("kv-hog", {"budget": 2600, "hog_sessions": 3, "hog_refused": "This server's memory for runs is full, and your address already holds",
                    "newcomer": {"ran": True, "message": None}, "extra": {"ran": False, "message": "... more than its fair share ..."}, "hogs_stepped_again": 3, "exceptions": 0}, 0),
        ("race", {"races": 0, "new_tokens": 256, "race_s": [], "said": ["This server's memory for runs is full"], "exceptions": 1}, 2),
        ("race", {"races": 3, "new_tokens": 256, "race_s": [14.2, 13.9, 15.0], "said": [], "exceptions": 0}, 0),
        ("serve", {"no_key": 200, "wrong_key": 401, "huge_body": 500, "form_post": 200, "huge_integer": 500, "health_s": 9.0, "hold_s": 40.0, "slow_conns": 48,
                   "slow_held": 48, "stalled_reader": "still open", "victim": {"requests": 30, "p95": 8.0, "failures": 2, "errors": ["503"]}, "rss_peak_mb": 9000.0}, 10),
        ("serve", {"no_key": 401, "wrong_key": 401, "huge_body": 413, "form_post": 415, "huge_integer": 400, "health_s": 0.01, "hold_s": 40.0, "slow_conns": 48,
                   "slow_held": 0, "slow_closed": 48, "stalled_reader": "dropped by the server", "victim": {"requests": 40, "p95": 0.4, "failures": 0}, "rss_peak_mb": 700.0}, 0),
        ("serve", {"no_key": 401, "hold_s": 3.0, "slow_held": 4, "stalled_reader": "still open", "victim": {"requests": 3, "p95": 0.4, "failures": 0}}, 0),  # --quick: held under the deadlines
        ("conn-flood", {"limit": 200, "connections": 210, "answered": 210, "refused": 0}, 1),
        ("conn-flood", {"limit": 200, "connections": 210, "answered": 200, "refused": 10}, 0),
        ("guesses", {"clicks": 200, "seconds": 40.0, "exceptions": 0, "lines": 200, "bytes": 9200, "voters": 1, "new_exercise_own_file": False}, 2),
        ("guesses", {"clicks": 200, "seconds": 40.0, "exceptions": 0, "lines": 1, "bytes": 46, "voters": 1, "new_exercise_own_file": True}, 0),
    ],
)
def test_each_attack_judges_its_own_outcome_and_describes_it(name, outcome, missed):
    r = build_row(BY_NAME[name], outcome, GOOD_VICTIM, GOOD_REPLICAS, None, GOALS)
    assert len(r["missed"]) == missed, r["missed"]
    assert r["what"] and not r["what"].startswith("the attack did not run")


def test_every_attack_describes_a_partial_or_failed_outcome_without_raising():
    for attack in ATTACKS:
        assert describe(attack.name, {})  # missing fields read as "?"
        assert describe(attack.name, {"error": "TimeoutError: x"}).startswith("the attack did not run")


def test_key_replies_are_classified_by_outcome_not_by_one_exact_sentence():
    assert classify_key_reply(["That is not the presenter key."]) == "checked"
    assert classify_key_reply(["That is not the presenter key. Too many wrong keys: wait 5 s before trying again."]) == "checked"  # compared, then locked
    assert classify_key_reply(["Too many wrong keys: wait 35 s before trying again."]) == "limited"
    assert classify_key_reply(["Too many wrong keys from your address in this room; try again in 4 minutes."]) == "limited"
    assert classify_key_reply(["You are presenting this run: the room follows each Step."]) == "presenting"
    assert classify_key_reply(["Press Step to run the first round."]) == "other"


def test_server_internals_are_recognised_in_what_a_page_drew():
    assert shows_internals(['File "/work/main/specviz/ui/common/widgets.py", line 40, in peek'])
    assert shows_internals(["IndexError: index 99 is out of bounds (/usr/lib/python3/site-packages/pandas/core/indexing.py)"])
    assert not shows_internals(["The toy table has a value it cannot use; it was reset to its default."])


def test_the_table_has_one_row_per_attack_under_the_conditions_line():
    rows = [row(GOOD_VICTIM, GOOD_REPLICAS, GOOD_FOLLOWERS, {"clears": 20, "model_loads": 8}), row(None, {}, None, {"setups": []}, name="owner")]
    machine = {"cpu": "AMD EPYC", "cores": 2, "date": "2026-12-02", "load_before": 0.4, "load_after": 2.9, "replicas": 2, "rss_budget_mb": 2000.0, "owner_env": "SPECVIZ_MAX_PROMPT_TOKENS=1024"}
    text = markdown_table(rows, machine)
    lines = text.splitlines()
    assert "AMD EPYC" in lines[0] and "0.4 → 2.9" in lines[0] and "SPECVIZ_MAX_PROMPT_TOKENS=1024" in lines[0]
    assert lines[2].startswith("| attack |") and len(lines) == 4 + len(rows)
    assert "| 2 clear-cache |" in lines[4] and "0.9 / 1.4 / 2.0 s (0 failed)" in lines[4] and "r1 1,100 → 1,300" in lines[4] and "misses: 8 model loads" in lines[4]
    assert "| 5 owner |" in lines[5] and "| n/a |" in lines[5] and "meets the goals" in lines[5]
    assert all(line.count(" | ") == 6 for line in lines[4:])  # no cell breaks the table (a '|' in a message is escaped)


def test_issue_42s_attacks_are_in_the_script_with_their_items_and_rooms():
    numbers = {a.name: a.number for a in ATTACKS}
    assert {numbers[n] for n in ("backmsgs", "uploads", "kv-hog", "race", "serve", "conn-flood", "guesses")} == {"42.1", "42.2", "42.5", "42.6", "42.7", "42.8"}
    rooms = groups(parse_attacks("kv-hog,race,serve,conn-flood,guesses"))
    assert [[a.name for a in members] for _, _, members in rooms][0] == ["race", "serve", "conn-flood", "guesses"]  # the plain room
    assert rooms[1][0] == (("SPECVIZ_MAX_KV_TOKENS", KV_HOG_BUDGET),) and rooms[1][1] == 1  # the hog's budget: a room of its own
    assert not BY_NAME["serve"].victim  # the service has a victim of its own
    text = markdown_table([build_row(BY_NAME[n], {}, None, {}, None, GOALS) for n in ("kv-hog", "race", "serve", "conn-flood", "guesses")], {})
    assert all(f"| {n} " in text for n in ("42.5 kv-hog", "42.6 race", "42.7 serve", "42.8 conn-flood", "42.8 guesses"))
    args = parse_args(["--quick", "--hog-sessions", "5", "--races", "2", "--race-new-tokens", "32", "--serve-slow-conns", "6", "--serve-hold-s", "35", "--guess-clicks", "9"])
    cfg = config_from(args)
    assert (cfg.hog_sessions, cfg.races, cfg.race_new_tokens, cfg.serve_slow_conns, cfg.serve_hold_s, cfg.guess_clicks) == (5, 2, 32, 6, 35.0, 9)
    assert Config.quick().serve_hold_s < SERVE_DEADLINE_S < Config().serve_hold_s  # a full run holds past the service's deadlines


def test_the_help_says_how_to_run_every_attack_and_write_the_table(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    text = capsys.readouterr().out
    assert "docs/workshop-safety.md" in text and "--json attacks.json" in text
    for attack in ATTACKS:
        assert f"  {attack.name} " in text, attack.name  # each attack described under its name


def test_attacks_are_chosen_by_name_and_grouped_by_the_owner_settings_they_need():
    assert [a.name for a in parse_attacks("")] == [a.name for a in ATTACKS]
    chosen = parse_attacks("adaptive-k,clear-cache,run-flood,key-guess")
    assert [a.name for a in chosen] == ["clear-cache", "key-guess", "run-flood", "adaptive-k"]  # the issue's order
    rooms = groups(chosen)
    assert [[a.name for a in members] for _, _, members in rooms][0] == ["clear-cache", "key-guess"]  # the plain room first
    assert {env for env, _, _ in rooms[1:]} == {(("SPECVIZ_RUN_DIR_MAX_MB", "1"),), (("SPECVIZ_MAX_DRAFT_TOKENS", "2"),)}
    with pytest.raises(ValueError, match="unknown attack"):
        parse_attacks("clear-cache,drop-tables")
    args = parse_args(["--attacks", "memory", "--owner-env", "SPECVIZ_MAX_KV_TOKENS=200000", "--max-prompt-tokens", "512", "--quick"])
    assert args.owner == {"SPECVIZ_MAX_KV_TOKENS": "200000"} and config_from(args).max_prompt_tokens == 512 and config_from(args).memory_sessions == 2
    with pytest.raises(SystemExit):
        parse_args(["--owner-env", "not a setting"])


@needs_haproxy
def test_issue_42s_attacks_run_against_a_real_room_and_service(tmp_path):
    out = tmp_path / "attacks.json"
    main(["--quick", "--replicas", "1", "--attacks", "kv-hog,race,serve,conn-flood,guesses", "--json", str(out), "--timeout-s", "1200"])
    rows = {r["name"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) >= {"kv-hog", "race", "serve", "conn-flood", "guesses"}
    o = {name: r["outcome"] for name, r in rows.items()}
    assert not [name for name, got in o.items() if "error" in got], {name: got.get("error") for name, got in o.items()}
    hog = o["kv-hog"]
    assert hog["hog_refused"] and hog["newcomer"]["ran"] and not hog["extra"]["ran"], hog  # the budget filled; a fair share for the newcomer, not the hog
    assert o["race"]["races"] == 1 and not o["race"]["said"] and not o["race"]["exceptions"]
    assert {k: o["serve"][k] for k in ("no_key", "wrong_key", "huge_body", "form_post", "huge_integer")} == {
        "no_key": 401, "wrong_key": 401, "huge_body": 413, "form_post": 415, "huge_integer": 400}  # fmt: skip
    assert o["serve"]["victim"]["requests"] >= 1 and not o["serve"]["victim"]["failures"] and o["serve"]["slow_conns"] == 4
    assert o["conn-flood"]["answered"] <= o["conn-flood"]["limit"] < o["conn-flood"]["connections"]
    assert o["guesses"]["lines"] == 1 and o["guesses"]["new_exercise_own_file"] and o["guesses"]["clicks"] == 6
