"""Compare drafters on the embedded target: plain decoding vs prompt lookup vs the context n-gram model
vs early exit, at a fixed k and with adaptive k, over prompts by category (code, prose, copy, qa).

    python scripts/compare_drafters.py                      # every prompt in assets/prompts.json, T=0
    python scripts/compare_drafters.py --temperatures 0 1 --repeats 3 --csv /tmp/compare.csv

Every prompt is decoded plainly (the baseline: same process, sampling and seed) and with each
drafter, through specviz.experiments.timed_runs.measure_setups, the harness `python -m specviz bench` uses: the runs
of one prompt are interleaved in a rotating order, a warm-up rotation is discarded, and a setup's
speedup on a prompt is the median over repeats of its speed / the baseline's in the same rotation.
By default speed is tokens per CPU-second of this single-threaded process, which other jobs on
shared cores disturb far less than the wall clock (on an oversubscribed CPU two torch threads
spin and stall); --clock wall --threads 2 measures what a user sees on an idle machine. Each
category row: speedup is the geometric mean of per-prompt speedups; alpha (Leviathan's
E[sum_v min(p, q)]) and accepted/drafted pool every verified position of the category.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from specviz.config import EMBEDDED_TARGET, RunConfig
from specviz.core.decoding import SpeculativeDecoder
from specviz.core.metrics import Totals, pooled
from specviz.drafters import NGramDrafter, NoDrafter
from specviz.experiments.prompts import BenchPrompt, first_per_category
from specviz.experiments.prompts import load_prompts as bench_load_prompts
from specviz.experiments.timed_runs import BASELINE, RunSample, measure_setups

ROOT = Path(__file__).resolve().parent.parent

DRAFTERS = ("lookup", "ngram", "ngram-greedy", "early-exit")  # ngram-greedy: argmax drafts scored with a one-hot q


@dataclass(frozen=True)
class Result:
    """One configuration on one prompt: statistics of the first kept repeat (a fixed seed decodes the same
    tokens every repeat), the median speed and the paired speedup over the repeats."""

    category: str
    title: str
    setup: str  # "baseline" or "<drafter> k=<k>[ adaptive]"
    temperature: float
    new_tokens: int
    target_passes: int
    drafted: int
    accepted: int
    overlap_sum: float  # specviz.core.metrics.Totals: Σ over checked positions of Σ_v min(p, q) (one-hot q: p_target)
    overlap_count: int  # the checked positions (Totals.checked), so α pools over prompts
    tokens_per_s: float  # median over repeats, per CPU-second or wall-clock second (--clock)
    speedup: float  # median over repeats of tokens_per_s / the baseline's in the same rotation
    speedup_low: float  # min and max of those ratios
    speedup_high: float
    same_as_baseline: bool | None  # greedy only


def load_prompts(path: Path, categories: list[str], per_category: int) -> list[BenchPrompt]:
    """The benchmark's prompt set (validated by specviz.experiments.prompts.load_prompts), the first few of each category."""
    prompts = bench_load_prompts(path, categories)
    return first_per_category([p for cat in categories for p in prompts if p.category == cat], per_category)


def make_decoder(target, early_exit, prompt_ids: list[int], drafter: str, k: int, adaptive: bool, temperature: float, args) -> SpeculativeDecoder:
    """A fresh run of one setup; drafter 'none' is the plain-decoding baseline."""
    from specviz.models import HFCachedLM
    from specviz.runs import RunModels, make_drafter

    kind = "ngram" if drafter == "ngram-greedy" else drafter
    config = RunConfig(
        drafter=kind,
        num_draft_tokens=k,
        adaptive_k=adaptive,
        temperature=temperature,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
        ngram_threshold=args.ngram_threshold,
        ngram_max=args.ngram_max,
    )
    if drafter == "none":
        built = NoDrafter()
    elif drafter == "ngram-greedy":
        built = NGramDrafter(target.vocab_size, config.ngram_max, config.ngram_min, config.ngram_threshold, mode="greedy")
    else:
        built = make_drafter(config, RunModels(target, early_exit=early_exit))
    decode = config.decode_config(target.eos_token_ids)
    if adaptive and args.max_k:
        decode = replace(decode, max_draft_tokens=args.max_k)
    return SpeculativeDecoder(HFCachedLM(target.model, target.vocab_size), built, prompt_ids, decode)


def speed(sample: RunSample, clock: str) -> float:
    return sample.tokens_per_cpu_s if clock == "cpu" else sample.tokens_per_s


def measure_prompt(target, early_exit, prompt: BenchPrompt, setups: list[tuple[str, int, bool]], temperature: float, args) -> list[Result]:
    """Baseline and every setup on one prompt, interleaved and repeated by the library's harness."""
    from specviz.experiments.measure import paired_ratio
    from specviz.models import encode_prompt

    prompt_ids = encode_prompt(target.tokenizer, prompt.prompt, True)
    all_setups = [("none", 0, False)] + setups

    def name(drafter: str, k: int, adaptive: bool) -> str:
        return BASELINE if drafter == "none" else f"{drafter} k={k}{' adaptive' if adaptive else ''}"

    def factory(drafter: str, k: int, adaptive: bool) -> Callable[[], SpeculativeDecoder]:
        return lambda: make_decoder(target, early_exit, prompt_ids, drafter, k, adaptive, temperature, args)

    samples = measure_setups({name(*s): factory(*s) for s in all_setups}, args.repeats, args.warmup)
    base = samples[BASELINE]
    results = []
    for setup in all_setups:
        runs = samples[name(*setup)]
        s, first = runs[0].stats, runs[0]
        ratio = paired_ratio([speed(r, args.clock) for r in runs], [speed(b, args.clock) for b in base])
        results.append(
            Result(
                category=prompt.category,
                title=prompt.title,
                setup=name(*setup),
                temperature=temperature,
                new_tokens=s.new_tokens,
                target_passes=s.target_passes,
                drafted=s.drafted,
                accepted=s.accepted,
                overlap_sum=s.overlap_sum,
                overlap_count=s.checked,
                tokens_per_s=statistics.median(speed(r, args.clock) for r in runs),
                speedup=ratio.median,
                speedup_low=ratio.low,
                speedup_high=ratio.high,
                same_as_baseline=(first.generated == base[0].generated) if temperature == 0 else None,
            )
        )
    return results


