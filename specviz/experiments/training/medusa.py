"""Train Medusa heads for a target by self-distillation: the target's own predictions are the labels.

Data (training/own_text.py): the target's own continuations, greedy and sampled, of the training prompts; whole
prompts are held out for the evaluation. At every generated position the target's post-norm last hidden state h_t
and its argmax a_t (its prediction for token t+1) are kept; head i (1-based) learns to predict a_{t+i} from h_t,
i.e. token t+1+i as the target itself would choose it given the text so far.

Training: AdamW on the heads' blocks only (and the token input, for heads that read the newest token: the
default); the LM head and the input embedding are the target's own, frozen (a plain Linear: load the target in
float32). Losses are cross-entropies summed over heads with Medusa's decaying weights decay**(i-1). The LM head
(V x H) dominates the cost, so by default the softmax runs over the training vocabulary: every token that is a
label or an input somewhere in the training data (8,592 of SmolLM2's 49,152 for the shipped heads: the LM head's
matmul 5.7x smaller); the held-out evaluation always scores the full vocabulary, so a token left out could only show up there
as a miss. The matmul is float32 by default: on a CPU without native bfloat16 (AVX2 only) a bfloat16 matmul
ran 20x slower here. The loop, the schedule and the checkpoints are training/loop.py's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from specviz.experiments.training.config import TrainConfig
from specviz.experiments.training.loop import Checkpoint, Run, batch_indices, optimise, project
from specviz.experiments.training.own_text import cached_data
from specviz.experiments.training.save import write_curve, write_token_counts

if TYPE_CHECKING:  # specviz.models imports transformers
    from specviz.models import LoadedModel
    from specviz.models.medusa import MedusaHeads

IGNORE = -100  # a label past the end of its continuation: no loss, no accuracy


# -- the data: hidden states, the tokens fed, each head's label ----------------------------------------------------


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


# -- the loss, the evaluation ---------------------------------------------------------------------------------------


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


def batch_loss(heads: MedusaHeads, frozen: Frozen, hidden: torch.Tensor, tokens: torch.Tensor, labels: torch.Tensor,
               decay: float) -> tuple[torch.Tensor, list[float]]:  # fmt: skip
    """hidden (N, H), tokens (N,), labels (N, K) in the training vocabulary's indices (frozen.train_labels; frozen
    a train_view) -> the decay-weighted sum of the heads' cross-entropies, and each head's top-1 within it."""
    logits = project(_states(heads, frozen, hidden, tokens), frozen.weight, frozen.bias)  # (K, N, V')
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
        logits = project(_states(heads, frozen, hidden[s : s + chunk], tokens[s : s + chunk]), weight32, frozen.bias)  # (K, n, V)
        target = labels[s : s + chunk].T  # (K, n)
        valid = target != IGNORE
        top5 = logits.topk(5, dim=-1).indices  # (K, n, 5)
        hits1 += ((top5[..., 0] == target) & valid).sum(-1)
        hits5 += ((top5 == target[..., None]).any(-1) & valid).sum(-1)
        count += valid.sum(-1)
    count = count.clamp_min(1)
    return HeadAccuracy(step, tuple((hits1 / count).tolist()), tuple((hits5 / count).tolist()), int(count[0]))


# -- training -------------------------------------------------------------------------------------------------------


def _optimisation(config: TrainConfig) -> dict:
    """The settings a checkpoint must share with the run that resumes it (the rest only change logging)."""
    keep = ("num_heads", "num_layers", "steps", "lr", "warmup_steps", "batch_size", "seed", "decay", "matmul_dtype",
            "token_input", "train_vocab")
    return {k: getattr(config, k) for k in keep}


def checkpoint_path(cache_dir: Path, config: TrainConfig, fingerprint: str) -> Path:
    """Where a run's checkpoint lives: in the cache, named by its data, so --resume finds it again."""
    return Path(cache_dir) / f"medusa-checkpoint-{config.data_key(fingerprint)}.pt"


def train_heads(lm: LoadedModel, data: HeadsData, config: TrainConfig, checkpoint: Path, resume: bool = False,
                progress: bool = True, stop_after: int | None = None) -> TrainResult:  # fmt: skip
    """Train K heads on ``data``, checkpointing every checkpoint_every steps; stop_after: stop at that step (tests)."""
    from specviz.models.medusa import MedusaHeads, target_fingerprint

    fingerprint = target_fingerprint(lm.model.get_input_embeddings().weight)
    frozen = frozen_parts(lm, config, data)
    train_view, train_labels = frozen.train_view(), frozen.train_labels(data.train_labels)
    heads = MedusaHeads(int(data.train_hidden.shape[1]), config.num_heads, config.num_layers, token_input=config.token_input)
    n = data.train_hidden.shape[0]

    def held_out(step: int, limit: int | None = None) -> HeadAccuracy:
        rows = slice(0, limit)
        return evaluate(heads, frozen, data.heldout_hidden[rows], data.heldout_tokens[rows], data.heldout_labels[rows], step)

    def train_step(step: int) -> tuple[torch.Tensor, dict, str]:
        idx = batch_indices(step, n, config.batch_size, config.seed)
        loss, top1 = batch_loss(heads, train_view, data.train_hidden[idx], data.train_tokens[idx], train_labels[idx], config.decay)
        return loss, dict(top1=[round(a, 4) for a in top1]), "/".join(f"{a:.2f}" for a in top1)

    def eval_line(run: Run) -> str:
        return f"step {run.step}: held-out top-1 " + " ".join(f"{a:.3f}" for a in run.evals[-1].top1)

    params = [p for p in heads.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=config.lr, weight_decay=0.0)
    ckpt = Checkpoint(Path(checkpoint), "heads", _optimisation(config), config.data_key(fingerprint))
    if resume:
        run = ckpt.restore(heads, opt, lambda e: HeadAccuracy(e["step"], tuple(e["top1"]), tuple(e["top5"]), e["positions"]))
    else:
        run = Run(evals=[held_out(0, config.eval_positions)])
    last = config.steps if stop_after is None else min(config.steps, stop_after)
    optimise(heads, opt, config, ckpt, run, train_step, held_out, eval_line, last, "training heads", progress)
    heads.eval()
    if run.step == config.steps:
        run.evals.append(held_out(run.step))
    facts = dict(data.facts, train_s=round(run.train_s, 1), train_vocab=None if frozen.vocab is None else int(frozen.vocab.shape[0]))
    return TrainResult(heads.requires_grad_(False), run.curve, run.evals, facts, fingerprint, lm.vocab_size)


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
    write_curve(out, result.curve, result.evals)

