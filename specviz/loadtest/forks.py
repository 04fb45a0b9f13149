"""The room forks from the teacher, under load: 1 presenter, N participants who fork and Step on their own (the
protocol client, through HAProxy).

    python scripts/room_load_test.py --presenter --fork --replicas 2 --sessions 30 --steps 6 --think-s 10 --json

1. *Solo*: the presenter's settings (room_presenter.PRESENTER: an open-ended prompt, the n-gram model, T=0) alone through the
   balancer for --present-rounds + --steps Steps: the reference token stream after every Step (lp.solo_runs, as the
   room load test's equality check).
2. The presenter opens the same settings, Steps --present-rounds times, and presents (a random presenter key, only
   in the room's environment and the presenter's websocket message).
3. N participants open the page through the balancer (each its own cookie jar, so they split over the replicas),
   must see *Following the presenter (round R)*, then, at random offsets within one think time, press *Try it
   yourself from here* (`fork`) and make --steps Steps each with --think-s between.
4. Every fork's stream after its j-th Step must equal the solo run's after Step R + j: the fork continues exactly
   as the presenter's run would with the same settings.

Reported (--json: one object): forks, forked_at (how many forks started at round R), split (forks per replica),
unequal_streams (must be 0), all_equal_solo, server_step_s {p50, p95, steps, worst_replica_p95} pooled over every
replica's Steps (their `specviz.timing` lines after the solo run: only the forks Step then), per_replica,
fork_click_s {p50, p95} (the fork button's click -> script_finished, client side), exceptions, errors (the first
ten), load_avg {before, after}, ok (every fork forked at R, every stream equals solo, nothing raised).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from specviz.loadtest import harness as lp
from specviz.loadtest.presenter import JOIN_TIMEOUT_S, PRESENTER, shown_round
from specviz.loadtest.protocol import StSession
from specviz.loadtest.room import pooled_steps, replica_lines, sticky_replica
from specviz.workshop.presenter_key import generate_key

log = logging.getLogger("load_test")
FORKED = "Your own copy of the presenter's run at round"


@dataclass
class Fork:
    """What one participant saw: the replica, the round the page followed and forked at, the stream per Step."""

    index: int
    replica: str = "?"
    followed_round: int | None = None
    forked_at: str | None = None  # the rounds metric right after the fork
    streams: list = field(default_factory=list)
    fork_click_s: float | None = None
    client_s: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def fork_and_step(url: str, f: Fork, steps: int, think_s: float, joined: threading.Barrier, offset_s: float) -> None:
    """Open (following), wait for the others, fork, then Step with think time between; errors are recorded."""
    session, phase = StSession(url), "open"
    try:
        session.open()
        f.replica, f.followed_round = sticky_replica(session) or "?", shown_round(session)
        phase = "barrier"
        joined.wait(timeout=JOIN_TIMEOUT_S)
        time.sleep(offset_s)
        phase = "fork"
        f.fork_click_s = session.click("fork").seconds
        if not any(FORKED in t for t in session.alerts()):
            f.errors.append(f"fork: the page did not fork: {[a[:60] for a in session.alerts()][:3]}")
        f.forked_at = session.metric("rounds")
        for n in range(steps):
            phase = f"step {n + 1}"
            f.client_s.append(session.click("step").seconds)
            f.streams.append(session.token_stream())
            if n + 1 < steps:
                time.sleep(think_s)
        f.errors += [f"page exception: {e[:200]}" for e in session.exceptions()]
    except Exception as exc:  # a participant that fails is reported, not fatal to the others
        f.errors.append(f"{phase}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        if phase == "open":  # the others still meet at the barrier
            with contextlib.suppress(threading.BrokenBarrierError):
                joined.wait(timeout=1)
    finally:
        session.close()


def _present(url: str, person: lp.Person, key: str, rounds: int, max_new_tokens: int) -> StSession:
    """The presenter: open, Step `rounds` times, present. Raises SystemExit when presenting fails."""
    teacher = StSession(url, person.query(max_new_tokens))
    teacher.open()
    for _ in range(rounds):
        teacher.click("step")
    teacher.set_widget("present_key", key)
    teacher.click("present")
    if not any("You are presenting" in t for t in teacher.alerts()):
        raise SystemExit(f"the presenter could not present: {teacher.alerts()[:3]}")
    return teacher


def run_forks(args, room, env: dict[str, str] | None = None) -> dict:
    """The fork scenario (module docstring) in a fresh room; `room` is specviz.loadtest.room.room, `env` more of the room's
    environment (a test's tiny model in SPECVIZ_TARGETS)."""
    key, rounds = generate_key(), args.present_rounds
    person = PRESENTER  # open-ended: the run is still going at the last Step (a copying prompt ends at EOS early)
    with tempfile.TemporaryDirectory(prefix="specviz-room-fork-") as tmp, room(args.replicas, Path(tmp), {**(env or {}), "SPECVIZ_PRESENTER_KEY": key}) as handle:
        solo = lp.solo_runs(handle.url, [person], rounds + args.steps, args.max_new_tokens)[0]
        teacher = _present(handle.url, person, key, rounds, args.max_new_tokens)
        time.sleep(args.settle_s)
        load_before, offset = os.getloadavg(), lp.log_size(handle.log_path)
        forks, rng = [Fork(i) for i in range(args.sessions)], random.Random(0)
        joined = threading.Barrier(len(forks) + 1)
        offsets = [rng.uniform(0, args.think_s) for _ in forks]
        threads = [threading.Thread(target=fork_and_step, args=(handle.url, f, args.steps, args.think_s, joined, offsets[f.index]), daemon=True) for f in forks]
        for t in threads:
            t.start()
        with contextlib.suppress(threading.BrokenBarrierError):
            joined.wait(timeout=JOIN_TIMEOUT_S)
        log.info("%d forks at round %d, %d Steps each", len(forks), rounds, args.steps)
        for t in threads:
            t.join()
        load_after = os.getloadavg()
        teacher.close()
        room_log = handle.log_path.read_bytes()[offset:].decode("utf-8", errors="replace")
        by_replica = replica_lines(handle.log_path, offset)
    return fork_summary(solo, rounds, forks, by_replica, room_log.count("Traceback"), {"before": list(load_before), "after": list(load_after)})


def fork_summary(solo: lp.Outcome, rounds: int, forks: list[Fork], by_replica: dict[str, list[dict]], tracebacks: int, load_avg: dict) -> dict:
    """The report (module docstring): each fork's stream after Step j against the solo run's after Step rounds + j."""
    def equal(f: Fork) -> bool:  # a fork that drew no tokens is not equal to anything
        return bool(f.streams and f.streams[-1]) and len(solo.streams) >= rounds + len(f.streams) and f.streams == solo.streams[rounds : rounds + len(f.streams)]

    unequal = sum(1 for f in forks if not equal(f))
    short = sum(1 for f in forks if len(f.streams) != len(forks[0].streams if forks else []))
    split: dict[str, int] = {}
    for f in forks:
        split[f.replica] = split.get(f.replica, 0) + 1
    clicks = [f.fork_click_s for f in forks if f.fork_click_s is not None]
    per_replica = {rid: pooled_steps({rid: lines}) for rid, lines in sorted(by_replica.items())}
    exceptions = sum(len(f.errors) for f in forks) + len(solo.errors) + tracebacks
    forked_at = sum(1 for f in forks if f.followed_round == rounds and f.forked_at == str(rounds))
    result = {
        "forks": len(forks), "present_rounds": rounds, "steps_each": max((len(f.streams) for f in forks), default=0),
        "forked_at": forked_at, "split": split, "unequal_streams": unequal, "short_runs": short,
        "all_equal_solo": unequal == 0 and bool(forks), "server_step_s": pooled_steps(by_replica), "per_replica": per_replica,
        "fork_click_s": {"p50": lp.rounded(lp.percentile(clicks, 0.5)), "p95": lp.rounded(lp.percentile(clicks, 0.95))},
        "exceptions": exceptions, "errors": (solo.errors + [e for f in forks for e in f.errors])[:10], "load_avg": load_avg,
    }  # fmt: skip
    result["ok"] = result["all_equal_solo"] and exceptions == 0 and forked_at == len(forks)
    log.info("fork mode: %s", json.dumps(result))
    return result
