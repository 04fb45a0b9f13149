"""Every metric, the measured speedup included, is one number everywhere: the step-through page's curves (its rounds
frame) and its metrics panel, the CLI's JSON, a recording (its file and its replay) and the Benchmark table. Each view
is read the way it reads itself; `disagreements` compares them. Known-bad controls: a frame that re-derives the speedup
by the rule that lost (extrapolating past a baseline still being measured) and an α that leaves out one-hot drafts
must be caught."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from specviz.config import RunConfig
from specviz.core.metrics import run_metrics
from specviz.core.records import StepRecord
from specviz.experiments.bench import SweepSpec, compare_to_baseline
from specviz.experiments.prompts import BenchPrompt
from specviz.experiments.timed_runs import RunSample
from specviz.recording.build import build_recording, dumps, recorded_run
from specviz.recording.load import load_recording
from specviz.ui.step_through import step_views
from specviz.ui.step_through.replay import ReplaySession

KEYS = ("new_tokens", "target_passes", "alpha", "acceptance_rate", "mean_acceptance_length", "tokens_per_target_pass",
        "wall_s", "tokens_per_s", "speedup", "speedup_disturbed")  # fmt: skip

PREFILL_MS = 7.0


def rec(i: int, fates: str, emitted: int, overlap: tuple[float, ...] | None, round_ms: float = 10.0, p: float = 0.5, finished: bool = False) -> StepRecord:
    """Round i from a fate string (a accepted, r rejected, d discarded); overlap None: a drafter without a q."""
    names = {"a": "accepted", "r": "rejected", "d": "discarded"}
    m, kept = len(fates), fates.count("a")
    out = [10 + j for j in range(kept)] + [1] * (emitted - kept)
    return StepRecord(
        index=i, context_length=10, num_draft_tokens=max(m, 1), drafted=tuple(10 + j for j in range(m)), p_target=(p,) * m,
        q_draft=(1.0,) * m, accept_prob=(p,) * m, uniforms=(0.1,) * m, draft_fates=tuple(names[f] for f in fates),
        emitted=tuple(out), emitted_fates=("accepted",) * kept + (("bonus" if kept == m else "resampled") if m else "target",) * (emitted - kept),
        emitted_margin=(1.0,) * emitted, next_p_target=1.0, next_residual=None, overlap=overlap or (), dists=(),
        has_q=overlap is not None, draft_ms=1.0, verify_ms=5.0, round_ms=round_ms, record_ms=0.1, finished=finished,
    )  # fmt: skip


def run_records(with_q: bool) -> list[StepRecord]:
    """12 tokens in 5 rounds of 10 ms: 2.4 tokens per target pass."""
    q = (lambda *o: o) if with_q else (lambda *o: None)  # noqa: E731
    return [rec(0, "aaaa", 5, q(0.9, 0.8, 0.7, 0.6), p=0.7), rec(1, "ardd", 2, q(0.9, 0.2)), rec(2, "rddd", 1, q(0.1), p=0.2),
            rec(3, "", 1, q()), rec(4, "aard", 3, q(0.8, 0.7, 0.3), p=0.6)]  # fmt: skip


def plain(n: int, ms: float, finished: bool) -> list[StepRecord]:
    return [rec(i, "", 1, None, round_ms=ms, finished=finished and i == n - 1) for i in range(n)]


BASELINES = {  # plain decoding, against a 50 ms run of 12 tokens at 2.4 tokens per pass
    "covered": plain(12, 8.0, finished=False),  # 96 ms for 12 tokens: 1.92x
    "ended sooner": plain(6, 8.0, finished=True),  # stopped at EOS after 6: its pace, 96 ms for 12
    "measuring": plain(6, 8.0, finished=False),  # still being measured: no speedup yet
    "disturbed": plain(12, 12.0, finished=False),  # 2.88x is above 2.4 tokens per pass: a disturbed clock, no result
}


def number(x) -> float | bool | None:
    if isinstance(x, (bool, np.bool_)) or x is None:
        return None if x is None else bool(x)
    return None if math.isnan(float(x)) else float(x)


def panel_view(metrics) -> dict:
    """The page's metrics panel and headline cells: no wall clock (the page leaves the prefill out of every time)."""
    return {key: value for key, value in metrics.to_json().items() if key not in ("wall_s", "tokens_per_s")}


