"""Train an EAGLE head (specviz.models.eagle) for a target: feature regression plus token cross-entropy, as in the paper.

Data (offline, cached, resumable). Sequences of the target's own features: at every position t the target's
post-norm last hidden state f_t (float16), the token x_{t+1} that followed (the pair the head reads) and the
target's argmax a_{t+1} there. Two sources:

* the target's own continuations of specviz's training prompts: the very cache the Medusa heads train on
  (specviz.experiments.train_heads.cached_data; each continuation is one sequence), held out by prompt;
* teacher-forced text the machine has offline: Python's standard library (docstrings and source), and the
  documentation and licence texts under /usr/share/doc and /usr/share/common-licenses, cut into windows of
  ``window`` tokens; the target reads each window once and its features and argmaxes are kept (a forward pass,
  far cheaper than generating). Windows are saved batch by batch, so an interrupted run resumes; every
  heldout_every-th window is held out.

Training (EAGLE's loss). For a segment of a sequence the head reads (f_t + noise, x_{t+1}) at every t, with causal
attention over the segment, and predicts g_t: L = smoothL1(g_t, f_{t+1}) + w_cls * CE(p_{t+1}, softmax(LM(g_t))),
where p_{t+1} = softmax(LM(f_{t+1})) is the target's own distribution there (soft labels) and LM the frozen LM head
over the training vocabulary (the tokens the data has as inputs or labels: the cross-entropy's cost is the LM head's).
Noise is EAGLE's U(-noise, noise) on the input features. AdamW, warm-up then cosine decay, batches a pure function of
(seed, step): a run resumed from its checkpoint ends with the same weights.

Evaluation (the go/no-go gate of issue 34): the held-out first-draft-token top-1, i.e. with the target's true features
for every earlier position, whether argmax LM(g_t) over the full vocabulary is a_{t+1} (what a chain's first draft
needs to be accepted at temperature 0), and the draft step's cost (one layer over one position plus the LM head over
the draft vocabulary) as a fraction of the target's 1-token pass.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import math
import statistics
import sysconfig
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from specviz.experiments.train_heads import (
    CURVE_FILE,
    TrainConfig,
    cached_data,
    learning_rate,
    read_checkpoint,
    write_token_counts,
)

if TYPE_CHECKING:  # specviz.models imports transformers
    from specviz.models import LoadedModel
    from specviz.models.eagle import EagleHead

log = logging.getLogger(__name__)

TEACHER_VERSION = 1  # bump when the teacher-forced recipe changes, so old caches are not reused
DOC_ROOTS = ("/usr/share/doc", "/usr/share/common-licenses")
MAX_DOC_CHARS = 40_000  # one document contributes at most this much text (variety over one long file)
GATE_TOP1, GATE_STEP_COST = 0.55, 0.06  # issue 34's go/no-go: held-out first-draft-token top-1, draft step / pass


@dataclass(frozen=True)
class EagleConfig(TrainConfig):
    """An EAGLE training run: the own-text data recipe and optimisation of TrainConfig (batch_size: positions per step,
    a multiple of seg_len), plus the teacher-forced text and EAGLE's loss settings."""

    steps: int = 2000
    batch_size: int = 1024  # positions per step: batch_size // seg_len segments
    seg_len: int = 128  # positions per training segment (the head attends within it)
    teacher_tokens: int = 850_000  # teacher-forced positions to read (train + held out); 0: the target's own text only
    window: int = 256  # tokens per teacher-forced window
    noise: float = 0.1  # EAGLE's uniform noise on the input features
    cls_weight: float = 0.1  # EAGLE's w_cls: the token cross-entropy's weight beside the feature regression
    draft_vocab: int = 8192  # the V' the step cost is measured at (when the data gives token counts)

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("seg_len", "window"):
            if getattr(self, name) < 2:
                raise ValueError(f"{name} must be at least 2; got {getattr(self, name)}.")
        if self.batch_size % self.seg_len:
            raise ValueError(f"batch_size ({self.batch_size}) must be a multiple of seg_len ({self.seg_len}).")
        if self.teacher_tokens < 0 or self.draft_vocab < 0 or not (0 <= self.noise < 1) or self.cls_weight < 0:
            raise ValueError("teacher_tokens and draft_vocab must be >= 0, noise in [0, 1), cls_weight >= 0.")

    def teacher_key(self, fingerprint: str, with_budget: bool = True) -> str:
        recipe = dict(v=TEACHER_VERSION, target=fingerprint, window=self.window, gen_batch=self.gen_batch, seed=self.seed,
                      heldout_every=self.heldout_every, gen_dtype=self.gen_dtype)  # fmt: skip
        if with_budget:
            recipe["tokens"] = self.teacher_tokens
        return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


