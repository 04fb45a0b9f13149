"""python -m specviz generate | info | bench — the command-line face of the engine."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence

from specviz.config import DRAFTER_KINDS, EMBEDDED_TARGET, RunConfig, validate_prompt

ANSI = {"accepted": "\033[32m", "resampled": "\033[33m", "bonus": "\033[36m", "target": "\033[0m", "prompt": "\033[90m"}
RESET = "\033[0m"


def _add_run_options(p: argparse.ArgumentParser) -> None:
    d = RunConfig  # every default comes from RunConfig, so the CLI and the app agree
    p.add_argument("--target", default=EMBEDDED_TARGET, help="hub id, local folder or .gguf file (default: embedded SmolLM2-135M-Instruct)")
    p.add_argument("--draft", default=None, help="draft model for --drafter model (same tokenizer as the target)")
    p.add_argument("--drafter", choices=DRAFTER_KINDS, default=d.drafter, help=f"default: {d.drafter}")
    p.add_argument("--exit-layer", type=int, default=None, help="early exit: target blocks the draft runs (default ~93%% of the depth)")
    p.add_argument("--ngram-max", type=int, default=d.ngram_max)
    p.add_argument("--ngram-min", type=int, default=d.ngram_min)
    p.add_argument("--ngram-threshold", type=float, default=d.ngram_threshold, help=f"n-gram drafter: stop drafting when its top probability falls below this (default {d.ngram_threshold})")
    p.add_argument("--num-draft-tokens", "-k", type=int, default=d.num_draft_tokens)
    p.add_argument("--adaptive-k", action="store_true", help="grow k after fully accepted rounds, shrink after rejections")
    p.add_argument("--temperature", type=float, default=d.temperature, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=d.top_k)
    p.add_argument("--top-p", type=float, default=d.top_p)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    p.add_argument("--no-chat", action="store_true", help="feed the prompt raw, without the chat template")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--trust-remote-code", action="store_true", help="run code shipped in a model repository (only if you trust it)")
    p.add_argument("--allow-download", action="store_true", help="let hub ids download (off by default: offline)")
    p.add_argument("--allow-pickle", action="store_true", help="load .bin/.pt checkpoints, which can run code (only if you trust them)")


def config_from_args(args: argparse.Namespace) -> RunConfig:
    return RunConfig(
        target=args.target,
        draft=args.draft,
        drafter=args.drafter,
        exit_layer=args.exit_layer,
        ngram_max=args.ngram_max,
        ngram_min=args.ngram_min,
        ngram_threshold=args.ngram_threshold,
        num_draft_tokens=args.num_draft_tokens,
        adaptive_k=args.adaptive_k,
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m specviz", description="Speculative decoding you can watch.")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="decode one prompt speculatively (or plainly with --baseline)")
    _add_run_options(gen)
    src = gen.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt")
    src.add_argument("--prompt-file")
    gen.add_argument("--num-samples", type=int, default=1, help="independent continuations (seeds derived from --seed)")
    gen.add_argument("--baseline", action="store_true", help="plain target decoding, one token per pass")
    gen.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    info = sub.add_parser("info", help="devices, default models and whether they load")
    info.add_argument("--device", default="auto")
    add_bench_parser(sub)
    return parser


def sample_seed(seed: int, i: int) -> int:
    """Seed of the i-th sample: the first sample uses --seed itself."""
    return seed + 1_000_003 * i


def step_to_json(r) -> dict:
    return {
        "drafted": list(r.drafted),
        "num_accepted": r.num_accepted,
        "fates": list(r.draft_fates),
        "emitted": list(r.emitted),
        "emitted_fates": list(r.emitted_fates),
        "num_draft_tokens": r.num_draft_tokens,
        "draft_ms": round(r.draft_ms, 3),
        "verify_ms": round(r.verify_ms, 3),
        "round_ms": round(r.round_ms, 3),  # drafting, verify pass, rule, commit and rollback
        "record_ms": round(r.record_ms, 3),  # building the chart record, outside round_ms
    }


def stats_to_json(s) -> dict:
    return {
        "new_tokens": s.new_tokens,
        "target_passes": s.target_passes,
        "tokens_per_target_pass": s.tokens_per_target_pass,
        "drafted": s.drafted,
        "accepted": s.accepted,
        "acceptance_rate": s.acceptance_rate,
        "alpha": s.alpha,
        "wall_s": s.wall_s,
        "tokens_per_s": s.tokens_per_s,
    }


def _coloured(tokenizer, prompt_ids: list[int], records) -> str:
    parts = [ANSI["prompt"] + tokenizer.decode(prompt_ids) + RESET]
    for r in records:
        for tok, fate in zip(r.emitted, r.emitted_fates):
            parts.append(ANSI[fate] + tokenizer.decode([tok]) + RESET)
    return "".join(parts)


def cmd_generate(args: argparse.Namespace) -> int:
    from specviz.models import encode_prompt, load_model
    from specviz.runs import build_decoder

    config = config_from_args(args)
    if args.num_samples < 1:
        raise ValueError(f"--num-samples must be at least 1; got {args.num_samples}.")
    if args.prompt_file:
        with open(args.prompt_file, encoding="utf-8") as fh:
            text = fh.read()
    else:
        text = args.prompt
    validate_prompt(text)
    target = load_model(config.target, **config.load_options())
    draft = None
    if config.drafter == "model" and not args.baseline:
        draft = load_model(config.draft, **config.load_options())
    prompt_ids = encode_prompt(target.tokenizer, text, config.chat)
    early_exit = None
    if config.drafter == "early-exit" and not args.baseline:
        from specviz.models import early_exit_view
        from specviz.runs import exit_layer_for

        early_exit = early_exit_view(target.model, exit_layer_for(config, target))
    samples = []
    for i in range(args.num_samples):
        decoder = build_decoder(config, target, prompt_ids, draft, early_exit=early_exit, seed=sample_seed(config.seed, i), baseline=args.baseline)
        decoder.run()
        samples.append(decoder)
    if args.json:
        out = {
            "config": {**config.to_dict(), "baseline": args.baseline, "num_samples": args.num_samples},
            "prompt_ids": prompt_ids,
            "samples": [
                {
                    "seed": d.config.seed,
                    "output_ids": d.generated,
                    "text": target.tokenizer.decode(d.generated, skip_special_tokens=True),
                    "steps": [step_to_json(r) for r in d.records],
                    "stats": stats_to_json(d.stats()),
                }
                for d in samples
            ],
        }
        json.dump(out, sys.stdout)
        sys.stdout.write("\n")
        return 0
    tty = sys.stdout.isatty()
    for d in samples:
        if tty:
            print(_coloured(target.tokenizer, prompt_ids, d.records))
        else:
            print(target.tokenizer.decode(d.generated, skip_special_tokens=True))
        s = d.stats()
        acc = "n/a" if s.acceptance_rate is None else f"{s.acceptance_rate:.2f}"
        alpha = "n/a" if s.alpha is None else f"{s.alpha:.2f}"
        mode = "baseline" if args.baseline else config.drafter
        print(
            f"[{mode}] {s.new_tokens} tokens in {s.wall_s:.2f}s = {s.tokens_per_s:.1f} tok/s; "
            f"{s.tokens_per_target_pass:.2f} tokens/target pass; accepted/drafted {acc}; alpha (E[sum min(p,q)]) {alpha}",
            file=sys.stderr if tty else sys.stdout,
        )
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    import torch

    from specviz.models import load_model, resolve_device
    from specviz.models.loading import cache_root, embedded_gguf_path

    print(f"torch {torch.__version__}; cuda available: {torch.cuda.is_available()}", flush=True)
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            print(f"  cuda:{i} {torch.cuda.get_device_name(i)}")
    print(f"auto device: {resolve_device('auto')}")
    print(f"default target: {EMBEDDED_TARGET}; default drafter: {RunConfig.drafter}")
    print(f"weights cache: {cache_root()}")
    try:
        print(f"embedded GGUF: {embedded_gguf_path()}")
        start = time.perf_counter()
        m = load_model(EMBEDDED_TARGET, args.device)
        print(f"loads: yes ({time.perf_counter() - start:.1f}s, {m.num_layers} layers, vocab {m.vocab_size}, {m.device}, {m.dtype})")
    except ValueError as exc:
        print(f"loads: no — {exc}")
        return 1
    return 0


# --- bench: the sweep lives in specviz.bench; here only its arguments and its output -------------


def _csv_list(text: str, cast, what: str) -> tuple:
    try:
        items = tuple(cast(x.strip()) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{what} must be a comma-separated list, e.g. 2,4,8; got {text!r}.") from exc
    if not items:
        raise argparse.ArgumentTypeError(f"{what} must not be empty.")
    return items


def add_bench_parser(sub) -> None:
    """Register `python -m specviz bench` on the CLI's subparsers."""
    from specviz.bench import BENCH_DRAFTERS, DEFAULT_PROMPTS, SweepSpec

    d = SweepSpec  # every default comes from SweepSpec, so the CLI and the Benchmark page agree
    p = sub.add_parser(
        "bench",
        help="sweep drafters, k and temperature over a prompt set, against plain decoding",
        description="Benchmark speculative decoding against plain decoding of the same target, prompt and sampling: "
        "every setting and its baseline run interleaved, a warm-up discarded, medians and min-max of the repeats.",
    )
    p.add_argument("--prompts", default=str(DEFAULT_PROMPTS), help="JSON list of {category, title, prompt} (default: assets/prompts.json)")
    p.add_argument("--categories", type=lambda s: _csv_list(s, str, "--categories"), default=None, help="e.g. code,prose,copy (default: all)")
    p.add_argument("--per-category", type=int, default=None, help="only the first N prompts of each category (default: all)")
    p.add_argument("--drafters", type=lambda s: _csv_list(s, str, "--drafters"), default=d.drafters,
                   help=f"comma-separated, from {','.join(BENCH_DRAFTERS)} (default: {','.join(d.drafters)})")
    p.add_argument("--k", type=lambda s: _csv_list(s, int, "--k"), default=d.ks, help=f"tokens drafted per round (default: {','.join(map(str, d.ks))})")
    p.add_argument("--temperatures", type=lambda s: _csv_list(s, float, "--temperatures"), default=d.temperatures,
                   help=f"default: {','.join(f'{t:g}' for t in d.temperatures)}")
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    p.add_argument("--repeats", type=int, default=d.repeats, help=f"timed runs of every setting, medians and min-max reported (default: {d.repeats})")
    p.add_argument("--warmup", type=int, default=d.warmup, help=f"rotations run first and discarded, per prompt and temperature (default: {d.warmup})")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--target", default=EMBEDDED_TARGET, help="hub id, local folder or .gguf file (default: embedded SmolLM2-135M-Instruct)")
    p.add_argument("--draft", default=None, help="draft model for the 'model' drafter (same tokenizer as the target)")
    p.add_argument("--exit-layer", type=int, default=None, help="early exit: target blocks the draft runs")
    p.add_argument("--no-chat", action="store_true", help="feed prompts raw, without the chat template")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--allow-pickle", action="store_true", help="load .bin/.pt checkpoints (only if you trust them)")
    p.add_argument("--allow-download", action="store_true")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice); 1 is steadier on a busy machine")
    p.add_argument("--out", default=None, help="write the results table here (.csv, or .json for a list of records)")
    p.add_argument("--append", action="store_true", help="add the rows to an existing --out CSV instead of replacing it")


