"""Train an EAGLE head (specviz.models.eagle) for a target: feature regression plus token cross-entropy, as in the paper.

Data. Sequences of the target's own features: at every position t the target's post-norm last hidden state f_t
(float16), the token x_{t+1} that followed (the pair the head reads) and the target's argmax a_{t+1} there, from two
sources: the target's own continuations of specviz's training prompts (training/own_text.py: the very cache the
Medusa heads train on, each continuation one sequence, held out by prompt) and teacher-forced offline text
(training/teacher.py).

Training (EAGLE's loss). For a segment of a sequence the head reads (f_t + noise, x_{t+1}) at every t, with causal
attention over the segment, and predicts g_t: L = smoothL1(g_t, f_{t+1}) + w_cls * CE(p_{t+1}, softmax(LM(g_t))),
where p_{t+1} = softmax(LM(f_{t+1})) is the target's own distribution there (soft labels) and LM the frozen LM head
over the training vocabulary (the tokens the data has as inputs or labels: the cross-entropy's cost is the LM head's).
Noise is EAGLE's U(-noise, noise) on the input features. The loop, the schedule and the checkpoints are
training/loop.py's: a run resumed from its checkpoint ends with the same weights.

Evaluation (the head's go/no-go gate, training/gate.py): the held-out first-draft-token top-1, i.e. with the
target's true features for every earlier position, whether argmax LM(g_t) over the full vocabulary is a_{t+1} (what a
chain's first draft needs to be accepted at temperature 0), and the draft step's cost as a fraction of the target's
1-token pass.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from specviz.experiments.training.config import EagleConfig
from specviz.experiments.training.loop import Checkpoint, Run, batch_indices, optimise, project
from specviz.experiments.training.own_text import cached_data
from specviz.experiments.training.save import CURVE_FILE, count_tokens, replaced_folder, write_curve, write_token_counts
from specviz.experiments.training.teacher import teacher_data

if TYPE_CHECKING:  # specviz.models imports transformers
    from specviz.models import LoadedModel
    from specviz.models.eagle import EagleHead


# -- sequences, segments, batches -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sequences:
    """Packed sequences: hidden (N, H) float16, tokens (N,) (x_{t+1} after row t), argmax (N,), and where each starts."""

    hidden: torch.Tensor
    tokens: torch.Tensor
    argmax: torch.Tensor
    lengths: tuple[int, ...]

    @classmethod
    def join(cls, *packs: dict) -> Sequences:
        packs = tuple(p for p in packs if p["lengths"])
        if not packs:
            raise ValueError("No training sequences: raise --data-tokens or --teacher-tokens.")
        return cls(torch.cat([p["hidden"] for p in packs]), torch.cat([p["tokens"] for p in packs]),
                   torch.cat([p["argmax"] for p in packs]), tuple(n for p in packs for n in p["lengths"]))  # fmt: skip

    @property
    def positions(self) -> int:
        """Positions with a next position to predict."""
        return sum(max(0, n - 1) for n in self.lengths)

    def segments(self, seg_len: int) -> torch.Tensor:
        """(S, 2) [start, length] of every segment of at most seg_len + 1 rows (seg_len predictions), sequence by sequence."""
        out, start = [], 0
        for n in self.lengths:
            for s in range(0, n - 1, seg_len):
                out.append((start + s, min(seg_len + 1, n - s)))
            start += n
        return torch.tensor(out, dtype=torch.long).view(-1, 2)


@dataclass(frozen=True)
class Batch:
    features: torch.Tensor  # (B, L, H) f_t
    tokens: torch.Tensor  # (B, L) x_{t+1}
    next_features: torch.Tensor  # (B, L, H) f_{t+1}
    labels: torch.Tensor  # (B, L) a_{t+1}
    valid: torch.Tensor  # (B, L) bool: t + 1 is in the segment


def make_batch(seqs: Sequences, segments: torch.Tensor, seg_len: int) -> Batch:
    """Stack segments (each [start, length]) into one right-padded batch of seg_len positions."""
    b, h = segments.shape[0], seqs.hidden.shape[1]
    feats, nxt = torch.zeros(b, seg_len, h), torch.zeros(b, seg_len, h)
    tokens, labels = torch.zeros(b, seg_len, dtype=torch.long), torch.zeros(b, seg_len, dtype=torch.long)
    valid = torch.zeros(b, seg_len, dtype=torch.bool)
    for i, (start, length) in enumerate(segments.tolist()):
        n = length - 1  # predictions in this segment
        rows = seqs.hidden[start : start + length].float()
        feats[i, :n], nxt[i, :n] = rows[:n], rows[1:length]
        tokens[i, :n], labels[i, :n] = seqs.tokens[start : start + n], seqs.argmax[start + 1 : start + length]
        valid[i, :n] = True
    return Batch(feats, tokens, nxt, labels, valid)


def batch_segments(step: int, segments: torch.Tensor, per_step: int, seed: int) -> torch.Tensor:
    """The segments of step ``step``: a pure function of (seed, step); each epoch a seeded permutation."""
    return segments[batch_indices(step, segments.shape[0], per_step, seed)]


# -- the loss, the evaluation ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Frozen:
    """The target's frozen parts: its LM head over the training vocabulary (V_t, H) [+ bias], the full head for the
    evaluation, the input embedding, and the training vocabulary (None: all)."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    full_weight: torch.Tensor
    full_bias: torch.Tensor | None
    embedding: torch.Tensor
    vocab: torch.Tensor | None

    def train_labels(self, labels: torch.Tensor) -> torch.Tensor:
        if self.vocab is None:
            return labels
        return torch.searchsorted(self.vocab, labels).clamp(max=self.vocab.shape[0] - 1)


