"""Acceptance by draft position over the benchmark prompt set, against the constant alpha the formula assumes.

For each drafter it decodes every prompt of assets/prompts.json (greedy by default) with a fixed k, pools
the records, and prints the conditional acceptance at each draft position i (accepted at i / rounds that
reached i) with its count, vLLM's unconditional per-position rate, and what the per-position rates do to
the best k compared with one alpha, using the measured verify-cost curve of a profile.

    python scripts/acceptance_by_position.py [--drafters ngram,lookup,early-exit] [-k 8] [--max-new-tokens 48] [--threads 1]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specviz.config import EMBEDDED_TARGET, RunConfig
from specviz.core.metrics import run_metrics
from specviz.core.theory import best_k, best_k_by_position, expected_tokens, expected_tokens_by_position
from specviz.experiments.cost_profile import load_profile
from specviz.experiments.prompts import load_prompts
from specviz.viz.metrics import decay_note, reliable_rates

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--drafters", default="ngram,lookup,early-exit")
    parser.add_argument("-k", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--categories", default=None, help="e.g. code,copy (default: all)")
    parser.add_argument("--target", default=EMBEDDED_TARGET)
    parser.add_argument("--profile", default=str(REPO / "assets" / "profile_cpu.json"))
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)

    import torch

    from specviz.models import encode_prompt, load_model
    from specviz.runs import RunModels, build_decoder

    if args.threads:
        torch.set_num_threads(args.threads)
    profile = load_profile(args.profile)
    target = load_model(args.target, "cpu")
    prompts = load_prompts(categories=args.categories.split(",") if args.categories else None)
    for drafter in args.drafters.split(","):
        records = []
        for p in prompts:
            config = RunConfig(target=args.target, drafter=drafter, num_draft_tokens=args.k, auto_k=False, temperature=args.temperature, max_new_tokens=args.max_new_tokens)
            decoder = build_decoder(config, RunModels(target), encode_prompt(target.tokenizer, p.prompt, True))
            records += decoder.run()
            print(f"  {drafter} {p.category} {p.title!r}: {len(decoder.records)} rounds", file=sys.stderr, flush=True)
        m = run_metrics(records)
        print(f"\n== {drafter}, k = {args.k}, T = {args.temperature:g}, {len(prompts)} prompts, {m.rounds} rounds ({m.drafting_rounds} drafted)")
        print(f"alpha {m.alpha:.3f}  accepted/drafted {m.acceptance_rate:.3f}  mean acceptance length {m.mean_acceptance_length:.3f}  tokens/pass {m.tokens_per_target_pass:.3f}")
        print(" i  reached  accepted  P(kept i | reached i)  vLLM per-position (unconditional)")
        for pos in m.position_acceptance:
            print(f"{pos.position:2d}  {pos.reached:7d}  {pos.accepted:8d}  {pos.rate if pos.rate is not None else float('nan'):21.3f}  {pos.unconditional:.3f}")
        c = profile.draft_cost.get(drafter, 0.0)
        rates = reliable_rates(m)
        if m.alpha is not None and rates:
            kc, kp = best_k(m.alpha, c, profile.curve), best_k_by_position(rates, c, profile.curve)
            print(f"best k with one alpha: {kc} ({expected_tokens(m.alpha, kc):.2f} tokens/pass predicted); "
                  f"with the per-position rates: {kp} ({expected_tokens_by_position(rates, kp):.2f})")
            print(decay_note(m, c, profile.curve, f"the verify-cost curve of {profile.name}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
