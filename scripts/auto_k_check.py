"""k: auto against plain decoding and against the best fixed k, per drafter x category x temperature (issue 44's goals:
auto never below 0.97x plain and never below 0.95x the best fixed k of its cell).

For each prompt and temperature, plain decoding, k: auto and every fixed k in --ks run interleaved (specviz.experiments
.timed_runs.measure_setups: warm-up rotations discarded, the order shifting every rotation, so drift on a busy machine
hits every setup alike); a setup's speed is the median tokens/s over its repeats, a cell's ratio the median over the
category's prompts. Every setup runs the drafter at its measured-best tree width and draft vocabulary; the fixed ks are
that setting with k swept. At temperature 0 auto's output must equal plain decoding's (exit code 1 otherwise), and
each setup runs --repeats times. At T > 0 the setups sample different texts even from one seed (a k changes how the
generator is drawn from, so texts part at the first rejection), and one draw's luck moves a 48-token run by 2x: each
prompt is sampled with --seeds seeds (every setup of a seed starts from the same generator state; one timed run each)
and a setup's speed is its median over those texts. One that draws the end-of-text token early would compare its
prefill-heavy tokens/s with a longer run's: there every setup ignores end-of-text and generates --max-new-tokens
tokens. --out writes the table (and the machine) as JSON.

    python scripts/auto_k_check.py          # every one-model drafter (n-gram, lookup, early exit, Medusa, EAGLE, recycle),
                                            # every category, T = 0 and 0.7, 2 prompts a category
    python scripts/auto_k_check.py --drafters ngram --categories prose --per-category 1 --repeats 1 --max-new-tokens 16

--profile PATH (repeatable) also times k: auto pricing its rounds with that profile ('auto@STEM'), interleaved with
the rest: a profile measured on this machine (`python -m specviz profile --out PATH`) against the shipped one.

    python scripts/auto_k_check.py --drafters ngram medusa --categories code --per-category 1 --profile here.json

--trace PATH writes, instead of timing anything, the k auto chose round by round and the tokens each round kept, on the
first prose and the first copying prompt, for each of --drafters (greedy): assets/auto_k_rounds_cpu.json, drawn on the
Benchmark page (specviz.viz.bench.auto_k_rounds_figure). auto's k depends on acceptance, not on time, so a trace needs
no quiet machine.

    python scripts/auto_k_check.py --trace assets/auto_k_rounds_cpu.json --drafters ngram medusa --max-new-tokens 64

--modeled times nothing either: every setup (those setups() builds) runs once over every prompt of each category and is
charged a modeled time, per round c_verify(drafted) + drafted*c + r (r only when it drafted; a plain round 1) from the
costs k: auto prices with (the profile's, or --curve), so a policy can be compared on a busy machine. --variant (one
column each) overrides AutoCosts fields: 'old' (c0551ae), '9e74cec', 'f4156ce', 'current', 'margin=0.02,probe_every=4',
'old+margin=0.02'. At temperature 0 every variant's output must equal plain decoding's (exit code 1 otherwise).

    python scripts/auto_k_check.py --modeled --max-new-tokens 48 --variant old --variant 9e74cec --variant current

--replay (modeled time too) draws plain decoding's text once per seed and replays every setup over it, keeping each
round's drafts while they equal the text: exact for prompt lookup, an approximation for the n-gram model's sampled
drafts (replayed_runs). Every setup then meets the same texts, so sampled cells compare policies, not draws.

    python scripts/auto_k_check.py --replay --drafters lookup ngram --seeds 8 --max-new-tokens 48

Numbers count only from a quiet machine: it prints the load average before and after and the CPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path

import torch

from specviz.config import RunConfig
from specviz.core.profile import load_profile
from specviz.core.theory import verify_cost_at
from specviz.drafters.specs import ONE_MODEL_KINDS, drafter_spec
from specviz.experiments.bench import SweepModels, SweepSpec
from specviz.experiments.cost_profile import device_name, load_average
from specviz.experiments.prompts import DEFAULT_PROMPTS, first_per_category, load_prompts
from specviz.experiments.timed_runs import RunSample, measure_setups

log = logging.getLogger("auto_k_check")
PLAIN, AUTO = "plain", "auto"
TRACE_SCHEMA = "specviz.auto_k_rounds/1"
TRACE_CATEGORIES = ("prose", "copy")
GOAL_PLAIN, GOAL_BEST = 0.97, 0.95  # issue 44: auto >= 0.97x plain decoding and >= 0.95x the best fixed k of its cell


def setups(models: SweepModels, drafter: str, ids: list[int], temperature: float, ks: list[int],
           variants: dict[str, dict] | None = None, seed: int | None = None, profiles: dict | None = None) -> dict:  # fmt: skip
    """name -> a factory of fresh decoders: plain decoding, k: auto, and each fixed k, at the drafter's best tree width;
    with ``variants`` (name -> AutoCosts fields to override), also 'auto:NAME', k: auto under those costs; with
    ``profiles`` (name -> CostProfile), also 'auto@NAME', k: auto pricing its rounds with that profile. Every setup
    samples with ``seed`` (default: the sweep's)."""
    from specviz.core.auto_k import AutoK
    from specviz.runs import auto_costs, build_decoder

    best = drafter_spec(drafter).defaults
    base = dataclasses.replace(
        models.config(drafter, best.num_draft_tokens, temperature, best.tree_width), draft_vocab=best.draft_vocab
    )
    if seed is not None:
        base = dataclasses.replace(base, seed=seed)

    def make(config: RunConfig, baseline: bool = False):
        def decoder():
            d = build_decoder(config, models.run_models, ids, baseline=baseline)
            if temperature > 0:  # every setup generates the same number of tokens (see the module's docstring)
                d.config = dataclasses.replace(d.config, eos_token_ids=())
            return d

        return decoder

    def auto_with(costs_of):
        """k: auto under costs_of(the run's own costs), set before its first round (nothing observed yet)."""

        def decoder():
            d = make(dataclasses.replace(base, auto_k=True))()
            costs = costs_of(d.config.auto)
            d.config = dataclasses.replace(d.config, auto=costs)
            d.auto = AutoK(costs, d.auto.width)
            return d

        return decoder

    out = {PLAIN: make(base, baseline=True), AUTO: make(dataclasses.replace(base, auto_k=True))}
    out |= {f"{AUTO}:{name}": auto_with(lambda c, o=overrides: dataclasses.replace(c, **o)) for name, overrides in (variants or {}).items()}
    out |= {f"{AUTO}@{name}": auto_with(lambda _, p=profile, n=name: auto_costs(base, models.run_models.target, (p, n))) for name, profile in (profiles or {}).items()}
    return out | {f"k={k}": make(dataclasses.replace(base, num_draft_tokens=k)) for k in ks}


# --variant presets (AutoCosts fields); any other variant is "field=value,field=value" over the current defaults
PRESETS: dict[str, dict] = {
    "current": {},  # specviz.core.auto_k's defaults
    # f4156ce: the tuned policy before probes came every 4 plain rounds (every 8)
    "f4156ce": {"probe_every": 8},
    # 9e74cec: the 5 % margin, r, k = 1 probes backing off, evidence decaying at 0.9
    "9e74cec": {"decay": 0.9, "probe_every": 8},
    # c0551ae: no margin, no per-round cost, no probe on the first round, a probe every 8 plain rounds (never backing
    # off) at the k the prior alone picks, evidence decaying at 0.9
    "old": {
        "margin": 0.0,
        "round_cost": 0.0,
        "probe_first": False,
        "probe_every": 8,
        "max_backoff": 0,
        "probe_k": "prior",
        "decay": 0.9,
    },
}


def parse_variant(text: str) -> tuple[str, dict]:
    """'old' / 'current' (PRESETS), or 'margin=0.02,probe_every=4' -> (name, AutoCosts overrides); 'old+margin=0.02'
    starts from a preset."""
    base, _, rest = text.partition("+") if "+" in text or text in PRESETS else ("", "", text)
    if base and base not in PRESETS:
        raise SystemExit(f"--variant: no preset {base!r} (known: {', '.join(PRESETS)})")
    overrides = dict(PRESETS.get(base, {}))
    for item in filter(None, rest.split(",")):
        key, eq, raw = item.partition("=")
        if not eq:
            raise SystemExit(f"--variant: {item!r} is not field=value")
        overrides[key.strip()] = _value(raw.strip())
    return text, overrides


def _value(raw: str):
    if raw in ("true", "false"):
        return raw == "true"
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw


def round_cost(costs, drafted: int, first: bool = False) -> float:
    """A round's modeled time in 1-token passes: c_verify(drafted) + drafted*c + r (r only when it drafted); 1.0 for a
    plain round. A run's first round takes the newest token's row from the prefill: plain it costs nothing, drafted
    its pass feeds the drafts alone (c_verify(drafted - 1)). The prefill is left out (every setup shares it)."""
    if first:
        return verify_cost_at(costs.verify, drafted - 1) + drafted * costs.draft_cost + costs.round_cost if drafted else 0.0
    return verify_cost_at(costs.verify, drafted) + drafted * costs.draft_cost + (costs.round_cost if drafted else 0.0)


def modeled_runs(factories: dict, costs) -> dict[str, dict]:
    """Each setup run once, untimed: name -> its generated tokens, modeled time (passes) and tokens per pass."""
    out = {}
    for name, factory in factories.items():
        decoder = factory()
        decoder.run()
        passes = max(sum(round_cost(costs, r.num_drafted, i == 0) for i, r in enumerate(decoder.records)), 1.0)
        ks = [r.num_draft_tokens for r in decoder.records]
        out[name] = {"generated": tuple(decoder.generated), "passes": passes, "speed": len(decoder.generated) / passes,
                     "rounds": len(ks), "drafted_rounds": sum(r.num_drafted > 0 for r in decoder.records)}  # fmt: skip
    return out


REPLAYABLE = ("lookup", "ngram")  # drafters whose drafts depend on the committed tokens only


def replayed_runs(factories: dict, costs) -> dict[str, dict]:
    """--replay: each setup replayed over the one text plain decoding drew (name -> its run, as modeled_runs gives it).
    A round drafts from the committed tokens, keeps its drafts while they equal the text's next tokens, and commits one
    more token of the text. For a drafter whose q is one-hot on its draft (prompt lookup) that is the rule's own law:
    the rule keeps a draft x with probability p(x) and otherwise draws from p without x, so the committed token is
    drawn from p and equals x exactly when x is kept; for the n-gram model's sampled drafts it is an approximation (the
    rule keeps x with probability min(1, p(x)/q(x))). Every setup meets the same texts: a paired comparison, where
    timed and modeled runs at T > 0 compare each setup's own texts. At temperature 0 it is the run itself."""
    plain = factories[PLAIN]()
    plain.run()
    text = list(plain.generated)
    passes = max(len(text) - 1.0, 1.0)  # its first token came from the prefill (a one-token text: one pass, not none)
    out = {PLAIN: {"generated": tuple(text), "passes": passes, "speed": len(text) / passes, "rounds": len(text), "drafted_rounds": 0}}
    for name, factory in factories.items():
        if name == PLAIN:
            continue
        d = factory()
        tokens, pos, passes, rounds, drafted_rounds = list(d.tokens), 0, 0.0, 0, 0
        generator = torch.Generator().manual_seed(d.config.seed)
        while pos < len(text):
            room = len(text) - pos - 1
            free = rounds == 0  # the engine's first round takes its row from the prefill
            k = d.auto.choose(min(d.config.max_draft_tokens, room), free).k if d.auto is not None else min(d.k, room)
            drafted = [int(t) for t in d.drafter.propose(tokens, k, generator).token_ids[:k]] if k > 0 else []
            kept = next((i for i, t in enumerate(drafted) if t != text[pos + i]), len(drafted))
            tokens += text[pos : pos + kept + 1]
            pos += kept + 1
            passes += round_cost(costs, len(drafted), free)
            if d.auto is not None:
                d.auto.observe(len(drafted), kept, len(drafted), opening=free)
            rounds, drafted_rounds = rounds + 1, drafted_rounds + bool(drafted)
            d.drafter.rollback(tokens)
        passes = max(passes, 1.0)
        out[name] = {"generated": tuple(text), "passes": passes, "speed": len(text) / passes, "rounds": rounds,
                     "drafted_rounds": drafted_rounds}  # fmt: skip
    return out


def over_texts(per_seed: list[dict[str, dict]]) -> dict[str, dict]:
    """A sampled prompt's modeled runs, one per seed (name -> its run) -> name -> {"speed": the median over the texts}:
    the best fixed k is then chosen once per prompt, not per text (the luckiest of four draws would beat any policy)."""
    return {name: {"speed": statistics.median(runs[name]["speed"] for runs in per_seed)} for name in per_seed[0]}


def modeled_cell(drafter: str, category: str, temperature: float, per_prompt: list[dict], autos: list[str]) -> dict:
    """One cell, modeled, as cell_row: per auto setup the median over the cell's prompts of auto/plain and of
    auto/(the prompt's best fixed k), and whether it meets both goals."""
    row = {"drafter": drafter, "category": category, "T": temperature, "prompts": len(per_prompt)}
    best = [max((v["speed"], n) for n, v in runs.items() if n.startswith("k=")) for runs in per_prompt]
    row["best_fixed_vs_plain"] = statistics.median(b[0] / runs[PLAIN]["speed"] for b, runs in zip(best, per_prompt, strict=True))
    row["best_fixed"] = statistics.mode(b[1] for b in best)
    for name in autos:
        vs_plain = statistics.median(runs[name]["speed"] / runs[PLAIN]["speed"] for runs in per_prompt)
        vs_best = statistics.median(runs[name]["speed"] / b[0] for b, runs in zip(best, per_prompt, strict=True))
        row[name] = {"vs_plain": vs_plain, "vs_best_fixed": vs_best, "meets": vs_plain >= GOAL_PLAIN and vs_best >= GOAL_BEST}
    return row


def modeled(args, models: SweepModels, target) -> int:
    """--modeled: every setup once, untimed, over every prompt of each category, charged the modeled time."""
    from specviz.core.theory import VerifyCurve
    from specviz.runs import prompt_ids

    variants = dict(parse_variant(v) for v in args.variant or ["current"])
    curve = None
    if args.curve:
        curve = VerifyCurve(tuple(float(x) for x in args.curve.split(",")))
        variants = {name: {**o, "verify": curve} for name, o in variants.items()}
    autos = [f"{AUTO}:{name}" for name in variants]
    if args.replay and set(args.drafters) - set(REPLAYABLE):
        raise SystemExit(f"--replay: only drafters whose drafts depend on the tokens alone ({', '.join(REPLAYABLE)}), please")
    prompts = load_prompts(args.prompts, args.categories)
    if args.per_category is not None:
        prompts = first_per_category(prompts, args.per_category)
    cells: dict[tuple[str, str, float], list] = {}
    texts: dict[tuple[str, str, float, str], list] = {}  # a sampled prompt's runs, one per seed
    differs, charged = [], {}
    for prompt in prompts:
        ids = prompt_ids(target, prompt.prompt, True, max_new_tokens=args.max_new_tokens, num_draft_tokens=16)
        for temperature, seed in [(t, s) for t in args.temperatures for s in (range(args.seeds) if t > 0 else [None])]:
            for drafter in args.drafters:
                factories = setups(models, drafter, ids, temperature, args.ks, variants, seed)
                costs = factories.pop(AUTO)().config.auto  # what auto prices rounds with: the profile's, not a variant's
                costs = dataclasses.replace(costs, verify=curve) if curve is not None else costs
                charged[drafter] = {
                    "verify": list(getattr(costs.verify, "costs", [costs.verify])),
                    "c": costs.draft_cost,
                    "r": costs.round_cost,
                }
                runs = replayed_runs(factories, costs) if args.replay else modeled_runs(factories, costs)
                if temperature == 0:
                    differs += [
                        f"{name} {drafter} on {prompt.title!r}"
                        for name in autos
                        if runs[name]["generated"] != runs[PLAIN]["generated"]
                    ]
                if seed is None:
                    cells.setdefault((drafter, prompt.category, temperature), []).append(runs)
                else:
                    texts.setdefault((drafter, prompt.category, temperature, prompt.title), []).append(runs)
                log.info("%s %s T=%g seed %s %r: %s", drafter, prompt.category, temperature, seed, prompt.title,
                         ", ".join(f"{n} {runs[n]['speed'] / runs[PLAIN]['speed']:.2f}x" for n in [*autos, *(f"k={k}" for k in args.ks)]))  # fmt: skip
    for (d, c, t, _), per_seed in texts.items():
        cells.setdefault((d, c, t), []).append(over_texts(per_seed))
    rows = [modeled_cell(d, c, t, per_prompt, autos) for (d, c, t), per_prompt in cells.items()]
    summary = {name: {"meets": sum(r[name]["meets"] for r in rows), "cells": len(rows),
                      "worst_vs_plain": min(r[name]["vs_plain"] for r in rows),
                      "worst_vs_best_fixed": min(r[name]["vs_best_fixed"] for r in rows)} for name in autos}  # fmt: skip
    table = {"modeled": True, "replay": bool(args.replay), "settings": {k: v for k, v in vars(args).items() if k not in ("json", "out", "trace")},
             "charged": charged, "variants": {n: {k: str(v) for k, v in o.items()} for n, o in variants.items()},
             "summary": summary, "cells": rows, "greedy_differs": differs}  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(table))
    else:
        print("modeled time (deterministic, not wall-clock): c_verify(drafted) + drafted*c + r a round, 1 a plain round"
              + ("; every setup replayed over plain decoding's texts" if args.replay else ""))  # fmt: skip
        head = "".join(f" {n[len(AUTO) + 1 :][:22]:>23}" for n in autos)
        print(f"{'drafter':<10} {'category':<9} {'T':>4} {'best k':>7} {'best/plain':>10}{head}   (auto/plain auto/best)")
        for r in rows:
            cols = "".join(
                f" {r[n]['vs_plain']:>9.2f}x {r[n]['vs_best_fixed']:>6.2f}x{'*' if not r[n]['meets'] else ' '}" for n in autos
            )
            print(
                f"{r['drafter']:<10} {r['category']:<9} {r['T']:>4g} {r['best_fixed']:>7} {r['best_fixed_vs_plain']:>9.2f}x{cols}"
            )
        for n, v in summary.items():
            print(f"{n}: {v['meets']} of {v['cells']} cells meet both goals; worst auto/plain {v['worst_vs_plain']:.2f}x, "
                  f"worst auto/best fixed {v['worst_vs_best_fixed']:.2f}x")  # fmt: skip
    for d in differs:
        log.error("greedy output of k: auto differs from plain decoding: %s", d)
    return 1 if differs else 0