def frozen_parts(lm: LoadedModel, config: EagleConfig, train: Sequences) -> Frozen:
    from specviz.models.vocab import lm_head_rows

    weight, bias = lm_head_rows(lm.model.get_output_embeddings())
    weight, bias = weight[: lm.vocab_size], None if bias is None else bias[: lm.vocab_size]
    embedding = lm.model.get_input_embeddings().weight.detach().float()
    vocab = None
    if config.train_vocab == "seen":
        vocab = torch.unique(torch.cat([train.tokens, train.argmax]).clamp(0, lm.vocab_size - 1))
    w = weight if vocab is None else weight[vocab]
    b = bias if vocab is None or bias is None else bias[vocab]
    dtype = getattr(torch, config.matmul_dtype)
    return Frozen(w.to(dtype), b, weight, bias, embedding, vocab)


def eagle_loss(head: EagleHead, frozen: Frozen, batch: Batch, config: EagleConfig, generator: torch.Generator | None = None) -> tuple[torch.Tensor, dict]:
    """EAGLE's loss on one batch, and its parts (regression, cross-entropy, train top-1) as floats."""
    feats = batch.features
    if generator is not None and config.noise > 0:
        feats = feats + (torch.rand(feats.shape, generator=generator) * 2 - 1) * config.noise
    positions = torch.arange(feats.shape[1])
    g = head(feats, frozen.embedding[batch.tokens], positions)  # (B, L, H)
    valid = batch.valid
    reg = nn.functional.smooth_l1_loss(g[valid], batch.next_features[valid], reduction="none").mean(-1).mean()
    logits = project(g[valid], frozen.weight, frozen.bias)  # (n, V_t)
    with torch.no_grad():
        p_target = torch.softmax(project(batch.next_features[valid], frozen.weight, frozen.bias), dim=-1)
    cls = -(p_target * torch.log_softmax(logits, dim=-1)).sum(-1).mean()
    top1 = float((logits.argmax(-1) == frozen.train_labels(batch.labels[valid])).float().mean())
    return reg + config.cls_weight * cls, dict(reg=float(reg.detach()), cls=float(cls.detach()), top1=top1)


@dataclass(frozen=True)
class EagleAccuracy:
    """Held-out first-draft-token accuracy at one step."""

    step: int
    positions_seen: int  # training positions seen so far (steps x batch_size): the data-scaling axis
    top1: float  # over the full vocabulary
    top5: float
    top1_draft_vocab: float | None  # the argmax over the draft vocabulary only (None: no counts)
    positions: int  # held-out positions scored


