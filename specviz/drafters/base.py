"""The one protocol every drafter follows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass(frozen=True)
class Draft:
    """Proposed token ids and, when the drafter has one, its distribution at each of them."""

    token_ids: tuple[int, ...]
    q_draft: torch.Tensor | None = None  # (len(token_ids), V) probabilities, any device; None: one-hot on each id


class Drafter(Protocol):
    """Proposes up to k next tokens for a context; told afterwards what was committed.

    Randomness comes only from the generator handed to propose(), seeded from the run's seed. It lives on the
    CPU, unless the drafter has a ``device`` attribute (a draft model): then it lives there, so sampling stays
    on the device. Read tensors back to the host at most a constant number of times per call, never per token.
    """

    name: str
    has_distribution: bool  # True when propose() returns a real q_draft

    def prepare(self, prompt_ids: Sequence[int]) -> None:
        """Called once before the first round (e.g. prefill a draft model's cache)."""
        ...

    def propose(self, context: Sequence[int], k: int, generator: torch.Generator) -> Draft:
        """Up to k tokens that may follow context; an empty Draft means 'no guess this round'."""
        ...

    def rollback(self, committed: Sequence[int]) -> None:
        """Forget whatever of the last proposal did not become part of committed."""
        ...


class NoDrafter:
    """Proposes nothing, so every round is one plain target step: the measured baseline."""

    name = "none"
    has_distribution = False

    def prepare(self, prompt_ids: Sequence[int]) -> None:
        pass

    def propose(self, context: Sequence[int], k: int, generator: torch.Generator) -> Draft:
        return Draft(())

    def rollback(self, committed: Sequence[int]) -> None:
        pass
