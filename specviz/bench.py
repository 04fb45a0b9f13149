"""The benchmark sweep: prompts by category x drafters x k x temperature, each measured against plain
decoding of the same prompt under the same sampling, in the same process. Plain functions, no
streamlit: the Benchmark page and ``python -m specviz bench`` both call run_sweep.

One row per speculative run; the columns are the fields of BenchRow (see COLUMNS):
category, prompt (its title), drafter, k, temperature, seed, max_new_tokens, new_tokens,
target_passes, drafted, accepted, alpha (Leviathan's E[sum min(p, q)]; empty for drafters without a
q_draft), acceptance_rate (accepted/drafted), alpha_implied (the alpha that accepted/drafted implies at
this k under independence), tokens_per_pass, tokens_per_s, baseline_tokens_per_s, speedup
(tokens_per_s / baseline_tokens_per_s), speedup_cpu (the same ratio from process CPU time, steadier
than wall clock on a shared machine), draft_cost (c: ms per drafted token / ms per baseline pass),
verify_cost (ms per verify pass / ms per baseline pass), predicted_speedup (the theory formula at the
measured alpha, k, c and verify cost), same_as_baseline (greedy only: identical output), wall_s,
baseline_wall_s, cpu_s, baseline_cpu_s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from specviz.config import DRAFTER_KINDS, EMBEDDED_TARGET, RunConfig
from specviz.core.decoding import MAX_DRAFT_TOKENS, SpeculativeDecoder
from specviz.core.theory import alpha_from_acceptance_rate, speedup
from specviz.core.tree import MAX_TREE_WIDTH

if TYPE_CHECKING:
    import pandas as pd

    from specviz.models import LoadedModel

DEFAULT_PROMPTS = Path(__file__).resolve().parent.parent / "assets" / "prompts.json"
SESSION_STATE_KEY = "bench_results"  # the Benchmark page keeps its latest results DataFrame here
BENCH_DRAFTERS: tuple[str, ...] = tuple(d for d in DRAFTER_KINDS if d != "none")  # "none" is the baseline
MAX_PROMPTS_FILE_BYTES = 1_000_000

ProgressFn = Callable[[int, int, str], None]  # (runs done, runs in total, what just finished)


@dataclass(frozen=True)
class BenchPrompt:
    category: str  # code, prose, copy, qa, ...
    title: str  # a short name for tables
    prompt: str


@dataclass(frozen=True)
class SweepSpec:
    """What to sweep. Every prompt runs once plainly per temperature, then once per drafter x k."""

    drafters: tuple[str, ...] = ("ngram", "lookup", "early-exit")
    ks: tuple[int, ...] = (2, 4, 8)
    temperatures: tuple[float, ...] = (0.0, 1.0)
    max_new_tokens: int = 48
    seed: int = 0  # every run of one prompt and temperature uses this seed, baseline included
    chat: bool = True  # wrap prompts in the tokenizer's chat template
    exit_layer: int | None = None  # early exit: None picks the default depth
    tree_widths: tuple[int, ...] = (1,)  # token trees: children per node (1 = a chain); k is the node budget

    def __post_init__(self) -> None:
        if not self.drafters:
            raise ValueError("Choose at least one drafter.")
        for d in self.drafters:
            if d not in BENCH_DRAFTERS:
                raise ValueError(f"Unknown drafter {d!r} for a benchmark; choose from {', '.join(BENCH_DRAFTERS)}.")
        if not self.ks:
            raise ValueError("Choose at least one k (tokens drafted per round).")
        for k in self.ks:
            if not (1 <= k <= MAX_DRAFT_TOKENS):
                raise ValueError(f"k must be between 1 and {MAX_DRAFT_TOKENS}; got {k}.")
        if not self.temperatures:
            raise ValueError("Choose at least one temperature (0 is greedy).")
        for t in self.temperatures:
            if not (0.0 <= t <= 2.0):
                raise ValueError(f"Temperatures must be between 0 and 2; got {t}.")
        if not (1 <= self.max_new_tokens <= 2048):
            raise ValueError(f"max new tokens must be between 1 and 2048; got {self.max_new_tokens}.")
        if self.seed < 0:
            raise ValueError(f"The seed must be >= 0; got {self.seed}.")
        if not self.tree_widths or any(not (1 <= w <= MAX_TREE_WIDTH) for w in self.tree_widths):
            raise ValueError(f"Tree widths must be between 1 (a chain) and {MAX_TREE_WIDTH}; got {self.tree_widths}.")

    def num_runs(self, num_prompts: int) -> int:
        """Runs in the sweep, baselines included."""
        return num_prompts * len(self.temperatures) * (1 + len(self.drafters) * len(self.ks) * len(self.tree_widths))


@dataclass(frozen=True)
class BenchRow:
    """One speculative run and the baseline it is compared with."""

    category: str
    prompt: str  # the prompt's title
    drafter: str
    k: int
    temperature: float
    seed: int
    max_new_tokens: int
    new_tokens: int
    target_passes: int
    drafted: int
    accepted: int
    alpha: float | None  # Leviathan: mean sum_v min(p, q) over verified positions; None without q_draft
    acceptance_rate: float | None  # accepted/drafted; None when nothing was drafted
    alpha_implied: float | None  # the alpha giving this accepted/drafted at this k, positions independent
    tokens_per_pass: float
    tokens_per_s: float
    baseline_tokens_per_s: float
    speedup: float  # tokens_per_s / baseline_tokens_per_s
    speedup_cpu: float  # the same ratio from process CPU time: what an idle machine would show (threads=1)
    draft_cost: float | None  # c: ms per drafted token / ms per baseline target pass
    verify_cost: float | None  # ms per verify pass of this run / ms per baseline target pass
    predicted_speedup: float | None  # speedup(alpha or alpha_implied, k, draft_cost, verify_cost)
    same_as_baseline: bool | None  # greedy runs only: identical tokens to plain greedy decoding
    wall_s: float  # prefill plus every round, wall clock
    baseline_wall_s: float
    cpu_s: float  # process CPU time of building the run (prefill) and running it
    baseline_cpu_s: float
    tree_width: int = 1  # children per node of the token tree; 1 = a chain


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(BenchRow))


def load_prompts(path: str | Path = DEFAULT_PROMPTS, categories: Sequence[str] | None = None) -> list[BenchPrompt]:
    """Read a JSON list of {"category", "title", "prompt"} objects, keeping only `categories` when given."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"No prompt file at {path}; pass --prompts with a JSON list of {{category, title, prompt}}.")
    if path.stat().st_size > MAX_PROMPTS_FILE_BYTES:
        raise ValueError(f"{path} is over {MAX_PROMPTS_FILE_BYTES:,} bytes; a benchmark prompt set should be small.")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}.") from exc
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{path} must hold a non-empty JSON list of {{category, title, prompt}} objects.")
    prompts = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or not all(isinstance(item.get(f), str) and item[f].strip() for f in ("category", "title", "prompt")):
            raise ValueError(f"Entry {i} of {path} needs non-empty strings 'category', 'title' and 'prompt'.")
        prompts.append(BenchPrompt(item["category"].strip(), item["title"].strip(), item["prompt"]))
    if categories:
        known = sorted({p.category for p in prompts})
        unknown = [c for c in categories if c not in known]
        if unknown:
            raise ValueError(f"No prompts in category {', '.join(unknown)}; {path} has {', '.join(known)}.")
        prompts = [p for p in prompts if p.category in categories]
    return prompts


