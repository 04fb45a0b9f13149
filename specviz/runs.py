"""Turn a RunConfig and loaded models into a decoder: the glue between specviz.models and specviz.core."""

from __future__ import annotations

from dataclasses import replace

from specviz.config import RunConfig
from specviz.core.decoding import SpeculativeDecoder
from specviz.drafters import ModelDrafter, NGramDrafter, NoDrafter, PromptLookupDrafter
from specviz.drafters.base import Drafter
from specviz.models import HFCachedLM, LoadedModel, check_same_tokenizer, early_exit_view
from specviz.models.adapter import default_exit_layer


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
    drafter: Drafter = NoDrafter() if baseline else make_drafter(config, target, draft, early_exit)
    vocab = target.vocab_size if draft is None or baseline else min(target.vocab_size, draft.vocab_size)
    decode = config.decode_config(target.eos_token_ids, seed)
    if baseline:
        decode = replace(decode, num_draft_tokens=0, adaptive_k=False)
    return SpeculativeDecoder(HFCachedLM(target.model, vocab), drafter, prompt_ids, decode)
