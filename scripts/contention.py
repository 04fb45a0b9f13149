"""Contention benchmark: one participant runs a long job while another presses Step, on a real shared-mode server
with the embedded model. Does the Step still get the model within a few seconds, whatever the long job?

    python scripts/contention.py                      # every long job at its largest settings, one after another
    python scripts/contention.py --jobs numerics-measure,numerics-run
    python scripts/contention.py --quick              # a smoke test of the script itself (tiny jobs, few Steps)

The long jobs (--jobs, all by default), each set up through the widgets as a participant would:
* benchmark: prompts per category 2, drafters prompt lookup + n-gram, k 2 and 4, repeats 4, max new tokens 128
  (2 prompts x (1 baseline + 2 x 2) settings x (1 warm-up + 4 repeats) = 50 runs), then Run benchmark;
* numerics-run / numerics-measure: the Numerics lab at its largest settings in shared mode: a prompt as long as the
  owner's cap allows (Policy.max_prompt_chars), max new tokens and k at the ends of their sliders (the owner's
  caps), low precision bfloat16 (the menu's first); then Run (four greedy decodes, two scoring sweeps) or Measure
  (one decode, a scoring sweep per precision);
* lab-long-prompt: the Exactness lab's fast sampler (early exit) with a prompt at the shared token budget made of
  4-token characters (U+10380 x 255: 1,020 tokens, fed raw; issue 32 measured a 108 s turn for 3,000 of them, before
  the budget), which the server prefills in passes of 256 tokens, a Step let in between two;
* step-long-prompt: the step-through page opened with a share link whose prompt is as long as the budget allows in
  4-token characters (U+10380 x 240 and the chat template, about 1,000 tokens), drafter early exit (its own cache
  prefilled too), one Step. Its own round is one "your round" turn among the other session's Steps.

What it does:
1. Starts `streamlit run app.py` in shared mode (SPECVIZ_MODE=shared, loopback only) with `--logger.level debug`, so
   the server logs every model turn it grants and how long that session waited for it (specviz.ui.common.turns).
2. Session B (a headless Chromium) opens the step-through page and presses Step --solo-steps times alone.
3. For each long job: session A (another Chromium) opens its page afresh, sets it up and starts it; while it runs,
   B presses Step again and again (Reset when its run ends), each Step timed from the click until the page is idle.
4. Reports, per job, the Step's queue wait (from the server log: the turns of "your round" granted while the job ran)
   p50 / p95 / max, the Step's click-to-drawn time p50 / p95, the job's wall time and model turns, and the 1-minute
   load average before and after. Exits 1 if for any job the p95 queue wait is over --max-p95-s (5 s) or the
   longest over --max-wait-s (10 s), a job did not finish, or a page raised.

Needs Debian's chromium and chromium-driver, and selenium (the browser tests use the same).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specviz.loadtest.browser import (  # the browser tests' waits
    click_button,
    exceptions,
    keyed,
    main_text,
    new_driver,
    nudge_slider,
    open_page,
    set_text,
    slider_to_end,
    slider_value,
    wait_idle,
)
from specviz.loadtest.server import start_server, stop_server

TURN = re.compile(r"specviz turn: (?P<what>.+?) waited (?P<waited>[0-9.]+) s for")
STEP_TURN = "your round"
LONG_PROMPT = "Write the opening paragraph of a short story about a lighthouse keeper who finds a message in a bottle. "


def add_option(driver, key: str, text: str) -> None:
    """Add one option to a multiselect by typing it (one rerun)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = keyed(driver, key).find_element(By.CSS_SELECTOR, "input")
    box.click()
    box.send_keys(text)
    box.send_keys(Keys.ENTER)
    box.send_keys(Keys.ESCAPE)
    wait_idle(driver, 60)


@dataclass(frozen=True)
class LongJob:
    """A long job as a participant starts it: set up on its page, started with a button, done when a text shows."""

    setup: Callable[[object, str, bool], str]  # (driver, url, quick) -> the settings, in words
    button: str  # the key of the button that starts it
    done_text: str  # on the page once the job has finished


def setup_sweep(driver, url: str, quick: bool) -> str:
    """The Benchmark page set up for the sweep; returns the page's own count ('50 runs')."""
    open_page(driver, url, "benchmark")
    if not quick:
        nudge_slider(driver, "bench_per_category", 1)  # 1 -> 2 prompts per category
        wait_idle(driver, 60)
        add_option(driver, "bench_drafters", "ngram")
        nudge_slider(driver, "bench_repeats", 1)  # 3 -> 4
        wait_idle(driver, 60)
        slider_to_end(driver, "bench_max_new_tokens")  # 128
        wait_idle(driver, 60)
    else:
        nudge_slider(driver, "bench_repeats", -2)  # 3 -> 1: 1 prompt x 3 settings x 2 = 6 runs
        wait_idle(driver, 60)
    found = re.search(r"= (\d+) runs?", main_text(driver))
    return "sweep of " + (found.group(0).removeprefix("= ") if found else "? runs")