def prompt_categories(prompts: Sequence[BenchPrompt]) -> list[str]:
    """Categories in first-seen order."""
    return list(dict.fromkeys(p.category for p in prompts))


def _pass_ms(decoder: SpeculativeDecoder) -> float:
    """Mean verify-pass time of a run (for a baseline: one 1-token target pass)."""
    times = [r.verify_ms for r in decoder.records]
    return sum(times) / len(times) if times else 0.0


@dataclass(frozen=True)
class Measured:
    """A finished run and the process CPU time it took."""

    decoder: SpeculativeDecoder
    cpu_s: float


def _row(
    prompt: BenchPrompt, drafter: str, k: int, temperature: float, spec: SweepSpec, measured: Measured, base: Measured, tree_width: int = 1
) -> BenchRow:
    run, baseline = measured.decoder, base.decoder
    s, b = run.stats(), baseline.stats()
    cpu_rate, base_cpu_rate = s.new_tokens / max(measured.cpu_s, 1e-9), b.new_tokens / max(base.cpu_s, 1e-9)
    base_pass_ms = _pass_ms(baseline)
    drafted_rounds = [r for r in run.records if r.num_drafted]
    draft_ms = sum(r.draft_ms for r in run.records)
    draft_cost = (draft_ms / s.drafted) / base_pass_ms if s.drafted and base_pass_ms > 0 else None
    verify_cost = (
        sum(r.verify_ms for r in drafted_rounds) / len(drafted_rounds) / base_pass_ms if drafted_rounds and base_pass_ms > 0 else None
    )
    alpha_implied = alpha_from_acceptance_rate(s.acceptance_rate, k) if s.acceptance_rate is not None else None
    alpha_used = s.alpha if s.alpha is not None else alpha_implied
    predicted = None
    if alpha_used is not None and draft_cost is not None and verify_cost is not None:
        predicted = speedup(min(1.0, max(0.0, alpha_used)), k, draft_cost, verify_cost)
    return BenchRow(
        category=prompt.category,
        prompt=prompt.title,
        drafter=drafter,
        k=k,
        temperature=temperature,
        seed=spec.seed,
        max_new_tokens=spec.max_new_tokens,
        new_tokens=s.new_tokens,
        target_passes=s.target_passes,
        drafted=s.drafted,
        accepted=s.accepted,
        alpha=s.alpha,
        acceptance_rate=s.acceptance_rate,
        alpha_implied=alpha_implied,
        tokens_per_pass=s.tokens_per_target_pass,
        tokens_per_s=s.tokens_per_s,
        baseline_tokens_per_s=b.tokens_per_s,
        speedup=s.tokens_per_s / b.tokens_per_s if b.tokens_per_s > 0 else float("nan"),
        speedup_cpu=cpu_rate / base_cpu_rate if base_cpu_rate > 0 else float("nan"),
        draft_cost=draft_cost,
        verify_cost=verify_cost,
        predicted_speedup=predicted,
        same_as_baseline=(run.generated == baseline.generated) if temperature == 0.0 else None,
        wall_s=s.wall_s,
        baseline_wall_s=b.wall_s,
        cpu_s=measured.cpu_s,
        baseline_cpu_s=base.cpu_s,
        tree_width=tree_width,
    )