def frame_view(row) -> dict:
    """The page's curves: the last row of its rounds frame."""
    names = {"new_tokens": "tokens", "target_passes": "passes", "alpha": "alpha", "acceptance_rate": "acceptance_rate",
             "tokens_per_target_pass": "tokens_per_target_pass", "speedup": "speedup", "speedup_disturbed": "speedup_disturbed"}  # fmt: skip
    return {key: number(row[column]) for key, column in names.items()}


def disagreements(views: dict[str, dict]) -> list[str]:
    """Every metric on which two views differ (a view leaves out what it does not show)."""
    out = []
    for key in KEYS:
        shown = {name: number(view[key]) for name, view in views.items() if key in view}
        values = list(shown.values())
        first = values[0]
        for other in values[1:]:
            same = other == first if first is None or other is None or isinstance(first, bool) else other == pytest.approx(first, rel=1e-12)
            if not same:
                out.append(f"{key}: {shown}")
                break
    return out


def recording_of(baseline: list[StepRecord]):
    """Both runs and the baseline as a recording, written and read back as a file would be."""
    config = RunConfig(drafter="lookup", chat=False)
    runs = [recorded_run(label, config, run_records(with_q), prefill_ms=PREFILL_MS) for label, with_q in (("with q", True), ("one-hot q", False))]
    recording = build_recording(
        prompt="p", prompt_ids=(1, 2), runs=runs, baseline=recorded_run("baseline (plain decoding)", config, baseline, prefill_ms=PREFILL_MS),
        token_text=str, environment={"model": "toy", "vocab_size": 64, "dtype": "float32", "device": "cpu", "device_name": "cpu", "torch": "2"},
    )  # fmt: skip
    text = dumps(recording)
    return load_recording(text), json.loads(text)


def views_of(baseline: list[StepRecord]) -> dict[str, dict[str, dict]]:
    """Run label -> view name -> its numbers, for one baseline."""
    loaded, raw = recording_of(baseline)
    session = ReplaySession.open(loaded, "test")
    session.seek(session.total_rounds)  # the replay page at the end
    out = {}
    for i, run in enumerate(session.runs):
        recorded = loaded.runs[i]
        out[run.label] = {
            "page curves": frame_view(step_views.run_frame(session, run).iloc[-1]),
            "page panel": panel_view(step_views.metrics_of(session, run)),
            "CLI JSON": run_metrics(run_records(i == 0), baseline, PREFILL_MS).to_json(),  # what generate --json prints
            "recording file": raw["runs"][i]["stats"],
            "recording replayed": loaded.metrics_of(recorded).to_json(),
            "bench": bench_view(recorded.records),
        }
    return out


def bench_view(records) -> dict:
    """The Benchmark table's row (its speedup is a paired tokens/s ratio of repeats, another quantity: left out)."""
    sample = RunSample(generated=(), stats=run_metrics(records), verify_ms=(), drafted=(), draft_ms=0.0, cpu_s=1.0, wall_s=1.0)
    row = compare_to_baseline(BenchPrompt("copy", "t", "p"), "lookup", 4, 0.0, SweepSpec(), [sample], [sample])
    return {"new_tokens": row.new_tokens, "target_passes": row.target_passes, "alpha": row.alpha, "acceptance_rate": row.acceptance_rate,
            "tokens_per_target_pass": row.tokens_per_target_pass}  # fmt: skip


@pytest.mark.parametrize("situation", list(BASELINES))
def test_every_metric_is_one_number_in_every_view(situation):
    for label, views in views_of(BASELINES[situation]).items():
        assert not disagreements(views), (situation, label, disagreements(views))
    panel = views_of(BASELINES[situation])["with q"]["page panel"]
    expected = {"covered": 96 / 50, "ended sooner": 96 / 50, "measuring": None, "disturbed": None}[situation]
    assert panel["speedup"] == (expected if expected is None else pytest.approx(expected))
    assert panel["speedup_disturbed"] == (situation == "disturbed")
    assert panel["alpha"] == pytest.approx(sum([0.9, 0.8, 0.7, 0.6, 0.9, 0.2, 0.1, 0.8, 0.7, 0.3]) / 10)


