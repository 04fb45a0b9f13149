"""The cost profile of one machine: what a target pass over n new tokens costs next to a 1-token pass,
and what each offline drafter costs per drafted token, measured on the model you run.

Why it matters. Leviathan's formula charges a round k*c + c_verify(k) one-token passes. On a GPU a small
batch of tokens is limited by reading the weights, so c_verify(k) stays near 1; on a CPU the arithmetic
grows with the tokens, so it climbs with k and eats the gain. The theory page and
``python -m specviz profile`` use the measured curve instead of one constant.

How. ``torch.utils.benchmark.Timer`` runs every measurement (it warms up, pins the thread count and,
with the default clock, synchronises a CUDA device). Passes start from a cache of ``context_length``
tokens, and every size is timed once per repeat in an order that rotates between repeats, so drift on a
busy machine hits all sizes alike; the profile keeps medians. ``clock="cpu"`` times process CPU time
instead of wall clock (steadier on a shared CPU with one thread; meaningless on a GPU).

Batched passes (``batch_sizes``): the same passes over B rows at once, each row its own context of the same
length (a different stretch of the prompts) in one ``HFBatchedLM`` forward, kept as ``batch_pass_ms`` (B -> ms
for t = 1.. new tokens per row). They are timed in the same rotation as everything else, so the batch-1 story
and the batch-B story come from one machine state. Where spare arithmetic runs out shows here: at batch 1 a
pass over t tokens costs little more than one token; at batch B the B*t tokens of one pass fill the cores.

Medusa heads are timed as one proposal from the hidden state of the context (the K heads and one LM-head read over
the K rows; no target pass), divided by the tokens it drafts, min(k, K): the heads' c next to a 1-token pass. An EAGLE
head as one proposal of k tokens (k layer steps and LM-head reads), token recycling as k table lookups. Medusa and
EAGLE are timed again over a draft vocabulary ("medusa@8192": the LM head cut to the 8,192 tokens the heads' counts
rank first), which is the lesson of the theory page's drafting-cost chart. A target with no heads (or no token counts)
for them is skipped with a warning. Every drafter is set up by a decoder's prefill of the context, as in a run.

The measurement imports torch and specviz.models (transformers); the CostProfile record and its JSON
loader do not: they live in specviz.core.profile, so pages read shipped profiles cheaply and k: auto
(specviz.runs.auto_costs) prices a run's rounds with one.

Here: the shipped profiles, the CLI's tables, and measure_profile, which
sets the measurement up and keeps the medians; what it times (the context, the runners, the rotation) is
specviz.experiments.profile_runners.
"""

from __future__ import annotations

import logging
import os
import platform
import statistics
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from specviz.core.limits import MAX_DRAFT_TOKENS
from specviz.core.profile import CostProfile, load_profile
from specviz.core.protocols import Turn, no_turn
from specviz.drafters.specs import ONE_MODEL_KINDS
from specviz.experiments.profile_runners import (
    BATCH_ROW_OFFSET,
    Clock,
    ProgressFn,
    batch_runners,
    context_ids,
    draft_runners,
    pass_runners,
    time_rotating,
)

if TYPE_CHECKING:
    from specviz.models import LoadedModel

log = logging.getLogger(__name__)

PROFILE_DRAFTERS: tuple[str, ...] = ONE_MODEL_KINDS  # the drafters that need no second model
DEFAULT_DRAFT_VOCABS = (8192,)  # Medusa and EAGLE are timed again over a draft vocabulary of this many tokens
ASSETS = Path(__file__).resolve().parents[2] / "assets"
MAX_BATCH = 64  # the largest batch a profile measures


def shipped_profiles(folder: Path = ASSETS) -> dict[str, CostProfile]:
    """The profiles in assets/ (profile_*.json), by file stem; unreadable ones are logged and skipped."""
    out: dict[str, CostProfile] = {}
    for path in sorted(folder.glob("profile_*.json")):
        try:
            out[path.stem] = load_profile(path)
        except ValueError as exc:
            log.warning("skipping %s: %s", path, exc)
    return out


# --- measurement --------------------------------------------------------------------------------


def device_name(device) -> str:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return "Apple GPU (MPS)"
    name = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import os

    cores = os.cpu_count() or 0
    return f"{name or platform.processor() or platform.machine()} ({cores} cores)"


def _check_profile_args(target: LoadedModel, max_tokens: int, context_length: int, repeats: int, number: int, clock: str,
                        drafters: Sequence[str], batch_sizes: Sequence[int] = ()) -> None:
    if any(not (1 <= b <= MAX_BATCH) for b in batch_sizes):
        raise ValueError(f"batch sizes must be between 1 and {MAX_BATCH}; got {', '.join(map(str, batch_sizes))}.")
    if not (2 <= max_tokens <= 64):
        raise ValueError(f"max_tokens must be between 2 and 64; got {max_tokens}.")
    if not (1 <= context_length <= 8192):
        raise ValueError(f"context_length must be between 1 and 8192; got {context_length}.")
    if repeats < 1 or number < 1:
        raise ValueError("repeats and number must be at least 1.")
    if clock not in ("wall", "cpu"):
        raise ValueError(f"clock must be 'wall' or 'cpu'; got {clock!r}.")
    if clock == "cpu" and target.device.type != "cpu":
        raise ValueError("clock='cpu' times the host process; on a GPU use clock='wall' (synchronised).")
    for d in drafters:
        if d not in PROFILE_DRAFTERS:
            raise ValueError(f"Unknown drafter {d!r} for a profile; choose from {', '.join(PROFILE_DRAFTERS)}.")


