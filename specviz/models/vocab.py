"""A draft vocabulary: the V' tokens the target itself says most often, and its LM head cut to their rows.

Why. A drafter that reads the target's LM head (Medusa heads, the EAGLE layer) pays one (rows, H) x (H, V) product per
drafting step; on SmolLM2-135M that head is 49,152 x 576, about a fifth of the target's weights, and on a CPU it was
most of a Medusa round's drafting (docs/benchmarks.md). FR-Spec (Zhao et al., 2025) and EAGLE-3's ``d2t`` map score
only the most frequent tokens: the few thousand the target really emits cover nearly all of its text.

Exactness. Only the proposal changes. The drafter scores the V' rows, warps them into a distribution over V', draws
from it (or takes its top tokens for a tree) and reports q_draft over the *full* vocabulary, zero outside V'
(specviz.core.sampling.to_full_vocab). That is the distribution the token was drawn from, so the rule stays exact;
a token outside V' is simply never proposed (the target still emits it, through the residual or a bonus).

On disk. ``token_counts.safetensors`` in the heads folder: ``counts`` (V,) int64, how often the target emitted each
token in the heads' training data (counted by ``python -m specviz train-heads --count-vocab``), with the data's
facts as metadata. V' is a run setting (RunConfig.draft_vocab); the ids are the V' most counted (ties: lower id).
Plain torch and safetensors; nothing here knows transformers.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from specviz.models.precision import PackedFP16Linear

COUNTS_FILE = "token_counts.safetensors"
REPORTED_SIZES = (4096, 8192, 16384)  # the V' a model card reports coverage for


class VocabError(ValueError):
    """A draft vocabulary that cannot be used: a clear sentence for the page and the CLI."""


def save_token_counts(folder: Path, counts: torch.Tensor, facts: dict[str, str] | None = None) -> Path:
    """Write (V,) counts as the folder's token_counts.safetensors; returns the path."""
    path = Path(folder) / COUNTS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({"counts": counts.detach().to(torch.int64).cpu().contiguous()}, str(path), metadata={k: str(v) for k, v in (facts or {}).items()})
    return path


def read_token_counts(folder: Path, vocab_size: int) -> torch.Tensor:
    """(vocab_size,) int64 counts from a heads folder; VocabError saying what to run when absent or not for this vocabulary."""
    path = Path(folder) / COUNTS_FILE
    if not path.is_file():
        raise VocabError(
            f"{folder} has no {COUNTS_FILE}, so it has no draft vocabulary: count one with "
            f"`python -m specviz train-heads --count-vocab --out {folder}`, or draft over the full vocabulary (draft vocabulary 0)."
        )
    try:
        with safe_open(str(path), framework="pt") as fh:
            counts = fh.get_tensor("counts")
    except Exception as exc:  # safetensors raises its own error types for a corrupt file
        raise VocabError(f"{path} is not a readable token-counts file ({type(exc).__name__}).") from exc
    if counts.dim() != 1 or counts.shape[0] < vocab_size or counts.is_floating_point() or bool((counts < 0).any()):
        raise VocabError(f"{path} holds {tuple(counts.shape)} counts; this target's vocabulary has {vocab_size} tokens.")
    return counts[:vocab_size].to(torch.int64)


def draft_vocab_ids(counts: torch.Tensor, size: int) -> torch.Tensor:
    """(V',) the ``size`` most counted token ids (ties: the lower id first), in increasing id order."""
    vocab = counts.shape[0]
    if not (1 <= size <= vocab):
        raise VocabError(f"A draft vocabulary has 1 to {vocab} tokens; got {size}.")
    by_count = torch.sort(-counts.to(torch.int64), stable=True).indices  # descending counts, ties by lower id
    return torch.sort(by_count[:size]).values


def coverage(counts: torch.Tensor, ids: torch.Tensor) -> float:
    """The share of the counted tokens that fall inside the vocabulary ``ids``."""
    total = int(counts.sum())
    return float(counts[ids].sum()) / total if total else 0.0


def lm_head_rows(lm_head: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(V, H) float32 weight and (V,) bias or None of a target's LM head: a Linear, or a float16-packed one (unpacked)."""
    if isinstance(lm_head, PackedFP16Linear):
        weight, bias = torch.ops.quantized.linear_unpack_fp16(lm_head._packed)
        return weight.float(), None if bias is None else bias.float()
    weight = getattr(lm_head, "weight", None)  # an nn.Linear, or an nn.Embedding whose rows the head is tied to
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise VocabError(f"The target's LM head ({type(lm_head).__name__}) has no weight matrix to cut to a draft vocabulary.")
    bias = getattr(lm_head, "bias", None)
    return weight.detach().float(), None if bias is None else bias.detach().float()


class ReducedHead(nn.Module):
    """The target's LM head restricted to a draft vocabulary: (..., H) -> (..., V') float32 logits, column j scoring
    token ``ids[j]``. Built once per (target, heads, V') and shared read-only; packed as float16 for fbgemm when the
    target's head is (the same arithmetic as the target's), else kept in the head's dtype."""

    def __init__(self, lm_head: nn.Module, ids: torch.Tensor, rows: nn.Module | None = None) -> None:
        """rows: where to read the (V, H) rows when not from lm_head itself (a head tied to the input embedding)."""
        super().__init__()
        weight, bias = lm_head_rows(lm_head if rows is None else rows)
        index = ids.to(weight.device, torch.long)
        rows, rows_bias = weight.index_select(0, index), None if bias is None else bias.index_select(0, index)
        self.register_buffer("ids", index.clone(), persistent=False)  # (V',) draft index -> target token id
        self.packed = PackedFP16Linear(rows, rows_bias) if isinstance(lm_head, PackedFP16Linear) else None
        dtype = getattr(getattr(lm_head, "weight", None), "dtype", torch.float32)
        keep = self.packed is None  # a packed head keeps only its packed copy
        self.register_buffer("weight", rows.to(dtype).contiguous() if keep else None, persistent=False)  # (V', H)
        self.register_buffer("bias", rows_bias if keep else None, persistent=False)

    @property
    def size(self) -> int:
        return int(self.ids.shape[0])

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        if self.packed is not None:
            return self.packed(states.float())
        return nn.functional.linear(states.to(self.weight.dtype), self.weight, self.bias).float()
