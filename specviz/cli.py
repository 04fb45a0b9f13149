"""python -m specviz generate | replay | info | bench | profile | batch | train-heads | room | serve | serve-pair | probe — the
command-line face of the engine."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from specviz.config import DRAFTER_KINDS, EMBEDDED_TARGET, RunConfig, validate_prompt
from specviz.core.divergence import emitted_margins, first_divergence
from specviz.workshop.room import add_room_parser, cmd_room

DTYPE_HELP = (
    "auto (CPU: fp16-weights where fbgemm runs, else float32; CUDA: bfloat16), float32, fp16-weights "
    "(float16 weights, float32 math), bfloat16 or float16"
)

ANSI = {"accepted": "\033[32m", "resampled": "\033[33m", "bonus": "\033[36m", "target": "\033[0m", "prompt": "\033[90m"}
RESET = "\033[0m"
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 but newline and tab, DEL, C1


def terminal_text(text: str) -> str:
    """text with every C0 and C1 control character but newline and tab written as an escape (ESC as \\x1b), so a
    token, title or message from a file or a model cannot clear the screen, retitle the window or plant a link."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def emit(text: object = "", *, err: bool = False, flush: bool = False, escaped: bool = False) -> None:
    """Every line the command line prints goes through here: to stdout (or stderr), control characters escaped.
    escaped=True: the text is already built from terminal_text() pieces plus our own colour codes (ANSI)."""
    line = str(text) if escaped else terminal_text(str(text))
    print(line, file=sys.stderr if err else sys.stdout, flush=flush)


class EscapingFormatter(logging.Formatter):
    """Log lines on stderr are printed text too: escaped like emit's."""

    def format(self, record: logging.LogRecord) -> str:
        return terminal_text(super().format(record))


def painted(text: str, kind: str) -> str:
    """text in the colour of its fate (or the prompt's), escaped, for emit(..., escaped=True)."""
    return ANSI[kind] + terminal_text(text) + RESET


def _add_run_options(p: argparse.ArgumentParser) -> None:
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
    gen.add_argument(
        "--check-baseline",
        action="store_true",
        help="temperature 0 only: also decode plainly and report whether the output is the same, and where it first differs "
        "(with the top-2 logit margin there); greedy identity is a float32 guarantee, bf16/fp16 can flip near-ties",
    )
    gen.add_argument("--record", metavar="FILE", help="also write a recording (every sample, plus a plain-decoding baseline) that replays without a model")
    rep = sub.add_parser("replay", help="print a recording's coloured stream and stats; loads no model")
    rep.add_argument("file", help="a recording written by generate --record or the app's Save run")
    info = sub.add_parser("info", help="devices, default models and whether they load")
    info.add_argument("--device", default="auto")
    add_bench_parser(sub)
    _add_profile_parser(sub)
    _add_batch_parser(sub)
    _add_train_heads_parser(sub)
    add_room_parser(sub)
    _add_serve_parser(sub)
    _add_serve_pair_parser(sub)
    _add_probe_parser(sub)
    return parser


def _add_profile_parser(sub) -> None:
    p = sub.add_parser("profile", help="this machine's cost profile: a target pass over 1..17 tokens, and each drafter's cost per token")
    p.add_argument("--target", default=EMBEDDED_TARGET, help="hub id, local folder or .gguf file (default: embedded SmolLM2-135M-Instruct)")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto", help=DTYPE_HELP)
    p.add_argument("--context", type=int, default=256, help="tokens already cached before each timed pass (default 256)")
    p.add_argument("--max-tokens", type=int, default=17, help="time passes over 1..N new tokens (default 17: k = 0..16)")
    p.add_argument("--repeats", type=int, default=5, help="interleaved repeats; the profile keeps medians (default 5)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice); 1 is steadier on a busy machine")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="wall clock (synchronised), or process CPU time (CPU only; steadier on a shared machine)")
    p.add_argument("--label", default="", help="a short name for the theory page's menu")
    p.add_argument("--batch", type=batch_sizes_arg, default=(), metavar="B,B,...",
                   help="also time passes over B rows at once (e.g. 1,2,4,8,16,32), kept as batch_pass_ms")
    p.add_argument("--out", default=None, help="write the profile here as JSON")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--allow-download", action="store_true")
    p.add_argument("--allow-pickle", action="store_true")


def batch_sizes_arg(text: str) -> tuple[int, ...]:
    """'1,2,4' -> (1, 2, 4): the batch sizes --batch takes."""
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"batch sizes are whole numbers separated by commas, e.g. 1,2,4,8; got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"batch sizes must be at least 1; got {text!r}")
    return sizes


def cmd_profile(args: argparse.Namespace) -> int:
    from specviz.experiments.cost_profile import batch_profile_table, measure_profile, profile_table
    from specviz.models import load_model

    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be at least 1; got {args.threads}.")
        import torch

        torch.set_num_threads(args.threads)
    target = load_model(args.target, args.device, args.dtype, trust_remote_code=args.trust_remote_code,
                        allow_download=args.allow_download, allow_pickle=args.allow_pickle)
    emit(f"profiling {target.name} on {target.device} ({target.precision}), context {args.context} tokens", err=True)

    def progress(done: int, total: int, message: str) -> None:
        emit(f"[{done}/{total}] {message}", err=True, flush=True)

    profile = measure_profile(target, max_tokens=args.max_tokens, context_length=args.context, repeats=args.repeats,
                              threads=args.threads, clock=args.clock, on_progress=progress, label=args.label,
                              batch_sizes=args.batch)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(profile.to_json(), fh, indent=1)
            fh.write("\n")
        emit(f"wrote {args.out}", err=True)
    emit(f"{profile.device_name}; {profile.dtype}; torch {profile.torch_version}; {profile.threads} threads; {profile.clock} clock; load average {profile.load_average}")
    emit(" k  tokens fed  pass ms  verify cost c_verify(k)")
    for k, ms, cost in profile_table(profile):
        emit(f"{k:2d}  {k + 1:10d}  {ms:7.2f}  {cost:6.2f}")
    for name, c in profile.draft_cost.items():
        emit(f"draft cost c, {name}: {c:.4f} of a 1-token pass ({profile.draft_ms_per_token[name]:.3f} ms per drafted token)")
    if profile.batch_pass_ms:
        emit("  B   t  pass ms  ms per row-token")
        for b, t, ms, per_token in batch_profile_table(profile):
            emit(f"{b:3d} {t:3d}  {ms:7.2f}  {per_token:7.3f}")
    return 0


