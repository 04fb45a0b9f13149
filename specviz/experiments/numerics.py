"""The numerics lab: greedy decoding in float32 and in a low-precision dtype, plain and speculative.

Speculative greedy decoding is token-identical to plain greedy decoding *as arithmetic*: the verify pass
keeps a draft exactly when it is the target's argmax. But the verify pass scores k+1 tokens in one
forward while plain decoding scores one at a time, and the two do their sums in different orders. In
float32 the difference is around 1e-5 of a logit, far below the gap between the top two logits almost
everywhere, so the argmax never moves and the outputs match. In bfloat16 (8 bits of mantissa) the same
reordering moves logits by tenths (up to about one logit on the embedded model), and wherever the top two are closer than that the
argmax can flip: speculative and plain greedy decoding part there, and neither is wrong.

This module measures that on a real model: the traces, where they part, the top-2 margin there, and the
logits of the same positions computed by 1-token passes and by (k+1)-token passes. On a shared server every model
pass takes its own model turn (a ``Turn`` handed in): a decode one turn per round, a scoring sweep one per pass, so
another session's round waits for one pass of the lab, never for a whole measurement.

A verify pass must score each position as a 1-token pass would: only then is p_target in the rule the target's
own distribution whatever was drafted. float32 and fp16-weights (float16 weights, float32 math) keep that up to
rounding; bfloat16 rounds differently per pass shape (near-ties flip); per-tensor int8 dynamic quantization picks
one activation scale for the whole pass, so a position's logits depend on its neighbours and the guarantee is gone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd
import torch

from specviz.config import RunConfig
from specviz.core.divergence import first_difference
from specviz.core.limits import MAX_DRAFT_TOKENS
from specviz.core.protocols import CachedLM, Turn, no_turn

if TYPE_CHECKING:
    from specviz.models import LoadedModel

MAX_NEW_TOKENS = 256
LAB_PRECISIONS = ("float32", "fp16-weights", "bfloat16", "float16", "int8-dynamic")  # what the lab may load, whatever the policy


@dataclass(frozen=True)
class GreedyTrace:
    """One greedy run: its tokens and, per token, the top-1 minus top-2 logit of the row that chose it."""

    name: str  # e.g. "float32 · plain"
    dtype: str
    speculative: bool
    ids: tuple[int, ...]
    margins: tuple[float, ...]


@dataclass(frozen=True)
class Divergence:
    """Where two traces first choose different tokens (None when they agree on every token both produced)."""

    a: str
    b: str
    position: int | None  # 0-based index into the generated tokens
    token_a: int | None
    token_b: int | None
    margin_a: float | None  # the top-2 logit margin in trace a at that position
    margin_b: float | None
    compared: int  # tokens compared (the shorter trace's length)


@dataclass(frozen=True)
class NumericsReport:
    traces: tuple[GreedyTrace, ...]
    divergences: tuple[Divergence, ...]
    pass_diffs: pd.DataFrame  # one row per (dtype, position): 1-token vs (k+1)-token pass logits
    k: int


def greedy_trace(
    target: LoadedModel, prompt_ids: Sequence[int], max_new_tokens: int, speculative: bool, k: int = 4, drafter: str = "ngram",
    turn: Turn = no_turn,
) -> GreedyTrace:
    """Greedy decoding with the engine: plain (one token per pass) or speculative (the given drafter, k drafts).
    turn: one model turn per round (the first one also holds the prefill)."""
    from specviz.experiments.timed_runs import run_in_turns
    from specviz.runs import RunModels, build_decoder

    config = RunConfig(
        target=target.name, drafter=drafter if speculative else "none", num_draft_tokens=k, temperature=0.0,
        max_new_tokens=max_new_tokens, ngram_threshold=0.0 if drafter == "ngram" else RunConfig.ngram_threshold, auto_k=False,
    )
    make = lambda: build_decoder(config, RunModels(target), list(prompt_ids), baseline=not speculative)  # noqa: E731
    decoder, _, _ = run_in_turns(make, turn, slice_s=0.0)  # slice 0: one round per turn
    margins = tuple(m for r in decoder.records for m in r.emitted_margin)
    dtype = target.precision
    return GreedyTrace(f"{dtype} · {'speculative' if speculative else 'plain'}", dtype, speculative, tuple(decoder.generated), margins)


def first_divergence(a: GreedyTrace, b: GreedyTrace) -> Divergence:
    n = min(len(a.ids), len(b.ids))
    i = first_difference(a.ids, b.ids, prefix_only=True)  # specviz.core.divergence: the one rule
    if i is not None:
        return Divergence(a.name, b.name, i, a.ids[i], b.ids[i], a.margins[i], b.margins[i], n)
    return Divergence(a.name, b.name, None, None, None, None, None, n)


def _pass(lm: CachedLM, ids: Sequence[int], turn: Turn, last_only: bool = False) -> torch.Tensor:
    """One model pass in its own model turn -> (len(ids), V) logits (or the last row only, for a prefill)."""
    with turn():
        return lm.extend(ids, last_only=last_only)


@torch.inference_mode()
def pass_differences(target: LoadedModel, prompt_ids: Sequence[int], generated: Sequence[int], k: int, turn: Turn = no_turn) -> pd.DataFrame:
    """For every generated position: the logits a 1-token pass gives (plain decoding) against those a (k+1)-token
    pass gives (a verify pass over the same tokens). Columns: dtype, position, max_abs_diff, margin (top-1 minus
    top-2 of the 1-token row), argmax_one, argmax_block, flipped. turn: one model turn per pass."""
    from specviz.models import HFCachedLM

    if not generated:
        raise ValueError("Nothing was generated to compare.")
    seq = list(prompt_ids) + list(generated)
    start = len(prompt_ids) - 1  # the row at index start predicts generated[0]
    one, block = HFCachedLM(target.model, target.vocab_size), HFCachedLM(target.model, target.vocab_size)
    if start:
        _pass(one, seq[:start], turn, last_only=True)  # the same prefill for both: only the passes after it differ
        _pass(block, seq[:start], turn, last_only=True)
    single = torch.cat([_pass(one, [tok], turn) for tok in seq[start : len(seq) - 1]])  # (n, V): 1-token passes
    rows = []
    for j in range(start, len(seq) - 1, k + 1):
        block.crop(j)
        rows.append(_pass(block, seq[j : min(j + k + 1, len(seq) - 1)], turn))  # (<= k+1, V): one verify-sized pass
    blocked = torch.cat(rows)  # (n, V)
    top2 = torch.topk(single, 2, dim=-1).values
    dtype = target.precision
    diff = (single - blocked).abs().amax(dim=-1)
    a1, ab = single.argmax(dim=-1), blocked.argmax(dim=-1)
    return pd.DataFrame(
        {
            "dtype": dtype,
            "position": range(len(generated)),
            "max_abs_diff": diff.tolist(),
            "margin": (top2[:, 0] - top2[:, 1]).tolist(),
            "argmax_one": a1.tolist(),
            "argmax_block": ab.tolist(),
            "flipped": (a1 != ab).tolist(),
        }
    )


@torch.inference_mode()
def batch_dependence(target: LoadedModel, context_ids: Sequence[int], following: Sequence[int], max_k: int = MAX_DRAFT_TOKENS) -> list[float]:
    """How far a position's logits move when it is scored inside a pass over k+1 tokens instead of alone, for
    k = 1..max_k: [max |logit(1-token pass) - logit(row of the (k+1)-token pass)| over the k+1 rows]. A precision
    fit to verify drafts keeps every entry at rounding level (float32, fp16-weights); per-tensor int8 does not."""
    from specviz.models import HFCachedLM

    if not context_ids or len(following) < max_k + 1:
        raise ValueError(f"Need a non-empty context and at least {max_k + 1} following tokens; got {len(following)}.")
    one = HFCachedLM(target.model, target.vocab_size)
    one.extend(context_ids)
    single = torch.cat([one.extend([tok]) for tok in following[: max_k + 1]])  # (max_k + 1, V): 1-token passes
    block = HFCachedLM(target.model, target.vocab_size)
    block.extend(context_ids)
    out = []
    for k in range(1, max_k + 1):
        rows = block.extend(following[: k + 1])  # (k + 1, V): one verify-sized pass
        block.crop(len(context_ids))
        out.append(float((rows - single[: k + 1]).abs().max()))
    return out


def compare(
    models: dict[str, LoadedModel], prompt_ids: Sequence[int], max_new_tokens: int = 32, k: int = 4, drafter: str = "ngram",
    on_progress=None, turn: Turn = no_turn,
) -> NumericsReport:
    """models: dtype name -> the same target loaded in that dtype, float32 first. Runs plain and speculative
    greedy decoding in each, finds where they part, and compares 1-token with (k+1)-token pass logits.
    turn: one model turn per model pass (a decode's round, a scoring pass), never one for a decode or a sweep."""
    if "float32" not in models:
        raise ValueError("The numerics lab compares against float32: load the target in float32 too.")
    if not (1 <= max_new_tokens <= MAX_NEW_TOKENS):
        raise ValueError(f"max new tokens must be between 1 and {MAX_NEW_TOKENS}; got {max_new_tokens}.")
    if not (1 <= k <= MAX_DRAFT_TOKENS):
        raise ValueError(f"k must be between 1 and {MAX_DRAFT_TOKENS}; got {k}.")
    if not prompt_ids:
        raise ValueError("The prompt is empty: type some text to continue.")
    steps = 3 * len(models)
    done = 0

    def tick(what: str) -> None:
        nonlocal done
        done += 1
        if on_progress:
            on_progress(done, steps, what)

    traces, diffs = [], []
    reference: GreedyTrace | None = None
    for dtype, target in models.items():
        plain = greedy_trace(target, prompt_ids, max_new_tokens, speculative=False, turn=turn)
        tick(f"{dtype}: plain greedy")
        spec = greedy_trace(target, prompt_ids, max_new_tokens, speculative=True, k=k, drafter=drafter, turn=turn)
        tick(f"{dtype}: speculative greedy")
        reference = reference or plain
        diffs.append(pass_differences(target, prompt_ids, reference.ids, k, turn))  # the same tokens for every dtype
        tick(f"{dtype}: 1-token vs {k + 1}-token passes")
        traces += [plain, spec]
    plains = [t for t in traces if not t.speculative]
    divergences = [first_divergence(traces[i], traces[i + 1]) for i in range(0, len(traces), 2)]
    divergences += [first_divergence(plains[0], other) for other in plains[1:]]
    return NumericsReport(tuple(traces), tuple(divergences), pd.concat(diffs, ignore_index=True), k)


def low_precision_dtypes(device: torch.device) -> list[str]:
    """bfloat16 everywhere (the CPU does it); on a CPU fp16-weights (where fbgemm runs) and the known-bad int8-dynamic;
    float16 where the device has fast float16 (CUDA, MPS)."""
    from specviz.models import fp16_weights_problem

    out = ["bfloat16"]
    if device.type == "cpu":
        out += (["fp16-weights"] if fp16_weights_problem(device) is None else []) + ["int8-dynamic"]
    return out + (["float16"] if device.type in ("cuda", "mps") else [])


def invariance_precisions(device: torch.device) -> list[str]:
    """The batch-invariance section's precisions, float32 first: the three a CPU can verify with or must not."""
    return ["float32"] + [p for p in ("fp16-weights", "bfloat16", "int8-dynamic", "float16") if p in low_precision_dtypes(device)]


@dataclass(frozen=True)
class InvarianceReport:
    """The same tokens (float32 plain greedy's) scored by 1-token and by (k+1)-token passes in each precision."""

    pass_diffs: pd.DataFrame  # pass_differences() rows for every precision, float32 first
    k: int
    tokens: tuple[int, ...]

    def largest(self) -> dict[str, float]:
        """precision -> the largest |Δ logit| over every position."""
        return {str(k): float(v) for k, v in self.pass_diffs.groupby("dtype", sort=False)["max_abs_diff"].max().items()}


def batch_invariance(
    models: dict[str, LoadedModel], prompt_ids: Sequence[int], max_new_tokens: int = 32, k: int = 8, on_progress=None,
    turn: Turn = no_turn,
) -> InvarianceReport:
    """models: precision -> the target loaded in it, float32 first. Decodes float32 plain greedy once, then scores
    those tokens in every precision by 1-token passes and by (k+1)-token passes (what a verify pass sees).
    turn: one model turn per model pass (each round of the decode, each scoring pass)."""
    if next(iter(models), None) != "float32":
        raise ValueError("The batch-invariance check starts from float32: pass the float32 model first.")
    if not (1 <= max_new_tokens <= MAX_NEW_TOKENS) or not (1 <= k <= MAX_DRAFT_TOKENS) or not prompt_ids:
        raise ValueError(f"Need a prompt, 1 to {MAX_NEW_TOKENS} new tokens and k between 1 and {MAX_DRAFT_TOKENS}.")
    reference = greedy_trace(models["float32"], prompt_ids, max_new_tokens, speculative=False, turn=turn)
    if on_progress:
        on_progress(1, len(models) + 1, "float32: plain greedy")
    frames = []
    for i, (precision, target) in enumerate(models.items()):
        frames.append(pass_differences(target, prompt_ids, reference.ids, k, turn))
        if on_progress:
            on_progress(i + 2, len(models) + 1, f"{precision}: 1-token vs {k + 1}-token passes")
    return InvarianceReport(pd.concat(frames, ignore_index=True), k, reference.ids)
