"""The attacks' goals and the report's numbers, plain functions of what was recorded (tests/test_room_attacks.py): the
victim's Steps and the replicas' readings in an attack's window, the key replies classified, each attack's own goals
(judge_*) and every goal a row missed (verdict)."""

from __future__ import annotations

from dataclasses import dataclass

from specviz.loadtest import harness as lp
from specviz.loadtest.attacks.app_facts import KEY_CHECKED, KEY_LIMITED, TRACEBACK
from specviz.ui.common.backmsgs import UPLOAD_CAPS

# --- the room's goals under attack --------------------------------------------------------------------------------
VICTIM_P95_S = 3.0
FOLLOWER_P95_S = 1.5


@dataclass(frozen=True)
class StepSample:
    """One victim Step: when it was clicked (monotonic), how long until drawn, whether the run moved on."""

    t: float
    seconds: float
    ok: bool
    error: str | None = None


@dataclass(frozen=True)
class ProcSample:
    t: float
    replica: str
    pid: int
    rss_mb: float
    threads: int


@dataclass
class Goals:
    victim_p95_s: float = VICTIM_P95_S
    follower_p95_s: float = FOLLOWER_P95_S
    rss_budget_mb: float = 0.0  # per replica; 0: no budget checked
    thread_slack: int = 2
    max_guesses_per_min: float = 10.0
    health_s: float = 2.0  # a replica's health check while a client sends hostile frames (the balancer marks it down at 4 s)
    session_files: int = UPLOAD_CAPS.session_files  # uploads one session may keep


def victim_stats(samples: list[StepSample], t0: float, t1: float) -> dict:
    """The victim's Steps clicked in [t0, t1]: p50 / p95 / max seconds, failures and the first errors."""
    inside = [s for s in samples if t0 <= s.t <= t1]
    seconds = [s.seconds for s in inside]
    failed = [s for s in inside if not s.ok]
    return {
        "steps": len(inside), "p50": lp.rounded(lp.percentile(seconds, 0.5), 2), "p95": lp.rounded(lp.percentile(seconds, 0.95), 2),
        "max": lp.rounded(max(seconds), 2) if seconds else None, "failures": len(failed), "errors": [s.error for s in failed if s.error][:3],
    }  # fmt: skip


def resource_stats(samples: list[ProcSample], t0: float, t1: float) -> dict[str, dict]:
    """Per replica: RSS before (the last sample at or before t0, else the first after), peak within [t0, t1], after
    (the last sample at or before t1); threads before and after; the pids seen (a new pid: the replica was started
    again, e.g. after an OOM kill)."""
    out: dict[str, dict] = {}
    for rid in sorted({s.replica for s in samples}):
        mine = [s for s in samples if s.replica == rid]
        before = [s for s in mine if s.t <= t0] or [s for s in mine if s.t > t0][:1]
        window = [s for s in mine if t0 <= s.t <= t1]
        after = [s for s in mine if s.t <= t1]
        if not before or not after:
            continue
        b, a = before[-1], after[-1]
        pids = list(dict.fromkeys(s.pid for s in [b, *window, a]))
        out[rid] = {
            "rss_before_mb": round(b.rss_mb, 1), "rss_peak_mb": round(max([b.rss_mb] + [s.rss_mb for s in window]), 1), "rss_after_mb": round(a.rss_mb, 1),
            "threads_before": b.threads, "threads_after": a.threads, "pids": pids, "restarted": len(pids) > 1,
        }  # fmt: skip
    return out


def redraw_stats(latencies: list[float], missed: int) -> dict:
    return {"n": len(latencies), "p50": lp.rounded(lp.percentile(latencies, 0.5), 2), "p95": lp.rounded(lp.percentile(latencies, 0.95), 2), "missed": missed}


def classify_key_reply(texts: list[str]) -> str:
    """What the page said to a wrong key: 'checked' (it was compared and refused), 'limited' (refused unseen: a
    lock-out or rate limit), 'presenting' (it was accepted!) or 'other'."""
    low = " ".join(texts).lower()
    if any(p in low for p in KEY_CHECKED):
        return "checked"
    if any(p in low for p in KEY_LIMITED):
        return "limited"
    if "you are presenting" in low:
        return "presenting"
    return "other"


def shows_internals(texts: list[str]) -> bool:
    """A traceback, a source file or a server path in what the page drew."""
    return any(TRACEBACK.search(t) for t in texts)


# Each attack's own goals: outcome -> the goals it missed (empty: all met).


def judge_token(o: dict, goals: Goals) -> list[str]:
    return []  # the victim, memory and threads say it all


def judge_clear_cache(o: dict, goals: Goals) -> list[str]:
    missed = []
    if o.get("model_loads"):
        missed.append(f"{o['model_loads']} model loads after {o.get('clears')} clears")
    before, after = o.get("pushes_per_step_before"), o.get("pushes_per_step_after")
    if before is not None and after is not None and after > max(before, 1.0) + 0.25:  # one push per Step (fewer: merged)
        missed.append(f"pushes per presenter Step {before} -> {after}")
    if o.get("backoff_after_clears") == "checked":
        missed.append("the key back-off was reset by the clears")
    return missed