def _print_progress(done: int, total: int, message: str) -> None:
    print(f"[{done}/{total}] {message}", file=sys.stderr, flush=True)


def cmd_bench(args: argparse.Namespace) -> int:
    from pathlib import Path

    from specviz.bench import COLUMNS, SweepSpec, first_per_category, load_prompts, rows_to_frame, run_sweep
    from specviz.models import load_model

    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be at least 1; got {args.threads}.")
        import torch

        torch.set_num_threads(args.threads)
    spec = SweepSpec(
        drafters=tuple(args.drafters), ks=tuple(args.k), temperatures=tuple(args.temperatures),
        max_new_tokens=args.max_new_tokens, seed=args.seed, chat=not args.no_chat, exit_layer=args.exit_layer,
        repeats=args.repeats, warmup=args.warmup,
    )
    prompts = first_per_category(load_prompts(args.prompts, args.categories), args.per_category)
    out = Path(args.out) if args.out else None
    if out is not None and out.suffix.lower() not in (".csv", ".json"):
        raise ValueError(f"--out must end in .csv or .json; got {args.out}.")
    if args.append and (out is None or out.suffix.lower() != ".csv"):
        raise ValueError("--append adds rows to a CSV: give --out FILE.csv.")
    if args.append and out.is_file() and out.stat().st_size > 0:
        with out.open(encoding="utf-8") as fh:
            if fh.readline().strip() != ",".join(COLUMNS):
                raise ValueError(f"{out} has other columns than this benchmark writes; --append needs a CSV from the same version.")
    kwargs = dict(trust_remote_code=args.trust_remote_code, allow_download=args.allow_download, allow_pickle=args.allow_pickle)
    target = load_model(args.target, args.device, args.dtype, **kwargs)
    draft = load_model(args.draft, args.device, args.dtype, **kwargs) if "model" in spec.drafters and args.draft else None
    print(
        f"benchmark: {len(prompts)} prompts, {spec.num_settings(len(prompts))} settings x ({spec.warmup} warm-up + "
        f"{spec.repeats} repeats) = {spec.num_runs(len(prompts))} runs on {target.name} ({target.device}, {target.dtype})",
        file=sys.stderr,
    )
    frame = rows_to_frame(run_sweep(target, prompts, spec, draft=draft, on_progress=_print_progress))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.suffix.lower() == ".json":
            out.write_text(frame.to_json(orient="records", indent=1), encoding="utf-8")
        else:
            append = args.append and out.is_file() and out.stat().st_size > 0
            frame.to_csv(out, index=False, float_format="%.4g", mode="a" if append else "w", header=not append)
        print(f"wrote {len(frame)} rows to {out}", file=sys.stderr)
    show = ["category", "prompt", "drafter", "k", "temperature", "alpha", "acceptance_rate", "tokens_per_pass",
            "baseline_tokens_per_s", "speedup", "speedup_low", "speedup_high", "speedup_cpu", "verify_cost"]
    print(frame[show].to_string(index=False, float_format=lambda x: f"{x:.2f}", na_rep="n/a"))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=os.environ.get("SPECVIZ_LOG", "WARNING"))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = build_parser().parse_args(argv)
    try:
        if args.command == "generate":
            return cmd_generate(args)
        if args.command == "info":
            return cmd_info(args)
        return cmd_bench(args)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
