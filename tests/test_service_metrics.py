"""specviz serve speaks the field's metrics: vLLM's per-request ``metrics.speculative_decoding`` read by the official
openai client from a whole response and from a stream (on exactly one chunk, the usage chunk), for chat and text
completions; absent on a plain server and under a hidden truth; and a Prometheus scrape of /metrics, parsed with
prometheus_client's own parser, whose counters equal the responses' objects."""

from __future__ import annotations

import itertools
import urllib.request

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from specviz.config import EMBEDDED_TARGET, RunConfig
from specviz.runs import resolve_models
from specviz.workshop.service.config import ServiceConfig
from specviz.workshop.service.server import Service
from tests.service_helpers import running

pytestmark = pytest.mark.smollm
MODEL = EMBEDDED_TARGET
COPY = "Repeat exactly: the cat sat on the mat and the dog sat on the log."
MESSAGES = [{"role": "user", "content": COPY}]
FIELDS = {"mean_acceptance_length", "draft_acceptance_rate", "acceptance_histogram", "num_spec_steps", "num_accepted_draft_tokens",
          "num_draft_tokens", "num_spec_tokens"}  # fmt: skip


def make_service(smollm, drafter: str = "lookup", **options) -> Service:
    run = RunConfig(target=MODEL, drafter=drafter, num_draft_tokens=4, dtype="float32", device="cpu")
    return Service(ServiceConfig(run, MODEL, max_tokens=48, **options), resolve_models(run, target=smollm))


def client(root: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=root + "/v1", api_key="test", max_retries=0, timeout=120)


def spec_object(obj) -> dict | None:
    """metrics.speculative_decoding of a response or chunk the openai client parsed (an extra field to it)."""
    return ((obj.model_extra or {}).get("metrics") or {}).get("speculative_decoding")


def check_counts(spec: dict, completion_tokens: int, target_passes: int, detailed: bool = False) -> None:
    """The checks aiperf makes before it keeps a request, and vLLM's two rates from the counts."""
    hist, steps, accepted, drafted = spec["acceptance_histogram"], spec["num_spec_steps"], spec["num_accepted_draft_tokens"], spec["num_draft_tokens"]
    # k: auto raises num_spec_tokens to the largest k a step asked for (never below the configured 4); k + 1 bins
    assert FIELDS <= set(spec) and spec["num_spec_tokens"] >= 4 and len(hist) == spec["num_spec_tokens"] + 1
    assert sum(hist) == steps and sum(j * h for j, h in enumerate(hist)) == accepted and accepted <= drafted
    assert 0 < steps <= target_passes
    assert spec["mean_acceptance_length"] == pytest.approx(1 + accepted / steps) and spec["draft_acceptance_rate"] == pytest.approx(accepted / drafted)
    assert accepted + target_passes - 1 <= completion_tokens <= accepted + target_passes  # each round: its kept drafts + 1 (a cut may drop it)
    assert ("per_step_accepted" in spec) == detailed
    if detailed:
        assert sum(spec["per_step_accepted"]) == accepted and sum(spec["per_step_drafted"]) == drafted and len(spec["per_step_drafted"]) == steps


def stream_chat(c: openai.OpenAI, **kw) -> tuple[str, list]:
    chunks = list(c.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=24, stream=True, **kw))
    return "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices), chunks


def scrape(root: str) -> dict[str, dict]:
    """/metrics parsed by prometheus_client's parser: sample name -> {labels tuple: value}."""
    with urllib.request.urlopen(root + "/metrics", timeout=30) as r:
        assert r.headers["content-type"].startswith("text/plain")
        text = r.read().decode("utf-8")
    out: dict[str, dict] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_whole_and_streamed_responses_carry_vllms_object_once_and_it_adds_up(smollm):
    service = make_service(smollm)
    plain = make_service(smollm, drafter="none")
    with running(service.app) as root, running(plain.app) as plain_root, client(root) as c, client(plain_root) as p:
        whole = c.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=24)
        spec = spec_object(whole)
        truth = whole.usage.model_extra["specviz"]
        check_counts(spec, whole.usage.completion_tokens, truth["target_passes"])
        assert spec["num_accepted_draft_tokens"] > 0  # lookup keeps guesses on a copying prompt
        assert truth["drafter"] == "lookup" and truth["k_policy"] == "auto" and "num_draft_tokens" not in truth  # k is num_spec_tokens
        # greedy output unchanged: the plain server's text is the same, and it reports no speculative decoding
        plain_whole = p.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=24)
        assert plain_whole.choices[0].message.content == whole.choices[0].message.content
        assert spec_object(plain_whole) is None and "metrics" not in plain_whole.model_extra

        text, chunks = stream_chat(c, stream_options={"include_usage": True})
        carrying = [ch for ch in chunks if spec_object(ch) is not None]
        assert text == whole.choices[0].message.content
        assert len(carrying) == 1 and carrying[0] is chunks[-1] and carrying[0].usage is not None and not carrying[0].choices
        assert spec_object(carrying[0]) == spec  # greedy: the same rounds, the same counts

        _, chunks = stream_chat(c)  # no usage asked: no usage chunk, so no object
        assert not [ch for ch in chunks if spec_object(ch) is not None]
        _, chunks = stream_chat(p, stream_options={"include_usage": True})
        assert not [ch for ch in chunks if spec_object(ch) is not None]

        text_whole = c.completions.create(model=MODEL, prompt=COPY, max_tokens=16)
        check_counts(spec_object(text_whole), text_whole.usage.completion_tokens, text_whole.usage.model_extra["specviz"]["target_passes"])
        text_chunks = list(c.completions.create(model=MODEL, prompt=COPY, max_tokens=16, stream=True, stream_options={"include_usage": True}))
        carrying = [ch for ch in text_chunks if spec_object(ch) is not None]
        assert len(carrying) == 1 and spec_object(carrying[0]) == spec_object(text_whole)


