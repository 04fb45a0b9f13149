"""Turn a RunConfig and loaded models into a decoder: the glue between specviz.models and specviz.core.

resolve_models() is the one place that decides which models a run needs (the target, and each drafter's model
source as the drafter table names it: a draft model for 'model', the early-exit view of the target for 'early-exit',
Medusa heads for 'medusa', an EAGLE head for 'eagle'), and RunModels carries them whole to make_drafter,
build_decoder and resume_decoder; callers hand it their loaders (the UI's cached ones, or a plain load), so the CLI,
the benchmark, the lab and the step-through page load alike. A Medusa or EAGLE run's target view keeps its hidden
states (HFCachedLM keep_hidden), per run: the shared model and the shared heads are only read. A draft vocabulary
(config.draft_vocab) cuts the target's LM head to the V' tokens the heads' token counts rank first, built per run (a
few ms: the rows are read from the tied input embedding, or unpacked once from an untied head).

prompt_ids() is the one place a prompt becomes the ids a run prefills, after every check a prompt must pass before
any model turn (its characters, the owner's token budget, the model's context); kv_tokens() is a run's worst-case
KV cache, what a shared server reserves for it (specviz.workshop.budgets)."""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from specviz.config import RunConfig, validate_prompt
from specviz.core.auto_k import AutoCosts
from specviz.core.decoding import DecodeConfig, SpeculativeDecoder, resume
from specviz.core.profile import CostProfile, load_profile
from specviz.core.records import StepRecord
from specviz.core.resume import RunState
from specviz.core.theory import VerifyCurve
from specviz.drafters import NoDrafter
from specviz.drafters.base import Drafter
from specviz.drafters.eagle import FeatureHead
from specviz.drafters.medusa import HeadsSource
from specviz.drafters.specs import DraftSource, ModelSource, drafter_spec
from specviz.models import HFCachedLM, LoadedModel, check_same_tokenizer, early_exit_view, encode_prompt, load_model
from specviz.models.adapter import default_exit_layer, kv_bytes_per_token
from specviz.models.eagle import EagleCache, EagleHead, EagleShape, load_eagle, logits_fn, step_fn
from specviz.models.environment import device_name
from specviz.models.loading import cache_root
from specviz.models.medusa import HeadsError, MedusaHeads, head_logits_fn, load_heads, target_fingerprint
from specviz.models.precision import FP16_WEIGHTS, pack_fp16_linears
from specviz.models.vocab import COUNTS_FILE, ReducedHead, VocabError, draft_vocab_ids, read_token_counts

Loader = Callable[[str], LoadedModel]  # source -> loaded model
EarlyExitOf = Callable[[LoadedModel, int], Any]  # (target, exit layer) -> the early-exit model view
HeadsOf = Callable[[str | None, LoadedModel], MedusaHeads]  # (heads folder or None, target) -> heads on its device
EagleOf = Callable[[str | None, LoadedModel], EagleHead]  # (head folder or None, target) -> the head on its device
SHIPPED_HEADS = Path(__file__).resolve().parents[1] / "assets" / "medusa_smollm2_135m"  # for the embedded target
SHIPPED_EAGLE = Path(__file__).resolve().parents[1] / "assets" / "eagle_smollm2_135m"  # for the embedded target
ASSETS = Path(__file__).resolve().parents[1] / "assets"
PROFILE_ENV = "SPECVIZ_PROFILE"  # a profile for k: auto (`specviz profile --out PATH`), before the one --save keeps
UNKNOWN_DRAFT_COST = 0.2  # k: auto's drafting cost per token for a drafter the profile does not time (a second model)
# k: auto's fixed cost of a drafted round beyond the profile's per-token cost, in 1-token passes: the median over
# assets/drafting_cpu.json's chain rows of (drafting per round - k * the profile's c), at least 0 (the n-gram model's is
# below 0 on the 2026-12-05 profile: its c covers the round); tests/test_auto_k.py re-derives it.
# Prompt lookup drafts as the n-gram model does (a dict look-up); a drafter not in that table is charged ROUND_COST_UNKNOWN.
DRAFT_ROUND_COST: dict[str, float] = {
    "ngram": 0.0, "lookup": 0.0, "recycle": 0.024, "medusa": 0.12, "medusa@8192": 0.055, "eagle": 0.20, "eagle@8192": 0.076,
}  # fmt: skip
ROUND_COST_UNKNOWN = 0.05
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunModels:
    """The models a run (or a sweep over several drafters) needs, resolved once."""

    target: LoadedModel
    draft: LoadedModel | None = None  # for the 'model' drafter
    early_exit: Any = None  # the target's first layers as a model, for 'early-exit'
    heads: MedusaHeads | None = None  # for 'medusa', on the target's device
    eagle: EagleHead | None = None  # for 'eagle', on the target's device