def _add_batch_parser(sub) -> None:
    from specviz.drafters.specs import SPECULATIVE_KINDS
    from specviz.experiments.bench import DEFAULT_PROMPTS, SweepSpec

    d, s = RunConfig, SweepSpec
    p = sub.add_parser("batch", help="B prompts of one category at once: plain vs speculative tokens/s for every batch size B")
    p.add_argument("--batch", type=batch_sizes_arg, default=(1, 2, 4, 8, 16), metavar="B,B,...", help="batch sizes (default 1,2,4,8,16)")
    p.add_argument("--drafter", choices=SPECULATIVE_KINDS, default="lookup", help="default: lookup")
    p.add_argument("--category", default="copy", help="the benchmark prompts' category (copy, code, prose, qa; default copy)")
    p.add_argument("--prompts", default=str(DEFAULT_PROMPTS), help="JSON list of {category, title, prompt} (default: assets/prompts.json)")
    p.add_argument("--num-draft-tokens", "-k", type=int, default=d.num_draft_tokens)
    p.add_argument("--max-new-tokens", type=int, default=s.max_new_tokens, help=f"new tokens per row (default {s.max_new_tokens})")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default), where rows are checked against plain")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--repeats", type=int, default=1, help="timed runs of each side per B, alternating which goes first; medians (default 1)")
    p.add_argument("--warmup", type=int, default=1, help="runs of each side per B first, discarded (default 1)")
    p.add_argument("--target", default=EMBEDDED_TARGET, help="hub id, local folder or .gguf file (default: embedded SmolLM2-135M-Instruct)")
    p.add_argument("--draft", default=None, help="draft model for --drafter model (same tokenizer as the target)")
    p.add_argument("--exit-layer", type=int, default=None, help="early exit: target blocks the draft runs")
    p.add_argument("--medusa-heads", default=None, metavar="PATH", help="Medusa heads folder (default: the heads shipped for the embedded target)")
    p.add_argument("--no-chat", action="store_true", help="feed prompts raw, without the chat template")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto", help=DTYPE_HELP)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    p.add_argument("--out", default=None, help="also write the JSON here (the theory page reads assets/batch_cpu.json)")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--allow-download", action="store_true")
    p.add_argument("--allow-pickle", action="store_true")


def cmd_batch(args: argparse.Namespace) -> int:
    """Exit 1 when a greedy row differs from plain where the target's top two logits are not a near-tie."""
    import torch

    from specviz.experiments.batch import BatchSetup, bad_mismatches, measure_batches, results_json
    from specviz.experiments.bench import load_prompts
    from specviz.experiments.cost_profile import device_name
    from specviz.runs import resolve_models

    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be at least 1; got {args.threads}.")
        torch.set_num_threads(args.threads)
    config = RunConfig(target=args.target, draft=args.draft, drafter=args.drafter, exit_layer=args.exit_layer,
                       num_draft_tokens=args.num_draft_tokens, temperature=args.temperature, seed=args.seed,
                       max_new_tokens=args.max_new_tokens, chat=not args.no_chat, device=args.device, dtype=args.dtype,
                       trust_remote_code=args.trust_remote_code, allow_download=args.allow_download, allow_pickle=args.allow_pickle)  # fmt: skip
    setup = BatchSetup(config, tuple(load_prompts(args.prompts, [args.category])), args.repeats, args.warmup)
    models = resolve_models(config, drafters=[args.drafter])
    target = models.target
    emit(f"batch: {args.drafter}, k={args.num_draft_tokens}, {len(setup.prompts)} {args.category} prompts (cycled) on "
          f"{target.name} ({target.device}, {target.precision}), B = {','.join(map(str, args.batch))}", err=True)  # fmt: skip
    points = measure_batches(models, setup, args.batch, on_progress=_print_progress)
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
                  f"{p.spec_tokens_per_pass:11.2f}  {p.spec_verify_width:12.2f}  {p.plain_overhead_ms_per_row:14.2f}, "
                  f"{p.spec_overhead_ms_per_row:.2f}  {p.load_average}")  # fmt: skip
    for p in points:
        if not p.physical:
            emit(f"warning: B={p.batch_size}: a ratio of {p.ratio:.2f} beats {p.spec_tokens_per_pass:.2f} tokens per pass; "
                  "the machine was busier for one side (check the load average, use --repeats)", err=True)  # fmt: skip
        for m in p.mismatches:
            emit(f"B={p.batch_size} row {m.stream}: first differs at generated token {m.position} "
                  f"({m.token} vs plain {m.plain_token}), target top-2 margin {m.margin:.2e}", err=True)  # fmt: skip
    bad = bad_mismatches(points)
    if bad:
        emit(f"error: {len(bad)} greedy row(s) differ from plain decoding away from a near-tie (margin above 1e-3)", err=True)
        return 1
    return 0


def sample_seed(seed: int, i: int) -> int:
    """Seed of the i-th sample: the first sample uses --seed itself."""
    return seed + 1_000_003 * i


def step_to_json(r) -> dict:
    step = _chain_step_to_json(r)
    if r.is_tree:  # a token-tree round: every node, and the path the rule accepted
        step["tree"] = {
            "nodes": [
                {"token": t, "parent": par, "q_draft": q, "p_target": p, "fate": f}
                for t, par, q, p, f in zip(r.drafted, r.tree_parents, r.q_draft, r.p_target, r.draft_fates)
            ],
            "accepted_path": list(r.accepted_path),
        }
    return step


def _chain_step_to_json(r) -> dict:
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


