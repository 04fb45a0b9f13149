"""Medusa heads against plain decoding and the n-gram model on the embedded target, measured (issue 27's table).

    python scripts/medusa_check.py                          # T=0 and T=0.7, every category + an open-ended paragraph
    python scripts/medusa_check.py --temperatures 0 --repeats 3 --json /tmp/medusa.json

What runs: the target at the default precision (float16 weights, float32 math on an x86 CPU) with 2 torch threads,
and per prompt plain decoding (the baseline), the n-gram model at its defaults, and Medusa heads as a chain and
as token trees, all in this one process, interleaved in a rotating order by specviz.experiments.bench.measure_setups
(a warm-up rotation discarded), wall clock. A setup's speedup on a prompt is the median over repeats of its
tokens/s over the baseline's in the same rotation; a category's is the geometric mean over its prompts.
Beside it: tokens per target pass (tau) and acceptance by head (of the rounds in which head i's token was tried,
the share accepted; a tree's head i is its depth-i level), from one more run of each setup with the same seed.
The prompts are the benchmark's (assets/prompts.json) plus one open-ended paragraph fixed here; nothing is tuned.
The load average is printed before and after, and the CPU by name: publish both with the table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specviz.config import RunConfig  # noqa: E402
from specviz.core.metrics import head_acceptance, speedup_disturbed  # noqa: E402
from specviz.experiments.bench import BASELINE, BenchPrompt, first_per_category, load_prompts, measure_setups  # noqa: E402
from specviz.experiments.measure import paired_ratio  # noqa: E402

OPEN_PARAGRAPH = BenchPrompt(
    "paragraph", "open-ended", "Write a paragraph about what makes a good neighbourhood to grow up in."
)  # fmt: skip
SETUPS = {  # name -> RunConfig changes; the baseline is plain decoding
    BASELINE: dict(drafter="none"),
    "n-gram k=8": dict(drafter="ngram"),
    "medusa chain k=2": dict(drafter="medusa", num_draft_tokens=2),
    "medusa chain k=3": dict(drafter="medusa", num_draft_tokens=3),
    "medusa chain k=4": dict(drafter="medusa", num_draft_tokens=4),
    "medusa tree W=2 k=3": dict(drafter="medusa", num_draft_tokens=3, tree_width=2),
    "medusa tree W=2 k=4": dict(drafter="medusa", num_draft_tokens=4, tree_width=2),
    "medusa tree W=3 k=5": dict(drafter="medusa", num_draft_tokens=5, tree_width=3),
    "medusa tree W=2 k=8": dict(drafter="medusa", num_draft_tokens=8, tree_width=2),
    "medusa tree W=3 k=12": dict(drafter="medusa", num_draft_tokens=12, tree_width=3),
}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def acceptance_by_head(records) -> list[tuple[int, int, int]]:
    """Per head 1..: (rounds that reached it, rounds that kept its token, rounds that drafted), from core.metrics."""
    return [(h.acceptance.reached, h.acceptance.accepted, h.acceptance.drafting_rounds) for h in head_acceptance(records)]


def measure_prompt(models, prompt: BenchPrompt, temperature: float, args) -> dict[str, dict]:
    from specviz.models import encode_prompt
    from specviz.runs import decoder_for

    ids = encode_prompt(models.target.tokenizer, prompt.prompt, True)
    base = RunConfig(temperature=temperature, max_new_tokens=args.max_new_tokens, seed=args.seed, medusa_heads=args.medusa_heads)
    configs = {name: replace(base, **change) for name, change in SETUPS.items() if name in args.setups}

    def factory(config: RunConfig):
        return lambda: decoder_for(config, models, ids, baseline=config.drafter == "none")

    samples = measure_setups({name: factory(c) for name, c in configs.items()}, args.repeats, args.warmup)
    plain = [s.tokens_per_s for s in samples[BASELINE]]
    out = {}
    for name, config in configs.items():
        runs = samples[name]
        decoder = factory(config)()
        decoder.run()
        stats = decoder.stats()
        out[name] = dict(
            speedup=paired_ratio([s.tokens_per_s for s in runs], plain).median,
            tokens_per_s=statistics.median(s.tokens_per_s for s in runs),
            tau=stats.new_tokens / max(1, stats.target_passes),
            heads=acceptance_by_head(decoder.records),
            draft_ms=statistics.median(s.draft_ms for s in runs),
            same=(decoder.generated == list(samples[BASELINE][0].generated)) if temperature == 0 else None,
        )
    return out


def summarize(results: dict, categories: list[str]) -> list[dict]:
    rows = []
    for (temperature, category), per_prompt in results.items():
        for name in per_prompt[0]:
            speedups = [p[name]["speedup"] for p in per_prompt]
            pooled = [[sum(p[name]["heads"][d][j] for p in per_prompt if len(p[name]["heads"]) > d) for j in range(3)] for d in range(4)]
            cond = " / ".join(f"{k / r:.0%}" if r else "–" for r, k, _ in pooled)
            uncond = " / ".join(f"{k / n:.0%}" if n else "–" for _, k, n in pooled)
            rows.append(dict(
                T=temperature, category=category, setup=name,
                speedup=math.exp(statistics.fmean(math.log(s) for s in speedups)),
                tau=statistics.fmean(p[name]["tau"] for p in per_prompt),
                heads=f"{cond} ({uncond})" if name.startswith("medusa") else "",
                same=all(p[name]["same"] for p in per_prompt) if temperature == 0 else None,
            ))  # fmt: skip
    for temperature in sorted({t for t, _ in results}):
        for name in SETUPS:
            cat_rows = [r for r in rows if r["T"] == temperature and r["setup"] == name and r["category"] in categories]
            if cat_rows:
                rows.append(dict(T=temperature, category="mean of 4", setup=name,
                                 speedup=statistics.fmean(r["speedup"] for r in cat_rows),
                                 tau=statistics.fmean(r["tau"] for r in cat_rows), heads="", same=None))  # fmt: skip
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| T | category | setup | speedup | tokens / pass | acceptance by head: given the earlier kept (of all drafting rounds) | same as plain |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        same = "–" if r["same"] is None else ("yes" if r["same"] else "NO")
        shown = f"{r['speedup']:.2f}×" + (" (disturbed: above tokens / pass)" if speedup_disturbed(r["speedup"], r["tau"]) else "")
        lines.append(f"| {r['T']:g} | {r['category']} | {r['setup']} | {shown} | {r['tau']:.2f} | {r['heads'] or '–'} | {same} |")
    return "\n".join(lines)


def heads_cost(models, heads_folder: str | None) -> float:
    """The heads' drafting cost as a fraction of a 1-token pass: median of 30 timed calls each."""
    import torch

    from specviz.models import HFCachedLM
    from specviz.runs import make_drafter

    drafter = make_drafter(RunConfig(drafter="medusa", medusa_heads=heads_folder), models.target, heads=models.heads)
    lm = HFCachedLM(models.target.model, models.target.vocab_size)
    lm.extend(list(range(100, 140)))
    hidden = torch.randn(models.target.model.config.hidden_size)

    def timed(fn) -> float:
        times = []
        for _ in range(30):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return statistics.median(times)

    def one_pass():
        lm.extend([200])
        lm.crop(40)

    return timed(lambda: drafter.head_logits(hidden, 200)) / timed(one_pass)


