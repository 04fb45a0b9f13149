"""The exactness lab's experiments on a real model: N first tokens with speculative decoding against N
from the target alone, and greedy speculative decoding beside plain greedy decoding.

pages/exactness.py only draws what these return. The toy-vocabulary experiment is plain torch and
lives in specviz.core.toy. The functions here take a loaded model and import specviz.models (and so
transformers) only when called, so a page can import this module cheaply.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from specviz.config import RunConfig, validate_prompt
from specviz.core.divergence import first_difference
from specviz.core.protocols import Turn, no_turn
from specviz.core.toy import TOY_VARIANTS, chi_square_pvalue, sample_first_tokens, tv_distance
from specviz.drafters.specs import ONE_MODEL_KINDS, drafter_spec

if TYPE_CHECKING:
    from specviz.runs import RunModels

REAL_MODES = {"fast": "fast: the rule on one round's real distributions", "engine": "end to end: N fresh engine runs"}
LAB_DRAFTERS = list(ONE_MODEL_KINDS)  # the drafters that need no second model
TOP_TOKENS = 10  # the target's most likely tokens shown as bars; the rest pooled as "other"
MAX_FAST_SAMPLES = 1_000_000
MAX_ENGINE_RUNS = 1_000

ProgressFn = Callable[[int, int], None]  # (runs done, runs in total)


@dataclass(frozen=True)
class RealResult:
    """N first emitted tokens with speculative decoding and N from the target alone, and the target's top tokens there."""

    config: RunConfig
    prompt: str
    mode: str  # a key of REAL_MODES
    variant: str  # the rule (fast mode); the engine is always exact
    token_ids: tuple[int, ...]  # the target's most likely tokens at the first position
    token_texts: tuple[str, ...]
    p_target: tuple[float, ...]
    q_draft: tuple[float, ...] | None
    spec_tokens: tuple[int, ...]
    target_tokens: tuple[int, ...]
    drafted_runs: int  # samples for which the drafter proposed a token


@dataclass(frozen=True)
class RealSummary:
    """A RealResult bucketed over the top tokens plus one 'other' bucket, with goodness of fit to p_target."""

    names: list[str]  # token texts (untrusted model output; figures escape them), then "(other)"
    p_buckets: list[float]
    q_buckets: list[float] | None
    spec_counts: list[int]
    target_counts: list[int]
    spec_tv: float  # total-variation distance of the speculative histogram from p_target
    spec_pvalue: float  # chi-square goodness of fit to p_target
    target_tv: float
    target_pvalue: float


@dataclass(frozen=True)
class GreedyResult:
    config: RunConfig
    prompt: str
    spec_ids: tuple[int, ...]
    plain_ids: tuple[int, ...]
    spec_text: str
    plain_text: str
    tokens_per_target_pass: float
    drafted: int = 0  # tokens the drafter proposed over the speculative run: 0 means the check compared two plain runs
    accepted: int = 0  # of those, kept by the rule

    @property
    def identical(self) -> bool:
        return self.spec_ids == self.plain_ids

    @property
    def first_difference(self) -> int | None:
        """Index of the first generated token where the two outputs differ (None when identical)."""
        return first_difference(self.spec_ids, self.plain_ids)


def sample_fast(config: RunConfig, models: RunModels, prompt_ids: list[int], n: int, variant: str):
    """Full p_target and q_draft at the first position, then N vectorised draws of the chosen rule and N
    from p_target -> (speculative ids, target ids, p_target (V,), q_draft (V,) or None when nothing was drafted).
    The drafter is set up by a decoder's prefill (whatever it reads of the target's passes handed over, as in a run's
    first round), then the target's pass over the prompt's last token gives p_target."""
    from specviz.core.sampling import warp
    from specviz.core.verify import one_hot_q
    from specviz.runs import build_decoder

    generator = torch.Generator().manual_seed(config.seed)
    decoder = build_decoder(config, models, prompt_ids)
    decoder.hand_over()
    drafter = decoder.drafter
    p1 = warp(decoder.target.extend(prompt_ids[-1:])[-1], config.sampling).float().cpu()  # (V,)
    draft = drafter.propose(prompt_ids, 1, generator)
    target_tokens = torch.multinomial(p1, n, replacement=True, generator=generator).tolist()
    if not draft.token_ids:  # nothing drafted: the first token is the target's own sample
        return torch.multinomial(p1, n, replacement=True, generator=generator).tolist(), target_tokens, p1, None
    q1 = draft.q_draft[0].float().cpu() if draft.q_draft is not None else one_hot_q(torch.tensor(draft.token_ids[:1]), p1.numel())[0]
    return sample_first_tokens(p1, q1, n, generator, variant).tolist(), target_tokens, p1, q1