@torch.no_grad()
def evaluate(head: EagleHead, frozen: Frozen, seqs: Sequences, config: EagleConfig, step: int,
             limit: int | None = None, draft_ids: torch.Tensor | None = None, before: Start | None = None) -> EagleAccuracy:  # fmt: skip
    """Top-1 / top-5 of argmax LM(g_t) against a_{t+1}, the true features feeding every earlier position; ``step`` is
    this run's, the accuracy's step and positions seen count the earlier stages too (``before``)."""
    segs = seqs.segments(config.seg_len)
    hits1 = hits5 = hits_draft = count = 0
    for s in range(0, segs.shape[0], 8):  # 8 segments: (1024, V) float32 logits at a time
        batch = make_batch(seqs, segs[s : s + 8], config.seg_len)
        g = head(batch.features, frozen.embedding[batch.tokens], torch.arange(config.seg_len))[batch.valid]  # (n, H)
        logits = project(g, frozen.full_weight.float(), frozen.full_bias)  # (n, V)
        labels = batch.labels[batch.valid]
        top5 = logits.topk(5, dim=-1).indices
        hits1 += int((top5[:, 0] == labels).sum())
        hits5 += int((top5 == labels[:, None]).any(-1).sum())
        if draft_ids is not None:
            hits_draft += int((draft_ids[logits[:, draft_ids].argmax(-1)] == labels).sum())
        count += int(labels.numel())
        if limit is not None and count >= limit:
            break
    n = max(1, count)
    steps, seen = (before.steps, before.positions_seen) if before is not None else (0, 0)
    return EagleAccuracy(steps + step, seen + step * config.batch_size, hits1 / n, hits5 / n,
                         hits_draft / n if draft_ids is not None else None, count)  # fmt: skip


# -- training -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EagleData:
    train: Sequences
    heldout: Sequences
    facts: dict
    vocab_size: int


def load_or_make_eagle_data(lm: LoadedModel, config: EagleConfig, cache_dir: Path, progress: bool = True) -> EagleData:
    """The target's own continuations (the Medusa heads' cache) and the teacher-forced windows, as sequences."""
    own = cached_data(lm, config, cache_dir, progress)
    teacher = teacher_data(lm, config, cache_dir, progress) if config.teacher_tokens else None
    packs = [own] + ([teacher] if teacher else [])
    train = Sequences.join(*(p["train"] for p in packs))
    heldout = Sequences.join(*(p["heldout"] for p in packs))
    facts = dict(own_text={k: v for k, v in own["facts"].items() if k != "cache"}, teacher_forced=teacher["facts"] if teacher else None,
                 train_positions=train.positions, heldout_positions=heldout.positions)  # fmt: skip
    return EagleData(train, heldout, facts, lm.vocab_size)


@dataclass(frozen=True)
class EagleResult:
    head: EagleHead
    curve: list[dict]  # per step, every stage: step (counting earlier stages), loss, reg, cls, train top-1
    evals: list[EagleAccuracy]  # every stage's, oldest first
    facts: dict
    fingerprint: str