def _fmt_t(t: float) -> str:
    return f"{t:g}"


def run_sweep(
    target: LoadedModel,
    prompts: Sequence[BenchPrompt],
    spec: SweepSpec,
    *,
    draft: LoadedModel | None = None,
    early_exit=None,
    on_progress: ProgressFn | None = None,
    warmup: bool = True,
) -> list[BenchRow]:
    """Run the sweep and return one BenchRow per speculative run. early_exit: a cached early_exit_view
    of the target (built here when needed and not given). on_progress is called after every run."""
    from specviz.models import early_exit_view, encode_prompt
    from specviz.runs import build_decoder, exit_layer_for

    if not prompts:
        raise ValueError("No prompts to benchmark: choose at least one category.")
    if "model" in spec.drafters and draft is None:
        raise ValueError("The 'model' drafter needs a draft model (--draft): give a hub id or a local folder.")

    def config(drafter: str, k: int, temperature: float, max_new_tokens: int, tree_width: int = 1) -> RunConfig:
        return RunConfig(
            target=target.name, draft=draft.name if draft is not None else None, drafter=drafter,  # type: ignore[arg-type]
            exit_layer=spec.exit_layer, num_draft_tokens=k, temperature=temperature, seed=spec.seed,
            max_new_tokens=max_new_tokens, chat=spec.chat, tree_width=tree_width,
        )

    if "early-exit" in spec.drafters and early_exit is None:
        early_exit = early_exit_view(target.model, exit_layer_for(config("early-exit", 1, 0.0, 1), target))
    ids = {p: encode_prompt(target.tokenizer, p.prompt, spec.chat) for p in prompts}

    def decode(drafter: str, k: int, temperature: float, prompt_ids: list[int], baseline: bool, max_new_tokens: int, tree_width: int = 1) -> Measured:
        cfg = config(drafter, k, temperature, max_new_tokens, tree_width)
        start = time.process_time()
        decoder = build_decoder(cfg, target, prompt_ids, draft, early_exit=early_exit, baseline=baseline)
        decoder.run()
        return Measured(decoder, time.process_time() - start)

    if warmup:  # the first passes pay for allocation and kernel selection; keep them out of the table
        first = ids[prompts[0]]
        decode(spec.drafters[0], spec.ks[0], 0.0, first, True, 4)
        for d in spec.drafters:
            decode(d, spec.ks[0], 0.0, first, False, 4)

    total, done = spec.num_runs(len(prompts)), 0
    rows: list[BenchRow] = []
    for prompt in prompts:
        for temperature in spec.temperatures:
            baseline = decode(spec.drafters[0], spec.ks[0], temperature, ids[prompt], True, spec.max_new_tokens)
            done += 1
            if on_progress:
                on_progress(done, total, f"{prompt.category} {prompt.title!r} baseline T={_fmt_t(temperature)} ... {baseline.decoder.stats().tokens_per_s:.1f} tok/s")
            for drafter in spec.drafters:
                for k, width in [(k, w) for k in spec.ks for w in spec.tree_widths]:
                    run = decode(drafter, k, temperature, ids[prompt], False, spec.max_new_tokens, width)
                    rows.append(_row(prompt, drafter, k, temperature, spec, run, baseline, width))
                    done += 1
                    if on_progress:
                        tree = f" W={width}" if width > 1 else ""
                        on_progress(done, total, f"{prompt.category} {drafter} k={k}{tree} T={_fmt_t(temperature)} ... {rows[-1].speedup:.2f}x (CPU time {rows[-1].speedup_cpu:.2f}x)")
    return rows


