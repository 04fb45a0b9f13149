"""How long the Speedup theory page takes to redraw after one α-slider move, in a real browser.

    python scripts/theory_latency.py                  # 15 moves, starts its own server (local mode), headless Chromium
    python scripts/theory_latency.py --moves 30 --json

Each move is one arrow-key press on the α slider (one step, alternating right and left, so the page never runs
into the slider's end). Timed inside the page (performance.now()): from the keydown to the app's script state going
to running (the widget sent its value), back at notRunning (the server ran the page and sent it), and to the first
two animation frames after that (the browser
has drawn the charts: plotly draws synchronously on the main thread, so a frame cannot come before it is done). It
prints median and p95 of both over the moves after the first, the server's own time per rerun from the
`specviz.timing` log (script_s), the load average before and after, and the CPU (lscpu). The goal: redraw ≤ 0.5 s.
Needs Debian's chromium and chromium-driver. Numbers from a busy machine are not the page's: say the load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from specviz.loadtest.browser import new_driver, open_page, slider_value, wait_idle
from specviz.loadtest.harness import cpu_model
from specviz.loadtest.server import start_server, stop_server
from specviz.ui.common.timing import parse_line

KEY = "theory_alpha"
ARM_JS = """
const app = document.querySelector('[data-testid="stApp"]');
const t = window.__theory_t = {down: null, running: null, idle: null, painted: null};
document.addEventListener('keydown', () => { if (t.down === null) t.down = performance.now(); }, {capture: true, once: true});
new MutationObserver((_, obs) => {
  const s = app.getAttribute('data-test-script-state');
  if (t.down === null) return;
  if (s === 'running' && t.running === null) t.running = performance.now();
  if (s === 'notRunning' && t.running !== null && t.idle === null) {
    t.idle = performance.now();
    obs.disconnect();
    requestAnimationFrame(() => requestAnimationFrame(() => { t.painted = performance.now(); }));
  }
}).observe(app, {attributes: true, attributeFilter: ['data-test-script-state']});
"""


def one_move(driver, right: bool, timeout_s: float = 60) -> tuple[float, float, float]:
    """Press one arrow key on the α slider; seconds from the key press to the script running, to the script idle
    again, and to the charts drawn."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    thumb = driver.find_element(By.CSS_SELECTOR, f'.st-key-{KEY} input[type="range"]')
    driver.execute_script("arguments[0].focus();", thumb)
    driver.execute_script(ARM_JS)
    ActionChains(driver).send_keys(Keys.ARROW_RIGHT if right else Keys.ARROW_LEFT).perform()
    deadline = time.monotonic() + timeout_s
    while True:
        t = driver.execute_script("return window.__theory_t")
        if t and t.get("painted") is not None:
            return tuple((t[when] - t["down"]) / 1000.0 for when in ("running", "idle", "painted"))
        if time.monotonic() > deadline:
            raise TimeoutError(f"no redraw within {timeout_s:.0f} s of the key press: {t}")
        time.sleep(0.02)


def p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))]


def measure(moves: int, mode: str) -> dict:
    """Start a server and a browser, open the theory page, move the slider `moves` times; the numbers."""
    log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"specviz_theory_latency_{os.getpid()}.log"
    load_before = os.getloadavg()
    proc, url = start_server(mode, log_path)
    driver = new_driver()
    try:
        open_page(driver, url, "theory", timeout=300)
        wait_idle(driver, 120)
        offset = log_path.stat().st_size
        times = []
        for i in range(moves):
            times.append(one_move(driver, right=i % 2 == 0))
            wait_idle(driver, 60, settle=0.2)
        final_value = slider_value(driver, KEY)
    finally:
        driver.quit()
        stop_server(proc)
    server = [t["script_s"] for line in log_path.read_bytes()[offset:].decode(errors="replace").splitlines() if (t := parse_line(line)) and t.get("page") == "theory"]
    running, idle, painted = ([t[i] for t in times[1:]] for i in range(3))  # the first move also warms the page
    return {
        "moves": moves, "alpha_after": final_value,
        "to_running_median_s": round(statistics.median(running), 3), "to_running_p95_s": round(p95(running), 3),
        "to_idle_median_s": round(statistics.median(idle), 3), "to_idle_p95_s": round(p95(idle), 3),
        "to_drawn_median_s": round(statistics.median(painted), 3), "to_drawn_p95_s": round(p95(painted), 3),
        "server_script_median_s": round(statistics.median(server), 3) if server else None,
        "load_average_before": [round(x, 2) for x in load_before], "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "cpu": cpu_model(),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--moves", type=int, default=15, help="slider moves (the first is left out of the statistics)")
    parser.add_argument("--mode", default="local", choices=("local", "shared"), help="SPECVIZ_MODE of the server")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.moves < 2:
        parser.error("--moves must be at least 2 (the first move is a warm-up)")
    result = measure(args.moves, args.mode)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"| α-slider move, {args.moves - 1} timed | median (s) | p95 (s) |\n|---|---|---|")
    print(f"| key press -> script running (the slider sends its value) | {result['to_running_median_s']} | {result['to_running_p95_s']} |")
    print(f"| key press -> script idle | {result['to_idle_median_s']} | {result['to_idle_p95_s']} |")
    print(f"| key press -> charts drawn | {result['to_drawn_median_s']} | {result['to_drawn_p95_s']} |")
    print(f"\nserver script per rerun (median): {result['server_script_median_s']} s")
    print(f"load average before {result['load_average_before']}, after {result['load_average_after']}; CPU: {result['cpu']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