def _coloured(tokenizer, prompt_ids: list[int], records) -> str:
    """The prompt and every emitted token in its fate's colour, escaped: for emit(..., escaped=True)."""
    parts = [painted(tokenizer.decode(prompt_ids), "prompt")]
    for r in records:
        for tok, fate in zip(r.emitted, r.emitted_fates):
            parts.append(painted(tokenizer.decode([tok]), fate))
    return "".join(parts)


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


def cmd_generate(args: argparse.Namespace) -> int:
    from specviz.runs import decoder_for, prompt_ids, resolve_models

    config = config_from_args(args)
    if args.num_samples < 1:
        raise ValueError(f"--num-samples must be at least 1; got {args.num_samples}.")
    if args.check_baseline and not config.sampling.greedy:
        raise ValueError("--check-baseline compares greedy outputs token by token: use --temperature 0 (sampled outputs differ by design).")
    if args.check_baseline and args.baseline:
        raise ValueError("--check-baseline compares a speculative run with plain decoding: drop --baseline.")
    if args.prompt_file:
        with open(args.prompt_file, encoding="utf-8") as fh:
            text = fh.read()
    else:
        text = args.prompt
    validate_prompt(text)
    if args.record:
        check_output_file(args.record, "--record")  # before the models load and the run decodes
    models = resolve_models(config, drafters=() if args.baseline else None)  # plain decoding needs no draft
    target = models.target
    ids = prompt_ids(target, text, config.chat, max_new_tokens=config.max_new_tokens, num_draft_tokens=config.num_draft_tokens)  # within the model's context
    check = _baseline_for_check(args, config, target, ids)
    samples: list[dict] = []  # what --json prints; nothing else of a sample outlives its loop turn
    recorded = []  # what --record writes: each sample's records
    for i in range(args.num_samples):
        decoder = decoder_for(config, models, ids, seed=sample_seed(config.seed, i), baseline=args.baseline)
        decoder.run()
        difference = None
        if check is not None:
            difference = first_divergence(decoder.generated, emitted_margins(decoder.records), check[0], check[1])
        if args.json:
            sample = {
                "seed": decoder.config.seed,
                "output_ids": decoder.generated,
                "text": target.tokenizer.decode(decoder.generated, skip_special_tokens=True),
                "steps": [step_to_json(r) for r in decoder.records],
                "stats": decoder.stats(check[2] if check else ()).to_json(),  # with --check-baseline, the measured speedup too
            }
            if check is not None:
                sample["same_as_baseline"] = difference is None
                sample["first_difference"] = difference.to_dict() if difference else None
            samples.append(sample)
        else:
            _print_sample(args, config, target, ids, decoder, check, difference)
        if args.record:  # the records only, not the decoder
            recorded.append(_recorded_sample(config, decoder, i, args.num_samples, args.baseline))
        del decoder  # its KV caches go with it: memory stays flat in --num-samples
    if args.record:
        _write_recording(args.record, config, text, ids, recorded, target, baseline=args.baseline, check=check)
    if args.json:
        out = {
            "config": {**config.to_dict(), "dtype": target.precision, "baseline": args.baseline, "num_samples": args.num_samples},
            "prompt_ids": ids,
            "samples": samples,
        }
        json.dump(out, sys.stdout)  # ensure_ascii (the default) writes every control character as \u001b
        sys.stdout.write("\n")
    return 0


def _recorded_sample(config: RunConfig, decoder, i: int, num_samples: int, baseline: bool):
    from specviz.recording import recorded_run

    name = "plain decoding" if baseline else config.drafter
    label = name if num_samples == 1 else f"{name} · sample {i + 1} (seed {decoder.config.seed})"
    return recorded_run(label, config, decoder.records, seed=decoder.config.seed, prefill_ms=decoder.prefill_ms)


def _write_recording(path: str, config: RunConfig, text: str, prompt_ids: list[int], runs: list, target, *, baseline: bool, check=None) -> None:
    """Write a recording of the samples; unless they are plain decoding already, time plain decoding of the
    first sample's seed for as many tokens as the longest sample, as the app's baseline does. With --check-baseline
    its plain run is the baseline, so the JSON's speedup and the recording's are one number."""
    from specviz.models import environment, token_bytes
    from specviz.recording import build_recording, recorded_run, save_recording
    from specviz.runs import build_decoder
    from specviz.viz.tokens import TokenTable

    base = None
    if check is not None:
        base = recorded_run("baseline (plain decoding)", config, check[2], seed=config.seed, prefill_ms=check[3])
    elif not baseline:
        plain = build_decoder(config, target, prompt_ids, seed=runs[0].seed, baseline=True)
        needed = max(r.metrics.new_tokens for r in runs)
        while not plain.done and len(plain.generated) < needed:
            plain.step()
        base = recorded_run("baseline (plain decoding)", config, plain.records, seed=runs[0].seed, prefill_ms=plain.prefill_ms)
    recording = build_recording(
        prompt=text, prompt_ids=prompt_ids, runs=runs, baseline=base,
        token_text=TokenTable(lambda i: token_bytes(target.tokenizer, i)), environment=environment(target),
    )  # fmt: skip
    save_recording(recording, path)
    emit(f"recorded {len(runs)} run(s) to {path}", err=True)


def _stats_line(mode: str, s) -> str:
    """One run's numbers (a specviz.core.metrics.RunMetrics) on one line."""
    acc = "n/a" if s.acceptance_rate is None else f"{s.acceptance_rate:.2f}"
    alpha = "n/a" if s.alpha is None else f"{s.alpha:.2f}"
    per_pass = "n/a" if s.tokens_per_target_pass is None else f"{s.tokens_per_target_pass:.2f}"
    return (
        f"[{mode}] {s.new_tokens} tokens in {s.wall_s:.2f}s = {s.tokens_per_s:.1f} tok/s; "
        f"{per_pass} tokens/target pass; accepted/drafted {acc}; alpha (E[sum min(p,q)]) {alpha}"
    )


