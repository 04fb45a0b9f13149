"""`python -m specviz bench --tree-width`: tree rows beside chain rows at the same node budget, greedy identity
kept, and the tree-vs-chain table printed (tiny local model)."""

from __future__ import annotations

import pandas as pd
import pytest

from specviz.cli import main
from specviz.experiments.bench import COLUMNS, SweepSpec, tree_vs_chain_table


def test_bench_sweeps_tree_widths(tiny_dir, prompts_file, tmp_path, capsys):
    out = tmp_path / "trees.csv"
    rc = main([
        "bench", "--target", str(tiny_dir["llama"]), "--prompts", str(prompts_file), "--categories", "copy",
        "--drafters", "ngram,early-exit", "--k", "4", "--tree-width", "1,2", "--temperatures", "0", "--max-new-tokens", "6", "--repeats", "1", "--warmup", "0",
        "--exit-layer", "1", "--device", "cpu", "--dtype", "float32", "--out", str(out),
    ])  # fmt: skip
    assert rc == 0
    frame = pd.read_csv(out)
    assert tuple(frame.columns) == COLUMNS
    assert sorted(frame["tree_width"]) == [1, 1, 2, 2]
    assert frame["same_as_baseline"].astype(bool).all()
    table = tree_vs_chain_table(frame)
    assert len(table) == 4 and {"tokens_per_target_pass", "speedup", "tree_width"} <= set(table.columns)
    assert "trees vs chains" in capsys.readouterr().out


@pytest.mark.parametrize("widths", [(), (0,), (5,)])
def test_bad_tree_widths_are_refused(widths):
    with pytest.raises(ValueError, match="Tree widths"):
        SweepSpec(tree_widths=widths)
