"""An EAGLE head (Li et al., 2024): one decoder layer of the target's shape, with its own weights, that continues the
target's features.

The layer reads u_t = fc([e(x_{t+1}); f_t]), where f_t is the target's post-norm last hidden state at position t
(what its LM head reads), e the target's frozen input embedding and fc a (2H -> H) linear with a bias, and returns
g_t, its prediction of f_{t+1}; the target's own LM head turns g_t into a guess of token t+2. The layer is Llama's
(EAGLE's choice): RMSNorm -> self-attention with rotary positions (grouped heads as the target has them) -> residual,
RMSNorm -> SiLU-gated MLP -> residual; as in EAGLE's code the single layer has no input norm (fc's output goes
straight in). Its sizes are the target's: hidden size, attention heads, key/value heads, head size, MLP width.
Attention runs over a per-run cache (EagleCache), one entry per position, with an optional boolean mask for a tree.

On disk (a folder): ``config.json`` (``specviz_kind: "eagle"``, the shape, the target's fingerprint and base model
name, every training fact), ``eagle_head.safetensors`` (float16 weights: safetensors only, nothing pickled), and,
when counted, ``token_counts.safetensors`` for a draft vocabulary (specviz.models.vocab). Heads for another target
are refused by fingerprint, as Medusa heads are. Plain torch and safetensors: nothing here knows transformers.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from specviz.models.medusa import HeadsError, read_config, read_weights

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "eagle_head.safetensors"
KIND = "eagle"  # config.json's specviz_kind


@dataclass(frozen=True)
class EagleShape:
    """The layer's sizes, taken from the target's config."""

    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        if min(self.hidden_size, self.num_heads, self.num_kv_heads, self.head_dim, self.intermediate_size) < 1:
            raise HeadsError(f"An EAGLE layer needs positive sizes; got {self}.")
        if self.num_heads % self.num_kv_heads or self.head_dim % 2:
            raise HeadsError(f"An EAGLE layer needs heads divisible by key/value heads and an even head size; got {self}.")

    @classmethod
    def of_target(cls, config) -> EagleShape:
        """From a transformers config (Llama-like, GPT-2 and others that name the usual fields)."""
        hidden = int(config.hidden_size)
        heads = int(config.num_attention_heads)
        kv = int(getattr(config, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
        inner = int(getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * hidden)
        rope = getattr(config, "rope_parameters", None) or {}
        theta = float((rope.get("rope_theta") if isinstance(rope, dict) else None) or getattr(config, "rope_theta", None) or 10000.0)
        eps = float(getattr(config, "rms_norm_eps", None) or getattr(config, "layer_norm_epsilon", None) or 1e-6)
        return cls(hidden, heads, kv, head_dim, inner, theta, eps)

    @classmethod
    def from_dict(cls, raw: object) -> EagleShape:
        if not isinstance(raw, dict):
            raise HeadsError("config.json's shape must be an object.")
        try:
            return cls(int(raw["hidden_size"]), int(raw["num_heads"]), int(raw["num_kv_heads"]), int(raw["head_dim"]),
                       int(raw["intermediate_size"]), float(raw.get("rope_theta", 10000.0)), float(raw.get("norm_eps", 1e-6)))  # fmt: skip
        except (KeyError, TypeError, ValueError) as exc:
            raise HeadsError("config.json's shape needs integer hidden_size, num_heads, num_kv_heads, head_dim, intermediate_size.") from exc


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class EagleCache:
    """One run's keys and values of the EAGLE layer: (1, kv heads, S, head size) each, S = the entries so far."""

    def __init__(self) -> None:
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.keys is None else int(self.keys.shape[-2])

    def crop(self, length: int) -> None:
        if self.keys is not None and length < self.length:
            self.keys, self.values = self.keys[..., :length, :], self.values[..., :length, :]  # type: ignore[index]

    def append(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add (B, kv, T, d) entries; returns every entry."""
        if self.keys is None:
            self.keys, self.values = keys, values
        else:
            self.keys, self.values = torch.cat([self.keys, keys], dim=-2), torch.cat([self.values, values], dim=-2)  # type: ignore[list-item]
        return self.keys, self.values  # type: ignore[return-value]


def inverse_frequencies(head_dim: int, theta: float) -> torch.Tensor:
    """(d/2,) rotary frequencies 1 / theta^(2i/d)."""
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))


def rotate(x: torch.Tensor, positions: torch.Tensor, inv: torch.Tensor) -> torch.Tensor:
    """Rotary positions (Llama's rotate-half form): x (B, h, T, d), positions (B, T) or (T,), inv (d/2,) frequencies."""
    d = x.shape[-1]
    angles = positions.to(torch.float32)[..., None] * inv  # (..., T, d/2)
    angles = torch.cat([angles, angles], dim=-1)  # (..., T, d)
    if angles.dim() == 3:
        angles = angles[:, None]  # (B, 1, T, d)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    half = d // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class EagleHead(nn.Module):
    """fc + one decoder layer. forward(features (B, T, H), embeddings (B, T, H), positions) -> (B, T, H) predicted
    next features; with a cache (B = 1) the entries are appended and attention covers the cache too."""

    def __init__(self, shape: EagleShape, generator: torch.Generator | None = None) -> None:
        """Linear weights start at N(0, 0.02) (Llama's), drawn from ``generator`` when given; biases at zero."""
        super().__init__()
        h, heads, kv, d, inner = shape.hidden_size, shape.num_heads, shape.num_kv_heads, shape.head_dim, shape.intermediate_size
        self.shape = shape
        self.fc = nn.Linear(2 * h, h)  # [e(x_{t+1}); f_t] -> u_t
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(h, heads * d, bias=False), nn.Linear(h, kv * d, bias=False), nn.Linear(h, kv * d, bias=False)
        self.o_proj = nn.Linear(heads * d, h, bias=False)
        self.post_attention_layernorm = RMSNorm(h, shape.norm_eps)
        self.gate_proj, self.up_proj = nn.Linear(h, inner, bias=False), nn.Linear(h, inner, bias=False)
        self.down_proj = nn.Linear(inner, h, bias=False)
        self.token_counts: torch.Tensor | None = None  # (V,) for a draft vocabulary, when the folder has them (not a weight)
        self.register_buffer("inv_freq", inverse_frequencies(d, shape.rope_theta), persistent=False)  # (d/2,)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.02, generator=generator)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def forward(self, features: torch.Tensor, embeddings: torch.Tensor, positions: torch.Tensor,
                cache: EagleCache | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
        """mask: (T, S + T) bool, True where a new position may attend (S = the cache's entries before); None:
        causal over the new positions, every cached entry visible."""
        s = self.shape
        b, t, _ = features.shape
        x = self.fc(torch.cat([embeddings, features], dim=-1))  # (B, T, H)
        q = self.q_proj(x).view(b, t, s.num_heads, s.head_dim).transpose(1, 2)  # (B, h, T, d)
        k = self.k_proj(x).view(b, t, s.num_kv_heads, s.head_dim).transpose(1, 2)  # (B, kv, T, d)
        v = self.v_proj(x).view(b, t, s.num_kv_heads, s.head_dim).transpose(1, 2)
        q, k = rotate(q, positions, self.inv_freq), rotate(k, positions, self.inv_freq)
        before = 0 if cache is None else cache.length
        if cache is not None:
            k, v = cache.append(k, v)  # (1, kv, S + T, d)
        if mask is None and t > 1:
            mask = torch.ones(t, before + t, dtype=torch.bool, device=x.device).tril(diagonal=before)  # causal after the cache
        gqa = s.num_heads != s.num_kv_heads  # grouped heads read the kv heads in place: no copy of the cache per step
        attn = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)  # (B, h, T, d); one position sees all
        x = x + self.o_proj(attn.transpose(1, 2).reshape(b, t, s.num_heads * s.head_dim))
        y = self.post_attention_layernorm(x)
        return x + self.down_proj(nn.functional.silu(self.gate_proj(y)) * self.up_proj(y))  # (B, T, H)


@dataclass(frozen=True)
class EagleInfo:
    """What config.json says about an EAGLE head."""

    shape: EagleShape
    base_model: str
    target_fingerprint: str | None


def read_eagle_info(folder: Path) -> EagleInfo:
    path, raw = read_config(folder, "EAGLE head")
    if not isinstance(raw, dict) or raw.get("specviz_kind") != KIND:
        raise HeadsError(f"{path} does not describe an EAGLE head (no \"specviz_kind\": \"{KIND}\").")
    base, fingerprint = raw.get("base_model_name_or_path"), raw.get("target_fingerprint")
    return EagleInfo(EagleShape.from_dict(raw.get("shape")), str(base)[:200] if base else "an unnamed model",
                     str(fingerprint)[:64] if fingerprint else None)  # fmt: skip


def save_eagle(head: EagleHead, folder: Path, base_model: str, fingerprint: str, extra: dict | None = None) -> None:
    """Write the head (float16 weights) and its config."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to(torch.float16).contiguous() for k, v in head.state_dict().items()}
    save_file(tensors, str(folder / WEIGHTS_FILE))
    config = {"specviz_kind": KIND, "base_model_name_or_path": base_model, "target_fingerprint": fingerprint,
              "shape": asdict(head.shape), **(extra or {})}  # fmt: skip
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def load_eagle(folder: Path, shape: EagleShape, fingerprint: str | None = None, target_name: str = "this target") -> EagleHead:
    """A head from its folder, float32, eval mode. Refused (HeadsError naming both models) when trained for another
    target, or when its shape is not ``shape`` (the target's)."""
    info = read_eagle_info(folder)
    if fingerprint is not None and info.target_fingerprint is not None and info.target_fingerprint != fingerprint:
        raise HeadsError(
            f"This EAGLE head was trained for {info.base_model} (target {info.target_fingerprint}), not for {target_name} "
            f"(target {fingerprint}): train one for it with `python -m specviz train-heads --kind eagle`."
        )
    if info.shape.hidden_size != shape.hidden_size:
        raise HeadsError(f"The EAGLE head in {folder} (for {info.base_model}) does not fit {target_name} (hidden size {shape.hidden_size}).")
    weights = read_weights(folder, WEIGHTS_FILE, "EAGLE head")
    head = EagleHead(info.shape)
    wanted = head.state_dict()
    missing = sorted(set(wanted) - set(weights))
    shapes = [k for k in wanted if k in weights and tuple(weights[k].shape) != tuple(wanted[k].shape)]
    if missing or shapes:
        what = f"missing {', '.join(missing[:3])}" if missing else f"{shapes[0]} is {tuple(weights[shapes[0]].shape)}"
        raise HeadsError(f"The EAGLE head in {folder} is incomplete or malformed: {what}.")
    head.load_state_dict({k: weights[k].to(torch.float32) for k in wanted})
    return head.eval().requires_grad_(False)


def step_fn(head: EagleHead, embedding: nn.Module):
    """(cache, features (T, H), token ids (T,), positions (T,), mask) -> (T, H): the head at inference (B = 1), reading
    the token through the target's input embedding, appending to the run's cache. Reads only."""

    def forward(cache: EagleCache, features: torch.Tensor, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        with torch.inference_mode():
            e = embedding(ids).to(torch.float32)[None]  # (1, T, H)
            out = head(features.to(torch.float32)[None], e, positions[None], cache, mask)
        return out[0]

    return forward


def logits_fn(lm_head: nn.Module, vocab_size: int, dtype: torch.dtype):
    """(T, H) predicted features -> (T, V) float32 logits through the target's LM head (or a ReducedHead: (T, V'))."""

    def logits(features: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return lm_head(features.to(dtype))[..., :vocab_size].float()

    return logits

