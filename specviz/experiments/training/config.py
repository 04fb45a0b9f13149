"""The training runs' settings: TrainConfig (the Medusa heads, and the own-text data recipe both kinds share) and
EagleConfig (plus the teacher-forced text and EAGLE's loss), each with its cache keys and a tiny config for tests.

Plain dataclasses, no transformers: the CLI's parser imports this module for its defaults.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Literal

DATA_VERSION = 2  # bump when the data recipe or the prompts change, so old caches are not reused (2: more prompts, the fed tokens)
TEACHER_VERSION = 1  # bump when the teacher-forced recipe changes, so old caches are not reused


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


CONTINUE = dict(lr=3e-4, warmup_steps=20)
"""A continued head's schedule (--init-from), unless set: a third of the peak (the head already has its features; a
fresh peak would undo part of them), a shorter warm-up (for AdamW's moments, which start from zero again), then the
same cosine decay to 10%."""
CONTINUE_TINY = dict(lr=1.5e-3, warmup_steps=2)
"""The same for --tiny."""

