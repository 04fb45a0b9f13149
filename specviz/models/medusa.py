"""Medusa heads: K small blocks on the target's last hidden state, each guessing one token further ahead.

The shape is Medusa's (Cai et al., 2024): head i is a residual block ``h + SiLU(W h + b)`` (``medusa_num_layers`` of
them in a row) followed by an LM head. From the hidden state at position t, whose LM-head row gives token t+1,
head i (1-based) guesses token t+1+i. Heads trained here keep the target's own, frozen LM head, so one LM-head
call over the K rows scores every head at once; heads published with their own LM heads (Medusa-1's checkpoints,
``{i}.{L}.weight``) load too and use them.

The newest token as a second input (specviz's heads, ``token_input``). Medusa's heads read h_t alone, yet when
they draft, the token h_t chose (t+1) is already committed: it is the last token of the context. Heads with a
token input first mix it in, ``u = h + SiLU(W_in [h; e(x_{t+1})] + b_in)`` with e the target's own (frozen) input
embedding scaled to unit RMS, and every head's blocks read u instead of h. The idea is the first step of Hydra's
sequentially dependent heads (Ankner et al., 2024) and of EAGLE's (Li et al., 2024) token-and-feature input, kept
to one batched call: no head reads another's guess, so the K heads and the LM head still run once per round.
On the embedded target it lifted head 1's held-out top-1 from 0.29 to 0.43 on the same data (docs/medusa-heads.md).

On disk, Medusa's layout: a folder with ``config.json`` (``medusa_num_heads``, ``medusa_num_layers``,
``base_model_name_or_path``) and ``medusa_lm_head.safetensors`` holding ``{i}.{j}.linear.weight`` /
``{i}.{j}.linear.bias`` for head i's block j. specviz adds ``target_fingerprint`` (and ``hidden_size``) to the
config, so heads for another target are refused by name, not discovered by a shape error or by silent junk, and
``specviz_token_input`` (true) with ``token_input.weight`` / ``token_input.bias`` for heads with a token input.

Plain torch and safetensors: nothing here knows transformers.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "medusa_lm_head.safetensors"
TOKEN_INPUT_KEY = "specviz_token_input"  # config.json: the heads read the newest token too
MAX_HEADS = 8
MAX_LAYERS = 4


class HeadsError(ValueError):
    """Heads that cannot be used: a clear sentence for the page and the CLI."""


class ResBlock(nn.Module):
    """x + SiLU(W x + b); W starts at zero, so an untrained head is the identity (it guesses what the LM head does)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + nn.functional.silu(self.linear(x))


@dataclass(frozen=True)
class HeadsInfo:
    """What config.json says about a set of heads."""

    num_heads: int
    num_layers: int
    hidden_size: int
    base_model: str  # base_model_name_or_path, as the heads' author named the target
    target_fingerprint: str | None  # specviz's fingerprint of the target they were trained on (None: not recorded)
    token_input: bool = False  # the heads read the newest committed token's embedding as well (specviz's heads)


