"""The sidebar's model-pair presets, shared with share links (specviz.ui.room.share), which may name one."""

from __future__ import annotations

from specviz.config import EMBEDDED_TARGET

CUSTOM = "custom (type the ids below)"
# label -> (target, draft). The hub presets need a cached download or 'allow downloads'.
MODEL_PAIRS: dict[str, tuple[str, str]] = {
    "embedded SmolLM2-135M-Instruct (offline)": (EMBEDDED_TARGET, ""),
    "SmolLM2-360M-Instruct ← 135M draft (hub)": ("HuggingFaceTB/SmolLM2-360M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"),
    "SmolLM2-1.7B-Instruct ← 135M draft (hub)": ("HuggingFaceTB/SmolLM2-1.7B-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"),
    "Qwen2.5-1.5B-Instruct ← 0.5B draft (hub)": ("Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"),
}