def cmd_replay(args: argparse.Namespace) -> int:
    """Print each recorded run as the generate command would have, from the file alone (no model, no tokenizer)."""
    from specviz.recording import read_recording
    from specviz.viz.tokens import join_pieces

    rec = read_recording(args.file)
    tty = sys.stdout.isatty()
    emit(f"recording: {rec.title or args.file}; {rec.describe()}", err=tty)
    prompt = "".join(text for _, _, text in join_pieces([rec.token_text(t) for t in rec.prompt_ids]))
    for run in rec.runs:
        tokens = [(t, f) for r in run.records for t, f in zip(r.emitted, r.emitted_fates)]
        groups = join_pieces([rec.token_text(t) for t, _ in tokens])
        if tty:
            body = "".join(painted(text, tokens[start][1]) for start, _, text in groups)
            emit(terminal_text(f"\n{run.label}:\n") + painted(prompt, "prompt") + body, escaped=True)
        else:
            emit(f"\n{run.label}:\n" + "".join(text for _, _, text in groups))
        if run.error:
            emit(f"[{run.label}] stopped by an error: {run.error}")
        emit(_stats_line(run.label, run.metrics), err=tty)
    if rec.baseline is not None:
        emit(_stats_line(rec.baseline.label, rec.baseline.metrics), err=tty)
    return 0


def _baseline_for_check(args: argparse.Namespace, config: RunConfig, target, prompt_ids: list[int]) -> tuple[list[int], list[float], list, float] | None:
    """--check-baseline: plain greedy decoding's output ids, top-2 margins, records (for the measured speedup) and
    prefill time (for --record's baseline), kept (the decoder is not)."""
    if not args.check_baseline:
        return None
    from specviz.runs import build_decoder

    plain = build_decoder(config, target, prompt_ids, seed=config.seed, baseline=True)
    plain.run()
    return plain.generated, emitted_margins(plain.records), plain.records, plain.prefill_ms


def _print_sample(args, config: RunConfig, target, prompt_ids: list[int], d, check, difference) -> None:
    tty = sys.stdout.isatty()
    if tty:
        emit(_coloured(target.tokenizer, prompt_ids, d.records), escaped=True)
    else:
        emit(target.tokenizer.decode(d.generated, skip_special_tokens=True))
    s = d.stats(check[2] if check else ())
    mode = "baseline" if args.baseline else config.drafter
    same = ""
    if check is not None:
        same = f"; measured speedup {_fmt_speedup(s)} against plain decoding"
        same += "; same as plain greedy" if difference is None else (
            f"; differs from plain greedy at new token {difference.position} (top-2 logit margin {_fmt_margin(difference.margin)} here, "
            f"{_fmt_margin(difference.baseline_margin)} in the baseline)"
        )
    emit(_stats_line(mode, s) + same, err=tty)


def _fmt_speedup(m) -> str:
    if m.speedup_disturbed:
        return "disturbed (above the tokens per target pass)"
    return "n/a" if m.speedup is None else f"{m.speedup:.2f}x"


def _fmt_margin(margin: float | None) -> str:
    return "n/a" if margin is None else f"{margin:.4g}"


def _auto_precision(device: str) -> str:
    """What --dtype auto resolves to on this device, and why not fp16-weights on a CPU that cannot run it."""
    from specviz.models import fp16_weights_problem, resolve_device, resolve_dtype_name

    dev = resolve_device(device)
    problem = fp16_weights_problem(dev) if dev.type == "cpu" else None
    return resolve_dtype_name("auto", dev) + (f" (not fp16-weights: {problem})" if problem else "")


def cmd_info(args: argparse.Namespace) -> int:
    import torch

    from specviz.models import load_model, resolve_device
    from specviz.models.loading import cache_root, embedded_gguf_path

    emit(f"torch {torch.__version__}; cuda available: {torch.cuda.is_available()}", flush=True)
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            emit(f"  cuda:{i} {torch.cuda.get_device_name(i)}")
    emit(f"auto device: {resolve_device('auto')}")
    emit(f"auto dtype: {_auto_precision(args.device)}")
    emit(f"default target: {EMBEDDED_TARGET}; default drafter: {RunConfig.drafter}")
    emit(f"weights cache: {cache_root()}")
    try:
        emit(f"embedded GGUF: {embedded_gguf_path()}")
        start = time.perf_counter()
        m = load_model(EMBEDDED_TARGET, args.device)
        emit(f"loads: yes ({time.perf_counter() - start:.1f}s, {m.num_layers} layers, vocab {m.vocab_size}, {m.device}, {m.precision})")
    except ValueError as exc:
        emit(f"loads: no — {exc}")
        return 1
    return 0


# --- bench: the sweep lives in specviz.experiments.bench; here only its arguments and its output -------------


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
    from specviz.experiments.bench import BENCH_DRAFTERS, DEFAULT_PROMPTS, SweepSpec

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
    p.add_argument("--tree-width", type=lambda s: _csv_list(s, int, "--tree-width"), default=d.tree_widths,
                   help="children per token-tree node, e.g. 1,2,3 (1 = a chain; k is then the node budget; default: 1)")
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens)
    p.add_argument("--repeats", type=int, default=d.repeats, help=f"timed runs of every setting, medians and min-max reported (default: {d.repeats})")
    p.add_argument("--warmup", type=int, default=d.warmup, help=f"rotations run first and discarded, per prompt and temperature (default: {d.warmup})")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--target", default=EMBEDDED_TARGET, help="hub id, local folder or .gguf file (default: embedded SmolLM2-135M-Instruct)")
    p.add_argument("--draft", default=None, help="draft model for the 'model' drafter (same tokenizer as the target)")
    p.add_argument("--exit-layer", type=int, default=None, help="early exit: target blocks the draft runs")
    p.add_argument("--medusa-heads", default=None, metavar="PATH", help="Medusa heads folder (default: the heads shipped for the embedded target)")
    p.add_argument("--eagle-head", default=None, metavar="PATH", help="EAGLE head folder (default: the head shipped for the embedded target)")
    p.add_argument("--draft-vocab", type=int, default=0, metavar="N", help="Medusa and EAGLE: a draft vocabulary of N tokens (0 = full)")
    p.add_argument("--no-chat", action="store_true", help="feed prompts raw, without the chat template")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto", help=DTYPE_HELP)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--allow-pickle", action="store_true", help="load .bin/.pt checkpoints (only if you trust them)")
    p.add_argument("--allow-download", action="store_true")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice); 1 is steadier on a busy machine")
    p.add_argument("--out", default=None, help="write the results table here (.csv, or .json for a list of records)")
    p.add_argument("--append", action="store_true", help="add the rows to an existing --out CSV instead of replacing it")