class TokenInput(nn.Module):
    """u = h + SiLU(W [h; e / rms(e)] + b), W (H, 2H) starting at zero: untrained, u is h (plain Medusa)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = nn.Linear(2 * hidden_size, hidden_size)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor, token_embedding: torch.Tensor) -> torch.Tensor:
        e = token_embedding * torch.rsqrt(token_embedding.pow(2).mean(-1, keepdim=True) + 1e-6)  # (..., H) unit RMS
        return hidden + nn.functional.silu(self.linear(torch.cat([hidden, e], dim=-1)))


class MedusaHeads(nn.Module):
    """K heads over a hidden size. forward(h[, e]): (..., H) -> (K, ..., H), the K heads' states before the LM head;
    heads with a token input also take e (..., H), the newest committed token's input embedding."""

    def __init__(self, hidden_size: int, num_heads: int = 4, num_layers: int = 1, vocab_size: int | None = None,
                 token_input: bool = False) -> None:  # fmt: skip
        super().__init__()
        if not (1 <= num_heads <= MAX_HEADS) or not (1 <= num_layers <= MAX_LAYERS):
            raise HeadsError(f"Medusa heads need 1..{MAX_HEADS} heads of 1..{MAX_LAYERS} blocks; got {num_heads} x {num_layers}.")
        self.hidden_size, self.num_heads, self.num_layers = hidden_size, num_heads, num_layers
        self.token_counts: torch.Tensor | None = None  # (V,) for a draft vocabulary, when the folder has them (not a weight)
        self.token_input = TokenInput(hidden_size) if token_input else None
        self.blocks = nn.ModuleList(nn.Sequential(*(ResBlock(hidden_size) for _ in range(num_layers))) for _ in range(num_heads))
        # Medusa-1 checkpoints carry one LM head per head; heads trained here use the target's (None).
        self.own_lm_heads = (
            None if vocab_size is None else nn.ModuleList(nn.Linear(hidden_size, vocab_size, bias=False) for _ in range(num_heads))
        )

    @property
    def reads_token(self) -> bool:
        return self.token_input is not None

    def forward(self, hidden: torch.Tensor, token_embedding: torch.Tensor | None = None) -> torch.Tensor:
        if self.token_input is not None:
            if token_embedding is None:
                raise ValueError("These Medusa heads read the newest token as well: pass its embedding.")
            hidden = self.token_input(hidden, token_embedding)  # (..., H)
        return torch.stack([block(hidden) for block in self.blocks])

    def logits(self, hidden: torch.Tensor, lm_head: nn.Module, token_embedding: torch.Tensor | None = None) -> torch.Tensor:
        """(H,) or (N, H) hidden states [and the newest tokens' embeddings] -> (K, V) or (K, N, V) logits: the
        target's LM head once over all K heads' states, or each head's own LM head when the checkpoint has them."""
        states = self(hidden, token_embedding)  # (K, ..., H)
        if self.own_lm_heads is None:
            return lm_head(states)
        return torch.stack([head(s) for head, s in zip(self.own_lm_heads, states)])

    def state_dict_medusa(self) -> dict[str, torch.Tensor]:
        """Medusa's key names: {i}.{j}.linear.weight / bias per block, {i}.{L}.weight for an own LM head; and
        token_input.weight / bias for heads with a token input."""
        out = {}
        if self.token_input is not None:
            out["token_input.weight"] = self.token_input.linear.weight
            out["token_input.bias"] = self.token_input.linear.bias
        for i, block in enumerate(self.blocks):
            for j, res in enumerate(block):
                out[f"{i}.{j}.linear.weight"] = res.linear.weight
                out[f"{i}.{j}.linear.bias"] = res.linear.bias
            if self.own_lm_heads is not None:
                out[f"{i}.{self.num_layers}.weight"] = self.own_lm_heads[i].weight
        return out


def target_fingerprint(embedding: torch.Tensor) -> str:
    """A short, precision-independent name for a target: sha256 of its vocabulary size, hidden size and its
    first 256 token embeddings rounded to bfloat16 (embeddings stay unconverted at every precision specviz loads)."""
    rows = embedding.detach()[:256].to(torch.float32).to(torch.bfloat16).view(torch.int16).cpu().numpy().tobytes()
    digest = hashlib.sha256(f"{embedding.shape[0]}x{embedding.shape[1]}:".encode() + rows)
    return digest.hexdigest()[:16]


def read_config(folder: Path, what: str) -> tuple[Path, object]:
    """(the path, the parsed JSON) of a heads folder's config.json; HeadsError naming what is missing or unreadable
    (what: "Medusa heads", "EAGLE head")."""
    path = Path(folder) / CONFIG_FILE
    try:
        return path, json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise HeadsError(f"No {what} in {folder}: it has no {CONFIG_FILE}.") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HeadsError(f"{path} is not a readable JSON file ({type(exc).__name__}).") from exc


def read_weights(folder: Path, name: str, what: str) -> dict[str, torch.Tensor]:
    """A heads folder's safetensors file (never a pickle); HeadsError naming what is missing or unreadable."""
    path = Path(folder) / name
    try:
        return load_file(str(path))
    except FileNotFoundError as exc:
        raise HeadsError(f"No {what} in {folder}: it has no {name}.") from exc
    except Exception as exc:  # safetensors raises its own error types for a corrupt file
        raise HeadsError(f"{path} is not a readable safetensors file ({type(exc).__name__}).") from exc


def read_info(folder: Path) -> HeadsInfo:
    """config.json of a heads folder, validated; HeadsError with a clear sentence otherwise."""
    path, raw = read_config(folder, "Medusa heads")
    if not isinstance(raw, dict):
        raise HeadsError(f"{path} must hold a JSON object.")
    try:
        heads, layers = int(raw["medusa_num_heads"]), int(raw.get("medusa_num_layers", 1))
        hidden = int(raw["hidden_size"]) if "hidden_size" in raw else 0
    except (KeyError, TypeError, ValueError) as exc:
        raise HeadsError(f"{path} needs integer medusa_num_heads (and medusa_num_layers).") from exc
    if not (1 <= heads <= MAX_HEADS) or not (1 <= layers <= MAX_LAYERS):
        raise HeadsError(f"{path}: {heads} heads of {layers} blocks; specviz runs 1..{MAX_HEADS} heads of 1..{MAX_LAYERS}.")
    fingerprint = raw.get("target_fingerprint")
    base = raw.get("base_model_name_or_path")
    token_input = raw.get(TOKEN_INPUT_KEY, False)
    if not isinstance(token_input, bool):
        raise HeadsError(f"{path}: {TOKEN_INPUT_KEY} must be true or false.")
    base_name = str(base)[:200] if base else "an unnamed model"
    return HeadsInfo(heads, layers, hidden, base_name, str(fingerprint)[:64] if fingerprint else None, token_input)


