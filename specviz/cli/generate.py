"""python -m specviz generate: decode one prompt speculatively (or plainly with --baseline), print the coloured
stream and its stats, or one JSON object (--json); --check-baseline compares with plain greedy decoding, --record
writes a recording that replays without a model."""

from __future__ import annotations

import argparse
import json
import sys

from specviz.cli.options import add_run_options, check_output_file, config_from_args
from specviz.cli.terminal import emit, painted, stats_line
from specviz.config import RunConfig, validate_prompt
from specviz.core.divergence import emitted_margins, first_divergence
from specviz.recording.record_json import step_to_json


def add_parser(sub) -> None:
    """Register `generate` on the CLI's subparsers."""
    gen = sub.add_parser("generate", help="decode one prompt speculatively (or plainly with --baseline)")
    add_run_options(gen)
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


def sample_seed(seed: int, i: int) -> int:
    """Seed of the i-th sample: the first sample uses --seed itself."""
    return seed + 1_000_003 * i


def _coloured(tokenizer, prompt_ids: list[int], records) -> str:
    """The prompt and every emitted token in its fate's colour, escaped: for emit(..., escaped=True)."""
    parts = [painted(tokenizer.decode(prompt_ids), "prompt")]
    for r in records:
        for tok, fate in zip(r.emitted, r.emitted_fates):
            parts.append(painted(tokenizer.decode([tok]), fate))
    return "".join(parts)


def run(args: argparse.Namespace) -> int:
    from specviz.runs import build_decoder, prompt_ids, resolve_models

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
    ids = prompt_ids(target, text, config.chat, max_new_tokens=config.max_new_tokens, num_draft_tokens=config.k_ceiling)  # within the model's context (auto k may reach its ceiling)
    check = _baseline_for_check(args, config, target, ids)
    samples: list[dict] = []  # what --json prints; nothing else of a sample outlives its loop turn
    recorded = []  # what --record writes: each sample's records
    for i in range(args.num_samples):
        decoder = build_decoder(config, models, ids, seed=sample_seed(config.seed, i), baseline=args.baseline)
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
    from specviz.recording.build import recorded_run

    name = "plain decoding" if baseline else config.drafter
    label = name if num_samples == 1 else f"{name} · sample {i + 1} (seed {decoder.config.seed})"
    return recorded_run(label, config, decoder.records, seed=decoder.config.seed, prefill_ms=decoder.prefill_ms)


def _write_recording(path: str, config: RunConfig, text: str, prompt_ids: list[int], runs: list, target, *, baseline: bool, check=None) -> None:
    """Write a recording of the samples; unless they are plain decoding already, time plain decoding of the
    first sample's seed for as many tokens as the longest sample, as the app's baseline does. With --check-baseline
    its plain run is the baseline, so the JSON's speedup and the recording's are one number."""
    from specviz.models import environment, token_bytes
    from specviz.recording.build import build_recording, recorded_run, save_recording
    from specviz.runs import RunModels, build_decoder
    from specviz.viz.tokens import TokenTable

    base = None
    if check is not None:
        base = recorded_run("baseline (plain decoding)", config, check[2], seed=config.seed, prefill_ms=check[3])
    elif not baseline:
        plain = build_decoder(config, RunModels(target), prompt_ids, seed=runs[0].seed, baseline=True)
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


def _baseline_for_check(args: argparse.Namespace, config: RunConfig, target, prompt_ids: list[int]) -> tuple[list[int], list[float], list, float] | None:
    """--check-baseline: plain greedy decoding's output ids, top-2 margins, records (for the measured speedup) and
    prefill time (for --record's baseline), kept (the decoder is not)."""
    if not args.check_baseline:
        return None
    from specviz.runs import RunModels, build_decoder

    plain = build_decoder(config, RunModels(target), prompt_ids, seed=config.seed, baseline=True)
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
    emit(stats_line(mode, s) + same, err=tty)


def _fmt_speedup(m) -> str:
    if m.speedup_disturbed:
        return "disturbed (above the tokens per target pass)"
    return "n/a" if m.speedup is None else f"{m.speedup:.2f}x"


def _fmt_margin(margin: float | None) -> str:
    return "n/a" if margin is None else f"{margin:.4g}"
