"""Logits -> probabilities under temperature, top-k and top-p; the same warp serves draft and target."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 0.0  # 0 means greedy: the warp returns a one-hot on the argmax
    top_k: int = 0  # keep only the k most likely tokens; 0 keeps all
    top_p: float = 1.0  # keep the smallest set whose mass reaches top_p; 1.0 keeps all

    def __post_init__(self) -> None:
        if not (self.temperature >= 0.0):
            raise ValueError(f"temperature must be >= 0 (0 means greedy); got {self.temperature}.")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 turns it off); got {self.top_k}.")
        if not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1] (1 turns it off); got {self.top_p}.")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def warp(logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """(..., V) logits -> (..., V) float32 probabilities after temperature, top-k, top-p."""
    logits = logits.float()
    if sampling.greedy:
        return greedy_warp(logits)[0]
    logits = logits / sampling.temperature
    vocab = logits.shape[-1]
    if 0 < sampling.top_k < vocab:
        kth = torch.topk(logits, sampling.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if sampling.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
        sorted_probs = sorted_probs.masked_fill(mass_before >= sampling.top_p, 0.0)  # the top token always stays
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def greedy_warp(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(..., V) logits -> (the temperature-0 warp: (..., V) one-hot float32 rows, (...) the argmax each is hot at). The
    argmax is the one pass over the vocabulary a greedy row needs (about 40 us over SmolLM2's 49,152 tokens on one CPU
    thread); the rule and the record read it back from here instead of ranking the one-hot rows again."""
    top = logits.argmax(dim=-1)
    return torch.zeros_like(logits, dtype=torch.float32).scatter_(-1, top.unsqueeze(-1), 1.0), top


def draw(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """(..., V) probabilities -> (...) token ids, drawn on the probabilities' device with the generator there.

    The exponential race argmax(p / E), E ~ Exp(1): the algorithm torch.multinomial runs for one sample, so
    on the CPU it returns what multinomial would, without multinomial's validity check that waits on a GPU.
    """
    race = torch.empty_like(probs).exponential_(1.0, generator=generator)
    scores = (probs / race).masked_fill(probs <= 0, -1.0)  # a zero-probability token never wins, even if E = 0
    return scores.argmax(dim=-1)


def draw_draft(q_draft: torch.Tensor, sampling: SamplingConfig, generator: torch.Generator) -> torch.Tensor:
    """(..., V) a drafter's warped q_draft -> (...) ids drawn from it, on its device. At temperature 0 the warp is
    one-hot on the argmax, so the argmax *is* the draw: no random number is spent (a draw over the vocabulary costs
    what plain decoding's one draw per token costs), and the generator is left for the rule. The reported q (the
    one-hot) is still exactly what the token was drawn from."""
    if sampling.greedy:
        return q_draft.argmax(dim=-1)
    return draw(q_draft, generator)


def to_full_vocab(q_draft: torch.Tensor, vocab_ids: torch.Tensor | None, vocab_size: int) -> torch.Tensor:
    """(..., V') a distribution over a draft vocabulary, column j for token vocab_ids[j] -> (..., vocab_size), zero
    outside it: what a draft over the reduced vocabulary really proposes (vocab_ids None: already full)."""
    if vocab_ids is None:
        return q_draft
    full = q_draft.new_zeros(*q_draft.shape[:-1], vocab_size)
    return full.index_copy_(-1, vocab_ids, q_draft)
