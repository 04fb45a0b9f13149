"""On a CUDA device (skipped elsewhere): greedy identity in float32 for every offline drafter on tiny models,
the rule's output distribution by chi-square (with its known-bad control), and torch.cuda's sync debug mode
agreeing with the CPU count in test_device_rounds.py: the rule never waits on the device, and a round's
synchronisations in specviz code are a constant number, not one per drafted token."""

from __future__ import annotations

import linecache
import warnings
from pathlib import Path

import pytest
import torch

import specviz
from specviz.config import RunConfig
from specviz.core.sampling import draw, warp
from specviz.core.verify import decide, residual
from specviz.models import encode_prompt, load_model
from specviz.runs import RunModels, build_decoder
from tests.toys import pooled_pvalue

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

PROMPT = "repeat the following paragraph exactly : the cat sat on the mat and the dog sat on the log and the cat sat on"
SPECVIZ_DIR = str(Path(specviz.__file__).resolve().parent)
DRAFTERS = {
    "model": dict(drafter="model"),
    "early-exit": dict(drafter="early-exit", exit_layer=1),
    "ngram": dict(drafter="ngram", ngram_threshold=0.0),
    "lookup": dict(drafter="lookup"),
    "recycle": dict(drafter="recycle"),
}


@pytest.fixture(scope="module")
def cuda_models(tiny_dir):
    return {name: load_model(str(tiny_dir[name]), "cuda", "float32") for name in ("llama", "llama_draft")}


def decoder(models, kind: str, k: int, temperature: float = 0.0, baseline: bool = False, max_new: int = 24):
    target = models["llama"]
    options = dict(DRAFTERS[kind], draft=str(models["llama_draft"].name)) if kind == "model" else DRAFTERS[kind]
    config = RunConfig(target=str(target.name), num_draft_tokens=k, auto_k=False, temperature=temperature, max_new_tokens=max_new, **options)
    ids = encode_prompt(target.tokenizer, PROMPT, chat=False)
    draft = models["llama_draft"] if kind == "model" else None
    return build_decoder(config, RunModels(target, draft), ids, seed=3, baseline=baseline)


@pytest.mark.parametrize("k", [2, 5])
@pytest.mark.parametrize("kind", list(DRAFTERS))
def test_greedy_identity_in_float32_on_cuda(cuda_models, kind, k):
    spec, plain = decoder(cuda_models, kind, k), decoder(cuda_models, kind, k, baseline=True)
    spec.run()
    plain.run()
    assert spec.target.device.type == "cuda" and spec.generator.device.type == "cuda"
    assert spec.generated == plain.generated
    assert spec.stats().drafted > 0 or kind in ("ngram", "lookup")


# -- the rule on the device ---------------------------------------------------------------------------------

P_ROW = torch.tensor([0.3, 0.25, 0.2, 0.15, 0.06, 0.04])
Q_ROW = torch.tensor([0.05, 0.1, 0.15, 0.2, 0.25, 0.25])


def first_token_counts(resample_from_target: bool, n: int = 4000) -> torch.Tensor:
    """k=1 on the GPU: draft x ~ q, run the rule, count the first emitted token."""
    device = torch.device("cuda")
    g = torch.Generator(device=device).manual_seed(0)
    p_target = torch.stack([P_ROW, torch.full((6,), 1 / 6)]).to(device)
    q_draft = Q_ROW.view(1, -1).to(device)
    xs = torch.stack([draw(q_draft[0], g) for _ in range(n)]).view(n, 1)
    emitted = []
    for x in xs:
        d = decide(p_target, q_draft, x, g)
        if resample_from_target:  # known-bad: at a rejection, draw from p_target instead of the residual
            d_next = draw(p_target[0], g)
            emitted.append(torch.where(d.num_accepted == 1, x[0], d_next))
        else:
            emitted.append(torch.where(d.num_accepted == 1, x[0], d.next_token))
    return torch.bincount(torch.stack(emitted), minlength=6).cpu()


def test_the_rule_on_cuda_emits_p_target_and_the_known_bad_variant_does_not():
    assert pooled_pvalue(first_token_counts(False), P_ROW) > 1e-3
    assert pooled_pvalue(first_token_counts(True), P_ROW) < 1e-6


