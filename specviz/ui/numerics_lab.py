"""What the Numerics lab page uses from below the UI: the comparison (specviz.numerics), model loading through
the shared caches, and the device and dtype the engine would pick. The page only draws."""

from __future__ import annotations

from specviz.config import EMBEDDED_TARGET, validate_prompt
from specviz.models import encode_prompt, resolve_device, resolve_dtype
from specviz.numerics import NumericsReport, compare, low_precision_dtypes
from specviz.ui.models import get_model

__all__ = [
    "EMBEDDED_TARGET", "NumericsReport", "compare", "encode_prompt", "get_model", "low_precision_dtypes", "resolve_device",
    "resolve_dtype", "validate_prompt",
]  # fmt: skip