def setup_numerics(driver, url: str, quick: bool) -> str:
    """The Numerics lab at its largest settings (quick: the default prompt, 8 new tokens)."""
    from specviz.workshop.policy import Policy

    open_page(driver, url, "numerics")
    if quick:
        nudge_slider(driver, "num_new", -3)  # 32 -> 8
        wait_idle(driver, 60)
        return f"default prompt, max new tokens {slider_value(driver, 'num_new')}, k {slider_value(driver, 'num_k')}"
    chars = Policy().max_prompt_chars  # the shared default: the server runs without the owner's settings
    set_text(driver, "num_prompt", (LONG_PROMPT * (chars // len(LONG_PROMPT) + 1))[:chars])
    wait_idle(driver, 60)
    for key in ("num_new", "num_k"):
        slider_to_end(driver, key)
        wait_idle(driver, 60)
    return f"prompt {chars:,} characters, max new tokens {slider_value(driver, 'num_new')}, k {slider_value(driver, 'num_k')}"


WIDE_CHAR = "\U00010380"  # 4 tokens in the embedded tokenizer (issue 32)


def setup_lab_long(driver, url: str, quick: bool) -> str:
    """The Exactness lab's fast sampler, prompt at the token budget in 4-token characters (quick: 10 of them)."""
    open_page(driver, url, "exactness")
    chars = 10 if quick else 255
    set_text(driver, "lab_real_prompt", WIDE_CHAR * chars)
    wait_idle(driver, 60)
    return f"fast sampler, early exit, prompt U+10380 x {chars} ({4 * chars:,} tokens raw)"


def setup_step_long(driver, url: str, quick: bool) -> str:
    """The step-through page from a share link: a long prompt of 4-token characters, early exit (quick: 10 of them)."""
    import urllib.parse

    chars = 10 if quick else 240
    driver.get(f"{url}/?{urllib.parse.urlencode({'prompt': WIDE_CHAR * chars, 'drafter': 'early-exit', 'max_new_tokens': '16'})}")
    time.sleep(1.0)
    wait_idle(driver, 180)
    return f"Step, early exit, prompt U+10380 x {chars} (about {4 * chars + 35:,} tokens with the chat template)"


JOBS: dict[str, LongJob] = {
    "benchmark": LongJob(setup_sweep, "bench_run", "This session's results"),
    "numerics-run": LongJob(setup_numerics, "num_run", "The four outputs, token by token"),
    "numerics-measure": LongJob(setup_numerics, "num_inv_run", "measured just now"),
    "lab-long-prompt": LongJob(setup_lab_long, "lab_real_run", "speculative: TV from p_target"),
    "step-long-prompt": LongJob(setup_step_long, "step", "Curves"),
}


def step_once(driver) -> float:
    """Press Step; seconds until the page is idle again."""
    start = time.monotonic()
    click_button(driver, "step", timeout=120)
    time.sleep(0.15)  # let the click's rerun begin before waiting for idle
    wait_idle(driver, 300, settle=0.2)
    return time.monotonic() - start


def turns(log_path: Path, start: int) -> list[tuple[str, float]]:
    text = log_path.read_text(errors="replace")[start:]
    return [(m["what"], float(m["waited"])) for m in TURN.finditer(text)]


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


@dataclass(frozen=True)
class JobResult:
    name: str
    settings: str
    wall_s: float
    job_turns: int
    steps: list[float]  # click-to-drawn seconds of the Steps pressed while the job ran
    waits: list[float]  # the Step's queue waits the server logged while the job ran
    finished: bool


def job_running(driver) -> bool:
    from selenium.webdriver.common.by import By

    states = [e.get_attribute("data-test-script-state") for e in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stApp"]')]
    return "running" in states


def run_job(name: str, steps_driver, job_driver, url: str, log_path: Path, args) -> JobResult:
    """Set the job up, start it, and press Step until it has finished (or --timeout-s passed)."""
    job = JOBS[name]
    settings = job.setup(job_driver, url, args.quick)
    mark = len(log_path.read_text(errors="replace"))
    start = time.monotonic()
    click_button(job_driver, job.button)
    time.sleep(1.0)
    together: list[float] = []
    while job_running(job_driver) and time.monotonic() - start < args.timeout_s:
        together.append(step_once(steps_driver))
        if "This run is finished" in main_text(steps_driver):
            click_button(steps_driver, "reset")
            wait_idle(steps_driver, 120)
    wall_s = time.monotonic() - start
    granted = turns(log_path, mark)
    waits = [w for what, w in granted if what == STEP_TURN]
    job_turns = sum(1 for what, _ in granted if what != STEP_TURN)
    return JobResult(name, settings, wall_s, job_turns, together, waits, job.done_text in main_text(job_driver))


def report(results: list[JobResult], solo: list[float], load: tuple[float, float], args) -> int:
    """Print one row per job (a Markdown table, as docs/workshop-safety.md keeps it); 1 when a job fails the bounds."""
    print(f"Step click-to-drawn alone: p50 {pct(solo, 50):.2f} s;  load average (1 min): before {load[0]:.2f}  after {load[1]:.2f}  ({os.cpu_count()} CPUs)")
    print("| long job | settings | wall | job's model turns | Steps during it | Step queue wait p50 / p95 / max | Step click-to-drawn p50 / p95 |")
    print("|---|---|---|---|---|---|---|")
    failed = []
    for r in results:
        p95, longest = pct(r.waits, 95), max(r.waits, default=float("nan"))
        print(
            f"| {r.name} | {r.settings} | {r.wall_s:.0f} s | {r.job_turns} | {len(r.steps)} | "
            f"{pct(r.waits, 50):.2f} / {p95:.2f} / {longest:.2f} s | {pct(r.steps, 50):.2f} / {pct(r.steps, 95):.2f} s |"
        )
        if not r.finished:
            failed.append(f"{r.name} did not finish")
        elif not args.quick and (not r.waits or not (p95 <= args.max_p95_s and longest <= args.max_wait_s)):
            failed.append(f"{r.name}: Step queue wait p95 {p95:.2f} s (bound {args.max_p95_s}), max {longest:.2f} s (bound {args.max_wait_s})")
    for line in failed:
        print("FAIL:", line)
    if not failed:
        print("OK" + ("" if args.quick else f": for every job the Step queue wait p95 <= {args.max_p95_s} s and max <= {args.max_wait_s} s"))
    return 1 if failed else 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", default=",".join(JOBS), help=f"comma-separated, in order, from: {', '.join(JOBS)}")
    parser.add_argument("--quick", action="store_true", help="tiny jobs and a few Steps: checks the script, measures nothing")
    parser.add_argument("--solo-steps", type=int, default=5)
    parser.add_argument("--max-p95-s", type=float, default=5.0, help="fail when a job's p95 Step queue wait is above this")
    parser.add_argument("--max-wait-s", type=float, default=10.0, help="fail when a job's longest Step queue wait is above this")
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="give up on a job after this long")
    args = parser.parse_args()
    args.jobs = [j.strip() for j in args.jobs.split(",") if j.strip()]
    unknown = [j for j in args.jobs if j not in JOBS]
    if unknown or not args.jobs:
        parser.error(f"unknown job(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(JOBS)}")
    return args


def main() -> int:
    args = parse_args()
    log_path = Path(tempfile.mkdtemp(prefix="specviz-contention-")) / "server.log"
    # shared mode, no inherited SPECVIZ_ settings, debug logging: the server log has every model turn it granted
    proc, url = start_server("shared", log_path, drop_env=("STREAMLIT_", "SPECVIZ_"), args=("--logger.level", "debug"))
    steps_driver = job_driver = None
    results: list[JobResult] = []
    try:
        load_before = os.getloadavg()[0]
        steps_driver, job_driver = new_driver("1400,2000"), new_driver("1400,2000")
        open_page(steps_driver, url, "?max_new_tokens=256")
        solo = [step_once(steps_driver) for _ in range(2 if args.quick else args.solo_steps)]
        for name in args.jobs:
            results.append(run_job(name, steps_driver, job_driver, url, log_path, args))
        load_after = os.getloadavg()[0]
        raised = exceptions(steps_driver) + exceptions(job_driver)
    finally:
        for d in (steps_driver, job_driver):
            if d is not None:
                d.quit()
        stop_server(proc)
    status = report(results, solo, (load_before, load_after), args)
    print(f"server log: {log_path}")
    if raised:
        print("a page raised:", raised)
        return 1
    return status


if __name__ == "__main__":
    raise SystemExit(main())