EAGLE_TINY = EagleConfig(steps=30, batch_size=64, seg_len=16, data_tokens=600, teacher_tokens=800, window=32, max_new_tokens=24,
                         gen_batch=8, warmup_steps=4, eval_every=15, eval_positions=512, checkpoint_every=15, lr=5e-3,
                         draft_vocab=16)  # fmt: skip
"""A config that trains on a tiny random model in seconds (the tests, and --tiny)."""


# -- the teacher-forced text --------------------------------------------------------------------------------------


def teacher_files(seed: int) -> list[Path]:
    """The offline text files, in a seeded order: the standard library's .py files, then docs and licences."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.rglob("*.py") if "site-packages" not in p.parts and "test" not in p.parts)
    for root in DOC_ROOTS:
        base = Path(root)
        if base.is_dir():
            files += sorted(p for p in base.rglob("*") if p.is_file() and _doc_name(p))
    order = torch.randperm(len(files), generator=torch.Generator().manual_seed(seed)).tolist()
    return [files[i] for i in order]


def _doc_name(path: Path) -> bool:
    name = path.name.lower()
    return name == "copyright" or name.startswith(("readme", "news", "changelog")) or path.parent.name == "common-licenses" or name.endswith(".txt")


def teacher_documents(seed: int) -> Iterator[str]:
    """Documents in the seeded order, each distinct text once: a .py file gives its docstrings (prose) and its source
    (code) as two documents; a doc file its text (gzip read), at most MAX_DOC_CHARS of each."""
    import ast

    seen: set[str] = set()
    for path in teacher_files(seed):
        try:
            raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
            continue
        docs = [text]
        if path.suffix == ".py":
            try:
                tree = ast.parse(text)
            except (SyntaxError, ValueError):
                tree = None
            nodes = [] if tree is None else [n for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
            docstrings = [d for d in (ast.get_docstring(n) for n in nodes) if d]
            docs = ["\n\n".join(docstrings), text]
        for doc in docs:
            doc = doc.strip()[:MAX_DOC_CHARS]
            digest = hashlib.sha256(doc.encode()).hexdigest()
            if len(doc) >= 200 and digest not in seen:
                seen.add(digest)
                yield doc


def teacher_windows(tokenizer, seed: int, window: int, budget: int) -> Iterator[list[int]]:
    """Windows of window + 1 token ids (the last one only a label) until ``budget`` positions, from teacher_documents."""
    total = 0
    for doc in teacher_documents(seed):
        ids = tokenizer(doc, add_special_tokens=False, verbose=False)["input_ids"]
        for s in range(0, len(ids) - 1, window):
            piece = ids[s : s + window + 1]
            if len(piece) < 9:  # a stub
                continue
            yield piece
            total += len(piece) - 1
            if total >= budget:
                return


@torch.inference_mode()
def read_windows(lm: LoadedModel, windows: Sequence[Sequence[int]]) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The target reads B windows (right-padded): per window ((T, H) float16 hidden states, (T,) argmax, (T,) the tokens
    that follow), T = its length - 1 (row t read token t, its label is token t + 1)."""
    model, dev = lm.model, lm.device
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
    t = max(len(w) for w in windows) - 1
    ids = torch.tensor([list(w[:-1]) + [pad] * (t - len(w) + 1) for w in windows], dtype=torch.long, device=dev)  # (B, T)
    mask = torch.tensor([[1] * (len(w) - 1) + [0] * (t - len(w) + 1) for w in windows], dtype=torch.long, device=dev)
    out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False, logits_to_keep=1)
    hidden = out.hidden_states[-1]  # (B, T, H) post-norm
    lm_head = model.get_output_embeddings()
    rows = []
    for b, w in enumerate(windows):
        n = len(w) - 1
        argmax = lm_head(hidden[b, :n])[..., : lm.vocab_size].argmax(-1)  # (n,), one window's (n, V) at a time
        rows.append((hidden[b, :n].to(torch.float16).cpu(), argmax.cpu(), torch.tensor(list(w[1:]), dtype=torch.long)))
    return rows


