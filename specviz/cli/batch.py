"""python -m specviz batch: B prompts of one category at once, plain vs speculative tokens/s for every batch size B
(measured by specviz.experiments.batch)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specviz.cli.options import MODEL_OPTIONS, add_run_options, batch_sizes_arg, run_values, set_threads, tuned_values
from specviz.cli.terminal import emit, print_progress
from specviz.config import RunConfig

BATCH_FIELDS = ("drafter", "draft", "exit_layer", "medusa_heads", "num_draft_tokens", "temperature", "seed", "max_new_tokens", "chat", *MODEL_OPTIONS)


def add_parser(sub) -> None:
    """Register `batch` on the CLI's subparsers."""
    from specviz.drafters.specs import SPECULATIVE_KINDS
    from specviz.experiments.bench import SweepSpec
    from specviz.experiments.prompts import DEFAULT_PROMPTS

    p = sub.add_parser("batch", help="B prompts of one category at once: plain vs speculative tokens/s for every batch size B")
    add_run_options(p, only=BATCH_FIELDS, differ={
        "drafter": {"choices": SPECULATIVE_KINDS, "default": "lookup", "help": "default: lookup"},
        "max_new_tokens": {"default": SweepSpec.max_new_tokens, "help": f"new tokens per row (default {SweepSpec.max_new_tokens})"},
        "temperature": {"help": "0 = greedy (default), where rows are checked against plain"},
    })  # fmt: skip
    p.add_argument("--batch", type=batch_sizes_arg, default=(1, 2, 4, 8, 16), metavar="B,B,...", help="batch sizes (default 1,2,4,8,16)")
    p.add_argument("--category", default="copy", help="the benchmark prompts' category (copy, code, prose, qa; default copy)")
    p.add_argument("--prompts", default=str(DEFAULT_PROMPTS), help="JSON list of {category, title, prompt} (default: assets/prompts.json)")
    p.add_argument("--repeats", type=int, default=1, help="timed runs of each side per B, alternating which goes first; medians (default 1)")
    p.add_argument("--warmup", type=int, default=1, help="runs of each side per B first, discarded (default 1)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    p.add_argument("--out", default=None, help="also write the JSON here (the theory page reads assets/batch_cpu.json)")


def run(args: argparse.Namespace) -> int:
    """Exit 1 when a greedy row differs from plain where the target's top two logits are not a near-tie."""
    import torch

    from specviz.experiments.batch import BatchSetup, bad_mismatches, measure_batches, results_json
    from specviz.experiments.cost_profile import device_name
    from specviz.experiments.prompts import load_prompts
    from specviz.runs import resolve_models

    set_threads(args.threads)
    values = run_values(args, only=BATCH_FIELDS)
    config = RunConfig(**values | {"num_draft_tokens": tuned_values(args.drafter, num_draft_tokens=args.num_draft_tokens)["num_draft_tokens"]})
    setup = BatchSetup(config, tuple(load_prompts(args.prompts, [args.category])), args.repeats, args.warmup)
    models = resolve_models(config, drafters=[args.drafter])
    target = models.target
    emit(f"batch: {args.drafter}, k={config.num_draft_tokens}, {len(setup.prompts)} {args.category} prompts (cycled) on "
          f"{target.name} ({target.device}, {target.precision}), B = {','.join(map(str, args.batch))}", err=True)  # fmt: skip
    points = measure_batches(models, setup, args.batch, on_progress=print_progress)
    machine = {"device": str(target.device), "device_name": device_name(target.device), "dtype": target.precision,
               "threads": torch.get_num_threads(), "torch_version": torch.__version__}  # fmt: skip
    result = results_json(points, setup, machine)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        emit(f"wrote {args.out}", err=True)
    if args.json:
        emit(json.dumps(result))
    else:
        emit(f"{machine['device_name']}; {machine['dtype']}; {machine['threads']} threads")
        emit("  B  plain tok/s  spec tok/s  ratio  tokens/pass  verify width  overhead ms/row plain, spec  load average")
        for p in points:
            emit(f"{p.batch_size:3d}  {p.plain_tokens_per_s:11.1f}  {p.spec_tokens_per_s:10.1f}  {p.ratio:5.2f}  "
                  f"{p.spec_tokens_per_target_pass:11.2f}  {p.spec_verify_width:12.2f}  {p.plain_overhead_ms_per_row:14.2f}, "
                  f"{p.spec_overhead_ms_per_row:.2f}  {p.load_average}")  # fmt: skip
    for p in points:
        if not p.physical:
            emit(f"warning: B={p.batch_size}: a ratio of {p.ratio:.2f} beats {p.spec_tokens_per_target_pass:.2f} tokens per pass; "
                  "the machine was busier for one side (check the load average, use --repeats)", err=True)  # fmt: skip
        for m in p.mismatches:
            emit(f"B={p.batch_size} row {m.stream}: first differs at generated token {m.position} "
                  f"({m.token} vs plain {m.plain_token}), target top-2 margin {m.margin:.2e}", err=True)  # fmt: skip
    bad = bad_mismatches(points)
    if bad:
        emit(f"error: {len(bad)} greedy row(s) differ from plain decoding away from a near-tie (margin above 1e-3)", err=True)
        return 1
    return 0
