"""Precisions: fp16-weights (fbgemm float16-packed linears, float32 math) is what --dtype auto picks on an x86-64 CPU,
falls back to float32 with a logged reason where it cannot run, and is fit to verify drafts: a position's logits do not
depend on the other positions in the pass (batch invariance). The known-bad control, per-tensor int8 dynamic
quantization, must show that dependence."""

from __future__ import annotations

import json
import types

import pytest
import torch

from specviz import cli
from specviz.config import RunConfig
from specviz.experiments.numerics import batch_dependence
from specviz.models import (
    EMBEDDED_TARGET,
    HFCachedLM,
    ModelLoadError,
    early_exit_view,
    encode_prompt,
    environment,
    fp16_weights_problem,
    load_model,
    resolve_dtype,
    resolve_dtype_name,
)
from specviz.models.precision import PackedFP16Linear
from specviz.runs import RunModels, build_decoder
from tests.conftest import VERIFIED_PRECISIONS, skip_unless_precision_runs
from tests.toys import pooled_pvalue

pytestmark = pytest.mark.usefixtures("one_thread")

CPU = torch.device("cpu")
INVARIANT = 1e-3  # float32 and fp16-weights: rounding-level differences only
DEPENDENT = 0.1  # per-tensor int8: a position moves with its neighbours
fbgemm = pytest.mark.skipif(fp16_weights_problem(CPU) is not None, reason=str(fp16_weights_problem(CPU)))


@pytest.fixture(scope="module")
def loud(loud_dir):
    """precision -> the loud tiny Llama loaded in it (each loaded once)."""
    cache = {}

    def get(precision: str):
        skip_unless_precision_runs(precision)
        if precision not in cache:
            cache[precision] = load_model(str(loud_dir), "cpu", precision)
        return cache[precision]

    return get


def random_ids(vocab: int, n: int, seed: int = 1) -> list[int]:
    return torch.randint(4, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


# -- resolving a dtype choice ----------------------------------------------------------------------------------


@fbgemm
def test_auto_is_fp16_weights_on_this_cpu_and_bfloat16_on_cuda():
    assert resolve_dtype_name("auto", CPU) == "fp16-weights" and resolve_dtype("auto", CPU) == torch.float32
    assert resolve_dtype_name("auto", torch.device("cuda")) == "bfloat16"
    assert resolve_dtype_name("auto", torch.device("mps")) == "float32"
    assert resolve_dtype_name("float32", CPU) == "float32"
    with pytest.raises(ModelLoadError, match="Unknown dtype"):
        resolve_dtype_name("int4", CPU)
    with pytest.raises(ModelLoadError, match="CPU only"):
        resolve_dtype_name("int8-dynamic", torch.device("cuda"))


def test_a_non_fbgemm_engine_falls_back_to_float32_and_says_why(tiny_dir, caplog):
    """qnnpack (the ARM engine) is a real engine here: choosing it is what an ARM machine looks like to us."""
    before = torch.backends.quantized.engine
    if "qnnpack" not in torch.backends.quantized.supported_engines:
        pytest.skip("this torch has no qnnpack engine to switch to")
    try:
        torch.backends.quantized.engine = "qnnpack"
        with caplog.at_level("WARNING", logger="specviz.models.precision"):
            loaded = load_model(str(tiny_dir["llama"]), "cpu", "auto")
    finally:
        torch.backends.quantized.engine = before
    assert loaded.precision == "float32" and "not fbgemm" in caplog.text and "using float32" in caplog.text
    assert not any(isinstance(m, PackedFP16Linear) for m in loaded.model.modules())


def test_a_missing_op_falls_back_to_float32_and_says_why(tiny_dir, caplog, monkeypatch):
    monkeypatch.setattr(torch.ops, "quantized", types.SimpleNamespace())  # a torch built without the quantized ops
    assert "has no torch.ops.quantized.linear_prepack_fp16" in fp16_weights_problem(CPU)
    with caplog.at_level("WARNING", logger="specviz.models.precision"):
        loaded = load_model(str(tiny_dir["llama"]), "cpu", "fp16-weights")
    assert loaded.precision == "float32" and "fp16-weights is not available" in caplog.text
    assert resolve_dtype_name("fp16-weights", torch.device("cuda")) == "float32"  # a GPU has no fbgemm either


# -- what the conversion does to a model -------------------------------------------------------------------------


@fbgemm
def test_every_linear_is_packed_the_tied_embedding_stays_float32(loud):
    target, reference = loud("fp16-weights"), loud("float32")
    model = target.model
    assert not any(type(m) is torch.nn.Linear for m in model.modules())
    assert isinstance(model.lm_head, PackedFP16Linear) and target.vocab_size == reference.vocab_size
    embedding = model.get_input_embeddings().weight
    assert embedding.dtype == torch.float32
    assert torch.equal(embedding, reference.model.get_input_embeddings().weight)  # the head's copy was packed, not it
    assert reference.model.lm_head.weight is reference.model.get_input_embeddings().weight  # float32 still ties
    assert environment(target)["dtype"] == "fp16-weights" and target.dtype == torch.float32


def test_the_early_exit_view_of_an_int8_model_shares_its_modules(loud):
    """Converted modules are shared after the view's own weights load, so nothing is loaded into the target's modules."""
    target = loud("int8-dynamic")
    before = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in target.model.state_dict().items()}
    view = early_exit_view(target.model, 1)
    assert view.lm_head is target.model.lm_head
    assert HFCachedLM(view, target.vocab_size).extend(random_ids(target.vocab_size, 4)).shape[0] == 4
    after = target.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before if isinstance(before[k], torch.Tensor))


