"""What the owner of a ``specviz serve`` sets on the command line (ServiceConfig). The command line reads its defaults
for every subcommand's parser, so this module imports no model and no web server."""

from __future__ import annotations

from dataclasses import dataclass
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
