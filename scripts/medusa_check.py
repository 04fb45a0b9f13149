"""Drafters that read the target (Medusa heads over the full and a draft vocabulary, EAGLE, token recycling) against
plain decoding and the n-gram model on the embedded target, measured (issue 27's table, extended by issue 34).

    python scripts/medusa_check.py                                  # T=0 and T=0.7, every category + an open paragraph
    python scripts/medusa_check.py --groups ngram medusa            # issue 27's table
    python scripts/medusa_check.py --groups medusa vocab --temperatures 0 --json /tmp/medusa.json
    python scripts/medusa_check.py --quick                          # a smoke run: one prose prompt, T=0, 1 repeat

What runs: the target at the default precision (float16 weights, float32 math on an x86 CPU) with 2 torch threads,
and per prompt plain decoding (the baseline), the n-gram model at its defaults, and the setups of the chosen groups
(medusa: the shipped heads as chains and trees; vocab: the same heads over draft vocabularies of 4k, 8k and 16k
tokens, which need their token counts, `python -m specviz train-heads --count-vocab --out assets/medusa_smollm2_135m`;
recycle: token recycling; eagle: the EAGLE head over the full and an 8k vocabulary, which needs the head,
`python -m specviz train-heads --kind eagle ...`), all in this one process, interleaved in a rotating order by
specviz.experiments.timed_runs.measure_setups (a warm-up rotation discarded), wall clock. A setup's speedup on a prompt is
the median over repeats of its tokens/s over the baseline's in the same rotation; a category's is the geometric mean
over its prompts. Beside it: tokens per target pass (tau), acceptance by head (of the rounds in which head i's token was
tried, the share accepted; a tree's head i is its depth-i level) and the drafting cost: the median drafting time of a
round (drafting a step per token for a chain) over the baseline's 1-token pass, from the same runs. A setup whose heads
are missing is left out with a message. The prompts are the benchmark's (assets/prompts.json) plus one open-ended
paragraph fixed here; nothing is tuned. The load average is printed before and after, and the CPU by name: publish both.
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

from specviz.config import RunConfig
from specviz.core.metrics import head_acceptance, speedup_disturbed
from specviz.experiments.measure import paired_ratio
from specviz.experiments.prompts import BenchPrompt, first_per_category, load_prompts
from specviz.experiments.timed_runs import BASELINE, measure_setups

OPEN_PARAGRAPH = BenchPrompt(
    "paragraph", "open-ended", "Write a paragraph about what makes a good neighbourhood to grow up in."
)  # fmt: skip
GROUPS = {  # group -> setup name -> RunConfig changes; the baseline (plain decoding) always runs
    "ngram": {"n-gram k=8": dict(drafter="ngram")},
    "medusa": {  # issue 27's setups
        "medusa chain k=2": dict(drafter="medusa", num_draft_tokens=2),
        "medusa chain k=3": dict(drafter="medusa", num_draft_tokens=3),
        "medusa chain k=4": dict(drafter="medusa", num_draft_tokens=4),
        "medusa tree W=2 k=3": dict(drafter="medusa", num_draft_tokens=3, tree_width=2),
        "medusa tree W=2 k=4": dict(drafter="medusa", num_draft_tokens=4, tree_width=2),
        "medusa tree W=3 k=5": dict(drafter="medusa", num_draft_tokens=5, tree_width=3),
        "medusa tree W=2 k=8": dict(drafter="medusa", num_draft_tokens=8, tree_width=2),
        "medusa tree W=3 k=12": dict(drafter="medusa", num_draft_tokens=12, tree_width=3),
    },
    "vocab": {
        **{f"medusa chain k=2 V'={v // 1024}k": dict(drafter="medusa", num_draft_tokens=2, draft_vocab=v) for v in (4096, 8192, 16384)},
        **{f"medusa tree W=2 k=3 V'={v // 1024}k": dict(drafter="medusa", num_draft_tokens=3, tree_width=2, draft_vocab=v) for v in (4096, 8192, 16384)},
    },
    "recycle": {
        "recycle chain k=4": dict(drafter="recycle", num_draft_tokens=4),
        "recycle tree W=2 k=4": dict(drafter="recycle", num_draft_tokens=4, tree_width=2),
        "recycle tree W=3 k=8": dict(drafter="recycle", num_draft_tokens=8, tree_width=3),
    },
    "eagle": {
        "eagle chain k=3": dict(drafter="eagle", num_draft_tokens=3),
        "eagle chain k=3 V'=8k": dict(drafter="eagle", num_draft_tokens=3, draft_vocab=8192),
        "eagle tree W=2 k=4 V'=8k": dict(drafter="eagle", num_draft_tokens=4, tree_width=2, draft_vocab=8192),
        "eagle tree W=3 k=8 V'=8k": dict(drafter="eagle", num_draft_tokens=8, tree_width=3, draft_vocab=8192),
    },
}
SETUPS = {BASELINE: dict(drafter="none")} | {name: change for group in GROUPS.values() for name, change in group.items()}
QUICK = ["n-gram k=8", "medusa tree W=2 k=3", "medusa tree W=2 k=3 V'=8k", "recycle tree W=2 k=4", "eagle chain k=3 V'=8k"]


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


def runnable(models, setups: dict[str, dict], base: RunConfig) -> dict[str, dict]:
    """The setups whose drafter can be built here (heads installed, token counts counted); the others named on stderr."""
    from specviz.runs import make_drafter

    out = {}
    for name, change in setups.items():
        try:
            if change.get("drafter") not in ("none", "ngram"):
                make_drafter(replace(base, **change), models)
        except ValueError as exc:
            print(f"leaving out {name}: {exc}", file=sys.stderr, flush=True)
            continue
        out[name] = change
    return out


def measure_prompt(models, prompt: BenchPrompt, temperature: float, setups: dict[str, dict], args) -> dict[str, dict]:
    from specviz.models import encode_prompt
    from specviz.runs import build_decoder

    ids = encode_prompt(models.target.tokenizer, prompt.prompt, True)
    base = RunConfig(auto_k=False, temperature=temperature, max_new_tokens=args.max_new_tokens, seed=args.seed, medusa_heads=args.medusa_heads,
                     eagle_head=args.eagle_head)  # fmt: skip
    configs = {name: replace(base, **change) for name, change in setups.items()}

    def factory(config: RunConfig):
        return lambda: build_decoder(config, models, ids, baseline=config.drafter == "none")

    samples = measure_setups({name: factory(c) for name, c in configs.items()}, args.repeats, args.warmup)
    plain = [s.tokens_per_s for s in samples[BASELINE]]
    one_pass = statistics.median(ms for s in samples[BASELINE] for ms in s.pass_ms(False))  # a 1-token target pass
    out = {}
    for name, config in configs.items():
        runs = samples[name]
        decoder = factory(config)()
        decoder.run()
        stats = decoder.stats()
        rounds = [len(s.verify_ms) for s in runs]
        drafting = [s.pass_ms(True) for s in runs]
        out[name] = dict(
            speedup=paired_ratio([s.tokens_per_s for s in runs], plain).median,
            tokens_per_s=statistics.median(s.tokens_per_s for s in runs),
            tau=stats.tokens_per_target_pass or 0.0,
            heads=acceptance_by_head(decoder.records),
            draft_per_round=statistics.median(s.draft_ms / max(1, n) for s, n in zip(runs, rounds)) / one_pass,
            draft_per_token=statistics.median(s.draft_ms / max(1, sum(s.drafted)) for s in runs) / one_pass,
            verify_cost=statistics.median(ms for d in drafting for ms in d) / one_pass if any(drafting) else 1.0,
            ms_per_token=statistics.median(1000.0 / s.tokens_per_s for s in runs),
            one_pass_ms=one_pass,
            same=(decoder.generated == list(samples[BASELINE][0].generated)) if temperature == 0 else None,
        )
    return out


def summarize(results: dict, categories: list[str], names: list[str]) -> list[dict]:
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
                draft=statistics.fmean(p[name]["draft_per_round"] for p in per_prompt),
                step=statistics.fmean(p[name]["draft_per_token"] for p in per_prompt),
                verify=statistics.fmean(p[name]["verify_cost"] for p in per_prompt),
                ms_per_token=statistics.fmean(p[name]["ms_per_token"] for p in per_prompt),
                heads=f"{cond} ({uncond})" if name.startswith(("medusa", "eagle")) else "",
                same=all(p[name]["same"] for p in per_prompt) if temperature == 0 else None,
            ))  # fmt: skip
    for temperature in sorted({t for t, _ in results}):
        for name in names:
            cat_rows = [r for r in rows if r["T"] == temperature and r["setup"] == name and r["category"] in categories]
            if cat_rows:
                rows.append(dict(T=temperature, category=f"mean of {len(cat_rows)}", setup=name,
                                 **{k: statistics.fmean(r[k] for r in cat_rows) for k in ("speedup", "tau", "draft", "step", "verify", "ms_per_token")},
                                 heads="", same=None))  # fmt: skip
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        "| T | category | setup | speedup | tokens / pass | drafting / round (per token), in 1-token passes | verify pass | ms / token "
        "| acceptance by head: given the earlier kept (of all drafting rounds) | same as plain |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        same = "–" if r["same"] is None else ("yes" if r["same"] else "NO")
        shown = f"{r['speedup']:.2f}×" + (" (disturbed: above tokens / pass)" if speedup_disturbed(r["speedup"], r["tau"]) else "")
        lines.append(f"| {r['T']:g} | {r['category']} | {r['setup']} | {shown} | {r['tau']:.2f} | {r['draft']:.3f} ({r['step']:.3f}) | "
                     f"{r['verify']:.2f} | {r['ms_per_token']:.1f} | {r['heads'] or '–'} | {same} |")  # fmt: skip
    return "\n".join(lines)


def headline(rows: list[dict]) -> str:
    """Per T: the best setup on prose (with the open paragraph beside it) and its mean over the four categories."""
    out = []
    for temperature in sorted({r["T"] for r in rows}):
        here = [r for r in rows if r["T"] == temperature and r["setup"] != BASELINE]
        prose = {r["setup"]: r for r in here if r["category"] == "prose"}
        para = {r["setup"]: r for r in here if r["category"] == "paragraph"}
        mean = {r["setup"]: r for r in here if r["category"].startswith("mean of")}
        for name in sorted(prose, key=lambda n: -prose[n]["speedup"])[:3]:
            out.append(f"T={temperature:g} {name}: prose {prose[name]['speedup']:.2f}×"
                       + (f", open paragraph {para[name]['speedup']:.2f}×" if name in para else "")
                       + (f", mean {mean[name]['speedup']:.2f}×" if name in mean else "")
                       + f", tau {prose[name]['tau']:.2f}, drafting {prose[name]['draft']:.3f} of a pass per round")  # fmt: skip
    return "\n".join(out)


def heads_cost(models, heads_folder: str | None, draft_vocab: int = 0) -> float:
    """The Medusa heads' drafting cost (the heads and one LM-head read over their rows) as a fraction of a 1-token
    pass: median of 30 timed calls each."""
    import torch

    from specviz.models import HFCachedLM
    from specviz.runs import make_drafter

    drafter = make_drafter(RunConfig(drafter="medusa", medusa_heads=heads_folder, draft_vocab=draft_vocab), models)
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
    p.add_argument("--groups", nargs="+", default=None, choices=list(GROUPS), help="groups of setups to run (default, without --setups: all)")
    p.add_argument("--setups", nargs="+", default=None, choices=list(SETUPS), help="single setups to run, besides --groups")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--medusa-heads", default=None, help="a heads folder (default: the shipped heads for the embedded target)")
    p.add_argument("--eagle-head", default=None, help="an EAGLE head folder (default: the shipped head for the embedded target)")
    p.add_argument("--quick", action="store_true", help="a smoke run: one prose prompt and the paragraph, T=0, 1 repeat, 16 tokens, a few setups")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    groups = args.groups if args.groups is not None else ([] if args.setups else list(GROUPS))
    names = list(dict.fromkeys([name for group in groups for name in GROUPS[group]] + (args.setups or [])))
    if args.quick:
        args.temperatures, args.categories, args.per_category, args.repeats, args.warmup, args.max_new_tokens = [0.0], ["prose"], 1, 1, 0, 16
        names = args.setups or QUICK
    torch.set_num_threads(args.threads)
    before = load_average()
    target = load_model(RunConfig().target, "cpu", "auto")
    wanted = {d: any(SETUPS[n]["drafter"] == d for n in names) for d in ("medusa", "eagle")}
    where = RunConfig(medusa_heads=args.medusa_heads, eagle_head=args.eagle_head)
    models = resolve_models(where, target=target, drafters=[d for d, want in wanted.items() if want], eagle_of=_lenient_eagle)
    setups = {BASELINE: SETUPS[BASELINE]} | runnable(models, {n: SETUPS[n] for n in names}, where)
    prompts = first_per_category(load_prompts(categories=args.categories), args.per_category) + [OPEN_PARAGRAPH]
    results: dict = {}
    start = time.perf_counter()
    for temperature in args.temperatures:
        for prompt in prompts:
            results.setdefault((temperature, prompt.category), []).append(measure_prompt(models, prompt, temperature, setups, args))
            print(f"[{time.perf_counter() - start:5.0f}s] T={temperature:g} {prompt.category}/{prompt.title}", file=sys.stderr, flush=True)
    rows = summarize(results, args.categories, list(setups))
    costs = {}
    if models.heads is not None:
        costs["medusa"] = heads_cost(models, args.medusa_heads)
        for vocab in (4096, 8192, 16384):
            try:
                costs[f"medusa V'={vocab // 1024}k"] = heads_cost(models, args.medusa_heads, vocab)
            except ValueError:  # no token counts
                break
    after = load_average()
    print(f"CPU: {cpu_name()}; torch threads {args.threads}; precision {target.precision}; {args.max_new_tokens} new tokens; {args.repeats} repeats")
    print(f"load average before: {before}; after: {after}")
    for name, c in costs.items():
        print(f"{name}: the heads' drafting call c = {c:.3f} of a 1-token pass (one LM-head read over all heads)")
    print(headline(rows))
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(dict(cpu=cpu_name(), load_before=before, load_after=after, heads_cost=costs, rows=rows), indent=2))
    return 0


def _lenient_eagle(folder, target):
    """The EAGLE head, or None when it is not installed (its setups are then left out, not the whole run)."""
    from specviz.runs import load_target_eagle

    try:
        return load_target_eagle(folder, target)
    except ValueError as exc:
        print(f"no EAGLE head: {exc}", file=sys.stderr, flush=True)
        return None


if __name__ == "__main__":
    sys.exit(main())