def _print_progress(done: int, total: int, message: str) -> None:
    emit(f"[{done}/{total}] {message}", err=True, flush=True)


def cmd_bench(args: argparse.Namespace) -> int:

    from specviz.experiments.bench import COLUMNS, SweepSpec, first_per_category, load_prompts, rows_to_frame, run_sweep
    from specviz.runs import resolve_models

    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be at least 1; got {args.threads}.")
        import torch

        torch.set_num_threads(args.threads)
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
            if fh.readline().strip() != ",".join(COLUMNS):
                raise ValueError(f"{out} has other columns than this benchmark writes; --append needs a CSV from the same version.")
    where = RunConfig(target=args.target, draft=args.draft, exit_layer=args.exit_layer, medusa_heads=args.medusa_heads, eagle_head=args.eagle_head,
                      draft_vocab=args.draft_vocab, device=args.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code,
                      allow_download=args.allow_download, allow_pickle=args.allow_pickle)  # fmt: skip
    models = resolve_models(where, drafters=[d for d in spec.drafters if d != "model" or args.draft])  # run_sweep names a missing draft
    target, draft = models.target, models.draft
    emit(
        f"benchmark: {len(prompts)} prompts, {spec.num_settings(len(prompts))} settings x ({spec.warmup} warm-up + "
        f"{spec.repeats} repeats) = {spec.num_runs(len(prompts))} runs on {target.name} ({target.device}, {target.precision})",
        err=True,
    )
    frame = rows_to_frame(run_sweep(target, prompts, spec, draft=draft, early_exit=models.early_exit, heads=models.heads, eagle=models.eagle,
                                    on_progress=_print_progress))  # fmt: skip
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.suffix.lower() == ".json":
            out.write_text(frame.to_json(orient="records", indent=1), encoding="utf-8")
        else:
            append = args.append and out.is_file() and out.stat().st_size > 0
            frame.to_csv(out, index=False, float_format="%.4g", mode="a" if append else "w", header=not append)
        emit(f"wrote {len(frame)} rows to {out}", err=True)
    show = ["category", "prompt", "drafter", "k", "temperature", "alpha", "acceptance_rate", "tokens_per_pass",
            "baseline_tokens_per_s", "speedup", "speedup_low", "speedup_high", "speedup_cpu", "verify_cost"]
    if len(spec.tree_widths) > 1:
        show.insert(4, "tree_width")
    emit(frame[show].to_string(index=False, float_format=lambda x: f"{x:.2f}", na_rep="n/a"))
    if len(spec.tree_widths) > 1:
        from specviz.experiments.bench import tree_vs_chain_table

        emit("\ntrees vs chains at the same node budget k (means over prompts):")
        emit(tree_vs_chain_table(frame).to_string(index=False, float_format=lambda x: f"{x:.2f}", na_rep="n/a"))
    return 0


EMBEDDED_BASE_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"  # what the embedded GGUF is a quantisation of
TRAIN_OPTIONS = {  # option -> TrainConfig field; unset options take the config's (or --tiny's) default
    "heads": "num_heads", "layers": "num_layers", "steps": "steps", "lr": "lr", "batch_size": "batch_size",
    "seed": "seed", "data_tokens": "data_tokens", "max_new_tokens": "max_new_tokens", "gen_batch": "gen_batch",
}  # fmt: skip
EAGLE_OPTIONS = {  # option -> EagleConfig field, for --kind eagle only
    "teacher_tokens": "teacher_tokens", "window": "window", "seg_len": "seg_len", "draft_vocab": "draft_vocab",
}  # fmt: skip


def _add_train_heads_parser(sub) -> None:
    from specviz.experiments.train_eagle import EagleConfig
    from specviz.experiments.train_heads import TrainConfig

    d, e = TrainConfig, EagleConfig
    p = sub.add_parser("train-heads", help="train Medusa heads (or an EAGLE head: --kind eagle) for a target by self-distillation")
    p.add_argument("--kind", choices=("medusa", "eagle"), default="medusa", help="Medusa heads (default) or an EAGLE head (one layer over the target's features)")
    p.add_argument("--target", default=EMBEDDED_TARGET, help="hub id, local folder or .gguf file (default: embedded SmolLM2-135M-Instruct)")
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
    p.add_argument("--lr", type=float, default=None, help=f"AdamW peak learning rate (default {d.lr})")
    p.add_argument("--batch-size", type=int, default=None, help=f"positions per step (default {d.batch_size}; EAGLE {e.batch_size})")
    p.add_argument("--seed", type=int, default=None, help=f"prompt order, sampling and batches (default {d.seed})")
    p.add_argument("--data-tokens", type=int, default=None, help=f"positions of the target's own text to generate (default {d.data_tokens})")
    p.add_argument("--max-new-tokens", type=int, default=None, help=f"tokens per continuation (default {d.max_new_tokens})")
    p.add_argument("--gen-batch", type=int, default=None, help=f"continuations generated at once (default {d.gen_batch})")
    p.add_argument("--plain-medusa", action="store_true", help="Medusa's own heads, reading the hidden state only (default: the heads also read the newest token)")
    p.add_argument("--full-vocab", action="store_true", help="the training softmax over the whole vocabulary (default: the tokens the training data has; ~7x cheaper)")
    p.add_argument("--tiny", action="store_true", help="a small config that trains on a tiny model in seconds (tests, smoke runs)")
    p.add_argument("--resume", action="store_true", help="continue from this run's last checkpoint (same settings)")
    p.add_argument("--cache-dir", default=None, help="where the hidden states, labels and checkpoints go (default: specviz's cache)")
    p.add_argument("--base-model", default=None, help="base_model_name_or_path for config.json (default: the target's name)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--allow-download", action="store_true")
    p.add_argument("--allow-pickle", action="store_true")