def judge_key_guess(o: dict, goals: Goals) -> list[str]:
    missed = []
    for threads, r in sorted(o.get("by_threads", {}).items()):
        if r["checked_per_min"] > goals.max_guesses_per_min:
            missed.append(f"{r['checked_per_min']:.0f} keys checked a minute from {threads} thread(s) (goal <= {goals.max_guesses_per_min:g})")
        if r.get("presenting"):
            missed.append("a guessed key presented")
    if o.get("teacher_presented") is False:
        missed.append("the teacher's right key was refused in a room locked by others")
    return missed


def judge_memory(o: dict, goals: Goals) -> list[str]:
    eleventh = o.get("eleventh") or {}
    return [f"the extra session saw an exception: {eleventh['exceptions'][0][:80]}"] if eleventh.get("exceptions") else []


def judge_owner(o: dict, goals: Goals) -> list[str]:
    leaked = [s["setup"] for s in o.get("setups", []) if s.get("participant") and s.get("owner_widgets")]
    return [f"owner options for a participant: {'; '.join(leaked)}"] if leaked else []


def judge_run_flood(o: dict, goals: Goals) -> list[str]:
    missed = []
    if o.get("victim_run_kept") is False:
        missed.append("the victim's run was evicted")
    if o.get("presented_run_kept") is False:
        missed.append("the presented run was evicted")
    if o.get("board_bytes_added"):
        missed.append(f"{o['board_bytes_added']:,} board bytes from Steps of a finished run")
    return missed


def judge_presenter_reload(o: dict, goals: Goals) -> list[str]:
    missed = []
    if not o.get("stopped"):
        missed.append("nobody could end the presentation after the presenter's reload")
    if o.get("reclaimed") and o.get("board_kept") is False:
        missed.append("presenting again lost the board")
    if o.get("reclaimed") and o.get("round_kept") is False:
        missed.append("presenting again moved the room to another round")
    return missed


def judge_adaptive_k(o: dict, goals: Goals) -> list[str]:
    cap, ks, emitted = o.get("cap"), o.get("k_per_round") or [], o.get("tokens_per_round") or []
    missed = []
    if cap is not None and ks and max(ks) > cap:
        missed.append(f"k reached {max(ks)} with the cap at {cap}")
    if cap is not None and emitted and max(emitted) > cap + 1:
        missed.append(f"a round emitted {max(emitted)} tokens (at most k + 1 = {cap + 1})")
    return missed


def judge_long_job(o: dict, goals: Goals) -> list[str]:
    if o.get("button_disabled"):  # the sweep asked for is over the owner's max runs: nothing ran beside the presenter
        return ["the sweep did not run (its button was disabled: over the owner's max runs)"]
    return []  # the followers' column says the rest


def judge_malformed(o: dict, goals: Goals) -> list[str]:
    cases = o.get("cases", [])
    missed = []
    shown = [c for c in cases if c.get("internals")]
    if shown:
        missed.append(f"{len(shown)} of {len(cases)} bad values showed server internals")
    stuck = [c for c in cases if not c.get("recovered")]
    if stuck:
        missed.append(f"{len(stuck)} of {len(cases)} sessions did not recover")
    return missed


def judge_backmsgs(o: dict, goals: Goals) -> list[str]:
    missed = []
    if o.get("two_names_answered"):
        missed.append("a two-name file_urls_request was answered")
    if o.get("frame_answered"):
        missed.append(f"a file_urls_request of {o.get('frame_names'):,} names was answered")
    if (o.get("health_s") or 0) > goals.health_s:
        missed.append(f"the replica's health answered after {o['health_s']:.1f} s (goal <= {goals.health_s:g} s)")
    if o.get("one_name_answered") is False:
        missed.append("a one-name file_urls_request (what an uploader sends) was not answered")
    return missed


def judge_uploads(o: dict, goals: Goals) -> list[str]:
    missed = []
    if o.get("made_up", {}).get(204):
        missed.append(f"{o['made_up'][204]} uploads under made-up ids were kept")
    kept = o.get("minted", {}).get(204, 0)
    if kept > goals.session_files:
        missed.append(f"{kept} uploads kept for one session (cap {goals.session_files})")
    for field, what in (("over_largest", "a body over the largest upload"), ("over_race_cap", "a body over the race page's cap")):
        if o.get(field) is not None and o.get(field) != 413:
            missed.append(f"{what} was answered {o.get(field)}, not 413 before it was sent")
    return missed


