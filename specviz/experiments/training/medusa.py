"""Train Medusa heads for a target by self-distillation: the target's own predictions are the labels.

Data (offline): the target's own continuations, greedy and sampled, of a training prompt set built from templates
over many topics (prose, explanations, code, Q&A, lists; assets/training_prompts.json). The benchmark prompts (assets/prompts.json)
are never among them, and whole prompts are held out for the evaluation. While the target generates, its
post-norm last hidden state h_t and its argmax a_t (its prediction for token t+1) are kept at every generated
position; head i (1-based) learns to predict a_{t+i} from h_t, i.e. token t+1+i as the target itself would
choose it given the text so far. Hidden states (float16) and labels are computed once and cached on disk,
keyed by the target's fingerprint and the data settings.

Training: AdamW on the heads' blocks only (and the token input, for heads that read the newest token: the
default); the LM head and the input embedding are the target's own, frozen (a plain Linear: load the target in
float32). Losses are cross-entropies summed over heads with Medusa's decaying weights decay**(i-1). The LM head
(V x H) dominates the cost, so by default the softmax runs over the training vocabulary: every token that is a
label or an input somewhere in the training data (8,592 of SmolLM2's 49,152 for the shipped heads: the LM head's
matmul 5.7x smaller); the held-out evaluation always scores the full vocabulary, so a token left out could only show up there
as a miss. The matmul is float32 by default: on a CPU without native bfloat16 (AVX2 only) a bfloat16 matmul
ran 20x slower here. Batches are a pure function of the seed and the step, so a run resumed from a checkpoint
ends with the same weights as an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import torch
from torch import nn

if TYPE_CHECKING:  # specviz.models imports transformers: the CLI's parser imports this module for its defaults only
    from specviz.models import LoadedModel
    from specviz.models.medusa import MedusaHeads

log = logging.getLogger(__name__)

IGNORE = -100  # a label past the end of its continuation: no loss, no accuracy
DATA_VERSION = 2  # bump when the data recipe or the prompts change, so old caches are not reused (2: more prompts, the fed tokens)
CURVE_FILE = "training_curve.json"

# -- the training prompts: templates over topics, none of them a benchmark prompt --------------------------------

# The templates and their subjects, in groups. The cached data and the shipped heads were made from exactly this list:
# a change to it needs DATA_VERSION bumped (tests/test_train_heads.py pins both).
TRAINING_PROMPTS = Path(__file__).resolve().parents[2] / "assets" / "training_prompts.json"


def training_prompts(seed: int, path: Path = TRAINING_PROMPTS) -> list[str]:
    """Every training prompt (explanations, Q&A, lists, code, prose, copying and rewording), in a seeded order:
    each group's templates filled with each of its subjects, subject by subject, then shuffled."""
    try:
        groups = json.loads(Path(path).read_text(encoding="utf-8"))["groups"]
        prompts = [t.format(subject=s) for g in groups for s in g["subjects"] for t in g["templates"]]
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise ValueError(f"{path} is not a training-prompt file ({{groups: [{{templates, subjects}}]}}): {exc}") from exc
    order = torch.randperm(len(prompts), generator=torch.Generator().manual_seed(seed)).tolist()
    return [prompts[i] for i in order]


