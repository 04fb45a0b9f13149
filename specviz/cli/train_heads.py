"""python -m specviz train-heads: Medusa heads (or an EAGLE head, --kind eagle) for a target by self-distillation,
and --count-vocab for an existing heads folder; the training lives in specviz.experiments.training (its __init__ says
what lives where)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specviz.cli.options import MODEL_ACCESS, add_run_options, model_access, set_threads
from specviz.cli.terminal import emit
from specviz.config import EMBEDDED_TARGET

EMBEDDED_BASE_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"  # what the embedded GGUF is a quantisation of
TRAIN_OPTIONS = {  # option -> TrainConfig field; unset options take the config's (or --tiny's) default
    "heads": "num_heads", "layers": "num_layers", "steps": "steps", "lr": "lr", "batch_size": "batch_size",
    "seed": "seed", "data_tokens": "data_tokens", "max_new_tokens": "max_new_tokens", "gen_batch": "gen_batch",
    "warmup_steps": "warmup_steps",
}  # fmt: skip
EAGLE_OPTIONS = {  # option -> EagleConfig field, for --kind eagle only
    "teacher_tokens": "teacher_tokens", "window": "window", "seg_len": "seg_len", "draft_vocab": "draft_vocab",
}  # fmt: skip


def add_parser(sub) -> None:
    """Register `train-heads` on the CLI's subparsers."""
    from specviz.experiments.training.config import CONTINUE, EagleConfig, TrainConfig

    d, e = TrainConfig, EagleConfig
    p = sub.add_parser("train-heads", help="train Medusa heads (or an EAGLE head: --kind eagle) for a target by self-distillation")
    p.add_argument("--kind", choices=("medusa", "eagle"), default="medusa", help="Medusa heads (default) or an EAGLE head (one layer over the target's features)")
    add_run_options(p, only=("target", "device", *MODEL_ACCESS), differ={"device": {"default": "cpu", "help": "cpu (default) or cuda"}})
    p.add_argument("--out", default=None, help="folder for the heads (default ./medusa-heads, or ./eagle-head for --kind eagle)")
    p.add_argument("--count-vocab", action="store_true",
                   help="only count the target's tokens in an existing heads folder's training data (its config.json's recipe; "
                   "regenerated into the cache when missing) and write --out/token_counts.safetensors, for a draft vocabulary")
    p.add_argument("--teacher-tokens", type=int, default=None, help=f"EAGLE: teacher-forced positions of offline text to read (default {e.teacher_tokens})")
    p.add_argument("--window", type=int, default=None, help=f"EAGLE: tokens per teacher-forced window (default {e.window})")
    p.add_argument("--seg-len", type=int, default=None, help=f"EAGLE: positions per training segment (default {e.seg_len})")
    p.add_argument("--draft-vocab", type=int, default=None, help=f"EAGLE: the draft vocabulary the step cost is measured at (default {e.draft_vocab}; 0: full)")
    p.add_argument("--heads", type=int, default=None, help=f"number of heads K (default {d.num_heads})")
    p.add_argument("--layers", type=int, default=None, help=f"ResBlocks per head (default {d.num_layers})")
    p.add_argument("--steps", type=int, default=None, help=f"optimiser steps (default {d.steps}; EAGLE {e.steps})")
    p.add_argument("--lr", type=float, default=None, help=f"AdamW peak learning rate (default {d.lr}; with --init-from {CONTINUE['lr']})")
    p.add_argument("--warmup-steps", type=int, default=None,
                   help=f"steps of linear warm-up to the peak (default {d.warmup_steps}; with --init-from {CONTINUE['warmup_steps']})")
    p.add_argument("--batch-size", type=int, default=None, help=f"positions per step (default {d.batch_size}; EAGLE {e.batch_size})")
    p.add_argument("--seed", type=int, default=None, help=f"prompt order, sampling and batches (default {d.seed})")
    p.add_argument("--data-tokens", type=int, default=None, help=f"positions of the target's own text to generate (default {d.data_tokens})")
    p.add_argument("--max-new-tokens", type=int, default=None, help=f"tokens per continuation (default {d.max_new_tokens})")
    p.add_argument("--gen-batch", type=int, default=None, help=f"continuations generated at once (default {d.gen_batch})")
    p.add_argument("--plain-medusa", action="store_true", help="Medusa's own heads, reading the hidden state only (default: the heads also read the newest token)")
    p.add_argument("--full-vocab", action="store_true", help="the training softmax over the whole vocabulary (default: the tokens the training data has; ~7x cheaper)")
    p.add_argument("--tiny", action="store_true", help="a small config that trains on a tiny model in seconds (tests, smoke runs)")
    p.add_argument("--resume", action="store_true", help="continue from this run's last checkpoint (same settings)")
    p.add_argument("--init-from", default=None, metavar="DIR",
                   help="EAGLE: continue training the head in DIR (for this target, of this shape) instead of a fresh one: "
                   "its curve goes on from the positions it has seen, at a lower peak and a shorter warm-up unless --lr "
                   "and --warmup-steps are given; --out may be DIR (read fully first, replaced only once written)")
    p.add_argument("--cache-dir", default=None, help="where the hidden states, labels and checkpoints go (default: specviz's cache)")
    p.add_argument("--base-model", default=None, help="base_model_name_or_path for config.json (default: the target's name)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    import dataclasses

    from specviz.experiments.training.config import TINY, TrainConfig
    from specviz.experiments.training.medusa import checkpoint_path, load_or_make_data, ship, train_heads
    from specviz.models import load_model
    from specviz.models.loading import cache_root
    from specviz.models.medusa import target_fingerprint

    set_threads(args.threads)
    args.out = args.out or ("eagle-head" if args.kind == "eagle" else "medusa-heads")
    if args.count_vocab:
        return run_count_vocab(args)
    if args.kind == "eagle":
        return run_eagle(args)
    if args.init_from:
        raise ValueError("--init-from continues an EAGLE head: add --kind eagle (Medusa heads train from scratch).")
    chosen = {field: getattr(args, opt) for opt, field in TRAIN_OPTIONS.items() if getattr(args, opt) is not None}
    chosen |= ({"token_input": False} if args.plain_medusa else {}) | ({"train_vocab": "full"} if args.full_vocab else {})
    config = dataclasses.replace(TINY if args.tiny else TrainConfig(), **chosen)
    # The data: the target at the app's precision (gen_dtype), whose hidden states the heads will read. The training:
    # the target in float32, whose LM head is a plain Linear with autograd (fp16-weights packs it).
    options = model_access(args)
    target = load_model(args.target, args.device, "float32", **options)
    cache = Path(args.cache_dir).expanduser() if args.cache_dir else cache_root() / "medusa"
    emit(f"training {config.num_heads} Medusa heads for {target.name} on {target.device}; data cache {cache}", err=True)
    generator = target if config.gen_dtype == "float32" else load_model(args.target, args.device, config.gen_dtype, **options)
    data = load_or_make_data(generator, config, cache, progress=not args.no_progress)
    del generator
    n_train, n_held = data.train_hidden.shape[0], data.heldout_hidden.shape[0]
    emit(f"data: {n_train} training positions, {n_held} held out ({data.facts['prompts']} prompts)", err=True)
    fingerprint = target_fingerprint(target.model.get_input_embeddings().weight)
    result = train_heads(target, data, config, checkpoint_path(cache, config, fingerprint), resume=args.resume,
                         progress=not args.no_progress)  # fmt: skip
    base = args.base_model or (EMBEDDED_BASE_MODEL if args.target == EMBEDDED_TARGET else args.target)
    ship(result, config, Path(args.out), base, command=_train_command(args, chosen), data=data)
    final = result.evals[-1]
    emit(f"wrote {args.out} (target {result.fingerprint}); {result.facts['train_s']:.0f} s of training")
    emit("head  held-out top-1  top-5")
    for i, (a1, a5) in enumerate(zip(final.top1, final.top5), start=1):
        emit(f"{i:4d}  {a1:13.3f}  {a5:5.3f}")
    _emit_coverage(result.facts.get("draft_vocab_coverage") or [])
    return 0


def _emit_coverage(report: list[dict]) -> None:
    """The draft vocabulary's coverage table (token_counts.safetensors was written)."""
    if report:
        emit("draft vocabulary V'  share of the training tokens  of the held-out tokens")
        for row in report:
            emit(f"{row['size']:19,d}  {row['train_coverage']:28.3f}  {row['heldout_coverage']:22.3f}")


def _load_for_training(args: argparse.Namespace, gen_dtype: str):
    """(the target in float32 for training, the target at gen_dtype for the data, the cache folder)."""
    from specviz.models import load_model
    from specviz.models.loading import cache_root

    options = model_access(args)
    target = load_model(args.target, args.device, "float32", **options)
    generator = target if gen_dtype == "float32" else load_model(args.target, args.device, gen_dtype, **options)
    cache = Path(args.cache_dir).expanduser() if args.cache_dir else cache_root() / "medusa"
    return target, generator, cache


def run_eagle(args: argparse.Namespace) -> int:
    """train-heads --kind eagle: the data (own text + teacher-forced offline text), the training, the go/no-go gate."""
    import dataclasses

    from specviz.experiments.training import eagle, gate
    from specviz.experiments.training.config import CONTINUE, CONTINUE_TINY, EAGLE_TINY, EagleConfig
    from specviz.models.medusa import target_fingerprint

    chosen = {field: getattr(args, opt) for opt, field in (TRAIN_OPTIONS | EAGLE_OPTIONS).items()
              if getattr(args, opt) is not None and field not in ("num_heads", "num_layers")}  # fmt: skip
    chosen |= {"train_vocab": "full"} if args.full_vocab else {}
    base = EAGLE_TINY if args.tiny else EagleConfig()
    if args.init_from:  # a continued head's schedule, unless set
        base = dataclasses.replace(base, **(CONTINUE_TINY if args.tiny else CONTINUE))
    config = dataclasses.replace(base, **chosen)
    target, generator, cache = _load_for_training(args, config.gen_dtype)
    # The starting head, read whole before anything is written (--out may be the same folder).
    start = eagle.read_start(Path(args.init_from), target) if args.init_from else None
    if start is not None:
        emit(f"continuing the head in {start.folder} ({start.steps:,} steps, {start.positions_seen:,} positions seen)", err=True)
    emit(f"training an EAGLE head for {target.name} on {target.device}; data cache {cache}", err=True)
    data = eagle.load_or_make_eagle_data(generator, config, cache, progress=not args.no_progress)
    emit(f"data: {data.train.positions} training positions, {data.heldout.positions} held out "
         f"({len(data.train.lengths) + len(data.heldout.lengths)} sequences)", err=True)  # fmt: skip
    fingerprint = target_fingerprint(target.model.get_input_embeddings().weight)
    result = eagle.train_eagle(target, data, config, eagle.checkpoint_path(cache, config, fingerprint, start), resume=args.resume,
                               progress=not args.no_progress, start=start)  # fmt: skip
    final = result.evals[-1]
    cost = gate.step_cost(generator, result.head, eagle.draft_ids_of(data, config.draft_vocab))
    passed, lines = gate.gate_report(final.top1, cost, config.draft_vocab, final.positions_seen)
    verdict = dict(passed=passed, heldout_top1=round(final.top1, 4), step_cost=round(cost, 4), draft_vocab=config.draft_vocab,
                positions_seen=final.positions_seen, cost_precision=generator.precision)  # fmt: skip
    base = args.base_model or (EMBEDDED_BASE_MODEL if args.target == EMBEDDED_TARGET else args.target)
    report = eagle.ship_eagle(result, data, config, Path(args.out), base, _train_command(args, chosen), verdict)
    emit(f"wrote {args.out} (target {result.fingerprint}); {result.facts['train_s']:.0f} s of training")
    emit("positions seen  held-out first-draft-token top-1  held-out positions scored")
    join = len(eagle.scaling_table(start.evals)) if start is not None else -1  # the first row of this run
    for i, (seen, top1, scored) in enumerate(eagle.scaling_table(result.evals)):
        if i == join:
            emit(f"-- continued from {start.folder}, on this run's held-out set (from here on)")
        emit(f"{seen:14,d}  {top1:31.3f}  {scored:25,d}")
    for line in lines:
        emit(line)
    _emit_coverage(report)
    return 0


def run_count_vocab(args: argparse.Namespace) -> int:
    """train-heads --count-vocab: token_counts.safetensors for an existing heads folder, from its recipe's data."""
    import dataclasses

    import torch

    from specviz.experiments.training.config import EagleConfig, TrainConfig
    from specviz.experiments.training.eagle import load_or_make_eagle_data
    from specviz.experiments.training.medusa import load_or_make_data
    from specviz.experiments.training.save import write_token_counts

    folder = Path(args.out)
    try:
        saved = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"--count-vocab needs a heads folder with a readable config.json; {folder} has none ({type(exc).__name__}).") from None
    eagle = isinstance(saved, dict) and saved.get("specviz_kind") == "eagle"
    base = EagleConfig() if eagle else TrainConfig()
    recipe = (saved.get("training") or {}).get("config") or {} if isinstance(saved, dict) else {}
    known = {f.name for f in dataclasses.fields(base)}
    config = dataclasses.replace(base, **{k: v for k, v in recipe.items() if k in known})
    target, generator, cache = _load_for_training(args, config.gen_dtype)
    emit(f"counting the tokens of {folder}'s training data (recipe from its config.json); data cache {cache}", err=True)
    if eagle:
        data = load_or_make_eagle_data(generator, config, cache, progress=not args.no_progress)
        train, held = torch.cat([data.train.tokens, data.train.argmax]), data.heldout.argmax
    else:
        heads_data = load_or_make_data(generator, config, cache, progress=not args.no_progress)
        train, held = heads_data.train_tokens, heads_data.heldout_tokens
    report = write_token_counts(folder, train, held, target.vocab_size, "the target's own tokens in the heads' training data")
    emit(f"wrote {folder / 'token_counts.safetensors'} ({int(train.numel()):,} training positions)")
    _emit_coverage(report)
    return 0


def _train_command(args: argparse.Namespace, chosen: dict) -> str:
    """The command line that reproduces a run's heads (the options that change them), for config.json."""
    parts = ["python -m specviz train-heads"] + (["--kind eagle"] if args.kind == "eagle" else []) + (["--tiny"] if args.tiny else [])
    if args.target != EMBEDDED_TARGET:
        parts.append(f"--target {args.target}")
    by_field = {field: opt for opt, field in (TRAIN_OPTIONS | EAGLE_OPTIONS).items()}
    parts += [f"--{by_field[f].replace('_', '-')} {v}" for f, v in chosen.items() if f in by_field]
    parts += (["--plain-medusa"] if args.plain_medusa else []) + (["--full-vocab"] if args.full_vocab else [])
    parts += [f"--init-from {args.init_from}"] if args.init_from else []
    return " ".join(parts + [f"--out {args.out}"])
