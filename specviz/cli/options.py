"""RunConfig <-> argparse: the run options `generate` takes (every default read from RunConfig, so the CLI and the
app agree), the config they make, and the small argument types and checks several subcommands share."""

from __future__ import annotations

import argparse
from pathlib import Path

from specviz.config import DRAFTER_KINDS, EMBEDDED_TARGET, RunConfig

DTYPE_HELP = (
    "auto (CPU: fp16-weights where fbgemm runs, else float32; CUDA: bfloat16), float32, fp16-weights "
    "(float16 weights, float32 math), bfloat16 or float16"
)


def add_run_options(p: argparse.ArgumentParser) -> None:
    d = RunConfig  # every default comes from RunConfig, so the CLI and the app agree
    p.add_argument("--target", default=EMBEDDED_TARGET, help="hub id, local folder or .gguf file (default: embedded SmolLM2-135M-Instruct)")
    p.add_argument("--draft", default=None, help="draft model for --drafter model (same tokenizer as the target)")
    p.add_argument("--drafter", choices=DRAFTER_KINDS, default=d.drafter, help=f"default: {d.drafter}")
    p.add_argument("--exit-layer", type=int, default=None, help="early exit: target blocks the draft runs (default ~93%% of the depth)")
    p.add_argument("--medusa-heads", default=None, metavar="PATH", help="Medusa heads folder (Medusa's layout; default: the heads shipped for the embedded target)")
    p.add_argument("--eagle-head", default=None, metavar="PATH", help="EAGLE head folder (default: the head shipped for the embedded target)")
    p.add_argument("--draft-vocab", type=int, default=d.draft_vocab, metavar="N",
                   help="Medusa and EAGLE: score only the N tokens the target says most often (the heads' token counts; 0 = the full vocabulary)")
    p.add_argument("--ngram-max", type=int, default=d.ngram_max)
    p.add_argument("--ngram-min", type=int, default=d.ngram_min)
    p.add_argument("--ngram-threshold", type=float, default=d.ngram_threshold, help=f"n-gram drafter: stop drafting when its top probability falls below this (default {d.ngram_threshold})")
    p.add_argument("--num-draft-tokens", "-k", type=int, default=d.num_draft_tokens)
    p.add_argument("--adaptive-k", action="store_true", help="grow k after fully accepted rounds, shrink after rejections")
    p.add_argument("--tree-width", type=int, default=d.tree_width, help="children per node of a token tree (1 = a chain; k is then the node budget)")
    p.add_argument("--temperature", type=float, default=d.temperature, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=d.top_k)
    p.add_argument("--top-p", type=float, default=d.top_p)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    p.add_argument("--no-chat", action="store_true", help="feed the prompt raw, without the chat template")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto", help=DTYPE_HELP)
    p.add_argument("--trust-remote-code", action="store_true", help="run code shipped in a model repository (only if you trust it)")
    p.add_argument("--allow-download", action="store_true", help="let hub ids download (off by default: offline)")
    p.add_argument("--allow-pickle", action="store_true", help="load .bin/.pt checkpoints, which can run code (only if you trust them)")


def config_from_args(args: argparse.Namespace) -> RunConfig:
    return RunConfig(
        target=args.target,
        draft=args.draft,
        drafter=args.drafter,
        exit_layer=args.exit_layer,
        medusa_heads=args.medusa_heads,
        eagle_head=args.eagle_head,
        draft_vocab=args.draft_vocab,
        ngram_max=args.ngram_max,
        ngram_min=args.ngram_min,
        ngram_threshold=args.ngram_threshold,
        num_draft_tokens=args.num_draft_tokens,
        adaptive_k=args.adaptive_k,
        tree_width=args.tree_width,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        chat=not args.no_chat,
        device=args.device,
        dtype=args.dtype,
        trust_remote_code=args.trust_remote_code,
        allow_download=args.allow_download,
        allow_pickle=args.allow_pickle,
    )


def batch_sizes_arg(text: str) -> tuple[int, ...]:
    """'1,2,4' -> (1, 2, 4): the batch sizes --batch takes."""
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"batch sizes are whole numbers separated by commas, e.g. 1,2,4,8; got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"batch sizes must be at least 1; got {text!r}")
    return sizes


def csv_list(text: str, cast, what: str) -> tuple:
    try:
        items = tuple(cast(x.strip()) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{what} must be a comma-separated list, e.g. 2,4,8; got {text!r}.") from exc
    if not items:
        raise argparse.ArgumentTypeError(f"{what} must not be empty.")
    return items


def check_output_file(path: str, flag: str) -> None:
    """Fail at once, with a message naming the flag, where a file cannot be written at path (a folder, a missing or
    non-folder parent, no permission); a file created to find out is removed again."""
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"{flag} {path} is a folder; give a file name, e.g. {target / 'run.json'}.")
    parent = target.parent
    if not parent.is_dir():
        raise ValueError(f"{flag} {path}: the folder {parent} {'is not a folder' if parent.exists() else 'does not exist'}; create it first.")
    existed = target.exists()
    try:
        with open(target, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise ValueError(f"{flag} {path} cannot be written: {exc.strerror or exc}.") from None
    if not existed:
        target.unlink()


def set_threads(threads: int | None) -> None:
    """--threads: torch's CPU threads for this process (None: torch's choice)."""
    if threads is None:
        return
    if threads < 1:
        raise ValueError(f"--threads must be at least 1; got {threads}.")
    import torch

    torch.set_num_threads(threads)
