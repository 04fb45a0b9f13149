"""Turn a RunConfig and loaded models into a decoder: the glue between specviz.models and specviz.core."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from specviz.config import RunConfig
from specviz.core.decoding import DecodeConfig, SpeculativeDecoder
from specviz.core.records import StepRecord
from specviz.core.resume import DecoderState, resume
from specviz.drafters import ModelDrafter, NGramDrafter, NoDrafter, PromptLookupDrafter
from specviz.drafters.base import Drafter
from specviz.models import HFCachedLM, LoadedModel, check_same_tokenizer, early_exit_view
from specviz.models.adapter import default_exit_layer


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


def make_drafter(config: RunConfig, target: LoadedModel, draft: LoadedModel | None = None, early_exit=None) -> Drafter:
    """Build this run's drafter. early_exit: a cached early_exit_view of the target, if the caller keeps one."""
    vocab = target.vocab_size
    if config.drafter == "lookup":
        return PromptLookupDrafter(config.ngram_max, config.ngram_min)
    if config.drafter == "ngram":
        return NGramDrafter(vocab, config.ngram_max, config.ngram_min, config.ngram_threshold)
    if config.drafter == "none":
        return NoDrafter()
    if config.drafter == "model":
        if draft is None:
            raise ValueError("The 'model' drafter needs a loaded draft model.")
        check_same_tokenizer(target, draft)
        vocab = min(vocab, draft.vocab_size)
        return ModelDrafter(HFCachedLM(draft.model, vocab), config.sampling, name=f"draft model {draft.name}")
    if config.drafter == "early-exit":
        layer = exit_layer_for(config, target)
        view = early_exit if early_exit is not None else early_exit_view(target.model, layer)
        return ModelDrafter(HFCachedLM(view, vocab), config.sampling, name=f"early exit at layer {layer}/{target.num_layers}")
    raise ValueError(f"Unknown drafter {config.drafter!r}.")


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