def old_rule_frame(records, baseline) -> dict:
    """Known-bad: a frame that re-derives the speedup itself, extrapolating past the end of any baseline (the rule
    core.metrics had before, which the metrics panel used on a replayed recording)."""
    per_token = [r.round_ms / len(r.emitted) for r in baseline for _ in r.emitted]
    tokens, ms = sum(len(r.emitted) for r in records), sum(r.round_ms for r in records)
    base = sum(per_token[:tokens]) if tokens <= len(per_token) else sum(per_token) / len(per_token) * tokens
    return {"speedup": base / ms}


def test_a_view_with_its_own_speedup_rule_is_caught():
    views = views_of(BASELINES["measuring"])["with q"]
    assert not disagreements(views)
    bad = {**views, "old frame": old_rule_frame(run_records(True), BASELINES["measuring"])}
    assert [d.split(":")[0] for d in disagreements(bad)] == ["speedup"]


def test_an_alpha_that_leaves_out_one_hot_drafts_is_caught():
    """Known-bad: α from the stored overlaps only (what RunStats and the bench printed for prompt lookup once)."""
    views = views_of(BASELINES["covered"])["one-hot q"]
    overlaps = [o for r in run_records(False) for o in r.overlap]
    bad = {**views, "overlap-only alpha": {"alpha": sum(overlaps) / len(overlaps) if overlaps else None}}
    assert [d.split(":")[0] for d in disagreements(bad)] == ["alpha"]


def test_the_command_line_json_and_its_recording_print_one_number(tiny_dir, tmp_path, capsys):
    """The real CLI: generate --check-baseline --json --record; its JSON's stats, the file's stats, the replayed
    recording and the replay page agree, the speedup included (the recording's baseline is the checked plain run)."""
    from specviz import cli

    path = tmp_path / "run.json"
    argv = ["generate", "--target", str(tiny_dir["llama"]), "--no-chat", "--prompt", "the cat sat on the mat and the cat sat on the",
            "--drafter", "lookup", "-k", "3", "--max-new-tokens", "12", "--temperature", "0", "--check-baseline", "--json", "--record", str(path)]  # fmt: skip
    assert cli.main(argv) == 0
    printed = json.loads(capsys.readouterr().out)["samples"][0]["stats"]
    assert "speedup" in printed and "speedup_disturbed" in printed
    loaded = load_recording(path.read_bytes())
    session = ReplaySession.open(loaded, "test")
    session.seek(session.total_rounds)
    run = session.runs[0]
    views = {
        "CLI JSON": printed,
        "recording file": json.loads(path.read_text(encoding="utf-8"))["runs"][0]["stats"],
        "recording replayed": loaded.metrics_of(loaded.runs[0]).to_json(),
        "page curves": frame_view(step_views.run_frame(session, run).iloc[-1]),
        "page panel": panel_view(step_views.metrics_of(session, run)),
    }
    assert not disagreements(views), disagreements(views)
    assert loaded.baseline is not None and loaded.baseline.finished  # the checked plain run, to its end


def test_recordings_written_before_still_load_and_their_stats_are_the_derived_numbers():
    """The shipped recordings were written with RunStats' stats: they load, and what they stored is what core.metrics
    derives from their records now. A file whose stats lie is read from its records (its stats are never read)."""
    from pathlib import Path

    paths = sorted((Path(__file__).resolve().parent.parent / "assets" / "recordings").glob("*.json"))
    assert paths
    for path in paths:
        raw = json.loads(path.read_text(encoding="utf-8"))
        loaded = load_recording(path.read_bytes())
        pairs = [*zip(raw["runs"], loaded.runs), *([(raw["baseline"], loaded.baseline)] if loaded.baseline else [])]
        for stored, run in pairs:
            derived = run.metrics.to_json()
            for key, value in stored["stats"].items():
                assert number(derived[key]) == (value if value is None else pytest.approx(value, rel=1e-12)), (path.name, run.label, key)
    raw["runs"][0]["stats"] = {**raw["runs"][0]["stats"], "alpha": 0.01, "new_tokens": 1}
    lying = load_recording(json.dumps(raw))
    assert lying.runs[0].metrics.to_json() == loaded.runs[0].metrics.to_json()
