"""aiperf against `specviz serve` (issue 45): NVIDIA's benchmark (0.13.0, in its own venv) streams chat requests over
copying prompts to a speculating server, reads vLLM's `metrics.speculative_decoding` from each stream's usage chunk,
and its `profile_export_aiperf.json` must say what specviz's own records say of the same requests: each request's
acceptance length (and their mean, aiperf's "Acceptance Length"), the steps and counts, the token-weighted length,
and the pooled acceptance histogram. No request dropped (aiperf drops one whose object does not add up).

The server is the Service `specviz serve` runs, served as it serves it (tests/service_helpers.serving), in this
process: its history holds each request's verify steps (SpecDecodeSteps) straight from the decoder's records.
Requests go one at a time, in order, so aiperf's records line up with the history.

Skipped where the venv cannot be built (scripts/aiperf_venv.sh: PyPI, python3-venv). The first build takes about a
minute to several (downloads); later runs reuse it. The test itself: well under a minute of aiperf on a quiet machine.
"""

from __future__ import annotations

import pytest

from specviz.config import EMBEDDED_TARGET, RunConfig
from specviz.core.metrics import pooled_histogram
from specviz.loadtest import aiperf
from specviz.runs import resolve_models
from specviz.workshop.service.config import ServiceConfig
from specviz.workshop.service.server import Service
from tests.service_helpers import serving

pytestmark = pytest.mark.aiperf
MODEL = EMBEDDED_TARGET
K = 4
PROMPTS = [  # copying prompts: prompt lookup finds what to draft, so every request has verify steps
    "Repeat exactly: the cat sat on the mat and the dog sat on the log.",
    "Copy this line: one two three four five six seven eight nine ten.",
    "Say it back word for word: red green blue, red green blue, red green blue.",
    "Repeat after me: def add(a, b): return a + b",
]


@pytest.fixture(scope="module")
def aiperf_venv():
    try:
        return aiperf.venv()
    except aiperf.AiperfUnavailable as exc:
        pytest.skip(f"aiperf's venv could not be built (bash scripts/aiperf_venv.sh): {exc}")


def test_aiperf_reads_the_acceptance_length_and_histogram_specviz_records(aiperf_venv, smollm, tmp_path):
    run = RunConfig(target=MODEL, drafter="lookup", num_draft_tokens=K, auto_k=False, dtype="float32", device="cpu")  # k = 4 each step
    service = Service(ServiceConfig(run, MODEL, max_tokens=64), resolve_models(run, target=smollm))
    tokenizer = aiperf.write_tokenizer(service.tokenizer, tmp_path / "tokenizer")
    prompts = aiperf.write_prompts(tmp_path / "prompts.jsonl", PROMPTS, output_length=32)
    with serving(service) as root:
        result = aiperf.profile(aiperf_venv, root, MODEL, tokenizer, prompts, tmp_path / "artifacts", requests=len(PROMPTS))

    mine = [f.steps for f in service.history]  # specviz's own records, request by request
    assert len(mine) == len(PROMPTS) and all(f.reason in ("stop", "length") for f in service.history), service.history
    assert all(s.num_spec_steps > 0 and s.num_spec_tokens == K for s in mine)
    totals = [s.totals for s in mine]
    s = result.summary
    # every request kept: its object added up and had k + 1 bins
    assert s["spec_decode_acceptance_length"]["count"] == len(PROMPTS) and not s.get("error_request_count"), result.console[-3000:]
    # request by request: aiperf's number is specviz's
    assert result.per_request("spec_decode_acceptance_length") == pytest.approx([t.mean_acceptance_length for t in totals])
    assert result.per_request("spec_decode_steps") == [m.num_spec_steps for m in mine]
    assert result.per_request("spec_decode_accepted_draft_tokens") == [m.num_accepted_draft_tokens for m in mine]
    assert result.per_request("spec_decode_draft_tokens") == [m.num_draft_tokens for m in mine]
    # the run: the per-request mean, the token-weighted length, the rates, and the pooled histogram
    mean_length = sum(t.mean_acceptance_length for t in totals) / len(totals)
    accepted, steps, drafted = (sum(m.num_accepted_draft_tokens for m in mine), sum(m.num_spec_steps for m in mine),
                                sum(m.num_draft_tokens for m in mine))  # fmt: skip
    assert s["spec_decode_acceptance_length"]["avg"] == pytest.approx(mean_length)
    assert s["spec_decode_token_weighted_acceptance_length"]["avg"] == pytest.approx(1 + accepted / steps)
    assert s["spec_decode_draft_acceptance_rate"]["avg"] == pytest.approx(100 * sum(t.acceptance_rate for t in totals) / len(totals))
    assert s["spec_decode_overall_draft_acceptance_rate"]["avg"] == pytest.approx(100 * accepted / drafted)
    assert (s["total_spec_decode_steps"]["avg"], s["total_accepted_draft_tokens"]["avg"], s["total_draft_tokens"]["avg"]) == (steps, accepted, drafted)
    pooled = pooled_histogram(m.acceptance_histogram for m in mine)
    assert result.pooled_histogram == {j: n for j, n in enumerate(pooled) if n}
    assert "Spec Decode" in result.console and "Acceptance Length" in result.console
    print(f"\naiperf vs specviz: acceptance length {s['spec_decode_acceptance_length']['avg']:.4f} vs {mean_length:.4f} "
          f"(per request {[round(t.mean_acceptance_length, 4) for t in totals]}); token-weighted "
          f"{s['spec_decode_token_weighted_acceptance_length']['avg']:.4f} vs {1 + accepted / steps:.4f}; pooled histogram "
          f"{result.pooled_histogram} vs {list(pooled)}; steps {steps}, accepted {accepted}, drafted {drafted}")  # fmt: skip
