"""One verify pass over a token tree on real transformers models: every node's logits equal its path decoded
as a chain, and keep_path() leaves exactly the cache that decoding the accepted path builds."""

from __future__ import annotations

import pytest
import torch

from specviz.core.tree import ancestors
from specviz.models.adapter import HFCachedLM

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = [5, 6, 7, 8, 9]
BLOCK = [9, 10, 11, 12, 13, 14, 15]  # the newest committed token (the root), then six nodes
PARENTS = [-1, 0, 0, 1, 2, 2, 5]


def check_tree_equals_chains(loaded, atol: float) -> None:
    lm = HFCachedLM(loaded.model, loaded.vocab_size)
    assert lm.tree_problem is None
    lm.extend(PROMPT[:-1])
    logits = lm.extend_tree(BLOCK, PARENTS)  # (7, V)
    for i in range(len(BLOCK)):
        chain = HFCachedLM(loaded.model, loaded.vocab_size)
        ref = chain.extend(PROMPT[:-1] + [BLOCK[j] for j in ancestors(PARENTS, i)])[-1]
        torch.testing.assert_close(logits[i], ref, atol=atol, rtol=0)
    path = ancestors(PARENTS, 6)  # 0 -> 2 -> 5 -> 6
    lm.keep_path(path)
    chain = HFCachedLM(loaded.model, loaded.vocab_size)
    chain.extend(PROMPT[:-1] + [BLOCK[j] for j in path])
    assert list(lm.tokens) == list(chain.tokens)
    for mine, ref in zip(lm.cache.layers, chain.cache.layers):
        torch.testing.assert_close(mine.keys, ref.keys, atol=atol, rtol=0)
        torch.testing.assert_close(mine.values, ref.values, atol=atol, rtol=0)
    torch.testing.assert_close(lm.extend([3]), chain.extend([3]), atol=atol, rtol=0)  # the next pass agrees too


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_tree_logits_equal_chain_logits(tiny_models, name):
    check_tree_equals_chains(tiny_models[name], atol=1e-5)


@pytest.mark.smollm
def test_tree_logits_equal_chain_logits_on_smollm(smollm):
    check_tree_equals_chains(smollm, atol=1e-3)  # float32 sums in another order over 30 layers


def test_bad_parents_and_a_stray_keep_path_are_refused(tiny_models):
    lm = HFCachedLM(tiny_models["llama"].model, tiny_models["llama"].vocab_size)
    with pytest.raises(ValueError, match="parent"):
        lm.extend_tree([1, 2], [-1, 1])
    with pytest.raises(ValueError, match="extend_tree"):
        lm.keep_path([0])


def test_a_model_without_custom_masks_says_so(tiny_models, monkeypatch):
    loaded = tiny_models["llama"]
    lm = HFCachedLM(loaded.model, loaded.vocab_size)
    monkeypatch.setattr(loaded.model.config, "_attn_implementation", "flash_attention_2")
    assert lm.tree_problem is not None
    with pytest.raises(ValueError, match="fall back to chains"):
        lm.extend_tree([1], [-1])


# -- the decoding loop with trees on real models: greedy output equals transformers' generate ---------------

from specviz.config import RunConfig  # noqa: E402
from specviz.models import encode_prompt  # noqa: E402
from specviz.runs import RunModels, build_decoder  # noqa: E402
from tests.conftest import VERIFIED_PRECISIONS  # noqa: E402
from tests.test_models import MAX_NEW, hf_greedy, prompt_ids, run_checked  # noqa: E402

WIDTHS = [("float32", w) for w in (1, 2, 3, 4)] + [("fp16-weights", w) for w in (1, 2, 3)]


@pytest.mark.parametrize("precision, width", WIDTHS)
@pytest.mark.parametrize("drafter", ["ngram", "model", "early-exit", "lookup"])
@pytest.mark.parametrize("target_name", ["llama", "gpt2"])
def test_greedy_tree_equals_generate(tiny_models_at, target_name, drafter, precision, width):
    target = tiny_models_at(precision, target_name)
    ids = prompt_ids(target)
    draft = tiny_models_at(precision, "llama_draft") if drafter == "model" else None
    config = RunConfig(
        target=target_name, drafter=drafter, draft="d" if draft else None, exit_layer=1, num_draft_tokens=6,
        tree_width=width, ngram_threshold=0.0, auto_k=False, max_new_tokens=MAX_NEW,
    )  # fmt: skip
    dec = run_checked(build_decoder(config, RunModels(target, draft), ids))
    assert dec.generated == hf_greedy(target, ids)
    assert dec.use_tree == (width > 1 and drafter != "lookup")
    assert dec.stats().target_passes == len(dec.records)


SMOL_PROMPT = (
    "Repeat the following paragraph exactly: A speculative decoder drafts a few tokens cheaply, "
    "and the target model checks all of them in one forward pass, keeping the ones it agrees with."
)


@pytest.mark.smollm
@pytest.mark.parametrize("precision", VERIFIED_PRECISIONS)
def test_greedy_tree_equals_plain_greedy_on_smollm(smollm_at, precision):
    smollm = smollm_at(precision)
    widths = (1, 2, 3, 4) if precision == "float32" else (3,)  # fp16-weights: widths 1-3 run on the tiny models
    ids = encode_prompt(smollm.tokenizer, SMOL_PROMPT, chat=True)
    plain = build_decoder(RunConfig(max_new_tokens=MAX_NEW), RunModels(smollm), ids, baseline=True)
    plain.run()
    for drafter in ("ngram", "early-exit", "recycle"):
        for width in widths:
            config = RunConfig(drafter=drafter, num_draft_tokens=6, auto_k=False, tree_width=width, max_new_tokens=MAX_NEW)
            dec = build_decoder(config, RunModels(smollm), ids)
            dec.run()
            assert dec.generated == plain.generated, (drafter, width)
            assert dec.use_tree == (width > 1)


def test_a_model_without_custom_masks_falls_back_to_chains(tiny_models, monkeypatch, caplog):
    """What tree_support_problem() reports for flash attention or sliding-window caches, simulated on the adapter."""
    target = tiny_models["llama"]
    ids = prompt_ids(target)
    message = "LlamaForCausalLM runs flash_attention_2 attention, which takes no custom tree mask; token trees fall back to chains."
    monkeypatch.setattr(HFCachedLM, "tree_problem", property(lambda self: message))
    config = RunConfig(target="llama", drafter="ngram", num_draft_tokens=6, auto_k=False, tree_width=3, ngram_threshold=0.0, max_new_tokens=MAX_NEW)
    with caplog.at_level("WARNING"):
        dec = build_decoder(config, RunModels(target), ids)
    assert not dec.use_tree and message in caplog.text
    dec.run()
    assert dec.generated == hf_greedy(target, ids) and not any(r.is_tree for r in dec.records)