def load_heads(folder: Path, hidden_size: int, fingerprint: str | None = None, target_name: str = "this target") -> MedusaHeads:
    """Heads from a Medusa-layout folder, float32, in eval mode. Refused (HeadsError naming both models) when the
    config's target_fingerprint is not ``fingerprint``, or when the weights do not fit ``hidden_size``."""
    info = read_info(folder)
    if fingerprint is not None and info.target_fingerprint is not None and info.target_fingerprint != fingerprint:
        raise HeadsError(
            f"These Medusa heads were trained for {info.base_model} (target {info.target_fingerprint}), "
            f"not for {target_name} (target {fingerprint}): train heads for it with `python -m specviz train-heads`."
        )
    weights = read_weights(folder, WEIGHTS_FILE, "Medusa heads")
    own = f"0.{info.num_layers}.weight" in weights
    vocab = int(weights[f"0.{info.num_layers}.weight"].shape[0]) if own else None
    heads = MedusaHeads(hidden_size, info.num_heads, info.num_layers, vocab, info.token_input)
    wanted = heads.state_dict_medusa()
    missing = sorted(set(wanted) - set(weights))
    shapes = [k for k in wanted if k in weights and tuple(weights[k].shape) != tuple(wanted[k].shape)]
    if missing or shapes:
        what = f"missing {', '.join(missing[:3])}" if missing else f"{shapes[0]} is {tuple(weights[shapes[0]].shape)}"
        raise HeadsError(
            f"The Medusa heads in {folder} (for {info.base_model}) do not fit {target_name} (hidden size {hidden_size}): {what}."
        )
    with torch.no_grad():
        for key, tensor in wanted.items():
            tensor.copy_(weights[key].to(torch.float32))
    return heads.eval().requires_grad_(False)


def save_heads(heads: MedusaHeads, folder: Path, base_model: str, fingerprint: str, extra: dict | None = None) -> None:
    """Write heads in Medusa's layout, weights as float16 (the shipped heads' precision)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to(torch.float16).contiguous() for k, v in heads.state_dict_medusa().items()}
    save_file(tensors, str(folder / WEIGHTS_FILE))
    config = {
        "medusa_num_heads": heads.num_heads,
        "medusa_num_layers": heads.num_layers,
        "base_model_name_or_path": base_model,
        "hidden_size": heads.hidden_size,
        "target_fingerprint": fingerprint,
        **({TOKEN_INPUT_KEY: True} if heads.reads_token else {}),
        **(extra or {}),
    }
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def head_logits_fn(heads: MedusaHeads, lm_head: nn.Module, vocab_size: int, embedding: nn.Module | None = None,
                   reduced: nn.Module | None = None) -> Callable[[torch.Tensor, int], torch.Tensor]:  # fmt: skip
    """(H,) hidden state and the newest committed token's id -> (K, vocab_size) float32 logits: the heads in
    float32 (reading the token through ``embedding``, the target's input embedding, when they have a token input),
    then the LM head (the target's, or the checkpoint's own) in the hidden state's dtype, which is what the
    target's LM head takes. ``reduced``: the target's LM head cut to a draft vocabulary (specviz.models.vocab
    .ReducedHead), read instead, giving (K, V') logits. Reads only."""
    if heads.reads_token and embedding is None:
        raise HeadsError("These Medusa heads read the newest token: they need the target's input embedding.")
    if reduced is not None:
        if heads.own_lm_heads is not None:
            raise HeadsError("These Medusa heads carry their own LM heads; a draft vocabulary cuts the target's. Draft over the full vocabulary.")
        lm_head, vocab_size = reduced, reduced.size

    def head_logits(hidden: torch.Tensor, newest: int) -> torch.Tensor:
        with torch.inference_mode():
            e = None
            if heads.reads_token:
                e = embedding(torch.tensor(newest, device=hidden.device)).to(torch.float32)  # (H,)
            logits = heads.logits(hidden.to(torch.float32), lambda states: lm_head(states.to(hidden.dtype)), e)  # (K, V_padded)
        return logits[..., :vocab_size].float()

    return head_logits