def sample_engine(config: RunConfig, models: RunModels, prompt_ids: list[int], n: int, on_progress: ProgressFn | None = None,
                  turn: Turn = no_turn):  # fmt: skip
    """N fresh speculative runs (k = 1, two new tokens) and N fresh plain one-token runs -> (speculative ids,
    target ids, p_target (V,) and q_draft (V,) over the first round's top-N (zero elsewhere), runs that drafted).
    Each pair of runs is one model turn."""
    from specviz.runs import RunModels, build_decoder

    target = models.target
    spec_tokens, target_tokens, first, drafted_runs = [], [], None, 0
    for i in range(n):
        with turn():
            spec = build_decoder(config, models, prompt_ids, seed=2 * i)
            record = spec.step()
            plain = build_decoder(dataclasses.replace(config, max_new_tokens=1), RunModels(target), prompt_ids, seed=2 * i + 1, baseline=True)
            target_tokens.append(plain.step().emitted[0])
            del spec, plain  # their caches go before the next pair's prefill: two runs' caches at most
        if first is None:
            first = record
        drafted_runs += record.num_drafted > 0
        spec_tokens.append(record.emitted[0])
        if on_progress:
            on_progress(i + 1, n)
    dist = first.dists[0]  # top-N at the first position; the rest of p_target is pooled as "other"
    p1 = torch.zeros(target.vocab_size)
    p1[list(dist.token_ids)] = torch.tensor(dist.p_target)
    q1 = None
    if dist.q_draft is not None:
        q1 = torch.zeros(target.vocab_size)
        q1[list(dist.token_ids)] = torch.tensor(dist.q_draft)
    return spec_tokens, target_tokens, p1, q1, drafted_runs


def sample_real(
    config: RunConfig, models: RunModels, prompt: str, mode: str, n: int, variant: str = "exact", *,
    on_progress: ProgressFn | None = None, turn: Turn = no_turn,
) -> RealResult:
    """The lab's real-model experiment: N first tokens both ways (mode 'fast' or 'engine'), with the target's top tokens.
    turn: the model is taken one turn for the fast mode's two passes, one per pair of runs in engine mode. models: the
    run's models (the parts its drafter reads that models lacks are loaded once here, for all N runs)."""
    validate_prompt(prompt)
    if mode not in REAL_MODES:
        raise ValueError(f"Unknown mode {mode!r}; choose one of {', '.join(REAL_MODES)}.")
    if variant not in TOY_VARIANTS:
        raise ValueError(f"Unknown rule {variant!r}; choose one of {', '.join(TOY_VARIANTS)}.")
    limit = MAX_FAST_SAMPLES if mode == "fast" else MAX_ENGINE_RUNS
    if not (1 <= n <= limit):
        raise ValueError(f"N must be between 1 and {limit:,} in {mode} mode; got {n}.")
    from specviz.models import encode_prompt

    target = models.target
    prompt_ids = encode_prompt(target.tokenizer, prompt, chat=config.chat)
    models = _with_parts(config, models)
    if mode == "fast":
        with turn():
            spec_tokens, target_tokens, p1, q1 = sample_fast(config, models, prompt_ids, n, variant)
        drafted_runs = n if q1 is not None else 0
    else:
        variant = "exact"  # the engine runs the exact rule
        spec_tokens, target_tokens, p1, q1, drafted_runs = sample_engine(config, models, prompt_ids, n, on_progress, turn)
    ids = torch.topk(p1, min(TOP_TOKENS, p1.numel())).indices.tolist()
    return RealResult(
        config=config, prompt=prompt, mode=mode, variant=variant, token_ids=tuple(ids),
        token_texts=tuple(target.tokenizer.decode([t]) for t in ids), p_target=tuple(p1[ids].tolist()),
        q_draft=tuple(q1[ids].tolist()) if q1 is not None else None,
        spec_tokens=tuple(spec_tokens), target_tokens=tuple(target_tokens), drafted_runs=drafted_runs,
    )