# -- the configuration -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainConfig:
    """One training run's settings: the data recipe (which decides the cache key) and the optimisation."""

    num_heads: int = 4  # Medusa's default K
    num_layers: int = 1  # ResBlocks per head
    steps: int = 1200  # optimiser steps
    lr: float = 1e-3  # AdamW peak learning rate (Medusa's), linear warm-up then cosine decay to 10%
    warmup_steps: int = 50
    batch_size: int = 256  # positions per step (each trains all K heads)
    seed: int = 0  # prompts' order, sampling during generation, batches
    data_tokens: int = 80_000  # stop generating once this many positions are collected (train + held out)
    max_new_tokens: int = 256  # per continuation
    gen_batch: int = 32  # continuations generated at once
    sampled_fraction: float = 0.5  # share of prompts continued by sampling (the rest greedily)
    temperature: float = 0.7  # the sampled continuations' temperature
    heldout_every: int = 10  # every n-th prompt (and its continuation) is held out
    decay: float = 0.8  # head i's loss weight is decay**(i-1) (Medusa's)
    token_input: bool = True  # the heads read the newest committed token too (specviz.models.medusa.TokenInput)
    train_vocab: Literal["seen", "full"] = "seen"  # softmax over the training data's tokens, or the whole vocabulary
    eval_every: int = 200  # steps between held-out evaluations
    eval_positions: int = 4096  # held-out positions in the periodic evaluations (the final one uses all)
    checkpoint_every: int = 200  # steps between checkpoints
    matmul_dtype: Literal["float32", "bfloat16"] = "float32"  # the frozen LM head's matmul in training
    chat: bool = True  # wrap prompts in the chat template, as the app does
    gen_dtype: str = "auto"  # the precision the target generates the data at: "auto" is the app's default here

    def __post_init__(self) -> None:
        positive = dict(steps=self.steps, batch_size=self.batch_size, data_tokens=self.data_tokens, gen_batch=self.gen_batch,
                        max_new_tokens=self.max_new_tokens, eval_every=self.eval_every, checkpoint_every=self.checkpoint_every,
                        heldout_every=self.heldout_every, eval_positions=self.eval_positions)  # fmt: skip
        for name, value in positive.items():
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1; got {value!r}.")
        if self.heldout_every < 2:
            raise ValueError("heldout_every must be at least 2 (every n-th prompt is held out; 1 would hold out all).")
        if not (0 < self.lr < 1):
            raise ValueError(f"lr must be between 0 and 1; got {self.lr}.")
        if not (0.0 <= self.sampled_fraction <= 1.0):
            raise ValueError(f"sampled_fraction must be between 0 and 1; got {self.sampled_fraction}.")
        if not (self.temperature > 0):
            raise ValueError(f"temperature must be above 0 for the sampled continuations; got {self.temperature}.")
        if not (0 < self.decay <= 1):
            raise ValueError(f"decay must be in (0, 1]; got {self.decay}.")
        if self.matmul_dtype not in ("float32", "bfloat16"):
            raise ValueError(f"matmul_dtype must be float32 or bfloat16; got {self.matmul_dtype!r}.")
        if self.train_vocab not in ("seen", "full"):
            raise ValueError(f"train_vocab must be seen or full; got {self.train_vocab!r}.")

    def data_key(self, fingerprint: str, with_budget: bool = True) -> str:
        """The cache key: the target and every setting that changes the data (without data_tokens: the key of
        the generated batches, which a larger budget extends)."""
        recipe = dict(v=DATA_VERSION, target=fingerprint, seed=self.seed, max_new=self.max_new_tokens,
                      gen_batch=self.gen_batch, sampled=self.sampled_fraction, temperature=self.temperature,
                      heldout_every=self.heldout_every, chat=self.chat, gen_dtype=self.gen_dtype)  # fmt: skip
        if with_budget:
            recipe["data_tokens"] = self.data_tokens
        return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


TINY = TrainConfig(steps=40, batch_size=64, data_tokens=600, max_new_tokens=24, gen_batch=8, warmup_steps=4,
                   eval_every=20, eval_positions=512, checkpoint_every=20, lr=5e-2)  # fmt: skip
"""A config that trains on a tiny random model in seconds (the tests, and --tiny)."""


# -- the data: the target's own continuations, its hidden states and argmaxes -------------------------------------


@dataclass(frozen=True)
class HeadsData:
    """Training and held-out positions: hidden (N, H) float16, the token the target committed after each (N,) int64
    (x_{t+1}, which heads with a token input read) and labels (N, K) int64 (IGNORE past the end)."""

    train_hidden: torch.Tensor
    train_tokens: torch.Tensor
    train_labels: torch.Tensor
    heldout_hidden: torch.Tensor
    heldout_tokens: torch.Tensor
    heldout_labels: torch.Tensor
    facts: dict  # prompts used, positions (train, held out), generation time and precision: for the model card