def teacher_data(lm: LoadedModel, config: EagleConfig, cache_dir: Path, progress: bool = True) -> dict:
    """The teacher-forced windows as cached ({"train", "heldout"} packed like the own-text cache, "facts"), read first
    when missing: each batch of windows saved as it is read, so an interrupted run resumes."""
    from tqdm.auto import tqdm

    from specviz.experiments.train_heads import _pack
    from specviz.models.medusa import target_fingerprint

    fingerprint = target_fingerprint(lm.model.get_input_embeddings().weight)
    path = Path(cache_dir) / f"eagle-teacher-{config.teacher_key(fingerprint)}.pt"
    if path.is_file():
        return torch.load(path, map_location="cpu", weights_only=True)
    parts = Path(cache_dir) / f"eagle-teacher-parts-{config.teacher_key(fingerprint, with_budget=False)}"
    bar = tqdm(total=config.teacher_tokens, desc="reading offline text", unit="tok", disable=not progress)
    train, heldout, seconds, total, batch, n = [], [], 0.0, 0, [], 0
    windows = teacher_windows(lm.tokenizer, config.seed, config.window, config.teacher_tokens)
    while True:
        batch = [w for _, w in zip(range(config.gen_batch), windows)]
        if not batch:
            break
        part = parts / f"batch-{n:05d}.pt"
        if part.is_file():
            saved = torch.load(part, map_location="cpu", weights_only=True)
            rows, took = list(zip(saved["hidden"], saved["argmax"], saved["tokens"])), float(saved["seconds"])
        else:
            start = time.perf_counter()
            rows = read_windows(lm, batch)
            took = time.perf_counter() - start
            parts.mkdir(parents=True, exist_ok=True)
            torch.save(dict(hidden=[r[0] for r in rows], argmax=[r[1] for r in rows], tokens=[r[2] for r in rows], seconds=took),
                       part.with_suffix(".tmp"))  # fmt: skip
            part.with_suffix(".tmp").replace(part)
        for j, row in enumerate(rows):
            index = n * config.gen_batch + j
            (heldout if index % config.heldout_every == config.heldout_every - 1 else train).append(row)
            total += row[0].shape[0]
            bar.update(row[0].shape[0])
        seconds, n = seconds + took, n + 1
    bar.close()
    facts = dict(windows=len(train) + len(heldout), positions=total, read_s=round(seconds, 1),
                 train_positions=sum(r[0].shape[0] for r in train), heldout_positions=sum(r[0].shape[0] for r in heldout))  # fmt: skip
    empty = dict(hidden=torch.zeros(0, lm.model.config.hidden_size, dtype=torch.float16), argmax=torch.zeros(0, dtype=torch.long),
                 tokens=torch.zeros(0, dtype=torch.long), lengths=[])  # fmt: skip
    cached = dict(train=_pack(train) if train else empty, heldout=_pack(heldout) if heldout else empty, facts=facts)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(cached, path.with_suffix(".tmp"))
    path.with_suffix(".tmp").replace(path)
    return cached


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
    from specviz.experiments.train_heads import batch_indices

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


def _project(states: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    out = (states.to(weight.dtype) @ weight.T).float()
    return out if bias is None else out + bias


def eagle_loss(head: EagleHead, frozen: Frozen, batch: Batch, config: EagleConfig, generator: torch.Generator | None = None) -> tuple[torch.Tensor, dict]:
    """EAGLE's loss on one batch, and its parts (regression, cross-entropy, train top-1) as floats."""
    feats = batch.features
    if generator is not None and config.noise > 0:
        feats = feats + (torch.rand(feats.shape, generator=generator) * 2 - 1) * config.noise
    positions = torch.arange(feats.shape[1])
    g = head(feats, frozen.embedding[batch.tokens], positions)  # (B, L, H)
    valid = batch.valid
    reg = nn.functional.smooth_l1_loss(g[valid], batch.next_features[valid], reduction="none").mean(-1).mean()
    logits = _project(g[valid], frozen.weight, frozen.bias)  # (n, V_t)
    with torch.no_grad():
        p_target = torch.softmax(_project(batch.next_features[valid], frozen.weight, frozen.bias), dim=-1)
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
             limit: int | None = None, draft_ids: torch.Tensor | None = None) -> EagleAccuracy:  # fmt: skip
    """Top-1 / top-5 of argmax LM(g_t) against a_{t+1}, the true features feeding every earlier position."""
    segs = seqs.segments(config.seg_len)
    hits1 = hits5 = hits_draft = count = 0
    for s in range(0, segs.shape[0], 8):  # 8 segments: (1024, V) float32 logits at a time
        batch = make_batch(seqs, segs[s : s + 8], config.seg_len)
        g = head(batch.features, frozen.embedding[batch.tokens], torch.arange(config.seg_len))[batch.valid]  # (n, H)
        logits = _project(g, frozen.full_weight.float(), frozen.full_bias)  # (n, V)
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
    return EagleAccuracy(step, step * config.batch_size, hits1 / n, hits5 / n, hits_draft / n if draft_ids is not None else None, count)


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
    curve: list[dict]  # per step: step, loss, reg, cls, train top-1
    evals: list[EagleAccuracy]
    facts: dict
    fingerprint: str