def test_the_rule_and_the_warp_never_wait_on_the_device():
    """The whole rule (warp, accept test, residual, draws) runs under sync debug mode 'error'."""
    from specviz.core.sampling import SamplingConfig

    device = torch.device("cuda")
    g = torch.Generator(device=device).manual_seed(0)
    logits = torch.randn(5, 50, device=device)
    drafted = torch.randint(0, 50, (4,), device=device)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for sampling in (SamplingConfig(), SamplingConfig(temperature=0.8, top_k=20, top_p=0.9)):
            p_target = warp(logits, sampling)
            q_draft = warp(logits[:4] * 0.5, SamplingConfig(temperature=1.0))
            decision = decide(p_target, q_draft, drafted, g)
            residual(p_target[:4], q_draft)
            decision.outcome()
    finally:
        torch.cuda.set_sync_debug_mode(0)


# -- a whole round: synchronisations in specviz code, counted --------------------------------------------------


def hidden_sync(w: warnings.WarningMessage) -> bool:
    """A sync warning from specviz's own files, other than the clock's explicit torch.cuda.synchronize()."""
    if "synchroniz" not in str(w.message) or not str(w.filename).startswith(SPECVIZ_DIR):
        return False
    return "synchronize(" not in linecache.getline(str(w.filename), w.lineno)


def our_syncs_per_round(dec) -> tuple[list[int], set[str]]:
    """Sync warnings raised from specviz's own files, per round that drafted, and where they came from."""
    counts, sites = [], set()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        while not dec.done:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                record = dec.step()
            ours = [w for w in caught if hidden_sync(w)]
            sites |= {f"{Path(w.filename).name}:{w.lineno}" for w in ours}
            if record.drafted:
                counts.append(len(ours))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    return counts, sites


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("kind", ["model", "ngram", "lookup", "recycle"])
def test_sync_debug_mode_agrees_syncs_per_round_do_not_grow_with_k(cuda_models, kind, temperature):
    per_k = {k: our_syncs_per_round(decoder(cuda_models, kind, k, temperature, max_new=30)) for k in (2, 8)}
    (c2, sites2), (c8, sites8) = per_k[2], per_k[8]  # sites: file:line of each sync, for the message
    assert c2 and c8, "nothing was drafted: the test would prove nothing"
    assert max(c8) == max(c2), (per_k, "a sync per drafted token somewhere in specviz")
    # host->device copies of the round's inputs, the rule's outcome, the record; a draft model's ids and cache ids
    assert max(c8) <= 10, (sites2, sites8)


@pytest.mark.parametrize("width", [1, 2])
def test_eagle_on_cuda_is_plain_greedy_and_its_chain_never_syncs_per_token(cuda_models, tmp_path, width):
    """An untrained EAGLE head for the tiny llama, on the device with the target: greedy identity (chain and EAGLE-2
    tree), and a chain round's synchronisations do not grow with k."""
    from specviz.models.eagle import EagleHead, EagleShape, save_eagle
    from specviz.models.medusa import target_fingerprint

    target = cuda_models["llama"]
    save_eagle(EagleHead(EagleShape.of_target(target.model.config)), tmp_path / "eagle", "tiny",
               target_fingerprint(target.model.get_input_embeddings().weight))  # fmt: skip
    ids = encode_prompt(target.tokenizer, PROMPT, chat=False)

    def run(k: int, baseline: bool = False):
        config = RunConfig(target=str(target.name), drafter="eagle", eagle_head=str(tmp_path / "eagle"), num_draft_tokens=k, auto_k=False,
                           tree_width=width, max_new_tokens=24)  # fmt: skip
        return build_decoder(config, RunModels(target), ids, seed=3, baseline=baseline)

    spec, plain = run(4), run(4, baseline=True)
    spec.run()
    plain.run()
    assert spec.generated == plain.generated and spec.drafter.device.type == "cuda"
    if width == 1:
        (c2, _), (c8, sites) = our_syncs_per_round(run(2)), our_syncs_per_round(run(8))
        assert c2 and c8 and max(c8) == max(c2), sites
