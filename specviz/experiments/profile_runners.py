"""What a cost profile times (specviz.experiments.cost_profile.measure_profile): a realistic context, the runners
(a target pass over n new tokens, the same over B rows at once, each drafter's proposal), each set up once and rolled
back after every call, and the rotation that times them all with ``torch.utils.benchmark.Timer``.

Every runner starts from a cache of the context and leaves it as it found it, so one runner can be called again and
again. torch and specviz.models are imported inside the functions, so reading this module costs nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

from specviz.core.limits import MAX_DRAFT_TOKENS
from specviz.core.protocols import Turn, no_turn

if TYPE_CHECKING:
    from specviz.models import LoadedModel

log = logging.getLogger(__name__)

BATCH_ROW_OFFSET = 7  # row b of a batched pass reads the text from id b*7 on, so no two rows hold the same cache
Clock = Literal["wall", "cpu"]
ProgressFn = Callable[[int, int, str], None]  # (measurements done, in total, what just finished)


def context_ids(target: LoadedModel, length: int, extra: int = 0) -> list[int]:
    """A realistic context: the benchmark prompts, tokenised and repeated up to length + extra tokens."""
    from specviz.experiments.prompts import load_prompts

    try:
        text = "\n\n".join(p.prompt for p in load_prompts())
    except ValueError:
        text = "The quick brown fox jumps over the lazy dog. " * 20
    ids = list(target.tokenizer(text)["input_ids"])
    if not ids:
        raise ValueError("The tokenizer gave no ids for the profiling text.")
    while len(ids) < length + extra + MAX_DRAFT_TOKENS + 1:
        ids = ids + ids
    return ids


def timer(fn: Callable[[], object], threads: int, clock: Clock):
    from torch.utils.benchmark import Timer

    kwargs = {"timer": time.process_time} if clock == "cpu" else {}
    return Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads, **kwargs)


def pass_runners(target: LoadedModel, context: list[int], new: list[int], turn: Turn = no_turn) -> dict[str, Callable[[], object]]:
    """'pass n' -> one target pass over n new tokens after the cached context (prefilled in one turn), cropped back after."""
    from specviz.models import HFCachedLM

    lm = HFCachedLM(target.model, target.vocab_size)
    with turn():
        lm.extend(context)

    def target_pass(n: int) -> Callable[[], None]:
        def fn() -> None:
            lm.extend(new[:n])
            lm.crop(len(context))

        return fn

    return {f"pass {n}": target_pass(n) for n in range(1, len(new) + 1)}


def batch_runners(target: LoadedModel, ids: list[int], context_length: int, max_tokens: int, batch_sizes: Sequence[int],
                   turn: Turn = no_turn) -> dict[str, Callable[[], object]]:
    """'batch B pass t' -> one forward over B rows, each its own context_length cached tokens (row b starts b*7
    ids further into the text) adding t new ones, then every row keeps its context again."""
    from specviz.models import HFBatchedLM

    runners: dict[str, Callable[[], object]] = {}
    for b in batch_sizes:
        lm = HFBatchedLM(target.model, target.vocab_size, b)
        rows = [ids[r * BATCH_ROW_OFFSET : r * BATCH_ROW_OFFSET + context_length + max_tokens] for r in range(b)]
        with turn():
            lm.extend([row[:context_length] for row in rows], keep_last=1)

        def batch_pass(t: int, lm=lm, rows=rows) -> Callable[[], None]:
            def fn() -> None:
                lm.extend([row[context_length : context_length + t] for row in rows])
                lm.keep([context_length] * len(rows))

            return fn

        runners |= {f"batch {b} pass {t}": batch_pass(t) for t in range(1, max_tokens + 1)}
    return runners


def profile_names(drafters: Sequence[str], draft_vocabs: Sequence[int]) -> list[tuple[str, str, int]]:
    """(name in the profile, drafter kind, draft vocabulary) for every drafter, and for each that scores the target's
    LM head once more per draft vocabulary: "medusa@8192" is the same heads over the 8,192 most said tokens."""
    from specviz.drafters.specs import drafter_spec

    out = [(kind, kind, 0) for kind in drafters]
    out += [(f"{kind}@{v}", kind, v) for kind in drafters if drafter_spec(kind).cuts_vocab for v in draft_vocabs if v]
    return out


def draft_runners(
    target: LoadedModel, context: list[int], drafters: Sequence[str], draft_k: int, turn: Turn = no_turn, heads_folder: str | None = None,
    draft_vocabs: Sequence[int] = (), eagle_folder: str | None = None,
) -> tuple[dict[str, Callable[[], object]], dict[str, int]]:
    """name -> one proposal of draft_k tokens at the context (rolled back after), and the tokens one call drafts. Each
    drafter is set up by a decoder's prefill of the context (what it reads of the target's passes handed over, as in
    a run). heads_folder, eagle_folder: the Medusa heads and EAGLE head to time (None: the shipped ones); a drafter
    whose heads or token counts are missing is skipped with a warning."""
    import torch

    from specviz.config import RunConfig
    from specviz.runs import RunModels, build_decoder

    runners: dict[str, Callable[[], object]] = {}
    drafted_per_call: dict[str, int] = {}
    generator = torch.Generator().manual_seed(0)
    for name, kind, vocab in profile_names(drafters, draft_vocabs):
        if kind == "early-exit" and target.num_layers < 2:
            log.info("skipping early exit: the target has one layer")
            continue
        # threshold 0: the n-gram drafter drafts all k where the context matches, so the cost is per drafted token
        config = RunConfig(target=target.name, drafter=kind, num_draft_tokens=draft_k, ngram_threshold=0.0, medusa_heads=heads_folder,
                           eagle_head=eagle_folder, draft_vocab=vocab)  # fmt: skip
        try:
            with turn():  # the prefill (and early exit's own layers) run the target
                decoder = build_decoder(config, RunModels(target), context)
                decoder.hand_over()
                drafter = decoder.drafter
                drafted_per_call[name] = max(1, len(drafter.propose(context, draft_k, generator).token_ids))
                drafter.rollback(context)
        except ValueError as exc:  # no heads (or no token counts) for this target: the other drafters are still measured
            log.warning("skipping %s: %s", name, exc)
            continue

        def propose(drafter=drafter) -> None:
            drafter.propose(context, draft_k, generator)
            drafter.rollback(context)

        runners[name] = propose
    return runners, drafted_per_call


def time_rotating(
    runners: dict[str, Callable[[], object]], repeats: int, number: int, threads: int, clock: Clock, turn: Turn, on_progress: ProgressFn | None
) -> dict[str, list[float]]:
    """name -> ms per call of each repeat, the order rotated every repeat so drift hits every runner alike; one model
    turn per measurement."""
    timers = {name: timer(fn, threads, clock) for name, fn in runners.items()}
    samples: dict[str, list[float]] = {name: [] for name in timers}
    names = list(timers)
    total, done = repeats * len(names), 0
    for rep in range(repeats):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            with turn():
                samples[name].append(timers[name].timeit(number).median * 1000.0)
            done += 1
            if on_progress:
                on_progress(done, total, f"{name} (repeat {rep + 1}/{repeats})")
    return samples
