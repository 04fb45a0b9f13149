"""Models load once per (source, device, resolved precision) and are shared by every browser session (read-only), in a
process registry (specviz.workshop.resources) that no client's message can clear.

The cache only ever holds models the owner allowed (specviz.workshop.policy): a source off the list, or an opt-in the owner
did not grant, is refused before anything is loaded. A model that would not fit in free memory is refused with a
message, and a load that runs out of memory is reported the same way; either way the models in use stay loaded."""

from __future__ import annotations

import functools
import gc
import logging
from collections.abc import Iterable
from pathlib import Path

import streamlit as st
import torch
from streamlit.logger import get_logger

from specviz.config import RunConfig
from specviz.models import (
    LoadedModel,
    ModelLoadError,
    early_exit_view,
    load_model,
    resolve_device,
    resolve_dtype_name,
    token_bytes,
)
from specviz.models.eagle import EagleHead
from specviz.models.medusa import MedusaHeads
from specviz.runs import RunModels, load_target_eagle, load_target_heads, resolve_models
from specviz.ui.common.access import current_policy
from specviz.viz.markdown import md_text
from specviz.viz.tokens import TokenTable
from specviz.workshop.queues import server_threads
from specviz.workshop.resources import cached

log = logging.getLogger(__name__)
get_logger(load_model.__module__)  # streamlit's handler: the server log says whether a GGUF was de-quantised or read from its float cache
GGUF_EXPANSION = 8  # a 4-bit GGUF de-quantised to float32 takes about 8x its file size
FIT_MARGIN = 0.9  # refuse a load that would take more than this share of the free memory


def free_memory_bytes(device: str) -> int | None:
    """Bytes free where the model would go (None: unknown)."""
    try:
        if device in ("cuda", "auto") and torch.cuda.is_available():
            return int(torch.cuda.mem_get_info()[0])
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # an unknown amount is not a reason to refuse
        return None


def estimated_bytes(source: str) -> int | None:
    """A rough size of a local model once loaded (weights on disk; GGUF de-quantised), None for hub ids."""
    from specviz.models.loading import EMBEDDED_TARGET, embedded_gguf_path

    try:
        path = embedded_gguf_path() if source == EMBEDDED_TARGET else Path(source).expanduser()
        if path.is_file():
            return path.stat().st_size * (GGUF_EXPANSION if path.suffix == ".gguf" else 1)
        if path.is_dir():
            return sum(f.stat().st_size for f in path.iterdir() if f.suffix in (".safetensors", ".bin", ".pt", ".pth"))
    except (OSError, ModelLoadError):
        return None
    return None


def check_fits(source: str, device: str) -> None:
    """Refuse a load that would not fit, before anything is allocated (the models in use stay as they are)."""
    need, free = estimated_bytes(source), free_memory_bytes(device)
    if need and free is not None and need > FIT_MARGIN * free:
        raise ModelLoadError(
            f"{source} needs about {need / 2**30:.1f} GiB but only {free / 2**30:.1f} GiB is free on this machine; the models "
            "already loaded are untouched. Pick a smaller model or close other programs."
        )


@functools.cache
def configure_threads() -> int:
    """Once per server process, before its first model loads: torch's threads (specviz.workshop.queues.server_threads)."""
    threads = server_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    log.info("torch uses %d intra-op threads in this server", torch.get_num_threads())
    return torch.get_num_threads()


@cached(max_entries=4)  # a process registry, not st.cache_resource: no client message can clear it
def _cached_model(source: str, device: str, dtype: str, trust_remote_code: bool, allow_download: bool, allow_pickle: bool) -> LoadedModel:
    configure_threads()
    check_fits(source, device)
    model = load_model(source, device, dtype, trust_remote_code=trust_remote_code, allow_download=allow_download, allow_pickle=allow_pickle)
    freeze_long_lived()
    return model


