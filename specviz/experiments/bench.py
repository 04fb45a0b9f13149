"""The benchmark sweep: prompts by category x drafters x k x temperature, each measured against plain
decoding of the same prompt under the same sampling, in the same process. Plain functions, no
streamlit: ``python -m specviz bench`` and the Benchmark page run it; it measures through
specviz.experiments.timed_runs (``measure_setups``, which ``scripts/compare_drafters.py`` uses too) on the prompt set
of specviz.experiments.prompts.

Method: for one prompt and temperature, the baseline and every drafter x k form one rotation; each
repeat runs the whole rotation in an order that shifts by one every repeat, the first ``warmup``
rotations are thrown away, and every ratio is the median of the per-repeat (paired) ratios, with its
min–max over the repeats. Costs are medians of passes: verify cost = median verify pass of the run's
drafting rounds / median one-token pass of the baseline.

One row per speculative setting; the columns are the fields of BenchRow (see COLUMNS):
category, prompt (its title), drafter, k, temperature, seed, max_new_tokens, device, dtype, repeats,
new_tokens, target_passes, drafted, accepted, alpha (Leviathan's E[sum min(p, q)]; empty for drafters
without a q_draft), acceptance_rate (accepted/drafted), alpha_implied (the alpha that accepted/drafted
implies at this k under independence), tokens_per_target_pass, tokens_per_s, baseline_tokens_per_s (medians),
speedup (median of tokens_per_s / baseline_tokens_per_s over the repeats) with speedup_low and
speedup_high (min and max over the repeats), speedup_cpu with speedup_cpu_low and speedup_cpu_high
(the same from process CPU time, steadier than wall clock on a shared machine), draft_cost (c: ms per
drafted token / ms per baseline pass), verify_cost, predicted_speedup (the theory formula at the
measured alpha, k, c and verify cost), same_as_baseline (greedy only: identical output), wall_s,
baseline_wall_s, cpu_s, baseline_cpu_s (medians).
"""

from __future__ import annotations

import csv
import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specviz.config import RunConfig, field_named
from specviz.core.decoding import SpeculativeDecoder
from specviz.core.metrics import RunMetrics, pooled_histogram
from specviz.core.protocols import Turn
from specviz.core.theory import alpha_from_acceptance_rate, speedup
from specviz.core.tree import MAX_TREE_WIDTH
from specviz.drafters.specs import SPECULATIVE_KINDS, drafter_spec
from specviz.experiments.measure import ProgressFn, Spread, paired_ratio
from specviz.experiments.prompts import BenchPrompt
from specviz.experiments.timed_runs import BASELINE, RunSample, measure_setups

if TYPE_CHECKING:
    import pandas as pd

    from specviz.models import LoadedModel
    from specviz.runs import RunModels

BENCH_DRAFTERS = SPECULATIVE_KINDS  # every drafter but plain decoding, the baseline
SHIPPED_BENCH = Path(__file__).resolve().parents[2] / "assets" / "bench_cpu.csv"  # measured on a quiet 2-core CPU (docs/benchmarks.md)
MAX_REPEATS = 50