def _optimisation(config: EagleConfig) -> dict:
    keep = ("steps", "lr", "warmup_steps", "batch_size", "seg_len", "seed", "noise", "cls_weight", "matmul_dtype", "train_vocab")
    return {k: getattr(config, k) for k in keep}


def checkpoint_path(cache_dir: Path, config: EagleConfig, fingerprint: str) -> Path:
    key = hashlib.sha256(f"{config.data_key(fingerprint)}:{config.teacher_key(fingerprint)}".encode()).hexdigest()[:16]
    return Path(cache_dir) / f"eagle-checkpoint-{key}.pt"


def draft_ids_of(data: EagleData, size: int) -> torch.Tensor | None:
    """The draft vocabulary of ``size`` tokens the training data's own tokens give (None for size 0)."""
    from specviz.experiments.train_heads import count_tokens
    from specviz.models.vocab import draft_vocab_ids

    if not size:
        return None
    counts = count_tokens(torch.cat([data.train.tokens, data.train.argmax]), data.vocab_size)
    return draft_vocab_ids(counts, min(size, data.vocab_size))


def train_eagle(lm: LoadedModel, data: EagleData, config: EagleConfig, checkpoint: Path, resume: bool = False,
                progress: bool = True, stop_after: int | None = None) -> EagleResult:  # fmt: skip
    """Train the head on ``data``, checkpointing every checkpoint_every steps; stop_after: stop at that step (tests)."""
    from tqdm.auto import tqdm

    from specviz.models.eagle import EagleHead, EagleShape
    from specviz.models.medusa import target_fingerprint

    fingerprint = target_fingerprint(lm.model.get_input_embeddings().weight)
    frozen = frozen_parts(lm, config, data.train)
    head = EagleHead(EagleShape.of_target(lm.model.config), torch.Generator().manual_seed(config.seed))
    opt = torch.optim.AdamW(head.parameters(), lr=config.lr, weight_decay=0.0)
    segments, per_step = data.train.segments(config.seg_len), config.batch_size // config.seg_len
    draft_ids = draft_ids_of(data, config.draft_vocab)

    def held_out(step: int, limit: int | None = None) -> EagleAccuracy:
        return evaluate(head.eval(), frozen, data.heldout, config, step, limit, draft_ids)

    step, curve, evals, train_s = 0, [], [], 0.0
    ckpt = Path(checkpoint)
    if resume:
        state = _load_checkpoint(ckpt, head, opt, config)
        step, curve, train_s = int(state["step"]), list(state["curve"]), float(state["train_s"])
        evals = [EagleAccuracy(**e) for e in state["evals"]]
    else:
        evals.append(held_out(0, config.eval_positions))
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    last = config.steps if stop_after is None else min(config.steps, stop_after)
    bar = tqdm(total=config.steps, initial=step, desc="training the EAGLE head", unit="step", disable=not progress)
    start = time.perf_counter()
    while step < last:
        head.train()
        batch = make_batch(data.train, batch_segments(step, segments, per_step, config.seed), config.seg_len)
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, config)
        noise = torch.Generator().manual_seed(config.seed * 1_000_003 + step)  # a function of the step: resumable
        loss, parts = eagle_loss(head, frozen, batch, config, noise)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        curve.append(dict(step=step, loss=round(float(loss.detach()), 4), **{k: round(v, 4) for k, v in parts.items()}))
        bar.set_postfix(loss=f"{float(loss.detach()):.3f}", top1=f"{parts['top1']:.2f}")
        bar.update(1)
        if step % config.eval_every == 0 and step < config.steps:
            evals.append(held_out(step, config.eval_positions))
            bar.write(f"step {step} ({step * config.batch_size:,} positions): held-out first-token top-1 {evals[-1].top1:.3f}")
        if step % config.checkpoint_every == 0 or step == last:
            _save_checkpoint(ckpt, step, head, opt, config, curve, evals, train_s + time.perf_counter() - start)
    bar.close()
    train_s += time.perf_counter() - start
    if step == config.steps:
        evals.append(held_out(step))
    facts = dict(data.facts, train_s=round(train_s, 1), train_vocab=None if frozen.vocab is None else int(frozen.vocab.shape[0]))
    return EagleResult(head.eval().requires_grad_(False), curve, evals, facts, fingerprint)


