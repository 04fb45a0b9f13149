"""Contention benchmark: one participant runs a Benchmark sweep while another presses Step, on a real shared-mode
server with the embedded model. Does the Step still get the model within a few seconds?

    python scripts/contention.py                      # the full check: a 50-run sweep of 128-token runs
    python scripts/contention.py --quick              # a smoke test of the script itself (tiny sweep, few Steps)

What it does:
1. Starts `streamlit run app.py` in shared mode (SPECVIZ_MODE=shared, loopback only) with `--logger.level debug`, so
   the server logs every model turn it grants and how long that session waited for it (specviz.ui.access).
2. Session B (a headless Chromium) opens the step-through page and presses Step --solo-steps times alone.
3. Session A (another Chromium) opens the Benchmark page and sets up the sweep through the widgets, as a participant
   would: prompts per category 2, drafters prompt lookup + n-gram, k 2 and 4, repeats 4, max new tokens 128
   (2 prompts x (1 baseline + 2 x 2) settings x (1 warm-up + 4 repeats) = 50 runs), and presses Run benchmark.
4. While the sweep runs, B presses Step again and again (Reset when its run ends), each Step timed from the click
   until the page is idle again.
5. Reports the Step's queue wait (from the server log: the turns of "your round" granted while the sweep ran)
   p50 / p95 / max, the Step's click-to-drawn time p50 / p95, the sweep's wall time and run count, and the 1-minute
   load average before and after. Exits 1 if the p95 queue wait is over --max-p95-s (5 s), or a page raised.

Needs Debian's chromium and chromium-driver, and selenium (the browser tests use the same).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.browser.st_browser import (  # noqa: E402  (the browser tests' waits)
    click_button,
    exceptions,
    keyed,
    main_text,
    nudge_slider,
    open_page,
    slider_to_end,
    wait_idle,
)

TURN = re.compile(r"specviz turn: (?P<what>.+?) waited (?P<waited>[0-9.]+) s for")
STEP_TURN = "your round"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(log_path: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMLIT_", "SPECVIZ_"))}
    env.update(SPECVIZ_MODE="shared", HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    cmd = [
        sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port), "--server.headless", "true",
        "--server.address", "127.0.0.1", "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false",
        "--logger.level", "debug",
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2):
                return proc, url
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.25)
    proc.kill()
    raise SystemExit(f"the server did not start:\n{log_path.read_text(errors='replace')[-3000:]}")


def new_driver():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,2000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(180)
    return driver


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
    return found.group(0).removeprefix("= ") if found else "? runs"


def step_once(driver) -> float:
    """Press Step; seconds until the page is idle again."""
    start = time.monotonic()
    click_button(driver, "step", timeout=120)
    time.sleep(0.15)  # let the click's rerun begin before waiting for idle
    wait_idle(driver, 300, settle=0.2)
    return time.monotonic() - start


def sweep_running(driver) -> bool:
    from selenium.webdriver.common.by import By

    states = [e.get_attribute("data-test-script-state") for e in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stApp"]')]
    return "running" in states


def turns(log_path: Path, start: int) -> list[tuple[str, float]]:
    text = log_path.read_text(errors="replace")[start:]
    return [(m["what"], float(m["waited"])) for m in TURN.finditer(text)]


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tiny sweep and a few Steps: checks the script, measures nothing")
    parser.add_argument("--solo-steps", type=int, default=5)
    parser.add_argument("--max-p95-s", type=float, default=5.0, help="fail when the p95 Step queue wait is above this")
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="give up on the sweep after this long")
    args = parser.parse_args()

    log_path = Path(tempfile.mkdtemp(prefix="specviz-contention-")) / "server.log"
    proc, url = start_server(log_path)
    steps_driver = sweep_driver = None
    try:
        load_before = os.getloadavg()[0]
        steps_driver, sweep_driver = new_driver(), new_driver()
        open_page(steps_driver, url, "?max_new_tokens=256")
        solo = [step_once(steps_driver) for _ in range(2 if args.quick else args.solo_steps)]
        runs = setup_sweep(sweep_driver, url, args.quick)
        mark = len(log_path.read_text(errors="replace"))
        sweep_start = time.monotonic()
        click_button(sweep_driver, "bench_run")
        time.sleep(1.0)
        together: list[float] = []
        while sweep_running(sweep_driver) and time.monotonic() - sweep_start < args.timeout_s:
            together.append(step_once(steps_driver))
            if "This run is finished" in main_text(steps_driver):
                click_button(steps_driver, "reset")
                wait_idle(steps_driver, 120)
        sweep_s = time.monotonic() - sweep_start
        load_after = os.getloadavg()[0]
        raised = exceptions(steps_driver) + exceptions(sweep_driver)
        waits = [w for what, w in turns(log_path, mark) if what == STEP_TURN]
        sweep_turns = sum(1 for what, _ in turns(log_path, mark) if what != STEP_TURN)
        finished = "This session's results" in main_text(sweep_driver)
    finally:
        for d in (steps_driver, sweep_driver):
            if d is not None:
                d.quit()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()

    p95 = pct(waits, 95)
    print(f"sweep: {runs}, {sweep_s:.0f} s, {sweep_turns} model turns, finished: {finished}")
    print(f"Steps while it ran: {len(together)} (queue waits logged: {len(waits)})")
    print(f"Step queue wait (s):   p50 {pct(waits, 50):.2f}  p95 {p95:.2f}  max {max(waits, default=float('nan')):.2f}")
    print(f"Step click-to-drawn (s): alone p50 {pct(solo, 50):.2f}  during the sweep p50 {pct(together, 50):.2f}  p95 {pct(together, 95):.2f}")
    print(f"load average (1 min): before {load_before:.2f}  after {load_after:.2f}  ({os.cpu_count()} CPUs)")
    print(f"server log: {log_path}")
    if raised:
        print("a page raised:", raised)
        return 1
    if args.quick:
        return 0
    if not waits or not (p95 <= args.max_p95_s):
        print(f"FAIL: p95 Step queue wait {p95:.2f} s > {args.max_p95_s} s (or no Steps measured)")
        return 1
    print(f"OK: p95 Step queue wait {p95:.2f} s <= {args.max_p95_s} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