@dataclass(frozen=True)
class SweepSpec:
    """What to sweep. For every prompt and temperature, plain decoding and every drafter x k run
    interleaved, ``warmup + repeats`` times each; the first ``warmup`` rotations are discarded."""

    drafters: tuple[str, ...] = ("ngram", "lookup", "early-exit")
    ks: tuple[int, ...] = (2, 4, 8)
    temperatures: tuple[float, ...] = (0.0, 1.0)
    max_new_tokens: int = 48
    seed: int = 0  # every run of one prompt and temperature uses this seed, baseline included
    chat: bool = True  # wrap prompts in the tokenizer's chat template
    exit_layer: int | None = None  # early exit: None picks the default depth
    medusa_heads: str | None = None  # Medusa: a heads folder; None = the heads shipped for the embedded target
    eagle_head: str | None = None  # EAGLE: a head folder; None = the head shipped for the embedded target
    draft_vocab: int = 0  # Medusa and EAGLE: a draft vocabulary of this many tokens (0: the full vocabulary)
    repeats: int = 3  # timed runs of every setting; the table reports their median and min–max
    warmup: int = 1  # rotations run first and thrown away (allocation, caches, kernel selection)
    tree_widths: tuple[int, ...] = (1,)  # token trees: children per node (1 = a chain); k is the node budget

    def __post_init__(self) -> None:
        if not self.drafters:
            raise ValueError("Choose at least one drafter.")
        for d in self.drafters:
            if d not in BENCH_DRAFTERS:
                raise ValueError(f"Unknown drafter {d!r} for a benchmark; choose from {', '.join(BENCH_DRAFTERS)}.")
        if not self.ks:
            raise ValueError("Choose at least one k (tokens drafted per round).")
        k_range, t_range, new_range = (field_named(name) for name in ("num_draft_tokens", "temperature", "max_new_tokens"))  # RunConfig's ranges
        for k in self.ks:
            if not (k_range.low <= k <= k_range.high):
                raise ValueError(f"k must be between {k_range.low} and {k_range.high}; got {k}.")
        if not self.temperatures:
            raise ValueError("Choose at least one temperature (0 is greedy).")
        for t in self.temperatures:
            if not (t_range.low <= t <= t_range.high):
                raise ValueError(f"Temperatures must be between {t_range.low:g} and {t_range.high:g}; got {t}.")
        if not (new_range.low <= self.max_new_tokens <= new_range.high):
            raise ValueError(f"max new tokens must be between {new_range.low} and {new_range.high}; got {self.max_new_tokens}.")
        field_named("seed").check(self.seed, None)  # RunConfig's seed rule and message
        if not (1 <= self.repeats <= MAX_REPEATS):
            raise ValueError(f"repeats must be between 1 and {MAX_REPEATS}; got {self.repeats}.")
        if not (0 <= self.warmup <= MAX_REPEATS):
            raise ValueError(f"warm-up rotations must be between 0 and {MAX_REPEATS}; got {self.warmup}.")
        if not self.tree_widths:
            raise ValueError(f"Tree widths: choose at least one, between 1 (a chain) and {MAX_TREE_WIDTH}.")
        if any(not (1 <= w <= MAX_TREE_WIDTH) for w in self.tree_widths):
            raise ValueError(f"Tree widths must be between 1 (a chain) and {MAX_TREE_WIDTH}; got {self.tree_widths}.")

    def num_settings(self, num_prompts: int) -> int:
        """Settings in the sweep, baselines included (each is run warmup + repeats times)."""
        return num_prompts * len(self.temperatures) * (1 + len(self.drafters) * len(self.ks) * len(self.tree_widths))

    def num_runs(self, num_prompts: int) -> int:
        """Decoding runs in the sweep: baselines, warm-ups and repeats included."""
        return self.num_settings(num_prompts) * (self.warmup + self.repeats)


@dataclass(frozen=True)
class BenchRow:
    """One speculative setting and the baseline it is compared with, over `repeats` paired runs."""

    category: str
    prompt: str  # the prompt's title
    drafter: str
    k: int
    temperature: float
    seed: int
    max_new_tokens: int
    device: str  # where the target ran, e.g. cpu, cuda:0
    dtype: str  # the target's weights, e.g. float32, bfloat16
    repeats: int  # timed runs behind every median below (warm-ups not counted)
    new_tokens: int
    target_passes: int
    drafted: int
    accepted: int
    alpha: float | None  # Leviathan: mean sum_v min(p, q) over verified positions; None without q_draft
    acceptance_rate: float | None  # accepted/drafted; None when nothing was drafted
    alpha_implied: float | None  # the alpha giving this accepted/drafted at this k, positions independent
    tokens_per_target_pass: float
    tokens_per_s: float  # median over the repeats
    baseline_tokens_per_s: float  # median over the repeats
    speedup: float  # median over the repeats of tokens_per_s / baseline_tokens_per_s (paired by repeat)
    speedup_low: float  # min over the repeats
    speedup_high: float  # max over the repeats
    speedup_cpu: float  # the same ratio from process CPU time: what an idle machine would show (threads=1)
    speedup_cpu_low: float
    speedup_cpu_high: float
    draft_cost: float | None  # c: median ms per drafted token / median ms per baseline target pass
    verify_cost: float | None  # median verify pass of this setting's drafting rounds / median baseline pass
    predicted_speedup: float | None  # speedup(alpha or alpha_implied, k, draft_cost, verify_cost)
    same_as_baseline: bool | None  # greedy runs only: identical tokens to plain greedy decoding
    wall_s: float  # median of prefill plus every round, wall clock
    baseline_wall_s: float
    cpu_s: float  # median process CPU time of building the run (prefill) and running it
    baseline_cpu_s: float
    tree_width: int = 1  # children per node of the token tree; 1 = a chain
    # vLLM's per-request names (metrics.speculative_decoding; drafted and accepted above are its num_draft_tokens and
    # num_accepted_draft_tokens): last in the row, so a CSV written before them still takes --append (append_csv)
    num_spec_steps: int | None = None  # verify steps: rounds that drafted
    mean_acceptance_length: float | None = None  # 1 + accepted / verify steps
    acceptance_histogram: str = ""  # JSON list: index j = verify steps that kept exactly j drafts, j = 0..k


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(BenchRow))


