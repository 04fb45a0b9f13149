"""How long a Step takes in a real browser, alone, with the default settings: click -> the page idle again.

    python scripts/step_latency.py                 # starts its own server (local mode, the defaults), one headless Chromium
    python scripts/step_latency.py --steps 7 --json

It presses Step --steps times (default 7) and reports, for Steps 2..N (the first one also prefills and builds the
page): click -> idle p50 in the browser (timed in the page: the click and the moment the app's script state is back to
notRunning, read from a MutationObserver), and from the server's `specviz.timing` log the server-side Step time p50
(script_s of the fragment runs that ran a round) and the round's own time p50 (round_s). It prints the load average
before and after, so a table can say how quiet the machine was. Needs Debian's chromium and chromium-driver.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scripts.load_test import new_driver, start_server, stop_server  # noqa: E402
from specviz.ui.timing import parse_line  # noqa: E402
from tests.browser.st_browser import metric_value, open_page, wait_idle  # noqa: E402

OBSERVE_JS = """
const app = document.querySelector('[data-testid="stApp"]');
window.__specviz_t = {click: null, running: null, idle: null};
if (!window.__specviz_obs) {
  window.__specviz_obs = new MutationObserver(() => {
    const t = window.__specviz_t, s = app.getAttribute('data-test-script-state');
    if (t.click === null) return;
    if (s === 'running' && t.running === null) t.running = performance.now();
    if (s === 'notRunning' && t.running !== null && t.idle === null) t.idle = performance.now();
  });
  window.__specviz_obs.observe(app, {attributes: true, attributeFilter: ['data-test-script-state']});
}
const button = document.querySelector('.st-key-step button');
window.__specviz_t.click = performance.now();
button.click();
"""


def one_step(driver, rounds_before: int, timeout_s: float = 300) -> float:
    """Click Step in the page; seconds from the click until the script is idle with one more round shown."""
    driver.execute_script(OBSERVE_JS)
    deadline = time.monotonic() + timeout_s
    while metric_value(driver, "rounds") != str(rounds_before + 1):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no round {rounds_before + 1} after {timeout_s:.0f} s")
        time.sleep(0.05)
    wait_idle(driver, timeout_s, settle=0.3)
    t = driver.execute_script("return window.__specviz_t")
    if not t or t.get("idle") is None or t.get("click") is None:
        raise RuntimeError(f"the page's script state was not observed going running -> notRunning: {t}")
    return (t["idle"] - t["click"]) / 1000.0


def print_result(result: dict, as_json: bool, width: int = 32) -> None:
    """One JSON object, or one `key value` line per field."""
    if as_json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        print(f"{key:{width}} {value}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--mode", default="local", choices=("local", "shared"), help="SPECVIZ_MODE of the server (local: a user alone, the defaults)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"specviz_step_latency_{os.getpid()}.log"
    load_before = os.getloadavg()
    proc, url = start_server(args.mode, log_path)
    driver = new_driver()
    try:
        open_page(driver, url, timeout=300)
        offset = log_path.stat().st_size
        clicks = [one_step(driver, n) for n in range(args.steps)]
    finally:
        driver.quit()
        stop_server(proc)
    lines = [t for line in log_path.read_bytes()[offset:].decode(errors="replace").splitlines() if (t := parse_line(line)) and t.get("steps", 0) >= 1]
    later = lines[1:]  # Steps 2..N, as for the browser times
    result = {
        "steps": args.steps,
        "click_to_idle_s": [round(c, 3) for c in clicks],
        "click_to_idle_p50_steps_2_on": round(statistics.median(clicks[1:]), 3) if len(clicks) > 1 else None,
        "server_step_p50_s": round(statistics.median(t["script_s"] for t in later), 3) if later else None,
        "round_p50_s": round(statistics.median(t["round_s"] for t in later), 3) if later else None,
        "queue_wait_p50_s": round(statistics.median(t["queue_wait_s"] for t in later), 3) if later else None,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
    }
    print_result(result, args.json)
    if not args.json:
        if result["server_step_p50_s"] is not None and result["round_p50_s"] is not None:
            over = result["server_step_p50_s"] - result["round_p50_s"]
            print(f"server-side Step p50 - round p50 = {over * 1000:.0f} ms (the goal: at most 250 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
