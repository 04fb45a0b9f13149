"""The protocol load test (`python scripts/load_test.py --client protocol`): N sessions through the real server, no
browsers.

Each session (specviz.loadtest.protocol) opens the page with its own prompt, drafter, seed and temperature in the
query string (the page's share-link parameters), then presses Step --steps times with --think-s seconds between
presses (a participant reads the page), starting at a random offset within the first think time so the room does
not click in lockstep. After every Step its token stream must equal the same session's solo run (each session
alone first, no think time). The server's own `specviz.timing` lines give the Step times (script_s of reruns that ran
a round) and the queue waits; psutil gives the server's RSS before, at its peak and --after-s after the sessions close.
"""

from __future__ import annotations

import json
import logging
import os
import random
import statistics
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from specviz.loadtest.protocol import RunResult, StSession
from specviz.ui.common.timing import parse_line

log = logging.getLogger("load_test")
MAX_PROTOCOL_SESSIONS = 200  # no browsers: the server is the limit
DRAFTERS = ("ngram", "lookup", "early-exit", "none")  # what a participant may pick on the default shared server
TEMPERATURES = (0.0, 0.7, 0.0, 1.0, 0.0, 1.3)
PROMPTS = (
    "Repeat exactly: the cat sat on the mat, the cat sat on the mat.",
    "Write a Python function that reverses a string.",
    "List the days of the week.",
    "What is speculative decoding? One sentence.",
    "Count from one to ten in words.",
    "Name three primary colours.",
    "Translate 'good morning' into French.",
    "Write a haiku about the sea.",
)


@dataclass(frozen=True)
class Person:
    index: int
    prompt: str
    drafter: str
    seed: int
    temperature: float

    def query(self, max_new_tokens: int) -> dict[str, str]:
        q = {"prompt": self.prompt, "drafter": self.drafter, "seed": str(self.seed), "max_new_tokens": str(max_new_tokens)}
        if self.temperature:
            q["temperature"] = f"{self.temperature:g}"
        return q


@dataclass
class Outcome:
    person: Person
    streams: list = field(default_factory=list)  # the token stream after every Step
    client_s: list[float] = field(default_factory=list)  # click -> script_finished, seen by the client
    errors: list[str] = field(default_factory=list)
    sidebar_reruns: int = 0  # Steps whose rerun redrew the sidebar (should be 0: Step runs in a fragment)


def people(n: int) -> list[Person]:
    return [
        Person(i, PROMPTS[i % len(PROMPTS)] + ("" if i < len(PROMPTS) else f" ({i})"), DRAFTERS[i % len(DRAFTERS)], 100 + i, TEMPERATURES[i % len(TEMPERATURES)])
        for i in range(n)
    ]


def finished(session: StSession) -> bool:
    """The page says the run is over (EOS or max new tokens came before the last Step): a Step then adds no round,
    in the solo run as in the room, so that is not an error."""
    return any("This run is finished" in t for t in session.texts())


def record_step(session: StSession, out: Outcome, n: int, result: RunResult) -> None:
    """What Step n + 1 shows: the client's time, whether its rerun redrew the sidebar, the page's rounds (an error
    when it did not advance and the run is not finished) and the token stream."""
    out.client_s.append(result.seconds)
    out.sidebar_reruns += result.touched_sidebar
    if session.metric("rounds") != str(n + 1) and not finished(session):
        out.errors.append(f"step {n + 1}: the page shows rounds={session.metric('rounds')!r}; alerts: {session.alerts()[:2]}")
    out.streams.append(session.token_stream())