def trace(models: SweepModels, drafter: str, ids: list[int]) -> list[dict]:
    """One greedy run of k: auto at the drafter's best setting: per round the k auto chose, whether it was a probe,
    the tokens it drafted and how many of them the target kept."""
    decoder = setups(models, drafter, ids, 0.0, [])[AUTO]()
    decoder.run()
    return [{"round": i, "k": r.num_draft_tokens, "drafted": r.num_drafted, "accepted": r.num_accepted,
             "probe": bool(r.k_choice is not None and r.k_choice.probe)} for i, r in enumerate(decoder.records)]  # fmt: skip


def write_trace(path: str, models: SweepModels, drafters: list[str], prompts: str, max_new_tokens: int, machine: dict) -> None:
    from specviz.runs import prompt_ids

    runs = []
    for prompt in first_per_category(load_prompts(prompts, list(TRACE_CATEGORIES)), 1):
        ids = prompt_ids(models.target, prompt.prompt, True, max_new_tokens=max_new_tokens, num_draft_tokens=16)
        for drafter in drafters:
            rounds = trace(models, drafter, ids)
            runs.append({"drafter": drafter, "category": prompt.category, "prompt": prompt.title, "rounds": rounds})
            log.info("%s %s %r: k %s", drafter, prompt.category, prompt.title, [r["k"] for r in rounds])
    out = {"schema": TRACE_SCHEMA, "created": datetime.now(UTC).isoformat(timespec="seconds"), "temperature": 0.0,
           "max_new_tokens": max_new_tokens, "machine": machine, "runs": runs}  # fmt: skip
    Path(path).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    log.info("wrote %s", path)


