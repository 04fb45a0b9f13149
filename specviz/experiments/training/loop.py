"""What every training run shares: the learning-rate schedule, batches that are a pure function of (seed, step), the
frozen LM head's matmul, checkpoints, and the optimisation loop itself (schedule, step, log, evaluate, checkpoint).

Each kind of head (training/medusa.py, training/eagle.py) hands the loop its own step (its loss on that step's
batch) and its own held-out evaluation. Because batches, noise and the schedule depend only on the seed and the step,
a run resumed from its checkpoint ends with the same weights as an uninterrupted one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from specviz.experiments.training.config import TrainConfig
from specviz.experiments.training.save import save_atomic

TrainStep = Callable[[int], tuple[torch.Tensor, dict, str]]
"""step -> (the loss to minimise, the training curve's other columns at this step, top-1 as the progress bar shows it)."""
HeldOut = Callable[[int, int | None], Any]
"""(step, at most this many positions or None: all) -> the held-out accuracy (a dataclass)."""


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



def project(states: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """(..., H) states -> (..., V) float32 logits through the frozen LM head (weight (V, H) in the matmul's dtype)."""
    out = (states.to(weight.dtype) @ weight.T).float()
    return out if bias is None else out + bias


# -- checkpoints ----------------------------------------------------------------------------------------------------


@dataclass
class Run:
    """A run's progress: what a checkpoint keeps and a resumed run starts from."""

    step: int = 0
    curve: list[dict] = field(default_factory=list)  # per step: step, loss and the kind's columns
    evals: list = field(default_factory=list)  # the held-out accuracies so far (dataclasses)
    train_s: float = 0.0  # seconds spent training, over every resumption


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
    saved = state["optimisation"]  # a key on one side only differs too (a continuation's init_from against a fresh run)
    differ = {k: (optimisation.get(k), saved.get(k)) for k in optimisation | saved if saved.get(k) != optimisation.get(k)}
    if differ:
        what = ", ".join(f"{k} {new} (checkpoint: {old})" for k, (new, old) in differ.items())
        raise ValueError(f"--resume: the settings differ from the checkpoint's: {what}.")
    return state



@dataclass(frozen=True)
class Checkpoint:
    """Where a run's checkpoint lives and what a resumed run must share with it."""

    path: Path
    weights: str  # the key the trained module's state_dict is saved under
    optimisation: dict  # the settings a resumed run must share (the rest only change logging)
    data_key: str | None = None  # the data the run trains on (None: not recorded, not checked)

    def save(self, module: nn.Module, opt: torch.optim.Optimizer, run: Run, train_s: float) -> None:
        state = dict(step=run.step, **{self.weights: module.state_dict()}, optimizer=opt.state_dict(), optimisation=self.optimisation)
        if self.data_key is not None:
            state["data_key"] = self.data_key
        state |= dict(curve=run.curve, evals=[asdict(e) for e in run.evals], train_s=train_s)
        save_atomic(state, self.path)

    def restore(self, module: nn.Module, opt: torch.optim.Optimizer, accuracy: Callable[[dict], Any]) -> Run:
        """Restore the module and the optimiser from a checkpoint of the same run (ValueError naming what differs);
        ``accuracy`` rebuilds an evaluation from its saved dict."""
        state = read_checkpoint(self.path, self.optimisation, self.data_key)
        module.load_state_dict(state[self.weights])
        opt.load_state_dict(state["optimizer"])
        return Run(int(state["step"]), list(state["curve"]), [accuracy(e) for e in state["evals"]], float(state["train_s"]))


# -- the loop -------------------------------------------------------------------------------------------------------


def optimise(module: nn.Module, opt: torch.optim.Optimizer, config: TrainConfig, checkpoint: Checkpoint, run: Run,
             train_step: TrainStep, held_out: HeldOut, eval_line: Callable[[Run], str], last: int, desc: str,
             progress: bool = True) -> Run:  # fmt: skip
    """Optimise ``module`` from run.step up to step ``last``: each step the scheduled learning rate, the kind's loss,
    one AdamW step and a curve row; a held-out evaluation every eval_every steps (before the last) and a checkpoint
    every checkpoint_every steps and at ``last``. Updates and returns ``run``."""
    from tqdm.auto import tqdm

    checkpoint.path.parent.mkdir(parents=True, exist_ok=True)
    bar = tqdm(total=config.steps, initial=run.step, desc=desc, unit="step", disable=not progress)
    start = time.perf_counter()
    while run.step < last:
        module.train()
        for group in opt.param_groups:
            group["lr"] = learning_rate(run.step, config)
        loss, columns, top1 = train_step(run.step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        run.step += 1
        run.curve.append(dict(step=run.step, loss=round(float(loss.detach()), 4), **columns))
        bar.set_postfix(loss=f"{float(loss.detach()):.3f}", top1=top1)
        bar.update(1)
        if run.step % config.eval_every == 0 and run.step < config.steps:
            run.evals.append(held_out(run.step, config.eval_positions))
            bar.write(eval_line(run))
        if run.step % config.checkpoint_every == 0 or run.step == last:
            checkpoint.save(module, opt, run, run.train_s + time.perf_counter() - start)
    bar.close()
    run.train_s += time.perf_counter() - start
    return run
