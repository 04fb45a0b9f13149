"""Issue 32, item 6: the run store's attacks against a real room, with the protocol client (what a browser never sends),
while a bystander Steps its own run. For the measured table in docs/workshop-safety.md.

    python scripts/run_attacks.py --replicas 2 --json              # the measurement (a quiet machine; SmolLM2)
    python scripts/run_attacks.py --quick                          # a smoke run of the script itself (measures nothing)

It starts `python -m specviz room --replicas N` (shared mode, a fresh run directory capped at --cap-mb, a random
presenter key), then:

1. *alternate*: a victim Steps twice; two participants Step once each (runs A and B); a presenter Steps and presents;
   then one attacker session sets ?run=A, ?run=B, ?run=A, ... (--alternations reruns, as fast as it goes). Reported:
   the files the attack added, whose runs were evicted (must be none), the victim's reload (restored at round 2?).
2. *finished*: a follower forks the presentation, runs its fork to the end, then presses Step as fast as it can for
   --seconds. Reported: Steps a second, bytes the board grew, whether the fork's file was rewritten (must be 0 / no).
3. *toy_table*: the Exactness lab's toy table sent text that is not JSON and a row that is not there, --toy-sends
   times. Reported: exception elements and server paths on the page (must be 0), whether the lab still computes.

Meanwhile a bystander presses Step every --think-s on a run of its own (Reset at the end of its run): its click ->
script_finished p50/p95 and failures during each attack, and the 1-minute load average before and after.
--json prints one object; exit 0 when nothing was evicted, nothing leaked and the bystander never failed.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

from specviz.loadtest import harness as lp
from specviz.loadtest.protocol import StSession
from specviz.loadtest.room import room

REPO = Path(__file__).resolve().parents[1]

SETTINGS = {"prompt": "Write a story about a lighthouse keeper.", "drafter": "ngram", "max_new_tokens": "64"}
BAD_TABLES = ("this is not JSON", '{"edited_rows": {"99": {"p_target": 1}}, "added_rows": [], "deleted_rows": []}')


def token_of(session: StSession) -> str:
    return urllib.parse.parse_qs(session.query).get("run", [""])[-1]


def leaks(session: StSession) -> list[str]:
    texts = session.texts() + session.exceptions()
    return session.exceptions() + [t for t in texts if str(REPO) in t or "site-packages" in t or "Traceback" in t]


class Bystander(threading.Thread):
    """Another participant, stepping its own run while the attacks go on."""

    def __init__(self, url: str, think_s: float) -> None:
        super().__init__(daemon=True)
        self.url, self.think_s = url, think_s
        self.stop = threading.Event()
        self.steps: list[tuple[float, float]] = []  # (when, click -> finished seconds)
        self.failures: list[tuple[float, str]] = []

    def run(self) -> None:
        with StSession(self.url, SETTINGS | {"seed": "7"}) as me:
            own = False
            while not self.stop.wait(self.think_s):
                start = time.perf_counter()
                try:
                    if not own and any(n.kind == "checkbox" and n.proto.checkbox.id.endswith("-follow") for n in me.nodes.values()):
                        me.set_widget("follow", False)  # a presentation started: the bystander keeps to its own run
                        own = True
                    if me.widget("step").proto.button.disabled:
                        me.click("reset")
                    result = me.click("step")
                    self.steps.append((time.time(), result.seconds))
                    if leaks(me) or any("Waited" in a for a in me.alerts()):
                        self.failures.append((time.time(), (leaks(me) + me.alerts())[0][:200]))
                except Exception as exc:  # a dropped websocket, a timeout: the attack hurt the bystander
                    self.failures.append((time.time(), f"{type(exc).__name__}: {exc}"[:200]))
                    time.sleep(max(0.0, self.think_s - (time.perf_counter() - start)))

    def during(self, since: float, until: float) -> dict:
        times = [s for t, s in self.steps if since <= t <= until]
        return {"steps": len(times), "p50_s": lp.rounded(lp.percentile(times, 0.5)), "p95_s": lp.rounded(lp.percentile(times, 0.95)),
                "failures": [m for t, m in self.failures if since <= t <= until]}  # fmt: skip


def alternate(url: str, runs: Path, key: str, alternations: int) -> dict:
    sessions = []

    def opened(query: dict) -> StSession:
        s = StSession(url, query)
        sessions.append(s)
        s.open()
        return s

    try:
        victim = opened(SETTINGS)
        victim.click("step")
        victim.click("step")
        a, b = (opened(SETTINGS | {"seed": str(i)}) for i in (1, 2))
        for s in (a, b):
            s.click("step")
        teacher = opened(SETTINGS | {"seed": "3"})
        teacher.click("step")
        teacher.set_widget("present_key", key)
        teacher.click("present")
        others = {"victim": token_of(victim), "presented": token_of(teacher), "A": token_of(a), "B": token_of(b)}
        before = {p.stem for p in runs.glob("*.json")}
        attacker = opened(SETTINGS)
        start = time.perf_counter()
        leaked = 0
        for i in range(alternations):
            attacker.query = urllib.parse.urlencode(SETTINGS | {"run": others["AB"[i % 2]]})
            attacker.rerun()
            leaked += bool(leaks(attacker))
        wall_s = time.perf_counter() - start
        after = {p.stem for p in runs.glob("*.json")}
        with StSession(url, {"run": others["victim"]}) as reload:
            restored = any("Restored this run at round 2" in t for t in reload.alerts())
        return {
            "alternations": alternations, "wall_s": round(wall_s, 2), "files_added": len(after - before),
            "evicted": sorted(name for name, t in others.items() if t not in after), "victim_restored": restored,
            "pages_with_leaks": leaked, "dir_bytes": sum(p.stat().st_size for p in runs.glob("*.json")),
        }  # fmt: skip
    finally:
        for s in sessions:
            s.close()


def finished_steps(url: str, runs: Path, seconds: float) -> dict:
    with StSession(url, SETTINGS) as fork:
        if not any(n.kind == "button" and n.proto.button.id.endswith("-fork") for n in fork.nodes.values()):
            return {"error": "no presentation to fork"}
        fork.click("fork")
        fork.click("run_all")  # the presenter's settings: its run to the end
        boards = list(runs.glob("board-*.jsonl"))
        board_before = sum(p.stat().st_size for p in boards)
        own = runs / f"{token_of(fork)}.json"
        stamp = own.stat().st_mtime_ns if own.exists() else None
        node = fork.widget("step")
        from streamlit.proto.WidgetStates_pb2 import WidgetState

        steps, end = 0, time.perf_counter() + seconds
        while time.perf_counter() < end:  # a raw client presses Step whether or not the button is disabled
            fork.rerun(WidgetState(id=node.proto.button.id, trigger_value=True), node.fragment_id)
            steps += 1
        board_after = sum(p.stat().st_size for p in runs.glob("board-*.jsonl"))
        rewritten = own.exists() and own.stat().st_mtime_ns != stamp
        return {"steps": steps, "steps_per_s": round(steps / seconds, 1), "board_grew_bytes": board_after - board_before, "file_rewritten": rewritten}


def toy_table(url: str, sends: int) -> dict:
    with StSession(url, page="exactness") as lab:
        leaked = 0
        for i in range(sends):
            lab.send_raw("lab_vocab", string_value=BAD_TABLES[i % 2])
            leaked += bool(leaks(lab))
        lab.values.clear()
        lab.rerun()
        return {"sends": sends, "pages_with_leaks": leaked, "lab_works_after": lab.metric("TV from p_target") is not None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--cap-mb", type=float, default=1.0, help="SPECVIZ_RUN_DIR_MAX_MB of the room (1: as measured in issue 32)")
    parser.add_argument("--alternations", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the finished fork presses Step")
    parser.add_argument("--toy-sends", type=int, default=20)
    parser.add_argument("--think-s", type=float, default=2.0, help="the bystander's time between Steps")
    parser.add_argument("--quick", action="store_true", help="check the script itself: 1 replica, tiny counts (measures nothing)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.replicas, args.alternations, args.seconds, args.toy_sends, args.think_s = 1, 4, 2.0, 2, 1.0
    key = secrets.token_urlsafe(16)
    with tempfile.TemporaryDirectory(prefix="specviz-run-attacks-") as tmp:
        env = {"SPECVIZ_RUN_DIR_MAX_MB": str(args.cap_mb), "SPECVIZ_PRESENTER_KEY": key}
        with room(args.replicas, Path(tmp), env) as handle:
            runs = Path(tmp) / "runs"
            load_before = os.getloadavg()[0]
            bystander = Bystander(handle.url, args.think_s)
            bystander.start()
            result: dict = {"replicas": args.replicas, "cap_mb": args.cap_mb}
            for name, attack in (("alternate", lambda: alternate(handle.url, runs, key, args.alternations)),
                                 ("finished", lambda: finished_steps(handle.url, runs, args.seconds)),
                                 ("toy_table", lambda: toy_table(handle.url, args.toy_sends))):  # fmt: skip
                since = time.time()
                result[name] = attack()
                result[name]["bystander"] = bystander.during(since, time.time())
            bystander.stop.set()
            bystander.join(timeout=120)
            result["load_avg"] = {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)}
            result["room_tracebacks"] = handle.log_path.read_text(errors="replace").count("Traceback")
    ok = (
        not result["alternate"]["evicted"] and result["alternate"]["victim_restored"] and not result["alternate"]["pages_with_leaks"]
        and result["finished"].get("board_grew_bytes") == 0 and not result["finished"].get("file_rewritten")
        and not result["toy_table"]["pages_with_leaks"] and result["toy_table"]["lab_works_after"]
        and not any(result[k]["bystander"]["failures"] for k in ("alternate", "finished", "toy_table"))
    )  # fmt: skip
    result["ok"] = ok
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
