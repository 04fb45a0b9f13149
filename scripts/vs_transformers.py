"""specviz's drafters beside transformers' own prompt lookup, on the embedded SmolLM2-135M, greedy.

For every prompt of the chosen categories (assets/prompts.json) it times, in one process on the same
prompt ids: transformers' plain ``model.generate(do_sample=False)`` on the float32 model and on the model at
specviz's precision (``--dtype``, default auto: fp16-weights on an x86-64 CPU), transformers' prompt lookup on
the latter (``prompt_lookup_num_tokens=k``, ``max_matching_ngram_size`` as given), and, at that precision,
specviz's plain decoding, its prompt lookup at the same k and its default drafter (RunConfig's defaults). It prints
(a) specviz plain decoding against transformers' float32 generate, (b) transformers' generate on the converted
model against its own float32 generate, (c) each library's drafters against its own plain decoding, (d) specviz's
plain decoding against transformers' generate at the same precision (the engine's own overhead), and the load
average before and after (measure on a quiet machine: below 0.5 before you start). The calls are
interleaved in a rotating order and repeated (specviz.experiments.measure); a speedup is each library's plain
decoding time over its speculative time, summed over a category's prompts, median [min-max] over
the repeats, under both the wall clock and this process's CPU time. It also checks that every
greedy output is token-identical to transformers' plain greedy output.

    python scripts/vs_transformers.py --k 4 10 --repeats 3 --threads 2 --out /tmp/vs_transformers.csv
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from specviz.config import EMBEDDED_TARGET, RunConfig
from specviz.experiments.measure import Spread, Timed, interleave, paired_ratio, timed
from specviz.experiments.prompts import BenchPrompt, load_prompts
from specviz.runs import RunModels, build_decoder

ROOT = Path(__file__).resolve().parent.parent

HF_PLAIN, SV_PLAIN, SV_DEFAULT = "hf plain", "specviz plain", "specviz default"  # at specviz's precision
HF_FP32 = "hf plain float32"  # transformers' generate on the float32 model: the bar specviz's plain decoding is held to


def hf_lookup(k: int) -> str:
    return f"hf lookup k={k}"


def sv_lookup(k: int, adaptive: bool = False) -> str:
    return f"specviz lookup k={k}{' adaptive' if adaptive else ''}"


@dataclass(frozen=True)
class Run:
    """One timed call: the new token ids it produced and its two clocks."""

    tokens: tuple[int, ...]
    wall_s: float
    cpu_s: float


def contenders(target, prompt_ids: list[int], args, fp32=None) -> dict[str, Callable[[], Run]]:
    """Name -> a zero-argument call that decodes the prompt once from scratch (prefill included). target: the model
    at specviz's precision; fp32: the same model in float32 (transformers' float32 generate), or None."""
    tok = target.tokenizer
    input_ids = torch.tensor([prompt_ids])
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    def hf(k: int | None, model=target.model) -> Callable[[], Run]:
        extra = {} if k is None else {"prompt_lookup_num_tokens": k, "max_matching_ngram_size": args.hf_ngram}

        def call() -> list[int]:
            with torch.inference_mode():
                out = model.generate(
                    input_ids,
                    attention_mask=torch.ones_like(input_ids),
                    do_sample=False,
                    temperature=None,
                    top_p=None,
                    top_k=None,
                    max_new_tokens=args.max_new_tokens,
                    pad_token_id=pad,
                    **extra,
                )
            return out[0, len(prompt_ids) :].tolist()

        return lambda: as_run(timed(call))

    def sv(config: RunConfig, baseline: bool = False) -> Callable[[], Run]:
        def call() -> list[int]:
            decoder = build_decoder(config, RunModels(target), prompt_ids, baseline=baseline)
            decoder.run()
            return decoder.generated

        return lambda: as_run(timed(call))

    base = RunConfig(temperature=0.0, max_new_tokens=args.max_new_tokens)
    calls: dict[str, Callable[[], Run]] = {HF_PLAIN: hf(None), SV_PLAIN: sv(base, baseline=True)}
    if fp32 is not None:
        calls[HF_FP32] = hf(None, fp32.model)
    for k in args.k:
        calls[hf_lookup(k)] = hf(k)
        calls[sv_lookup(k)] = sv(RunConfig(drafter="lookup", num_draft_tokens=k, auto_k=False, temperature=0.0, max_new_tokens=args.max_new_tokens))
        if args.adaptive:
            calls[sv_lookup(k, True)] = sv(RunConfig(drafter="lookup", num_draft_tokens=k, adaptive_k=True, temperature=0.0, max_new_tokens=args.max_new_tokens))
    calls[SV_DEFAULT] = sv(RunConfig(max_new_tokens=args.max_new_tokens))  # the default drafter and its defaults, greedy
    return calls


def as_run(t: Timed[list[int]]) -> Run:
    return Run(tuple(t.value), t.wall_s, t.cpu_s)


def measure(target, prompts: list[BenchPrompt], args, fp32=None) -> dict[str, dict[str, list[list[Run]]]]:
    """category -> contender -> per prompt, the kept repeats (interleaved with the other contenders)."""
    from specviz.models import encode_prompt

    results: dict[str, dict[str, list[list[Run]]]] = {}
    start = time.perf_counter()
    for prompt in prompts:
        prompt_ids = encode_prompt(target.tokenizer, prompt.prompt, True)
        runs = interleave(contenders(target, prompt_ids, args, fp32), repeats=args.repeats, warmup=args.warmup)
        per_cat = results.setdefault(prompt.category, {})
        for name, kept in runs.items():
            per_cat.setdefault(name, []).append(kept)
        print(f"[{time.perf_counter() - start:5.0f}s] {prompt.category}/{prompt.title}: {len(runs[HF_PLAIN][0].tokens)} new tokens", file=sys.stderr, flush=True)
    return results


def totals(per_prompt: list[list[Run]], clock: str) -> list[float]:
    """Per repeat, the seconds summed over a category's prompts."""
    return [sum(getattr(runs[i], clock) for runs in per_prompt) for i in range(len(per_prompt[0]))]


