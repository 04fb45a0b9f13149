"""The go/no-go gate for an EAGLE head (is it worth shipping as a drafter?): the held-out first-draft-token top-1 (training/eagle.py measures it)
and the draft step's cost (one layer over one position plus the LM head over the draft vocabulary) as a fraction of
the target's 1-token pass after the same context."""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # specviz.models imports transformers
    from specviz.models import LoadedModel
    from specviz.models.eagle import EagleHead

GATE_TOP1, GATE_STEP_COST = 0.55, 0.06  # the go/no-go: held-out first-draft-token top-1, draft step / pass


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
    """The go/no-go: (passed, the lines the command prints)."""
    ok1, ok2 = top1 >= GATE_TOP1, cost <= GATE_STEP_COST
    vocab = f"draft vocabulary {draft_vocab:,}" if draft_vocab else "full vocabulary"
    lines = [
        f"go/no-go after {positions_seen:,} training positions:",
        f"  held-out first-draft-token top-1 {top1:.3f} (gate >= {GATE_TOP1}): {'pass' if ok1 else 'FAIL'}",
        f"  draft step {cost:.3f} of a 1-token pass ({vocab}; gate <= {GATE_STEP_COST}): {'pass' if ok2 else 'FAIL'}",
        f"  -> {'GO' if ok1 and ok2 else 'NO-GO'}",
    ]
    return ok1 and ok2, lines