@dataclass(frozen=True)
class SavedDecoder:
    """A run as saved after a round: what resume_decoder needs to continue it."""

    generated: Sequence[int]  # every token the run committed after the prompt
    records: Sequence[StepRecord]
    state: RunState
    seed: int
    prefill_ms: float = 0.0


def run_positions(num_prompt_tokens: int, max_new_tokens: int, num_draft_tokens: int) -> int:
    """The most positions a run's caches reach: the prompt, every new token, and one round's k drafts plus one."""
    return num_prompt_tokens + max_new_tokens + num_draft_tokens + 1


def check_prompt_tokens(
    target: LoadedModel, num_prompt_tokens: int, max_new_tokens: int, num_draft_tokens: int = 0, max_prompt_tokens: int | None = None
) -> None:
    """A prompt of this many of the target's tokens may run: within the owner's budget (None: no budget) and, with
    max new tokens and a round's k + 1, within the model's context. ValueError naming the limit and the count."""
    if max_prompt_tokens is not None and num_prompt_tokens > max_prompt_tokens:
        raise ValueError(f"Your prompt is {num_prompt_tokens:,} tokens; this server allows {max_prompt_tokens:,}. Shorten it.")
    context = target.context_length
    needed = run_positions(num_prompt_tokens, max_new_tokens, num_draft_tokens)
    if context is not None and needed > context:
        raise ValueError(
            f"Your prompt ({num_prompt_tokens:,} tokens) plus max new tokens ({max_new_tokens:,}) and a round's k + 1 "
            f"({num_draft_tokens + 1}) needs {needed:,} positions; the model's context is {context:,}. Shorten the prompt "
            "or lower max new tokens."
        )


def prompt_ids(
    target: LoadedModel, prompt: str, chat: bool, *, max_new_tokens: int, num_draft_tokens: int = 0, max_prompt_tokens: int | None = None
) -> list[int]:
    """The ids a run of prompt prefills, exactly (the target's tokenizer, its chat template when chat), once they
    pass every check a prompt must pass before any model turn: its characters first (specviz.config.validate_prompt:
    a huge paste never reaches the tokenizer), then check_prompt_tokens. ValueError with a message for the user."""
    validate_prompt(prompt)
    ids = encode_prompt(target.tokenizer, prompt, chat)
    check_prompt_tokens(target, len(ids), max_new_tokens, num_draft_tokens, max_prompt_tokens)
    return ids