def speedup(cat: dict[str, list[list[Run]]], plain: str, spec: str, clock: str) -> Spread:
    return paired_ratio(totals(cat[plain], clock), totals(cat[spec], clock))


def ratio_of(cat: dict[str, list[list[Run]]], ours: str, theirs: str, clock: str) -> Spread:
    """Per repeat, specviz's speedup over transformers' speedup."""
    ours_s = [b / s for b, s in zip(totals(cat[SV_PLAIN], clock), totals(cat[ours], clock))]
    theirs_s = [b / s for b, s in zip(totals(cat[HF_PLAIN], clock), totals(cat[theirs], clock))]
    return paired_ratio(ours_s, theirs_s)


def identical(cat: dict[str, list[list[Run]]], name: str) -> bool:
    """Every repeat of name produced exactly transformers' plain greedy tokens, on every prompt."""
    return all(run.tokens == ref[0].tokens for runs, ref in zip(cat[name], cat[HF_PLAIN]) for run in runs)


def x(s: Spread) -> str:
    return f"{s.median:.2f}× [{s.low:.2f}–{s.high:.2f}]"


def report(results: dict[str, dict[str, list[list[Run]]]], args) -> str:
    """Markdown tables: one per clock, then the identity checks."""
    lines: list[str] = []
    sv_variants = [(k, False) for k in args.k] + ([(k, True) for k in args.k] if args.adaptive else [])
    for clock, label in (("wall_s", "wall clock"), ("cpu_s", "process CPU time")):
        lines += [f"\n**{label}** (speedup = plain time / speculative time, summed over the category's prompts; median [min–max] of {args.repeats} repeats)\n"]
        lines += ["| category | k | transformers lookup | specviz lookup | ratio | specviz default drafter |", "|---|---|---|---|---|---|"]
        means: dict[str, list[float]] = {"default": []}
        for category, cat in results.items():
            default = speedup(cat, SV_PLAIN, SV_DEFAULT, clock)
            means["default"].append(default.median)
            for k in args.k:
                theirs = speedup(cat, HF_PLAIN, hf_lookup(k), clock)
                ours = speedup(cat, SV_PLAIN, sv_lookup(k), clock)
                ratio = ratio_of(cat, sv_lookup(k), hf_lookup(k), clock)
                lines.append(f"| {category} | {k} | {x(theirs)} | {x(ours)} | **{x(ratio)}** | {x(default)} |")
            # each library at the setting that served it best on this category (by median speedup)
            best_hf = max(args.k, key=lambda k: speedup(cat, HF_PLAIN, hf_lookup(k), clock).median)
            best_sv = max(sv_variants, key=lambda v: speedup(cat, SV_PLAIN, sv_lookup(*v), clock).median)
            ratio = ratio_of(cat, sv_lookup(*best_sv), hf_lookup(best_hf), clock)
            lines.append(
                f"| {category} | best: {best_hf} vs {best_sv[0]}{' adaptive' if best_sv[1] else ''} | {x(speedup(cat, HF_PLAIN, hf_lookup(best_hf), clock))} "
                f"| {x(speedup(cat, SV_PLAIN, sv_lookup(*best_sv), clock))} | **{x(ratio)}** | |"
            )
        lines.append(f"| mean over categories | | | | | **{statistics.fmean(means['default']):.2f}×** |")
    lines += ["\n**greedy identity** (every repeat, every prompt, token-identical to transformers' plain greedy)\n"]
    names = [n for n in next(iter(results.values())) if n not in (HF_PLAIN, HF_FP32)]
    lines += ["| category | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for category, cat in results.items():
        lines.append(f"| {category} | " + " | ".join("yes" if identical(cat, n) else "**NO**" for n in names) + " |")
    return "\n".join(lines + headline(results, args))


def tokens_per_s(per_prompt: list[list[Run]]) -> list[float]:
    """Per repeat, new tokens per wall-clock second over a category's prompts."""
    return [sum(len(runs[i].tokens) for runs in per_prompt) / sum(runs[i].wall_s for runs in per_prompt) for i in range(len(per_prompt[0]))]


def tps_ratio(results, ours: str, theirs: str) -> Spread:
    """Tokens/s of ours over theirs, per repeat over every prompt of every category (wall clock)."""
    a = [sum(v) for v in zip(*(tokens_per_s(cat[ours]) for cat in results.values()))]
    b = [sum(v) for v in zip(*(tokens_per_s(cat[theirs]) for cat in results.values()))]
    return paired_ratio(a, b)


def summed(results, name: str, clock: str) -> list[float]:
    """Per repeat, name's seconds summed over every prompt of every category."""
    return [sum(v) for v in zip(*(totals(cat[name], clock) for cat in results.values()))]


def headline(results, args) -> list[str]:
    """The issue's comparisons, with the targets they check (wall clock), and specviz's plain decoding against
    transformers' generate on the same model (d: the engine's own overhead; speed, so above 1 is faster)."""
    cats = list(results.values())
    lines = ["\n**headline** (wall clock; tokens/s summed over every prompt, median [min–max] of the repeats)\n"]
    if all(HF_FP32 in cat for cat in cats):
        a = tps_ratio(results, SV_PLAIN, HF_FP32)
        b = tps_ratio(results, HF_PLAIN, HF_FP32)
        lines.append(f"(a) specviz plain decoding ({args.precision}) vs transformers generate float32: {x(a)} tokens/s — target ≥ 1.5×: {'met' if a.median >= 1.5 else 'NOT met'}")
        lines.append(f"(b) transformers generate on the {args.precision} model vs its own float32 generate: {x(b)}")
    for clock, label in (("wall_s", "wall clock"), ("cpu_s", "process CPU time")):
        plain = paired_ratio(*(summed(results, name, clock) for name in (HF_PLAIN, SV_PLAIN)))
        lines.append(f"(d) specviz plain decoding vs transformers generate, both at {args.precision} ({label}, every prompt): {x(plain)}")
    default = {c: speedup(cat, SV_PLAIN, SV_DEFAULT, "wall_s").median for c, cat in results.items()}
    mean = statistics.fmean(default.values())
    lines.append(f"(c) default drafter vs specviz plain at {args.precision}: mean {mean:.2f}× — target ≥ 1.3×: {'met' if mean >= 1.3 else 'NOT met'}")
    if "prose" in default:
        lines.append(f"    prose {default['prose']:.2f}× — target ≥ 0.98×: {'met' if default['prose'] >= 0.98 else 'NOT met'}")
    if "copy" in results:
        best = max(speedup(results["copy"], SV_PLAIN, sv_lookup(k), "wall_s").median for k in args.k)
        lines.append(f"    prompt lookup on copy (best k of {args.k}) {best:.2f}× — target ≥ 2.0×: {'met' if best >= 2.0 else 'NOT met'}")
    return lines


def write_csv(path: Path, results: dict[str, dict[str, list[list[Run]]]], prompts: list[BenchPrompt]) -> None:
    titles: dict[str, list[str]] = {}
    for p in prompts:
        titles.setdefault(p.category, []).append(p.title)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["category", "title", "contender", "repeat", "new_tokens", "wall_s", "cpu_s", "identical_to_hf_plain", "tokens"])
        for category, cat in results.items():
            for name, per_prompt in cat.items():
                for title, runs, ref in zip(titles[category], per_prompt, cat[HF_PLAIN]):
                    for i, run in enumerate(runs):
                        same = run.tokens == ref[0].tokens
                        writer.writerow([category, title, name, i, len(run.tokens), f"{run.wall_s:.4f}", f"{run.cpu_s:.4f}", same, " ".join(map(str, run.tokens))])


