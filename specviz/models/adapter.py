"""Per-run KV-cache adapter around a shared transformers model, and the early-exit view of a target."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer

from specviz.core.tree import tree_mask


class HFCachedLM:
    """Implements specviz.core.protocols.TreeCachedLM. The model is shared and never mutated; the cache belongs
    to this run. tree_problem says when this model cannot verify a tree after all (e.g. flash attention)."""

    can_verify_tree = True

    def __init__(self, model: PreTrainedModel, vocab_size: int) -> None:
        self.model = model
        self.vocab_size = vocab_size
        self.device = model.device
        self.cache = DynamicCache(config=model.config)
        try:  # sliding-window layers must remember past states to be cropped
            self.cache.activate_past_recording()
        except (AttributeError, NotImplementedError):
            pass
        self._tokens: list[int] = []
        self._pending: list[torch.Tensor] = []  # ids fed as device tensors, read back only when tokens is asked for
        self._length = 0
        self._tree: tuple[int, tuple[int, ...]] | None = None  # (cached length before the tree, its ids)

    @property
    def tokens(self) -> Sequence[int]:
        return self._settled()

    def _settled(self) -> list[int]:
        if self._pending:  # one transfer for everything fed on the device since the last read
            self._tokens.extend(torch.cat(self._pending).tolist())
            self._pending.clear()
        return self._tokens

    @torch.inference_mode()
    def extend(self, ids: Sequence[int] | torch.Tensor, last_only: bool = False) -> torch.Tensor:
        """(T,) ids -> (T, vocab_size) float32 logits, trimmed of any padding columns; (1, vocab_size) for the
        last position only with last_only (transformers' logits_to_keep: a long prefill computes no (T, V) rows).
        ids may be a 1-D LongTensor on the model's device (a draft model feeding back its own samples)."""
        if len(ids) == 0:
            raise ValueError("extend() needs at least one token")
        if isinstance(ids, torch.Tensor):
            input_ids = ids.to(self.device, torch.long).view(1, -1)  # (1, T)
            self._pending.append(input_ids[0])
        else:
            input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.device)  # (1, T)
            self._settled().extend(int(i) for i in ids)
        self._length += input_ids.shape[1]
        keep = {"logits_to_keep": 1} if last_only else {}
        out = self.model(input_ids=input_ids, past_key_values=self.cache, use_cache=True, **keep)
        logits = out.logits[0, -1:] if last_only else out.logits[0]  # (T or 1, V_padded)
        return logits[:, : self.vocab_size].float()

    @property
    def supports_tree(self) -> bool:
        """True when the cache can be compacted to a path (every layer a plain DynamicLayer) and the model
        takes a custom 4-D attention mask (its attention is not flash-attention, which ignores one)."""
        return self.tree_problem is None

    @property
    def tree_problem(self) -> str | None:
        """Why this model cannot verify a token tree in one pass, or None."""
        return tree_support_problem(self.model, self.cache)

    @torch.inference_mode()
    def extend_tree(self, ids: Sequence[int], parents: Sequence[int]) -> torch.Tensor:
        """Feed a tree after the cached tokens in one pass -> (T, vocab_size) float32 logits, one row per node.

        parents[i] is the index (in ids) of node i's parent, or -1 for a node that follows the cached context
        directly; parents[i] < i. Each node attends to the cached context and to its own ancestors only
        (a boolean (1, 1, T, cached + T) mask, True where it may attend) at position cached + its depth, so
        its logits equal those of its path decoded as a chain. Call keep_path() before the next extend."""
        problem = tree_support_problem(self.model, self.cache)
        if problem is not None:
            raise ValueError(problem)
        ids, parents = [int(i) for i in ids], [int(j) for j in parents]
        if not ids or len(parents) != len(ids) or any(not (-1 <= j < i) for i, j in enumerate(parents)):
            raise ValueError("extend_tree() needs one parent per node, each -1 or an earlier node's index.")
        cached = self._length
        mask, depth = tree_mask(parents, cached, self.device)  # (1, 1, T, cached + T), (T,)
        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)  # (1, T)
        position_ids = (cached + depth).view(1, -1)  # (1, T)
        self._settled().extend(ids)
        self._length += len(ids)
        self._tree = (cached, tuple(ids))  # what keep_path() compacts
        out = self.model(
            input_ids=input_ids, attention_mask=mask, position_ids=position_ids, past_key_values=self.cache, use_cache=True
        )
        return out.logits[0][:, : self.vocab_size].float()

    def keep_path(self, path: Sequence[int]) -> None:
        """After extend_tree(ids, ...): keep the cached context before the tree plus the nodes at ``path``
        (indices into ids, root first), compacting every layer's keys and values; nothing is recomputed."""
        if self._tree is None:
            raise ValueError("keep_path() follows an extend_tree() call; there is no tree in the cache.")
        start, ids = self._tree
        self._tree = None
        tokens = self._settled()
        keep = torch.tensor([start + int(i) for i in path], dtype=torch.long, device=self.device)
        index = torch.cat([torch.arange(start, device=self.device), keep])  # (start + len(path),)
        for layer in self.cache.layers:
            if layer.is_initialized and layer.keys.numel():
                layer.keys = layer.keys.index_select(-2, index.to(layer.keys.device))
                layer.values = layer.values.index_select(-2, index.to(layer.values.device))
        del tokens[start:]
        tokens.extend(ids[int(i)] for i in path)
        self._length = len(tokens)

    def crop(self, length: int) -> None:
        self._tree = None
        drop = self._length - length
        if drop > 0:
            self.cache.crop(-drop)  # transformers 5: a negative count removes that many tokens
            del self._settled()[length:]
            self._length = length


