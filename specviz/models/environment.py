"""Where a run happened, for recordings: model, vocabulary, dtype, device and its name, library versions."""

from __future__ import annotations

import platform

import torch
import transformers

from specviz.models.loading import LoadedModel


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return "Apple GPU (MPS)"
    cpu = platform.processor() or platform.machine() or "CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    except OSError:
        pass
    threads = torch.get_num_threads()
    return f"{cpu}, {threads} torch thread{'s' if threads != 1 else ''}"


def environment(target: LoadedModel) -> dict:
    """The environment part of a recording (specviz.recording.schema.Environment fields, less the date)."""
    from specviz import __version__

    return {
        "model": target.name,
        "vocab_size": int(target.vocab_size),
        "dtype": target.precision,
        "device": str(target.device),
        "device_name": device_name(target.device),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "specviz": __version__,
        "python": platform.python_version(),
    }
