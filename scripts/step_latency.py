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
import os
import statistics
import sys
from pathlib import Path

from specviz.loadtest.browser import new_driver, open_page, timed_step
from specviz.loadtest.harness import print_result
from specviz.loadtest.server import start_server, stop_server
from specviz.ui.common.timing import parse_line


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
        clicks = [timed_step(driver, n) for n in range(args.steps)]
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
