"""Per-run KV-cache adapter around a shared transformers model, and the early-exit view of a target."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer

from specviz.core.protocols import PREFILL_CHUNK_TOKENS, pause_point
from specviz.core.tree import tree_mask


class HFCachedLM:
    """Implements specviz.core.protocols.TreeCachedLM and HiddenStateLM. The model is shared and never mutated; the
    cache belongs to this run. tree_problem says when this model cannot verify a tree after all (e.g. flash attention).

    keep_hidden (per run, for a drafter that reads the target's hidden state): every pass also asks for the hidden
    states and keeps the last one, ``out.hidden_states[-1]`` (after the final norm: the LM head's input, so
    ``lm_head(last_hidden) == logits``), as last_hidden (T, H): every row fed, a last_only prefill's too (the model
    computes them all anyway; an EAGLE drafter reads every prompt position's).

    A last_only pass (a prefill) longer than chunk_tokens runs as several passes of at most chunk_tokens, with a
    pause point between two (specviz.core.protocols.pause_point: on a shared server a waiting participant's turn may go
    first). The cache and the last row equal a one-pass prefill's up to float rounding (the attention over the cached
    chunks sums in another order; tests/test_budgets.py), and every caller chunks alike, so a prompt gets the same cache
    on the command line and in the app; last_hidden then holds every chunk's rows."""

    can_verify_tree = True

    def __init__(self, model: PreTrainedModel, vocab_size: int, keep_hidden: bool = False, chunk_tokens: int | None = None) -> None:
        chunk_tokens = PREFILL_CHUNK_TOKENS if chunk_tokens is None else chunk_tokens
        if chunk_tokens < 1:
            raise ValueError(f"chunk_tokens must be at least 1; got {chunk_tokens}.")
        self.model = model
        self.vocab_size = vocab_size
        self.device = model.device
        self.keep_hidden = keep_hidden
        self.chunk_tokens = chunk_tokens
        self.last_hidden: torch.Tensor | None = None  # (T, H) of the latest pass when keep_hidden
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
        if last_only and len(ids) > self.chunk_tokens:  # a long prefill: chunk by chunk, a pause point between two
            rows = []
            for start in range(0, len(ids) - self.chunk_tokens, self.chunk_tokens):
                self._pass(ids[start : start + self.chunk_tokens], last_only=True)
                rows.append(self.last_hidden)
                pause_point()
            logits = self._pass(ids[(len(ids) - 1) // self.chunk_tokens * self.chunk_tokens :], last_only=True)
            if self.keep_hidden:
                self.last_hidden = torch.cat(rows + [self.last_hidden])  # (T, H): every row fed, as one pass keeps
            return logits
        return self._pass(ids, last_only)

    def _pass(self, ids: Sequence[int] | torch.Tensor, last_only: bool) -> torch.Tensor:
        """One forward over ids after the cached ones (what extend() documents)."""
        if isinstance(ids, torch.Tensor):
            input_ids = ids.to(self.device, torch.long).view(1, -1)  # (1, T)
            self._pending.append(input_ids[0])
        else:
            input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.device)  # (1, T)
            self._settled().extend(int(i) for i in ids)
        self._length += input_ids.shape[1]
        keep = {"logits_to_keep": 1} if last_only else {}
        out = self.model(input_ids=input_ids, past_key_values=self.cache, use_cache=True, output_hidden_states=self.keep_hidden, **keep)
        self._keep_hidden(out)
        logits = out.logits[0, -1:] if last_only else out.logits[0]  # (T or 1, V_padded)
        return logits[:, : self.vocab_size].float()

    def _keep_hidden(self, out) -> None:
        """last_hidden <- the pass's final-norm hidden states (T, H), one row per id fed."""
        if self.keep_hidden:
            self.last_hidden = out.hidden_states[-1][0]  # (T, H)

    @property
    def tree_problem(self) -> str | None:
        """Why this model cannot verify a token tree in one pass, or None: the cache must compact to a path (every
        layer a plain DynamicLayer) and the model must take a custom 4-D attention mask (not flash-attention)."""
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
            input_ids=input_ids, attention_mask=mask, position_ids=position_ids, past_key_values=self.cache, use_cache=True,
            output_hidden_states=self.keep_hidden,
        )  # fmt: skip
        self._keep_hidden(out)
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


