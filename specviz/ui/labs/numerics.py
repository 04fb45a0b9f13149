"""The Numerics lab page's plumbing: its models (each precision loaded as named, from the shared caches), its limits
(the owner's caps on the prompt, max new tokens and k), the two measurements as long jobs in the model's queue (one
model turn per pass), and the names the page shows. The comparisons themselves are specviz.experiments.numerics; the
page only draws."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from specviz.config import validate_prompt
from specviz.experiments.numerics import (
    InvarianceReport,
    NumericsReport,
    batch_invariance,
    compare,
    invariance_precisions,
    low_precision_dtypes,
)
from specviz.models import PRECISION_LABELS, resolve_device
from specviz.runs import run_positions
from specviz.ui.common import access, budgets, turns
from specviz.ui.common.models import lab_models

Progress = Callable[[int, int, str], None]
NEW_TOKENS_TOP, K_TOP = 128, 8  # the sliders' tops before the owner's caps


@dataclass(frozen=True)
class LabLimits:
    """What the lab's widgets offer: the lab's own ranges within the owner's caps (specviz.workshop.policy)."""

    prompt_chars: int
    new_tokens: int  # the max-new-tokens slider's top (at least its bottom, 8)
    k: int  # the k slider's top (at least 2: a slider needs two values)


def lab_limits() -> LabLimits:
    """The lab's widgets' limits under this server's policy (in local mode only the lab's own ranges bite)."""
    policy = access.current_policy()
    return LabLimits(policy.max_prompt_chars, max(8, min(NEW_TOKENS_TOP, policy.max_new_tokens)), max(2, min(K_TOP, policy.max_draft_tokens)))


def within_caps(prompt: str, new_tokens: int, k: int) -> tuple[int, int]:
    """(new tokens, k) within the owner's caps whatever the widgets sent, each cap applied said on the page.
    Raises ValueError for an empty prompt or one over the owner's length cap."""
    validate_prompt(prompt)
    policy = access.current_policy()
    _, too_long = policy.cap(len(prompt), "max_prompt_chars", "The prompt's length in characters")
    if too_long:
        raise ValueError(f"{too_long} Shorten it.")
    new_tokens, new_capped = policy.cap(int(new_tokens), "max_new_tokens", "max new tokens")
    k, k_capped = policy.cap(int(k), "max_draft_tokens", "k")
    for message in (new_capped, k_capped):
        if message:
            access.limited(message)
    return new_tokens, k


@dataclass(frozen=True)
class NumericsResult:
    prompt: str
    drafter: str
    report: NumericsReport
    texts: dict[int, str]  # token id -> its decoded text (untrusted model output)

    def token_text(self, token_id: int) -> str:
        return self.texts.get(int(token_id), "")


def precision_label(name: str) -> str:
    return PRECISION_LABELS.get(name, name)


def run_comparison(prompt: str, new_tokens: int, k: int, drafter: str, low: str, on_progress: Progress) -> NumericsResult:
    """Plain and speculative greedy decoding in float32 and in `low`, one model turn per model pass, within the
    owner's caps. Raises ValueError (or RuntimeError: out of memory) with a message for the user."""
    new_tokens, k = within_caps(prompt, new_tokens, k)
    models = lab_models(["float32", low])
    tokenizer = models["float32"].tokenizer
    prompt_ids = budgets.prompt_ids(models["float32"], prompt, True, new_tokens, k)
    with budgets.job_memory(models["float32"], lab_kv_tokens(len(prompt_ids), new_tokens, k), "The numerics comparison"):
        with turns.long_job(models["float32"], "the numerics comparison", "its next pass") as turn:
            report = compare(models, prompt_ids, new_tokens, k, drafter, turn=turn, on_progress=on_progress)
    ids = {t for trace in report.traces for t in trace.ids}
    return NumericsResult(prompt, drafter, report, {t: tokenizer.decode([t]) for t in ids})


def measure_invariance(prompt: str, new_tokens: int, k: int, precisions: list[str], on_progress: Progress) -> InvarianceReport:
    """The prompt's float32 greedy tokens scored by 1-token and by (k+1)-token passes in each precision, as one long
    job taking one model turn per model pass, within the owner's caps."""
    new_tokens, k = within_caps(prompt, new_tokens, k)
    models = lab_models(precisions)
    prompt_ids = budgets.prompt_ids(models["float32"], prompt, True, new_tokens, k)
    with budgets.job_memory(models["float32"], lab_kv_tokens(len(prompt_ids), new_tokens, k), "The batch-invariance check"):
        with turns.long_job(models["float32"], "the batch-invariance check", "its next pass") as turn:
            return batch_invariance(models, prompt_ids, new_tokens, k, on_progress=on_progress, turn=turn)


def lab_kv_tokens(num_prompt_tokens: int, new_tokens: int, k: int) -> int:
    """The lab's caches alive at once: the two of a scoring sweep (1-token and (k+1)-token passes over the same
    tokens; a greedy decode before it holds one), in float32 tokens (no other precision's cache is larger)."""
    return 2 * run_positions(num_prompt_tokens, new_tokens, k)


def lab_device() -> torch.device:
    """The device the lab runs on: this machine's best (specviz.models.resolve_device("auto"))."""
    return resolve_device("auto")


def precision_menu(device: torch.device) -> list[str]:
    """The low precisions the comparison offers on this device."""
    return list(low_precision_dtypes(device))


def invariance_menu(device: torch.device) -> list[str]:
    """The precisions the batch-invariance check measures on this device."""
    return list(invariance_precisions(device))
