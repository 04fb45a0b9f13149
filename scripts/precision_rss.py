"""Resident memory of the embedded SmolLM2-135M at each precision, each loaded in a fresh process, and how far a
position's logits move inside a 9-token pass (1-token vs 9-token pass, max |Δ logit|: batch invariance).

Neither is a timing: they do not depend on how busy the machine is. Each precision loads in its own subprocess (so
one's freed pages cannot hide another's), then the passes run so lazily allocated buffers count.

    python scripts/precision_rss.py [--precisions float32 fp16-weights int8-dynamic]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import json, resource, sys
import psutil
from specviz.models import EMBEDDED_TARGET, encode_prompt, load_model
from specviz.experiments.numerics import batch_dependence
before = psutil.Process().memory_info().rss
target = load_model(EMBEDDED_TARGET, "cpu", {precision!r})
text = "The lighthouse keeper climbed the stairs, counting each step as he went, until he reached the lamp room at the top."
ids = encode_prompt(target.tokenizer, text, chat=True)
moved = batch_dependence(target, ids[:-9], ids[-9:], max_k=8)[-1]
rss = psutil.Process().memory_info().rss
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({{"precision": target.precision, "rss": rss, "model_rss": rss - before, "peak": peak, "moved": moved}}))
"""


def measure(precision: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD.format(precision=precision)], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="RSS of the embedded model per precision")
    p.add_argument("--precisions", nargs="+", default=["float32", "fp16-weights", "int8-dynamic"])
    args = p.parse_args(argv)
    rows = [measure(name) for name in args.precisions]
    print("| precision (resolved) | RSS after load + passes | of which the model | peak RSS (load included) | 1-token vs 9-token pass, max abs logit difference |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['precision']} | {r['rss'] / 2**20:.0f} MiB | {r['model_rss'] / 2**20:.0f} MiB | {r['peak'] / 2**20:.0f} MiB | {r['moved']:.1e} |")
    if len(rows) >= 2 and rows[0]["model_rss"] > 0:
        print(f"\n{rows[1]['precision']} / {rows[0]['precision']} model RSS: {rows[1]['model_rss'] / rows[0]['model_rss']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