@fbgemm
def test_the_early_exit_view_shares_the_packed_layers(loud):
    target = loud("fp16-weights")
    view = early_exit_view(target.model, 1)
    assert view.lm_head is target.model.lm_head and view.model.layers[0].mlp.down_proj is target.model.model.layers[0].mlp.down_proj
    assert len(target.model.model.layers) == 2  # the target is left whole
    ids = random_ids(target.vocab_size, 8)
    logits = HFCachedLM(view, target.vocab_size).extend(ids)
    ref = HFCachedLM(early_exit_view(loud("float32").model, 1), target.vocab_size).extend(ids)
    assert (logits - ref).abs().max() < 0.05 * ref.abs().max()  # float16 weights: close to float32, not equal


# -- batch invariance: the property that makes a precision fit to verify drafts -----------------------------------


@pytest.mark.parametrize("precision, invariant", [("float32", True), ("fp16-weights", True), ("int8-dynamic", False)])
def test_batch_invariance_on_a_tiny_llama(loud, precision, invariant):
    target = loud(precision)
    ids = random_ids(target.vocab_size, 40)
    moved = max(batch_dependence(target, ids[:20], ids[20:], max_k=16))
    assert moved < INVARIANT if invariant else moved > DEPENDENT, (precision, moved)


@pytest.mark.smollm
def test_batch_invariance_on_the_embedded_model(smollm_at):
    text = "def reverse(s):\n    return s[::-1]\n\nThe lighthouse keeper climbed the stairs, counting each step as he went, until"
    ids = encode_prompt(smollm_at("float32").tokenizer, text, chat=False)
    context, following = ids[:-17], ids[-17:]
    moved = {p: max(batch_dependence(smollm_at(p), context, following)) for p in VERIFIED_PRECISIONS}
    int8 = load_model(EMBEDDED_TARGET, "cpu", "int8-dynamic")
    moved["int8-dynamic"] = max(batch_dependence(int8, context, following, max_k=4))  # a few k show it; keeps the suite fast
    assert moved["float32"] < INVARIANT and moved["fp16-weights"] < INVARIANT, moved
    assert moved["int8-dynamic"] > DEPENDENT, moved  # the known-bad control: the rule's guarantee would be gone


# -- sampled output keeps the target's distribution at both precisions ------------------------------------------------


@pytest.mark.parametrize("precision", VERIFIED_PRECISIONS)
def test_first_sampled_token_follows_the_target_at_each_precision(loud, precision):
    """N fresh engine runs (early exit on the packed layers, k = 2, temperature 1) against p_target from 1-token passes."""
    target, n = loud(precision), 300
    prompt = random_ids(target.vocab_size, 6, seed=3)
    lm = HFCachedLM(target.model, target.vocab_size)
    lm.extend(prompt[:-1])
    p_target = torch.softmax(lm.extend(prompt[-1:])[-1], dim=-1)  # (V,): what plain decoding samples from
    config = RunConfig(target="loud", drafter="early-exit", exit_layer=1, num_draft_tokens=2, auto_k=False, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=3, chat=False)
    early_exit = early_exit_view(target.model, 1)
    counts = torch.zeros_like(p_target)
    for seed in range(n):
        counts[build_decoder(config, RunModels(target, early_exit=early_exit), prompt, seed=seed).step().emitted[0]] += 1
    assert int((p_target * n >= 5).sum()) >= 3
    assert pooled_pvalue(counts, p_target) > 1e-3


# -- the resolved precision is what gets reported ------------------------------------------------------------------


@fbgemm
def test_the_cli_reports_the_resolved_dtype(capsys, tiny_dir):
    code = cli.main(["generate", "--target", str(tiny_dir["llama"]), "--device", "cpu", "--prompt", "the cat sat on the", "--no-chat", "--max-new-tokens", "4", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["config"]["dtype"] == "fp16-weights"
    code = cli.main(["generate", "--target", str(tiny_dir["llama"]), "--device", "cpu", "--dtype", "float32", "--prompt", "the cat", "--no-chat", "--max-new-tokens", "2", "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["config"]["dtype"] == "float32"


@fbgemm
def test_packing_leaves_the_weight_it_read_alone():
    """fbgemm's prepack clamps its input to the float16 range in place; a tied head must not clamp the embedding."""
    linear = torch.nn.Linear(4, 3, bias=False)
    with torch.no_grad():
        linear.weight[0, 0] = 1e6
    PackedFP16Linear.from_module(linear)
    assert linear.weight[0, 0] == 1e6


@fbgemm
@pytest.mark.smollm
def test_info_names_the_auto_precision(capsys):
    assert cli.main(["info", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "auto dtype: fp16-weights" in out and "cpu, fp16-weights)" in out
