"""The only place that imports transformers: loading (hub id, local folder, GGUF), precisions and the KV-cache adapter."""

from specviz.models.adapter import HFBatchedLM, HFCachedLM, early_exit_view
from specviz.models.environment import environment
from specviz.models.loading import (
    EMBEDDED_TARGET,
    LoadedModel,
    ModelLoadError,
    check_same_tokenizer,
    encode_prompt,
    load_model,
    resolve_device,
    resolve_dtype,
    resolve_dtype_name,
)
from specviz.models.precision import FP16_WEIGHTS, INT8_DYNAMIC, fp16_weights_problem
from specviz.models.precision import LABELS as PRECISION_LABELS
from specviz.models.tokens import token_bytes

__all__ = [
    "EMBEDDED_TARGET",
    "HFBatchedLM",
    "HFCachedLM",
    "LoadedModel",
    "ModelLoadError",
    "check_same_tokenizer",
    "early_exit_view",
    "environment",
    "encode_prompt",
    "load_model",
    "resolve_device",
    "resolve_dtype",
    "resolve_dtype_name",
    "FP16_WEIGHTS",
    "PRECISION_LABELS",
    "INT8_DYNAMIC",
    "fp16_weights_problem",
    "token_bytes",
]
