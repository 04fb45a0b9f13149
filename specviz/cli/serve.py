"""python -m specviz serve: the target (speculating, or not with --drafter none) behind an OpenAI-compatible API
(specviz.workshop.service), and the service options serve-pair shares (docs/race.md)."""

from __future__ import annotations

import argparse
import os

from specviz.cli.options import add_run_options, run_values, set_threads, tuned_values
from specviz.cli.terminal import emit
from specviz.config import RunConfig
from specviz.drafters.specs import TUNED_FIELDS

API_KEY_ENV = "SPECVIZ_API_KEY"


SERVE_SKIP = ("drafter", "chat", "max_new_tokens")  # serve's own --drafter; a request says chat or text; --max-tokens caps
SERVE_DIFFER = {  # what a request may name itself: the flag is its default
    "temperature": {"help": "for requests that name none (default 0: greedy)"},
    "top_p": {"help": "for requests that name none (1 = off)"},
    "seed": {"help": "for requests that name none"},
}


def add_service_options(p: argparse.ArgumentParser) -> None:
    """What a served model decodes with (every run option but the drafter, the chat template and the token cap, from
    RunConfig's table), and the owner's caps (serve and serve-pair)."""
    from specviz.workshop.service.config import ServiceConfig

    s = ServiceConfig
    add_run_options(p, skip=SERVE_SKIP, differ=SERVE_DIFFER)
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


def add_parser(sub) -> None:
    """Register `serve` on the CLI's subparsers."""
    p = sub.add_parser("serve", help="serve the target (speculating, or not with --drafter none) behind an OpenAI-compatible API")
    add_run_options(p, only=("drafter",), differ={"drafter": {"help": "default: %(default)s; none serves plain decoding"}})
    p.add_argument("--port", type=int, default=8000, help="default 8000")
    p.add_argument("--hide-truth", action="store_true", help="leave the drafter and tokens per target pass out of responses (the room exercise)")
    p.add_argument("--api-key", default=None, help=f"every /v1 request must send this as its Bearer token (default: {API_KEY_ENV}, else none; "
                   "the environment variable keeps the key out of the process list)")  # fmt: skip
    add_service_options(p)


def service_config(args: argparse.Namespace, drafter: str, hide_truth: bool, api_key: str | None = None):
    """The ServiceConfig of a parsed command line (serve's, or each of serve-pair's services)."""
    from specviz.workshop.service.config import ServiceConfig, served_name

    set_threads(args.threads)
    values = run_values(args, skip=SERVE_SKIP)
    values |= tuned_values(drafter, **{name: values[name] for name in TUNED_FIELDS})
    run = RunConfig(**values, drafter=drafter, max_new_tokens=args.max_tokens)
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