def median_or_none(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v == v]
    return statistics.median(vals) if vals else None


# --- the sweep -------------------------------------------------------------------------------------


def setting_name(drafter: str, k: int, tree_width: int = 1) -> str:
    return f"{drafter} k={k}" + (f" W={tree_width}" if tree_width > 1 else "")


def _fmt_t(t: float) -> str:
    return f"{t:g}"


def relative_costs(runs: Sequence[RunSample], bases: Sequence[RunSample]) -> tuple[float | None, float | None]:
    """(draft cost c, verify cost): median ms per drafted token and median verify pass of the drafting rounds, each
    over the median one-token pass of the baseline; None where a side has nothing to measure."""
    base_pass_ms = median_or_none([ms for b in bases for ms in b.pass_ms(drafting=False)])
    verify_ms = median_or_none([ms for r in runs for ms in r.pass_ms(drafting=True)])
    ms_per_draft = median_or_none([r.draft_ms / r.stats.drafted for r in runs if r.stats.drafted])
    ok = base_pass_ms is not None and base_pass_ms > 0
    draft_cost = ms_per_draft / base_pass_ms if ok and ms_per_draft is not None else None
    verify_cost = verify_ms / base_pass_ms if ok and verify_ms is not None else None
    return draft_cost, verify_cost


def prediction(
    stats: RunMetrics, k: int, draft_cost: float | None, verify_cost: float | None
) -> tuple[float | None, float | None]:
    """(alpha_implied, predicted speedup): the alpha accepted/drafted implies at k, and the theory formula at the
    measured alpha (or the implied one without a q_draft), k, c and verify cost."""
    alpha_implied = alpha_from_acceptance_rate(stats.acceptance_rate, k) if stats.acceptance_rate is not None else None
    alpha_used = stats.alpha if stats.alpha is not None else alpha_implied
    predicted = None
    if alpha_used is not None and draft_cost is not None and verify_cost is not None:
        predicted = speedup(min(1.0, max(0.0, alpha_used)), k, draft_cost, verify_cost)
    return alpha_implied, predicted


def compare_to_baseline(
    prompt: BenchPrompt, drafter: str, k: int, temperature: float, spec: SweepSpec,
    runs: Sequence[RunSample], bases: Sequence[RunSample], device: str = "", dtype: str = "", tree_width: int = 1,
) -> BenchRow:
    """One BenchRow from a setting's repeats and the baseline's repeats of the same rotations."""
    run, base = runs[0], bases[0]  # counts come from one run: a fixed seed makes every repeat decode the same tokens
    s = run.stats
    speed = paired_ratio([r.tokens_per_s for r in runs], [b.tokens_per_s for b in bases])
    speed_cpu = paired_ratio([r.tokens_per_cpu_s for r in runs], [b.tokens_per_cpu_s for b in bases])
    draft_cost, verify_cost = relative_costs(runs, bases)
    alpha_implied, predicted = prediction(s, k, draft_cost, verify_cost)
    steps = replace(s.spec_decode, num_spec_tokens=max(k, s.spec_decode.num_spec_tokens))  # k + 1 bins, even if no round drafted k
    return BenchRow(
        category=prompt.category, prompt=prompt.title, drafter=drafter, k=k, temperature=temperature, seed=spec.seed,
        max_new_tokens=spec.max_new_tokens, device=device, dtype=dtype, repeats=len(runs),
        new_tokens=s.new_tokens, target_passes=s.target_passes, drafted=s.drafted, accepted=s.accepted,
        alpha=s.alpha, acceptance_rate=s.acceptance_rate, alpha_implied=alpha_implied, tokens_per_target_pass=s.tokens_per_target_pass,
        tokens_per_s=Spread.of([r.tokens_per_s for r in runs]).median,
        baseline_tokens_per_s=Spread.of([b.tokens_per_s for b in bases]).median,
        speedup=speed.median, speedup_low=speed.low, speedup_high=speed.high,
        speedup_cpu=speed_cpu.median, speedup_cpu_low=speed_cpu.low, speedup_cpu_high=speed_cpu.high,
        draft_cost=draft_cost, verify_cost=verify_cost, predicted_speedup=predicted,
        same_as_baseline=(run.generated == base.generated) if temperature == 0.0 else None,
        wall_s=Spread.of([r.stats.wall_s for r in runs]).median,
        baseline_wall_s=Spread.of([b.stats.wall_s for b in bases]).median,
        cpu_s=Spread.of([r.cpu_s for r in runs]).median,
        baseline_cpu_s=Spread.of([b.cpu_s for b in bases]).median,
        tree_width=tree_width, num_spec_steps=steps.num_spec_steps, mean_acceptance_length=s.mean_acceptance_length,
        acceptance_histogram=json.dumps(list(steps.acceptance_histogram)),
    )  # fmt: skip