def test_detailed_off_and_hidden(smollm):
    detailed, off, hidden = (make_service(smollm, spec_decode_metrics="detailed"), make_service(smollm, spec_decode_metrics="off"),
                             make_service(smollm, report_truth=False))  # fmt: skip
    with running(detailed.app) as a, running(off.app) as b, running(hidden.app) as h, client(a) as ca, client(b) as cb, client(h) as ch:
        r = ca.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=24)
        check_counts(spec_object(r), r.usage.completion_tokens, r.usage.model_extra["specviz"]["target_passes"], detailed=True)
        assert spec_object(cb.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8)) is None
        for c in (cb, ch):
            _, chunks = stream_chat(c, stream_options={"include_usage": True})
            assert not [chunk for chunk in chunks if spec_object(chunk) is not None]
        r = ch.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8)
        assert "metrics" not in r.model_extra and "specviz" not in (r.usage.model_extra or {})
        hidden_scrape = scrape(h)
        assert not [name for name in hidden_scrape if "spec_decode" in name or "target_passes" in name or "inter_token" in name]  # nothing tells it speculates
        assert hidden_scrape["specviz_requests_total"] and hidden_scrape["specviz_time_to_first_token_seconds_count"][()] == 2


def test_a_prometheus_scrape_after_streams_equals_the_responses_objects(smollm):
    service, other = make_service(smollm), make_service(smollm)  # two servers in one process: separate registries
    with running(service.app) as root, running(other.app), client(root) as c:
        specs, tokens, reasons = [], 0, {}
        for max_tokens in (24, 12):
            chunks = list(c.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=max_tokens, stream=True,
                                                    stream_options={"include_usage": True}))  # fmt: skip
            specs.append(spec_object(chunks[-1]))
            tokens += chunks[-1].usage.completion_tokens
            reason = next(ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason)
            reasons[(("endpoint", "chat"), ("finish_reason", reason))] = reasons.get((("endpoint", "chat"), ("finish_reason", reason)), 0) + 1
        got = scrape(root)
        one = ()
        assert got["specviz_requests_total"] == reasons
        assert got["specviz_generation_tokens_total"][one] == tokens
        assert got["specviz_spec_decode_num_drafts_total"][one] == sum(s["num_spec_steps"] for s in specs)
        assert got["specviz_spec_decode_num_draft_tokens_total"][one] == sum(s["num_draft_tokens"] for s in specs)
        assert got["specviz_spec_decode_num_accepted_tokens_total"][one] == sum(s["num_accepted_draft_tokens"] for s in specs)
        per_pos = {dict(labels)["position"]: v for labels, v in got["specviz_spec_decode_num_accepted_tokens_per_pos_total"].items()}
        hist = [sum(col) for col in itertools.zip_longest(*(s["acceptance_histogram"] for s in specs), fillvalue=0)]  # k: auto asks
        # each request up to its own k, so their histograms differ in length
        assert len(per_pos) == 16 and per_pos == {str(i): sum(hist[i + 1 :]) for i in range(16)}  # position i kept by every step that kept more than i
        assert got["specviz_time_to_first_token_seconds_count"][one] == 2
        assert got["specviz_inter_token_latency_seconds_count"][one] == tokens - 2  # every token after a request's first
        assert scrape_count(other) == 0.0  # the other server counted nothing


def scrape_count(service: Service) -> float:
    return sum(s.value for s in service.metrics.requests.collect()[0].samples if s.name.endswith("_total"))
