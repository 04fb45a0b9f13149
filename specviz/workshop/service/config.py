"""What the owner of a ``specviz serve`` sets on the command line (ServiceConfig). The command line reads its defaults
for every subcommand's parser, so this module imports no model and no web server."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from specviz.config import MAX_NEW_TOKENS, RunConfig

ChunkMode = Literal["round", "token"]
SpecDecodeMetrics = Literal["summary", "detailed", "off"]  # vLLM's --per-request-spec-decode-metrics, plus off


@dataclass(frozen=True)
class ServiceConfig:
    """What the owner set on the command line."""

    run: RunConfig  # target, drafter and its settings; temperature, top_p and seed are a request's defaults
    model_id: str  # the id /v1/models lists and every request must name
    max_tokens: int = 256  # cap on a request's max_tokens (also its default)
    max_prompt_tokens: int = 2048  # cap on the prompt, in the target's tokens, after the chat template
    max_streams: int = 4  # requests in flight (streamed or not); more are refused with 429
    chunks: ChunkMode = "round"
    report_truth: bool = True  # usage.specviz and the header; False hides what the service does
    queue_timeout_s: float = 120.0
    api_key: str | None = field(default=None, repr=False)  # None: no key asked; else every /v1 request sends it as a Bearer token
    max_connections: int = 64  # open connections (uvicorn's limit_concurrency); more are answered 503
    read_timeout_s: float = 30.0  # a request's head, and then its body, must arrive within this
    write_timeout_s: float = 30.0  # a response whose client stops reading for this long is dropped (its slot freed)
    spec_decode_metrics: SpecDecodeMetrics = "summary"  # metrics.speculative_decoding per response (detailed: per step too)

    def __post_init__(self) -> None:
        if not self.model_id.strip() or len(self.model_id) > 200:
            raise ValueError("The served model id must be 1 to 200 characters.")
        for name, low, high in (("max_tokens", 1, MAX_NEW_TOKENS), ("max_prompt_tokens", 1, 1_000_000), ("max_streams", 1, 1024)):
            value = getattr(self, name)
            if not (low <= value <= high):
                raise ValueError(f"--{name.replace('_', '-')} must be between {low} and {high}; got {value}.")
        if self.chunks not in ("round", "token"):
            raise ValueError(f"--chunks must be 'round' or 'token'; got {self.chunks!r}.")
        if self.spec_decode_metrics not in ("summary", "detailed", "off"):
            raise ValueError(f"--spec-decode-metrics must be 'summary', 'detailed' or 'off'; got {self.spec_decode_metrics!r}.")
        if not self.queue_timeout_s > 0:
            raise ValueError("The queue timeout must be positive.")
        key = self.api_key
        if key is not None and not (16 <= len(key) <= 200 and key.isascii() and key.isprintable() and " " not in key):
            raise ValueError("--api-key must be 16 to 200 printable ASCII characters without spaces (it travels in an HTTP header); "
                             "e.g. python -c 'import secrets; print(secrets.token_urlsafe())'.")  # fmt: skip
        if not self.max_streams < self.max_connections <= 100_000:
            raise ValueError(f"--max-connections must be above --max-streams ({self.max_streams}) and at most 100000; got {self.max_connections}.")
        if not (0 < self.read_timeout_s <= 3600 and 0 < self.write_timeout_s <= 3600):
            raise ValueError("The read and write timeouts must be between 0 and 3600 seconds.")


def served_name(target: str) -> str:
    """The model id a service lists by default: the target's name, never a path on this machine (a folder's or a .gguf
    file's name; the embedded target and a hub id as they are)."""
    if target.startswith("embedded:"):
        return target
    path = Path(target).expanduser()
    if target.lower().endswith(".gguf") or target.startswith(("/", "~", ".")) or path.exists():
        return (path.stem if path.suffix.lower() == ".gguf" else path.name)[:200] or "model"
    return target