def freeze_long_lived() -> None:
    """Move every object alive now (the libraries' modules, the models just loaded) out of the garbage collector's
    sight, so its full collections walk only what sessions made since (records, caches, figures): with torch,
    transformers and plotly imported a full walk takes about 0.25 s, holding the GIL. Frozen objects are still freed
    by reference counting; a model evicted from the cache that sits in a reference cycle is collected at the next
    load, which unfreezes and collects first."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def get_model(
    source: str,
    device: str = "auto",
    dtype: str = "auto",
    *,
    trust_remote_code: bool = False,
    allow_download: bool = False,
    allow_pickle: bool = False,
    page_precisions: tuple[str, ...] = (),
) -> LoadedModel:
    """Load (or fetch from the cache) with a visible status. Raises ModelLoadError (a ValueError) with a message to show.

    page_precisions: precisions the page itself compares (the numerics lab's fixed menu, not a participant's free
    choice); they load as asked even where the owner hides the device and dtype menus."""
    policy = current_policy()
    if not policy.allows_model(source):
        raise ModelLoadError(f"{source!r} is not on this server's list of models; ask the person running it to add it.")
    if not policy.allow_device:
        device, dtype = "auto", ("auto" if dtype not in page_precisions else dtype)
    trust_remote_code = trust_remote_code and policy.allow_remote_code
    allow_download = allow_download and policy.allow_download
    allow_pickle = allow_pickle and policy.allow_pickle
    dtype = resolve_dtype_name(dtype, resolve_device(device))  # the key names what loads: 'auto' and its value share one copy
    key = (source, device, dtype, trust_remote_code, allow_download, allow_pickle)
    loaded = st.session_state.setdefault("_specviz_loaded_models", set())
    if key in loaded:
        return _cached_model(*key)
    with st.status(f"Loading {md_text(source)} on {md_text(device)}…", expanded=False) as status:  # labels are Markdown
        try:
            model = _cached_model(*key)
        except (MemoryError, torch.OutOfMemoryError) as exc:
            raise ModelLoadError(f"{source} does not fit in the memory left on this machine; the models already loaded are untouched. Pick a smaller model.") from exc
        status.update(label=f"Loaded {md_text(model.name)} ({model.num_layers} layers, {model.device}, {model.precision})", state="complete")
    loaded.add(key)
    return model


def load_target(config: RunConfig) -> LoadedModel:
    """The run's target, from the shared cache (get_model: the owner's policy, a visible status)."""
    return get_model(config.target, **config.load_options())


class TokenTexts(TokenTable):
    """token id -> its text, from the tokenizer's bytes for that token (a piece of a character shows as its
    bytes, ⟨E6 97⟩), looked up once and remembered. The text is untrusted model output."""

    def __init__(self, tokenizer) -> None:
        super().__init__(lambda token_id: token_bytes(tokenizer, token_id))
        self.tokenizer = tokenizer


@cached(max_entries=4)  # keyed by the target's key and the layer (the model itself is left out: _target)
def _cached_early_exit(_target: LoadedModel, target_key: tuple, exit_layer: int):
    return early_exit_view(_target.model, exit_layer)


def get_early_exit(target: LoadedModel, exit_layer: int):
    """The early-exit view shares the target's weights; building it is cheap but we still do it once."""
    return _cached_early_exit(target, (target.name, str(target.device), target.precision), exit_layer)


@cached(max_entries=4)  # a process registry (specviz.workshop.resources), like the models
def _cached_heads(folder: str | None, _target: LoadedModel, target_key: tuple) -> MedusaHeads:
    return load_target_heads(folder, _target)


def get_heads(folder: str | None, target: LoadedModel) -> MedusaHeads:
    """Medusa heads, read from disk and put on the target's device once per (folder, target) and shared by every
    session read-only, like the models (a Medusa-1 folder with its own LM heads is GBs). A HeadsError is not cached."""
    return _cached_heads(folder, target, (target.name, str(target.device), target.precision))


@cached(max_entries=4)
def _cached_eagle(folder: str | None, _target: LoadedModel, target_key: tuple) -> EagleHead:
    return load_target_eagle(folder, _target)


def get_eagle(folder: str | None, target: LoadedModel) -> EagleHead:
    """An EAGLE head, read once per (folder, target) and shared read-only by every session, as the Medusa heads are
    (its per-run key/value cache lives in the drafter, never on the head)."""
    return _cached_eagle(folder, target, (target.name, str(target.device), target.precision))


def run_models(config: RunConfig, *, target: LoadedModel | None = None, drafters: Iterable[str] | None = None) -> RunModels:
    """The models config's drafter (or ``drafters``) needs, from the shared caches (specviz.runs.resolve_models)."""

    def load(source: str) -> LoadedModel:
        return get_model(source, **config.load_options())

    return resolve_models(config, load, get_early_exit, get_heads, target=target, drafters=drafters, eagle_of=get_eagle)


def sweep_models(target: str, draft: str, device: str, drafters: Iterable[str]) -> RunModels:
    """The models a benchmark sweep over ``drafters`` needs, from the shared caches."""
    return run_models(RunConfig(target=target, draft=draft or None, device=device), drafters=drafters)


def lab_models(precisions: list[str] | tuple[str, ...]) -> dict[str, LoadedModel]:
    """The numerics lab's target (this server's first) in each precision it compares, in order. The lab's menu is
    fixed by the page, not a participant's free dtype choice, so each loads as named even in shared mode (where
    get_model would otherwise turn it into 'auto' and compare one precision with itself)."""
    from specviz.experiments.numerics import LAB_PRECISIONS

    source = current_policy().default_target
    return {p: get_model(source, "auto", p, page_precisions=LAB_PRECISIONS) for p in precisions}
