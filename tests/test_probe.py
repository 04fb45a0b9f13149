"""The probe (specviz/experiments/probe.py) against specviz serve on the embedded model: it reads every chunk, counts
tokens with the target's tokenizer, finds the server's own tokens per target pass, and prints one JSON object from the
command line. Whether its verdicts are right on a quiet machine is measured by scripts/race_check.py (the lead runs it)."""

from __future__ import annotations

import json

import pytest

from specviz import cli
from specviz.config import EMBEDDED_TARGET, RunConfig
from specviz.experiments.probe import ChunkCounter, ProbeSpec, probe
from specviz.runs import resolve_models
from specviz.workshop.service.config import ServiceConfig
from specviz.workshop.service.server import Service
from tests.service_helpers import running

COPY = ["Repeat exactly: the cat sat on the mat and the dog sat on the log, and the cat sat on the log."]


@pytest.fixture(scope="module")
def lookup_url(smollm):
    run = RunConfig(target=EMBEDDED_TARGET, drafter="lookup", num_draft_tokens=6, dtype="float32", device="cpu")
    with running(Service(ServiceConfig(run, EMBEDDED_TARGET), resolve_models(run, target=smollm)).app) as root:
        yield root + "/v1"


def test_the_probe_reads_chunks_tokens_and_the_servers_truth(lookup_url, smollm):
    result = probe(ProbeSpec(lookup_url, EMBEDDED_TARGET, n=2, max_tokens=32), COPY, ChunkCounter(smollm.tokenizer, "SmolLM2"))
    assert len(result.streams) == 2 and result.counted_as == "tokens (SmolLM2)"
    for s in result.streams:
        assert s.server_tokens and s.server_passes and s.arrivals.num_tokens > 0
        assert abs(s.arrivals.num_tokens - s.server_tokens) <= 3  # re-tokenized text: within a token or two of the server's count
        assert max(s.arrivals.tokens) > 1  # one chunk per round: a round that kept guesses carries several tokens
    assert result.server_tau > 1.0
    assert result.report.tau == pytest.approx(result.server_tau, rel=0.3)
    data = result.to_json()
    assert data["server_tokens_per_target_pass"] == result.server_tau and data["analysis"]["verdict"] == result.report.verdict
    assert len(data["requests"][0]["chunk_times_s"]) == len(data["requests"][0]["chunk_tokens"])
    # the server's own acceptance length (vLLM's object on the usage chunk) beside the one the bursts inferred
    reports = [s.server_report for s in result.streams]
    assert all(r.source == "vLLM metrics.speculative_decoding" and r.verify_steps and sum(r.histogram) == r.verify_steps for r in reports)
    steps = sum(r.verify_steps for r in reports)
    assert result.reported_acceptance_length == pytest.approx(1 + sum(r.accepted for r in reports) / steps)
    length = data["acceptance_length"]
    assert length["reported"] == result.reported_acceptance_length and length["inferred"] == result.report.tau
    assert length["difference"] == pytest.approx(result.report.tau - length["reported"])
    assert length["reported"] >= 1.0  # near τ only where every pass drafted: docs/race.md, What the server says of itself


def test_counting_chunks_when_the_model_is_unknown(lookup_url):
    result = probe(ProbeSpec(lookup_url, EMBEDDED_TARGET, category="qa", n=1, max_tokens=8, endpoint="completions"), ["The sky is"])
    assert result.counted_as == "chunks"
    assert all(n == 1 for s in result.streams for n in s.arrivals.tokens)


def test_probe_errors_say_what_happened(lookup_url):
    with pytest.raises(ValueError, match="answered 404.*does not exist"):
        probe(ProbeSpec(lookup_url, "no-such-model", n=1, max_tokens=4), COPY)
    with pytest.raises(ValueError, match="Could not reach"):
        probe(ProbeSpec("http://127.0.0.1:9/v1", "m", n=1, max_tokens=4, timeout_s=5), COPY)
    with pytest.raises(ValueError, match="http:// or https://"):
        ProbeSpec("127.0.0.1:8000", "m")


def test_the_command_line_prints_one_json_object(lookup_url, capsys):
    code = cli.main(["probe", "--base-url", lookup_url, "--model", EMBEDDED_TARGET, "--category", "copy", "--n", "1",
                     "--max-tokens", "12", "--tokenizer", "none", "--json"])  # fmt: skip
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["category"] == "copy" and out["counted_as"] == "chunks" and len(out["requests"]) == 1
    assert out["analysis"]["verdict"] in ("too-little", "even", "speculating", "regular", "long-runs")
    assert out["acceptance_length"]["source"] == "vLLM metrics.speculative_decoding" and out["acceptance_length"]["reported"] >= 1.0
    assert out["requests"][0]["server_reported"]["num_spec_steps"] >= 1


def test_chunk_counter_gives_each_token_to_the_chunk_of_its_last_character(smollm):
    tok = smollm.tokenizer
    texts = ["The cat", " sat on", " the mat."]
    counts = ChunkCounter(tok, "s")(texts)
    assert sum(counts) == len(tok("".join(texts), add_special_tokens=False)["input_ids"])
    assert counts == [len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
