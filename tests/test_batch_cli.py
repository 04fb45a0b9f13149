"""`python -m specviz batch` on a tiny random Llama: the JSON it prints and writes, the greedy check against plain
decoding at the same batch size, and the exit code when a row differs away from a near-tie (no timing asserted)."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

from specviz import cli
from specviz.experiments import batch as batch_experiment
from specviz.experiments.batch import SCHEMA, BatchPoint, Mismatch, bad_mismatches, load_batch_points, load_batch_results

pytestmark = pytest.mark.usefixtures("one_thread")
BATCH_CHECK = Path(__file__).resolve().parents[1] / "scripts" / "batch_check.py"


def batch_check(argv: list[str]) -> int:
    """scripts/batch_check.py's main, run as the script's code (a script is a command line, not a module to import)."""
    return runpy.run_path(str(BATCH_CHECK), run_name="batch_check")["main"](argv)


def run_batch(capsys, tiny_dir, prompts_file, *extra: str) -> tuple[int, str, str]:
    code = cli.main(["batch", "--target", str(tiny_dir["llama"]), "--prompts", str(prompts_file), "--category", "copy",
                     "--batch", "1,3", "--max-new-tokens", "8", "--no-chat", "--threads", "1", "--warmup", "0", *extra])  # fmt: skip
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("drafter", ["lookup", "ngram"])
def test_batch_json_and_file(capsys, tiny_dir, prompts_file, tmp_path, drafter):
    path = tmp_path / "batch.json"
    code, out, err = run_batch(capsys, tiny_dir, prompts_file, "--drafter", drafter, "-k", "3", "--json", "--out", str(path))
    assert code == 0, err
    result = json.loads(out)
    assert result["schema"] == SCHEMA and result["drafter"] == drafter and result["category"] == ["copy"]
    points = result["points"]
    assert [p["batch_size"] for p in points] == [1, 3]
    for p in points:
        assert p["plain_tokens_per_s"] > 0 and p["spec_tokens_per_s"] > 0 and p["mismatches"] == []
        assert p["plain_new_tokens"] == p["spec_new_tokens"] == 8 * p["batch_size"]  # no EOS in 8 tokens here
        assert p["spec_tokens_per_target_pass"] >= 1.0 and "before" in p["load_average"]
        assert p["plain_schedule"][-1][1] == 1 and sum(r * n for r, _, n in p["plain_schedule"]) == 8 * p["batch_size"]
        assert 1.0 <= p["spec_verify_width"] <= 4 and p["spec_pass_ms"] > 0 and p["plain_pass_ms"] > 0
    header, loaded = load_batch_points(path)
    assert header["drafter"] == drafter and [b for b, _, _ in loaded] == [1, 3]
    _, full = load_batch_results(path)
    assert all(p.measured_shape for p in full) and full[1].spec_schedule == tuple(map(tuple, points[1]["spec_schedule"]))
    if drafter == "lookup":  # the check prices both runs from a profile; no timing asserted, only that it predicts
        code = batch_check(["--batch", str(path), "--tolerance", "1000"])
        assert code == 0 and "predicted ratio" in capsys.readouterr().out


def test_batch_table_and_the_model_drafter(capsys, tiny_dir, prompts_file):
    code, out, err = run_batch(capsys, tiny_dir, prompts_file, "--drafter", "model", "--draft", str(tiny_dir["llama_draft"]))
    assert code == 0, err
    assert "plain tok/s" in out and "ratio" in out and "load average" in out


def test_a_row_that_differs_away_from_a_near_tie_fails(capsys, tiny_dir, prompts_file, monkeypatch):
    monkeypatch.setattr(batch_experiment, "mismatches", lambda *a: (Mismatch(0, 2, 5, 6, 0.25),))
    code, _, err = run_batch(capsys, tiny_dir, prompts_file)
    assert code == 1 and "first differs at generated token 2" in err and "margin 2.50e-01" in err


def test_near_ties_are_tolerated():
    point = lambda margin: BatchPoint(2, 1.0, 2.0, 1.5, 4, 4, "", (Mismatch(1, 3, 5, 6, margin),))  # noqa: E731
    assert bad_mismatches([point(1e-5)]) == [] and len(bad_mismatches([point(0.1)])) == 1
    assert point(0.0).ratio == 2.0 and not point(0.0).physical  # 2x from 1.5 tokens per pass: not under the same conditions


def test_batch_results_files(tmp_path):
    assert load_batch_points(tmp_path / "missing.json") is None
    old = tmp_path / "old.json"  # schema 1: tokens/s only; it loads, but batch_check asks for a re-measurement
    old.write_text(json.dumps({"schema": "specviz.batch/1", "points": [{"batch_size": 2, "plain_tokens_per_s": 5.0, "spec_tokens_per_s": 6.0}]}))
    assert load_batch_points(old)[1] == [(2, 5.0, 6.0)] and not load_batch_results(old)[1][0].measured_shape
    assert batch_check(["--batch", str(old)]) == 2
    point = {"batch_size": 1, "plain_tokens_per_s": 1.0, "spec_tokens_per_s": 1.0}
    bad = tmp_path / "bad.json"
    for text in ("{", json.dumps({"schema": "nope"}), json.dumps({"schema": SCHEMA, "points": [{"batch_size": 1}]}),
                 json.dumps({"schema": SCHEMA, "points": [point] * 65}),
                 json.dumps({"schema": SCHEMA, "points": [point | {"spec_schedule": [[1, 0, 3]]}]}),
                 json.dumps({"schema": SCHEMA, "points": [point | {"spec_schedule": [[1, 1, 1]] * 5000}]}),
                 json.dumps({"schema": SCHEMA, "points": [point | {"spec_verify_width": float("inf")}]}),
                 json.dumps({"schema": SCHEMA, "points": [point | {"plain_tokens_per_s": 0}]})):  # fmt: skip
        bad.write_text(text)
        with pytest.raises(ValueError):
            load_batch_points(bad)


def test_bad_batch_arguments(capsys, tiny_dir, prompts_file):
    assert run_batch(capsys, tiny_dir, prompts_file, "--category", "nope")[0] == 2
    assert run_batch(capsys, tiny_dir, prompts_file, "--repeats", "0")[0] == 2
    with pytest.raises(SystemExit):
        cli.main(["batch", "--batch", "0"])


def test_smollm_greedy_rows_equal_plain_rows_at_the_same_batch_size(smollm):
    from specviz.config import RunConfig
    from specviz.experiments.batch import BatchSetup, measure_batch
    from specviz.experiments.prompts import load_prompts
    from specviz.runs import RunModels

    config = RunConfig(target="embedded", drafter="lookup", num_draft_tokens=4, max_new_tokens=12, temperature=0.0)
    setup = BatchSetup(config, tuple(load_prompts(categories=["copy"])[:2]), repeats=1, warmup=0)
    point = measure_batch(RunModels(smollm), setup, 3)
    assert point.plain_new_tokens == point.spec_new_tokens and point.spec_tokens_per_target_pass > 1.0
    assert bad_mismatches([point]) == [], point.mismatches


def test_a_results_file_written_before_the_rename_reads_its_tokens_per_target_pass(tmp_path):
    """spec_tokens_per_pass became spec_tokens_per_target_pass: a file with the older key reads the same; the new name wins."""
    point = {"batch_size": 2, "plain_tokens_per_s": 5.0, "spec_tokens_per_s": 6.0}
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"schema": SCHEMA, "points": [point | {"spec_tokens_per_pass": 1.75}]}))
    assert load_batch_results(old)[1][0].spec_tokens_per_target_pass == 1.75
    old.write_text(json.dumps({"schema": SCHEMA, "points": [point | {"spec_tokens_per_pass": 1.75, "spec_tokens_per_target_pass": 2.0}]}))
    assert load_batch_results(old)[1][0].spec_tokens_per_target_pass == 2.0