def measure_profile(
    target: LoadedModel,
    *,
    max_tokens: int = MAX_DRAFT_TOKENS + 1,
    context_length: int = 256,
    repeats: int = 5,
    number: int = 2,
    threads: int | None = None,
    clock: Clock = "wall",
    drafters: Sequence[str] = PROFILE_DRAFTERS,
    draft_k: int = 4,
    on_progress: ProgressFn | None = None,
    label: str = "",
    turn: Turn = no_turn,
    batch_sizes: Sequence[int] = (),
    heads_folder: str | None = None,
    draft_vocabs: Sequence[int] = DEFAULT_DRAFT_VOCABS,
    eagle_folder: str | None = None,
) -> CostProfile:
    """Time target passes over 1..max_tokens new tokens after context_length cached tokens, each drafter's
    proposals (draft_k tokens at a time) at that context, and for each of batch_sizes the same passes over B
    rows at once. Each measurement is the mean of ``number`` calls after torch's own warm-up; the profile keeps
    the median over ``repeats``. turn: the model is held one turn for the setup and one per measurement.
    heads_folder, eagle_folder: the Medusa heads and EAGLE head to time (None: the ones shipped for the embedded
    target); draft_vocabs: each drafter that reads the LM head is timed again over these draft vocabularies
    ("medusa@8192")."""
    import torch

    _check_profile_args(target, max_tokens, context_length, repeats, number, clock, drafters, batch_sizes)
    context_length = fit_context(target, context_length, max_tokens, draft_k)
    threads = threads or torch.get_num_threads()
    load_before = load_average()
    batch_sizes = sorted(set(batch_sizes))
    ids = context_ids(target, context_length, BATCH_ROW_OFFSET * max(batch_sizes, default=0) + max_tokens)
    context, new = ids[:context_length], ids[context_length : context_length + max_tokens]
    runners = pass_runners(target, context, new, turn) | batch_runners(target, ids, context_length, max_tokens, batch_sizes, turn)
    drafts, drafted_per_call = draft_runners(target, context, drafters, draft_k, turn, heads_folder, draft_vocabs, eagle_folder)
    samples = time_rotating(runners | drafts, repeats, number, threads, clock, turn, on_progress)
    pass_ms, batch_ms, draft_ms = medians(samples, max_tokens, batch_sizes, drafted_per_call)
    return CostProfile(
        target=target.name, device=str(target.device), device_name=device_name(target.device),
        dtype=target.precision, torch_version=torch.__version__, threads=threads, clock=clock,
        context_length=context_length, repeats=repeats, pass_ms=pass_ms, draft_ms_per_token=draft_ms,
        created=datetime.now(UTC).isoformat(timespec="seconds"), label=label,
        load_average=f"before {load_before}, after {load_average()}", batch_pass_ms=batch_ms,
    )


def fit_context(target: LoadedModel, context_length: int, max_tokens: int, draft_k: int) -> int:
    """context_length, shortened so the context, the longest pass and a drafter's proposal fit the model's positions."""
    max_positions = int(getattr(target.model.config, "max_position_embeddings", None) or 1_000_000)
    context_length = min(context_length, max_positions - max_tokens - draft_k - 1)
    if context_length < 1:
        raise ValueError(f"This model's context ({max_positions}) is too short to profile {max_tokens} tokens.")
    return context_length


def medians(
    samples: dict[str, list[float]], max_tokens: int, batch_sizes: Sequence[int], drafted_per_call: dict[str, int]
) -> tuple[tuple[float, ...], dict[str, tuple[float, ...]], dict[str, float]]:
    """The profile's numbers from the timed repeats: (pass_ms for n = 1..max_tokens, batch B -> ms for t = 1..max_tokens,
    drafter -> ms per drafted token), each the median over the repeats."""
    pass_ms = tuple(statistics.median(samples[f"pass {n}"]) for n in range(1, max_tokens + 1))
    batch_ms = {str(b): tuple(statistics.median(samples[f"batch {b} pass {t}"]) for t in range(1, max_tokens + 1)) for b in batch_sizes}
    draft_ms = {kind: statistics.median(samples[kind]) / drafted_per_call[kind] for kind in drafted_per_call}
    return pass_ms, batch_ms, draft_ms


def load_average() -> str:
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:  # not every platform has one
        return "unknown"


def profile_table(profile: CostProfile) -> list[tuple[int, float, float]]:
    """(k, ms of the (k+1)-token pass, c_verify(k)) for k = 0..k_max: what the CLI prints."""
    return [(k, profile.pass_ms[k], v) for k, v in enumerate(profile.curve.costs)]


def batch_profile_table(profile: CostProfile) -> list[tuple[int, int, float, float]]:
    """(B, t, ms of one pass over B rows adding t tokens each, ms per row-token) for every measured B and t."""
    return [(b, t, ms, ms / (b * t)) for b in profile.batch_sizes for t, ms in enumerate(profile.batch_pass(b), start=1)]
