"""What the Numerics lab page uses from below the UI: the comparison (specviz.experiments.numerics), model loading through
the shared caches, and the device and dtype the engine would pick. The page only draws."""

from __future__ import annotations

from specviz.config import EMBEDDED_TARGET, validate_prompt
from specviz.experiments.numerics import NumericsReport, compare, low_precision_dtypes
from specviz.models import LoadedModel, encode_prompt, resolve_device, resolve_dtype
from specviz.ui import models as ui_models

__all__ = [
    "EMBEDDED_TARGET", "NumericsReport", "compare", "encode_prompt", "get_model", "low_precision_dtypes", "resolve_device",
    "resolve_dtype", "validate_prompt",
]  # fmt: skip


def get_model(source: str, device: str = "auto", dtype: str = "auto") -> LoadedModel:
    """A model from the shared caches (specviz.ui.models.get_model)."""
    return ui_models.get_model(source, device, dtype)
