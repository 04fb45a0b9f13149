"""One prompt-lookup run, four views: the CLI's JSON, the step-through panel, the Benchmark table and a
recording (saved and loaded back) print the same alpha, acceptance rate, mean acceptance length and tokens
per target pass, all derived once in specviz.core.metrics."""

from __future__ import annotations

import pytest

from specviz.config import RunConfig
from specviz.core.metrics import run_metrics
from specviz.experiments.bench import BenchPrompt, SweepSpec, compare_to_baseline, run_once
from specviz.record_json import stats_to_json
from specviz.recording import RecordedRun, recorded_run
from specviz.viz import rounds_frame
from tests.test_decoding import decoder


def test_one_lookup_run_has_the_same_metrics_in_every_view():
    make = lambda: decoder("lookup", 4, max_new=40)  # noqa: E731
    dec = make()
    dec.run()
    records = dec.records
    assert any(r.num_accepted for r in records) and any("rejected" in r.draft_fates for r in records)
    truth = run_metrics(records)
    assert truth.alpha is not None  # one-hot q: the mean p_target of the checked drafts

    cli = stats_to_json(dec.stats(), records)
    panel = rounds_frame(records).iloc[-1]  # the step-through page's running numbers
    bench = compare_to_baseline(BenchPrompt("copy", "t", "p"), "lookup", 4, 0.0, SweepSpec(), [run_once(make)], [run_once(lambda: decoder("none", 0, max_new=40))])
    recorded = recorded_run("lookup", RunConfig(drafter="lookup", chat=False), records, prefill_ms=dec.prefill_ms)

    for alpha in (cli["alpha"], panel["alpha"], bench.alpha, recorded.stats.alpha):
        assert alpha == pytest.approx(truth.alpha)
    for rate in (cli["acceptance_rate"], panel["acceptance_rate"], bench.acceptance_rate, recorded.stats.acceptance_rate):
        assert rate == pytest.approx(truth.acceptance_rate)
    for tokens in (cli["tokens_per_target_pass"], panel["tokens_per_pass"], bench.tokens_per_pass, recorded.stats.tokens_per_target_pass):
        assert tokens == pytest.approx(truth.tokens_per_target_pass)
    for length in (cli["mean_acceptance_length"], recorded.stats.mean_acceptance_length):
        assert length == pytest.approx(truth.mean_acceptance_length)
    loaded = RecordedRun.model_validate_json(recorded.model_dump_json()).stats  # what a saved file gives back
    assert loaded.alpha == pytest.approx(truth.alpha) and loaded.mean_acceptance_length == pytest.approx(truth.mean_acceptance_length)