def cmd_train_heads(args: argparse.Namespace) -> int:
    import dataclasses

    import torch

    from specviz.experiments.train_heads import TINY, TrainConfig, checkpoint_path, load_or_make_data, ship, train_heads
    from specviz.models import load_model
    from specviz.models.loading import cache_root
    from specviz.models.medusa import target_fingerprint

    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be at least 1; got {args.threads}.")
        torch.set_num_threads(args.threads)
    args.out = args.out or ("eagle-head" if args.kind == "eagle" else "medusa-heads")
    if args.count_vocab:
        return cmd_count_vocab(args)
    if args.kind == "eagle":
        return cmd_train_eagle(args)
    chosen = {field: getattr(args, opt) for opt, field in TRAIN_OPTIONS.items() if getattr(args, opt) is not None}
    chosen |= ({"token_input": False} if args.plain_medusa else {}) | ({"train_vocab": "full"} if args.full_vocab else {})
    config = dataclasses.replace(TINY if args.tiny else TrainConfig(), **chosen)
    # The data: the target at the app's precision (gen_dtype), whose hidden states the heads will read. The training:
    # the target in float32, whose LM head is a plain Linear with autograd (fp16-weights packs it).
    options = dict(trust_remote_code=args.trust_remote_code, allow_download=args.allow_download, allow_pickle=args.allow_pickle)
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

    options = dict(trust_remote_code=args.trust_remote_code, allow_download=args.allow_download, allow_pickle=args.allow_pickle)
    target = load_model(args.target, args.device, "float32", **options)
    generator = target if gen_dtype == "float32" else load_model(args.target, args.device, gen_dtype, **options)
    cache = Path(args.cache_dir).expanduser() if args.cache_dir else cache_root() / "medusa"
    return target, generator, cache


def cmd_train_eagle(args: argparse.Namespace) -> int:
    """train-heads --kind eagle: the data (own text + teacher-forced offline text), the training, the go/no-go gate."""
    import dataclasses

    from specviz.experiments import train_eagle as te
    from specviz.models.medusa import target_fingerprint

    chosen = {field: getattr(args, opt) for opt, field in (TRAIN_OPTIONS | EAGLE_OPTIONS).items()
              if getattr(args, opt) is not None and field not in ("num_heads", "num_layers")}  # fmt: skip
    chosen |= {"train_vocab": "full"} if args.full_vocab else {}
    config = dataclasses.replace(te.EAGLE_TINY if args.tiny else te.EagleConfig(), **chosen)
    target, generator, cache = _load_for_training(args, config.gen_dtype)
    emit(f"training an EAGLE head for {target.name} on {target.device}; data cache {cache}", err=True)
    data = te.load_or_make_eagle_data(generator, config, cache, progress=not args.no_progress)
    emit(f"data: {data.train.positions} training positions, {data.heldout.positions} held out "
         f"({len(data.train.lengths) + len(data.heldout.lengths)} sequences)", err=True)  # fmt: skip
    fingerprint = target_fingerprint(target.model.get_input_embeddings().weight)
    result = te.train_eagle(target, data, config, te.checkpoint_path(cache, config, fingerprint), resume=args.resume,
                            progress=not args.no_progress)  # fmt: skip
    final = result.evals[-1]
    cost = te.step_cost(generator, result.head, te.draft_ids_of(data, config.draft_vocab))
    passed, lines = te.gate_report(final.top1, cost, config.draft_vocab, final.positions_seen)
    gate = dict(passed=passed, heldout_top1=round(final.top1, 4), step_cost=round(cost, 4), draft_vocab=config.draft_vocab,
                positions_seen=final.positions_seen, cost_precision=generator.precision)  # fmt: skip
    base = args.base_model or (EMBEDDED_BASE_MODEL if args.target == EMBEDDED_TARGET else args.target)
    report = te.ship_eagle(result, data, config, Path(args.out), base, _train_command(args, chosen), gate)
    emit(f"wrote {args.out} (target {result.fingerprint}); {result.facts['train_s']:.0f} s of training")
    emit("positions seen  held-out first-draft-token top-1")
    for seen, top1 in te.scaling_table(result.evals):
        emit(f"{seen:14,d}  {top1:.3f}")
    for line in lines:
        emit(line)
    _emit_coverage(report)
    return 0


def cmd_count_vocab(args: argparse.Namespace) -> int:
    """train-heads --count-vocab: token_counts.safetensors for an existing heads folder, from its recipe's data."""
    import dataclasses

    import torch

    from specviz.experiments import train_eagle as te
    from specviz.experiments import train_heads as th

    folder = Path(args.out)
    try:
        saved = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"--count-vocab needs a heads folder with a readable config.json; {folder} has none ({type(exc).__name__}).") from None
    eagle = isinstance(saved, dict) and saved.get("specviz_kind") == "eagle"
    base = te.EagleConfig() if eagle else th.TrainConfig()
    recipe = (saved.get("training") or {}).get("config") or {} if isinstance(saved, dict) else {}
    known = {f.name for f in dataclasses.fields(base)}
    config = dataclasses.replace(base, **{k: v for k, v in recipe.items() if k in known})
    target, generator, cache = _load_for_training(args, config.gen_dtype)
    emit(f"counting the tokens of {folder}'s training data (recipe from its config.json); data cache {cache}", err=True)
    if eagle:
        data = te.load_or_make_eagle_data(generator, config, cache, progress=not args.no_progress)
        train, held = torch.cat([data.train.tokens, data.train.argmax]), data.heldout.argmax
    else:
        heads_data = th.load_or_make_data(generator, config, cache, progress=not args.no_progress)
        train, held = heads_data.train_tokens, heads_data.heldout_tokens
    report = th.write_token_counts(folder, train, held, target.vocab_size, "the target's own tokens in the heads' training data")
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
    return " ".join(parts + [f"--out {args.out}"])


# --- serve, serve-pair, probe: two services and the probe that tells them apart (docs/race.md) -------------------


