"""Does the theory page predict this machine better with the measured verify-cost curve than with one constant?

For every row of a benchmark table (default assets/bench_cpu.csv) it predicts the speedup from the row's
alpha (Leviathan's, or the one accepted/drafted implies), its k, and the drafter's cost c from a profile
(default assets/profile_cpu.json), three ways: with the profile's curve c_verify(k), with a constant verify
cost of 1 (the textbook assumption and the page's default), and with one measured constant, c_verify(4),
charged at every k. It prints the mean absolute error against the measured speedups (process CPU time,
the clock the shipped profile uses, and wall clock), overall and per drafter.

A second table isolates the cost model from the acceptance model: it predicts from each row's *measured*
tokens per target pass and drafted tokens per round (prompt lookup often drafts fewer than k), so only the
verify cost differs between the ways.

    python scripts/theory_check.py [--bench assets/bench_cpu.csv] [--profile assets/profile_cpu.json] [--c-from profile|bench]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from specviz.core.theory import speedup
from specviz.experiments.bench import read_bench
from specviz.experiments.cost_profile import load_profile

REPO = Path(__file__).resolve().parents[1]


def predictions(bench: pd.DataFrame, profile, c_from: str = "profile") -> pd.DataFrame:
    """One row per benchmark row: alpha, k, c and the three predictions."""
    curve, costs = profile.curve, profile.draft_cost
    rows = []
    for r in bench.itertuples():
        alpha = r.alpha if pd.notna(r.alpha) else r.alpha_implied
        if pd.isna(alpha):
            continue
        c = costs.get(r.drafter) if c_from == "profile" else r.draft_cost
        if c is None or pd.isna(c):
            continue
        alpha, k = min(1.0, max(0.0, float(alpha))), int(r.k)
        rows.append(
            {
                "category": r.category, "drafter": r.drafter, "k": k, "temperature": r.temperature, "alpha": alpha, "c": float(c),
                "measured_cpu": r.speedup_cpu, "measured_wall": r.speedup,
                "curve": speedup(alpha, k, float(c), curve),
                "constant 1": speedup(alpha, k, float(c), 1.0),
                f"constant {curve.at(4):.2f}": speedup(alpha, k, float(c), curve.at(4)),
            }
        )
    return pd.DataFrame(rows)


def _interp(curve, x: float) -> float:
    lo = int(x)
    return curve.at(lo) + (curve.at(lo + 1) - curve.at(lo)) * (x - lo)


def cost_model_predictions(bench: pd.DataFrame, profile, c_from: str = "profile") -> pd.DataFrame:
    """Predicted = measured tokens per pass / (verify cost at the mean drafted per round + drafted per round * c)."""
    curve, costs = profile.curve, profile.draft_cost
    rows = []
    for r in bench.itertuples():
        c = costs.get(r.drafter) if c_from == "profile" else r.draft_cost
        if c is None or pd.isna(c) or not r.target_passes:
            continue
        m = r.drafted / r.target_passes  # drafted tokens per round
        tpp = float(r.tokens_per_target_pass)
        rows.append(
            {
                "category": r.category, "drafter": r.drafter, "k": int(r.k), "measured_cpu": r.speedup_cpu, "measured_wall": r.speedup,
                "curve": tpp / (_interp(curve, m) + m * c),
                "constant 1": tpp / (1.0 + m * c),
                f"constant {curve.at(4):.2f}": tpp / (curve.at(4) + m * c),
            }
        )
    return pd.DataFrame(rows)


def mae_table(pred: pd.DataFrame) -> pd.DataFrame:
    ways = [c for c in pred.columns if c == "curve" or c.startswith("constant")]
    out = {}
    for measured in ("measured_cpu", "measured_wall"):
        for way in ways:
            err = (pred[way] - pred[measured]).abs()
            out[(measured.removeprefix("measured_"), way)] = {"all": err.mean(), **err.groupby(pred["drafter"]).mean().to_dict()}
    table = pd.DataFrame(out).T
    table.index.names = ["measured clock", "verify cost"]
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bench", default=str(REPO / "assets" / "bench_cpu.csv"))
    parser.add_argument("--profile", default=str(REPO / "assets" / "profile_cpu.json"))
    parser.add_argument("--c-from", choices=("profile", "bench"), default="profile", help="the drafter's cost c: from the profile (as the theory page does) or each bench row")
    args = parser.parse_args(argv)
    bench = read_bench(args.bench)
    profile = load_profile(args.profile)
    pred = predictions(bench, profile, args.c_from)
    print(f"{len(pred)} benchmark rows from {args.bench}; profile {profile.name} ({profile.clock} clock); c from the {args.c_from}")
    print("verify cost curve c_verify(k), k = 1..16: " + ", ".join(f"{profile.curve.at(k):.2f}" for k in range(1, 17)))
    print("draft cost c: " + ", ".join(f"{name} {c:.4f}" for name, c in profile.draft_cost.items()))
    print("\nmean absolute error of predicted vs measured speedup (lower is better):")
    print(mae_table(pred).to_string(float_format=lambda x: f"{x:.3f}"))
    print("\nthe cost model alone (measured tokens per pass and drafts per round; only the verify cost differs):")
    print(mae_table(cost_model_predictions(bench, profile, args.c_from)).to_string(float_format=lambda x: f"{x:.3f}"))
    print("\nmean predicted and measured speedup by drafter and k:")
    cols = [c for c in pred.columns if c in ("measured_cpu", "measured_wall", "curve") or c.startswith("constant")]
    print(pred.groupby(["drafter", "k"])[cols].mean().to_string(float_format=lambda x: f"{x:.2f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