def main(argv: list[str] | None = None) -> int:
    import torch

    from specviz.models import load_model
    from specviz.runs import resolve_models

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 0.7])
    p.add_argument("--categories", nargs="+", default=["code", "prose", "copy", "qa"])
    p.add_argument("--per-category", type=int, default=3)
    p.add_argument("--setups", nargs="+", default=list(SETUPS), choices=list(SETUPS))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--medusa-heads", default=None, help="a heads folder (default: the shipped heads for the embedded target)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    if BASELINE not in args.setups:
        args.setups.insert(0, BASELINE)
    torch.set_num_threads(args.threads)
    before = load_average()
    target = load_model(RunConfig().target, "cpu", "auto")
    models = resolve_models(RunConfig(drafter="medusa", medusa_heads=args.medusa_heads), target=target)
    prompts = first_per_category(load_prompts(categories=args.categories), args.per_category) + [OPEN_PARAGRAPH]
    results: dict = {}
    start = time.perf_counter()
    for temperature in args.temperatures:
        for prompt in prompts:
            results.setdefault((temperature, prompt.category), []).append(measure_prompt(models, prompt, temperature, args))
            print(f"[{time.perf_counter() - start:5.0f}s] T={temperature:g} {prompt.category}/{prompt.title}", file=sys.stderr, flush=True)
    rows = summarize(results, args.categories)
    cost = heads_cost(models, args.medusa_heads)
    after = load_average()
    print(f"CPU: {cpu_name()}; torch threads {args.threads}; precision {target.precision}")
    print(f"load average before: {before}; after: {after}")
    print(f"heads' drafting cost c = {cost:.3f} of a 1-token pass (K = 4, one LM-head call over all heads)")
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(dict(cpu=cpu_name(), load_before=before, load_after=after, heads_cost=cost, rows=rows), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
