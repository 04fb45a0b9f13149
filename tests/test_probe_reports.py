"""The probe reads what a server says of its own speculation (issue 45, item 3): vLLM's metrics.speculative_decoding,
SGLang's meta_info, llama.cpp's timings and specviz's usage.specviz, each from a canned stream in that server's shape,
and sets the server's acceptance length beside the one the bursts inferred. specviz serve itself: tests/test_probe.py."""

from __future__ import annotations

import json

import pytest
from starlette.applications import Starlette
from starlette.responses import StreamingResponse
from starlette.routing import Route

from specviz.experiments.probe import ProbeSpec, ServerReport, pooled_acceptance_length, probe, server_report
from tests.service_helpers import running

VLLM = {"metrics": {"speculative_decoding": {
    "mean_acceptance_length": 2.5, "draft_acceptance_rate": 0.375, "acceptance_histogram": [1, 0, 1, 2, 0], "num_spec_steps": 4,
    "num_accepted_draft_tokens": 8, "num_draft_tokens": 16, "num_spec_tokens": 4,
}}}  # fmt: skip
SGLANG = {"meta_info": {"spec_verify_ct": 5, "spec_accept_length": 2.2, "spec_accept_rate": 0.4, "completion_tokens": 11}}
LLAMA_CPP = {"timings": {"predicted_n": 12, "draft_n": 20, "draft_n_accepted": 9}}
SPECVIZ = {"usage": {"prompt_tokens": 3, "completion_tokens": 12, "total_tokens": 15, "specviz": {"target_passes": 4, "drafter": "lookup"}}}
USAGE = {"usage": {"prompt_tokens": 3, "completion_tokens": 10, "total_tokens": 13}}


def _sse(body: dict) -> bytes:
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def endpoint(extra: dict, where: str) -> Starlette:
    """A fake chat endpoint streaming six text chunks and then `extra`: on the usage chunk (vLLM, specviz), on the
    last text chunk's top level (llama.cpp), or inside the last choice (SGLang's meta_info)."""

    def chunk(text: str | None, **more) -> dict:
        choice = {"index": 0, "delta": {"content": text} if text else {}, "finish_reason": None if text else "stop"}
        if where == "choice" and text is None:
            choice |= more
            more = {}
        return {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [choice], **more}

    async def events():
        for text in ("one", " two", " three", " four", " five", " six"):
            yield _sse(chunk(text))
        yield _sse(chunk(None, **(extra if where in ("top", "choice") else {})))
        usage = extra if where == "usage" else USAGE
        yield _sse({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [], **({"usage": USAGE["usage"]} | usage)})
        yield b"data: [DONE]\n\n"

    async def chat(request):
        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


@pytest.mark.parametrize(
    ("extra", "where", "source", "length", "rate"),
    [
        (VLLM, "usage", "vLLM metrics.speculative_decoding", 2.5, 0.375),
        (SGLANG, "choice", "SGLang meta_info", 2.2, 0.4),
        (SGLANG, "top", "SGLang meta_info", 2.2, 0.4),
        (LLAMA_CPP, "top", "llama.cpp timings", None, 9 / 20),
        (SPECVIZ, "usage", "specviz usage.specviz", 3.0, None),
    ],
)
def test_the_probe_reads_each_servers_own_numbers_from_a_stream(extra, where, source, length, rate):
    with running(endpoint(extra, where)) as root:
        result = probe(ProbeSpec(root + "/v1", "m", n=2, max_tokens=8), ["hi"])
    reports = [s.server_report for s in result.streams]
    assert all(r is not None and r.source == source for r in reports)
    assert reports[0].acceptance_length == pytest.approx(length) if length is not None else reports[0].acceptance_length is None
    assert reports[0].acceptance_rate == pytest.approx(rate) if rate is not None else reports[0].acceptance_rate is None
    out = result.to_json()
    assert out["acceptance_length"]["source"] == source and out["acceptance_length"]["inferred"] == result.report.tau
    assert out["acceptance_length"]["reported"] == (pytest.approx(length) if length is not None else None)
    if length is not None and result.report.tau is not None:
        assert out["acceptance_length"]["difference"] == pytest.approx(result.report.tau - length)
    assert out["requests"][0]["server_reported"]["source"] == source
    if source.startswith("vLLM"):
        assert out["requests"][0]["server_reported"]["acceptance_histogram"] == [1, 0, 1, 2, 0]
    if source.startswith("specviz"):  # its steps are target passes, and say so
        assert out["requests"][0]["server_reported"]["target_passes"] == 4 and "num_spec_steps" not in out["requests"][0]["server_reported"]


def test_without_a_report_the_bursts_stand_alone():
    with running(endpoint({}, "usage")) as root:
        result = probe(ProbeSpec(root + "/v1", "m", n=1, max_tokens=8), ["hi"])
    assert result.streams[0].server_report is None
    assert result.acceptance_length == {"reported": None, "inferred": result.report.tau, "difference": None, "source": None}


def test_server_report_shapes_and_pooling():
    assert server_report({}) is None and server_report({"metrics": "x", "timings": {"predicted_n": 3}}) is None
    sglang = server_report({"meta_info": {"spec_verify_ct": 4, "spec_accept_token_num": 6, "spec_draft_token_num": 12}}, completion_tokens=10)
    assert (sglang.acceptance_length, sglang.acceptance_rate, sglang.verify_steps) == (2.5, 0.5, 4)  # derived from its counts
    bad = server_report({"metrics": {"speculative_decoding": {"mean_acceptance_length": "2", "num_spec_steps": -1, "acceptance_histogram": [1, "x"]}}})
    assert bad.acceptance_length is None and bad.verify_steps is None and bad.histogram == (1,)
    idle = {"mean_acceptance_length": 1.0, "draft_acceptance_rate": 0.0, "acceptance_histogram": [0, 0, 0], "num_spec_steps": 0,
            "num_accepted_draft_tokens": 0, "num_draft_tokens": 0, "num_spec_tokens": 2}  # fmt: skip
    idle = server_report({"metrics": {"speculative_decoding": idle}})  # no verify step: vLLM's 1.0 and 0.0 measure nothing
    assert (idle.acceptance_length, idle.acceptance_rate, idle.verify_steps) == (None, None, 0)
    assert pooled_acceptance_length([idle, ServerReport("s", 3.0, verify_steps=2)]) == pytest.approx(3.0)
    a, b = ServerReport("s", 2.0, verify_steps=1), ServerReport("s", 4.0, verify_steps=3)
    assert pooled_acceptance_length([a, b]) == pytest.approx(3.5)  # weighted by verify steps
    assert pooled_acceptance_length([a, ServerReport("s", 4.0), None]) == pytest.approx(3.0)  # a plain mean without them
    assert pooled_acceptance_length([None, ServerReport("s")]) is None


@pytest.mark.parametrize(("extra", "where", "says"), [(VLLM, "usage", "the server reports 2.50 (vLLM"), (LLAMA_CPP, "top", "gives no acceptance length; its draft acceptance rate 0.45")])
def test_the_command_line_says_reported_beside_inferred(extra, where, says, capsys):
    from specviz import cli

    with running(endpoint(extra, where)) as root:
        assert cli.main(["probe", "--base-url", root + "/v1", "--model", "m", "--n", "1", "--max-tokens", "8", "--tokenizer", "none"]) == 0
    assert says in capsys.readouterr().out
