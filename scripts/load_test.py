"""Load test for a workshop server: N sessions at once, each with its own prompt and settings.

    python scripts/load_test.py --client protocol --sessions 30 --steps 5 --think-s 10 --json   # the server alone
    python scripts/load_test.py --client protocol --knee 10,20,30,40                            # p95 per room size
    python scripts/load_test.py --sessions 8                     # headless browsers (the default client)
    python scripts/load_test.py --sessions 8 --url http://127.0.0.1:8501 --server-pid 12345

Through a room of replicas behind HAProxy, one of them killed mid-run: scripts/room_load_test.py (docs/rooms.md).

--client protocol (specviz.loadtest.harness) speaks Streamlit's websocket protocol without browsers, so it measures
the server: p50/p95 server-side Step time and queue wait from the server's `specviz.timing` log, Steps per second,
RSS before / peak / after. --json prints one JSON object: {"sessions", "steps", "all_equal_solo", "exceptions",
"server_step_s": {"p50", "p95"}, "queue_wait_s": {"p50", "p95"}, "steps_per_s", "rss_mb": {"before", "peak", "after"}}
(with --knee: {"p95_limit_s", "knee_sessions", "runs": [one such object per session count]}). With --url, pass
--server-log (the server's stderr) for the server-side times and --server-pid for its memory.

The browser client (--client browser), in order:
1. *Solo*: each session's settings (prompt, drafter, seed, temperature) run alone, one browser at a time, for
   --rounds Steps; the token stream after every Step is the reference.
2. *Together*: N browsers open the page, set their settings, wait at a barrier, then all press Step --rounds times at
   once. Each Step is timed from the click until the page shows the new round (so the time includes any wait in
   the model's queue: what a participant feels).
3. The browsers close; the server's memory (RSS) is sampled before, during, and --after-s seconds after.

It reports, per session, whether every stream equals its solo run and whether any page showed an exception, then
p50 / p95 seconds per Step and the memory, and exits non-zero if a stream differs, a page raised, or the memory
60 s after is not within 10% of before. Loopback addresses only; bounded in sessions (<= 32) and time (--timeout-s).

Needs Debian's chromium and chromium-driver (the browser tests use the same), selenium and psutil.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from specviz.drafters.specs import drafter_label  # the sidebar's menu lines
from specviz.loadtest import harness as lp
from specviz.loadtest.browser import (
    choose,
    click_button,
    exceptions,
    metric_value,
    new_driver,
    open_page,
    set_text,
    slider_to_end,
    slider_value,
    stream_text,
    wait,
    wait_idle,
)
from specviz.loadtest.harness import (  # one list of participants' choices for both clients
    DRAFTERS,
    MAX_PROTOCOL_SESSIONS,
    PROMPTS,
)
from specviz.loadtest.server import LOOPBACK, RssSampler, rss_mb, start_server, stop_server

log = logging.getLogger("load_test")
MAX_SESSIONS = 32
STEP_TIMEOUT_S = 300


@dataclass(frozen=True)
class Participant:
    index: int
    prompt: str
    drafter: str
    seed: int
    sampled: bool  # temperature 2 (the slider's end) instead of greedy

    def describe(self) -> str:
        return f"#{self.index} {self.drafter:<10} {'T=2 seed ' + str(self.seed) if self.sampled else 'greedy':<14} {self.prompt[:38]!r}"


@dataclass
class Outcome:
    participant: Participant
    texts: list[str] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    resent: list[int] = field(default_factory=lambda: [0])  # Step clicks the page lost and the script pressed again
    connection: list[str] = field(default_factory=list)  # the page's websocket states, in order


def participants(n: int) -> list[Participant]:
    return [Participant(i, PROMPTS[i % len(PROMPTS)] + ("" if i < len(PROMPTS) else f" ({i})"), DRAFTERS[i % len(DRAFTERS)], 100 + i, i % 2 == 1) for i in range(n)]


# --- one browser session ----------------------------------------------------------------------------------------


def prepare(driver, url: str, p: Participant) -> None:
    """Open the page and set this participant's prompt, drafter, seed and temperature."""
    open_page(driver, url, timeout=STEP_TIMEOUT_S)
    set_text(driver, "prompt", p.prompt)
    wait_idle(driver, STEP_TIMEOUT_S)
    choose(driver, "drafter", drafter_label(p.drafter))
    wait_idle(driver, STEP_TIMEOUT_S)
    set_text(driver, "seed", str(p.seed))
    wait_idle(driver, STEP_TIMEOUT_S)
    if p.sampled:
        slider_to_end(driver, "temperature")
        wait(driver, 60).until(lambda d: slider_value(d, "temperature") == "2.00")
        wait_idle(driver, STEP_TIMEOUT_S)