def timed_cell(models: SweepModels, drafter: str, ids: list[int], temperature: float, args,
               profiles: dict | None = None) -> dict[str, list[RunSample]]:  # fmt: skip
    """Every setup of one prompt and temperature, interleaved: name -> its samples. Greedy: --repeats runs of the one
    text. Sampled: one run per seed of --seeds (after --warmup rotations on the first), each seed a text of its own
    shared by every setup, so a setup's speed is its median over texts, not one draw's luck. profiles: --profile's,
    loaded once (setups' 'auto@NAME')."""
    if temperature == 0 or args.seeds <= 1:
        return measure_setups(setups(models, drafter, ids, temperature, args.ks, profiles=profiles), args.repeats, args.warmup)
    samples: dict[str, list[RunSample]] = {}
    for seed in range(args.seeds):
        factories = setups(models, drafter, ids, temperature, args.ks, seed=seed, profiles=profiles)
        for name, runs in measure_setups(factories, 1, args.warmup if seed == 0 else 0).items():
            samples.setdefault(name, []).extend(runs)
    return samples


def speed(samples: list[RunSample]) -> float:
    return statistics.median(s.tokens_per_s for s in samples)


def cell_row(drafter: str, category: str, temperature: float, per_prompt: list[dict[str, list[RunSample]]]) -> dict:
    """One cell: medians over its prompts of auto/plain, auto/best fixed, best fixed/plain, the best fixed k, and auto's
    tokens per target pass (a speedup above it is the machine's drift, not the method: a drafted round's pass costs
    at least a plain one)."""
    auto_plain, auto_best, best_plain, best_ks, per_pass = [], [], [], [], []
    for samples in per_prompt:
        fixed = {name: speed(s) for name, s in samples.items() if name.startswith("k=")}
        best = max(fixed, key=fixed.__getitem__)
        auto_plain.append(speed(samples[AUTO]) / speed(samples[PLAIN]))
        auto_best.append(speed(samples[AUTO]) / fixed[best])
        best_plain.append(fixed[best] / speed(samples[PLAIN]))
        best_ks.append(best)
        per_pass.append(statistics.median(s.stats.tokens_per_target_pass or 1.0 for s in samples[AUTO]))
    row = {"drafter": drafter, "category": category, "T": temperature, "prompts": len(per_prompt),
           "auto_vs_plain": statistics.median(auto_plain), "auto_vs_best_fixed": statistics.median(auto_best),
           "best_fixed_vs_plain": statistics.median(best_plain), "best_fixed": statistics.mode(best_ks),
           "auto_tokens_per_target_pass": statistics.median(per_pass)}  # fmt: skip
    best = [max(speed(v) for n, v in samples.items() if n.startswith("k=")) for samples in per_prompt]
    for name in (n for n in per_prompt[0] if n.startswith(f"{AUTO}@")):  # --profile: auto priced with another profile
        row[name] = {"vs_plain": statistics.median(speed(s[name]) / speed(s[PLAIN]) for s in per_prompt),
                     "vs_best_fixed": statistics.median(speed(s[name]) / b for s, b in zip(per_prompt, best, strict=True)),
                     "vs_auto": statistics.median(speed(s[name]) / speed(s[AUTO]) for s in per_prompt),
                     "tokens_per_target_pass": statistics.median(statistics.median(r.stats.tokens_per_target_pass or 1.0 for r in s[name])
                                                                 for s in per_prompt)}  # fmt: skip
    return row


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--drafters", nargs="+", default=list(ONE_MODEL_KINDS), choices=list(ONE_MODEL_KINDS))
    p.add_argument("--categories", nargs="+", default=None, help="default: every category of the prompt file")
    p.add_argument("--prompts", default=str(DEFAULT_PROMPTS))
    p.add_argument("--per-category", type=int, default=None, help="prompts per category (default 2; --modeled: every prompt)")
    p.add_argument("--ks", type=int, nargs="+", default=[1, 2, 4, 8], help="the fixed ks to beat (default 1 2 4 8)")
    p.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 0.7])
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3, help="timed runs of each greedy setup (default 3)")
    p.add_argument("--seeds", type=int, default=5, help="T > 0: texts sampled per prompt, seeds 0..N-1, one timed run "
                   "each (--modeled: one run each); a setup's speed is its median over them (default 5)")  # fmt: skip
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--out", help="also write the table (and the machine, the command's settings) as JSON to this path")
    p.add_argument("--trace", help="write auto's k per round on one prose and one copying prompt to this JSON; time nothing")
    p.add_argument("--modeled", action="store_true", help="time nothing: charge each run the modeled time (every prompt)")
    p.add_argument("--variant", action="append", help="--modeled: a k: auto variant (repeatable): current, f4156ce, 9e74cec, old, "
                   "'margin=0.02,probe_every=4', 'old+margin=0.02' (AutoCosts fields)")  # fmt: skip
    p.add_argument("--replay", action="store_true", help="--modeled: replay every setup over plain decoding's texts "
                   "(paired; n-gram and lookup only)")  # fmt: skip
    p.add_argument("--profile", action="append", help="also time k: auto pricing its rounds with this profile (repeatable; "
                   "'auto@STEM' in the table), interleaved with the rest: this machine's own against the shipped one")  # fmt: skip
    p.add_argument("--curve", help="--modeled: the verify curve c_verify(0..) to charge and to let auto price with, "
                   "'1,1.18,1.25,...' (default: the profile's)")  # fmt: skip
    args = p.parse_args()

    from specviz.models import load_model
    from specviz.runs import prompt_ids

    load_before = load_average()
    target = load_model(RunConfig.target, args.device, args.dtype)
    spec = SweepSpec(drafters=tuple(args.drafters), ks=tuple(args.ks), temperatures=tuple(args.temperatures), max_new_tokens=args.max_new_tokens,
                     repeats=args.repeats, warmup=args.warmup)  # fmt: skip
    models = SweepModels(target, spec).resolved()
    if args.modeled or args.replay:
        args.modeled = True
        return modeled(args, models, target)
    if args.trace:
        machine = {"cpu": device_name(target.device), "precision": target.precision, "load": f"{load_before} -> {load_average()}"}
        write_trace(args.trace, models, args.drafters, args.prompts, args.max_new_tokens, machine)
        return 0
    prompts = first_per_category(load_prompts(args.prompts, args.categories), args.per_category or 2)
    cells: dict[tuple[str, str, float], list] = {}
    differs = []
    profiles = {Path(p).stem: load_profile(p) for p in args.profile or []}
    for prompt in prompts:
        ids = prompt_ids(target, prompt.prompt, True, max_new_tokens=args.max_new_tokens, num_draft_tokens=16)
        for temperature in args.temperatures:
            for drafter in args.drafters:
                samples = timed_cell(models, drafter, ids, temperature, args, profiles)
                if temperature == 0:
                    differs += [f"{name} {drafter} on {prompt.title!r}" for name in samples if name.startswith(AUTO)
                                and samples[name][0].generated != samples[PLAIN][0].generated]  # fmt: skip
                cells.setdefault((drafter, prompt.category, temperature), []).append(samples)
                log.info("%s %s T=%g %r: auto %.2fx plain", drafter, prompt.category, temperature, prompt.title,
                         speed(samples[AUTO]) / speed(samples[PLAIN]))  # fmt: skip
    rows = [cell_row(d, c, t, per_prompt) for (d, c, t), per_prompt in cells.items()]
    machine = {"cpu": device_name(target.device), "threads": os.cpu_count(), "precision": target.precision,
               "load_before": load_before, "load_after": load_average()}  # fmt: skip
    table = {"machine": machine, "settings": {k: v for k, v in vars(args).items() if k not in ("json", "out", "trace")},
             "cells": rows, "greedy_differs": differs}  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(table))
    else:
        print(
            f"{machine['cpu']}; {machine['precision']}; load average before {machine['load_before']}, after {machine['load_after']}"
        )
        print(
            f"{'drafter':<10} {'category':<9} {'T':>4} {'auto/plain':>11} {'auto/best k':>12} {'best k/plain':>13} {'best k':>7} {'auto tok/pass':>14}"
        )
        for r in rows:  # '!': auto/plain above auto's tokens per target pass (the machine drifted)
            ceiling = "!" if r["auto_vs_plain"] > r["auto_tokens_per_target_pass"] else " "
            print(f"{r['drafter']:<10} {r['category']:<9} {r['T']:>4g} {r['auto_vs_plain']:>10.2f}x {r['auto_vs_best_fixed']:>11.2f}x "
                  f"{r['best_fixed_vs_plain']:>12.2f}x {r['best_fixed']:>7} {r['auto_tokens_per_target_pass']:>13.2f}{ceiling}")  # fmt: skip
        for r in rows:  # --profile; '!' as above, against that setup's own tokens per target pass
            for name, v in ((n, v) for n, v in r.items() if n.startswith(f"{AUTO}@")):
                ceiling = "!" if v["vs_plain"] > v["tokens_per_target_pass"] else ""
                print(f"{r['drafter']:<10} {r['category']:<9} {r['T']:>4g} {name}: {v['vs_plain']:.2f}x plain, "
                      f"{v['vs_best_fixed']:.2f}x the best fixed k, {v['vs_auto']:.2f}x auto, "
                      f"{v['tokens_per_target_pass']:.2f} tokens a pass{ceiling}")  # fmt: skip
    for d in differs:
        log.error("greedy output of k: auto differs from plain decoding: %s", d)
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
