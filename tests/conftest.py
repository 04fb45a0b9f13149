"""Shared fixtures: tiny random transformers models built locally (nothing is downloaded), and SmolLM2 once.

The tokenizer is a WordLevel vocabulary trained on a few sentences and wrapped in
PreTrainedTokenizerFast; both tiny models share it, so they can act as target and draft.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.store_helpers import redis_server, room_store, shared_redis, store_env  # noqa: F401  (fixtures: the room's store on both backends)

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the suite never talks to the hub

SENTENCES = [
    "the quick brown fox jumps over the lazy dog",
    "a speculative decoder drafts a few tokens and the target verifies them in one pass",
    "def reverse ( s ) : return s [ : : - 1 ]",
    "write a python function that reverses a string",
    "repeat the following paragraph exactly : the cat sat on the mat and the dog sat on the log",
    "accepted rejected resampled bonus target draft model prompt lookup early exit",
    "one two three four five six seven eight nine ten eleven twelve",
    "red orange yellow green blue indigo violet black white grey",
    "monday tuesday wednesday thursday friday saturday sunday",
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu",
]
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]


def build_tokenizer(sentences: list[str] = SENTENCES):
    """A small word-level fast tokenizer (vocab in the low hundreds at most), built offline."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.WordLevel(unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    raw.train_from_iterator(sentences, trainers.WordLevelTrainer(special_tokens=SPECIAL_TOKENS))
    return PreTrainedTokenizerFast(
        tokenizer_object=raw, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )


def _save_llama(folder: Path, tokenizer, seed: int, noise_seed: int | None = None, pad_vocab_to: int = 0) -> Path:
    """A 2-layer random Llama. noise_seed: add seeded noise (half the init scale) to every weight, giving a
    second model that agrees with the first some of the time. pad_vocab_to: pad the embedding/LM head."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=max(len(tokenizer), pad_vocab_to),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    if noise_seed is not None:
        g = torch.Generator().manual_seed(noise_seed)
        with torch.no_grad():
            for param in model.parameters():
                param.add_(0.5 * config.initializer_range * torch.randn(param.shape, generator=g))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _save_gpt2(folder: Path, tokenizer, seed: int) -> Path:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_embd=32,
        n_layer=2,
        n_head=2,
        n_positions=256,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = GPT2LMHeadModel(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def one_thread():
    """For modules of toy-sized tensors: a second intra-op thread only adds synchronisation, which
    costs milliseconds per op (softmax of 10 numbers: ~10 ms) when other processes share the cores."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> dict[str, Path]:
    """Folders of tiny random models. Sharing one tokenizer: 'llama' (the target), 'llama_draft' (the llama
    plus seeded noise, so it agrees with it part of the time), 'llama_padded' (another llama whose logits are
    27 columns wider than the vocabulary) and 'gpt2'. 'other_tok' is a llama with a different tokenizer."""
    root = tmp_path_factory.mktemp("tiny_models")
    tok = build_tokenizer()
    other = build_tokenizer(SENTENCES[:3])
    return {
        "llama": _save_llama(root / "llama", tok, seed=1),
        "llama_draft": _save_llama(root / "llama_draft", tok, seed=1, noise_seed=2),
        "llama_padded": _save_llama(root / "llama_padded", tok, seed=5, pad_vocab_to=len(tok) + 27),
        "gpt2": _save_gpt2(root / "gpt2", tok, seed=3),
        "other_tok": _save_llama(root / "other_tok", other, seed=4),
    }


@pytest.fixture(scope="session")
def tiny_models(tiny_dir):
    """The tiny folders loaded once through specviz.models.load_model on the CPU in float32."""
    from specviz.models import load_model

    return {name: load_model(str(path), "cpu", "float32") for name, path in tiny_dir.items()}


@pytest.fixture(scope="session")
def smollm():
    """The embedded SmolLM2-135M-Instruct on the CPU in float32, loaded once for the whole session."""
    from specviz.models import EMBEDDED_TARGET, load_model

    return load_model(EMBEDDED_TARGET, "cpu", "float32")


# words from the tiny tokenizer's vocabulary, so prompts are not all <unk>; the first repeats itself
TINY_PROMPTS = [
    {"category": "copy", "title": "cat", "prompt": "the cat sat on the mat and the dog sat on the log the cat sat on the"},
    {"category": "prose", "title": "fox", "prompt": "the quick brown fox jumps over the lazy dog"},
    {"category": "code", "title": "reverse", "prompt": "def reverse ( s ) : return s [ : : - 1 ]"},
]


@pytest.fixture()
def prompts_file(tmp_path):
    path = tmp_path / "prompts.json"
    import json

    path.write_text(json.dumps(TINY_PROMPTS), encoding="utf-8")
    return path


