"""The service's counters for a dashboard (``GET /metrics``, Prometheus' text format, through prometheus_client), in
a registry of the server's own: several servers in one process (the tests) never share a counter.

Names (docs/metrics.md#prometheus-metrics-from-serve) follow vLLM's ``vllm:spec_decode_*`` with a ``specviz_`` prefix.
The speculative-decoding counters are read from the round's record through SpecDecodeSteps (specviz.core.metrics),
the same numbers as each response's ``metrics.speculative_decoding``; they, and the target passes, exist only on a
server that reports its truth (not under --hide-truth), and the spec_decode ones only on one that drafts. So are the
inter-token gaps: the zero gaps inside a round would tell the room exercise which service speculates. Requests,
tokens and the time to first token are always there."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

from specviz.core.metrics import SpecDecodeSteps
from specviz.core.records import StepRecord
from specviz.workshop.service.config import ServiceConfig
from specviz.workshop.service.response import speculating

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
ITL_BUCKETS = (0.0, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0)


class ServiceMetrics:
    """One server's counters and histograms; the service calls first_token / round / finished as a request goes."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, config: ServiceConfig) -> None:
        self.registry = CollectorRegistry()
        r, run = self.registry, config.run
        self.requests = Counter("specviz_requests", "Requests finished, by endpoint (chat, text) and finish reason.",
                                ["endpoint", "finish_reason"], registry=r)  # fmt: skip
        self.generation_tokens = Counter("specviz_generation_tokens", "Tokens committed (sent or held back by a stop).", registry=r)
        self.ttft = Histogram("specviz_time_to_first_token_seconds", "From a request's start (queue wait included) to its first token.",
                              buckets=TTFT_BUCKETS, registry=r)  # fmt: skip
        self.itl = self.target_passes = self.spec_steps = None
        if config.report_truth:
            self.itl = Histogram("specviz_inter_token_latency_seconds", "Per token after the first: the gap since the token before "
                                 "it (0 within a round, whose tokens are committed together).", buckets=ITL_BUCKETS, registry=r)  # fmt: skip
            self.target_passes = Counter("specviz_target_passes", "Target verify passes (rounds), drafting or not; prefill not counted.", registry=r)
        if speculating(config):
            self.spec_steps = Counter("specviz_spec_decode_num_drafts", "Verify steps: rounds that drafted at least one token.", registry=r)
            self.draft_tokens = Counter("specviz_spec_decode_num_draft_tokens", "Drafted tokens (a tree: nodes scored).", registry=r)
            self.accepted_tokens = Counter("specviz_spec_decode_num_accepted_tokens", "Drafted tokens kept (a tree: the kept path).", registry=r)
            self.accepted_per_pos = Counter("specviz_spec_decode_num_accepted_tokens_per_pos",
                                            "Verify steps that kept the draft at position (0-based; a tree: depth).", ["position"], registry=r)  # fmt: skip
            for i in range(run.k_ceiling):
                self.accepted_per_pos.labels(str(i))  # every position present from the start, at 0

    def round(self, record: StepRecord, gaps_s: list[float]) -> None:
        """One round decoded; gaps_s: the inter-token gaps of its tokens (none for a request's first token)."""
        self.generation_tokens.inc(len(record.emitted))
        if self.itl is not None:
            for gap in gaps_s:
                self.itl.observe(gap)
            self.target_passes.inc()
        if self.spec_steps is not None:
            step = SpecDecodeSteps.of([record])
            self.spec_steps.inc(step.num_spec_steps)
            self.draft_tokens.inc(step.num_draft_tokens)
            self.accepted_tokens.inc(step.num_accepted_draft_tokens)
            for i, n in enumerate(step.accepted_by_position):
                if n:
                    self.accepted_per_pos.labels(str(i)).inc(n)

    def first_token(self, seconds: float) -> None:
        self.ttft.observe(seconds)

    def finished(self, endpoint: str, reason: str) -> None:
        self.requests.labels(endpoint, reason).inc()

    def scrape(self) -> bytes:
        """The registry in Prometheus' text format."""
        return generate_latest(self.registry)
