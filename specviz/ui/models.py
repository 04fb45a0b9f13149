"""Models load once per (source, device, dtype) and are shared by every browser session (read-only)."""

from __future__ import annotations

import streamlit as st

from specviz.models import LoadedModel, early_exit_view, load_model


@st.cache_resource(show_spinner=False, max_entries=4)
def _cached_model(source: str, device: str, dtype: str, trust_remote_code: bool, allow_download: bool, allow_pickle: bool) -> LoadedModel:
    return load_model(source, device, dtype, trust_remote_code=trust_remote_code, allow_download=allow_download, allow_pickle=allow_pickle)


def get_model(
    source: str,
    device: str = "auto",
    dtype: str = "auto",
    *,
    trust_remote_code: bool = False,
    allow_download: bool = False,
    allow_pickle: bool = False,
) -> LoadedModel:
    """Load (or fetch from the cache) with a visible status. Raises ModelLoadError (a ValueError) with a message to show."""
    key = (source, device, dtype, trust_remote_code, allow_download, allow_pickle)
    loaded = st.session_state.setdefault("_specviz_loaded_models", set())
    if key in loaded:
        return _cached_model(*key)
    with st.status(f"Loading {source} on {device}…", expanded=False) as status:
        model = _cached_model(*key)
        status.update(label=f"Loaded {model.name} ({model.num_layers} layers, {model.device}, {str(model.dtype).removeprefix('torch.')})", state="complete")
    loaded.add(key)
    return model


@st.cache_resource(show_spinner="Building the early-exit draft…", max_entries=4)
def _cached_early_exit(_target: LoadedModel, target_key: tuple, exit_layer: int):
    return early_exit_view(_target.model, exit_layer)


def get_early_exit(target: LoadedModel, exit_layer: int):
    """The early-exit view shares the target's weights; building it is cheap but we still do it once."""
    return _cached_early_exit(target, (target.name, str(target.device), str(target.dtype)), exit_layer)