def _save_checkpoint(path: Path, step: int, head, opt, config: EagleConfig, curve: list, evals: list, train_s: float) -> None:
    state = dict(step=step, head=head.state_dict(), optimizer=opt.state_dict(), optimisation=_optimisation(config),
                 curve=curve, evals=[asdict(e) for e in evals], train_s=train_s)  # fmt: skip
    torch.save(state, path.with_suffix(".tmp"))
    path.with_suffix(".tmp").replace(path)


def _load_checkpoint(path: Path, head, opt, config: EagleConfig) -> dict:
    state = read_checkpoint(path, _optimisation(config))
    head.load_state_dict(state["head"])
    opt.load_state_dict(state["optimizer"])
    return state


# -- the gate: the draft step's cost -------------------------------------------------------------------------------


def step_cost(target: LoadedModel, head: EagleHead, draft_ids: torch.Tensor | None, context: int = 256, repeats: int = 30) -> float:
    """One draft step (the layer over one position after ``context`` cached ones, then the LM head over the draft
    vocabulary) as a fraction of the target's 1-token pass after the same context: medians of interleaved calls."""
    import copy

    from specviz.models import HFCachedLM
    from specviz.models.eagle import EagleCache, logits_fn, step_fn
    from specviz.models.precision import FP16_WEIGHTS, pack_fp16_linears
    from specviz.models.vocab import ReducedHead

    model = target.model
    head = copy.deepcopy(head).to(target.device)
    if target.precision == FP16_WEIGHTS:
        pack_fp16_linears(head)
    hidden = int(model.config.hidden_size)
    ids = [(i * 7919) % target.vocab_size for i in range(context + 1)]
    lm = HFCachedLM(model, target.vocab_size)
    lm.extend(ids[:-1], last_only=True)
    forward = step_fn(head, model.get_input_embeddings())
    lm_head = model.get_output_embeddings() if draft_ids is None else ReducedHead(model.get_output_embeddings(), draft_ids.to(target.device))
    logits = logits_fn(lm_head, target.vocab_size, model.get_input_embeddings().weight.dtype)
    cache = EagleCache()
    forward(cache, torch.randn(context, hidden, device=target.device), torch.tensor(ids[1:], device=target.device),
            torch.arange(context, device=target.device), None)  # fmt: skip
    one = torch.randn(1, hidden, device=target.device)
    token, position = torch.tensor([ids[-1]], device=target.device), torch.tensor([context], device=target.device)

    def draft_step() -> None:
        logits(forward(cache, one, token, position, None))
        cache.crop(context)

    def target_pass() -> None:
        lm.extend([ids[-1]])
        lm.crop(context)

    times: dict[str, list[float]] = {"draft": [], "pass": []}
    for fn in (draft_step, target_pass):
        fn()  # warm-up
    for _ in range(repeats):
        for name, fn in (("draft", draft_step), ("pass", target_pass)):
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return statistics.median(times["draft"]) / statistics.median(times["pass"])


def gate_report(top1: float, cost: float, draft_vocab: int, positions_seen: int) -> tuple[bool, list[str]]:
    """Issue 34's go/no-go: (passed, the lines the command prints)."""
    ok1, ok2 = top1 >= GATE_TOP1, cost <= GATE_STEP_COST
    vocab = f"draft vocabulary {draft_vocab:,}" if draft_vocab else "full vocabulary"
    lines = [
        f"go/no-go after {positions_seen:,} training positions:",
        f"  held-out first-draft-token top-1 {top1:.3f} (gate >= {GATE_TOP1}): {'pass' if ok1 else 'FAIL'}",
        f"  draft step {cost:.3f} of a 1-token pass ({vocab}; gate <= {GATE_STEP_COST}): {'pass' if ok2 else 'FAIL'}",
        f"  -> {'GO' if ok1 and ok2 else 'NO-GO'}",
    ]
    return ok1 and ok2, lines


def ship_eagle(result: EagleResult, data: EagleData, config: EagleConfig, out: Path, base_model: str, command: str = "",
               gate: dict | None = None) -> list[dict]:  # fmt: skip
    """Write the head (float16 safetensors), config.json with every training fact and the gate, the training curve,
    and the token counts for a draft vocabulary; returns the coverage report."""
    from specviz.models.eagle import save_eagle

    out = Path(out)
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
    curve = dict(curve=result.curve, evals=[asdict(e) for e in result.evals])
    (out / CURVE_FILE).write_text(json.dumps(curve) + "\n", encoding="utf-8")
    return report


def scaling_table(evals: Sequence[EagleAccuracy]) -> list[tuple[int, float]]:
    """(positions seen, held-out top-1) per evaluation: the data-scaling curve of the model card."""
    return [(e.positions_seen, e.top1) for e in evals if not math.isnan(e.top1)]
