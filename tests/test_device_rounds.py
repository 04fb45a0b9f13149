"""Device-resident rounds, counted on the CPU: a TorchFunctionMode sees every host read (.item(), .tolist(),
.cpu(), int(), float(), bool() of a tensor) the engine makes, and a round makes a constant number of them,
not one per drafted token. Also: prefill keeps the last position's logits only. Real (tiny) transformers
models behind the real adapter, so the count covers HFCachedLM too."""

from __future__ import annotations

import collections

import pytest
import torch

from specviz.core.decoding import DecodeConfig, SpeculativeDecoder
from specviz.core.sampling import SamplingConfig, warp
from specviz.drafters import Draft, ModelDrafter, NGramDrafter, NoDrafter, PromptLookupDrafter
from specviz.drafters.eagle import EagleDrafter
from specviz.drafters.recycle import RecycleDrafter
from specviz.models import HFCachedLM, encode_prompt

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = "repeat the following paragraph exactly : the cat sat on the mat and the dog sat on the log and the cat sat on"
HOST_READS = {"item", "tolist", "cpu", "numpy", "__int__", "__float__", "__bool__", "__index__"}
BUDGET = 4  # per round: the draft model's ids, the rule's outcome, its cache's token ids, the record


class HostReads(torch.overrides.TorchFunctionMode):
    """Counts every call that reads a tensor's values back to the host."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in HOST_READS:
            self.counts[name] += 1
        return func(*args, **(kwargs or {}))


class ItemPerTokenDrafter(ModelDrafter):
    """Known-bad control: samples each token to the host (.item()) before feeding it back."""

    def propose(self, context, k, generator):
        cached = len(self.lm.tokens)
        logits = self.lm.extend(context[cached:])[-1]
        ids, qs = [], []
        for i in range(k):
            q = warp(logits, self.sampling)
            ids.append(int(torch.multinomial(q, 1, generator=generator).item()))
            qs.append(q)
            if i < k - 1:
                logits = self.lm.extend(ids[-1:])[-1]
        return Draft(tuple(ids), torch.stack(qs))


def make_decoder(tiny_models, kind: str, k: int, temperature: float) -> SpeculativeDecoder:
    target, draft = tiny_models["llama"], tiny_models["llama_draft"]
    sampling = SamplingConfig(temperature=temperature)
    drafter = {
        "model": lambda: ModelDrafter(HFCachedLM(draft.model, draft.vocab_size), sampling),
        "item-per-token": lambda: ItemPerTokenDrafter(HFCachedLM(draft.model, draft.vocab_size), sampling),
        "ngram": lambda: NGramDrafter(target.vocab_size, threshold=0.0),
        "lookup": lambda: PromptLookupDrafter(3, 1),
        "recycle": lambda: RecycleDrafter(target.vocab_size),
        "eagle": lambda: random_eagle(target, sampling),
        "none": lambda: NoDrafter(),
    }[kind]()
    ids = encode_prompt(target.tokenizer, PROMPT, chat=False)
    config = DecodeConfig(num_draft_tokens=k, sampling=sampling, seed=1, max_new_tokens=30)
    keep = drafter.reads_hidden or drafter.reads_features
    return SpeculativeDecoder(HFCachedLM(target.model, target.vocab_size, keep_hidden=keep), drafter, ids, config)


def random_eagle(target, sampling: SamplingConfig) -> EagleDrafter:
    """An untrained EAGLE head for the tiny target: it drafts k tokens every round (nothing stops a chain)."""
    from specviz.models.eagle import EagleHead, EagleShape
    from specviz.runs import eagle_source

    head = EagleHead(EagleShape.of_target(target.model.config), torch.Generator().manual_seed(0)).eval().requires_grad_(False)
    return EagleDrafter(eagle_source(head, target, target.vocab_size), sampling, target.vocab_size)


def reads_per_round(dec: SpeculativeDecoder) -> list[int]:
    out = []
    while not dec.done:
        with HostReads() as reads:
            record = dec.step()
        if record.drafted:  # rounds that drafted (the last, length-limited round may not)
            out.append(sum(reads.counts.values()))
    return out


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("kind", ["model", "ngram", "lookup", "recycle", "eagle"])
def test_host_reads_per_round_do_not_grow_with_k(tiny_models, kind, temperature):
    per_k = {k: reads_per_round(make_decoder(tiny_models, kind, k, temperature)) for k in (2, 8)}
    assert per_k[2] and per_k[8], "the drafter never drafted: the test would prove nothing"
    assert set(per_k[2]) == set(per_k[8]), per_k  # the same constant whatever k
    assert max(per_k[8]) <= BUDGET


def test_plain_rounds_read_the_host_as_often_as_speculative_ones(tiny_models):
    dec = make_decoder(tiny_models, "none", 0, 1.0)
    counts = set()
    while not dec.done:
        with HostReads() as reads:
            dec.step()
        counts.add(sum(reads.counts.values()))
    assert counts == {2}  # the rule's outcome and the record


def test_known_bad_item_per_token_drafter_is_caught(tiny_models):
    per_k = {k: reads_per_round(make_decoder(tiny_models, "item-per-token", k, 1.0)) for k in (2, 8)}
    assert max(per_k[8]) > max(per_k[2])


def test_prefill_keeps_the_last_position_only(tiny_models):
    """A long prompt: the target's prefill asks transformers for one row of logits, not (L, V)."""
    target = tiny_models["llama"]
    seen: list[tuple[int, ...]] = []

    def spy(module, args, kwargs, output):
        seen.append(tuple(output.logits.shape))

    ids = encode_prompt(target.tokenizer, " ".join([PROMPT] * 6), chat=False)[:200]
    handle = target.model.register_forward_hook(spy, with_kwargs=True)
    try:
        dec = SpeculativeDecoder(HFCachedLM(target.model, target.vocab_size), NoDrafter(), ids, DecodeConfig(max_new_tokens=2))
        assert seen == [(1, 1, target.model.config.vocab_size)]  # prefill of 199 tokens: one row
        dec.run()
    finally:
        handle.remove()
    assert all(shape[1] == 1 for shape in seen)  # plain rounds feed one token


def test_model_drafter_prepare_keeps_the_last_position_only(tiny_models):
    draft = tiny_models["llama_draft"]
    lm = HFCachedLM(draft.model, draft.vocab_size)
    assert lm.extend(list(range(5, 60)), last_only=True).shape == (1, draft.vocab_size)
    assert len(lm.tokens) == 55 and lm.cache.get_seq_length() == 55
    assert lm.extend([7, 8, 9]).shape == (3, draft.vocab_size)


def test_adapter_reads_device_fed_ids_back_once(tiny_models):
    draft = tiny_models["llama_draft"]
    lm = HFCachedLM(draft.model, draft.vocab_size)
    lm.extend([5, 6, 7])
    with HostReads() as reads:
        for tok in (8, 9, 10):
            lm.extend(torch.tensor([tok]))
    assert sum(reads.counts.values()) == 0
    with HostReads() as reads:
        assert list(lm.tokens) == [5, 6, 7, 8, 9, 10]
    assert reads.counts == {"tolist": 1}
    lm.crop(4)
    assert list(lm.tokens) == [5, 6, 7, 8] and lm.cache.get_seq_length() == 4
