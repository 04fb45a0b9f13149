"""The engine on real (tiny, random) transformers models: greedy speculative output equals plain greedy and
model.generate, caches stay at the committed length, the early-exit view shares the target's weights,
and loading refuses what it should. Bad-input cases for loading live in test_bad_input.py and test_safety.py."""

from __future__ import annotations

import time

import pytest
import torch

from specviz.config import RunConfig
from specviz.core.decoding import DecodeConfig, SpeculativeDecoder
from specviz.drafters import ModelDrafter
from specviz.models import HFCachedLM, LoadedModel, ModelLoadError, early_exit_view, encode_prompt, load_model
from specviz.runs import RunModels, build_decoder
from tests.conftest import VERIFIED_PRECISIONS

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one intra-op thread is faster

PROMPT = "repeat the following paragraph exactly : the cat sat on the mat and the dog sat on the log"
MAX_NEW = 24


def prompt_ids(model: LoadedModel) -> list[int]:
    return encode_prompt(model.tokenizer, PROMPT, chat=False)


def hf_greedy(model: LoadedModel, ids: list[int], max_new: int = MAX_NEW, eos=None) -> list[int]:
    input_ids = torch.tensor([ids])
    out = model.model.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        do_sample=False,
        max_new_tokens=max_new,
        eos_token_id=list(model.eos_token_ids) if eos is None else eos,
        pad_token_id=model.tokenizer.pad_token_id,
    )
    return out[0, len(ids) :].tolist()


@pytest.fixture(scope="module")
def reference(tiny_models_at):
    """(precision, target name) -> transformers' own greedy output for that target in that precision."""
    cache: dict[tuple[str, str], list[int]] = {}

    def get(precision: str, name: str) -> list[int]:
        if (precision, name) not in cache:
            model = tiny_models_at(precision, name)
            cache[precision, name] = hf_greedy(model, prompt_ids(model))
        return cache[precision, name]

    return get


def check_caches(dec: SpeculativeDecoder) -> None:
    """Token lists and the real KV caches both hold the committed length: the target all but the newest (all of them
    before a run's first round when the prefill kept the newest one's row: carried)."""
    cached = len(dec.tokens) - (0 if dec.carried_row is not None else 1)
    assert list(dec.target.tokens) == dec.tokens[:cached]
    assert dec.target.cache.get_seq_length() == cached
    lm = getattr(dec.drafter, "lm", None)
    if lm is not None:
        assert list(lm.tokens) == dec.tokens[: len(lm.tokens)] and len(lm.tokens) <= len(dec.tokens)
        assert lm.cache.get_seq_length() == len(lm.tokens)


def run_checked(dec: SpeculativeDecoder) -> SpeculativeDecoder:
    check_caches(dec)
    while not dec.done:
        dec.step()
        check_caches(dec)
    return dec


DRAFTS = {"llama": "llama_draft", "gpt2": "llama_draft"}  # share the tokenizer; the llama draft is a noisy copy


@pytest.mark.parametrize("precision", VERIFIED_PRECISIONS)
@pytest.mark.parametrize("target_name", ["llama", "gpt2"])
def test_baseline_equals_generate(tiny_models_at, reference, target_name, precision):
    target = tiny_models_at(precision, target_name)
    config = RunConfig(target=target_name, drafter="none", max_new_tokens=MAX_NEW)
    dec = run_checked(build_decoder(config, RunModels(target), prompt_ids(target), baseline=True))
    assert dec.generated == reference(precision, target_name)
    assert all(len(r.emitted) == 1 for r in dec.records)


@pytest.mark.parametrize("precision", VERIFIED_PRECISIONS)
@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize("drafter", ["lookup", "model", "early-exit"])
@pytest.mark.parametrize("target_name", ["llama", "gpt2"])
def test_greedy_speculative_equals_generate(tiny_models_at, reference, target_name, drafter, k, precision):
    target = tiny_models_at(precision, target_name)
    draft = tiny_models_at(precision, DRAFTS[target_name]) if drafter == "model" else None
    config = RunConfig(
        target=target_name, drafter=drafter, draft="d" if draft else None, exit_layer=1, num_draft_tokens=k, auto_k=False, max_new_tokens=MAX_NEW
    )
    dec = run_checked(build_decoder(config, RunModels(target, draft), prompt_ids(target)))
    assert dec.generated == reference(precision, target_name)
    assert dec.stats().target_passes == len(dec.records)


