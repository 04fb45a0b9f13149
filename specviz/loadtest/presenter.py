"""The room follows the teacher, under load: 1 presenter and N followers through HAProxy (the protocol client).

    python scripts/room_load_test.py --presenter --replicas 2 --sessions 30 --steps 8 --think-s 5 --json

The room starts with a random presenter key (SPECVIZ_PRESENTER_KEY, only in the room's environment and in the
presenter's websocket message, never in a URL). The presenter opens the page, Steps once, types the key and presses
*Present this run*. Then N followers open the page through the balancer (each its own cookie jar, so they split
over the replicas), see *Following the presenter*, and, like a browser, draw the runs the server pushes (each
replica's watcher reruns its followers' stage fragments after a Step: specviz.ui.room.push) and rerun the page's timed
fragment (the `auto_rerun` the page registers: the slow safety-net poll) on its interval. The presenter makes
--steps Steps with --think-s between; for each Step, each follower's latency is presenter-click-start -> the first
run whose page shows the new round (client clocks in one process). Then the followers leave, and after --settle-s the replicas' memory is read
again (polled until it is back within 10 %, for at most FREED_WITHIN_S: Streamlit frees a closed session after
30 s).

Reported (--json: one object): follower_redraw_s {p50, p95, n, missed} (missed: a follower that never showed a
round), presenter_server_step_s {p50, p95} (the presenter's `specviz.timing` lines with a round), followers_round_s
(the followers' model time: the round_s of their timing lines; must be 0), split (followers per replica),
rss_mb {before, with_followers, after} summed over the replicas (the replicas start warm: specviz.workshop.replicas.supervisor's
WARM_START), load_avg {before, after} (1-minute, around the followers' phase), exceptions, ok (followers' model time
0, nothing missed or raised, memory back within 10 %).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from specviz.loadtest import harness as lp
from specviz.loadtest.protocol import StSession
from specviz.loadtest.room import pin_replica, sticky_replica
from specviz.loadtest.server import rss_mb
from specviz.workshop.presenter_key import generate_key

log = logging.getLogger("load_test")
ROUND = re.compile(r"Following the presenter \(round (\d+)\)")
# The presenter's run: open-ended, so it lasts every Step of the test (a copying prompt ends at EOS after 4 rounds).
PRESENTER = lp.Person(0, "Write a long story about a lighthouse keeper who finds a message in a bottle.", "ngram", 0, 0.0)
JOIN_TIMEOUT_S = 600
FREED_WITHIN_S = 90  # a closed session is freed after 30 s (disconnectedSessionTTL), then the sweeper's next pass


@dataclass
class Follower:
    index: int
    replica: str = "?"
    session_id: str = ""
    seen: dict[int, float] = field(default_factory=dict)  # round -> perf_counter when the page first showed it
    pushes: int = 0  # runs the server started on its own (the watcher's redraws), not the page's timed ones
    errors: list[str] = field(default_factory=list)
    last_alerts: list[str] = field(default_factory=list)  # what the page said last (a missed round's diagnosis)


def shown_round(session: StSession) -> int | None:
    for text in session.alerts():
        m = ROUND.search(text)
        if m:
            return int(m.group(1))
    return None


def _watcher(session: StSession) -> str | None:
    """The fastest timed fragment of the page: the presentation watcher while following."""
    return min(session.auto_reruns, key=session.auto_reruns.get) if session.auto_reruns else None


def follow(url: str, f: Follower, joined: threading.Barrier, stop: threading.Event, pin: str | None = None) -> None:
    """Open, check that the page follows, then do what a browser does until stopped: draw the runs the server pushes
    (the app's watcher reruns a follower's stage fragment after each Step) and tick the page's timed fragment (the
    watcher's safety-net poll, or the whole watcher where the server cannot push) on its interval. pin: the replica
    to follow on (its sticky cookie); None lets the balancer choose."""
    session = StSession(url)
    if pin is not None:
        pin_replica(session, pin)
    try:
        session.open()
        f.replica, f.session_id = sticky_replica(session) or "?", (session.session_id or "")[:8]
        if shown_round(session) is None:
            f.errors.append(f"the page does not follow: {session.alerts()[:2]}")
        joined.wait(timeout=JOIN_TIMEOUT_S)
        due = None  # when the page's timed fragment is next due, as a browser's timer
        while not stop.is_set():
            fid = _watcher(session)
            if fid is None:
                f.errors.append(f"the page registered no watcher (alerts: {[a[:40] for a in session.alerts()][:3]})")
                return
            due = time.perf_counter() + session.auto_reruns[fid] if due is None else due
            if session.wait_for_run(timeout_s=min(0.2, max(0.0, due - time.perf_counter()))) is not None:
                f.pushes += 1
            if time.perf_counter() >= due:
                session.rerun(fragment_id=fid)
                due = None
            n = shown_round(session)
            f.last_alerts = [a[:80] for a in session.alerts()][:3]
            if n is not None and n not in f.seen:
                f.seen[n] = time.perf_counter()
        f.errors += [f"page exception: {e[:200]}" for e in session.exceptions()]
    except Exception as exc:
        f.errors.append(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        with contextlib.suppress(threading.BrokenBarrierError):
            joined.wait(timeout=1)
    finally:
        session.close()


def _replica_rss(handle) -> float | None:
    status = handle.status()
    values = [rss_mb(r["pid"]) for r in (status or {}).get("replicas", [])]
    return sum(v for v in values if v is not None) if values else None


def _rss_after_leaving(handle, before: float | None, settle_s: float) -> float | None:
    """The replicas' RSS once the followers' sessions are freed: Streamlit frees a closed tab's session after
    server.disconnectedSessionTTL (30 s), so poll until it is back within 10 % or FREED_WITHIN_S passed."""
    time.sleep(settle_s)
    deadline = time.monotonic() + FREED_WITHIN_S
    while True:
        now = _replica_rss(handle)
        if before is None or now is None or now <= 1.1 * before or time.monotonic() > deadline:
            return now
        time.sleep(5)


def run_presenter(args, room) -> dict:
    """The presenter scenario (see the module docstring) in a fresh room; `room` is specviz.loadtest.room.room."""
    key = generate_key()
    with tempfile.TemporaryDirectory(prefix="specviz-room-present-") as tmp, room(args.replicas, Path(tmp), {"SPECVIZ_PRESENTER_KEY": key}) as handle:
        teacher = StSession(handle.url, PRESENTER.query(args.max_new_tokens))
        teacher.open()
        teacher.click("step")
        teacher.set_widget("present_key", key)
        teacher.click("present")
        if not any("You are presenting" in t for t in teacher.alerts()):
            raise SystemExit(f"the presenter could not present: {teacher.alerts()[:3]}")
        time.sleep(args.settle_s)
        rss_before, offset, load_before = _replica_rss(handle), lp.log_size(handle.log_path), os.getloadavg()
        followers, stop = [Follower(i) for i in range(args.sessions)], threading.Event()
        joined = threading.Barrier(len(followers) + 1)
        threads = [threading.Thread(target=follow, args=(handle.url, f, joined, stop), daemon=True) for f in followers]
        for t in threads:
            t.start()
        joined.wait(timeout=JOIN_TIMEOUT_S)
        clicks = {}
        for n in range(args.steps):
            time.sleep(args.think_s)
            if teacher.widget("step").proto.button.disabled:  # the presenter's run finished: no more rounds to follow
                break
            clicks[2 + n] = time.perf_counter()  # the presenter's run is at round 1 when the room joins
            teacher.click("step")
        time.sleep(max(3.0, args.think_s))
        rss_with, load_after = _replica_rss(handle), os.getloadavg()
        stop.set()
        for t in threads:
            t.join(timeout=60)
        teacher.close()
        rss_after = _rss_after_leaving(handle, rss_before, args.settle_s)
        lines = lp.timing_lines(handle.log_path, offset)
        room_log = handle.log_path.read_bytes()[offset:].decode("utf-8", errors="replace")
        if getattr(args, "keep_log", None):
            Path(args.keep_log).write_bytes(handle.log_path.read_bytes())
    result = presenter_summary(followers, clicks, lines, teacher.session_id or "", {"before": rss_before, "with_followers": rss_with, "after": rss_after}, room_log.count("Traceback"))
    result["load_avg"] = {"before": round(load_before[0], 2), "after": round(load_after[0], 2)}  # 1-minute, around the followers' phase
    return result


def redraw_latencies(followers: list[Follower], clicks: dict[int, float]) -> tuple[list[float], int]:
    """Each follower's presenter-click -> first drawn latency for every round clicked (clicks: round -> the click's
    perf_counter), and how many (follower, round) pairs were never drawn."""
    latencies, missed = [], 0
    for f in followers:
        for n, clicked in clicks.items():
            if n in f.seen:
                latencies.append(f.seen[n] - clicked)
            else:
                missed += 1
    return latencies, missed


def presenter_summary(followers: list[Follower], clicks: dict[int, float], lines: list[dict], teacher_id: str, rss: dict, tracebacks: int) -> dict:
    """The report (module docstring) from what the threads saw and the replicas' timing lines."""
    teacher_steps = [float(t["script_s"]) for t in lp.step_lines(lines) if t.get("session") == teacher_id[:8]]
    made = dict(list(clicks.items())[: len(teacher_steps)])  # a Step after the run finished makes no round to follow
    latencies, missed = redraw_latencies(followers, made)
    ids = {f.session_id for f in followers}
    followers_round_s = sum(float(t.get("round_s", 0)) for t in lines if t.get("session") in ids)
    split: dict[str, int] = {}
    for f in followers:
        split[f.replica] = split.get(f.replica, 0) + 1
    exceptions = sum(len(f.errors) for f in followers) + tracebacks
    memory_ok = None not in (rss["before"], rss["after"]) and rss["after"] <= 1.1 * rss["before"]
    result = {
        "followers": len(followers), "presenter_steps": len(clicks), "presenter_rounds": len(made), "split": split,
        "follower_redraw_s": {"p50": lp.rounded(lp.percentile(latencies, 0.5)), "p95": lp.rounded(lp.percentile(latencies, 0.95)), "n": len(latencies), "missed": missed},
        "presenter_server_step_s": {"p50": lp.rounded(lp.percentile(teacher_steps, 0.5)), "p95": lp.rounded(lp.percentile(teacher_steps, 0.95))},
        "followers_round_s": round(followers_round_s, 4), "rss_mb": {k: lp.rounded(v, 1) for k, v in rss.items()}, "exceptions": exceptions,
        "errors": [e for f in followers for e in f.errors][:10],
        "rounds_seen": sorted(len(f.seen) for f in followers),
        "seen_by_follower": [{n: round(t - min(made.values(), default=0.0), 2) for n, t in sorted(f.seen.items())} for f in followers[:3]],
        "clicks": {n: round(t - min(made.values(), default=0.0), 2) for n, t in made.items()},
        "missed_page_said": next((f.last_alerts for f in followers if len(f.seen) < len(made)), []),
    }  # fmt: skip
    result["ok"] = followers_round_s == 0 and missed == 0 and exceptions == 0 and memory_ok
    log.info("presenter mode: %s", json.dumps(result))
    return result