def head_labels(argmax: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(M,) the target's argmax at each position of one continuation -> (M, K): head i's label at row t is
    argmax[t + i], IGNORE where t + i runs past the end."""
    m = argmax.shape[0]
    labels = torch.full((m, num_heads), IGNORE, dtype=torch.long)
    for i in range(1, num_heads + 1):
        if m > i:
            labels[: m - i, i - 1] = argmax[i:]
    return labels


def _left_padded(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged id lists -> (B, T) ids left-padded and (B, T) attention mask."""
    t = max(len(r) for r in rows)
    ids = torch.tensor([[pad_id] * (t - len(r)) + list(r) for r in rows], dtype=torch.long)
    mask = torch.tensor([[0] * (t - len(r)) + [1] * len(r) for r in rows], dtype=torch.long)
    return ids, mask


@torch.inference_mode()
def continue_batch(lm: LoadedModel, prompts: Sequence[Sequence[int]], max_new_tokens: int, temperature: float,
                   generator: torch.Generator) -> list[tuple[torch.Tensor, torch.Tensor]]:  # fmt: skip
    """Continue B prompts at once (temperature 0: greedy), keeping at each position that produced a token the
    post-norm last hidden state, the target's argmax and the token it committed there (the argmax, or the sample):
    per row ((M, H) float16, (M,) int64, (M,) int64)."""
    model, dev = lm.model, lm.device
    pad_id = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
    eos = torch.tensor(lm.eos_token_ids or (-1,), device=dev)
    ids, mask = _left_padded(prompts, pad_id)
    ids, mask = ids.to(dev), mask.to(dev)
    cache, b = None, len(prompts)
    hidden, argmax, fed, done = [], [], [], torch.zeros(b, dtype=torch.bool, device=dev)
    alive = []  # (B,) per step: rows still generating (their position produced a kept token)
    feed, positions = ids, (mask.cumsum(-1) - 1).clamp_min(0)
    for _ in range(max_new_tokens):
        out = model(input_ids=feed, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True,
                    output_hidden_states=True, logits_to_keep=1)  # fmt: skip
        cache = out.past_key_values
        logits = out.logits[:, -1, : lm.vocab_size].float()  # (B, V)
        top = logits.argmax(-1)  # (B,)
        if temperature > 0:
            probs = torch.softmax(logits / temperature, dim=-1)
            token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        else:
            token = top
        hidden.append(out.hidden_states[-1][:, -1].to(torch.float16).cpu())  # (B, H)
        argmax.append(top.cpu())
        fed.append(token.cpu())
        alive.append((~done).cpu())
        done = done | torch.isin(token, eos)
        if bool(done.all()):
            break
        feed = torch.where(done, torch.full_like(token, pad_id), token)[:, None]  # (B, 1)
        mask = torch.cat([mask, torch.ones(b, 1, dtype=mask.dtype, device=dev)], dim=-1)
        positions = positions[:, -1:] + 1
    hid, top, tok, keep = torch.stack(hidden, 1), torch.stack(argmax, 1), torch.stack(fed, 1), torch.stack(alive, 1)  # (B, M, H), (B, M) x 3
    return [(hid[r][keep[r]], top[r][keep[r]], tok[r][keep[r]]) for r in range(b)]


def _batch_rows(lm: LoadedModel, config: TrainConfig, n: int, prompts: Sequence[str], parts: Path) -> tuple[list, float]:
    """Batch n's continuations (greedy, or sampled every 1/sampled_fraction-th batch), each saved as it is made,
    so an interrupted generation resumes: ([((M, H) float16, (M,) argmax, (M,) token) per prompt], seconds it took)."""
    from specviz.models import encode_prompt

    path = parts / f"batch-{n:04d}.pt"
    if path.is_file():
        saved = torch.load(path, map_location="cpu", weights_only=True)
        return list(zip(saved["hidden"], saved["argmax"], saved["tokens"])), float(saved["seconds"])
    sampled_every = 0 if config.sampled_fraction == 0 else max(1, round(1 / config.sampled_fraction))
    temperature = config.temperature if sampled_every and n % sampled_every == sampled_every - 1 else 0.0
    gen = torch.Generator(device=lm.device).manual_seed(config.seed * 1_000_003 + n)  # per batch: resumable
    start = time.perf_counter()
    encoded = [encode_prompt(lm.tokenizer, p, chat=config.chat) for p in prompts]
    rows = continue_batch(lm, encoded, config.max_new_tokens, temperature, gen)
    seconds = time.perf_counter() - start
    parts.mkdir(parents=True, exist_ok=True)
    torch.save(dict(hidden=[r[0] for r in rows], argmax=[r[1] for r in rows], tokens=[r[2] for r in rows], seconds=seconds), path.with_suffix(".tmp"))
    path.with_suffix(".tmp").replace(path)
    return rows, seconds


def _generate_all(lm: LoadedModel, config: TrainConfig, parts: Path, progress: bool) -> tuple[list, list, dict]:
    """Continue training prompts in batches until data_tokens positions are kept: (train rows, held-out rows, facts),
    each row a continuation's ((M, H) float16 hidden states, (M,) argmaxes, (M,) tokens); every heldout_every-th
    prompt held out."""
    from tqdm.auto import tqdm

    prompts = training_prompts(config.seed)
    train, heldout, total, used, seconds = [], [], 0, 0, 0.0
    bar = tqdm(total=config.data_tokens, desc="generating", unit="tok", disable=not progress)
    batches = [prompts[i : i + config.gen_batch] for i in range(0, len(prompts), config.gen_batch)]
    for n, batch in enumerate(batches):
        if total >= config.data_tokens:
            break
        rows, took = _batch_rows(lm, config, n, batch, parts)
        for j, row in enumerate(rows):
            (heldout if (used + j) % config.heldout_every == config.heldout_every - 1 else train).append(row)
            total += row[0].shape[0]
            bar.update(row[0].shape[0])
        used, seconds = used + len(batch), seconds + took
    bar.close()
    if total < config.data_tokens:
        log.warning("The training prompts gave %d positions, fewer than the %d asked for.", total, config.data_tokens)
    facts = dict(prompts=used, positions=total, generation_s=round(seconds, 1), gen_precision=lm.precision,
                 train_positions=sum(r[0].shape[0] for r in train), heldout_positions=sum(r[0].shape[0] for r in heldout))  # fmt: skip
    return train, heldout, facts


def _pack(rows: list) -> dict:
    """Rows of (hidden, argmax, token) -> one (N, H) float16 tensor, two (N,) tensors and the rows' lengths."""
    return dict(hidden=torch.cat([r[0] for r in rows]), argmax=torch.cat([r[1] for r in rows]), tokens=torch.cat([r[2] for r in rows]),
                lengths=[int(r[0].shape[0]) for r in rows])  # fmt: skip


def _unpack(packed: dict, num_heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The cached form -> hidden (N, H) float16, tokens (N,) and labels (N, K), labels never crossing a
    continuation's end."""
    labels = [head_labels(a, num_heads) for a in torch.split(packed["argmax"], packed["lengths"])]
    return packed["hidden"], packed["tokens"], torch.cat(labels) if labels else torch.zeros(0, num_heads, dtype=torch.long)


def load_or_make_data(lm: LoadedModel, config: TrainConfig, cache_dir: Path, progress: bool = True) -> HeadsData:
    """The cached hidden states and argmaxes for this target and data recipe, generated first if missing, by ``lm``
    (the target loaded at config.gen_dtype: its hidden states are what the heads will read in the app)."""
    cached = cached_data(lm, config, cache_dir, progress)
    train = _unpack(cached["train"], config.num_heads)
    held = _unpack(cached["heldout"], config.num_heads)
    return HeadsData(*train, *held, dict(cached["facts"]))


def cached_data(lm: LoadedModel, config: TrainConfig, cache_dir: Path, progress: bool = True) -> dict:
    """The target's own continuations as cached: {"train", "heldout"}: packed rows (hidden (N, H) float16, argmax (N,),
    tokens (N,), lengths: one per continuation, so the sequences can be split again), "facts"; generated first when
    missing (resumable batch by batch). The Medusa heads and the EAGLE head train on the same cache."""
    from specviz.models.medusa import target_fingerprint

    fingerprint = target_fingerprint(lm.model.get_input_embeddings().weight)
    path = Path(cache_dir) / f"medusa-data-{config.data_key(fingerprint)}.pt"
    if path.is_file():
        log.info("Reusing the cached training data %s", path)
        cached = torch.load(path, map_location="cpu", weights_only=True)
    else:
        parts = Path(cache_dir) / f"medusa-parts-{config.data_key(fingerprint, with_budget=False)}"
        train, heldout, facts = _generate_all(lm, config, parts, progress)
        if not train or not heldout:
            raise ValueError(f"Too little data for training and a held-out split ({facts['positions']} positions): raise --data-tokens.")
        cached = dict(train=_pack(train), heldout=_pack(heldout), facts=facts)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save(cached, tmp)
        tmp.replace(path)
    cached["facts"] = dict(cached["facts"], cache=str(path))
    return cached


def count_tokens(tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(N,) token ids the target emitted -> (vocab_size,) int64 counts (ids past the vocabulary ignored)."""
    tokens = tokens[(tokens >= 0) & (tokens < vocab_size)]
    return torch.bincount(tokens, minlength=vocab_size)[:vocab_size].to(torch.int64)


def vocab_report(train_counts: torch.Tensor, heldout_counts: torch.Tensor, sizes: Sequence[int]) -> list[dict]:
    """Per V': the share of the training and of the held-out tokens inside the V' most counted training tokens."""
    from specviz.models.vocab import coverage, draft_vocab_ids

    rows = []
    for size in sizes:
        if size <= train_counts.shape[0]:
            ids = draft_vocab_ids(train_counts, size)
            rows.append(dict(size=size, train_coverage=round(coverage(train_counts, ids), 4), heldout_coverage=round(coverage(heldout_counts, ids), 4)))
    return rows


def write_token_counts(out: Path, train_tokens: torch.Tensor, heldout_tokens: torch.Tensor, vocab_size: int, source: str) -> list[dict]:
    """token_counts.safetensors in ``out`` from what the target emitted in the training data, and the coverage report
    (the held-out tokens measure how much of unseen text V' covers)."""
    from specviz.models.vocab import REPORTED_SIZES, save_token_counts

    counts, held = count_tokens(train_tokens, vocab_size), count_tokens(heldout_tokens, vocab_size)
    report = vocab_report(counts, held, REPORTED_SIZES)
    save_token_counts(out, counts, {"source": source, "positions": str(int(counts.sum())), "coverage": json.dumps(report)})
    return report


# -- training ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HeadAccuracy:
    """Held-out accuracy of every head against the target's own prediction, at one step."""

    step: int
    top1: tuple[float, ...]  # per head (head 1 first)
    top5: tuple[float, ...]
    positions: int  # held-out positions scored (head 1's; later heads have a few fewer)


@dataclass(frozen=True)
class TrainResult:
    heads: MedusaHeads
    curve: list[dict]  # per logged step: step, loss, per-head train top-1
    evals: list[HeadAccuracy]  # periodic and final held-out accuracy
    facts: dict  # data and timing facts for the model card
    fingerprint: str
    vocab_size: int = 0  # the target's


@dataclass(frozen=True)
class Frozen:
    """The target's parts the heads train against, never trained: its LM head (V, H) [and (V,) bias] cast for the
    training matmul, its input embedding (V_in, H), and the training vocabulary (None: all V)."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    embedding: torch.Tensor
    vocab: torch.Tensor | None = None  # (V',) the ids the training softmax runs over, sorted

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """(N,) ids -> (N, H) float32 input embeddings."""
        return self.embedding[tokens].float()

    def train_view(self) -> Frozen:
        """The LM head cut to the training vocabulary (its rows in vocab order)."""
        if self.vocab is None:
            return self
        bias = None if self.bias is None else self.bias[self.vocab]
        return Frozen(self.weight[self.vocab], bias, self.embedding, self.vocab)

    def train_labels(self, labels: torch.Tensor) -> torch.Tensor:
        """(N, K) vocabulary ids -> indices into the training vocabulary (IGNORE stays IGNORE)."""
        if self.vocab is None:
            return labels
        index = torch.searchsorted(self.vocab, labels.clamp_min(0))
        return torch.where(labels == IGNORE, labels, index)


def frozen_parts(lm: LoadedModel, config: TrainConfig, data: HeadsData) -> Frozen:
    """The target's LM head and input embedding as plain tensors, and the training vocabulary config asks for:
    every id that is a label or an input token of the training data ("seen"), or all of them ("full")."""
    head = lm.model.get_output_embeddings()
    weight = getattr(head, "weight", None)
    if not isinstance(head, nn.Linear) or weight is None or not weight.is_floating_point():
        raise ValueError("Training heads needs the target's LM head as a plain Linear: load the target with dtype float32.")
    bias = head.bias.detach() if head.bias is not None else None
    weight = weight.detach()[: lm.vocab_size].to(getattr(torch, config.matmul_dtype))
    embedding = lm.model.get_input_embeddings().weight.detach()
    vocab = None
    if config.train_vocab == "seen":
        labels = data.train_labels[data.train_labels != IGNORE]
        vocab = torch.unique(torch.cat([labels, data.train_tokens]))  # sorted
    return Frozen(weight, None if bias is None else bias[: lm.vocab_size].float(), embedding, vocab)


def _states(heads: MedusaHeads, frozen: Frozen, hidden: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """(N, H) hidden states and (N,) newest tokens -> (K, N, H) head states (the tokens only for heads reading them)."""
    return heads(hidden.float(), frozen.embed(tokens) if heads.reads_token else None)


def _logits(states: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """(K, N, H) head states -> (K, N, V) float32 logits through the frozen LM head."""
    logits = (states.to(weight.dtype) @ weight.T).float()
    return logits if bias is None else logits + bias


def batch_loss(heads: MedusaHeads, frozen: Frozen, hidden: torch.Tensor, tokens: torch.Tensor, labels: torch.Tensor,
               decay: float) -> tuple[torch.Tensor, list[float]]:  # fmt: skip
    """hidden (N, H), tokens (N,), labels (N, K) in the training vocabulary's indices (frozen.train_labels; frozen
    a train_view) -> the decay-weighted sum of the heads' cross-entropies, and each head's top-1 within it."""
    logits = _logits(_states(heads, frozen, hidden, tokens), frozen.weight, frozen.bias)  # (K, N, V')
    total, top1 = logits.new_zeros(()), []
    for i in range(heads.num_heads):
        target = labels[:, i]
        valid = target != IGNORE
        if not bool(valid.any()):
            top1.append(float("nan"))
            continue
        total = total + decay**i * nn.functional.cross_entropy(logits[i], target, ignore_index=IGNORE)
        top1.append(float((logits[i].argmax(-1) == target)[valid].float().mean()))
    return total, top1


@torch.no_grad()
def evaluate(heads: MedusaHeads, frozen: Frozen, hidden: torch.Tensor, tokens: torch.Tensor, labels: torch.Tensor,
             step: int, chunk: int = 512) -> HeadAccuracy:  # fmt: skip
    """Top-1 and top-5 of every head on hidden (N, H) and tokens (N,) against labels (N, K): the full vocabulary,
    float32 logits, whatever vocabulary the training ran over."""
    k = heads.num_heads
    hits1, hits5, count = torch.zeros(k), torch.zeros(k), torch.zeros(k)
    weight32 = frozen.weight.float()
    for s in range(0, hidden.shape[0], chunk):
        logits = _logits(_states(heads, frozen, hidden[s : s + chunk], tokens[s : s + chunk]), weight32, frozen.bias)  # (K, n, V)
        target = labels[s : s + chunk].T  # (K, n)
        valid = target != IGNORE
        top5 = logits.topk(5, dim=-1).indices  # (K, n, 5)
        hits1 += ((top5[..., 0] == target) & valid).sum(-1)
        hits5 += ((top5 == target[..., None]).any(-1) & valid).sum(-1)
        count += valid.sum(-1)
    count = count.clamp_min(1)
    return HeadAccuracy(step, tuple((hits1 / count).tolist()), tuple((hits5 / count).tolist()), int(count[0]))


def batch_indices(step: int, n: int, batch_size: int, seed: int) -> torch.Tensor:
    """The positions of step ``step``: a pure function of (seed, step), so a resumed run sees the same batches.
    Each epoch is a seeded permutation of the n training positions."""
    start = step * batch_size
    epoch, offset = divmod(start, n)
    out, need = [], batch_size
    while need > 0:
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
        piece = perm[offset : offset + need]
        out.append(piece)
        need -= piece.shape[0]
        epoch, offset = epoch + 1, 0
    return torch.cat(out)


def learning_rate(step: int, config: TrainConfig) -> float:
    """Linear warm-up to lr, then cosine decay to 10% of it at the last step."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    return config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def _optimisation(config: TrainConfig) -> dict:
    """The settings a checkpoint must share with the run that resumes it (the rest only change logging)."""
    keep = ("num_heads", "num_layers", "steps", "lr", "warmup_steps", "batch_size", "seed", "decay", "matmul_dtype",
            "token_input", "train_vocab")
    return {k: getattr(config, k) for k in keep}


def _save_checkpoint(path: Path, step: int, heads: MedusaHeads, opt: torch.optim.Optimizer, config: TrainConfig,
                     data_key: str, curve: list, evals: list, train_s: float) -> None:  # fmt: skip
    state = dict(step=step, heads=heads.state_dict(), optimizer=opt.state_dict(), optimisation=_optimisation(config),
                 data_key=data_key, curve=curve, evals=[asdict(e) for e in evals], train_s=train_s)  # fmt: skip
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def read_checkpoint(path: Path, optimisation: dict, data_key: str | None = None) -> dict:
    """A checkpoint of the same run (the same optimisation settings and, when given, the same data), for --resume;
    ValueError naming what differs. Medusa's and EAGLE's training both read theirs here."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError as exc:
        raise ValueError(f"--resume: there is no checkpoint at {path}; run without --resume to start.") from exc
    except Exception as exc:  # a truncated or foreign file
        raise ValueError(f"--resume: {path} is not a readable checkpoint ({type(exc).__name__}).") from exc
    if data_key is not None and state.get("data_key") != data_key:
        raise ValueError(f"--resume: {path} was trained on other data (another target or data settings).")
    differ = {k: (v, state["optimisation"].get(k)) for k, v in optimisation.items() if state["optimisation"].get(k) != v}
    if differ:
        what = ", ".join(f"{k} {new} (checkpoint: {old})" for k, (new, old) in differ.items())
        raise ValueError(f"--resume: the settings differ from the checkpoint's: {what}.")
    return state


def _load_checkpoint(path: Path, heads: MedusaHeads, opt: torch.optim.Optimizer, config: TrainConfig, data_key: str) -> dict:
    """Restore heads and optimiser from a checkpoint of the same run; ValueError naming what differs."""
    state = read_checkpoint(path, _optimisation(config), data_key)
    heads.load_state_dict(state["heads"])
    opt.load_state_dict(state["optimizer"])
    return state


def checkpoint_path(cache_dir: Path, config: TrainConfig, fingerprint: str) -> Path:
    """Where a run's checkpoint lives: in the cache, named by its data, so --resume finds it again."""
    return Path(cache_dir) / f"medusa-checkpoint-{config.data_key(fingerprint)}.pt"


def train_heads(lm: LoadedModel, data: HeadsData, config: TrainConfig, checkpoint: Path, resume: bool = False,
                progress: bool = True, stop_after: int | None = None) -> TrainResult:  # fmt: skip
    """Train K heads on ``data``, checkpointing every checkpoint_every steps; stop_after: stop at that step (tests)."""
    from tqdm.auto import tqdm

    from specviz.models.medusa import MedusaHeads, target_fingerprint

    fingerprint = target_fingerprint(lm.model.get_input_embeddings().weight)
    data_key, ckpt = config.data_key(fingerprint), Path(checkpoint)
    frozen = frozen_parts(lm, config, data)
    train_view, train_labels = frozen.train_view(), frozen.train_labels(data.train_labels)
    heads = MedusaHeads(int(data.train_hidden.shape[1]), config.num_heads, config.num_layers, token_input=config.token_input)

    def held_out(step: int, limit: int | None = None) -> HeadAccuracy:
        rows = slice(0, limit)
        return evaluate(heads, frozen, data.heldout_hidden[rows], data.heldout_tokens[rows], data.heldout_labels[rows], step)

    params = [p for p in heads.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=config.lr, weight_decay=0.0)
    step, curve, evals, train_s = 0, [], [], 0.0
    if resume:
        state = _load_checkpoint(ckpt, heads, opt, config, data_key)
        step, curve, train_s = int(state["step"]), list(state["curve"]), float(state["train_s"])
        evals = [HeadAccuracy(e["step"], tuple(e["top1"]), tuple(e["top5"]), e["positions"]) for e in state["evals"]]
    else:
        evals.append(held_out(0, config.eval_positions))
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    last = config.steps if stop_after is None else min(config.steps, stop_after)
    bar = tqdm(total=config.steps, initial=step, desc="training heads", unit="step", disable=not progress)
    n, start = data.train_hidden.shape[0], time.perf_counter()
    heads.train()
    while step < last:
        idx = batch_indices(step, n, config.batch_size, config.seed)
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, config)
        loss, top1 = batch_loss(heads, train_view, data.train_hidden[idx], data.train_tokens[idx], train_labels[idx], config.decay)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        curve.append(dict(step=step, loss=round(float(loss.detach()), 4), top1=[round(a, 4) for a in top1]))
        bar.set_postfix(loss=f"{float(loss.detach()):.3f}", top1="/".join(f"{a:.2f}" for a in top1))
        bar.update(1)
        if step % config.eval_every == 0 and step < config.steps:
            evals.append(held_out(step, config.eval_positions))
            bar.write(f"step {step}: held-out top-1 " + " ".join(f"{a:.3f}" for a in evals[-1].top1))
        if step % config.checkpoint_every == 0 or step == last:
            _save_checkpoint(ckpt, step, heads, opt, config, data_key, curve, evals, train_s + time.perf_counter() - start)
    bar.close()
    train_s += time.perf_counter() - start
    heads.eval()
    if step == config.steps:
        evals.append(held_out(step))
    facts = dict(data.facts, train_s=round(train_s, 1), train_vocab=None if frozen.vocab is None else int(frozen.vocab.shape[0]))
    return TrainResult(heads.requires_grad_(False), curve, evals, facts, fingerprint, lm.vocab_size)


def ship(result: TrainResult, config: TrainConfig, out: Path, base_model: str, command: str = "", data: HeadsData | None = None) -> None:
    """Write the heads (Medusa's layout, float16), their training facts in config.json and the loss curve; with the
    data, also the token counts a draft vocabulary is cut from (token_counts.safetensors) and their coverage."""
    from specviz.models.medusa import save_heads

    if data is not None:
        result.facts["draft_vocab_coverage"] = write_token_counts(
            out, data.train_tokens, data.heldout_tokens, result.vocab_size, "the target's own tokens in the heads' training data"
        )
    final = result.evals[-1]
    extra = dict(
        training=dict(
            recipe="self-distillation: the target's own greedy and sampled continuations of specviz's training prompts",
            labels="the target's argmax at position t+i for head i (cross-entropy over "
            + ("the whole vocabulary)" if config.train_vocab == "full" else "the tokens the training data has)"),
            config=asdict(config), command=command, **{k: v for k, v in result.facts.items() if k != "cache"},
        ),
        heldout_top1=[round(a, 4) for a in final.top1],
        heldout_top5=[round(a, 4) for a in final.top5],
    )  # fmt: skip
    save_heads(result.heads, out, base_model, result.fingerprint, extra)
    curve = dict(curve=result.curve, evals=[asdict(e) for e in result.evals])
    (Path(out) / CURVE_FILE).write_text(json.dumps(curve) + "\n", encoding="utf-8")