def test_the_tiny_drafts_are_sometimes_accepted(tiny_models):
    """Guards the identity tests above: the drafts are neither always wrong nor always right."""
    rates = {}
    for target_name, drafter in [("llama", "model"), ("llama", "early-exit"), ("gpt2", "lookup")]:
        target = tiny_models[target_name]
        draft = tiny_models["llama_draft"] if drafter == "model" else None
        config = RunConfig(target="t", drafter=drafter, draft="d" if draft else None, exit_layer=1, num_draft_tokens=8, auto_k=False, max_new_tokens=MAX_NEW)
        rates[target_name, drafter] = build_decoder(config, RunModels(target, draft), prompt_ids(target))
        rates[target_name, drafter].run()
    for key, dec in rates.items():
        stats = dec.stats()
        assert 0 < stats.accepted < stats.drafted, key
        assert any(r.num_accepted == r.num_drafted > 0 for r in dec.records), key  # an all-accepted round


@pytest.mark.parametrize("draft_name, target_name", [("llama_padded", "llama"), ("llama", "llama_padded")])
def test_logits_wider_than_the_vocabulary_are_aligned(tiny_models, draft_name, target_name):
    target, draft = tiny_models[target_name], tiny_models[draft_name]
    assert target.model.get_output_embeddings().weight.shape[0] != draft.model.get_output_embeddings().weight.shape[0]
    ids = prompt_ids(target)
    config = RunConfig(target="t", drafter="model", draft="d", num_draft_tokens=3, auto_k=False, max_new_tokens=12)
    dec = run_checked(build_decoder(config, RunModels(target, draft), ids))
    # not generate(): it may pick a padding column, which the engine never emits
    baseline = build_decoder(config, RunModels(target), ids, baseline=True)
    baseline.run()
    assert dec.generated == baseline.generated
    assert all(t < len(target.tokenizer) for t in dec.generated)


@pytest.mark.parametrize("k", [4, 8])
def test_eos_inside_a_round_on_a_real_model(tiny_models, k):
    target = tiny_models["llama"]
    ids = prompt_ids(target)
    ref = hf_greedy(target, ids, MAX_NEW)
    index = next(i for i in range(1, k) if ref[i] not in ref[:i])
    eos = ref[index]
    expected = hf_greedy(target, ids, MAX_NEW, eos=[eos])
    assert expected == ref[: index + 1]
    config = DecodeConfig(num_draft_tokens=k, max_new_tokens=MAX_NEW, eos_token_ids=(eos,))
    view = early_exit_view(target.model, 1)
    dec = SpeculativeDecoder(
        HFCachedLM(target.model, target.vocab_size),
        ModelDrafter(HFCachedLM(view, target.vocab_size), config.sampling),
        ids,
        config,
    )
    run_checked(dec)
    assert dec.generated == expected and dec.finished and dec.records[-1].finished


# -- the KV-cache adapter --------------------------------------------------------------------------------


def test_cache_length_follows_extend_and_crop(tiny_models):
    model = tiny_models["llama"]
    ids = prompt_ids(model)[:10]
    with torch.inference_mode():
        full = model.model(torch.tensor([ids])).logits[0, :, : model.vocab_size]  # (10, V) without a cache
    lm = HFCachedLM(model.model, model.vocab_size)
    first = lm.extend(ids[:6])
    assert first.shape == (6, model.vocab_size)
    assert lm.cache.get_seq_length() == len(lm.tokens) == 6
    lm.crop(3)
    assert lm.cache.get_seq_length() == 3 and list(lm.tokens) == ids[:3]
    rest = lm.extend(ids[3:])
    assert lm.cache.get_seq_length() == len(lm.tokens) == 10
    assert torch.allclose(torch.cat([first[:3], rest]), full, atol=1e-4)
    lm.crop(25)  # longer than the cache: nothing to drop
    assert lm.cache.get_seq_length() == 10
    with pytest.raises(ValueError):
        lm.extend([])


