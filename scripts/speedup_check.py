"""Is the step-through page's measured speedup the real one? The page's number after N Steps beside the command line's
for the same run, and the bound no speedup can pass (tokens per target pass).

    python scripts/speedup_check.py                 # starts its own server (local mode, the defaults), one headless Chromium
    python scripts/speedup_check.py --steps 8 --cli-repeats 3 --json

It presses Step --steps times, --pause-s apart as a reader would, with the default settings (the first example prompt, the n-gram drafter, greedy), waits
until the background baseline has caught up (the metric no longer says "measuring…"), and reads the page's speedup and
tokens per target pass. Then `python -m specviz generate --check-baseline --json` decodes the same prompt, greedy, to
the same number of tokens, --cli-repeats times in fresh processes (plain decoding, then speculative, timed alone), and
the script prints the page's speedup against the median of the command line's. Run it on a quiet machine: it prints
the load average before and after and the CPU. Needs Debian's chromium and chromium-driver.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from specviz.loadtest.browser import metric_value, new_driver, open_page, timed_step, wait_for_baseline
from specviz.loadtest.harness import print_result
from specviz.loadtest.server import start_server, stop_server
from specviz.ui.common.prompts import load_examples
from specviz.workshop.queues import server_threads

REPO = Path(__file__).resolve().parents[1]


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        return next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), platform.processor())
    except OSError:
        return platform.processor()


def page_speedup(steps: int, timeout_s: float, pause_s: float) -> dict:
    """Step the page `steps` times; once the baseline covers the run, its speedup, tokens per pass and tokens."""
    log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"specviz_speedup_check_{os.getpid()}.log"
    proc, url = start_server("local", log_path)
    driver = new_driver()
    try:
        open_page(driver, url, timeout=300)
        for n in range(steps):
            timed_step(driver, n)
            time.sleep(pause_s)  # a person reads the round before the next click (the browser finishes drawing)
        shown = wait_for_baseline(driver, timeout_s)
        tokens = int(metric_value(driver, "tokens").split("/")[0])
        return {"shown": shown, "tokens_per_pass": float(metric_value(driver, "tokens / target pass")), "tokens": tokens}
    finally:
        driver.quit()
        stop_server(proc)


def cli_speedup(prompt: str, tokens: int, threads: int) -> dict:
    cmd = [sys.executable, "-m", "specviz", "generate", "--prompt", prompt, "--max-new-tokens", str(tokens), "--check-baseline", "--json"]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(threads)}).stdout
    stats = json.loads(out)["samples"][0]["stats"]
    sample = json.loads(out)["samples"][0]
    return {"speedup": stats["speedup"], "disturbed": stats["speedup_disturbed"], "tokens_per_pass": stats["tokens_per_target_pass"], "same": sample["same_as_baseline"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--cli-repeats", type=int, default=5)
    parser.add_argument("--pause-s", type=float, default=2.0, help="seconds between a Step's page going idle and the next click")
    parser.add_argument("--timeout-s", type=float, default=180.0, help="how long to wait for the baseline to catch up")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    page = page_speedup(args.steps, args.timeout_s, args.pause_s)
    prompt = load_examples()[0].prompt  # the page's default prompt
    threads = server_threads() or int(os.environ["OMP_NUM_THREADS"])  # the server's torch threads: the CLI gets as many
    cli = [cli_speedup(prompt, page["tokens"], threads) for _ in range(args.cli_repeats)]
    measured = [c["speedup"] for c in cli if c["speedup"] is not None]
    cli_median = statistics.median(measured) if measured else None
    shown = float(page["shown"].rstrip("×")) if page["shown"].endswith("×") else None
    result = {
        "cpu": cpu_name(),
        "steps": args.steps,
        "torch_threads": threads,
        "tokens": page["tokens"],
        "page_speedup": page["shown"],
        "page_tokens_per_pass": page["tokens_per_pass"],
        "page_at_most_tokens_per_pass": shown is not None and shown <= page["tokens_per_pass"],
        "cli_speedups": [round(c["speedup"], 3) if c["speedup"] is not None else "disturbed" for c in cli],
        "cli_speedup_median": round(cli_median, 3) if cli_median is not None else None,
        "cli_tokens_per_pass": cli[0]["tokens_per_pass"],
        "cli_same_as_plain_greedy": all(c["same"] for c in cli),
        "page_over_cli": round(shown / cli_median, 3) if shown is not None and cli_median else None,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
    }
    print_result(result, args.json, width=30)
    ok = result["page_at_most_tokens_per_pass"] and result["page_over_cli"] is not None and abs(result["page_over_cli"] - 1) <= 0.25
    print("within the bound and within 25 % of the command line" if ok else "NOT within the bound and 25 % of the command line", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