def drive(url: str, p: Person, steps: int, max_new_tokens: int, think_s: float = 0.0, barrier: threading.Barrier | None = None, offset_s: float = 0.0) -> Outcome:
    """One participant: open, (wait for the others), Step `steps` times with think time between."""
    out = Outcome(p)
    phase = "open"
    session = StSession(url, p.query(max_new_tokens))
    try:
        session.open()
        if barrier is not None:
            phase = "barrier"
            barrier.wait(timeout=600)
        time.sleep(offset_s)
        for n in range(steps):
            phase = f"step {n + 1}"
            record_step(session, out, n, session.click("step"))
            if n + 1 < steps:
                time.sleep(think_s)
        out.errors += [f"page exception: {e[:200]}" for e in session.exceptions()]
    except Exception as exc:  # a session that fails is reported, not fatal to the others
        out.errors.append(f"{phase}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    finally:
        session.close()
    return out


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def timing_lines(log_path: Path | None, offset: int) -> list[dict]:
    """The server's timing lines written after byte `offset` of its log."""
    if log_path is None or not log_path.exists():
        return []
    with open(log_path, "rb") as f:
        f.seek(offset)
        text = f.read().decode("utf-8", errors="replace")
    return [fields for line in text.splitlines() if (fields := parse_line(line)) is not None]


def log_size(log_path: Path | None) -> int:
    return log_path.stat().st_size if log_path is not None and log_path.exists() else 0


def solo_runs(url: str, crowd: list[Person], steps: int, max_new_tokens: int) -> list[Outcome]:
    """Every participant alone, one after another: the reference streams."""
    solo = []
    for p in crowd:
        solo.append(drive(url, p, steps, max_new_tokens))
        log.info("solo #%d %s T=%g: %s", p.index, p.drafter, p.temperature, solo[-1].errors or "ok")
    return solo


def together(url: str, crowd: list[Person], steps: int, max_new_tokens: int, think_s: float, seed: int = 0) -> tuple[list[Outcome], float]:
    """Everyone at once (random start offsets within one think time); returns the outcomes and the phase's seconds
    from the barrier to the last Step."""
    rng = random.Random(seed)
    offsets = [rng.uniform(0, think_s) for _ in crowd]
    barrier = threading.Barrier(len(crowd) + 1)
    with ThreadPoolExecutor(len(crowd)) as pool:
        futures = [pool.submit(drive, url, p, steps, max_new_tokens, think_s, barrier, off) for p, off in zip(crowd, offsets)]
        barrier.wait(timeout=600)
        start = time.monotonic()
        outcomes = [f.result() for f in futures]
    return outcomes, time.monotonic() - start


def step_lines(lines: list[dict]) -> list[dict]:
    """The timing lines of reruns that ran a round on the step-through page (a Step's server-side time)."""
    return [t for t in lines if t.get("steps", 0) >= 1 and t.get("page") == "step-through"]


def summary(crowd: list[Person], solo: list[Outcome], outcomes: list[Outcome], lines: list[dict], wall_s: float, rss: dict, tracebacks: int) -> dict:
    """The JSON object the load test reports (and a few more fields under "detail")."""
    steps_run = step_lines(lines)
    server_step = [float(t["script_s"]) for t in steps_run]
    waits = [float(t["queue_wait_s"]) for t in steps_run]
    steps = sum(len(o.streams) for o in outcomes)
    equal = all(s.streams and s.streams == o.streams and len(o.streams) == len(s.streams) for s, o in zip(solo, outcomes))
    exceptions = sum(len(o.errors) for o in outcomes) + sum(len(s.errors) for s in solo) + tracebacks
    return {
        "sessions": len(crowd),
        "steps": steps,
        "all_equal_solo": bool(equal),
        "exceptions": exceptions,
        "server_step_s": {"p50": rounded(percentile(server_step, 0.5)), "p95": rounded(percentile(server_step, 0.95))},
        "queue_wait_s": {"p50": rounded(percentile(waits, 0.5)), "p95": rounded(percentile(waits, 0.95))},
        "steps_per_s": rounded(steps / wall_s if wall_s > 0 else None),
        "rss_mb": {k: rounded(v, 1) for k, v in rss.items()},
    }


def rounded(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(float(x), digits)


def details(solo: list[Outcome], outcomes: list[Outcome]) -> list[str]:
    """Human-readable lines per session (errors, mismatches, client-side times)."""
    out = []
    for s, o in zip(solo, outcomes):
        p = o.person
        same = s.streams == o.streams and bool(s.streams)
        client = statistics.median(o.client_s) if o.client_s else float("nan")
        out.append(f"#{p.index:<3} {p.drafter:<10} T={p.temperature:<4g} same as solo: {'yes' if same else 'NO'}  client s/Step p50 {client:.2f}  sidebar reruns {o.sidebar_reruns}")
        out += [f"      error: {e[:160]}" for e in s.errors + o.errors]
    return out


def start_run(timeout_s: float) -> None:
    """A load test's start: log with times to stderr, and end the whole process (exit code 3) after `timeout_s`, so
    a stuck run never holds the machine."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    watchdog = threading.Timer(timeout_s, lambda: os._exit(3))
    watchdog.daemon = True
    watchdog.start()


def cpu_model() -> str:
    """The CPU as lscpu names it, with its count: the line a measured table is labelled with."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown (no lscpu)"
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    return f"{fields.get('Model name', '?').strip()}, {fields.get('CPU(s)', '?').strip()} CPUs"


def print_result(result: dict, as_json: bool, width: int = 32) -> None:
    """One JSON object, or one `key value` line per field."""
    if as_json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        print(f"{key:{width}} {value}")