# -- continuing a trained head (--init-from) --------------------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    """A trained head a run continues from (--init-from): its weights and its training so far, all read before
    anything is written (the run may write its result into the same folder)."""

    folder: str
    weights: dict[str, torch.Tensor]  # float32 (float16 on disk)
    digest: str  # sha256 of the weights file: a continuation's checkpoint belongs to this start only
    steps: int  # optimiser steps so far, every earlier stage
    positions_seen: int  # training positions seen so far (the data-scaling axis goes on from here)
    curve: list[dict]  # training_curve.json's per-step rows (empty when the folder has none)
    evals: list[EagleAccuracy]
    stages: list[dict]  # each earlier stage's training facts and result, oldest first


def read_start(folder: Path, lm: LoadedModel) -> Start:
    """The head in ``folder`` and its history, for a run on ``lm``; HeadsError (a ValueError) when it was trained for
    another target or has another shape than ``lm``'s head would."""
    import json

    from specviz.models.eagle import EagleShape, load_eagle, read_eagle_info
    from specviz.models.medusa import HeadsError, target_fingerprint

    folder = Path(folder)
    shape, info = EagleShape.of_target(lm.model.config), read_eagle_info(folder)
    fingerprint = target_fingerprint(lm.model.get_input_embeddings().weight)
    if info.target_fingerprint != fingerprint:
        raise HeadsError(f"--init-from: the head in {folder} was trained for {info.base_model} (target "
                         f"{info.target_fingerprint or 'not recorded'}), not for {lm.name} (target {fingerprint}).")  # fmt: skip
    if info.shape != shape:
        raise HeadsError(f"--init-from: the head in {folder} has the shape {asdict(info.shape)}; {lm.name}'s is {asdict(shape)}.")
    head = load_eagle(folder, shape, fingerprint, lm.name)
    saved = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    training = saved.get("training") or {}
    recipe = training.get("config") or {}
    steps = training.get("steps_total", recipe.get("steps"))
    seen = training.get("positions_seen", None if steps is None or "batch_size" not in recipe else steps * recipe["batch_size"])
    if not isinstance(steps, int) or not isinstance(seen, int):
        raise HeadsError(f"--init-from: {folder}/config.json does not say how far the head was trained (training.config.steps).")
    curve = folder / CURVE_FILE
    history = json.loads(curve.read_text(encoding="utf-8")) if curve.is_file() else {}
    evals = [EagleAccuracy(**e) for e in history.get("evals", [])]
    stage = {k: v for k, v in training.items() if k != "previous_training"}
    stage |= {k: saved[k] for k in ("heldout_top1", "heldout_top5", "heldout_top1_draft_vocab", "gate") if k in saved}
    digest = hashlib.sha256((folder / "eagle_head.safetensors").read_bytes()).hexdigest()[:16]
    return Start(str(folder), {k: v.clone() for k, v in head.state_dict().items()}, digest, steps, seen,
                 list(history.get("curve", [])), evals, list(training.get("previous_training", [])) + [stage])  # fmt: skip


def _optimisation(config: EagleConfig, start: Start | None = None) -> dict:
    keep = ("steps", "lr", "warmup_steps", "batch_size", "seg_len", "seed", "noise", "cls_weight", "matmul_dtype", "train_vocab")
    return {k: getattr(config, k) for k in keep} | ({"init_from": start.digest} if start else {})


def checkpoint_path(cache_dir: Path, config: EagleConfig, fingerprint: str, start: Start | None = None) -> Path:
    """The run's checkpoint: keyed by its data and, for a continuation, by the head it starts from."""
    name = f"{config.data_key(fingerprint)}:{config.teacher_key(fingerprint)}" + (f":{start.digest}" if start else "")
    key = hashlib.sha256(name.encode()).hexdigest()[:16]
    return Path(cache_dir) / f"eagle-checkpoint-{key}.pt"


def draft_ids_of(data: EagleData, size: int) -> torch.Tensor | None:
    """The draft vocabulary of ``size`` tokens the training data's own tokens give (None for size 0)."""
    from specviz.models.vocab import draft_vocab_ids

    if not size:
        return None
    counts = count_tokens(torch.cat([data.train.tokens, data.train.argmax]), data.vocab_size)
    return draft_vocab_ids(counts, min(size, data.vocab_size))