def rows_to_frame(rows: Sequence[BenchRow]) -> pd.DataFrame:
    """BenchRows -> a DataFrame with exactly COLUMNS, in order (empty rows give an empty frame)."""
    import pandas as pd

    return pd.DataFrame([asdict(r) for r in rows], columns=list(COLUMNS))


def summary_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean over prompts per (category, drafter, k, temperature): the table a report shows."""
    keys = ["category", "drafter", "k", "temperature"]
    cols = ["alpha", "alpha_implied", "acceptance_rate", "tokens_per_pass", "tokens_per_s", "baseline_tokens_per_s", "speedup", "speedup_cpu", "predicted_speedup"]
    return frame.groupby(keys, sort=False)[cols].mean().reset_index()


def tree_vs_chain_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Token trees against chains at the same node budget k: means over prompts per (drafter, k, temperature,
    tree_width) of tokens per target pass, the verify pass's cost and the speedups."""
    keys = ["drafter", "k", "temperature", "tree_width"]
    cols = ["acceptance_rate", "tokens_per_pass", "verify_cost", "speedup", "speedup_cpu"]
    return frame.groupby(keys, sort=True)[cols].mean().reset_index()


# --- command line -------------------------------------------------------------------------------


def _csv_list(text: str, cast, what: str) -> tuple:
    try:
        items = tuple(cast(x.strip()) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{what} must be a comma-separated list, e.g. 2,4,8; got {text!r}.") from exc
    if not items:
        raise argparse.ArgumentTypeError(f"{what} must not be empty.")
    return items


def add_bench_parser(sub) -> None:
    """Register `python -m specviz bench` on the CLI's subparsers."""
    p = sub.add_parser(
        "bench",
        help="sweep drafters, k and temperature over a prompt set, against plain decoding",
        description="Benchmark speculative decoding against plain decoding of the same target, prompt and sampling.",
    )
    p.add_argument("--prompts", default=str(DEFAULT_PROMPTS), help="JSON list of {category, title, prompt} (default: assets/prompts.json)")
    p.add_argument("--categories", type=lambda s: _csv_list(s, str, "--categories"), default=None, help="e.g. code,prose,copy (default: all)")
    p.add_argument("--drafters", type=lambda s: _csv_list(s, str, "--drafters"), default=SweepSpec.drafters,
                   help=f"comma-separated, from {','.join(BENCH_DRAFTERS)} (default: ngram,lookup,early-exit)")
    p.add_argument("--k", type=lambda s: _csv_list(s, int, "--k"), default=(2, 4, 8), help="tokens drafted per round (default: 2,4,8)")
    p.add_argument("--temperatures", type=lambda s: _csv_list(s, float, "--temperatures"), default=(0.0, 1.0), help="default: 0,1")
    p.add_argument("--tree-width", type=lambda s: _csv_list(s, int, "--tree-width"), default=(1,), help="children per token-tree node, e.g. 1,2,3 (1 = a chain; default: 1)")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", default=EMBEDDED_TARGET, help="hub id, local folder or .gguf file (default: embedded SmolLM2-135M-Instruct)")
    p.add_argument("--draft", default=None, help="draft model for the 'model' drafter (same tokenizer as the target)")
    p.add_argument("--exit-layer", type=int, default=None, help="early exit: target blocks the draft runs")
    p.add_argument("--no-chat", action="store_true", help="feed prompts raw, without the chat template")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--allow-pickle", action="store_true", help="load .bin/.pt checkpoints (only if you trust them)")
    p.add_argument("--allow-download", action="store_true")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice); 1 is steadier on a busy machine")
    p.add_argument("--out", default=None, help="write the results table here (.csv, or .json for a list of records)")


