"""Two EAGLE heads for the embedded target, side by side in one process: plain decoding and, for each head, EAGLE's
default setup (its measured-best tree and draft vocabulary, fixed k) and the same under k: auto, interleaved on every
benchmark prompt; the medians of paired ratios say how much faster the new head drafts than the old one
(docs/eagle-head.md). Greedy outputs are checked against plain decoding's.

    python scripts/eagle_head_ab.py OLD_HEAD_DIR assets/eagle_smollm2_135m
    python scripts/eagle_head_ab.py OLD_HEAD_DIR assets/eagle_smollm2_135m --temperature 0.7

At T > 0 each setup samples its own text, so a ratio there also compares texts: read those loosely. The CPU and the
load average before and after are printed: publish them with the ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
from dataclasses import asdict, replace

import torch

from specviz.config import EMBEDDED_TARGET, RunConfig
from specviz.drafters.specs import MEASURED_BEST
from specviz.experiments.measure import paired_ratio
from specviz.experiments.prompts import load_prompts
from specviz.experiments.timed_runs import BASELINE, measure_setups
from specviz.models import encode_prompt, load_model
from specviz.models.environment import device_name
from specviz.runs import RunModels, build_decoder, load_target_eagle


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("old", help="the old head's folder")
    p.add_argument("new", help="the new head's folder")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--repeats", type=int, default=3, help="interleaved repeats per prompt after a warm-up (default 3)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    target = load_model(EMBEDDED_TARGET, "cpu", "auto")
    print(f"{device_name(target.device)}; load average before {load_before}", flush=True)
    models = {
        h: RunModels(target, eagle=load_target_eagle(folder, target)) for h, folder in (("old", args.old), ("new", args.new))
    }
    best = MEASURED_BEST["eagle"]
    base = RunConfig(temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=0)
    drafting = replace(base, drafter="eagle", **asdict(best))
    setups = {BASELINE: (replace(base, drafter="none"), "old")}
    for h in ("old", "new"):
        setups[f"{h} fixed"], setups[f"{h} auto"] = (replace(drafting, auto_k=False), h), (replace(drafting, auto_k=True), h)
    print(
        f"EAGLE's default: k = {best.num_draft_tokens}, tree width {best.tree_width}, V' = {best.draft_vocab}; T = {args.temperature}",
        flush=True,
    )
    ratios: dict[str, list[float]] = {n: [] for n in setups if n != BASELINE} | {"new/old fixed": [], "new/old auto": []}
    for prompt in load_prompts():
        ids = encode_prompt(target.tokenizer, prompt.prompt, True)
        factories = {
            n: (lambda c=c, m=models[h], ids=ids: build_decoder(c, m, ids, baseline=c.drafter == "none"))
            for n, (c, h) in setups.items()
        }
        samples = measure_setups(factories, args.repeats, 1)
        speed = {n: [s.tokens_per_s for s in runs] for n, runs in samples.items()}
        row = {n: paired_ratio(speed[n], speed[BASELINE]).median for n in setups if n != BASELINE}
        row |= {f"new/old {m}": paired_ratio(speed[f"new {m}"], speed[f"old {m}"]).median for m in ("fixed", "auto")}
        for n, v in row.items():
            ratios[n].append(v)
        same = all(runs[0].generated == samples[BASELINE][0].generated for runs in samples.values())
        check = f"; same as plain: {'yes' if same else 'NO'}" if args.temperature == 0 else ""
        print(
            f"{prompt.category:6s} {prompt.title[:26]:26s} " + "  ".join(f"{n} {v:.2f}x" for n, v in row.items()) + check,
            flush=True,
        )
        if args.temperature == 0 and not same:
            raise SystemExit("a greedy output differs from plain decoding's")
    for n, values in ratios.items():
        print(f"{n:14s} geometric mean {statistics.geometric_mean(values):.3f}  median {statistics.median(values):.3f}  "
              f"range {min(values):.3f}-{max(values):.3f}")  # fmt: skip
    print(f"load average after {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