def test_two_runs_on_one_model_do_not_share_a_cache(tiny_models):
    model = tiny_models["llama"]
    a, b = HFCachedLM(model.model, model.vocab_size), HFCachedLM(model.model, model.vocab_size)
    a.extend([5, 6, 7])
    assert b.cache.get_seq_length() == 0 and list(b.tokens) == []


# -- early exit ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_early_exit_view_shares_storage_and_leaves_the_target_alone(tiny_models, name):
    target = tiny_models[name].model
    ids = torch.tensor([prompt_ids(tiny_models[name])])
    with torch.inference_mode():
        before = target(ids).logits
    view = early_exit_view(target, 1)
    assert view.config.num_hidden_layers == 1 and target.config.num_hidden_layers == 2
    blocks = next(m for m in target.base_model.children() if isinstance(m, torch.nn.ModuleList))
    assert len(blocks) == 2  # the target keeps all its blocks
    target_params = dict(target.named_parameters())
    shared = 0
    for pname, param in view.named_parameters():
        assert pname in target_params, pname
        assert param.data_ptr() == target_params[pname].data_ptr(), pname
        shared += 1
    assert shared > 5
    assert view.get_output_embeddings().weight.data_ptr() == target.get_output_embeddings().weight.data_ptr()
    with torch.inference_mode():
        assert torch.equal(target(ids).logits, before)
        out = view(ids).logits
    assert out.shape == before.shape and not torch.allclose(out, before)


def test_early_exit_logits_are_the_first_layers_then_norm_and_head(tiny_models):
    target = tiny_models["llama"].model
    ids = torch.tensor([prompt_ids(tiny_models["llama"])])
    view = early_exit_view(target, 1)
    with torch.inference_mode():
        hidden = target(ids, output_hidden_states=True).hidden_states[1]  # after block 0, before the norm
        expected = target.lm_head(target.model.norm(hidden))
        assert torch.allclose(view(ids).logits, expected, atol=1e-5)


@pytest.mark.parametrize("layer", [0, 2, 5])
def test_early_exit_layer_out_of_range(tiny_models, layer):
    with pytest.raises(ValueError, match="between 1 and 1"):
        early_exit_view(tiny_models["llama"].model, layer)


# -- loading -----------------------------------------------------------------------------------------------------


def test_load_model_from_a_local_folder(tiny_dir):
    loaded = load_model(str(tiny_dir["llama"]), "cpu", "float32")
    assert loaded.device == torch.device("cpu") and loaded.dtype == torch.float32
    assert loaded.num_layers == 2 and loaded.vocab_size == len(loaded.tokenizer)
    assert loaded.tokenizer.eos_token_id in loaded.eos_token_ids
    assert not loaded.model.training
    assert all(not p.requires_grad for p in loaded.model.parameters())


def test_unknown_hub_id_fails_fast_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("SPECVIZ_ALLOW_DOWNLOAD", raising=False)
    start = time.perf_counter()
    with pytest.raises(ModelLoadError, match="not in the Hugging Face cache"):
        load_model("specviz-tests/no-such-model-anywhere", "cpu", "float32")
    assert time.perf_counter() - start < 15, "an offline miss must fail at once, not retry"


def test_a_draft_model_reads_the_prompt_only_when_it_first_drafts(tiny_models):
    """k: auto's plain rounds (k = 0) cost a draft model nothing: preparing reads nothing, a k = 0 proposal reads
    nothing, and the first proposal that drafts catches up on the whole context."""
    target = tiny_models["llama"]
    config = RunConfig(target="t", drafter="early-exit", exit_layer=1, num_draft_tokens=2, auto_k=False, max_new_tokens=MAX_NEW)
    dec = build_decoder(config, RunModels(target), prompt_ids(target))
    assert dec.drafter.lm.tokens == []  # the prefill left the draft alone
    dec.drafter.propose(dec.tokens, 0, torch.Generator())
    assert dec.drafter.lm.tokens == []
    dec.step()
    assert len(dec.drafter.lm.tokens) >= len(prompt_ids(target))
