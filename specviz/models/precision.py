"""Precisions a target (or draft) runs in, and the one conversion that is not a plain dtype: float16 weights.

``fp16-weights`` ("float16 weights, float32 math"): every ``nn.Linear`` becomes a module that calls fbgemm's
float16-packed GEMM (``torch.ops.quantized.linear_prepack_fp16`` / ``linear_dynamic_fp16``) directly; embeddings,
norms, attention and softmax stay float32. On an x86-64 CPU this halves the bytes a pass reads, and fbgemm's kernel
reads the weights once per pass instead of once per row (MKL's small-M sgemm), so a pass over k+1 positions costs
little more than one. The arithmetic is float32 with an input-independent weight rounding, so a position's logits
do not depend on the other positions in the pass (tests/test_batch_invariance.py): greedy identity holds.

``int8-dynamic`` (per-tensor activation scales) exists only as the numerics lab's known-bad example: one scale per
activation tensor makes a position's logits depend on its neighbours, so it must never verify drafts.

The conversion runs once, at load, on a freshly loaded model nobody shares yet; nothing here touches a cached model.
"""

from __future__ import annotations

import logging
import platform
import warnings

import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

log = logging.getLogger(__name__)

FP16_WEIGHTS = "fp16-weights"
INT8_DYNAMIC = "int8-dynamic"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
PRECISIONS = ("float32", FP16_WEIGHTS, "bfloat16", "float16", INT8_DYNAMIC)
LABELS = {
    "float32": "float32",
    FP16_WEIGHTS: "float16 weights, float32 math",
    "bfloat16": "bfloat16",
    "float16": "float16",
    INT8_DYNAMIC: "int8 dynamic (per-tensor scales)",
}
FBGEMM_ENGINES = ("fbgemm", "x86")  # "x86" is fbgemm's dispatcher on x86-64 (torch >= 2.0 default there)


def fp16_weights_problem(device: torch.device) -> str | None:
    """Why fp16-weights cannot run here (a sentence for the log), or None when it can."""
    if device.type != "cpu":
        return f"float16-packed linears are an fbgemm CPU kernel; the model runs on {device.type}"
    ops = getattr(torch.ops, "quantized", None)
    if ops is None or not hasattr(ops, "linear_prepack_fp16") or not hasattr(ops, "linear_dynamic_fp16"):
        return f"this torch ({torch.__version__}) has no torch.ops.quantized.linear_prepack_fp16 / linear_dynamic_fp16"
    engine = torch.backends.quantized.engine
    if engine not in FBGEMM_ENGINES:
        return f"the quantized engine is {engine!r} on {platform.machine() or 'this CPU'}, not fbgemm (x86-64)"
    try:  # the op can exist yet be unbuilt for this engine
        packed = ops.linear_prepack_fp16(torch.ones(2, 2), None)
        ops.linear_dynamic_fp16(torch.ones(1, 2), packed)
    except (RuntimeError, NotImplementedError) as exc:
        return f"fbgemm's float16 linear does not run here ({type(exc).__name__}: {exc})"
    return None


def resolve_precision(name: str, device: torch.device) -> str:
    """'auto': fp16-weights on a CPU with fbgemm, else float32 on a CPU/MPS and bfloat16 on CUDA. An explicit
    fp16-weights where it cannot run falls back to float32 (logged). Raises ValueError for an unknown name."""
    if name not in ("auto", *PRECISIONS):
        raise ValueError(f"Unknown dtype {name!r}; use auto, {', '.join(PRECISIONS[:-1])}.")
    if name == "auto":
        if device.type == "cuda":
            return "bfloat16"
        if device.type != "cpu":
            return "float32"
        name = FP16_WEIGHTS
    if name == FP16_WEIGHTS:
        problem = fp16_weights_problem(device)
        if problem is not None:
            log.warning("fp16-weights is not available, using float32: %s", problem)
            return "float32"
    return name


def activation_dtype(precision: str) -> torch.dtype:
    """The dtype the model is loaded in (its activations): float32 for the CPU conversions."""
    return DTYPES.get(precision, torch.float32)


class PackedFP16Linear(nn.Module):
    """y = x W^T + b with W packed once as float16 for fbgemm; the GEMM accumulates in float32.
    (..., in_features) float32 -> (..., out_features) float32. Holds no parameters: the packed weight is opaque."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        """weight: (out_features, in_features) as nn.Linear holds it; bias: (out_features,) or None."""
        super().__init__()
        self.out_features, self.in_features = weight.shape
        bias = None if bias is None else bias.detach().float().clone()
        # a copy: prepack clamps its input to the float16 range in place, and a tied head's weight is the embedding
        self._packed = torch.ops.quantized.linear_prepack_fp16(weight.detach().to(torch.float32, copy=True).contiguous(), bias)

    @classmethod
    def from_module(cls, module: nn.Module) -> PackedFP16Linear:
        """From an nn.Linear, or a transformers Conv1D (GPT-2's linears, weight stored (in, out))."""
        if isinstance(module, Conv1D):
            return cls(module.weight.t(), module.bias)
        return cls(module.weight, module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic_fp16(x.float(), self._packed)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, weights=float16 (fbgemm)"


def pack_fp16_linears(model: nn.Module) -> int:
    """Replace every nn.Linear (and GPT-2 Conv1D) of a freshly loaded model (shared by no one yet) by a
    PackedFP16Linear; returns how many. A head tied to the embedding gets its own packed copy; the embedding stays float32 and untouched."""
    names = [name for name, module in model.named_modules() if type(module) in (nn.Linear, Conv1D)]
    with torch.no_grad():
        for name in names:
            model.set_submodule(name, PackedFP16Linear.from_module(model.get_submodule(name)))
    return len(names)


def own_storage(model: nn.Module) -> None:
    """Copy the tensors left after packing (embeddings, norms) out of the weights file transformers memory-maps, so
    the mapping closes and the pages packing read stop counting as this process's memory (a fresh model only)."""
    with torch.no_grad():
        for tensor in list(model.parameters()) + list(model.buffers()):
            tensor.data = tensor.data.clone()


def quantize_int8_dynamic(model: nn.Module) -> nn.Module:
    """The lab's known-bad precision: int8 weights, one activation scale per tensor (torch.ao's dynamic quantization,
    in place on a freshly loaded model). Its deprecation warning is ours to silence, here only."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*torch.ao.quantization.*")
        warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*")
        from torch.ao.quantization import quantize_dynamic

        return quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8, inplace=True)


def convert(model: nn.Module, precision: str) -> nn.Module:
    """Apply a precision's module conversion (none for plain dtypes) once, at load."""
    if precision == FP16_WEIGHTS:
        count = pack_fp16_linears(model)
        own_storage(model)
        log.info("packed %d linear layers as float16 weights (fbgemm)", count)
    elif precision == INT8_DYNAMIC:
        model = quantize_int8_dynamic(model)
    return model