def _print_progress(done: int, total: int, message: str) -> None:
    print(f"[{done}/{total}] {message}", file=sys.stderr, flush=True)


def cmd_bench(args: argparse.Namespace) -> int:
    from specviz.models import load_model

    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be at least 1; got {args.threads}.")
        import torch

        torch.set_num_threads(args.threads)
    spec = SweepSpec(
        drafters=tuple(args.drafters), ks=tuple(args.k), temperatures=tuple(args.temperatures),
        max_new_tokens=args.max_new_tokens, seed=args.seed, chat=not args.no_chat, exit_layer=args.exit_layer,
        tree_widths=tuple(args.tree_width),
    )
    prompts = load_prompts(args.prompts, args.categories)
    if args.out and Path(args.out).suffix.lower() not in (".csv", ".json"):
        raise ValueError(f"--out must end in .csv or .json; got {args.out}.")
    kwargs = dict(trust_remote_code=args.trust_remote_code, allow_download=args.allow_download, allow_pickle=args.allow_pickle)
    target = load_model(args.target, args.device, args.dtype, **kwargs)
    draft = load_model(args.draft, args.device, args.dtype, **kwargs) if "model" in spec.drafters and args.draft else None
    print(f"benchmark: {len(prompts)} prompts, {spec.num_runs(len(prompts))} runs on {target.name} ({target.device})", file=sys.stderr)
    frame = rows_to_frame(run_sweep(target, prompts, spec, draft=draft, on_progress=_print_progress))
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.suffix.lower() == ".json":
            out.write_text(frame.to_json(orient="records", indent=1), encoding="utf-8")
        else:
            frame.to_csv(out, index=False, float_format="%.4g")
        print(f"wrote {len(frame)} rows to {out}", file=sys.stderr)
    show = ["category", "prompt", "drafter", "k", "temperature", "alpha", "acceptance_rate", "tokens_per_pass",
            "tokens_per_s", "baseline_tokens_per_s", "speedup", "speedup_cpu"]
    if len(spec.tree_widths) > 1:
        show.insert(4, "tree_width")
    print(frame[show].to_string(index=False, float_format=lambda x: f"{x:.2f}", na_rep="n/a"))
    if len(spec.tree_widths) > 1:
        print("\ntrees vs chains at the same node budget k (means over prompts):")
        print(tree_vs_chain_table(frame).to_string(index=False, float_format=lambda x: f"{x:.2f}", na_rep="n/a"))
    return 0
