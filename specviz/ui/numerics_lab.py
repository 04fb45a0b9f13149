"""The Numerics lab page's plumbing: its models (each precision loaded as named, from the shared caches), the two
measurements as long jobs in the model's queue, and the names the page shows. The comparisons themselves are
specviz.experiments.numerics; the page only draws."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specviz.config import EMBEDDED_TARGET, validate_prompt
from specviz.experiments.numerics import (
    InvarianceReport,
    NumericsReport,
    batch_invariance,
    compare,
    invariance_precisions,
    low_precision_dtypes,
)
from specviz.models import PRECISION_LABELS, encode_prompt, resolve_device
from specviz.ui import access
from specviz.ui.models import lab_models

__all__ = [
    "EMBEDDED_TARGET", "PRECISION_LABELS", "InvarianceReport", "NumericsReport", "NumericsResult", "invariance_precisions",
    "low_precision_dtypes", "measure_invariance", "precision_label", "resolve_device", "run_comparison",
]  # fmt: skip

Progress = Callable[[int, int, str], None]


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
    """Plain and speculative greedy decoding in float32 and in `low`, one model turn per decode or scoring sweep.
    Raises ValueError (or RuntimeError: out of memory) with a message for the user."""
    validate_prompt(prompt)
    models = lab_models(["float32", low])
    tokenizer = models["float32"].tokenizer
    prompt_ids = encode_prompt(tokenizer, prompt, True)
    with access.long_job(models["float32"], "the numerics comparison", "its next decode") as turn:
        report = compare(models, prompt_ids, int(new_tokens), int(k), drafter, turn=turn, on_progress=on_progress)
    ids = {t for trace in report.traces for t in trace.ids}
    return NumericsResult(prompt, drafter, report, {t: tokenizer.decode([t]) for t in ids})


def measure_invariance(prompt: str, new_tokens: int, k: int, precisions: list[str], on_progress: Progress) -> InvarianceReport:
    """The prompt's float32 greedy tokens scored by 1-token and by (k+1)-token passes in each precision, as one long
    job (a few seconds of passes in one turn: the decode and the scoring share their caches)."""
    validate_prompt(prompt)
    models = lab_models(precisions)
    prompt_ids = encode_prompt(models["float32"].tokenizer, prompt, True)
    with access.long_job(models["float32"], "the batch-invariance check", "its passes") as turn, turn():
        return batch_invariance(models, prompt_ids, int(new_tokens), int(k), on_progress=on_progress)