@dataclass(frozen=True)
class SweepModels:
    """What every setting of one sweep shares: the target (and a draft model), early exit's view, Medusa's heads and
    EAGLE's head; and how a setting becomes a RunConfig and a factory of fresh decoders."""

    target: LoadedModel
    spec: SweepSpec
    draft: LoadedModel | None = None
    early_exit: Any = None  # a cached early_exit_view of the target
    heads: Any = None  # its loaded Medusa heads
    eagle: Any = None  # its loaded EAGLE head

    def config(self, drafter: str, k: int, temperature: float, tree_width: int = 1) -> RunConfig:
        spec = self.spec
        return RunConfig(
            target=self.target.name, draft=self.draft.name if self.draft is not None else None, drafter=drafter,
            exit_layer=spec.exit_layer, medusa_heads=spec.medusa_heads, eagle_head=spec.eagle_head, draft_vocab=spec.draft_vocab,
            num_draft_tokens=k, temperature=temperature, seed=spec.seed, max_new_tokens=spec.max_new_tokens, chat=spec.chat,
            tree_width=tree_width, auto_k=False,  # a cell measures one fixed k
        )  # fmt: skip

    @property
    def run_models(self) -> RunModels:
        """What every decoder of the sweep is built from."""
        from specviz.runs import RunModels

        return RunModels(self.target, self.draft, self.early_exit, self.heads, self.eagle)

    def resolved(self) -> SweepModels:
        """These models with each swept drafter's own part built once (early exit, Medusa, EAGLE: its model source in
        the drafter table), unless handed in. The draft model is always handed in (a sweep never loads one here)."""
        from specviz.runs import resolve_models

        parts = {drafter_spec(d).source: d for d in self.spec.drafters if drafter_spec(d).source in ("early_exit", "heads", "eagle")}
        missing = {part: kind for part, kind in parts.items() if getattr(self, part) is None}
        if not missing:
            return self
        found = resolve_models(self.config(next(iter(missing.values())), 1, 0.0), target=self.target, drafters=list(missing.values()))
        return replace(self, **{part: getattr(found, part) for part in missing})

    def factory(
        self, ids: list[int], drafter: str, k: int, temperature: float, baseline: bool, tree_width: int = 1
    ) -> Callable[[], SpeculativeDecoder]:
        from specviz.runs import build_decoder

        cfg = self.config(drafter, k, temperature, tree_width)
        models = self.run_models
        return lambda: build_decoder(cfg, models, ids, baseline=baseline)


def sweep_progress(on_progress: ProgressFn | None, where: str, offset: int, total: int) -> Callable[[int, int, str, RunSample], None]:
    """measure_setups' progress for one rotation -> the sweep's: runs counted from offset of total, the tokens/s said."""

    def progress(done: int, _total: int, message: str, sample: RunSample) -> None:
        if on_progress:
            on_progress(offset + done, total, f"{where} {message} ... {sample.tokens_per_s:.1f} tok/s ({sample.tokens_per_cpu_s:.1f} per CPU-second)")

    return progress