WATCH_JS = """
const app = document.querySelector('[data-testid="stApp"]');
if (app && !window.__specviz_watch) {
  window.__specviz_watch = [];
  const note = () => {
    const s = app.getAttribute('data-test-connection-state');
    const log = window.__specviz_watch;
    if (log[log.length - 1] !== s) log.push(s);
  };
  note();
  new MutationObserver(note).observe(app, {attributes: true, attributeFilter: ['data-test-connection-state']});
}
"""
LOST_CLICK_S = 8.0  # idle this long after a click without a new round: the click was lost, press again


def connection_log(driver) -> list[str]:
    return driver.execute_script("return window.__specviz_watch || []") or []


def step(driver, rounds_before: int, resent: list[int]) -> float:
    """Press Step; seconds until the page shows one more round and the run has finished. A click the page never
    acted on (idle for LOST_CLICK_S with no new round and nothing waiting) is pressed again and counted in resent."""
    from selenium.webdriver.common.by import By

    start = time.monotonic()
    click_button(driver, "step")
    deadline, idle_since = start + STEP_TIMEOUT_S, None
    while metric_value(driver, "rounds") != str(rounds_before + 1):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no round {rounds_before + 1} after {STEP_TIMEOUT_S} s")
        idle = bool(driver.find_elements(By.CSS_SELECTOR, '[data-testid="stApp"][data-test-script-state="notRunning"]'))
        idle_since = (idle_since or time.monotonic()) if idle else None
        if idle_since and time.monotonic() - idle_since > LOST_CLICK_S:
            resent[0] += 1
            click_button(driver, "step")
            idle_since = None
        time.sleep(0.2)
    wait_idle(driver, STEP_TIMEOUT_S, settle=0.1)
    return time.monotonic() - start - 0.1


