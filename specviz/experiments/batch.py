"""B streams at once, measured: plain and speculative decoding of B prompts of one category in one batch.

For every batch size B the same B prompts (the category's benchmark prompts, cycled when B is larger than
their number) are decoded twice: plainly, one batched target pass per token, and speculatively, one batched
verify per round (specviz.core.batch). Both sides run on the same model, threads and prompts, alternating
which goes first over the repeats; the tokens/s of each is every row's new tokens over the rounds' wall clock
(the prefill, the same for both, left out), the median over repeats. The load average is read before and
after each B: a busy machine's numbers mislead.

At temperature 0 every speculative row must equal the plain row of the same prompt at the same B. Where one
differs, ``Mismatch`` names the first differing position and the target's top-2 logit margin there (one
unbatched pass over the common prefix): batched kernels may flip a near-tie, a bug rarely strikes at one.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from specviz.config import RunConfig
from specviz.core.batch import BatchDecoder, BatchStats, batch_stats
from specviz.core.decoding import DecodeConfig
from specviz.core.divergence import first_difference
from specviz.core.metrics import speedup_disturbed
from specviz.core.protocols import Turn, no_turn
from specviz.drafters import NoDrafter
from specviz.experiments.cost_profile import ASSETS, load_average
from specviz.experiments.prompts import BenchPrompt
from specviz.models import HFBatchedLM, HFCachedLM, LoadedModel, encode_prompt
from specviz.runs import RunModels, make_drafter

SCHEMA = "specviz.batch/2"  # 2: the passes' shapes, forward ms and overheads per point
OLD_SCHEMAS = ("specviz.batch/1",)  # still read (tokens/s only; batch_check needs schema 2)
MAX_POINTS = 64
MAX_SCHEDULE = 4096  # (rows, width) shapes per side: at most B * (k+1)
MARGIN_TOLERANCE = 1e-3  # a greedy row may differ from plain only where the target's top two logits are this close
SHIPPED = ASSETS / "batch_cpu.json"  # measured points the theory page draws, when present
MAX_BATCH_FILE_BYTES = 500_000
ProgressFn = Callable[[int, int, str], None]


@dataclass(frozen=True)
class Mismatch:
    """Where a greedy speculative row first left the plain row of the same prompt at the same batch size."""

    stream: int
    position: int  # index into the generated tokens
    token: int | None  # the speculative row's token there (None: it ended first)
    plain_token: int | None
    margin: float  # the target's top-1 minus top-2 logit after the common prefix


@dataclass(frozen=True)
class BatchPoint:
    """One batch size measured: plain and speculative throughput over all rows, and what the rounds did."""

    batch_size: int
    plain_tokens_per_s: float
    spec_tokens_per_s: float
    spec_tokens_per_target_pass: float  # mean tokens a row commits per batched verify it takes part in
    plain_new_tokens: int
    spec_new_tokens: int
    load_average: str  # before and after this B
    mismatches: tuple[Mismatch, ...] = ()
    # what a prediction from the cost profile needs (schema 2; a schema-1 file leaves them at their defaults)
    plain_rounds: int = 0  # batched passes of the plain side (the batch shrinks as rows end)
    spec_rounds: int = 0
    spec_verify_width: float = 0.0  # mean T of a speculative pass: ids per row, the widest row's
    spec_drafted_per_row: float = 0.0  # mean drafts a row proposed per round (prompt lookup: often 0 on a miss)
    plain_pass_ms: float = 0.0  # mean ms of one batched forward, measured in the run (median over repeats)
    spec_pass_ms: float = 0.0
    plain_overhead_ms_per_row: float = 0.0  # ms per row per round outside the forward (median over repeats)
    spec_overhead_ms_per_row: float = 0.0
    plain_schedule: tuple[tuple[int, int, int], ...] = ()  # (rows, width, passes) of the first timed repeat
    spec_schedule: tuple[tuple[int, int, int], ...] = ()

    @property
    def ratio(self) -> float:
        """Speculative over plain tokens/s at this B: above 1, speculation still pays."""
        return self.spec_tokens_per_s / self.plain_tokens_per_s

    @property
    def physical(self) -> bool:
        """A round's pass costs at least a plain pass, so the ratio cannot beat the tokens per pass; above it the two
        sides did not run under the same conditions (the same rule as every measured speedup's)."""
        return not speedup_disturbed(self.ratio, self.spec_tokens_per_target_pass)

    @property
    def measured_shape(self) -> bool:
        """Whether this point carries its passes' shapes and overheads (schema 2), what batch_check predicts from."""
        return bool(self.plain_schedule and self.spec_schedule)

    def to_json(self) -> dict:
        return asdict(self) | {"ratio": round(self.ratio, 4)}


@dataclass(frozen=True)
class BatchSetup:
    """What a batch measurement runs: the drafter's run config, the category's prompts, repeats per B."""

    config: RunConfig  # drafter, k, sampling, max new tokens, chat, seed
    prompts: tuple[BenchPrompt, ...]
    repeats: int = 1  # timed runs of each side per B
    warmup: int = 1  # runs of each side per B first, discarded (new shapes, cold caches)

    def __post_init__(self) -> None:
        if not self.prompts:
            raise ValueError("No prompts to decode: pick a category that has some.")
        if self.repeats < 1 or self.warmup < 0:
            raise ValueError(f"repeats must be at least 1 and warmup at least 0; got {self.repeats} and {self.warmup}.")
        if self.config.drafter == "none":
            raise ValueError("Pick a drafter: plain decoding is the side every batch size measures anyway.")


def stream_prompts(target: LoadedModel, setup: BatchSetup, batch_size: int) -> list[list[int]]:
    """B prompts' ids: the category's prompts in order, cycled."""
    texts = [setup.prompts[b % len(setup.prompts)].prompt for b in range(batch_size)]
    return [encode_prompt(target.tokenizer, t, setup.config.chat) for t in texts]


def batch_decoder(models: RunModels, setup: BatchSetup, prompts: list[list[int]], plain: bool) -> BatchDecoder:
    """A fresh batch: plain (no drafter, k = 0) or speculative, every row its own drafter; fixed k, chains."""
    target, config = models.target, setup.config
    vocab = target.vocab_size if models.draft is None or plain else min(target.vocab_size, models.draft.vocab_size)
    decode: DecodeConfig = replace(config.decode_config(target.eos_token_ids), adaptive_k=False, tree_width=1)
    if plain:
        drafters = [NoDrafter() for _ in prompts]
        decode = replace(decode, num_draft_tokens=0)
    else:
        drafters = [make_drafter(config, models) for _ in prompts]
    return BatchDecoder(HFBatchedLM(target.model, vocab, len(prompts)), drafters, prompts, decode)


def top2_margin(target: LoadedModel, ids: Sequence[int]) -> float:
    """The target's top-1 minus top-2 logit for the token after ids (one unbatched pass)."""
    logits = HFCachedLM(target.model, target.vocab_size).extend(list(ids), last_only=True)[-1]  # (V,)
    top = logits.topk(2).values
    return float(top[0] - top[1])


def mismatches(target: LoadedModel, prompts: list[list[int]], spec: BatchDecoder, plain: BatchDecoder,
               turn: Turn = no_turn) -> tuple[Mismatch, ...]:  # fmt: skip
    """Every row whose greedy speculative output differs from its plain output, with the margin there (each
    margin's pass one model turn; rows that agree take none)."""
    out = []
    for b, prompt in enumerate(prompts):
        ours, theirs = spec.generated(b), plain.generated(b)
        i = first_difference(ours, theirs)
        if i is not None:
            with turn():
                margin = top2_margin(target, prompt + theirs[:i])
            out.append(Mismatch(b, i, _at(ours, i), _at(theirs, i), margin))
    return tuple(out)


def _at(ids: Sequence[int], i: int) -> int | None:
    return ids[i] if i < len(ids) else None


def measure_batch(models: RunModels, setup: BatchSetup, batch_size: int, turn: Turn = no_turn) -> BatchPoint:
    """Plain and speculative decoding of the same B prompts, alternating which runs first, the warm-up runs
    discarded; medians of tokens/s, forward ms and overhead over the timed repeats. One model turn per batched run
    (and per greedy mismatch's margin pass)."""
    target = models.target
    before = load_average()
    prompts = stream_prompts(target, setup, batch_size)
    stats: dict[bool, list[BatchStats]] = {True: [], False: []}
    runs: dict[bool, BatchDecoder] = {}
    for rep in range(setup.warmup + setup.repeats):
        for plain in (rep % 2 == 0, rep % 2 == 1):
            with turn():  # one model turn per batched run
                decoder = batch_decoder(models, setup, prompts, plain)
                decoder.run()
            if rep >= setup.warmup:
                stats[plain].append(batch_stats(decoder))
                runs.setdefault(plain, decoder)  # the first timed repeat's outputs and passes
    spec, plain_run = batch_stats(runs[False]), batch_stats(runs[True])
    wrong = mismatches(target, prompts, runs[False], runs[True], turn) if setup.config.sampling.greedy else ()
    med = lambda side, attr: statistics.median(getattr(s, attr) for s in stats[side])  # noqa: E731
    return BatchPoint(
        batch_size, med(True, "tokens_per_s"), med(False, "tokens_per_s"), spec.tokens_per_target_pass,
        plain_run.new_tokens, spec.new_tokens, f"before {before}, after {load_average()}", wrong,
        plain_run.rounds, spec.rounds, spec.verify_width, spec.drafted_per_row, med(True, "pass_ms"), med(False, "pass_ms"),
        med(True, "overhead_ms_per_row"), med(False, "overhead_ms_per_row"), plain_run.schedule, spec.schedule,
    )  # fmt: skip


def measure_batches(models: RunModels, setup: BatchSetup, batch_sizes: Sequence[int], on_progress: ProgressFn | None = None,
                    turn: Turn = no_turn) -> list[BatchPoint]:  # fmt: skip
    """measure_batch for every B, smallest first."""
    sizes = sorted(set(batch_sizes))
    if not sizes or sizes[0] < 1:
        raise ValueError("Batch sizes must be at least 1.")
    points = []
    for done, b in enumerate(sizes, start=1):
        points.append(measure_batch(models, setup, b, turn))
        if on_progress:
            on_progress(done, len(sizes), f"batch {b}: ratio {points[-1].ratio:.2f}")
    return points


def bad_mismatches(points: Sequence[BatchPoint], tolerance: float = MARGIN_TOLERANCE) -> list[tuple[int, Mismatch]]:
    """(B, mismatch) for every greedy difference that is not a near-tie: a bug, not rounding."""
    return [(p.batch_size, m) for p in points for m in p.mismatches if m.margin > tolerance]


def results_json(points: Sequence[BatchPoint], setup: BatchSetup, machine: dict) -> dict:
    """The file `specviz batch --out` writes and the theory page reads."""
    c = setup.config
    return {
        "schema": SCHEMA, "target": c.target, "drafter": c.drafter, "k": c.num_draft_tokens, "temperature": c.temperature,
        "max_new_tokens": c.max_new_tokens, "category": sorted({p.category for p in setup.prompts}), **machine,
        "points": [p.to_json() for p in points],
    }  # fmt: skip


def load_batch_results(path: Path = SHIPPED) -> tuple[dict, list[BatchPoint]] | None:
    """A batch results file -> (its header, its points), or None when there is none. A file that exists but is not
    one (too big, another schema, a missing or wrong field) raises ValueError. Schema 1 files load with the
    prediction's fields at their defaults (BatchPoint.measured_shape is False)."""
    if not path.is_file():
        return None
    if path.stat().st_size > MAX_BATCH_FILE_BYTES:
        raise ValueError(f"{path} is over {MAX_BATCH_FILE_BYTES:,} bytes; a batch results file is a few kilobytes.")
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
        if obj.get("schema") not in (SCHEMA, *OLD_SCHEMAS):
            raise ValueError(f"expected \"schema\": \"{SCHEMA}\"")
        if not isinstance(obj["points"], list) or len(obj["points"]) > MAX_POINTS:
            raise ValueError(f"\"points\" must be a list of at most {MAX_POINTS}")
        points = [_point(p) for p in obj["points"]]
    except (json.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path} is not a specviz batch results file ({exc}); re-run `python -m specviz batch --out`.") from exc
    return {k: v for k, v in obj.items() if k != "points"}, points


def _point(p: dict) -> BatchPoint:
    """One point of a results file, checked: positive B and tokens/s, finite non-negative shape fields."""
    point = BatchPoint(
        int(p["batch_size"]), float(p["plain_tokens_per_s"]), float(p["spec_tokens_per_s"]), float(p.get("spec_tokens_per_target_pass", p.get("spec_tokens_per_pass", 1.0))),  # the older name in files written before
        int(p.get("plain_new_tokens", 0)), int(p.get("spec_new_tokens", 0)), str(p.get("load_average", ""))[:200], (),
        int(p.get("plain_rounds", 0)), int(p.get("spec_rounds", 0)), float(p.get("spec_verify_width", 0.0)),
        float(p.get("spec_drafted_per_row", 0.0)), float(p.get("plain_pass_ms", 0.0)), float(p.get("spec_pass_ms", 0.0)),
        float(p.get("plain_overhead_ms_per_row", 0.0)), float(p.get("spec_overhead_ms_per_row", 0.0)),
        _schedule(p.get("plain_schedule", ())), _schedule(p.get("spec_schedule", ())),
    )  # fmt: skip
    if point.batch_size < 1 or not (point.plain_tokens_per_s > 0 and point.spec_tokens_per_s > 0):
        raise ValueError(f"batch_size must be >= 1 and both tokens/s above 0 (batch {point.batch_size})")
    numbers = (point.spec_verify_width, point.spec_drafted_per_row, point.plain_pass_ms, point.spec_pass_ms)
    if not all(math.isfinite(x) and x >= 0 for x in numbers):  # an overhead may dip below 0 on a noisy clock
        raise ValueError(f"the shape fields of batch {point.batch_size} must be finite numbers >= 0")
    return point


def _schedule(rows: object) -> tuple[tuple[int, int, int], ...]:
    if not isinstance(rows, (list, tuple)) or len(rows) > MAX_SCHEDULE:
        raise ValueError(f"a schedule must be a list of at most {MAX_SCHEDULE} [rows, width, passes]")
    out = tuple((int(r), int(w), int(n)) for r, w, n in rows)
    if any(r < 1 or w < 1 or n < 1 for r, w, n in out):
        raise ValueError("a schedule's rows, width and passes must all be at least 1")
    return out


def typical_overhead_ms_per_row(points: Sequence[BatchPoint]) -> float:
    """The plain side's ms per row per round outside the forward, the median over the points that measured it (0 for
    none): what the theory page's slider curve charges both sides when it has no measured passes to price."""
    measured = [p.plain_overhead_ms_per_row for p in points if p.measured_shape]
    return max(0.0, statistics.median(measured)) if measured else 0.0


def load_batch_points(path: Path = SHIPPED) -> tuple[dict, list[tuple[int, float, float]]] | None:
    """A batch results file -> (its header, [(B, plain tokens/s, speculative tokens/s)]), or None when there is none.
    The header gains "plain_overhead_ms_per_row" (typical_overhead_ms_per_row of its points). A file that exists but
    is not one raises ValueError."""
    loaded = load_batch_results(path)
    if loaded is None:
        return None
    header, points = loaded
    header = header | {"plain_overhead_ms_per_row": typical_overhead_ms_per_row(points)}
    return header, [(p.batch_size, p.plain_tokens_per_s, p.spec_tokens_per_s) for p in points]
