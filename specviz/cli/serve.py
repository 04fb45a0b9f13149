"""python -m specviz serve: the target (speculating, or not with --drafter none) behind an OpenAI-compatible API
(specviz.workshop.service), and the service options serve-pair shares (docs/race.md)."""

from __future__ import annotations

import argparse
import os

from specviz.cli.options import DTYPE_HELP, TUNED_HELP, add_model_access, model_access, set_threads, tuned_values
from specviz.cli.terminal import emit
from specviz.config import DRAFTER_KINDS, EMBEDDED_TARGET, RunConfig, field_named

API_KEY_ENV = "SPECVIZ_API_KEY"


def add_service_options(p: argparse.ArgumentParser) -> None:
    """What a served model decodes with, and the owner's caps (serve and serve-pair)."""
    from specviz.workshop.service.config import ServiceConfig

    d, s = RunConfig, ServiceConfig
    p.add_argument("--target", default=EMBEDDED_TARGET, help="hub id, local folder or .gguf file (default: embedded SmolLM2-135M-Instruct)")
    p.add_argument("--draft", default=None, help="draft model for --drafter model (same tokenizer as the target)")
    p.add_argument("--num-draft-tokens", "-k", type=int, default=None, help=f"tokens drafted per round; {TUNED_HELP}")
    p.add_argument("--tree-width", type=int, default=None, help=f"children per node of a token tree (1 = a chain); {TUNED_HELP}")
    p.add_argument("--fixed-k", action="store_true", help=field_named("auto_k").flag_help)
    p.add_argument("--exit-layer", type=int, default=None, help="early exit: target blocks the draft runs")
    p.add_argument("--medusa-heads", default=None, metavar="PATH", help="Medusa heads folder (default: the heads shipped for the embedded target)")
    p.add_argument("--ngram-max", type=int, default=d.ngram_max)
    p.add_argument("--ngram-threshold", type=float, default=d.ngram_threshold)
    p.add_argument("--temperature", type=float, default=d.temperature, help="for requests that name none (default 0: greedy)")
    p.add_argument("--seed", type=int, default=d.seed, help="for requests that name none")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--model-id", default=None, help="the id /v1/models lists and requests name (default: the target's name, never its path)")
    p.add_argument("--max-tokens", type=int, default=s.max_tokens, help=f"cap on a request's max_tokens, and its default (default {s.max_tokens})")
    p.add_argument("--max-prompt-tokens", type=int, default=s.max_prompt_tokens,
                   help=f"cap on the prompt in the target's tokens, chat template included (default {s.max_prompt_tokens})")
    p.add_argument("--max-streams", type=int, default=s.max_streams, help=f"requests decoded at once, streamed or not; more get 429 (default {s.max_streams})")
    p.add_argument("--max-connections", type=int, default=s.max_connections, help=f"open connections; more get 503 (default {s.max_connections})")
    p.add_argument("--chunks", choices=("round", "token"), default=s.chunks, help="one SSE chunk per round (default) or per token")
    p.add_argument("--spec-decode-metrics", choices=("summary", "detailed", "off"), default=s.spec_decode_metrics,
                   help="vLLM's metrics.speculative_decoding in each response: summary (default), detailed (per verify step too) or off")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto", help=DTYPE_HELP)
    add_model_access(p)


def add_parser(sub) -> None:
    """Register `serve` on the CLI's subparsers."""
    p = sub.add_parser("serve", help="serve the target (speculating, or not with --drafter none) behind an OpenAI-compatible API")
    p.add_argument("--drafter", choices=DRAFTER_KINDS, default=RunConfig.drafter, help=f"default: {RunConfig.drafter}; none serves plain decoding")
    p.add_argument("--port", type=int, default=8000, help="default 8000")
    p.add_argument("--hide-truth", action="store_true", help="leave the drafter and tokens per target pass out of responses (the room exercise)")
    p.add_argument("--api-key", default=None, help=f"every /v1 request must send this as its Bearer token (default: {API_KEY_ENV}, else none; "
                   "the environment variable keeps the key out of the process list)")  # fmt: skip
    add_service_options(p)


def service_config(args: argparse.Namespace, drafter: str, hide_truth: bool, api_key: str | None = None):
    """The ServiceConfig of a parsed command line (serve's, or each of serve-pair's services)."""
    from specviz.workshop.service.config import ServiceConfig, served_name

    set_threads(args.threads)
    tuned = tuned_values(drafter, num_draft_tokens=args.num_draft_tokens, tree_width=args.tree_width)  # draft vocabulary: the drafter's
    run = RunConfig(
        target=args.target, draft=args.draft, drafter=drafter, **tuned, auto_k=not args.fixed_k,
        exit_layer=args.exit_layer, medusa_heads=args.medusa_heads, ngram_max=args.ngram_max, ngram_threshold=args.ngram_threshold,
        temperature=args.temperature, seed=args.seed, max_new_tokens=args.max_tokens, device=args.device, dtype=args.dtype,
        **model_access(args),
    )  # fmt: skip
    return ServiceConfig(run, args.model_id or served_name(args.target), args.max_tokens, args.max_prompt_tokens, args.max_streams, args.chunks,
                         not hide_truth, api_key=api_key, max_connections=args.max_connections,
                         spec_decode_metrics=args.spec_decode_metrics)  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from specviz.runs import resolve_models
    from specviz.workshop.service.server import load_on_model_thread, run_server

    config = service_config(args, args.drafter, args.hide_truth, args.api_key or os.environ.get(API_KEY_ENV) or None)
    service = load_on_model_thread(config, lambda: resolve_models(config.run))  # torch's threads: see its docstring
    models = service.models
    what = "plain decoding" if args.drafter == "none" else f"{args.drafter}, {config.run.k_words}"
    emit(f"serving {config.model_id!r} ({models.target.device}, {models.target.precision}; "
         f"{'hidden' if args.hide_truth else what}) at http://{args.host}:{args.port}/v1"
         f"{'; every request needs the API key' if config.api_key else ''}", err=True, flush=True)  # fmt: skip
    run_server(service, args.host, args.port)
    return 0