def _add_service_options(p: argparse.ArgumentParser) -> None:
    """What a served model decodes with, and the owner's caps (serve and serve-pair)."""
    from specviz.workshop.service import ServiceConfig

    d, s = RunConfig, ServiceConfig
    p.add_argument("--target", default=EMBEDDED_TARGET, help="hub id, local folder or .gguf file (default: embedded SmolLM2-135M-Instruct)")
    p.add_argument("--draft", default=None, help="draft model for --drafter model (same tokenizer as the target)")
    p.add_argument("--num-draft-tokens", "-k", type=int, default=d.num_draft_tokens)
    p.add_argument("--tree-width", type=int, default=d.tree_width, help="children per node of a token tree (1 = a chain)")
    p.add_argument("--exit-layer", type=int, default=None, help="early exit: target blocks the draft runs")
    p.add_argument("--medusa-heads", default=None, metavar="PATH", help="Medusa heads folder (default: the heads shipped for the embedded target)")
    p.add_argument("--ngram-max", type=int, default=d.ngram_max)
    p.add_argument("--ngram-threshold", type=float, default=d.ngram_threshold)
    p.add_argument("--temperature", type=float, default=d.temperature, help="for requests that name none (default 0: greedy)")
    p.add_argument("--seed", type=int, default=d.seed, help="for requests that name none")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--model-id", default=None, help="the id /v1/models lists and requests name (default: --target)")
    p.add_argument("--max-tokens", type=int, default=s.max_tokens, help=f"cap on a request's max_tokens, and its default (default {s.max_tokens})")
    p.add_argument("--max-prompt-tokens", type=int, default=s.max_prompt_tokens,
                   help=f"cap on the prompt in the target's tokens, chat template included (default {s.max_prompt_tokens})")
    p.add_argument("--max-streams", type=int, default=s.max_streams, help=f"requests decoded at once, streamed or not; more get 429 (default {s.max_streams})")
    p.add_argument("--chunks", choices=("round", "token"), default=s.chunks, help="one SSE chunk per round (default) or per token")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto", help=DTYPE_HELP)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--allow-download", action="store_true")
    p.add_argument("--allow-pickle", action="store_true")


def _add_serve_parser(sub) -> None:
    p = sub.add_parser("serve", help="serve the target (speculating, or not with --drafter none) behind an OpenAI-compatible API")
    p.add_argument("--drafter", choices=DRAFTER_KINDS, default=RunConfig.drafter, help=f"default: {RunConfig.drafter}; none serves plain decoding")
    p.add_argument("--port", type=int, default=8000, help="default 8000")
    p.add_argument("--hide-truth", action="store_true", help="leave the drafter and tokens per target pass out of responses (the room exercise)")
    _add_service_options(p)


def _add_serve_pair_parser(sub) -> None:
    p = sub.add_parser("serve-pair", help="the room exercise: two services, one speculating, which one hidden (docs/workshop.md)")
    p.add_argument("--drafter", choices=[k for k in DRAFTER_KINDS if k != "none"], default="lookup", help="the speculating one's drafter (default lookup)")
    p.add_argument("--port", type=int, default=8001, help="service A listens here, service B on the next port (default 8001)")
    p.add_argument("--run-dir", default=None, help="where the truth is written for the reveal (default: SPECVIZ_RUN_DIR, the app's run directory)")
    p.add_argument("--public-host", default=None, help="the address the app reaches them at, for the printed SPECVIZ_PROBE_URLS (default: --host)")
    _add_service_options(p)


def _service_config(args: argparse.Namespace, drafter: str, hide_truth: bool):
    from specviz.workshop.service import ServiceConfig

    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be at least 1; got {args.threads}.")
        import torch

        torch.set_num_threads(args.threads)
    run = RunConfig(
        target=args.target, draft=args.draft, drafter=drafter, num_draft_tokens=args.num_draft_tokens, tree_width=args.tree_width,
        exit_layer=args.exit_layer, medusa_heads=args.medusa_heads, ngram_max=args.ngram_max, ngram_threshold=args.ngram_threshold,
        temperature=args.temperature, seed=args.seed, max_new_tokens=args.max_tokens, device=args.device, dtype=args.dtype,
        trust_remote_code=args.trust_remote_code, allow_download=args.allow_download, allow_pickle=args.allow_pickle,
    )  # fmt: skip
    return ServiceConfig(run, args.model_id or args.target, args.max_tokens, args.max_prompt_tokens, args.max_streams, args.chunks, not hide_truth)


def cmd_serve(args: argparse.Namespace) -> int:
    from specviz.runs import resolve_models
    from specviz.workshop.service import load_on_model_thread, run_server

    config = _service_config(args, args.drafter, args.hide_truth)
    service = load_on_model_thread(config, lambda: resolve_models(config.run))  # torch's threads: see its docstring
    models = service.models
    what = "plain decoding" if args.drafter == "none" else f"{args.drafter}, k={args.num_draft_tokens}"
    emit(f"serving {config.model_id!r} ({models.target.device}, {models.target.precision}; "
         f"{'hidden' if args.hide_truth else what}) at http://{args.host}:{args.port}/v1", err=True, flush=True)  # fmt: skip
    run_server(service, args.host, args.port)
    return 0


def _service_argv(args: argparse.Namespace) -> list[str]:
    """The service options of a parsed serve-pair command line, written out again for each `serve` it starts."""
    probe = argparse.ArgumentParser(add_help=False)
    _add_service_options(probe)
    argv: list[str] = []
    for action in probe._actions:
        value = getattr(args, action.dest)
        if isinstance(action, argparse._StoreTrueAction):
            argv += [action.option_strings[0]] if value else []
        elif value is not None and action.dest not in ("host", "model_id"):
            argv += [action.option_strings[0], str(value)]
    return argv


