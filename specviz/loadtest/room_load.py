"""The room under load: the protocol load test through HAProxy with N replicas, one of them SIGKILLed mid-run.

    python scripts/room_load_test.py --replicas 2 --sessions 20 --steps 6 --kill-one-at 3 --think-s 10 --json

It starts `python -m specviz room --replicas N --status-file F` (shared mode, the model SPECVIZ_TARGETS names or the
embedded one; a fresh run directory: specviz.loadtest.room), then, like `scripts/load_test.py --client protocol`
(specviz.loadtest.harness):
1. *Solo*: every session (its own prompt, drafter, seed and temperature) alone through the balancer: the reference
   token stream after every Step.
2. *Together*: all sessions at once through the balancer, each keeping its own cookie jar (HAProxy's `SERVERID`
   stickiness cookie) and its URL, which picks up the page's `?run=<token>` from the query-string update it sends
   after every round. When every session has made --kill-one-at Steps, one replica (--kill, default r1) is
   SIGKILLed by the pid in the status file; the room's supervisor starts it again. A session whose websocket died
   reconnects through the balancer (a fresh websocket with its URL `?run=token`; HAProxy redispatches it to a live
   replica, or the restarted one), must see its run restored at its last round, and Steps on.
3. Every session's stream after every Step must equal its solo run.

Reported: the split of sessions over replicas (from the cookie), lost runs (a session of the killed replica that did
not get its run back at its last round: must be 0), unequal streams (must be 0), exceptions (the pages' and the
replicas' tracebacks), p50/p95 server-side Step per replica (the replicas' `specviz.timing` lines, which the room's
log prefixes with `[rN]`), and the load average before and after. --json prints one JSON object:
lp.summary's fields (its "server_step_s" pooled over every replica's Steps, with "steps" and "worst_replica_p95")
plus {"replicas", "killed", "kill_after_step", "split", "lost_runs", "unequal_streams",
"reconnects", "per_replica": {rN: {"server_step_s": {"p50", "p95"}, "steps"}}, "load_avg": {"before", "after"}}.
Exits 0 only when nothing was lost, every stream equals its solo run and nothing raised.

--presenter runs the presenter scenario instead (1 presenter + --sessions followers; specviz.loadtest.presenter);
--presenter --fork the fork scenario (1 presenter + --sessions participants who fork and Step; specviz.loadtest.forks).
scripts/room_load_test.py is the command line (main).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import os
import random
import signal
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from websockets.exceptions import ConnectionClosed, InvalidStatus

from specviz.loadtest import harness as lp
from specviz.loadtest.forks import run_forks
from specviz.loadtest.presenter import run_presenter
from specviz.loadtest.protocol import StSession
from specviz.loadtest.room import RoomHandle, pooled_steps, replica_lines, room, sticky_replica, wait_all_up

log = logging.getLogger("load_test")
BARRIER_TIMEOUT_S = 900
RECONNECT_TIMEOUT_S = 120  # a browser keeps trying to reconnect too (Streamlit's frontend, with a back-off)
RECONNECT_BACKOFF_S = 0.25


# --- one session that survives its replica -----------------------------------------------------------------------


@dataclass
class RoomOutcome(lp.Outcome):
    replicas: list[str] = field(default_factory=list)  # the SERVERID cookie at the start and after each reconnect
    restored_at: list[str | None] = field(default_factory=list)  # the rounds metric right after each reconnect
    restored_equal: list[bool] = field(default_factory=list)  # the restored stream equals the one before the kill


@dataclass(frozen=True)
class Kill:
    """When the together phase kills: after `after_step` Steps of every session (a barrier with the main thread),
    which resumes the sessions by setting `done`."""

    after_step: int
    barrier: threading.Barrier
    done: threading.Event


def _reconnect(session: StSession, out: RoomOutcome, rounds: int) -> None:
    """A fresh websocket through the balancer with the session's URL (?run=token) and cookies: the run must come
    back at `rounds`, with the stream it had."""
    before = session.token_stream()
    deadline = time.monotonic() + RECONNECT_TIMEOUT_S
    for attempt in itertools.count():
        with contextlib.suppress(Exception):  # the old websocket is already dead
            session.close()
        try:
            session.open()
            break
        except (OSError, ConnectionClosed, InvalidStatus) as exc:  # HTTPError is an OSError: a 502 while HAProxy notices
            if time.monotonic() > deadline:
                raise
            log.info("session #%d: reconnect %d failed (%s); again", out.person.index, attempt + 1, exc)
            time.sleep(min(RECONNECT_BACKOFF_S * 2**attempt, 2.0))
    out.replicas.append(sticky_replica(session) or "?")
    out.restored_at.append(session.metric("rounds"))
    out.restored_equal.append(session.token_stream() == before)
    log.info("session #%d reconnected to %s: rounds=%s", out.person.index, out.replicas[-1], out.restored_at[-1])


def _step(session: StSession, out: RoomOutcome, n: int):
    """Press Step; a dead websocket (its replica was killed) reconnects, then presses again."""
    try:
        return session.click("step")
    except (ConnectionClosed, OSError):
        _reconnect(session, out, n)
        return session.click("step")


def drive(url: str, p: lp.Person, steps: int, max_new_tokens: int, think_s: float, start: threading.Barrier, kill: Kill, offset_s: float) -> RoomOutcome:
    """One participant: open, wait for the others, Step with think time; at the kill, wait until it happened."""
    out, phase, met = RoomOutcome(p), "open", {"start": False, "kill": False}
    session = StSession(url, p.query(max_new_tokens))
    try:
        session.open()
        out.replicas.append(sticky_replica(session) or "?")
        phase, met["start"] = "barrier", True
        start.wait(timeout=BARRIER_TIMEOUT_S)
        time.sleep(offset_s)
        for n in range(steps):
            if n == kill.after_step:
                phase, met["kill"] = "kill barrier", True
                kill.barrier.wait(timeout=BARRIER_TIMEOUT_S)
                kill.done.wait(timeout=BARRIER_TIMEOUT_S)
            phase = f"step {n + 1}"
            lp.record_step(session, out, n, _step(session, out, n))
            if n + 1 < steps:
                time.sleep(think_s)
        out.errors += [f"page exception: {e[:200]}" for e in session.exceptions()]
    except Exception as exc:  # a session that fails is reported, not fatal to the others
        out.errors.append(f"{phase}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        for name, barrier in (("start", start), ("kill", kill.barrier if kill.after_step < steps else None)):
            if barrier is not None and not met[name]:  # the others (and the killer) still meet there
                with contextlib.suppress(threading.BrokenBarrierError):
                    barrier.wait(timeout=BARRIER_TIMEOUT_S)
    finally:
        session.close()
    return out


def together(handle: RoomHandle, crowd: list[lp.Person], args: argparse.Namespace) -> tuple[list[RoomOutcome], float, dict]:
    """Everyone at once; after --kill-one-at Steps each, SIGKILL the chosen replica. Returns the outcomes, the
    seconds from the start to the last Step, and what was killed."""
    rng = random.Random(0)
    start = threading.Barrier(len(crowd) + 1)
    kill = Kill(args.kill_one_at, threading.Barrier(len(crowd) + 1), threading.Event())
    killed = {"replica": args.kill, "pid": None}
    offsets = [rng.uniform(0, args.think_s) for _ in crowd]
    threads_out: list[RoomOutcome | None] = [None] * len(crowd)

    def run(i: int, p: lp.Person) -> None:
        threads_out[i] = drive(handle.url, p, args.steps, args.max_new_tokens, args.think_s, start, kill, offsets[i])

    threads = [threading.Thread(target=run, args=(i, p), daemon=True) for i, p in enumerate(crowd)]
    for t in threads:
        t.start()
    start.wait(timeout=BARRIER_TIMEOUT_S)
    began = time.monotonic()
    if args.kill_one_at < args.steps:
        kill.barrier.wait(timeout=BARRIER_TIMEOUT_S)
        killed["pid"] = handle.pid_of(args.kill)
        if killed["pid"] is not None:
            os.kill(killed["pid"], signal.SIGKILL)
            log.info("SIGKILLed replica %s (pid %d) after Step %d", args.kill, killed["pid"], args.kill_one_at)
        kill.done.set()
    for t in threads:
        t.join()
    return [o for o in threads_out if o is not None], time.monotonic() - began, killed


# --- the report --------------------------------------------------------------------------------------------------


def room_summary(crowd, solo, outcomes: list[RoomOutcome], by_replica: dict[str, list[dict]], wall_s: float, room_log: str, killed: dict, args, load_avg: dict) -> dict:
    """lp.summary over the whole room, plus the split, what the kill cost, and the Step times per replica."""
    lines = [t for lines in by_replica.values() for t in lines]
    result = lp.summary(crowd, solo, outcomes, lines, wall_s, {"before": None, "peak": None, "after": None}, room_log.count("Traceback"))
    del result["rss_mb"]  # several processes, one restarted: the room's memory is not one number here
    split: dict[str, int] = {}
    for o in outcomes:
        split[o.replicas[0]] = split.get(o.replicas[0], 0) + 1
    of_killed = [o for o in outcomes if o.replicas[0] == killed["replica"]] if killed["pid"] is not None else []
    lost = sum(1 for o in of_killed if o.restored_at[:1] != [str(args.kill_one_at)] or not all(o.restored_equal) or len(o.streams) != args.steps)
    unequal = sum(1 for s, o in zip(solo, outcomes) if not (s.streams and s.streams == o.streams))
    per_replica = {}
    for rid, rlines in sorted(by_replica.items()):
        times = [float(t["script_s"]) for t in lp.step_lines(rlines)]
        per_replica[rid] = {"steps": len(times), "server_step_s": {"p50": lp.rounded(lp.percentile(times, 0.5)), "p95": lp.rounded(lp.percentile(times, 0.95))}}
    result["server_step_s"] = pooled_steps(by_replica)  # every replica's Steps in one distribution
    result.update(
        replicas=args.replicas, killed=killed["replica"] if killed["pid"] is not None else None, kill_after_step=args.kill_one_at,
        split=split, lost_runs=lost, unequal_streams=unequal, reconnects=sum(len(o.restored_at) for o in outcomes),
        per_replica=per_replica, load_avg=load_avg,
    )  # fmt: skip
    return result


def details(solo, outcomes: list[RoomOutcome]) -> list[str]:
    out = lp.details(solo, outcomes)
    out.append("sessions: replica at the start -> after each reconnect (rounds shown right after it)")
    out += [f"#{o.person.index:<3} {' -> '.join(o.replicas)}  {o.restored_at or ''}" for o in outcomes]
    return out


def run(args: argparse.Namespace, env: dict[str, str] | None = None) -> dict:
    """Start the room, run solo then together with the kill, stop the room; the summary (room_summary)."""
    with tempfile.TemporaryDirectory(prefix="specviz-room-load-") as tmp, room(args.replicas, Path(tmp), env) as handle:
        crowd = lp.people(args.sessions)
        solo = lp.solo_runs(handle.url, crowd, args.steps, args.max_new_tokens)
        time.sleep(args.settle_s)
        load_before, offset = os.getloadavg(), lp.log_size(handle.log_path)
        log.info("%d sessions together, %d Steps each, kill %s after Step %d", len(crowd), args.steps, args.kill, args.kill_one_at)
        outcomes, wall_s, killed = together(handle, crowd, args)
        load_after = os.getloadavg()
        if killed["pid"] is not None:  # the restarted replica's log lines are in before the summary
            wait_all_up(handle.status_file, old_pids=frozenset({killed["pid"]}))
        room_log = handle.log_path.read_bytes()[offset:].decode("utf-8", errors="replace")
        result = room_summary(crowd, solo, outcomes, replica_lines(handle.log_path, offset), wall_s, room_log, killed, args, {"before": list(load_before), "after": list(load_after)})
        if not args.json:
            print("\n".join(details(solo, outcomes)))
        return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--steps", type=int, default=4, help="Steps per session")
    parser.add_argument("--kill-one-at", type=int, default=2, help="SIGKILL one replica when every session has made this many Steps (>= --steps: no kill)")
    parser.add_argument("--kill", default="r1", help="the replica to kill (r1, r2, ...)")
    parser.add_argument("--think-s", type=float, default=10.0, help="seconds a participant reads between Steps")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--settle-s", type=float, default=5.0, help="seconds between the solo runs and the room")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--timeout-s", type=float, default=3600.0, help="give up after this long")
    parser.add_argument("--presenter", action="store_true", help="1 presenter + --sessions followers instead (specviz/loadtest/presenter.py): "
                        "presenter Step -> follower redraw latency, the followers' model time, memory after they leave")
    parser.add_argument("--fork", action="store_true", help="with --presenter: --sessions participants fork the presentation and make --steps "
                        "Steps each (specviz/loadtest/forks.py): every fork's stream against the solo run, pooled server-side Step")
    parser.add_argument("--present-rounds", type=int, default=2, help="with --fork: the presenter's Steps before the room forks")
    parser.add_argument("--keep-log", default=None, help="copy the room's log (the replicas' output, timing lines) here at the end")
    args = parser.parse_args(argv)
    if not 1 <= args.sessions <= lp.MAX_PROTOCOL_SESSIONS or args.replicas < 1 or args.steps < 1 or args.kill_one_at < 1:
        parser.error(f"--sessions must be 1..{lp.MAX_PROTOCOL_SESSIONS}; --replicas, --steps and --kill-one-at at least 1")
    if args.kill not in {f"r{i + 1}" for i in range(args.replicas)}:
        parser.error(f"--kill must name a replica r1..r{args.replicas}")
    if args.fork and (not args.presenter or args.present_rounds < 1):
        parser.error("--fork goes with --presenter, and --present-rounds must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    lp.start_run(args.timeout_s)
    if args.presenter:
        result = (run_forks if args.fork else run_presenter)(args, room)
        print(json.dumps(result) if args.json else json.dumps(result, indent=1))
        return 0 if result["ok"] else 1
    result = run(args)
    print(json.dumps(result) if args.json else json.dumps(result, indent=1))
    ok = result["lost_runs"] == 0 and result["unequal_streams"] == 0 and result["exceptions"] == 0 and result["all_equal_solo"]
    return 0 if ok else 1

