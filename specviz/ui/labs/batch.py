"""The *At batch B* section's *Measure on this machine*: `specviz batch`'s own measurement
(specviz.experiments.batch.measure_batches) at page-sized settings, run as a long job: one model turn per batched
run, within the owner's caps. The result belongs to the session that measured it; the page only draws."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from specviz.config import RunConfig
from specviz.experiments.batch import BatchPoint, BatchSetup, measure_batches, typical_overhead_ms_per_row
from specviz.experiments.cost_profile import device_name
from specviz.experiments.prompts import DEFAULT_PROMPTS, load_prompts
from specviz.runs import RunModels, run_positions
from specviz.ui.common import access, budgets, turns
from specviz.ui.common import models as ui_models
from specviz.workshop.policy import Policy

PAGE_BATCH_SIZES = (1, 2, 4, 8)  # B measured: enough to see the ratio fall, a minute or so on a small CPU
PAGE_MAX_NEW_TOKENS = 32  # new tokens per row
PAGE_CATEGORY = "copy"  # where prompt lookup drafts well, so the ratio starts high
PAGE_DRAFTER = "lookup"  # no second model to load
SIDES = 2  # every B runs plain and speculative


@dataclass(frozen=True)
class BatchPlan:
    """What one press measures, after the owner's caps; limits says what they cut."""

    batch_sizes: tuple[int, ...]
    k: int
    max_new_tokens: int
    repeats: int  # timed runs of each side per B
    warmup: int = 1  # discarded runs of each side per B
    limits: tuple[str, ...] = ()

    @property
    def batched_runs(self) -> int:
        """Batched runs the job starts: each takes one model turn."""
        return len(self.batch_sizes) * SIDES * (self.warmup + self.repeats)


def batch_plan(k: int, policy: Policy) -> BatchPlan:
    """The page's settings within the policy: k and max new tokens capped as every run's are; a batch of B streams
    counts as B runs against max_runs, and the batched runs together must fit max_runs too (the largest B go first)."""
    limits: list[str] = []
    k, msg_k = policy.cap(k, "max_draft_tokens", "k")
    new_tokens, msg_new = policy.cap(PAGE_MAX_NEW_TOKENS, "max_new_tokens", "max new tokens")
    sizes = access.capped_options(PAGE_BATCH_SIZES, policy.max_runs)
    repeats = 1 if policy.shared else 3
    while len(sizes) > 1 and len(sizes) * SIDES * (1 + repeats) > policy.max_runs:
        sizes = sizes[:-1]
    if max(sizes) < max(PAGE_BATCH_SIZES):
        limits.append(f"B is limited to {max(sizes)} on this server (a batch of B streams counts as B of its {policy.max_runs} runs per job).")
    limits += [m for m in (msg_k, msg_new) if m]
    return BatchPlan(tuple(sizes), k, new_tokens, repeats, limits=tuple(limits))


@dataclass(frozen=True)
class BatchMeasurement:
    """This session's `specviz batch` points, with what they were measured on."""

    points: tuple[BatchPoint, ...]
    plan: BatchPlan
    machine: str  # device name, precision, threads

    @property
    def triples(self) -> list[tuple[int, float, float]]:
        """(B, plain tokens/s, speculative tokens/s), as the section draws measured points."""
        return [(p.batch_size, p.plain_tokens_per_s, p.spec_tokens_per_s) for p in self.points]

    @property
    def overhead_ms_per_row(self) -> float:
        """The plain side's per-row overhead outside the forward, charged to both sides of the predicted curve."""
        return typical_overhead_ms_per_row(self.points)

    @property
    def note(self) -> str:
        plan = self.plan
        return (
            f"Measured on this machine just now (this session only, shown instead of the shipped points): {PAGE_DRAFTER} with "
            f"k = {plan.k} on {PAGE_CATEGORY} prompts, {plan.max_new_tokens} new tokens per row, B = "
            f"{', '.join(map(str, plan.batch_sizes))}, {self.machine}."
        )


def batch_kv_tokens(plan: BatchPlan, num_prompt_tokens: int) -> int:
    """The largest B's two batches (plain and speculative, both kept to compare their rows), each row up to twice its
    positions (rejected drafts leave holes in a batch's cache until it compacts: specviz.models.HFBatchedLM)."""
    return SIDES * max(plan.batch_sizes) * 2 * run_positions(num_prompt_tokens, plan.max_new_tokens, plan.k)


def measure_batches_here(plan: BatchPlan, on_progress: Callable[[int, int, str], None]) -> BatchMeasurement:
    """The server's first target, greedy prompt lookup on the copy prompts at every B of the plan, as a long job:
    one model turn per batched run. Raises ValueError (a refused or stopped job, a model that will not load)."""
    target = ui_models.get_model(access.current_policy().default_target)
    config = RunConfig(target=target.name, drafter=PAGE_DRAFTER, num_draft_tokens=plan.k, auto_k=False, temperature=0.0, max_new_tokens=plan.max_new_tokens)
    setup = BatchSetup(config, tuple(load_prompts(DEFAULT_PROMPTS, [PAGE_CATEGORY])), plan.repeats, plan.warmup)
    longest = max(len(budgets.prompt_ids(target, p.prompt, config.chat, plan.max_new_tokens, plan.k)) for p in setup.prompts)
    with budgets.job_memory(target, batch_kv_tokens(plan, longest), "The batch measurement"):
        with turns.long_job(target, "the batch measurement", "its next batched run") as turn:
            points = measure_batches(RunModels(target), setup, plan.batch_sizes, on_progress=on_progress, turn=turn)
    machine = f"{device_name(target.device)}, {target.precision}, {torch.get_num_threads()} threads"
    return BatchMeasurement(tuple(points), plan, machine)
