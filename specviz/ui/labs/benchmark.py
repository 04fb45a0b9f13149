"""The Benchmark page's plumbing: what it offers (drafters, limits, prompts) and running a sweep with the shared
models inside one queue turn. The sweep itself is specviz.experiments.bench; the page only draws."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd

from specviz.config import EMBEDDED_TARGET, RunConfig
from specviz.core.decoding import MAX_DRAFT_TOKENS
from specviz.core.tree import MAX_TREE_WIDTH
from specviz.drafters.specs import SPECULATIVE_KINDS
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
from specviz.runs import RunModels, kv_tokens
from specviz.ui.common import budgets, turns
from specviz.ui.common.models import sweep_models

__all__ = [
    "BENCH_DRAFTERS", "DEFAULT_PROMPTS", "EMBEDDED_TARGET", "MAX_DRAFT_TOKENS", "MAX_TREE_WIDTH", "SweepSpec", "first_per_category",
    "check_draft_model", "load_prompts", "prompt_categories", "run_benchmark", "summary_table", "tree_vs_chain_table",
]  # fmt: skip

BENCH_DRAFTERS = SPECULATIVE_KINDS  # every drafter but plain decoding, which is the baseline


def check_draft_model(drafters: Sequence[str], draft: str) -> None:
    """RunConfig.validate's ValueError when a chosen drafter drafts with a second model and none is chosen."""
    for drafter in drafters:
        RunConfig(drafter=drafter, draft=draft or None)  # type: ignore[arg-type]


def sweep_kv_tokens(models: RunModels, spec: SweepSpec, num_prompt_tokens: int) -> int:
    """A sweep runs one decoder at a time (its cache and its drafter's): the largest of them, at the longest prompt."""
    configs = [
        RunConfig(target=models.target.name, draft=models.draft.name if models.draft else None, drafter=d, num_draft_tokens=max(spec.ks),  # type: ignore[arg-type]
                  exit_layer=spec.exit_layer, max_new_tokens=spec.max_new_tokens, chat=spec.chat)
        for d in spec.drafters
    ]  # fmt: skip
    return max(kv_tokens(c, models, num_prompt_tokens) for c in configs)


def run_benchmark(
    target_source: str, draft_source: str, device: str, prompts: Sequence[BenchPrompt], spec: SweepSpec,
    on_progress: Callable[[int, int, str], None],
) -> pd.DataFrame:
    """Load the sweep's models (cached), then run it as a long job: one model turn per run (a long run gives the model
    back between rounds), timings counted inside the turns only. Raises ValueError with a message for the user."""
    models = sweep_models(target_source, draft_source, device, spec.drafters)
    longest = max(len(budgets.prompt_ids(models.target, p.prompt, spec.chat, spec.max_new_tokens, max(spec.ks))) for p in prompts)
    with budgets.job_memory(models.target, sweep_kv_tokens(models, spec, longest), "The benchmark sweep"), \
            turns.long_job(models.target, "a benchmark sweep", "the sweep's next run") as turn:  # fmt: skip
        rows = run_sweep(
            models.target, prompts, spec, draft=models.draft, early_exit=models.early_exit, heads=models.heads, eagle=models.eagle,
            on_progress=on_progress, turn=turn,
        )
    return rows_to_frame(rows)
