"""The target's own text, the data both kinds of head train on (self-distillation): its continuations of specviz's
training prompts, with its post-norm last hidden state, its argmax and the token it committed at every position.

The training prompts are templates over many topics (assets/training_prompts.json), never a benchmark prompt
(assets/prompts.json); every heldout_every-th prompt is held out whole. Continuations are generated in batches, each
saved as it is made (an interrupted generation resumes), then packed into one cache file keyed by the target's
fingerprint and the data recipe (TrainConfig.data_key). The packed rows and the part files are also the teacher-forced
text's format (training/teacher.py).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from specviz.experiments.training.config import TrainConfig
from specviz.experiments.training.save import save_atomic

if TYPE_CHECKING:  # specviz.models imports transformers
    from specviz.models import LoadedModel

log = logging.getLogger(__name__)

# -- the training prompts: templates over topics, none of them a benchmark prompt --------------------------------

# The templates and their subjects, in groups. The cached data and the shipped heads were made from exactly this list:
# a change to it needs DATA_VERSION (training/config.py) bumped; tests/test_train_heads.py pins both.
TRAINING_PROMPTS = Path(__file__).resolve().parents[3] / "assets" / "training_prompts.json"


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


# -- the data: the target's own continuations, its hidden states and argmaxes -------------------------------------


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
    saved = read_part(path)
    if saved is not None:
        return saved
    sampled_every = 0 if config.sampled_fraction == 0 else max(1, round(1 / config.sampled_fraction))
    temperature = config.temperature if sampled_every and n % sampled_every == sampled_every - 1 else 0.0
    gen = torch.Generator(device=lm.device).manual_seed(config.seed * 1_000_003 + n)  # per batch: resumable
    start = time.perf_counter()
    encoded = [encode_prompt(lm.tokenizer, p, chat=config.chat) for p in prompts]
    rows = continue_batch(lm, encoded, config.max_new_tokens, temperature, gen)
    seconds = time.perf_counter() - start
    write_part(path, rows, seconds)
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
            (heldout if is_held_out(used + j, config.heldout_every) else train).append(row)
            total += row[0].shape[0]
            bar.update(row[0].shape[0])
        used, seconds = used + len(batch), seconds + took
    bar.close()
    if total < config.data_tokens:
        log.warning("The training prompts gave %d positions, fewer than the %d asked for.", total, config.data_tokens)
    facts = dict(prompts=used, positions=total, generation_s=round(seconds, 1), gen_precision=lm.precision,
                 train_positions=sum(r[0].shape[0] for r in train), heldout_positions=sum(r[0].shape[0] for r in heldout))  # fmt: skip
    return train, heldout, facts


# -- the cache's format, shared with the teacher-forced text -------------------------------------------------------


def is_held_out(index: int, every: int) -> bool:
    """Whether the index-th prompt (or window) is held out: every ``every``-th one."""
    return index % every == every - 1


def read_part(path: Path) -> tuple[list, float] | None:
    """A saved batch of rows [((M, H) float16, (M,) argmax, (M,) tokens)] and the seconds it took; None if not saved."""
    if not path.is_file():
        return None
    saved = torch.load(path, map_location="cpu", weights_only=True)
    return list(zip(saved["hidden"], saved["argmax"], saved["tokens"])), float(saved["seconds"])


def write_part(path: Path, rows: list, seconds: float) -> None:
    """Save one batch of rows as it is made, so an interrupted run resumes from the next batch."""
    path.parent.mkdir(parents=True, exist_ok=True)
    save_atomic(dict(hidden=[r[0] for r in rows], argmax=[r[1] for r in rows], tokens=[r[2] for r in rows], seconds=seconds), path)


def pack(rows: list) -> dict:
    """Rows of (hidden, argmax, token) -> one (N, H) float16 tensor, two (N,) tensors and the rows' lengths."""
    return dict(hidden=torch.cat([r[0] for r in rows]), argmax=torch.cat([r[1] for r in rows]), tokens=torch.cat([r[2] for r in rows]),
                lengths=[int(r[0].shape[0]) for r in rows])  # fmt: skip


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
        cached = dict(train=pack(train), heldout=pack(heldout), facts=facts)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_atomic(cached, path)
    cached["facts"] = dict(cached["facts"], cache=str(path))
    return cached

