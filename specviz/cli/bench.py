"""python -m specviz bench: the sweep lives in specviz.experiments.bench; here only its arguments and its output."""

from __future__ import annotations

import argparse
from pathlib import Path

from specviz.cli.options import MODEL_OPTIONS, add_run_options, check_output_file, csv_list, run_values, set_threads
from specviz.cli.terminal import emit, print_progress
from specviz.config import RunConfig

BENCH_FIELDS = ("seed", "max_new_tokens", "draft", "exit_layer", "medusa_heads", "eagle_head", "draft_vocab", "chat", *MODEL_OPTIONS)


def add_parser(sub) -> None:
    """Register `python -m specviz bench` on the CLI's subparsers."""
    from specviz.experiments.bench import BENCH_DRAFTERS, SweepSpec
    from specviz.experiments.prompts import DEFAULT_PROMPTS

    d = SweepSpec  # every default comes from SweepSpec, so the CLI and the Benchmark page agree
    p = sub.add_parser(
        "bench",
        help="sweep drafters, k and temperature over a prompt set, against plain decoding",
        description="Benchmark speculative decoding against plain decoding of the same target, prompt and sampling: "
        "every setting and its baseline run interleaved, a warm-up discarded, medians and min-max of the repeats.",
    )
    p.add_argument("--prompts", default=str(DEFAULT_PROMPTS), help="JSON list of {category, title, prompt} (default: assets/prompts.json)")
    p.add_argument("--categories", type=lambda s: csv_list(s, str, "--categories"), default=None, help="e.g. code,prose,copy (default: all)")
    p.add_argument("--per-category", type=int, default=None, help="only the first N prompts of each category (default: all)")
    p.add_argument("--drafters", type=lambda s: csv_list(s, str, "--drafters"), default=d.drafters,
                   help=f"comma-separated, from {','.join(BENCH_DRAFTERS)} (default: {','.join(d.drafters)})")
    p.add_argument("--k", type=lambda s: csv_list(s, int, "--k"), default=d.ks, help=f"tokens drafted per round (default: {','.join(map(str, d.ks))})")
    p.add_argument("--temperatures", type=lambda s: csv_list(s, float, "--temperatures"), default=d.temperatures,
                   help=f"default: {','.join(f'{t:g}' for t in d.temperatures)}")
    p.add_argument("--tree-width", type=lambda s: csv_list(s, int, "--tree-width"), default=d.tree_widths,
                   help="children per token-tree node, e.g. 1,2,3 (1 = a chain; k is then the node budget; default: 1)")
    p.add_argument("--repeats", type=int, default=d.repeats, help=f"timed runs of every setting, medians and min-max reported (default: {d.repeats})")
    p.add_argument("--warmup", type=int, default=d.warmup, help=f"rotations run first and discarded, per prompt and temperature (default: {d.warmup})")
    add_run_options(p, only=BENCH_FIELDS, differ={  # the sweep's defaults (SweepSpec's), where they are not a single run's
        "seed": {"default": d.seed}, "max_new_tokens": {"default": d.max_new_tokens},
        "draft_vocab": {"default": d.draft_vocab, "help": "Medusa and EAGLE: a draft vocabulary of N tokens (0 = full)"},
    })  # fmt: skip
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice); 1 is steadier on a busy machine")
    p.add_argument("--out", default=None, help="write the results table here (.csv, or .json for a list of records)")
    p.add_argument("--append", action="store_true", help="add the rows to an existing --out CSV instead of replacing it")


def run(args: argparse.Namespace) -> int:

    from specviz.experiments.bench import COLUMNS, SweepSpec, append_csv, rows_to_frame, run_sweep
    from specviz.experiments.prompts import first_per_category, load_prompts
    from specviz.runs import resolve_models

    set_threads(args.threads)
    spec = SweepSpec(
        drafters=tuple(args.drafters), ks=tuple(args.k), temperatures=tuple(args.temperatures),
        max_new_tokens=args.max_new_tokens, seed=args.seed, chat=not args.no_chat, exit_layer=args.exit_layer,
        medusa_heads=args.medusa_heads, eagle_head=args.eagle_head, draft_vocab=args.draft_vocab, repeats=args.repeats,
        warmup=args.warmup, tree_widths=tuple(args.tree_width),
    )
    prompts = first_per_category(load_prompts(args.prompts, args.categories), args.per_category)
    out = Path(args.out) if args.out else None
    if out is not None and out.suffix.lower() not in (".csv", ".json"):
        raise ValueError(f"--out must end in .csv or .json; got {args.out}.")
    if args.append and (out is None or out.suffix.lower() != ".csv"):
        raise ValueError("--append adds rows to a CSV: give --out FILE.csv.")
    if out is not None:
        check_output_file(args.out, "--out")  # before the sweep runs
    if args.append and out.is_file() and out.stat().st_size > 0:
        with out.open(encoding="utf-8") as fh:
            header = fh.readline().strip().split(",")
        if header != list(COLUMNS[: len(header)]):  # this version's columns, or an earlier version's (append_csv adds the new ones)
            raise ValueError(f"{out} has other columns than this benchmark writes; --append needs a CSV from this version or an earlier one.")
    where = RunConfig(**run_values(args, only=BENCH_FIELDS, skip=("seed", "max_new_tokens", "chat")))
    models = resolve_models(where, drafters=[d for d in spec.drafters if d != "model" or args.draft])  # run_sweep names a missing draft
    target = models.target
    emit(
        f"benchmark: {len(prompts)} prompts, {spec.num_settings(len(prompts))} settings x ({spec.warmup} warm-up + "
        f"{spec.repeats} repeats) = {spec.num_runs(len(prompts))} runs on {target.name} ({target.device}, {target.precision})",
        err=True,
    )
    frame = rows_to_frame(run_sweep(models, prompts, spec, on_progress=print_progress))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.suffix.lower() == ".json":
            out.write_text(frame.to_json(orient="records", indent=1), encoding="utf-8")
        else:
            if args.append and out.is_file() and out.stat().st_size > 0:
                append_csv(frame, out)
            else:
                frame.to_csv(out, index=False, float_format="%.4g")
        emit(f"wrote {len(frame)} rows to {out}", err=True)
    show = ["category", "prompt", "drafter", "k", "temperature", "alpha", "acceptance_rate", "tokens_per_target_pass",
            "baseline_tokens_per_s", "speedup", "speedup_low", "speedup_high", "speedup_cpu", "verify_cost"]
    if len(spec.tree_widths) > 1:
        show.insert(4, "tree_width")
    emit(frame[show].to_string(index=False, float_format=lambda x: f"{x:.2f}", na_rep="n/a"))
    if len(spec.tree_widths) > 1:
        from specviz.experiments.bench import tree_vs_chain_table

        emit("\ntrees vs chains at the same node budget k (means over prompts):")
        emit(tree_vs_chain_table(frame).to_string(index=False, float_format=lambda x: f"{x:.2f}", na_rep="n/a"))
    return 0
