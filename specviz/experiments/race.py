"""The race: one prompt and seed through plain decoding and through speculative decoding, each decoded alone, back to
back, with the wall-clock time every round committed its tokens (specviz.core.race.RaceResult).

Why alone: two decodes at once on a few cores steal each other's time, and neither clock would mean anything. The
lanes run one after the other, and the model is never shared while a lane's clock runs: each piece of a lane runs in a
model turn (``turn``, a specviz.core.protocols.Turn). On a shared server a race used to hold the model for both whole
decodes (about 2 x 256 passes at the shared defaults); now it gives the model back between the warm-up and the lanes
and every PASSES_PER_TURN rounds, so another participant's Step runs between two pieces, and a lane's clock stops
while it waits: the time from asking for the next turn to getting it, and the pauses a long prefill makes between its
chunks (specviz.core.protocols.paused_s), are taken out. What a wait cannot take out is the caches another
participant's round leaves warm or cold. A short plain warm-up (a prefill and two passes, thrown away) goes first, so
neither lane pays for first-use costs; plain decoding then runs before speculative decoding, every time.

What a lane's clock reads: perf_counter from just before its decoder is built (the prefill is inside the time to first
token) to each round's commit, less the waits above and less the time the engine spent building the records its charts
read (record_ms): a service builds none. The records keep only the top entry of each distribution (top_n=1), so that
time is small anyway.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import torch

from specviz.config import RunConfig
from specviz.core.decoding import SpeculativeDecoder
from specviz.core.metrics import SpecDecodeSteps
from specviz.core.protocols import Turn, no_turn, paused_s
from specviz.core.race import RaceLane, RaceResult, lane_of
from specviz.drafters.specs import branches, drafter_spec, short_name
from specviz.experiments.cost_profile import device_name
from specviz.runs import RunModels, build_decoder

WARMUP_PASSES = 2
PASSES_PER_TURN = 8  # rounds of a lane per model turn: a waiting Step gets in after at most this many passes
TokenText = Callable[[int], str]  # token id -> its text (specviz.viz.tokens.TokenTable)


def lane_label(config: RunConfig) -> str:
    """'prompt lookup, k=8' / 'n-gram model, tree W=2, k=8' / 'prompt lookup, k: auto'."""
    width = branches(config.drafter, config.tree_width)
    k = "k: auto" if config.k_policy == "auto" else f"k={config.num_draft_tokens}"
    return f"{short_name(config.drafter)}{f', tree W={width}' if width > 1 else ''}, {k}"


def time_lane(
    make_decoder: Callable[[], SpeculativeDecoder], label: str, turn: Turn = no_turn, passes_per_turn: int = PASSES_PER_TURN,
    *, speculative: bool = False,
) -> RaceLane:
    """Build a decoder (its prefill) and step it to the end, reading the clock at every round's commit: the prefill
    in one turn, then passes_per_turn rounds a turn; the waits between turns and a prefill's pauses are not its time.
    speculative: the lane carries its verify steps (SpecDecodeSteps, read from the records after the clock stopped)."""
    if passes_per_turn < 1:
        raise ValueError(f"passes_per_turn must be at least 1; got {passes_per_turn}.")
    start: float | None = None
    waited = 0.0  # seconds this lane's clock stood still: waiting for a turn, or paused inside one
    decoder: SpeculativeDecoder | None = None
    prefill_s = 0.0
    commits: list[float] = []
    ids: list[tuple[int, ...]] = []
    charts_s = 0.0  # record building so far: the engine's chart work, not a service's
    while decoder is None or not decoder.done:
        asked = time.perf_counter()
        with turn():
            got = time.perf_counter()
            if start is None:
                start = got  # the clock starts with the lane's first turn
            else:
                waited += got - asked
            paused_before = paused_s()
            if decoder is None:
                decoder = make_decoder()
                prefill_s = time.perf_counter() - start - (paused_s() - paused_before)
            else:
                for _ in range(passes_per_turn):
                    if decoder.done:
                        break
                    record = decoder.step()
                    now = time.perf_counter()
                    charts_s += record.record_ms / 1000.0
                    if record.emitted:
                        commits.append(now - start - waited - (paused_s() - paused_before) - charts_s)
                        ids.append(tuple(record.emitted))
            waited += paused_s() - paused_before
    steps = SpecDecodeSteps.of(decoder.records, decoder.config.num_draft_tokens) if speculative else None
    return lane_of(label, commits, ids, prefill_s, steps)


def _load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def run_race(
    config: RunConfig,
    models: RunModels,
    prompt: str,
    prompt_ids: list[int],
    token_text: TokenText,
    *,
    turn: Turn = no_turn,
    warmup: bool = True,
    passes_per_turn: int = PASSES_PER_TURN,
) -> RaceResult:
    """Plain decoding, then speculative decoding under config, each alone: the warm-up in one turn, each lane in
    turns of PASSES_PER_TURN rounds (time_lane). Raises ValueError for a config without a drafter (nothing to race)."""
    if drafter_spec(config.drafter).baseline:
        raise ValueError("The race sets plain decoding against a drafter: pick a drafter other than none.")
    ids = list(prompt_ids)
    load_before = _load_average()
    if warmup:
        with turn():
            warm = build_decoder(config, models, ids, baseline=True, top_n=1)
            for _ in range(WARMUP_PASSES):
                if not warm.done:
                    warm.step()
            del warm
    plain = time_lane(lambda: build_decoder(config, models, ids, baseline=True, top_n=1), "plain decoding", turn, passes_per_turn)
    speculative = time_lane(lambda: build_decoder(config, models, ids, top_n=1), lane_label(config), turn, passes_per_turn, speculative=True)
    target = models.target
    machine = {
        "device": device_name(target.device), "threads": str(torch.get_num_threads()), "torch": torch.__version__,
        "load_average_before": load_before, "load_average_after": _load_average(),
    }  # fmt: skip
    texts = {t: token_text(t) for t in {*plain.tokens, *speculative.tokens}}
    return RaceResult(
        prompt=prompt, prompt_ids=tuple(ids), target=target.name, precision=target.precision, drafter=config.drafter,
        drafter_label=lane_label(config), num_draft_tokens=config.num_draft_tokens, temperature=config.temperature,
        seed=config.seed, max_new_tokens=config.max_new_tokens, plain=plain, speculative=speculative, token_text=texts,
        machine=machine, created_at=time.time(),
    )  # fmt: skip