def tree_support_problem(model: PreTrainedModel, cache: DynamicCache) -> str | None:
    """Why this model cannot verify a token tree in one pass (a clear message), or None when it can."""
    name = type(model).__name__
    attn = getattr(model.config, "_attn_implementation", None) or "eager"
    if "flash" in attn:
        return f"{name} runs {attn} attention, which takes no custom tree mask; token trees fall back to chains."
    layers = getattr(cache, "layers", [])
    if any(type(layer) is not DynamicLayer for layer in layers):
        kinds = sorted({type(layer).__name__ for layer in layers} - {"DynamicLayer"})
        return (
            f"{name} keeps {', '.join(kinds)} cache layers, which cannot be compacted to a path; token trees fall back to chains."
        )
    return None


def num_layers(model: PreTrainedModel) -> int:
    return int(model.config.num_hidden_layers)


def default_exit_layer(model: PreTrainedModel) -> int:
    """About 93% of the depth: where an untrained early exit of SmolLM2-135M agrees with it roughly half the time (28 of 30)."""
    n = num_layers(model)
    return max(1, min(n - 1, round(n * 28 / 30)))


def early_exit_view(model: PreTrainedModel, exit_layer: int) -> PreTrainedModel:
    """A model that runs only the first exit_layer blocks, then the final norm and LM head, sharing the
    target's weight tensors (no copy, and the target object is left untouched)."""
    total = num_layers(model)
    if not (1 <= exit_layer < total):
        raise ValueError(f"exit layer must be between 1 and {total - 1} for this {total}-layer target; got {exit_layer}.")
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = exit_layer
    if getattr(config, "layer_types", None):
        config.layer_types = list(config.layer_types)[:exit_layer]
    with torch.device("meta"):
        view = type(model)(config)
    shared: list[str] = []  # converted layers (packed linears) keep no plain weights: share the modules themselves
    for name, module in view.named_modules():
        if name and not any(name.startswith(p + ".") for p in shared) and type(model.get_submodule(name)) is not type(module):
            shared.append(name)
    own = dict(model.state_dict(keep_vars=True))
    wanted = set(view.state_dict(keep_vars=True))  # the view's plain (meta) modules, before any is shared
    view.load_state_dict({k: v for k, v in own.items() if k in wanted}, assign=True, strict=False)
    for name in shared:  # after loading, so nothing is ever loaded into a module the target owns
        view.set_submodule(name, model.get_submodule(name))
    # Non-persistent buffers and plain tensor attributes (rotary frequencies) are not in the state dict.
    for name, module in view.named_modules():
        source = model.get_submodule(name)
        for attr, value in list(vars(module).get("_buffers", {}).items()):
            if value is not None and value.is_meta:
                module._buffers[attr] = source._buffers[attr]
        for attr, value in list(vars(module).items()):
            if isinstance(value, torch.Tensor) and value.is_meta:
                setattr(module, attr, getattr(source, attr))
    leftover = [n for n, t in list(view.named_parameters()) + list(view.named_buffers()) if t.is_meta]
    if leftover:
        raise ValueError(f"Early exit is not supported for {type(model).__name__}: could not share {leftover[:3]}.")
    view.eval()
    view.generation_config = model.generation_config
    return view