def cmd_serve_pair(args: argparse.Namespace) -> int:
    import secrets

    from specviz.workshop.pair import run_pair
    from specviz.workshop.race_room import Pair, RaceRoom
    from specviz.workshop.saved_runs import default_run_dir

    _service_config(args, args.drafter, True)  # every option checked before anything starts
    if not 1 <= args.port <= 65534:
        raise ValueError(f"--port must leave room for a second service on the next port; got {args.port}.")
    model_id = args.model_id or args.target
    speculating = secrets.randbelow(2)  # 0: service A speculates
    drafters = [args.drafter if i == speculating else "none" for i in range(2)]
    ports = [args.port, args.port + 1]
    public = args.public_host or args.host
    roots = [f"http://{args.host}:{port}" for port in ports]
    commands = [[sys.executable, "-m", "specviz", "serve", "--drafter", d, "--port", str(port), "--host", args.host, "--hide-truth",
                 "--model-id", model_id, *_service_argv(args)] for d, port in zip(drafters, ports)]  # fmt: skip
    pair = Pair.new((f"http://{public}:{ports[0]}/v1", f"http://{public}:{ports[1]}/v1"), speculating, args.drafter)
    room = RaceRoom(Path(args.run_dir).expanduser() if args.run_dir else default_run_dir())
    return run_pair(commands, roots, pair, room, emit)


def _add_probe_parser(sub) -> None:
    from specviz.experiments.bench import DEFAULT_PROMPTS
    from specviz.experiments.probe import CATEGORIES, ProbeSpec

    s = ProbeSpec
    p = sub.add_parser("probe", help="stream from an OpenAI-compatible endpoint and read its burst signature: is it speculating?")
    p.add_argument("--base-url", required=True, help="the API's base URL, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--model", required=True, help="the model name the endpoint serves")
    p.add_argument("--category", choices=CATEGORIES, default=s.category, help=f"the benchmark prompts to send (default {s.category})")
    p.add_argument("--n", type=int, default=s.n, help=f"streaming requests, one after another (default {s.n}; prompts cycle)")
    p.add_argument("--max-tokens", type=int, default=s.max_tokens, help=f"max_tokens per request (default {s.max_tokens})")
    p.add_argument("--temperature", type=float, default=s.temperature, help=f"default {s.temperature:g}")
    p.add_argument("--endpoint", choices=("chat", "completions"), default=s.endpoint, help="chat completions (default) or text completions")
    p.add_argument("--tokenizer", default="auto",
                   help="count tokens per chunk with this model's tokenizer (auto: --model when specviz can load it without a download; none: count chunks)")
    p.add_argument("--api-key", default=None, help="sent as the bearer token (default: OPENAI_API_KEY, else a placeholder)")
    p.add_argument("--prompts", default=str(DEFAULT_PROMPTS), help="JSON list of {category, title, prompt} (default: assets/prompts.json)")
    p.add_argument("--timeout-s", type=float, default=s.timeout_s, help=f"per request (default {s.timeout_s:g})")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")


def cmd_probe(args: argparse.Namespace) -> int:
    from specviz.experiments.bench import load_prompts
    from specviz.experiments.probe import ProbeSpec, probe, tokenizer_for

    spec = ProbeSpec(args.base_url, args.model, args.category, args.n, args.max_tokens, args.temperature, args.endpoint, args.timeout_s)
    prompts = [p.prompt for p in load_prompts(args.prompts, [args.category])]
    counter = tokenizer_for(args.tokenizer, args.model)
    api_key = args.api_key or os.environ.get("OPENAI_API_KEY") or "specviz-probe"

    def progress(done: int, total: int, message: str) -> None:
        emit(f"[{done}/{total}] {message}", err=True, flush=True)

    result = probe(spec, prompts, counter, api_key=api_key, on_progress=progress)
    if args.json:
        emit(json.dumps(result.to_json()))
        return 0
    report = result.report
    emit(f"{spec.base_url} · {spec.model} · {spec.category} x {len(result.streams)} · tokens counted as {result.counted_as}")
    for i, s in enumerate(result.streams, start=1):
        rate = s.arrivals.decode_tokens_per_s()
        emit(f"  request {i}: {s.arrivals.num_tokens} tokens in {len(s.arrivals.times_s)} chunks, first after "
             f"{(s.arrivals.ttft_s or 0) * 1000:.0f} ms, {'n/a' if rate is None else f'{rate:.1f}'} tok/s"
             + (f"; server says {s.server_tokens_per_pass:.2f} tokens per target pass" if s.server_tokens_per_pass else ""))  # fmt: skip
    emit(f"burst threshold {report.threshold.seconds * 1000:.3g} ms ({'valley between two modes' if report.threshold.bimodal else 'no second mode: a quarter of the median gap'}); "
         f"gaps under 1 ms {_share(report.share_fast)}, over 10 ms {_share(report.share_slow)}")  # fmt: skip
    emit(f"bursts {len(report.sizes)}, tokens per burst (τ estimate) {_num(report.tau)}, sizes {report.to_json()['burst_sizes']}")
    if result.server_tau is not None:
        emit(f"the server's own tokens per target pass: {result.server_tau:.2f}")
    emit(f"verdict: {report.summary}")
    for caveat in report.caveats:
        emit(f"  - {caveat}")
    return 0


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def main(argv: Sequence[str] | None = None) -> int:
    handler = logging.StreamHandler()  # stderr
    handler.setFormatter(EscapingFormatter(logging.BASIC_FORMAT))
    logging.basicConfig(level=os.environ.get("SPECVIZ_LOG", "WARNING"), handlers=[handler])
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = build_parser().parse_args(argv)
    try:
        if args.command == "generate":
            return cmd_generate(args)
        if args.command == "info":
            return cmd_info(args)
        if args.command == "replay":
            return cmd_replay(args)
        if args.command == "profile":
            return cmd_profile(args)
        if args.command == "room":
            return cmd_room(args)
        if args.command == "batch":
            return cmd_batch(args)
        if args.command == "train-heads":
            return cmd_train_heads(args)
        if args.command == "serve":
            return cmd_serve(args)
        if args.command == "serve-pair":
            return cmd_serve_pair(args)
        if args.command == "probe":
            return cmd_probe(args)
        return cmd_bench(args)
    except (ValueError, OSError) as exc:
        emit(f"error: {exc}", err=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
