"""The Exactness lab's plumbing: its configs, the shared models and one queue turn per batch. The samplers are
specviz.experiments.lab and the toy specviz.core.toy; the page only draws."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st
import torch

from specviz.config import RunConfig, validate_prompt
from specviz.core.toy import ToyRun, ToyVariant, normalise, run_toy
from specviz.experiments.lab import (
    GreedyResult,
    RealResult,
    RealSummary,
    greedy_side_by_side,
    sample_real,
    summarize_real,
)
from specviz.runs import kv_tokens
from specviz.ui.common import budgets, turns
from specviz.ui.common.models import run_models


def run_real(
    prompt: str, target: str, device: str, drafter: str, temperature: float, mode: str, n: int, variant: str,
    on_progress: Callable[[int, int], None] | None = None,
) -> RealResult:
    """The first token after the prompt, N times speculatively and N times from the target alone (k = 1, two new
    tokens, no chat template), one model turn per pair of runs. Raises ValueError with a message for the user, before
    any model turn when the prompt is over this server's token budget or its memory for runs is full."""
    validate_prompt(prompt)  # before loading a model for nothing
    config = RunConfig(target=target, drafter=drafter, num_draft_tokens=1, auto_k=False, temperature=float(temperature), max_new_tokens=2, chat=False, device=device)  # type: ignore[arg-type]
    models = run_models(config)
    ids = budgets.prompt_ids(models.target, prompt, config.chat, config.max_new_tokens, config.num_draft_tokens)
    memory = kv_tokens(config, models, len(ids)) + (kv_tokens(config, models, len(ids), baseline=True) if mode == "engine" else 0)
    with budgets.job_memory(models.target, memory, "The lab's sampler"):
        with turns.long_job(models.target, "the lab's sampler", "your next sample") as turn:  # one model turn per pair of runs
            return sample_real(config, models, prompt, mode, int(n), variant, on_progress=on_progress,
                               turn=turn)  # fmt: skip


def run_greedy(prompt: str, target: str, device: str, drafter: str, k: int, max_new_tokens: int) -> GreedyResult:
    """Greedy speculative and plain decoding of the prompt, side by side, in model turns of about a second."""
    validate_prompt(prompt)
    config = RunConfig(target=target, drafter=drafter, num_draft_tokens=int(k), auto_k=False, temperature=0.0, max_new_tokens=int(max_new_tokens), device=device)  # type: ignore[arg-type]
    models = run_models(config)
    ids = budgets.prompt_ids(models.target, prompt, config.chat, config.max_new_tokens, config.num_draft_tokens)
    memory = kv_tokens(config, models, len(ids)) + kv_tokens(config, models, len(ids), baseline=True)  # both runs end side by side
    with budgets.job_memory(models.target, memory, "The side-by-side check"):
        with turns.long_job(models.target, "the side-by-side check", "your next rounds") as turn:
            return greedy_side_by_side(config, models, prompt, turn=turn)


def toy_distributions(p_weights: list[float], q_weights: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """The toy table's weights as (V,) p_target and q_draft; ValueError naming the column to fix."""
    return normalise(p_weights, "p_target"), normalise(q_weights, "q_draft")


def sample_toy(p_target: torch.Tensor, q_draft: torch.Tensor, num_samples: int, seed: int, variant: ToyVariant) -> ToyRun:
    """num_samples speculative positions under the rule `variant` (specviz.core.toy.run_toy): counts, TV and p-values."""
    return run_toy(p_target, q_draft, num_samples, seed, variant)


SEED_CHECK = 20  # seeds in the p-value check: an exact rule lands below 0.05 in about 1 of 20
SEED_CHECK_MAX_N = 10_000  # samples per seed in that check (about 0.1 s each here)


@st.cache_data(max_entries=64, show_spinner=False)
def pvalues_over_seeds(p_weights: tuple[float, ...], q_weights: tuple[float, ...], num_samples: int, variant: ToyVariant) -> list[float]:
    """The chi-square p-value of SEED_CHECK runs of the toy (seeds 0..SEED_CHECK-1) at min(num_samples, SEED_CHECK_MAX_N)
    samples each: one run's p-value is a coin with a 5% chance of "< 0.05" for an exact rule, twenty show the coin."""
    p_target, q_draft = toy_distributions(list(p_weights), list(q_weights))
    n = min(int(num_samples), SEED_CHECK_MAX_N)
    return [float(run_toy(p_target, q_draft, n, seed, variant).pvalues[-1]) for seed in range(SEED_CHECK)]


def real_summary(real: RealResult) -> RealSummary:
    """Both samples bucketed over the shown tokens and tested against p_target (specviz.experiments.lab)."""
    return summarize_real(real)