def measure_rotation(
    models: SweepModels, prompt: BenchPrompt, ids: list[int], temperature: float,
    progress: Callable[[int, int, str, RunSample], None], turn: Turn | None,
) -> tuple[list[BenchRow], int]:
    """One prompt at one temperature: the baseline and every drafter x k x tree width, interleaved (measure_setups).
    Returns one BenchRow per speculative setting and the number of runs it took, warm-ups included."""
    spec, target = models.spec, models.target
    setups = {BASELINE: models.factory(ids, spec.drafters[0], spec.ks[0], temperature, True)}
    grid = [(d, k, w) for d in spec.drafters for k in spec.ks for w in spec.tree_widths]
    setups |= {setting_name(d, k, w): models.factory(ids, d, k, temperature, False, w) for d, k, w in grid}
    samples = measure_setups(setups, spec.repeats, spec.warmup, progress, turn)
    device, dtype = str(target.device), target.precision
    rows = [
        compare_to_baseline(prompt, d, k, temperature, spec, samples[setting_name(d, k, w)], samples[BASELINE], device, dtype, w)
        for d, k, w in grid
    ]
    return rows, len(setups) * (spec.warmup + spec.repeats)


def run_sweep(
    models: RunModels, prompts: Sequence[BenchPrompt], spec: SweepSpec, *, on_progress: ProgressFn | None = None, turn: Turn | None = None
) -> list[BenchRow]:
    """Run the sweep and return one BenchRow per speculative setting. models: the target, a draft model, and any of
    early exit's view, Medusa's heads and EAGLE's head the caller keeps (each built here when a drafter needs it and
    it is not given). on_progress(done, total, message) follows every run, warm-ups included. turn: on a shared
    server, one model turn per run."""
    from specviz.runs import prompt_ids

    if not prompts:
        raise ValueError("No prompts to benchmark: choose at least one category.")
    target = models.target
    sweep = SweepModels(target, spec, models.draft, models.early_exit, models.heads, models.eagle)
    for drafter in spec.drafters:  # before any run: RunConfig.validate says what a drafter lacks (a draft model)
        sweep.config(drafter, spec.ks[0], spec.temperatures[0])
    sweep = sweep.resolved()
    total, offset = spec.num_runs(len(prompts)), 0
    rows: list[BenchRow] = []
    for prompt in prompts:
        ids = prompt_ids(target, prompt.prompt, spec.chat, max_new_tokens=spec.max_new_tokens, num_draft_tokens=max(spec.ks))  # within the context
        for temperature in spec.temperatures:
            progress = sweep_progress(on_progress, f"{prompt.category} {prompt.title!r} T={_fmt_t(temperature)}", offset, total)
            measured, runs = measure_rotation(sweep, prompt, ids, temperature, progress, turn)
            rows += measured
            offset += runs
    return rows


def rows_to_frame(rows: Sequence[BenchRow]) -> pd.DataFrame:
    """BenchRows -> a DataFrame with exactly COLUMNS, in order (empty rows give an empty frame)."""
    import pandas as pd

    return pd.DataFrame([asdict(r) for r in rows], columns=list(COLUMNS))


def summary_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (category, drafter, k, temperature), and tree width when some row drafted a tree: means over prompts of the
    medians, and the lowest and highest speedup any repeat of any prompt gave (when the frame has those columns)."""
    import pandas as pd

    keys = ["category", "drafter", "k", "temperature"]
    widths = pd.to_numeric(frame["tree_width"], errors="coerce").fillna(1) if "tree_width" in frame else None
    if widths is not None and (widths > 1).any():  # all chains (or an older table): no tree column
        frame, keys = frame.assign(tree_width=widths.astype(int)), keys[:3] + ["tree_width"] + keys[3:]
    means = ["alpha", "alpha_implied", "acceptance_rate", "tokens_per_target_pass", "tokens_per_s", "baseline_tokens_per_s",
             "speedup", "speedup_cpu", "verify_cost", "predicted_speedup"]
    agg: dict[str, tuple[str, str]] = {c: (c, "mean") for c in means if c in frame}
    for c in ("speedup_low", "speedup_cpu_low"):
        if c in frame:
            agg[c] = (c, "min")
    for c in ("speedup_high", "speedup_cpu_high"):
        if c in frame:
            agg[c] = (c, "max")
    return frame.groupby(keys, sort=False).agg(**agg).reset_index()


def histogram_of(cell: object) -> tuple[int, ...]:
    """A row's acceptance_histogram cell (JSON list) as counts; () for an empty cell (a table from before the column)."""
    if not isinstance(cell, str) or not cell.strip():
        return ()
    counts = json.loads(cell)
    if not isinstance(counts, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts):
        raise ValueError(f"acceptance_histogram must be a JSON list of counts; got {cell[:80]!r}.")
    return tuple(counts)