@pytest.fixture
def no_model(monkeypatch):
    """Every way the page could load a model raises; the calls are counted."""
    calls: list[str] = []

    def refuse(source, *args, **kwargs):
        calls.append(source)
        raise ModelLoadError("no model can be loaded on this machine (test)")

    import specviz.ui.common.models
    from specviz.models import ModelLoadError

    monkeypatch.setattr(specviz.ui.common.models, "get_model", refuse)
    monkeypatch.setattr(specviz.ui.common.models, "load_model", refuse)
    return calls


@pytest.fixture(scope="module")
def tree_compare(tiny_models, tiny_dir):
    """Compare mode on the tiny llama: early exit with a width-3 tree at T=1 beside the same as a chain."""
    from dataclasses import replace

    from specviz.config import RunConfig
    from tests.test_recording import stepped_compare

    target = tiny_models["llama"]
    config = RunConfig(
        target=str(tiny_dir["llama"]), drafter="early-exit", exit_layer=1, temperature=1.0, num_draft_tokens=6,
        tree_width=3, auto_k=False, max_new_tokens=16, chat=False, seed=3,
    )  # fmt: skip
    return stepped_compare(target, config, replace(config, tree_width=1), ("A: tree", "B: chain"))


def pytest_collection_modifyitems(items):
    """A test that takes the smollm fixture is a smollm test, so `-m "not smollm"` leaves it out."""
    for item in items:
        if "smollm" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.smollm)


@pytest.fixture(autouse=True)
def _only_smollm_tests_load_smollm(request, monkeypatch):
    """Outside tests marked smollm, loading the embedded SmolLM2 target fails loudly, so `-m "not smollm"` loads
    nothing big and a test that needs it must say so."""
    import sys

    loading = sys.modules.get("specviz.models.loading")
    if loading is None or request.node.get_closest_marker("smollm"):
        return

    try:
        embedded = loading.embedded_gguf_path()
    except Exception:  # no embedded target installed: nothing to guard
        return
    load_gguf = loading._load_gguf

    def guarded(path, dtype):
        if Path(path) == embedded:
            raise RuntimeError(f"{request.node.nodeid} loads the embedded SmolLM2 target: mark it @pytest.mark.smollm")
        return load_gguf(path, dtype)

    monkeypatch.setattr(loading, "_load_gguf", guarded)


VERIFIED_PRECISIONS = ("float32", "fp16-weights")  # the precisions specviz verifies drafts with on a CPU


def skip_unless_precision_runs(precision: str) -> None:
    """fp16-weights needs fbgemm (x86-64); elsewhere its tests are skipped, not failed."""
    import torch

    from specviz.models import FP16_WEIGHTS, fp16_weights_problem

    if precision == FP16_WEIGHTS and (problem := fp16_weights_problem(torch.device("cpu"))):
        pytest.skip(problem)


@pytest.fixture(scope="session")
def tiny_models_at(tiny_models, tiny_dir):
    """precision -> the tiny models loaded in it (float32: the tiny_models themselves), loaded once per name."""
    from specviz.models import load_model

    cache: dict[tuple[str, str], object] = {}

    def get(precision: str, name: str):
        if precision == "float32":
            return tiny_models[name]
        skip_unless_precision_runs(precision)
        if (precision, name) not in cache:
            cache[precision, name] = load_model(str(tiny_dir[name]), "cpu", precision)
        return cache[precision, name]

    return get


@pytest.fixture(scope="session")
def smollm_at(smollm):
    """precision -> the embedded SmolLM2 loaded in it (float32: the smollm fixture), each loaded once."""
    from specviz.models import EMBEDDED_TARGET, load_model

    cache = {"float32": smollm}

    def get(precision: str):
        skip_unless_precision_runs(precision)
        if precision not in cache:
            cache[precision] = load_model(EMBEDDED_TARGET, "cpu", precision)
        return cache[precision]

    return get


@pytest.fixture(scope="session")
def loud_dir(tmp_path_factory) -> Path:
    """A tiny random Llama with a large init (logits of several units, like a trained model's) and a tied head:
    big enough activations for per-tensor int8 scales to show how a position depends on its neighbours."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = build_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.3, tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )  # fmt: skip
    folder = tmp_path_factory.mktemp("loud_llama")
    LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_heads(tiny_dir, tiny_models, tmp_path_factory) -> Path:
    """Three random heads for the tiny llama, saved as Medusa does (config.json + medusa_lm_head.safetensors)."""
    import torch

    from specviz.models.medusa import MedusaHeads, save_heads, target_fingerprint

    embedding = tiny_models["llama"].model.get_input_embeddings().weight
    heads = MedusaHeads(int(embedding.shape[1]), num_heads=3)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in heads.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.5)
    folder = tmp_path_factory.mktemp("heads") / "tiny_heads"
    save_heads(heads, folder, base_model=str(tiny_dir["llama"]), fingerprint=target_fingerprint(embedding))
    return folder