def drive(driver, url: str, p: Participant, rounds: int, barrier: threading.Barrier | None = None, prepared: bool = False) -> Outcome:
    out = Outcome(p)
    phase = "prepare"
    try:
        if not prepared:
            prepare(driver, url, p)
        phase = "barrier"
        driver.execute_script(WATCH_JS)
        if barrier is not None:
            barrier.wait(timeout=STEP_TIMEOUT_S)
        for n in range(rounds):
            phase = f"step {n + 1}"
            out.step_s.append(step(driver, n, out.resent))
            out.texts.append(stream_text(driver))
        out.errors += exceptions(driver)
        out.connection = connection_log(driver)
    except Exception as exc:  # a session that fails is reported, not fatal to the others
        out.errors.append(f"{phase}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        out.errors += [f"page: {e[:200]}" for e in exceptions(driver)]
        try:  # what the page said when it gave up: alerts, the rounds metric, the script and connection state
            from selenium.webdriver.common.by import By

            alerts = [a.text[:200] for a in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stAlert"]')]
            app = driver.find_element(By.CSS_SELECTOR, '[data-testid="stApp"]')
            out.errors.append(
                f"page state: rounds={metric_value(driver, 'rounds')!r} script={app.get_attribute('data-test-script-state')} "
                f"connection={app.get_attribute('data-test-connection-state')} alerts={alerts}"
            )
        except Exception:
            pass
    return out


# --- main ---------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args, counts = parse_args(argv)
    proc, url, pid, log_path = start_or_attach(args)
    if args.client == "protocol":
        try:
            return protocol_main(args, counts, url, pid, log_path if proc is not None else args.server_log)
        finally:
            if proc is not None:
                stop_server(proc)
    return browser_main(args, url, pid, proc, log_path)


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[int]]:
    """The options (the run's watchdog started at once), and the session counts to run: each --knee count, or --sessions."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--client", choices=("browser", "protocol"), default="browser", help="headless browsers, or Streamlit's protocol without browsers (measures the server)")
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--steps", "--rounds", dest="rounds", type=int, default=3, help="Steps per session")
    parser.add_argument("--think-s", type=float, default=10.0, help="protocol: seconds a participant reads between Steps")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="protocol: each session's max new tokens (a share-link parameter)")
    parser.add_argument("--knee", help="protocol: comma-separated session counts (e.g. 10,20,30,40); reports p95 per count and the largest within --p95-limit")
    parser.add_argument("--p95-limit", type=float, default=3.0, help="protocol: the p95 server-side Step time a room may reach (seconds)")
    parser.add_argument("--server-log", type=Path, help="protocol with --url: the running server's log (its stderr), for the timing lines")
    parser.add_argument("--json", action="store_true", help="protocol: print one JSON object")
    parser.add_argument("--url", help="a running server (loopback only); default: start one")
    parser.add_argument("--server-pid", type=int, help="the running server's pid, to read its memory")
    parser.add_argument("--mode", default="shared", choices=("shared", "local"), help="SPECVIZ_MODE of the server this script starts")
    parser.add_argument("--after-s", type=float, default=60.0, help="seconds after the sessions close to measure memory again")
    parser.add_argument("--settle-s", type=float, default=45.0, help="seconds to let the solo sessions be freed before 'before'")
    parser.add_argument("--stagger", action="store_true", help="open and set up the browsers one at a time (a small machine cannot start 16 at once); the Steps are still at once")
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="give up after this long")
    args = parser.parse_args(argv)
    lp.start_run(args.timeout_s)
    counts = [int(c) for c in args.knee.split(",")] if args.knee else [args.sessions]
    limit = MAX_PROTOCOL_SESSIONS if args.client == "protocol" else MAX_SESSIONS
    if not all(1 <= c <= limit for c in counts):
        parser.error(f"--sessions (and each --knee count) must be between 1 and {limit}")
    if args.url and urllib.parse.urlparse(args.url).hostname not in LOOPBACK:
        parser.error("--url must be a loopback address (127.0.0.1, localhost, ::1): this script only tests this machine")
    return args, counts


def start_or_attach(args: argparse.Namespace) -> tuple[subprocess.Popen | None, str, int | None, Path]:
    """(the server started here in --mode or None, its URL, its pid, its log): the one at --url, or one started here."""
    log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"specviz_load_test_{os.getpid()}.log"
    if args.url:
        return None, args.url.rstrip("/"), args.server_pid, log_path
    proc, url = start_server(args.mode, log_path)
    return proc, url, proc.pid, log_path


def browser_main(args: argparse.Namespace, url: str, pid: int | None, proc: subprocess.Popen | None, log_path: Path) -> int:
    """Each session alone, then all at once, the server's memory around them; the report. Stops a server started here."""
    people = participants(args.sessions)
    try:
        rss_cold = rss_mb(pid)
        log.info("server %s (pid %s), RSS %.0f MB; solo runs of %d sessions", url, pid, rss_cold or float("nan"), len(people))
        solo = solo_runs(url, people, args.rounds)
        time.sleep(args.settle_s)  # the solo sessions' tabs are closed: let the server free them
        rss_before = rss_mb(pid)
        log.info("before: RSS %.0f MB; %d sessions at once", rss_before or float("nan"), len(people))
        together, during, closed_at = together_runs(args, url, pid, people)
        log.info("sessions closed; waiting %.0f s", args.after_s)
        time.sleep(max(0.0, args.after_s - (time.monotonic() - closed_at)))
        rss_after = rss_mb(pid)
    finally:
        if proc is not None:
            stop_server(proc)
    server_log = log_path.read_text(errors="replace") if proc is not None else ""
    return report(people, solo, together, rss_cold, rss_before, during, rss_after, server_log)


def solo_runs(url: str, people: list[Participant], rounds: int) -> list[Outcome]:
    """Each participant's settings alone, one browser at a time: the reference streams."""
    solo: list[Outcome] = []
    for p in people:
        driver = new_driver()
        try:
            solo.append(drive(driver, url, p, rounds))
        finally:
            driver.quit()
        log.info("solo %s: %.2f s/step %s", p.describe(), statistics.median(solo[-1].step_s or [float("nan")]), solo[-1].errors or "")
    return solo


def together_runs(args: argparse.Namespace, url: str, pid: int | None, people: list[Participant]) -> tuple[list[Outcome], float | None, float]:
    """All browsers set up (--stagger: one at a time), then Step together at a barrier: (outcomes, peak RSS, closed at)."""
    drivers = []
    with RssSampler(pid) as sampler:
        try:
            with ThreadPoolExecutor(len(people)) as pool:
                drivers = list(pool.map(lambda _: new_driver(), people))
                if args.stagger:
                    ready = [_prepare_or_error(d, url, p) for d, p in zip(drivers, people)]
                else:
                    ready = list(pool.map(lambda dp: _prepare_or_error(dp[0], url, dp[1]), zip(drivers, people)))
                barrier = threading.Barrier(len(people))
                together = list(pool.map(lambda a: drive(a[0], url, a[1], args.rounds, barrier, prepared=True) if a[2] is None else _failed(a[1], a[2]), zip(drivers, people, ready)))
        finally:
            for d in drivers:
                try:
                    d.quit()
                except Exception:
                    pass
        closed_at = time.monotonic()
        during = max(sampler.samples) if sampler.samples else None
    return together, during, closed_at


def protocol_main(args, counts: list[int], url: str, pid: int | None, log_path: Path | None) -> int:
    """Solo runs of the largest room, then each room size together; prints tables or JSON; 0 when every run passes."""
    crowd = lp.people(max(counts))
    solo = lp.solo_runs(url, crowd, args.rounds, args.max_new_tokens)
    log.info("solo runs done; letting the server free them for %.0f s", args.settle_s)
    time.sleep(args.settle_s)
    results, ok = [], True
    for n in counts:
        before, offset = rss_mb(pid), lp.log_size(log_path)
        log.info("%d sessions together, %d Steps each, think %.0f s (RSS %.0f MB)", n, args.rounds, args.think_s, before or float("nan"))
        with RssSampler(pid) as sampler:
            outcomes, wall_s = lp.together(url, crowd[:n], args.rounds, args.max_new_tokens, args.think_s)
        peak = max(sampler.samples) if sampler.samples else None
        time.sleep(args.after_s)
        after = rss_mb(pid)
        server_log = log_path.read_bytes()[offset:].decode("utf-8", errors="replace") if log_path is not None and log_path.exists() else ""
        lines = lp.timing_lines(log_path, offset)
        result = lp.summary(crowd[:n], solo[:n], outcomes, lines, wall_s, {"before": before, "peak": peak, "after": after}, server_log.count("Traceback"))
        results.append(result)
        ok &= result["all_equal_solo"] and result["exceptions"] == 0 and _rss_back(before, after)
        if not args.json:
            print("\n".join(lp.details(solo[:n], outcomes)))
            print(json.dumps(result))
    if args.knee:
        within = [r["sessions"] for r in results if r["server_step_s"]["p95"] is not None and r["server_step_s"]["p95"] <= args.p95_limit]
        report = {"p95_limit_s": args.p95_limit, "knee_sessions": max(within) if within else None, "runs": results}
        print(json.dumps(report) if args.json else "\n".join(f"| {r['sessions']} sessions | p95 server-side Step {r['server_step_s']['p95']} s |" for r in results) + f"\nknee: {report['knee_sessions']} sessions at p95 ≤ {args.p95_limit} s")
    elif args.json:
        print(json.dumps(results[0]))
    return 0 if ok else 1


def _rss_back(before: float | None, after: float | None) -> bool:
    return before is None or after is None or abs(after - before) <= 0.1 * before


def _prepare_or_error(driver, url: str, p: Participant) -> str | None:
    try:
        prepare(driver, url, p)
        return None
    except Exception as exc:
        return f"prepare: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _failed(p: Participant, error: str) -> Outcome:
    out = Outcome(p)
    out.errors.append(error)
    return out


def report(people, solo, together, rss_cold, rss_before, during, rss_after, server_log: str) -> int:
    ok = True
    print("\n| session | settings | same as solo | exceptions | s/Step (together) | lost clicks resent | reconnects |\n|---|---|---|---|---|---|---|")
    for p, alone, now in zip(people, solo, together):
        same = bool(alone.texts) and alone.texts == now.texts
        ok &= same and not now.errors and not alone.errors
        steps = ", ".join(f"{s:.2f}" for s in now.step_s)
        reconnects = sum(1 for s in now.connection[1:] if s != "CONNECTED")
        print(
            f"| {p.index} | `{p.describe()[len(str(p.index)) + 2:]}` | {'yes' if same else 'NO'} | {len(now.errors) + len(alone.errors) or 'none'} "
            f"| {steps} | {now.resent[0] + alone.resent[0]} | {reconnects} |"
        )
        for e in alone.errors + now.errors:
            print(f"|   | error: {e[:150]} | | | |")
    solo_steps = [s for o in solo for s in o.step_s]
    steps = [s for o in together for s in o.step_s]
    tracebacks = server_log.count("Traceback")
    ok &= tracebacks == 0
    print()
    print("| measure | value |\n|---|---|")
    print(f"| sessions × Steps | {len(people)} × {len(steps) // max(1, len(people))} |")
    if solo_steps:
        print(f"| s per Step alone: p50 / p95 | {statistics.median(solo_steps):.2f} / {lp.percentile(solo_steps, 0.95):.2f} |")
    if steps:
        print(f"| s per Step, {len(people)} at once: p50 / p95 | {statistics.median(steps):.2f} / {lp.percentile(steps, 0.95):.2f} |")
    print(f"| tracebacks in the server log | {tracebacks} |")
    fmt = lambda v: "n/a" if v is None else f"{v:.0f} MB"  # noqa: E731
    print(f"| server RSS: cold start | {fmt(rss_cold)} |")
    print(f"| server RSS: before (model loaded, solo sessions freed) | {fmt(rss_before)} |")
    print(f"| server RSS: peak during | {fmt(during)} |")
    if rss_before and rss_after:
        change = 100 * (rss_after - rss_before) / rss_before
        ok &= abs(change) <= 10
        print(f"| server RSS: after (sessions closed) | {fmt(rss_after)} ({change:+.1f}% vs before) |")
    print(f"\n{'PASS' if ok else 'FAIL'}: every stream equals its solo run, no exceptions, memory back within 10%" if ok else "\nFAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