def histograms_by_setting(frame: pd.DataFrame, category: str) -> dict[str, tuple[int, ...]]:
    """One category's acceptance histograms, pooled over its prompts (pooled_histogram), per setting ("lookup k=4 T=0",
    with W when a tree): empty when the table has no histograms (written before bench carried them)."""
    if "acceptance_histogram" not in frame or "category" not in frame:
        return {}
    part = frame[frame["category"] == category]
    out: dict[str, tuple[int, ...]] = {}
    for _, row in part.iterrows():
        hist = histogram_of(row["acceptance_histogram"])
        if hist:
            width = int(row["tree_width"]) if "tree_width" in row and row["tree_width"] == row["tree_width"] else 1
            name = f"{setting_name(str(row['drafter']), int(row['k']), width)} T={_fmt_t(float(row['temperature']))}"
            out[name] = pooled_histogram([out.get(name, ()), hist])
    return out


RENAMED = {"tokens_per_pass": "tokens_per_target_pass"}  # a column's older name -> its name now (CSVs written before)


def read_bench(path: Path | str) -> pd.DataFrame:
    """A benchmark CSV as a frame, columns named as this version names them (a CSV written before a rename reads the same)."""
    import pandas as pd

    return pd.read_csv(path, dtype={"acceptance_histogram": str}).rename(columns=RENAMED)


def append_csv(frame: pd.DataFrame, out: Path) -> None:
    """Add frame's rows to the CSV at out. A CSV from before the newest columns (its header a prefix of COLUMNS) is
    rewritten with every column, its rows' new cells empty; any other header is refused with a message."""
    import pandas as pd

    with out.open(encoding="utf-8") as fh:
        written = fh.readline().strip().split(",")
    if written == list(COLUMNS):
        frame.to_csv(out, index=False, float_format="%.4g", mode="a", header=False)
        return
    header = [RENAMED.get(h, h) for h in written]  # an older CSV's names, as this version names them
    if header != list(COLUMNS[: len(header)]):
        raise ValueError(f"{out} has other columns than this benchmark writes; --append needs a CSV from this version or an earlier one.")
    older = read_bench(out).reindex(columns=list(COLUMNS))
    both = pd.concat([older, frame], ignore_index=True) if len(older) else frame
    tmp = out.with_name(out.name + ".tmp")
    both.to_csv(tmp, index=False, float_format="%.4g")
    tmp.replace(out)


def tree_vs_chain_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Token trees against chains at the same node budget k: means over prompts per (drafter, k, temperature,
    tree_width) of tokens per target pass, the verify pass's cost and the speedups."""
    keys = ["drafter", "k", "temperature", "tree_width"]
    cols = ["acceptance_rate", "tokens_per_target_pass", "verify_cost", "speedup", "speedup_cpu"]
    return frame.groupby(keys, sort=True)[cols].mean().reset_index()


def shipped_speedup(drafter: str, k: int, path: Path = SHIPPED_BENCH) -> tuple[float, int, int] | None:
    """The quiet-machine figure for a drafter from the shipped table: (median speedup over its greedy chain rows at
    the k nearest to k, that k, how many rows); None when the table has no such row (or cannot be read)."""
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            rows = [r for r in csv.DictReader(fh) if r["drafter"] == drafter and float(r["temperature"]) == 0 and r.get("tree_width", "1") in ("1", "")]
        ks = sorted({int(r["k"]) for r in rows})
    except (OSError, KeyError, ValueError):
        return None
    if not ks:
        return None
    near = min(ks, key=lambda x: (abs(x - k), x))
    values = [float(r["speedup"]) for r in rows if int(r["k"]) == near and r["speedup"]]
    return (statistics.median(values), near, len(values)) if values else None
