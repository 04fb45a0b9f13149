"""The drafter protocol (specviz.core.protocols) and the drafter that proposes nothing."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specviz.core.protocols import Draft, Drafter, TreeDrafter

__all__ = ["Draft", "Drafter", "NoDrafter", "TreeDrafter"]


class NoDrafter:
    """Proposes nothing, so every round is one plain target step: the measured baseline."""

    name = "none"
    has_q = False
    can_branch = False
    reads_hidden = False
    reads_features = False
    reads_logits = False
    keeps_state = False
    device = torch.device("cpu")

    def prepare(self, prompt_ids: Sequence[int]) -> None:
        pass

    def propose(self, context: Sequence[int], k: int, generator: torch.Generator) -> Draft:
        return Draft(())

    def rollback(self, committed: Sequence[int]) -> None:
        pass
