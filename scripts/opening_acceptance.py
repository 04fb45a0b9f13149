"""Is a run's first round like the rest? Position-1 acceptance of the first drafted round against the second and the
later ones, per drafter, at a fixed k (at each drafter's measured-best tree width and draft vocabulary) over every benchmark prompt: why k: auto does not count the first round as
evidence (AutoCosts.opening_evidence; docs/benchmarks.md, "The first round is not evidence"). Untimed.

    python scripts/opening_acceptance.py                      # greedy, k = 2, every one-model drafter but early exit
    python scripts/opening_acceptance.py --temperature 0.7 --seeds 3
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from collections import Counter

from specviz.config import RunConfig
from specviz.drafters.specs import drafter_spec
from specviz.experiments.bench import SweepModels, SweepSpec
from specviz.experiments.prompts import DEFAULT_PROMPTS, load_prompts

DRAFTERS = ("ngram", "lookup", "medusa", "eagle", "recycle")
ROUNDS = ("first", "second", "later")


def tally(records) -> Counter:
    """Per round kind: drafted rounds (_n) and those that kept their first draft (_kept)."""
    out: Counter = Counter()
    for i, r in enumerate(records):
        if r.num_drafted:
            kind = ROUNDS[min(i, 2)]
            out[f"{kind}_n"] += 1
            out[f"{kind}_kept"] += r.num_accepted >= 1
    return out


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--drafters", nargs="+", default=list(DRAFTERS), choices=list(DRAFTERS))
    p.add_argument("-k", type=int, default=2, help="fixed k of every run (default 2)")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seeds", type=int, default=1, help="T > 0: runs per prompt, seeds 0..N-1 (default 1)")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--prompts", default=str(DEFAULT_PROMPTS))
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="auto")
    args = p.parse_args()

    from specviz.models import load_model
    from specviz.runs import build_decoder, prompt_ids

    target = load_model(RunConfig.target, args.device, args.dtype)
    spec = SweepSpec(
        drafters=tuple(args.drafters), ks=(args.k,), temperatures=(args.temperature,), max_new_tokens=args.max_new_tokens
    )
    models = SweepModels(target, spec).resolved()
    counts = {d: Counter() for d in args.drafters}
    for prompt in load_prompts(args.prompts):
        ids = prompt_ids(target, prompt.prompt, True, max_new_tokens=args.max_new_tokens, num_draft_tokens=16)
        for drafter in args.drafters:
            best = drafter_spec(drafter).defaults
            config = models.config(drafter, args.k, args.temperature, best.tree_width)  # as auto_k_check's setups
            config = dataclasses.replace(config, draft_vocab=best.draft_vocab)
            for seed in range(args.seeds if args.temperature > 0 else 1):
                decoder = build_decoder(dataclasses.replace(config, seed=seed), models.run_models, ids)
                if args.temperature > 0:  # every run generates the same number of tokens, as auto_k_check's do
                    decoder.config = dataclasses.replace(decoder.config, eos_token_ids=())
                counts[drafter] += tally(decoder.run())
    print(f"first draft kept, fixed k = {args.k}, T = {args.temperature:g}, every prompt, {args.max_new_tokens} tokens:")
    for drafter, c in counts.items():
        cols = "   ".join(f"{kind}: {c[f'{kind}_kept']}/{c[f'{kind}_n']}"
                           + (f" = {c[f'{kind}_kept'] / c[f'{kind}_n']:.2f}" if c[f"{kind}_n"] else "") for kind in ROUNDS)  # fmt: skip
        print(f"{drafter:8s} {cols}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
