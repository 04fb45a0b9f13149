"""python -m specviz probe: stream from an OpenAI-compatible endpoint and read its burst signature (is it
speculating?); the probe lives in specviz.experiments.probe (docs/race.md)."""

from __future__ import annotations

import argparse
import json
import os

from specviz.cli.terminal import emit


def add_parser(sub) -> None:
    """Register `probe` on the CLI's subparsers."""
    from specviz.experiments.probe import CATEGORIES, ProbeSpec
    from specviz.experiments.prompts import DEFAULT_PROMPTS

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
    p.add_argument("--timeout-s", type=float, default=s.timeout_s, help=f"per request: to connect, and between two reads (default {s.timeout_s:g})")
    p.add_argument("--deadline-s", type=float, default=s.deadline_s, help=f"the whole probe, every request together (default {s.deadline_s:g})")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")


def run(args: argparse.Namespace) -> int:
    from specviz.experiments.probe import ProbeSpec, probe, tokenizer_for
    from specviz.experiments.prompts import load_prompts

    spec = ProbeSpec(args.base_url, args.model, args.category, args.n, args.max_tokens, args.temperature, args.endpoint, args.timeout_s, args.deadline_s)
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
    length = result.acceptance_length
    if length["reported"] is not None:
        emit(f"acceptance length: the server reports {length['reported']:.2f} ({length['source']}), the bursts infer {_num(length['inferred'])}"
             + ("" if length["difference"] is None else f", inferred − reported {length['difference']:+.2f}"))  # fmt: skip
    elif length["source"]:
        rates = [s.server_report.acceptance_rate for s in result.streams if s.server_report and s.server_report.acceptance_rate is not None]
        emit(f"the server ({length['source']}) gives no acceptance length" + (f"; its draft acceptance rate {sum(rates) / len(rates):.2f}" if rates else ""))
    emit(f"verdict: {report.summary}")
    for caveat in report.caveats:
        emit(f"  - {caveat}")
    return 0


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"