def bucket_counts(tokens: tuple[int, ...], ids: list[int]) -> list[int]:
    """Counts of each shown token, then one 'other' bucket for the rest."""
    counts = [sum(t == i for t in tokens) for i in ids]
    return counts + [len(tokens) - sum(counts)]


def summarize_real(real: RealResult) -> RealSummary:
    """Bucket both samples over the shown tokens and test each against p_target."""
    ids = list(real.token_ids)
    p_buckets = list(real.p_target) + [max(0.0, 1.0 - sum(real.p_target))]
    q_buckets = (list(real.q_draft) + [max(0.0, 1.0 - sum(real.q_draft))]) if real.q_draft is not None else None
    spec_counts, target_counts = bucket_counts(real.spec_tokens, ids), bucket_counts(real.target_tokens, ids)
    expected = torch.tensor(p_buckets, dtype=torch.float64)
    spec_t, target_t = torch.tensor(spec_counts), torch.tensor(target_counts)
    return RealSummary(
        names=[repr(t)[1:-1] for t in real.token_texts] + ["(other)"],
        p_buckets=p_buckets, q_buckets=q_buckets, spec_counts=spec_counts, target_counts=target_counts,
        spec_tv=float(tv_distance(spec_t, expected)), spec_pvalue=float(chi_square_pvalue(spec_t, expected)),
        target_tv=float(tv_distance(target_t, expected)), target_pvalue=float(chi_square_pvalue(target_t, expected)),
    )


def _with_parts(config: RunConfig, models: RunModels) -> RunModels:
    """models with the Medusa heads or the EAGLE head the config drafts with, loaded once for many runs when missing."""
    from specviz.runs import load_target_eagle, load_target_heads

    source = drafter_spec(config.drafter).source
    if models.heads is None and source == "heads":
        return dataclasses.replace(models, heads=load_target_heads(config.medusa_heads, models.target))
    if models.eagle is None and source == "eagle":
        return dataclasses.replace(models, eagle=load_target_eagle(config.eagle_head, models.target))
    return models


def greedy_side_by_side(config: RunConfig, models: RunModels, prompt: str, *, turn: Turn = no_turn) -> GreedyResult:
    """Decode the prompt greedily twice, speculatively and plainly, from fresh runs (each in model turns of about a
    second: specviz.experiments.timed_runs.run_in_turns)."""
    from specviz.experiments.timed_runs import run_in_turns
    from specviz.models import encode_prompt
    from specviz.runs import RunModels, build_decoder

    validate_prompt(prompt)
    if config.temperature != 0.0:
        raise ValueError(f"The side-by-side check is for greedy decoding (temperature 0); got {config.temperature:g}.")
    target = models.target
    prompt_ids = encode_prompt(target.tokenizer, prompt, config.chat)
    models = _with_parts(config, models)
    spec, _, _ = run_in_turns(lambda: build_decoder(config, models, prompt_ids), turn)
    plain, _, _ = run_in_turns(lambda: build_decoder(config, RunModels(target), prompt_ids, baseline=True), turn)
    return GreedyResult(
        config=config, prompt=prompt, spec_ids=tuple(spec.generated), plain_ids=tuple(plain.generated),
        spec_text=target.tokenizer.decode(spec.generated, skip_special_tokens=True),
        plain_text=target.tokenizer.decode(plain.generated, skip_special_tokens=True),
        tokens_per_target_pass=spec.stats().tokens_per_target_pass,
        drafted=sum(r.num_drafted for r in spec.records), accepted=sum(r.num_accepted for r in spec.records),
    )
