"""The Benchmark page's plumbing: what it offers (drafters, limits, prompts) and running a sweep with the shared
models inside one queue turn. The sweep itself is specviz.experiments.bench; the page only draws."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd

from specviz.config import EMBEDDED_TARGET
from specviz.core.decoding import MAX_DRAFT_TOKENS
from specviz.core.tree import MAX_TREE_WIDTH
from specviz.drafters.specs import SPECULATIVE_KINDS, drafter_spec
from specviz.experiments.bench import (
    DEFAULT_PROMPTS,
    BenchPrompt,
    SweepSpec,
    first_per_category,
    load_prompts,
    prompt_categories,
    rows_to_frame,
    run_sweep,
    summary_table,
    tree_vs_chain_table,
)
from specviz.ui import access
from specviz.ui.models import sweep_models

__all__ = [
    "BENCH_DRAFTERS", "DEFAULT_PROMPTS", "EMBEDDED_TARGET", "MAX_DRAFT_TOKENS", "MAX_TREE_WIDTH", "SweepSpec", "first_per_category",
    "load_prompts", "needs_draft_model", "prompt_categories", "run_benchmark", "summary_table", "tree_vs_chain_table",
]  # fmt: skip

BENCH_DRAFTERS = SPECULATIVE_KINDS  # every drafter but plain decoding, which is the baseline


def needs_draft_model(drafters: Sequence[str]) -> bool:
    return any(drafter_spec(d).needs_model for d in drafters)


def run_benchmark(
    target_source: str, draft_source: str, device: str, prompts: Sequence[BenchPrompt], spec: SweepSpec,
    on_progress: Callable[[int, int, str], None],
) -> pd.DataFrame:
    """Load the sweep's models (cached), then run it as a long job: one model turn per run (a long run gives the model
    back between rounds), timings counted inside the turns only. Raises ValueError with a message for the user."""
    models = sweep_models(target_source, draft_source, device, spec.drafters)
    with access.long_job(models.target, "a benchmark sweep", "the sweep's next run") as turn:
        rows = run_sweep(models.target, prompts, spec, draft=models.draft, early_exit=models.early_exit, heads=models.heads, eagle=models.eagle,
                         on_progress=on_progress, turn=turn)  # fmt: skip
    return rows_to_frame(rows)
