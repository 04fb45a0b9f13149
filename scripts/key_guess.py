"""How fast can someone guess the presenter key? Wrong keys against a real room, with the protocol client.

    python scripts/key_guess.py --replicas 2 --threads 4 --duration-s 120 --json             # one address per thread
    python scripts/key_guess.py --replicas 2 --threads 4 --duration-s 120 --rotate --json    # a new address per guess
    python scripts/key_guess.py --quick                                                      # checks the script only

It starts `python -m specviz room --replicas N` (scripts/room_load_test.room: shared mode, a fresh run directory, a
random strong presenter key only the script knows). --threads attackers then type wrong keys as fast as the room
answers for --duration-s: each from its own loopback source address (127.0.1.T; on Linux every 127.x.y.z is this
machine, and HAProxy passes it on in X-Forwarded-For), or with --rotate from a new address for every guess (an
attacker with many machines); with --fresh every guess opens a new websocket session (a new cookie jar, so the
guesses spread over the replicas), else each thread keeps one session. Meanwhile a teacher (127.0.2.1) types the
right key every --teacher-every-s and notes when it is first accepted.

Reported (--json: one object): tries and tries_per_min (every answer), compared and compared_per_min (answers "That
is not the presenter key": the guesses the room actually checked), locked (answers that checked nothing), other
(anything else, with a sample), the teacher's tries and first_accepted_s (None: kept out for the whole run), the
room's count in its guard file, tracebacks in the room's log, and the 1-minute load average before and after.
Issue 32 measured 706 compared guesses a minute from one thread and 2,280 from four, before the limits.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from specviz.loadtest.protocol import StSession
from specviz.loadtest.room import room
from specviz.workshop.presenter_key import GUARD_NAME, generate_key

log = logging.getLogger("key_guess")
WRONG = "That is not the presenter key"
LOCKED = "no key is checked"
ACCEPTED = ("Step once first", "You are presenting")


def classify(alerts: list[str]) -> str:
    said = " ".join(alerts)
    if WRONG in said:
        return "compared"
    if LOCKED in said:
        return "locked"
    if any(a in said for a in ACCEPTED):
        return "accepted"
    return "other"


def try_key(session: StSession, key: str) -> str:
    session.set_widget("present_key", key)
    session.click("present")
    return classify(session.alerts())


def attacker(url: str, n: int, args, stop: threading.Event, tally: Counter, samples: list[str], lock: threading.Lock) -> None:
    session, guesses = None, 0
    while not stop.is_set():
        source = f"127.0.{10 + (guesses // 250) % 200}.{1 + guesses % 250}" if args.rotate else f"127.0.1.{1 + n}"
        try:
            if session is None or args.fresh or args.rotate:
                if session is not None:
                    session.close()
                session = StSession(url, source=source)
                session.open()
            verdict = try_key(session, f"not-the-key-{secrets.token_hex(8)}")
        except Exception as exc:  # a refused or dropped connection counts, and the attack goes on with a new session
            verdict, session = "other", None
            with lock:
                samples.append(f"{type(exc).__name__}: {str(exc)[:120]}")
        else:
            if verdict == "other":
                with lock:
                    samples.append(" | ".join(session.alerts())[:160])
        with lock:
            tally[verdict] += 1
        guesses += 1
    if session is not None:
        session.close()


def teacher(url: str, key: str, every_s: float, start: float, stop: threading.Event, seen: dict) -> None:
    while not stop.wait(every_s):
        try:
            with StSession(url, source="127.0.2.1") as session:
                verdict = try_key(session, key)
        except Exception as exc:
            verdict = f"error: {type(exc).__name__}"
        seen["tries"] += 1
        seen["last"] = verdict
        if verdict == "accepted" and seen["first_accepted_s"] is None:
            seen["first_accepted_s"] = round(time.monotonic() - start, 1)


def run(args) -> dict:
    key = generate_key()
    with tempfile.TemporaryDirectory(prefix="specviz-key-guess-") as tmp, room(args.replicas, Path(tmp), {"SPECVIZ_PRESENTER_KEY": key}) as handle:
        run_dir = Path(tmp) / "runs"
        tally, samples, lock, stop = Counter(), [], threading.Lock(), threading.Event()
        seen = {"tries": 0, "first_accepted_s": None, "last": None}
        load_before, start = os.getloadavg(), time.monotonic()
        threads = [threading.Thread(target=attacker, args=(handle.url, n, args, stop, tally, samples, lock), daemon=True) for n in range(args.threads)]
        threads.append(threading.Thread(target=teacher, args=(handle.url, key, args.teacher_every_s, start, stop, seen), daemon=True))
        for t in threads:
            t.start()
        time.sleep(args.duration_s)
        stop.set()
        for t in threads:
            t.join(timeout=120)
        wall_min = (time.monotonic() - start) / 60
        load_after = os.getloadavg()
        try:
            guard = json.loads((run_dir / GUARD_NAME).read_text())
        except (OSError, ValueError):
            guard = {"room": [], "clients": {}}
        room_log = handle.log_path.read_text(errors="replace")
    tries = sum(tally.values())
    return {
        "replicas": args.replicas, "threads": args.threads, "rotate": args.rotate, "fresh": args.fresh, "duration_s": args.duration_s,
        "tries": tries, "tries_per_min": round(tries / wall_min, 1), "compared": tally["compared"],
        "compared_per_min": round(tally["compared"] / wall_min, 2), "locked": tally["locked"], "accepted": tally["accepted"],
        "other": tally["other"], "other_samples": samples[:5],
        "teacher": {"every_s": args.teacher_every_s, **seen},
        "guard": {"room_wrong_keys": len(guard.get("room", [])), "clients": len(guard.get("clients", {}))},
        "key_in_log": key in room_log, "tracebacks": room_log.count("Traceback"),
        "load_avg": {"before": round(load_before[0], 2), "after": round(load_after[0], 2)},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4, help="attackers at once")
    parser.add_argument("--duration-s", type=float, default=120.0)
    parser.add_argument("--rotate", action="store_true", help="a new client address for every guess (many machines)")
    parser.add_argument("--fresh", action="store_true", help="a new websocket session for every guess")
    parser.add_argument("--teacher-every-s", type=float, default=20.0, help="the teacher types the right key this often")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="check the script: 1 replica, 1 thread, 20 s (measures nothing)")
    args = parser.parse_args(argv)
    if args.quick:
        args.replicas, args.threads, args.duration_s, args.teacher_every_s = 1, 1, 20.0, 5.0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    result = run(args)
    print(json.dumps(result) if args.json else json.dumps(result, indent=1))
    ok = result["other"] == 0 and result["tracebacks"] == 0 and not result["key_in_log"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
