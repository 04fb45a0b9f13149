"""Turn a RunConfig and loaded models into a decoder: the glue between specviz.models and specviz.core.

resolve_models() is the one place that decides which models a run needs (the target; a draft model for the
'model' drafter; the early-exit view of the target for 'early-exit'); callers hand it their loader (the UI's
cached one, or a plain load), so the CLI, the benchmark, the lab and the step-through page load alike."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from specviz.config import RunConfig
from specviz.core.decoding import DecodeConfig, SpeculativeDecoder
from specviz.core.records import StepRecord
from specviz.core.resume import DecoderState, resume
from specviz.drafters import NoDrafter
from specviz.drafters.base import Drafter
from specviz.drafters.specs import drafter_spec
from specviz.models import HFCachedLM, LoadedModel, check_same_tokenizer, early_exit_view, load_model
from specviz.models.adapter import default_exit_layer

Loader = Callable[[str], LoadedModel]  # source -> loaded model
EarlyExitOf = Callable[[LoadedModel, int], Any]  # (target, exit layer) -> the early-exit model view


@dataclass(frozen=True)
class RunModels:
    """The models a run (or a sweep over several drafters) needs, resolved once."""

    target: LoadedModel
    draft: LoadedModel | None = None  # for the 'model' drafter
    early_exit: Any = None  # the target's first layers as a model, for 'early-exit'


@dataclass(frozen=True)
class SavedDecoder:
    """A run as saved after a round: what resume_decoder needs to continue it."""

    generated: Sequence[int]  # every token the run committed after the prompt
    records: Sequence[StepRecord]
    state: DecoderState
    seed: int
    prefill_ms: float = 0.0


def exit_layer_for(config: RunConfig, target: LoadedModel) -> int:
    return config.exit_layer if config.exit_layer is not None else default_exit_layer(target.model)


def resolve_models(
    config: RunConfig,
    load: Loader | None = None,
    early_exit_of: EarlyExitOf | None = None,
    *,
    target: LoadedModel | None = None,
    drafters: Iterable[str] | None = None,
) -> RunModels:
    """Load the target (unless given), a draft model when one of ``drafters`` (default: the config's) needs it,
    and the early-exit view when one drafts with the target's first layers. load defaults to load_model with
    the config's options; early_exit_of to a fresh early_exit_view."""
    load = load or (lambda source: load_model(source, **config.load_options()))
    early_exit_of = early_exit_of or (lambda model, layer: early_exit_view(model.model, layer))
    specs = [drafter_spec(kind) for kind in (drafters if drafters is not None else (config.drafter,))]
    target = target if target is not None else load(config.target)
    draft = None
    if any(s.needs_model for s in specs):
        if not (config.draft or "").strip():
            raise ValueError("The 'model' drafter needs a draft model: give a hub id or a local folder.")
        draft = load(config.draft or "")
    early = early_exit_of(target, exit_layer_for(config, target)) if any(s.lm == "early-exit" for s in specs) else None
    return RunModels(target, draft, early)


def make_drafter(config: RunConfig, target: LoadedModel, draft: LoadedModel | None = None, early_exit=None) -> Drafter:
    """Build this run's drafter from its spec. early_exit: a cached early_exit_view of the target, if the caller keeps one."""
    spec = drafter_spec(config.drafter)
    vocab, lm, name = target.vocab_size, None, spec.short_name
    if spec.lm == "draft":
        if draft is None:
            raise ValueError("The 'model' drafter needs a loaded draft model.")
        check_same_tokenizer(target, draft)
        vocab = min(vocab, draft.vocab_size)
        lm, name = HFCachedLM(draft.model, vocab), f"draft model {draft.name}"
    elif spec.lm == "early-exit":
        layer = exit_layer_for(config, target)
        view = early_exit if early_exit is not None else early_exit_view(target.model, layer)
        lm, name = HFCachedLM(view, vocab), f"early exit at layer {layer}/{target.num_layers}"
    return spec.build(config, vocab, lm, name)


def build_decoder(
    config: RunConfig,
    target: LoadedModel,
    prompt_ids: list[int],
    draft: LoadedModel | None = None,
    *,
    early_exit=None,
    seed: int | None = None,
    baseline: bool = False,
) -> SpeculativeDecoder:
    """A fresh run. baseline=True gives plain target decoding under the same sampling: one token per pass."""
    lm, drafter = _parts(config, target, draft, early_exit, baseline)
    return SpeculativeDecoder(lm, drafter, prompt_ids, _decode_config(config, target, seed, baseline))


def _parts(config: RunConfig, target: LoadedModel, draft, early_exit, baseline: bool) -> tuple[HFCachedLM, Drafter]:
    """The target's cached view and the run's drafter (plain decoding: no drafter)."""
    drafter: Drafter = NoDrafter() if baseline else make_drafter(config, target, draft, early_exit)
    vocab = target.vocab_size if draft is None or baseline else min(target.vocab_size, draft.vocab_size)
    return HFCachedLM(target.model, vocab), drafter


def _decode_config(config: RunConfig, target: LoadedModel, seed: int | None, baseline: bool) -> DecodeConfig:
    decode = config.decode_config(target.eos_token_ids, seed)
    return replace(decode, num_draft_tokens=0, adaptive_k=False) if baseline else decode


def resume_decoder(
    config: RunConfig,
    target: LoadedModel,
    prompt_ids: list[int],
    saved: SavedDecoder,
    draft: LoadedModel | None = None,
    *,
    early_exit=None,
    baseline: bool = False,
) -> SpeculativeDecoder:
    """A run continued where a saved one stopped (specviz.core.resume): same drafter, prefilled with every committed
    token, generators restored, so the next rounds are the ones the saved run would have stepped."""
    lm, drafter = _parts(config, target, draft, early_exit, baseline)
    decode = _decode_config(config, target, saved.seed, baseline)
    return resume(lm, drafter, prompt_ids, saved.generated, saved.records, decode, saved.state, saved.prefill_ms)


def decoder_for(config: RunConfig, models: RunModels, prompt_ids: list[int], *, seed: int | None = None, baseline: bool = False) -> SpeculativeDecoder:
    """build_decoder with the models resolve_models() found."""
    return build_decoder(config, models.target, prompt_ids, models.draft, early_exit=models.early_exit, seed=seed, baseline=baseline)
