"""One timed run of a decoder, and interleaved repeats of several: the harness every speed comparison of decoders
shares (the benchmark sweep, specviz.experiments.bench; ``scripts/compare_drafters.py`` and ``scripts/medusa_check.py``),
on top of specviz.experiments.measure. A run is timed from building its decoder (the prefill) to its last round,
on the wall clock and the process CPU clock; in model turns (run_in_turns) only the time inside the turns counts."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from specviz.core.decoding import SpeculativeDecoder
from specviz.core.metrics import RunMetrics
from specviz.core.protocols import Turn
from specviz.experiments.measure import ProgressFn, interleave, timed

BASELINE = "baseline"  # the setting name of plain decoding in measure_setups
SLICE_S = 1.0  # in model turns, a long run gives the model back between rounds after about this long


@dataclass(frozen=True)
class RunSample:
    """What one timed run leaves behind. The decoder itself is dropped, so repeats cost no memory."""

    generated: tuple[int, ...]
    stats: RunMetrics  # the engine's metrics and clocks (prefill + rounds), specviz.core.metrics
    verify_ms: tuple[float, ...]  # per round: the verify pass
    drafted: tuple[int, ...]  # per round: tokens drafted (0: a plain one-token pass)
    draft_ms: float  # summed over rounds
    cpu_s: float  # process CPU time of building the decoder (prefill) and running it
    wall_s: float  # wall clock of the same (the engine's stats.wall_s leaves out construction)

    @property
    def tokens_per_s(self) -> float:
        return self.stats.tokens_per_s

    @property
    def tokens_per_cpu_s(self) -> float:
        return self.stats.new_tokens / self.cpu_s if self.cpu_s > 0 else float("nan")

    def pass_ms(self, drafting: bool) -> list[float]:
        """Verify-pass times of the rounds that drafted (drafting=True) or of the plain one-token passes."""
        return [ms for ms, n in zip(self.verify_ms, self.drafted) if (n > 0) == drafting]


def run_in_turns(make: Callable[[], SpeculativeDecoder], turn: Turn, slice_s: float = SLICE_S) -> tuple[SpeculativeDecoder, float, float]:
    """Build a decoder and run it to the end holding the model one turn at a time: a turn lasts one run, or about
    slice_s seconds of it (it ends between rounds), so a long run lets other sessions' rounds in. Returns the
    decoder and the wall and CPU seconds spent inside the turns (waiting for a turn is not the run's time)."""
    decoder, wall_s, cpu_s = None, 0.0, 0.0
    while decoder is None or not decoder.done:
        with turn():
            wall, cpu = time.perf_counter(), time.process_time()
            if decoder is None:
                decoder = make()  # the prefill is a model pass too
            while not decoder.done:  # at least one round per turn
                decoder.step()
                if time.perf_counter() - wall >= slice_s:
                    break
            wall_s, cpu_s = wall_s + time.perf_counter() - wall, cpu_s + time.process_time() - cpu
    return decoder, wall_s, cpu_s


def run_once(make: Callable[[], SpeculativeDecoder], turn: Turn | None = None) -> RunSample:
    """Build a fresh decoder and run it to the end under the wall and CPU clocks (in model turns when given one)."""

    def build_and_run() -> SpeculativeDecoder:
        decoder = make()
        decoder.run()
        return decoder

    if turn is None:
        t = timed(build_and_run)
        d, wall_s, cpu_s = t.value, t.wall_s, t.cpu_s
    else:
        d, wall_s, cpu_s = run_in_turns(make, turn)
    return RunSample(
        generated=tuple(d.generated),
        stats=d.stats(),
        verify_ms=tuple(r.verify_ms for r in d.records),
        drafted=tuple(r.num_drafted for r in d.records),
        draft_ms=sum(r.draft_ms for r in d.records),
        cpu_s=cpu_s,
        wall_s=wall_s,
    )


def measure_setups(
    setups: Mapping[str, Callable[[], SpeculativeDecoder]],
    repeats: int = 3,
    warmup: int = 1,
    on_progress: Callable[[int, int, str, RunSample], None] | None = None,
    turn: Turn | None = None,
) -> dict[str, list[RunSample]]:
    """Run every setup (name -> a factory of fresh decoders) interleaved: warmup + repeats rotations,
    the order shifting every rotation, the warm-ups discarded. Returns name -> the kept RunSamples, in
    repeat order, so samples[a][i] and samples[b][i] ran side by side. on_progress(done, total,
    what, sample) follows every run, warm-ups included. turn: each run takes the model in turns (see run_in_turns)."""
    last: dict[str, RunSample] = {}

    def contender(name: str) -> Callable[[], RunSample]:
        def run() -> RunSample:
            last[name] = run_once(setups[name], turn)
            return last[name]

        return run

    progress: ProgressFn | None = None
    if on_progress is not None:

        def progress(done: int, total: int, message: str) -> None:
            name = message.rsplit(" (", 1)[0]  # interleave reports "<name> (repeat i/n)"
            on_progress(done, total, message, last[name])

    return interleave({name: contender(name) for name in setups}, repeats, warmup, progress)
