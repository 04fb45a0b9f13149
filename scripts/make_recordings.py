"""Write the example recordings in assets/recordings/ with the embedded SmolLM2 (or --target).

    python scripts/make_recordings.py [--device cpu] [--dtype auto] [--only NAME] [--out assets/recordings]

Each example is one prompt decoded like the step-through page does it: every run to its end, then plain decoding
of the same prompt and sampling (the baseline) for as many tokens. Charts keep the top 10 rows per position
(the page keeps 20) so each file stays small."""

from __future__ import annotations

import argparse
import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path

from specviz.config import EMBEDDED_TARGET, RunConfig
from specviz.models import encode_prompt, environment, load_model, token_bytes
from specviz.recording.build import build_recording, dumps, recorded_run
from specviz.runs import RunModels, build_decoder
from specviz.viz.figures import BASELINE_RUN
from specviz.viz.tokens import TokenTable

REPO = Path(__file__).resolve().parents[1]

LABELS = {"lookup": "prompt lookup", "ngram": "n-gram model", "model": "draft model", "early-exit": "early exit", "none": "plain decoding"}
TOP_N = 10


@dataclass(frozen=True)
class Example:
    name: str
    title: str
    prompt_title: str  # from assets/prompts.json
    configs: tuple[dict, ...]  # RunConfig fields of each run (two = side by side)


EXAMPLES = (
    Example("copy-ngram-greedy", "copying with the n-gram drafter at T=0", "repeat passage", ({"drafter": "ngram", "temperature": 0.0},)),
    Example("prose-early-exit-T1", "prose at T=1 with early exit: rejections and residual resamples", "lighthouse", ({"drafter": "early-exit", "temperature": 1.0, "seed": 1},)),
    Example("code-lookup-adaptive-k", "code with prompt lookup and adaptive k", "add type hints", ({"drafter": "lookup", "adaptive_k": True, "temperature": 0.0},)),
    Example("compare-ngram-vs-early-exit", "side by side: n-gram model against early exit", "fix typos", ({"drafter": "ngram"}, {"drafter": "early-exit"})),
    Example("unicode-pieces", "Japanese output: characters split across byte-level tokens, joined in the stream", "", ({"drafter": "lookup"},)),
)
UNICODE_PROMPT = "Translate into Japanese: Good morning, Japan! 🚀"


def prompts() -> dict[str, str]:
    return {e["title"]: e["prompt"] for e in json.loads((REPO / "assets" / "prompts.json").read_text(encoding="utf-8"))}


def make(example: Example, target, device: str, max_new_tokens: int) -> str:
    text = prompts()[example.prompt_title] if example.prompt_title else UNICODE_PROMPT
    configs = [RunConfig(target=target.name, device=device, dtype=target.precision, max_new_tokens=max_new_tokens, **fields) for fields in example.configs]
    prompt_ids = encode_prompt(target.tokenizer, text, configs[0].chat)
    runs = []
    for i, config in enumerate(configs):
        decoder = build_decoder(config, RunModels(target), prompt_ids)
        decoder.config = replace(decoder.config, top_n=TOP_N)  # before the first round: only the charts' rows change
        decoder.run()
        label = LABELS[config.drafter] if len(configs) == 1 else f"{'AB'[i]}: {LABELS[config.drafter]}"
        runs.append(recorded_run(label, config, decoder.records, prefill_ms=decoder.prefill_ms))
    baseline = build_decoder(configs[0], RunModels(target), prompt_ids, baseline=True)
    baseline.config = replace(baseline.config, top_n=TOP_N)
    needed = max(r.metrics.new_tokens for r in runs)
    while not baseline.done and len(baseline.generated) < needed:
        baseline.step()
    base = recorded_run(BASELINE_RUN, configs[0], baseline.records, prefill_ms=baseline.prefill_ms)
    recording = build_recording(
        prompt=text, prompt_ids=prompt_ids, runs=runs, baseline=base, title=example.title,
        token_text=TokenTable(lambda i: token_bytes(target.tokenizer, i)), environment=environment(target),
    )  # fmt: skip
    return dumps(recording)


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default=EMBEDDED_TARGET)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto", help="the app's default unless told otherwise (docs/precision.md)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--only", action="append", help="example name (repeatable); default: all")
    parser.add_argument("--suffix", default="", help="added to each file name, e.g. -h200")
    parser.add_argument("--out", type=Path, default=REPO / "assets" / "recordings")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(max(1, torch.get_num_threads()))
    target = load_model(args.target, args.device, args.dtype)
    args.out.mkdir(parents=True, exist_ok=True)
    for example in EXAMPLES:
        if args.only and example.name not in args.only:
            continue
        text = make(example, target, args.device, args.max_new_tokens)
        path = args.out / f"{example.name}{args.suffix}.json"
        path.write_text(text, encoding="utf-8")
        rec = json.loads(text)
        fates = [f for run in rec["runs"] for r in run["records"] for f in r["emitted_fates"]]
        print(f"{path.name}: {len(text) / 1024:.0f} KB, {sum(len(r['records']) for r in rec['runs'])} rounds, fates {dict((f, fates.count(f)) for f in sorted(set(fates)))}")


if __name__ == "__main__":
    main()
