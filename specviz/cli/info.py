"""python -m specviz info: devices, default models and whether they load."""

from __future__ import annotations

import argparse
import time

from specviz.cli.options import add_run_options
from specviz.cli.terminal import emit
from specviz.config import EMBEDDED_TARGET, RunConfig


def add_parser(sub) -> None:
    """Register `info` on the CLI's subparsers."""
    info = sub.add_parser("info", help="devices, default models and whether they load")
    add_run_options(info, only=("device",))


def _auto_precision(device: str) -> str:
    """What --dtype auto resolves to on this device, and why not fp16-weights on a CPU that cannot run it."""
    from specviz.models import fp16_weights_problem, resolve_device, resolve_dtype_name

    dev = resolve_device(device)
    problem = fp16_weights_problem(dev) if dev.type == "cpu" else None
    return resolve_dtype_name("auto", dev) + (f" (not fp16-weights: {problem})" if problem else "")


def run(args: argparse.Namespace) -> int:
    import torch

    from specviz.models import load_model, resolve_device
    from specviz.models.loading import cache_root, embedded_gguf_path

    emit(f"torch {torch.__version__}; cuda available: {torch.cuda.is_available()}", flush=True)
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            emit(f"  cuda:{i} {torch.cuda.get_device_name(i)}")
    emit(f"auto device: {resolve_device('auto')}")
    emit(f"auto dtype: {_auto_precision(args.device)}")
    emit(f"default target: {EMBEDDED_TARGET}; default drafter: {RunConfig.drafter}")
    emit(f"weights cache: {cache_root()}")
    try:
        emit(f"embedded GGUF: {embedded_gguf_path()}")
        start = time.perf_counter()
        m = load_model(EMBEDDED_TARGET, args.device)
        emit(f"loads: yes ({time.perf_counter() - start:.1f}s, {m.num_layers} layers, vocab {m.vocab_size}, {m.device}, {m.precision})")
    except ValueError as exc:
        emit(f"loads: no — {exc}")
        return 1
    return 0
