"""The benchmark sweep and `python -m specviz bench` on a tiny local random model (fixtures from conftest)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from specviz.cli import main
from specviz.config import DRAFTER_KINDS
from specviz.experiments.bench import BENCH_DRAFTERS, COLUMNS, SweepSpec, rows_to_frame, run_sweep, summary_table
from specviz.experiments.prompts import first_per_category, load_prompts
from specviz.experiments.timed_runs import BASELINE, measure_setups
from specviz.runs import RunModels


def test_cli_writes_csv_with_documented_columns(tiny_dir, prompts_file, tmp_path, capsys):
    out = tmp_path / "results.csv"
    rc = main([
        "bench", "--target", str(tiny_dir["llama"]), "--prompts", str(prompts_file), "--categories", "copy,prose",
        "--drafters", "lookup,early-exit", "--k", "2,3", "--temperatures", "0,1", "--max-new-tokens", "6",
        "--repeats", "2", "--warmup", "1", "--device", "cpu", "--dtype", "float32", "--out", str(out),
    ])
    assert rc == 0
    frame = pd.read_csv(out)
    assert tuple(frame.columns) == COLUMNS
    assert len(frame) == 2 * 2 * 2 * 2  # prompts x temperatures x drafters x k
    assert set(frame["category"]) == {"copy", "prose"}
    assert set(frame["drafter"]) == {"lookup", "early-exit"}
    assert (frame["speedup"] > 0).all() and (frame["baseline_tokens_per_s"] > 0).all()
    assert (frame["repeats"] == 2).all() and (frame["device"] == "cpu").all() and (frame["dtype"] == "float32").all()
    for col in ("speedup", "speedup_cpu"):  # the median lies within the min-max of the repeats
        assert (frame[f"{col}_low"] <= frame[col] + 1e-9).all() and (frame[col] <= frame[f"{col}_high"] + 1e-9).all()
    assert (frame["new_tokens"] <= 6).all() and (frame["tokens_per_target_pass"] >= 1).all()
    # greedy speculative output is token-identical to plain greedy decoding
    greedy = frame[frame["temperature"] == 0]
    assert greedy["same_as_baseline"].astype(bool).all()
    assert frame.loc[frame["temperature"] > 0, "same_as_baseline"].isna().all()
    # Leviathan's alpha for every drafter that drafted: prompt lookup's one-hot q makes it the mean p_target
    assert frame.loc[frame["drafted"] > 0, "alpha"].notna().all()
    err = capsys.readouterr()
    total = 2 * 2 * (1 + 2 * 2) * (1 + 2)  # settings x (warm-up + repeats)
    assert f"[1/{total}]" in err.err and f"[{total}/{total}]" in err.err and "baseline" in err.err
    assert "speedup" in err.out  # the table printed at the end


def test_cli_json_output(tiny_dir, prompts_file, tmp_path):
    out = tmp_path / "results.json"
    rc = main([
        "bench", "--target", str(tiny_dir["llama"]), "--prompts", str(prompts_file), "--categories", "copy",
        "--drafters", "lookup", "--k", "2", "--temperatures", "0", "--max-new-tokens", "4", "--repeats", "1", "--warmup", "0",
        "--device", "cpu", "--out", str(out),
    ])
    assert rc == 0
    records = json.loads(out.read_text())
    assert len(records) == 1 and set(records[0]) == set(COLUMNS)


def test_cli_reports_bad_input(tiny_dir, prompts_file, tmp_path, capsys):
    args = ["bench", "--target", str(tiny_dir["llama"]), "--prompts", str(prompts_file)]
    assert main(args + ["--categories", "poetry"]) == 2
    assert "No prompts in category poetry" in capsys.readouterr().err
    assert main(args + ["--k", "0"]) == 2
    assert main(args + ["--drafters", "none"]) == 2
    assert main(args + ["--out", str(tmp_path / "x.txt")]) == 2
    assert main(args + ["--repeats", "0"]) == 2
    assert main(args + ["--per-category", "0"]) == 2
    assert main(args + ["--append"]) == 2  # --append needs a CSV to add to
    stale = tmp_path / "old.csv"
    stale.write_text("a,b\n1,2\n")
    assert main(args + ["--out", str(stale), "--append"]) == 2
    assert "other columns" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(args + ["--k", "two"])


def test_run_sweep_in_process(tiny_models, tmp_path, prompts_file):
    prompts = load_prompts(prompts_file, ["copy"])
    seen = []
    spec = SweepSpec(drafters=("lookup",), ks=(2, 4), temperatures=(0.0,), max_new_tokens=8, chat=False, repeats=2, warmup=1)
    rows = run_sweep(RunModels(tiny_models["llama"]), prompts, spec, on_progress=lambda d, t, m: seen.append((d, t, m)))
    assert [r.k for r in rows] == [2, 4]
    assert [r.repeats for r in rows] == [2, 2]
    total = 3 * 3  # (baseline + 2 settings) x (1 warm-up + 2 repeats)
    assert spec.num_runs(1) == total and [(d, t) for d, t, _ in seen] == [(i, total) for i in range(1, total + 1)]
    # interleaved: each rotation runs all three, starting one later than the last; the first is the warm-up
    names = [m.split(" T=0 ")[1].split(" (")[0] for _, _, m in seen]
    assert names == ["baseline", "lookup k=2", "lookup k=4", "lookup k=2", "lookup k=4", "baseline", "lookup k=4", "baseline", "lookup k=2"]
    assert sum("warm-up" in m for _, _, m in seen) == 3
    frame = rows_to_frame(rows)
    # the copy prompt repeats itself, so prompt lookup finds something to draft (a random model rarely agrees)
    assert frame["drafted"].sum() > 0
    assert (frame["accepted"] <= frame["drafted"]).all()
    assert (frame["tokens_per_target_pass"] == frame["new_tokens"] / frame["target_passes"]).all()
    summary = summary_table(frame)
    assert len(summary) == 2 and {"speedup", "tokens_per_target_pass"} <= set(summary.columns)


def test_bench_drafters_follow_config():
    assert BENCH_DRAFTERS == tuple(d for d in DRAFTER_KINDS if d != "none")


def test_shipped_prompt_set():
    prompts = load_prompts()
    by_category = {}
    for p in prompts:
        by_category.setdefault(p.category, []).append(p)
    assert {"code", "prose", "copy", "qa"} <= set(by_category)
    assert all(len(v) >= 3 for v in by_category.values())
    assert len({(p.category, p.title) for p in prompts}) == len(prompts)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "not valid JSON"),
        ("[]", "non-empty JSON list"),
        ('[{"category": "code", "title": "x"}]', "needs non-empty strings"),
    ],
)
def test_load_prompts_rejects_bad_files(tmp_path, content, message):
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_prompts(path)
    with pytest.raises(ValueError, match="No prompt file"):
        load_prompts(tmp_path / "missing.json")


@pytest.mark.parametrize(
    "kwargs",
    [dict(drafters=()), dict(drafters=("none",)), dict(ks=()), dict(ks=(0,)), dict(ks=(17,)), dict(temperatures=(-1.0,)), dict(max_new_tokens=0), dict(seed=-1),
     dict(repeats=0), dict(warmup=-1)],
)
def test_sweep_spec_validation(kwargs):
    with pytest.raises(ValueError):
        SweepSpec(**kwargs)


def test_model_drafter_needs_a_draft(tiny_models, prompts_file):
    with pytest.raises(ValueError, match="draft model"):
        run_sweep(RunModels(tiny_models["llama"]), load_prompts(prompts_file), SweepSpec(drafters=("model",), warmup=0))


def test_bench_figures(tiny_models, prompts_file):
    from specviz.viz.bench import measured_points, speedup_vs_k_figure, theory_overlay_figure
    from specviz.viz.theory import MEASURED_COLUMNS

    spec = SweepSpec(drafters=("lookup", "early-exit"), ks=(2,), temperatures=(0.0,), max_new_tokens=4, chat=False, repeats=1, warmup=0)
    frame = rows_to_frame(run_sweep(RunModels(tiny_models["llama"]), load_prompts(prompts_file, ["copy", "code"]), spec))
    for metric in ("speedup", "speedup_cpu"):
        assert len(speedup_vs_k_figure(frame, metric).data) == 2 * 2  # categories x drafters (one temperature)
        assert theory_overlay_figure(frame, metric).data
    with pytest.raises(ValueError, match="Unknown speedup column"):
        speedup_vs_k_figure(frame, "tokens_per_s")
    points = measured_points(frame)
    assert tuple(points.columns) == MEASURED_COLUMNS and len(points) == len(frame)
    drafted = (frame["drafted"] > 0).to_numpy()
    assert points["alpha"][drafted].notna().all()  # Leviathan's alpha, or the implied one for prompt lookup


def test_measure_setups_repeats_interleaves_and_keeps_pairs(tiny_models):
    """Every setup runs warmup + repeats times in a rotating order; the kept samples pair up by repeat."""
    from specviz.config import RunConfig
    from specviz.runs import build_decoder

    target = tiny_models["llama"]
    ids = target.tokenizer("the cat sat on the mat and the cat sat on the")["input_ids"]
    config = RunConfig(target="tiny", drafter="lookup", num_draft_tokens=3, auto_k=False, max_new_tokens=6, chat=False)
    built: list[str] = []

    def factory(name: str, baseline: bool):
        def make():
            built.append(name)
            return build_decoder(config, RunModels(target), ids, baseline=baseline)

        return make

    seen = []
    samples = measure_setups({BASELINE: factory("b", True), "lookup": factory("l", False)}, repeats=3, warmup=1,
                             on_progress=lambda d, t, m, s: seen.append((d, t, s.stats.new_tokens)))
    assert built == ["b", "l", "l", "b", "b", "l", "l", "b"]
    assert [len(v) for v in samples.values()] == [3, 3]
    assert seen[-1][:2] == (8, 8) and all(n == 6 for _, _, n in seen)
    for b, s in zip(samples[BASELINE], samples["lookup"]):
        assert b.generated == s.generated  # greedy: the same tokens every repeat, with or without drafts
        assert b.cpu_s >= 0 and b.wall_s >= 0 and not any(b.drafted)
        assert len(b.pass_ms(drafting=False)) == b.stats.target_passes
    assert sum(s.stats.drafted for s in samples["lookup"]) > 0


def test_first_per_category():
    from specviz.experiments.prompts import BenchPrompt

    prompts = [BenchPrompt(c, f"{c}{i}", "x") for c in ("a", "b") for i in range(3)]
    assert [p.title for p in first_per_category(prompts, 2)] == ["a0", "a1", "b0", "b1"]
    assert first_per_category(prompts, None) == prompts
    with pytest.raises(ValueError, match="at least 1"):
        first_per_category(prompts, 0)


def test_cli_per_category_and_append(tiny_dir, prompts_file, tmp_path):
    out = tmp_path / "r.csv"
    args = ["bench", "--target", str(tiny_dir["llama"]), "--prompts", str(prompts_file), "--drafters", "lookup", "--k", "2",
            "--temperatures", "0", "--max-new-tokens", "3", "--repeats", "1", "--warmup", "0", "--device", "cpu", "--out", str(out)]
    assert main(args + ["--per-category", "1"]) == 0
    assert main(args + ["--categories", "copy", "--append"]) == 0
    frame = pd.read_csv(out)
    assert tuple(frame.columns) == COLUMNS
    assert list(frame["category"]) == ["copy", "prose", "code", "copy"]


def test_compare_to_baseline_uses_paired_medians():
    """Synthetic samples (no clocks read): speedups pair repeat i with repeat i, costs are medians of passes."""
    from specviz.core.metrics import RunMetrics
    from specviz.experiments.bench import compare_to_baseline
    from specviz.experiments.prompts import BenchPrompt
    from specviz.experiments.timed_runs import RunSample

    def sample(tokens_per_s: float, cpu_s: float, verify_ms: tuple[float, ...], drafted: tuple[int, ...], draft_ms: float = 0.0) -> RunSample:
        passes = len(verify_ms)
        stats = RunMetrics(rounds=passes, new_tokens=12, drafted=sum(drafted), accepted=sum(drafted) // 2, decode_ms=12_000 / tokens_per_s)
        return RunSample(generated=(1,) * 12, stats=stats, verify_ms=verify_ms, drafted=drafted, draft_ms=draft_ms, cpu_s=cpu_s, wall_s=12 / tokens_per_s)

    bases = [sample(10.0, 1.2, (10.0,) * 12, (0,) * 12), sample(5.0, 1.2, (20.0,) * 12, (0,) * 12), sample(10.0, 1.2, (10.0,) * 12, (0,) * 12)]
    runs = [sample(20.0, 0.6, (15.0, 15.0, 10.0), (4, 4, 0), 8.0), sample(5.0, 0.4, (30.0, 30.0, 20.0), (4, 4, 0), 8.0),
            sample(15.0, 0.6, (15.0, 15.0, 10.0), (4, 4, 0), 8.0)]
    spec = SweepSpec(drafters=("lookup",), ks=(4,), temperatures=(0.0,))
    row = compare_to_baseline(BenchPrompt("copy", "t", "x"), "lookup", 4, 0.0, spec, runs, bases, "cpu", "float32")
    # paired ratios 2.0, 1.0, 1.5: the median and its range (a slow repeat of the baseline does not inflate the speedup)
    assert (row.speedup, row.speedup_low, row.speedup_high) == (1.5, 1.0, 2.0)
    assert (row.speedup_cpu, row.speedup_cpu_low, row.speedup_cpu_high) == (2.0, 2.0, 3.0)
    assert row.verify_cost == 1.5  # median drafting pass 15 ms / median baseline pass 10 ms
    assert row.draft_cost == pytest.approx(0.1)  # 8 ms / 8 drafted tokens / 10 ms
    assert (row.repeats, row.device, row.dtype, row.same_as_baseline) == (3, "cpu", "float32", True)
    assert (row.tokens_per_s, row.baseline_tokens_per_s) == (15.0, 10.0)


def test_the_csv_carries_vllms_histogram_and_appends_to_an_older_csv(tiny_dir, prompts_file, tmp_path):
    """Issue 45: every row carries vLLM's num_spec_steps, mean_acceptance_length and acceptance_histogram, consistent as
    aiperf checks them; --append onto a CSV written before those columns rewrites it with them (old rows' cells empty)."""
    from specviz.experiments.bench import histogram_of, histograms_by_setting

    out = tmp_path / "r.csv"
    args = ["bench", "--target", str(tiny_dir["llama"]), "--prompts", str(prompts_file), "--drafters", "lookup", "--k", "3",
            "--temperatures", "0", "--max-new-tokens", "8", "--repeats", "1", "--warmup", "0", "--device", "cpu", "--out", str(out),
            "--categories", "copy"]  # fmt: skip
    assert main(args) == 0
    new = pd.read_csv(out)
    old_columns = [c for c in COLUMNS if c not in ("num_spec_steps", "mean_acceptance_length", "acceptance_histogram")]
    assert list(COLUMNS[: len(old_columns)]) == old_columns  # the new columns are last
    new[old_columns].to_csv(out, index=False)  # as an earlier version wrote it
    assert main(args + ["--append"]) == 0
    frame = pd.read_csv(out, dtype={"acceptance_histogram": str})
    assert tuple(frame.columns) == COLUMNS and len(frame) == 2
    assert histogram_of(frame["acceptance_histogram"][0]) == () and pd.isna(frame["num_spec_steps"][0])
    row = frame.iloc[1]
    hist = histogram_of(row["acceptance_histogram"])
    assert len(hist) == 3 + 1 and sum(hist) == row["num_spec_steps"] and sum(j * n for j, n in enumerate(hist)) == row["accepted"]
    assert row["mean_acceptance_length"] == pytest.approx(1 + row["accepted"] / row["num_spec_steps"], rel=1e-3)
    assert histograms_by_setting(frame, "copy") == {"lookup k=3 T=0": hist}  # the older row has none to pool
    assert histograms_by_setting(frame[old_columns], "copy") == {}  # an older table: no histograms
    with pytest.raises(ValueError, match="JSON list of counts"):
        histogram_of("[1, -2]")


def test_a_csv_written_before_the_rename_reads_and_appends_under_todays_names(tmp_path):
    """tokens_per_pass became tokens_per_target_pass: a CSV with the older header reads under today's name, and
    --append rewrites it with today's header, its rows kept."""
    from specviz.experiments.bench import COLUMNS, RENAMED, append_csv, read_bench

    old_name = {v: k for k, v in RENAMED.items()}
    row = {c: 1.0 for c in COLUMNS} | {"category": "copy", "prompt": "t", "drafter": "lookup", "acceptance_histogram": "1"}
    old = tmp_path / "old.csv"
    pd.DataFrame([row]).rename(columns=old_name).to_csv(old, index=False)
    assert "tokens_per_pass" in old.read_text().splitlines()[0]
    frame = read_bench(old)
    assert "tokens_per_target_pass" in frame.columns and "tokens_per_pass" not in frame.columns
    append_csv(pd.DataFrame([row]), old)
    again = read_bench(old)
    assert old.read_text().splitlines()[0].split(",") == list(COLUMNS) and len(again) == 2
