"""Does the *At batch B* prediction match `specviz batch`'s measured points?

    python scripts/batch_check.py                                   # assets/profile_cpu.json against assets/batch_cpu.json
    python scripts/batch_check.py --profile p.json --batch b.json

For every measured B it prices both sides' measured passes (how many had r rows and width T: the batch shrinks as
streams end, and a verify is as wide as its widest row) with the profile's batch_pass_ms, adds one per-row overhead
outside the forward to both sides, the plain side's measured one (never the speculative time being predicted), and
the drafting from the profile's draft_ms_per_token; then prints the predicted ratio against the measured one. Two
diagnostics follow it: each side's measured mean forward against the profile's price for the same passes (the pass
model's own error), and the speculative side's overhead per row against the plain side's (what the prediction
leaves out). Then the crossover B and batched plain decoding's gain at B = 8. Exits 1 if a prediction is more than
--tolerance (15 %) off, 2 if the batch file predates the shapes (schema 1: re-measure). Loads no model.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specviz.core.theory import crossover_batch, predicted_batch_ratio, schedule_ms
from specviz.experiments.batch import BatchPoint, load_batch_results
from specviz.experiments.cost_profile import load_profile

REPO = Path(__file__).resolve().parents[1]


def predict(point: BatchPoint, passes: dict[int, tuple[float, ...]], draft_ms_per_token: float) -> tuple[float, float, float]:
    """(predicted ratio, profile's mean ms per plain pass, per speculative pass) for one measured B."""
    drafted = point.spec_drafted_per_row * sum(rows * n for rows, _, n in point.spec_schedule)
    ratio = predicted_batch_ratio(passes, point.plain_schedule, point.spec_schedule, point.plain_new_tokens, point.spec_new_tokens,
                                  point.plain_overhead_ms_per_row, drafted * draft_ms_per_token)  # fmt: skip
    per_pass = [schedule_ms(passes, s) / sum(n for _, _, n in s) for s in (point.plain_schedule, point.spec_schedule)]
    return ratio, per_pass[0], per_pass[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default=str(REPO / "assets" / "profile_cpu.json"))
    parser.add_argument("--batch", default=str(REPO / "assets" / "batch_cpu.json"))
    parser.add_argument("--tolerance", type=float, default=0.15)
    args = parser.parse_args(argv)
    profile = load_profile(Path(args.profile))
    loaded = load_batch_results(Path(args.batch))
    if loaded is None:
        print(f"no batch results at {args.batch}")
        return 2
    batch, points = loaded
    if not all(p.measured_shape for p in points):
        print(f"{args.batch} has no passes' shapes (schema {batch.get('schema')}); re-measure it with `python -m specviz batch --out`")
        return 2
    passes = {b: profile.batch_pass(b) for b in profile.batch_sizes}
    if batch.get("target") != profile.target or batch.get("threads") != profile.threads:
        print(f"warning: the profile ({profile.target}, {profile.threads} threads) and the batch run ({batch.get('target')}, "
              f"{batch.get('threads')} threads) did not measure the same thing; the prediction means little")  # fmt: skip
    draft_ms = float(profile.draft_ms_per_token.get(str(batch["drafter"]), 0.0))
    print(f"profile: {profile.device_name}, {profile.dtype}, {profile.threads} threads, context {profile.context_length}, load {profile.load_average}")
    print(f"batch: {batch['drafter']}, k={batch['k']}, {batch['device_name']}, {batch['threads']} threads; {draft_ms:.4f} ms per drafted token")
    print("| B | plain tok/s | speculative tok/s | ratio | predicted ratio | error | tokens per pass | verify width | drafts per row "
          "| rows per pass (plain, spec) | forward ms plain: measured / profile | spec: measured / profile "
          "| overhead ms per row: plain / spec | load average |")
    print("|---" * 14 + "|")
    worst, measured_ratios, predicted_ratios = 0.0, [], []
    for p in points:
        if not passes:
            print("the profile has no batched passes: `python -m specviz profile --batch 1,2,4,8,16,32`")
            return 2
        predicted, plain_pass, spec_pass = predict(p, passes, draft_ms)
        error = predicted / p.ratio - 1
        worst = max(worst, abs(error))
        measured_ratios.append((p.batch_size, p.ratio))
        predicted_ratios.append((p.batch_size, predicted))
        rows = [sum(r * n for r, _, n in schedule) / sum(n for _, _, n in schedule) for schedule in (p.plain_schedule, p.spec_schedule)]
        print(f"| {p.batch_size} | {p.plain_tokens_per_s:.1f} | {p.spec_tokens_per_s:.1f} | {p.ratio:.2f} | {predicted:.2f} | {error:+.0%} "
              f"| {p.spec_tokens_per_target_pass:.2f} | {p.spec_verify_width:.2f} | {p.spec_drafted_per_row:.2f} | {rows[0]:.1f}, {rows[1]:.1f} "
              f"| {p.plain_pass_ms:.1f} / {plain_pass:.1f} | {p.spec_pass_ms:.1f} / {spec_pass:.1f} "
              f"| {p.plain_overhead_ms_per_row:.2f} / {p.spec_overhead_ms_per_row:.2f} | {p.load_average} |")  # fmt: skip
    crossover = crossover_batch(*zip(*measured_ratios)) if measured_ratios else None
    predicted_crossover = crossover_batch(*zip(*predicted_ratios)) if predicted_ratios else None
    print(f"crossover B (ratio below 1.0): measured {crossover if crossover is not None else 'none up to the largest B'}, "
          f"predicted {predicted_crossover if predicted_crossover is not None else 'none'}")  # fmt: skip
    plain = {p.batch_size: p.plain_tokens_per_s for p in points}
    if 1 in plain and 8 in plain:
        print(f"batched plain decoding at B = 8: {plain[8] / plain[1]:.2f}x the tokens/s of B = 1")
    print(f"largest prediction error {worst:.0%} (tolerance {args.tolerance:.0%})")
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