def read_csv(path: Path) -> dict[str, dict[str, list[list[Run]]]]:
    """The results of an earlier run, from its --out CSV (to print the tables again without measuring)."""
    results: dict[str, dict[str, list[list[Run]]]] = {}
    by_prompt: dict[tuple[str, str, str], list[Run]] = {}
    with path.open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            if row.get("tokens") is not None:
                tokens = tuple(int(t) for t in row["tokens"].split())
            else:  # an older file without the ids: keep only whether they matched
                tokens = (0,) if row["contender"] == HF_PLAIN or row["identical_to_hf_plain"] == "True" else (1,)
            by_prompt.setdefault((row["category"], row["title"], row["contender"]), []).append(Run(tokens, float(row["wall_s"]), float(row["cpu_s"])))
    for (category, _title, name), runs in by_prompt.items():
        results.setdefault(category, {}).setdefault(name, []).append(runs)
    return results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--prompts", type=Path, default=ROOT / "assets" / "prompts.json")
    p.add_argument("--categories", nargs="+", default=["code", "prose", "copy", "qa"])
    p.add_argument("--k", type=int, nargs="+", default=[4, 10], help="draft lengths, the same for both libraries")
    p.add_argument("--adaptive", action="store_true", help="also run specviz's lookup with adaptive k (starting at each k)")
    p.add_argument("--hf-ngram", type=int, default=2, help="transformers' max_matching_ngram_size (its default: 2)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3, help="kept repeats per contender (median and range reported)")
    p.add_argument("--warmup", type=int, default=1, help="repeats run first on each prompt and discarded")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: the machine is shared)")
    p.add_argument("--dtype", default="auto", help="specviz's precision (auto: fp16-weights on an x86-64 CPU); transformers also runs it")
    p.add_argument("--no-float32", action="store_true", help="skip transformers' float32 generate (comparisons a and b)")
    p.add_argument("--out", type=Path, default=None, help="also write every timed call here (CSV)")
    p.add_argument("--from-csv", type=Path, default=None, help="print the tables of an earlier --out file instead of measuring")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from specviz.models import load_model

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    prompts = load_prompts(args.prompts, args.categories)
    prompts = [p for c in args.categories for p in prompts if p.category == c]
    load_before = os.getloadavg()
    if args.from_csv:
        results = read_csv(args.from_csv)
        args.repeats = len(next(iter(next(iter(results.values())).values()))[0])
        args.precision = args.dtype
    else:
        target = load_model(EMBEDDED_TARGET, "cpu", args.dtype)
        args.precision = target.precision
        fp32 = None if args.no_float32 else (target if target.precision == "float32" else load_model(EMBEDDED_TARGET, "cpu", "float32"))
        results = measure(target, prompts, args, fp32)
    if args.out and not args.from_csv:
        write_csv(args.out, results, prompts)
    d = RunConfig()
    print(f"load average (1, 5, 15 min) before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}; after: " + " ".join(f"{v:.2f}" for v in os.getloadavg()))
    print(
        f"SmolLM2-135M-Instruct {args.precision} CPU, {args.threads} torch thread(s), greedy, max {args.max_new_tokens} new tokens, "
        f"{len(prompts)} prompts; transformers max_matching_ngram_size={args.hf_ngram}; specviz lookup n-grams "
        f"{d.ngram_max}..{d.ngram_min}; default drafter: {d.drafter} k={d.num_draft_tokens}{' adaptive' if d.adaptive_k else ''}"
        f"{f', threshold {d.ngram_threshold}' if d.drafter == 'ngram' else ''}"
    )
    print(report(results, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
