"""Does the theory page's *At batch B* prediction match `specviz batch`'s measured points?

    python scripts/batch_check.py                                   # assets/profile_cpu.json against assets/batch_cpu.json
    python scripts/batch_check.py --profile p.json --batch b.json

For every measured B it prints the measured plain and speculative tokens/s, their ratio and tokens per pass, and the
ratio the profile's batch_pass_ms predicts at that measured tokens per pass (the α that gives it at the run's k),
with the prediction's error; then the measured and predicted crossover B, and batched plain decoding's gain at B = 8.
Exits 1 if a prediction is more than --tolerance (15 %) off. Loads no model.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from specviz.core.theory import batch_plain_tokens_per_s, batch_speculative_tokens_per_s, crossover_batch, expected_tokens  # noqa: E402


def alpha_for(tokens_per_pass: float, k: int) -> float:
    """The α whose expected tokens per pass at k is tokens_per_pass (bisection; the curve rises with α)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_tokens(mid, k) < tokens_per_pass else (lo, mid)
    return (lo + hi) / 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default=str(REPO / "assets" / "profile_cpu.json"))
    parser.add_argument("--batch", default=str(REPO / "assets" / "batch_cpu.json"))
    parser.add_argument("--tolerance", type=float, default=0.15)
    args = parser.parse_args(argv)
    profile = json.loads(Path(args.profile).read_text(encoding="utf-8"))
    batch = json.loads(Path(args.batch).read_text(encoding="utf-8"))
    passes = {int(b): ms for b, ms in profile["batch_pass_ms"].items()}
    k = int(batch["k"])
    draft_ms = float(profile.get("draft_ms_per_token", {}).get(batch["drafter"], 0.0))
    print(f"profile: {profile['device_name']}, {profile['dtype']}, {profile['threads']} threads, load {profile['load_average']}")
    print(f"batch: {batch['drafter']}, k={k}, {batch['device_name']}, {batch['threads']} threads")
    print("| B | plain tok/s | speculative tok/s | ratio | tokens per pass | predicted ratio | error | load average |")
    print("|---|---|---|---|---|---|---|---|")
    worst, measured_ratios, predicted_ratios = 0.0, [], []
    for p in batch["points"]:
        b = int(p["batch_size"])
        if b not in passes:
            print(f"| {b} | no batched pass profiled at this B |")
            continue
        tau = float(p["spec_tokens_per_pass"])
        alpha = alpha_for(tau, k)
        predicted = batch_speculative_tokens_per_s(b, passes[b], alpha, k, draft_ms) / batch_plain_tokens_per_s(b, passes[b])
        error = predicted / p["ratio"] - 1
        worst = max(worst, abs(error))
        measured_ratios.append((b, p["ratio"]))
        predicted_ratios.append((b, predicted))
        print(f"| {b} | {p['plain_tokens_per_s']:.1f} | {p['spec_tokens_per_s']:.1f} | {p['ratio']:.2f} | {tau:.2f} | {predicted:.2f} | {error:+.0%} | {p.get('load_average', '')} |")
    crossover = crossover_batch(*zip(*measured_ratios)) if measured_ratios else None
    predicted_crossover = crossover_batch(*zip(*predicted_ratios)) if predicted_ratios else None
    print(f"crossover B (ratio below 1.0): measured {crossover if crossover is not None else 'none up to the largest B'}, predicted {predicted_crossover if predicted_crossover is not None else 'none'}")
    plain = {int(p["batch_size"]): p["plain_tokens_per_s"] for p in batch["points"]}
    if 1 in plain and 8 in plain:
        print(f"batched plain decoding at B = 8: {plain[8] / plain[1]:.2f}x the tokens/s of B = 1")
    print(f"largest prediction error {worst:.0%} (tolerance {args.tolerance:.0%})")
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