def summarize(results: list[Result]) -> list[dict]:
    """One row per (temperature, category, setup): speedups as geometric means over prompts of the
    per-prompt paired medians, with the lowest and highest paired ratio of any repeat; counts pooled."""
    groups: dict[tuple, list[Result]] = {}
    for r in results:
        groups.setdefault((r.temperature, r.category, r.setup), []).append(r)
    for r in results:  # an "all" row per setup
        groups.setdefault((r.temperature, "all", r.setup), []).append(r)
    rows = []
    for (temp, cat, setup), rs in groups.items():
        speedups = [r.speedup for r in rs]
        pool = pooled(Totals(rounds=r.target_passes, new_tokens=r.new_tokens, drafted=r.drafted, accepted=r.accepted,
                             checked=r.overlap_count, overlap_sum=r.overlap_sum) for r in rs)  # fmt: skip
        same = [r.same_as_baseline for r in rs if r.same_as_baseline is not None]
        rows.append(
            {
                "T": temp,
                "category": cat,
                "setup": setup,
                "tok/s": statistics.median(r.tokens_per_s for r in rs),
                "speedup": math.exp(statistics.fmean(math.log(x) for x in speedups)),
                "range": f"{min(r.speedup_low for r in rs):.2f}–{max(r.speedup_high for r in rs):.2f}",
                "alpha": pool.alpha,
                "acc/drafted": pool.acceptance_rate,
                "tok/pass": pool.tokens_per_target_pass,
                "same": all(same) if same else None,
            }
        )
    return rows


def format_table(rows: list[dict]) -> str:
    """A Markdown table, README-ready."""
    cols = ["T", "category", "setup", "tok/s", "speedup", "range", "alpha", "acc/drafted", "tok/pass", "same"]

    def cell(v) -> str:
        if v is None:
            return "–"
        if isinstance(v, bool):
            return "yes" if v else "NO"
        if isinstance(v, float):
            return f"{v:.2f}"
        return str(v)

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--prompts", type=Path, default=ROOT / "assets" / "prompts.json")
    p.add_argument("--categories", nargs="+", default=["code", "prose", "copy", "qa"])
    p.add_argument("--per-category", type=int, default=3, help="prompts per category")
    p.add_argument("--drafters", nargs="+", choices=DRAFTERS, default=["lookup", "ngram", "early-exit"])
    p.add_argument("--k", type=int, nargs="+", default=[4], help="fixed k values (each also run adaptively unless --no-adaptive)")
    p.add_argument("--no-adaptive", action="store_true")
    p.add_argument("--only-adaptive", action="store_true")
    p.add_argument("--max-k", type=int, default=0, help="ceiling for adaptive k (0: the engine's default)")
    p.add_argument("--temperatures", type=float, nargs="+", default=[0.0])
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3, help="timed repeats per setup; medians and min-max are reported")
    p.add_argument("--warmup", type=int, default=1, help="rotations run first and discarded, per prompt and temperature")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ngram-threshold", type=float, default=RunConfig.ngram_threshold)
    p.add_argument("--ngram-max", type=int, default=RunConfig.ngram_max)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: on a shared, oversubscribed CPU two threads spin and stall)")
    p.add_argument("--clock", choices=["cpu", "wall"], default="cpu", help="cpu: tokens per CPU-second of this process (robust when other jobs share the cores; use with --threads 1); wall: tokens per wall-clock second")
    p.add_argument("--csv", type=Path, default=None, help="also write every per-prompt result here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    import torch

    from specviz.models import load_model
    from specviz.runs import resolve_models

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    prompts = load_prompts(args.prompts, args.categories, args.per_category)
    modes = [True] if args.only_adaptive else [False] if args.no_adaptive else [False, True]
    setups = [(d, k, a) for d in args.drafters for k in args.k for a in modes]
    start = time.perf_counter()
    target = load_model(EMBEDDED_TARGET, "cpu", "float32")
    early_exit = resolve_models(RunConfig(), target=target, drafters=[d for d in args.drafters if d == "early-exit"]).early_exit
    results: list[Result] = []
    for temperature in args.temperatures:
        for prompt in prompts:
            results += measure_prompt(target, early_exit, prompt, setups, temperature, args)
            print(f"[{time.perf_counter() - start:6.0f}s] T={temperature} {prompt.category}/{prompt.title} done", file=sys.stderr, flush=True)
    if args.csv:
        import csv

        with args.csv.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=[f.name for f in fields(Result)])
            writer.writeheader()
            writer.writerows(asdict(r) for r in results)
    rows = summarize(results)
    rows.sort(key=lambda r: (r["T"], r["category"] != "all", r["category"], r["setup"] != "baseline", r["setup"]))
    print(format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
