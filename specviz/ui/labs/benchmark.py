"""The Benchmark page's plumbing: what it offers (drafters, limits, prompts) and running a sweep with the shared
models inside one queue turn. The sweep itself is specviz.experiments.bench; the page only draws."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import pandas as pd
import streamlit as st

from specviz.config import RunConfig
from specviz.drafters.specs import DRAFTERS, SPECULATIVE_KINDS
from specviz.experiments.bench import (
    SweepSpec,
    histograms_by_setting,
    read_bench,
    rows_to_frame,
    run_sweep,
    summary_table,
    tree_vs_chain_table,
)
from specviz.experiments.prompts import DEFAULT_PROMPTS, BenchPrompt, first_per_category, load_prompts, prompt_categories
from specviz.runs import ASSETS, RunModels, kv_tokens
from specviz.ui.common import budgets, turns, widgets
from specviz.ui.common.models import sweep_models
from specviz.viz.bench import auto_k_rounds_figure, auto_k_rounds_frame
from specviz.viz.markdown import md_text
from specviz.viz.metrics import HISTOGRAM_CAPTION, histogram_figure, histogram_frame

BENCH_DRAFTERS = SPECULATIVE_KINDS  # every drafter but plain decoding, which is the baseline
AUTO_K_ROUNDS = ASSETS / "auto_k_rounds_cpu.json"  # scripts/auto_k_check.py --trace
AUTO_K_ROUNDS_CAPTION = (
    "k: auto round by round on one prose and one copying prompt (greedy; `scripts/auto_k_check.py --trace`, "
    "assets/auto_k_rounds_cpu.json). The line is the k auto chose before each round from the rounds before it (0: a plain "
    "pass), the bars how many drafts the target kept, the diamonds probes. Look at the copying prompt: once drafts are "
    "kept, k climbs to the ceiling within a few rounds; on prose, where drafts are seldom kept, k falls to 0 and auto "
    "drafts again only in cheap probes, further apart after each one that keeps nothing."
)


def drafter_defaults() -> pd.DataFrame:
    """Each measured drafter's defaults (specviz.drafters.specs.MEASURED_BEST, from scripts/drafter_defaults.py): one
    row per drafter, the settings the sidebar and the CLI start it at."""
    rows = [dict(drafter=d.short_name, k=d.defaults.num_draft_tokens, tree_width=d.defaults.tree_width,
                 draft_vocabulary=f"{d.defaults.draft_vocab:,}" if d.defaults.draft_vocab else "full")
            for d in DRAFTERS if d.measured]  # fmt: skip
    return pd.DataFrame(rows, columns=["drafter", "k", "tree_width", "draft_vocabulary"])


def auto_k_rounds() -> None:
    """The shipped trace of k: auto per round, under its caption; nothing when the file is missing or unreadable."""
    try:
        frame = auto_k_rounds_frame(json.loads(AUTO_K_ROUNDS.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        st.caption(f"No k: auto trace to draw ({md_text(exc)}).")
        return
    st.plotly_chart(auto_k_rounds_figure(frame), width="stretch", key="auto_k_rounds")
    st.caption(AUTO_K_ROUNDS_CAPTION)


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


def run_bench(
    target_source: str, draft_source: str, device: str, prompts: Sequence[BenchPrompt], spec: SweepSpec,
    on_progress: Callable[[int, int, str], None],
) -> pd.DataFrame:
    """Load the sweep's models (cached), then run it as a long job: one model turn per run (a long run gives the model
    back between rounds), timings counted inside the turns only. Raises ValueError with a message for the user."""
    models = sweep_models(target_source, draft_source, device, spec.drafters)
    longest = max(len(budgets.prompt_ids(models.target, p.prompt, spec.chat, spec.max_new_tokens, max(spec.ks))) for p in prompts)
    with budgets.job_memory(models.target, sweep_kv_tokens(models, spec, longest), "The benchmark sweep"), \
            turns.long_job(models.target, "a benchmark sweep", "the sweep's next run") as turn:  # fmt: skip
        rows = run_sweep(models, prompts, spec, on_progress=on_progress, turn=turn)
    return rows_to_frame(rows)


def bench_prompts() -> tuple[list[BenchPrompt], list[str]]:
    """The shipped prompts (assets/prompts.json) and their categories; ValueError naming what is wrong with the file."""
    prompts = load_prompts(DEFAULT_PROMPTS)
    return prompts, prompt_categories(prompts)


def chosen_prompts(prompts: list[BenchPrompt], categories: Sequence[str], per_category: int) -> list[BenchPrompt]:
    """The first per_category prompts of each chosen category."""
    return first_per_category([p for p in prompts if p.category in categories], per_category)


def shipped_table(path) -> pd.DataFrame:
    """A benchmark CSV (the shipped one) with today's column names, whatever version wrote it."""
    return read_bench(path)


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """The sweep's table: one row per setting, the mean over prompts of its medians against plain decoding."""
    return summary_table(frame)


def trees_vs_chains(frame: pd.DataFrame) -> pd.DataFrame:
    """Token trees beside chains at the same node budget k (a frame with trees: viz.bench.has_trees)."""
    return tree_vs_chain_table(frame)


def acceptance_histograms(frame: pd.DataFrame, name: str) -> None:
    """vLLM's acceptance histogram per setting, pooled over one category's prompts (the category picked when there are
    several); a table written before bench carried the histogram says so instead."""
    categories = [str(c) for c in dict.fromkeys(frame["category"])] if "category" in frame else []
    st.subheader("Drafts kept per verify step (acceptance_histogram)")
    if not any(histograms_by_setting(frame, c) for c in categories):
        st.info("This table was measured before `bench` wrote vLLM's acceptance_histogram column; a sweep run here (or a new "
                "`python -m specviz bench`) shows it.")  # fmt: skip
        return
    category = categories[0] if len(categories) == 1 else widgets.selectbox("category", categories, key=f"{name}_histogram_category")
    hists = histograms_by_setting(frame, str(category))
    st.plotly_chart(histogram_figure(histogram_frame(hists)), width="stretch", key=f"{name}_acceptance_histogram")
    st.caption(f"One bar group per setting, its {md_text(category)} prompts pooled. {HISTOGRAM_CAPTION}")