def kv_tokens(config: RunConfig, models: RunModels, num_prompt_tokens: int, *, baseline: bool = False) -> int:
    """A run's worst-case KV cache, in tokens of its target's cache: run_positions() for the target, plus as many for
    the drafter's own cache scaled by its bytes per token (a draft model's; an early exit's, its first layers of the
    target). Prompt lookup, the n-gram model and Medusa heads keep no cache."""
    k = 0 if baseline else config.k_ceiling  # adaptive and auto k may grow to their ceiling
    positions = run_positions(num_prompt_tokens, config.max_new_tokens, k)
    target = models.target
    own = target.kv_bytes_per_token
    source = "none" if baseline else drafter_spec(config.drafter).source
    extra = 0
    if source == "draft" and models.draft is not None:
        extra = models.draft.kv_bytes_per_token
    elif source == "early_exit":
        extra = kv_bytes_per_token(target.model, target.dtype, exit_layer_for(config, target))
    return positions + -(-positions * extra // own)  # the drafter's share rounded up


def exit_layer_for(config: RunConfig, target: LoadedModel) -> int:
    return config.exit_layer if config.exit_layer is not None else default_exit_layer(target.model)


def load_target_heads(folder: str | None, target: LoadedModel) -> MedusaHeads:
    """Medusa heads for this target, on its device: from ``folder``, or the shipped heads (None). HeadsError (a
    ValueError) naming both models when they were trained for another target or do not fit its hidden size."""
    path = SHIPPED_HEADS if folder is None else Path(folder).expanduser()
    if folder is None and not (path / "config.json").is_file():
        raise HeadsError(f"The shipped Medusa heads ({path}) are not installed; give a heads folder (--medusa-heads PATH).")
    if not path.is_dir():
        raise HeadsError(f"No Medusa heads folder at {path}.")
    embedding = target.model.get_input_embeddings().weight
    heads = load_heads(path, int(embedding.shape[1]), target_fingerprint(embedding), target.name)
    heads.token_counts = _counts(path, target)
    return heads.to(target.device)


def load_target_eagle(folder: str | None, target: LoadedModel) -> EagleHead:
    """An EAGLE head for this target, on its device (packed to float16 weights when the target is): from ``folder``, or
    the shipped head (None). HeadsError (a ValueError) naming both models when it was trained for another target."""
    path = SHIPPED_EAGLE if folder is None else Path(folder).expanduser()
    if folder is None and not (path / "config.json").is_file():
        raise HeadsError(
            f"The shipped EAGLE head ({path}) is not installed yet; train one with `python -m specviz train-heads --kind eagle "
            "--out assets/eagle_smollm2_135m`, or give a head folder (--eagle-head PATH)."
        )
    if not path.is_dir():
        raise HeadsError(f"No EAGLE head folder at {path}.")
    embedding = target.model.get_input_embeddings().weight
    head = load_eagle(path, EagleShape.of_target(target.model.config), target_fingerprint(embedding), target.name)
    if target.precision == FP16_WEIGHTS:
        pack_fp16_linears(head)  # fresh, not shared yet: the same float16 GEMM as the target's own layers
    head.token_counts = _counts(path, target)
    return head.to(target.device)


def _counts(folder: Path, target: LoadedModel):
    """The folder's token counts for a draft vocabulary, or None when it has none."""
    return read_token_counts(folder, target.vocab_size) if (folder / COUNTS_FILE).is_file() else None


def draft_head(target: LoadedModel, counts, size: int, what: str) -> ReducedHead | None:
    """The target's LM head cut to the ``size`` tokens ``counts`` ranks first (None for size 0: the full vocabulary).
    A head tied to the input embedding reads its rows from the embedding (no unpacking of a float16-packed head)."""
    if not size:
        return None
    if counts is None:
        raise VocabError(f"The {what} have no token counts ({COUNTS_FILE}), so no draft vocabulary: count them with "
                         "`python -m specviz train-heads --count-vocab --out FOLDER`, or set the draft vocabulary to 0 (full).")  # fmt: skip
    if size > target.vocab_size:
        raise VocabError(f"A draft vocabulary of {size:,} tokens is larger than the target's ({target.vocab_size:,}).")
    model = target.model
    lm_head = model.get_output_embeddings()
    tied = bool(getattr(model.config, "tie_word_embeddings", False)) and getattr(lm_head, "bias", None) is None
    rows = model.get_input_embeddings() if tied else lm_head
    return ReducedHead(lm_head, draft_vocab_ids(counts, size).to(target.device), rows=rows)


def heads_source(heads: MedusaHeads, target: LoadedModel, vocab: int, draft_vocab: int = 0) -> HeadsSource:
    """What the Medusa drafter drafts with: the heads, then the target's own LM head, cut to a draft vocabulary of
    ``draft_vocab`` tokens when asked (all only read)."""
    model = target.model
    reduced = draft_head(target, heads.token_counts, draft_vocab, "Medusa heads")
    logits = head_logits_fn(heads, model.get_output_embeddings(), vocab, model.get_input_embeddings(), reduced)
    return HeadsSource(logits, heads.num_heads, target.device, None if reduced is None else reduced.ids)


def eagle_source(head: EagleHead, target: LoadedModel, vocab: int, draft_vocab: int = 0) -> FeatureHead:
    """What the EAGLE drafter drafts with: the head over a fresh per-run cache, reading tokens through the target's
    input embedding, and the target's LM head (cut to a draft vocabulary when asked). All shared parts are only read."""
    model = target.model
    reduced = draft_head(target, head.token_counts, draft_vocab, "EAGLE head")
    lm_head = reduced if reduced is not None else model.get_output_embeddings()
    dtype = target.model.get_input_embeddings().weight.dtype
    logits = logits_fn(lm_head, vocab if reduced is None else reduced.size, dtype)
    return FeatureHead(EagleCache, step_fn(head, model.get_input_embeddings()), logits, target.device, None if reduced is None else reduced.ids)


def resolve_models(
    config: RunConfig,
    load: Loader | None = None,
    early_exit_of: EarlyExitOf | None = None,
    heads_of: HeadsOf | None = None,
    *,
    target: LoadedModel | None = None,
    drafters: Iterable[str] | None = None,
    eagle_of: EagleOf | None = None,
) -> RunModels:
    """Load the target (unless given) and each model source (DrafterSpec.source) one of ``drafters`` (default: the
    config's) drafts with: a draft model, the early-exit view, the Medusa heads, the EAGLE head. load defaults to
    load_model with the config's options; early_exit_of to a fresh early_exit_view; heads_of to load_target_heads;
    eagle_of to load_target_eagle."""
    load = load or (lambda source: load_model(source, **config.load_options()))
    early_exit_of = early_exit_of or (lambda model, layer: early_exit_view(model.model, layer))
    specs = [drafter_spec(kind) for kind in (drafters if drafters is not None else (config.drafter,))]
    target = target if target is not None else load(config.target)

    def draft() -> LoadedModel:
        replace(config, drafter=next(s.kind for s in specs if s.source == "draft"))  # RunConfig.validate says when it is missing
        return load(config.draft or "")

    loaders: dict[str, Callable[[], Any]] = {  # each RunModels field's source, in the order they load
        "draft": draft,
        "early_exit": lambda: early_exit_of(target, exit_layer_for(config, target)),
        "heads": lambda: (heads_of or load_target_heads)(config.medusa_heads, target),
        "eagle": lambda: (eagle_of or load_target_eagle)(config.eagle_head, target),
    }
    sources = {s.source for s in specs}
    return RunModels(target, **{field: load_source() for field, load_source in loaders.items() if field in sources})


# What make_drafter hands a drafter's build, by the drafter's model source: (what it drafts with, its vocabulary size,
# its display name). A part the models lack (early exit's view, Medusa's heads, EAGLE's head) is built or loaded here.
def _no_source(config: RunConfig, models: RunModels, name: str) -> tuple[DraftSource, int, str]:
    return None, models.target.vocab_size, name


def _target_source(config: RunConfig, models: RunModels, name: str) -> tuple[DraftSource, int, str]:
    return models.target.device, models.target.vocab_size, name


def _draft_source(config: RunConfig, models: RunModels, name: str) -> tuple[DraftSource, int, str]:
    target, draft = models.target, models.draft
    if draft is None:
        raise ValueError("The 'model' drafter needs a loaded draft model.")
    check_same_tokenizer(target, draft)
    vocab = min(target.vocab_size, draft.vocab_size)
    return HFCachedLM(draft.model, vocab), vocab, f"draft model {draft.name}"


def _early_exit_source(config: RunConfig, models: RunModels, name: str) -> tuple[DraftSource, int, str]:
    target = models.target
    layer = exit_layer_for(config, target)
    view = models.early_exit if models.early_exit is not None else early_exit_view(target.model, layer)
    return HFCachedLM(view, target.vocab_size), target.vocab_size, f"early exit at layer {layer}/{target.num_layers}"


def _heads_source(config: RunConfig, models: RunModels, name: str) -> tuple[DraftSource, int, str]:
    target = models.target
    heads = models.heads if models.heads is not None else load_target_heads(config.medusa_heads, target)
    source = heads_source(heads, target, target.vocab_size, config.draft_vocab)
    return source, target.vocab_size, f"{heads.num_heads} Medusa heads{vocab_note(config)}"


def _eagle_source(config: RunConfig, models: RunModels, name: str) -> tuple[DraftSource, int, str]:
    target = models.target
    eagle = models.eagle if models.eagle is not None else load_target_eagle(config.eagle_head, target)
    return eagle_source(eagle, target, target.vocab_size, config.draft_vocab), target.vocab_size, f"EAGLE{vocab_note(config)}"


SOURCES: dict[ModelSource, Callable[[RunConfig, RunModels, str], tuple[DraftSource, int, str]]] = {
    "none": _no_source, "target": _target_source, "draft": _draft_source, "early_exit": _early_exit_source,
    "heads": _heads_source, "eagle": _eagle_source,
}  # fmt: skip


def make_drafter(config: RunConfig, models: RunModels) -> Drafter:
    """Build this run's drafter from its spec and what its model source (DrafterSpec.source) gives: a part the
    models lack (early exit's view, Medusa's heads, EAGLE's head) is built or loaded here, for this run only."""
    spec = drafter_spec(config.drafter)
    lm, vocab, name = SOURCES[spec.source](config, models, spec.short_name)
    return spec.build(config, vocab, lm, name)


def vocab_note(config: RunConfig) -> str:
    """' (draft vocabulary 8,192)' for a run that cuts the LM head, else ''."""
    return f" (draft vocabulary {config.draft_vocab:,})" if config.draft_vocab and drafter_spec(config.drafter).cuts_vocab else ""


def build_decoder(
    config: RunConfig, models: RunModels, prompt_ids: list[int], *, seed: int | None = None, baseline: bool = False,
    top_n: int | None = None,
) -> SpeculativeDecoder:  # fmt: skip
    """A fresh run with the models resolve_models() found (RunModels(target) for a drafter that needs no other).
    baseline=True gives plain target decoding under the same sampling: one token per pass. top_n: entries of each
    distribution its records keep (None: the engine's default); 1 where nothing draws them (a race, a service), so
    building a round's record costs the least."""
    lm, drafter = _parts(config, models, baseline)
    decode = _decode_config(config, models.target, seed, baseline)
    return SpeculativeDecoder(lm, drafter, prompt_ids, decode if top_n is None else replace(decode, top_n=top_n))


def _parts(config: RunConfig, models: RunModels, baseline: bool) -> tuple[HFCachedLM, Drafter]:
    """The target's cached view (keeping its hidden states when the drafter reads them) and the run's drafter
    (plain decoding: no drafter)."""
    target, draft = models.target, models.draft
    drafter: Drafter = NoDrafter() if baseline else make_drafter(config, models)
    vocab = target.vocab_size if draft is None or baseline else min(target.vocab_size, draft.vocab_size)
    return HFCachedLM(target.model, vocab, keep_hidden=drafter.reads_hidden or drafter.reads_features), drafter


def _decode_config(config: RunConfig, target: LoadedModel, seed: int | None, baseline: bool) -> DecodeConfig:
    decode = config.decode_config(target.eos_token_ids, seed)
    if baseline:
        return replace(decode, num_draft_tokens=0, adaptive_k=False)
    return replace(decode, auto=auto_costs(config, target)) if config.k_policy == "auto" else decode


def saved_profile_path(target: LoadedModel) -> Path:
    """Where `specviz profile --save` keeps this machine's profile of this target, for k: auto: one file per target,
    precision and device as `device_name` names it (the CPU or GPU and torch's thread count: a profile timed at one
    thread does not price a run at two), under the cache folder."""
    key = f"{target.name}-{target.precision}-{device_name(target.device)}"
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", key).strip("_")[:100]
    return cache_root() / "profiles" / f"{readable}-{hashlib.sha256(key.encode()).hexdigest()[:10]}.json"


def machine_profile(target: LoadedModel, measured: str = "") -> tuple[CostProfile | None, str]:
    """(the cost profile k: auto prices rounds with, where it comes from): the file at $SPECVIZ_PROFILE when set,
    else the one `specviz profile --save` measured on this machine for this target (saved_profile_path), else the one
    shipped for this class of machine (assets/profile_cpu*.json, by precision); none for a GPU (shipped profiles are
    CPUs'). A file that does not load is passed over with a warning."""
    candidates = [(measured, lambda p: f"{Path(measured).name} (measured here)")] if measured else []
    saved = saved_profile_path(target)
    if saved.is_file():
        candidates.append((str(saved), lambda p: f"this machine's profile (specviz profile --save, {p.created[:10]})"))
    for path, says in candidates:
        try:
            profile = load_profile(path)
            return profile, says(profile)
        except ValueError as exc:
            log.warning("k: auto ignores the profile %s: %s", path, exc)
    if target.device.type != "cpu":
        return None, "no GPU profile shipped: a flat verify cost (`specviz profile --save` measures this GPU's)"
    name = "profile_cpu_float32.json" if target.precision == "float32" else "profile_cpu.json"
    return load_profile(ASSETS / name), f"{name} (shipped for a 2-core CPU)"


def auto_costs(config: RunConfig, target: LoadedModel, priced: tuple[CostProfile | None, str] | None = None) -> AutoCosts:
    """What k: auto weighs for this run: the machine's verify curve and the drafter's cost per token from its profile
    (the draft vocabulary's where it cuts one), and the drafter's benchmark acceptance as the prior. Without a
    profile (a GPU): a flat verify cost, a pass being bound by reading the weights, and the CPU's drafting costs.
    priced: (a profile, where it comes from) to use instead of machine_profile's (a benchmark's A/B)."""
    profile, source = priced or machine_profile(target, os.environ.get(PROFILE_ENV, ""))
    spec = drafter_spec(config.drafter)
    costs = (profile or load_profile(ASSETS / "profile_cpu.json")).draft_cost
    key = f"{config.drafter}@{config.draft_vocab}"
    key = key if spec.cuts_vocab and key in costs else config.drafter
    c = costs.get(key)
    verify = VerifyCurve(tuple(itertools.accumulate(profile.curve.costs, max))) if profile is not None else VerifyCurve((1.0, 1.0))  # a
    # wider pass costs at least as much as a narrower one: the measured curve's noise (a dip at one k) is not a reason to pick that k
    return AutoCosts(verify=verify, draft_cost=UNKNOWN_DRAFT_COST if c is None else c, prior=(spec.prior_acceptance,), source=source,
                     round_cost=DRAFT_ROUND_COST.get(key, ROUND_COST_UNKNOWN))  # fmt: skip


def resume_decoder(
    config: RunConfig, models: RunModels, prompt_ids: list[int], saved: SavedDecoder, *, baseline: bool = False
) -> SpeculativeDecoder:
    """A run continued where a saved one stopped (specviz.core.resume): same drafter, prefilled with every committed
    token, generators restored, so the next rounds are the ones the saved run would have stepped."""
    lm, drafter = _parts(config, models, baseline)
    decode = _decode_config(config, models.target, saved.seed, baseline)
    return resume(lm, drafter, prompt_ids, saved.generated, saved.records, decode, saved.state, saved.prefill_ms)
