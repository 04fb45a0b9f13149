"""The issue-19 targets on the shipped CPU profiles: at the default precision (fp16-weights) a pass over 9 tokens
costs at most 1.8x its own 1-token pass, and no more than one float32 1-token pass.

    python -m specviz profile --dtype fp16-weights --threads 2 --repeats 7 --out assets/profile_cpu.json
    python -m specviz profile --dtype float32 --threads 2 --repeats 7 --out assets/profile_cpu_float32.json
    python scripts/check_profiles.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specviz.experiments.cost_profile import load_profile

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="check the shipped CPU profiles against issue 19's targets")
    p.add_argument("--default", type=Path, default=ROOT / "assets" / "profile_cpu.json")
    p.add_argument("--float32", type=Path, default=ROOT / "assets" / "profile_cpu_float32.json")
    args = p.parse_args(argv)
    fast, fp32 = load_profile(args.default), load_profile(args.float32)
    print("| profile | dtype | threads | load average | 1-token pass ms | 2 / 3 / 4 / 9 tokens, relative to 1 |")
    print("|---|---|---|---|---|---|")
    for name, prof in ((args.default.name, fast), (args.float32.name, fp32)):
        rel = " / ".join(f"{prof.pass_ms[n - 1] / prof.pass_ms[0]:.2f}" for n in (2, 3, 4, 9))
        print(f"| {name} | {prof.dtype} | {prof.threads} | {prof.load_average or '?'} | {prof.pass_ms[0]:.1f} | {rel} |")
    ratio, against = fast.pass_ms[8] / fast.pass_ms[0], fast.pass_ms[8] / fp32.pass_ms[0]
    ok = fast.dtype == "fp16-weights" and fp32.dtype == "float32"
    print(f"\n{fast.dtype}: 9-token pass / its 1-token pass = {ratio:.2f} (target <= 1.8): {'met' if ratio <= 1.8 else 'NOT met'}")
    print(f"{fast.dtype} 9-token pass / float32 1-token pass = {against:.2f} (target <= 1.0): {'met' if against <= 1.0 else 'NOT met'}")
    if not ok:
        print(f"warning: expected fp16-weights and float32 profiles, got {fast.dtype} and {fp32.dtype}")
    return 0 if ok and ratio <= 1.8 and against <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