def train_eagle(lm: LoadedModel, data: EagleData, config: EagleConfig, checkpoint: Path, resume: bool = False,
                progress: bool = True, stop_after: int | None = None, start: Start | None = None) -> EagleResult:  # fmt: skip
    """Train the head on ``data``, checkpointing every checkpoint_every steps; stop_after: stop at that step (tests).
    ``start``: continue that head (read_start) instead of a fresh one; its curve goes on from where it stopped, with
    the starting head evaluated on this data's whole held-out set at the join."""
    from specviz.models.eagle import EagleHead, EagleShape
    from specviz.models.medusa import target_fingerprint

    fingerprint = target_fingerprint(lm.model.get_input_embeddings().weight)
    frozen = frozen_parts(lm, config, data.train)
    head = EagleHead(EagleShape.of_target(lm.model.config), torch.Generator().manual_seed(config.seed))
    if start is not None:
        head.load_state_dict(start.weights)
    opt = torch.optim.AdamW(head.parameters(), lr=config.lr, weight_decay=0.0)
    segments, per_step = data.train.segments(config.seg_len), config.batch_size // config.seg_len
    draft_ids = draft_ids_of(data, config.draft_vocab)

    def held_out(step: int, limit: int | None = None) -> EagleAccuracy:
        return evaluate(head.eval(), frozen, data.heldout, config, step, limit, draft_ids, start)

    def train_step(step: int) -> tuple[torch.Tensor, dict, str]:
        batch = make_batch(data.train, batch_segments(step, segments, per_step, config.seed), config.seg_len)
        noise = torch.Generator().manual_seed(config.seed * 1_000_003 + step)  # a function of the step: resumable
        loss, parts = eagle_loss(head, frozen, batch, config, noise)
        return loss, {k: round(v, 4) for k, v in parts.items()}, f"{parts['top1']:.2f}"

    def eval_line(run: Run) -> str:
        e = run.evals[-1]
        return f"step {e.step} ({e.positions_seen:,} positions): held-out first-token top-1 {e.top1:.3f}"

    ckpt = Checkpoint(Path(checkpoint), "head", _optimisation(config, start))
    if resume:
        run = ckpt.restore(head, opt, lambda e: EagleAccuracy(**e))
    else:  # a continuation's join point: the starting head on all of this (larger) held-out set
        run = Run(evals=[held_out(0, config.eval_positions if start is None else None)])
    last = config.steps if stop_after is None else min(config.steps, stop_after)
    optimise(head, opt, config, ckpt, run, train_step, held_out, eval_line, last, "training the EAGLE head", progress)
    if run.step == config.steps:
        run.evals.append(held_out(run.step))
    facts = dict(data.facts, train_s=round(run.train_s, 1), train_vocab=None if frozen.vocab is None else int(frozen.vocab.shape[0]))
    curve, evals = run.curve, run.evals
    steps_before, seen_before = (start.steps, start.positions_seen) if start else (0, 0)
    facts |= dict(steps_total=steps_before + run.step, positions_seen=seen_before + run.step * config.batch_size)
    if start is not None:
        curve = start.curve + [dict(row, step=start.steps + row["step"]) for row in run.curve]
        evals = start.evals + run.evals
        facts |= dict(init_from=dict(folder=start.folder, weights_sha256=start.digest, steps=start.steps,
                                     positions_seen=start.positions_seen, heldout_positions=run.evals[0].positions,
                                     heldout_top1=round(run.evals[0].top1, 4)),
                      previous_training=start.stages)  # fmt: skip
    return EagleResult(head.eval().requires_grad_(False), curve, evals, facts, fingerprint)


def ship_eagle(result: EagleResult, data: EagleData, config: EagleConfig, out: Path, base_model: str, command: str = "",
               gate: dict | None = None) -> list[dict]:  # fmt: skip
    """Write the head (float16 safetensors), config.json with every training fact and the gate, the training curve,
    and the token counts for a draft vocabulary; returns the coverage report."""
    with replaced_folder(Path(out)) as folder:  # all or nothing: ``out`` may be the folder the run started from
        return _write_eagle(result, data, config, folder, base_model, command, gate)


def _write_eagle(result: EagleResult, data: EagleData, config: EagleConfig, out: Path, base_model: str, command: str,
                 gate: dict | None) -> list[dict]:  # fmt: skip
    from specviz.models.eagle import save_eagle

    report = write_token_counts(out, torch.cat([data.train.tokens, data.train.argmax]), data.heldout.argmax, data.vocab_size,
                                "the target's own tokens and its argmax on teacher-forced text, in the head's training data")  # fmt: skip
    final = result.evals[-1]
    extra = dict(
        training=dict(
            recipe="EAGLE: feature regression (smooth L1) + w_cls * token cross-entropy against the target's own distribution, "
            "on the target's own continuations and teacher-forced offline text",
            config=asdict(config), command=command, **result.facts, draft_vocab_coverage=report,
        ),
        heldout_top1=round(final.top1, 4), heldout_top5=round(final.top5, 4),
        heldout_top1_draft_vocab=None if final.top1_draft_vocab is None else round(final.top1_draft_vocab, 4),
        gate=gate or {},
    )  # fmt: skip
    save_eagle(result.head, out, base_model, result.fingerprint, extra)
    write_curve(out, result.curve, result.evals)
    return report


def scaling_table(evals: Sequence[EagleAccuracy]) -> list[tuple[int, float, int]]:
    """(positions seen, held-out top-1, held-out positions scored) per evaluation, every stage's: the data-scaling
    curve of the model card (a continuation's first row is its starting head on the new, larger held-out set)."""
    return [(e.positions_seen, e.top1, e.positions) for e in evals if not math.isnan(e.top1)]