def tree_support_problem(
    model: PreTrainedModel, cache: DynamicCache, mask: str = "tree mask", outcome: str = "token trees fall back to chains"
) -> str | None:
    """Why this model cannot take a custom attention mask over a compactable cache (a clear message), or None
    when it can: what token trees and batched ragged rows both need."""
    name = type(model).__name__
    attn = getattr(model.config, "_attn_implementation", None) or "eager"
    if "flash" in attn:
        return f"{name} runs {attn} attention, which takes no custom {mask}; {outcome}."
    layers = getattr(cache, "layers", [])
    if any(type(layer) is not DynamicLayer for layer in layers):
        kinds = sorted({type(layer).__name__ for layer in layers} - {"DynamicLayer"})
        return f"{name} keeps {', '.join(kinds)} cache layers, which cannot be compacted to a path; {outcome}."
    return None


class HFBatchedLM:
    """Implements specviz.core.batch.BatchedLM: B rows over one shared (never mutated) model, each row its own
    cache contents, so B independent streams advance in one batched forward.

    The design: a padded KV cache with a per-row validity mask. A pass appends T slots to every row (T = the
    most ids any row feeds; a row feeding fewer is left-padded, so every row's newest token sits in the last
    column); ``valid`` (B, S) says which slots hold a row's tokens. Each pass attends through a (B, 1, T, S + T)
    boolean mask (the row's valid slots, then causal over its own new ids) at positions lengths[b] + i, so a
    row's logits are those of its tokens alone, whatever its neighbours hold. keep() marks rejected drafts
    invalid (nothing is copied or recomputed); trailing slots no row uses are cropped, and when more than half
    of the slots are holes compact() gathers each row's valid slots to the front (one gather per layer)."""

    def __init__(self, model: PreTrainedModel, vocab_size: int, batch_size: int, pad_id: int = 0) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1; got {batch_size}.")
        self.model = model
        self.vocab_size = vocab_size
        self.device = model.device
        self.pad_id = pad_id
        self.cache = DynamicCache(config=model.config)
        problem = tree_support_problem(model, self.cache, "attention mask", "batched ragged rows cannot run on this model")
        if problem is not None:
            raise ValueError(problem)
        self.valid = torch.zeros(batch_size, 0, dtype=torch.bool, device=self.device)  # (B, S)
        self._tokens: list[list[int]] = [[] for _ in range(batch_size)]

    @property
    def batch_size(self) -> int:
        return len(self._tokens)

    @property
    def tokens(self) -> list[Sequence[int]]:
        return list(self._tokens)

    @property
    def lengths(self) -> list[int]:
        return [len(t) for t in self._tokens]

    @torch.inference_mode()
    def extend(self, rows: Sequence[Sequence[int]], keep_last: int = 0) -> torch.Tensor:
        """B ragged id lists -> (B, keep_last or T, V) float32 logits of each row's last positions, right-aligned:
        row b's newest id is in the last column; columns before its first fed id are padding."""
        if len(rows) != self.batch_size:
            raise ValueError(f"extend() needs one id list per row ({self.batch_size}); got {len(rows)}.")
        t = max(len(r) for r in rows)
        if t == 0:
            raise ValueError("extend() needs at least one token in some row")
        b, dev = self.batch_size, self.device
        ids = torch.tensor([[self.pad_id] * (t - len(r)) + [int(i) for i in r] for r in rows], dtype=torch.long, device=dev)  # (B, T)
        fed = torch.tensor([len(r) for r in rows], device=dev)  # (B,)
        col = torch.arange(t, device=dev)  # (T,)
        new_valid = col[None, :] >= (t - fed)[:, None]  # (B, T) real ids, not padding
        # a real id sees the row's valid slots and its own earlier real ids; padding sees only itself (no empty row)
        own = torch.ones(t, t, dtype=torch.bool, device=dev).tril() & new_valid[:, None, :]  # (B, T, T)
        own = own | torch.eye(t, dtype=torch.bool, device=dev)
        past = self.valid[:, None, :].expand(b, t, -1) & new_valid[:, :, None]  # (B, T, S)
        mask = torch.cat([past, own], dim=-1)[:, None]  # (B, 1, T, S + T)
        start = torch.tensor(self.lengths, device=dev)  # (B,)
        position_ids = (start[:, None] + col[None, :] - (t - fed)[:, None]).clamp_min(0)  # (B, T)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=position_ids, past_key_values=self.cache,
                         use_cache=True, logits_to_keep=keep_last)  # fmt: skip
        self.valid = torch.cat([self.valid, new_valid], dim=1)
        for row, r in zip(self._tokens, rows):
            row.extend(int(i) for i in r)
        return out.logits[..., : self.vocab_size].float()

    @torch.inference_mode()
    def keep(self, lengths: Sequence[int]) -> None:
        """Row b keeps its first lengths[b] cached tokens: later slots become holes (masked, never attended)."""
        if len(lengths) != self.batch_size:
            raise ValueError(f"keep() needs one length per row ({self.batch_size}); got {len(lengths)}.")
        for row, n in zip(self._tokens, lengths):
            del row[max(0, int(n)) :]
        limit = torch.tensor(self.lengths, device=self.device)[:, None]  # (B, 1)
        self.valid = self.valid & (self.valid.cumsum(dim=1) <= limit)
        used = self.valid.any(dim=0).nonzero()
        slots = int(used[-1]) + 1 if used.numel() else 0
        if slots < self.valid.shape[1]:  # trailing slots no row uses: crop them (costs nothing)
            self.cache.crop(slots - self.valid.shape[1])
            self.valid = self.valid[:, :slots]
        if self.valid.shape[1] > 2 * max(self.lengths, default=0) + 16:
            self.compact()

    @torch.inference_mode()
    def compact(self) -> None:
        """Gather every row's valid slots to the front, in order, so S = the longest row (one gather per layer)."""
        width = max(self.lengths, default=0)
        order = torch.argsort((~self.valid).to(torch.int8), dim=1, stable=True)[:, :width]  # (B, L) valid slots first
        for layer in self.cache.layers:
            if layer.is_initialized and layer.keys.numel():
                index = order[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[-1])  # (B, H, L, D)
                layer.keys = layer.keys.gather(2, index.to(layer.keys.device))
                layer.values = layer.values.gather(2, index.to(layer.values.device))
        self.valid = torch.arange(width, device=self.device)[None, :] < torch.tensor(self.lengths, device=self.device)[:, None]

    @torch.inference_mode()
    def select(self, rows: Sequence[int]) -> None:
        """Keep only these rows, in this order (finished streams leave the batch)."""
        index = torch.tensor(list(rows), dtype=torch.long, device=self.device)
        if self.valid.shape[1]:
            self.cache.batch_select_indices(index)
        self.valid = self.valid.index_select(0, index)
        self._tokens = [self._tokens[i] for i in rows]


def num_layers(model: PreTrainedModel) -> int:
    return int(model.config.num_hidden_layers)


def kv_bytes_per_token(model: PreTrainedModel, dtype: torch.dtype, layers: int | None = None) -> int:
    """Bytes one token takes in a run's KV cache: layers x 2 (keys and values) x KV heads x head dim x the element
    size of the activations' dtype (what the attention layers write). The embedded SmolLM2-135M in float32:
    30 x 2 x 3 x 64 x 4 = 46,080 bytes. layers: fewer than the model's (an early exit's own cache)."""
    config = model.config
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    element = torch.finfo(dtype).bits // 8 if dtype.is_floating_point else torch.iinfo(dtype).bits // 8
    return (num_layers(model) if layers is None else layers) * 2 * kv_heads * head_dim * element


def context_length(model: PreTrainedModel) -> int | None:
    """The most positions the model was built for (max_position_embeddings; a GGUF's context_length becomes it when
    transformers reads the file), or None when its config does not say."""
    value = getattr(model.config, "max_position_embeddings", None)
    return int(value) if isinstance(value, int) and value > 0 else None


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