def judge_kv_hog(o: dict, goals: Goals) -> list[str]:
    missed = []
    if o.get("hog_sessions") is not None and o.get("hog_refused") is None:
        missed.append(f"the budget never refused the hog ({o['hog_sessions']} sessions): the room's budget is too big for the attack")
    if (o.get("newcomer") or {}).get("ran") is False:
        missed.append(f"another address's run was refused while one address held the budget: {(o['newcomer'].get('message') or '')[:80]}")
    if (o.get("extra") or {}).get("ran"):
        missed.append("the hog's address got more than its fair share while others waited")
    if o.get("exceptions"):
        missed.append(f"{o['exceptions']} exception(s) on the pages")
    return missed


def judge_race(o: dict, goals: Goals) -> list[str]:
    missed = []
    if o.get("races") is not None and (not o["races"] or o.get("said")):
        missed.append(f"a race did not run: {(o.get('said') or ['no race'])[0][:80]}")
    if o.get("exceptions"):
        missed.append(f"{o['exceptions']} exception(s) on the race page")
    return missed


SERVE_EXPECTED = {"no_key": 401, "wrong_key": 401, "huge_body": 413, "form_post": 415, "huge_integer": 400}  # docs/workshop-safety.md
SERVE_DEADLINE_S = 30.0  # the service's read and write deadlines (specviz.workshop.service.config)


def judge_serve(o: dict, goals: Goals) -> list[str]:
    missed = [f"{what} was answered {o[what]}, not {status}" for what, status in SERVE_EXPECTED.items() if what in o and o[what] != status]
    if (o.get("health_s") or 0) > goals.health_s:
        missed.append(f"/health answered after {o['health_s']:.1f} s beside the slow connections (goal <= {goals.health_s:g} s)")
    if (o.get("hold_s") or 0) > SERVE_DEADLINE_S + 5:  # held past the deadlines: the server must have let them go
        if o.get("slow_held"):
            missed.append(f"{o['slow_held']} slowloris connections still open after {o['hold_s']:g} s")
        if o.get("stalled_reader") == "still open":
            missed.append(f"a stream nobody read was still open after {o['hold_s']:g} s")
    v = o.get("victim") or {}
    if v.get("requests") == 0:
        missed.append("the service's victim made no request")
    if v.get("p95") is not None and v["p95"] > goals.victim_p95_s:
        missed.append(f"the service's victim p95 {v['p95']:.2f} s > {goals.victim_p95_s:g} s")
    if v.get("failures"):
        missed.append(f"{v['failures']} of the service victim's requests failed ({', '.join(v.get('errors', []))})")
    if goals.rss_budget_mb and (o.get("rss_peak_mb") or 0) > goals.rss_budget_mb:
        missed.append(f"the service's RSS {o['rss_peak_mb']:,.0f} MB > {goals.rss_budget_mb:,.0f} MB")
    return missed


def judge_conn_flood(o: dict, goals: Goals) -> list[str]:
    if o.get("answered") is not None and o.get("limit") and o["answered"] > o["limit"]:
        return [f"{o['answered']} of {o['connections']} connections from one address were answered (limit {o['limit']})"]
    return []


def judge_guesses(o: dict, goals: Goals) -> list[str]:
    missed = []
    if (o.get("lines") or 0) > 1:
        missed.append(f"one session's {o.get('clicks')} guesses left {o['lines']} lines ({o.get('bytes', 0):,} bytes) in the votes file")
    if o.get("new_exercise_own_file") is False:
        missed.append("a new exercise's guesses went to the old exercise's file")
    if o.get("exceptions"):
        missed.append(f"{o['exceptions']} exception(s) on the race page")
    return missed


def verdict(row: dict, goals: Goals) -> list[str]:
    """The goals a row missed: the room's four (victim, memory, threads, followers) and the attack's own."""
    missed = []
    v = row.get("victim")
    if v is not None:
        if v["steps"] == 0:
            missed.append("the victim made no Step")
        elif v["p95"] is not None and v["p95"] > goals.victim_p95_s:
            missed.append(f"victim p95 {v['p95']:.2f} s > {goals.victim_p95_s:g} s")
        if v["failures"]:
            missed.append(f"{v['failures']} victim Step(s) failed")
    for rid, r in sorted(row.get("replicas", {}).items()):
        if goals.rss_budget_mb and r["rss_peak_mb"] > goals.rss_budget_mb:
            missed.append(f"{rid} RSS {r['rss_peak_mb']:,.0f} MB > {goals.rss_budget_mb:,.0f} MB")
        if r["threads_after"] - r["threads_before"] > goals.thread_slack:
            missed.append(f"{rid} threads {r['threads_before']} -> {r['threads_after']}")
        if r["restarted"]:
            missed.append(f"{rid} was started again (pids {r['pids']})")
    f = row.get("followers")
    if f is not None:
        if f["p95"] is not None and f["p95"] > goals.follower_p95_s:
            missed.append(f"followers' redraw p95 {f['p95']:.2f} s > {goals.follower_p95_s:g} s")
        if f["missed"]:
            missed.append(f"followers missed {f['missed']} redraws")
    return missed + list(row.get("own_missed", []))
