"""HFBatchedLM on tiny random models: every row's logits equal its own tokens decoded alone, through ragged
feeds, per-row keep(), compaction and rows leaving the batch."""

from __future__ import annotations

import pytest
import torch

from specviz.models import HFBatchedLM, HFCachedLM

pytestmark = pytest.mark.usefixtures("one_thread")


def solo_logits(model, context: list[int], fed: list[int]) -> torch.Tensor:
    """(len(fed), V) logits of fed after context, one row alone in an HFCachedLM."""
    lm = HFCachedLM(model.model, model.vocab_size)
    return lm.extend(context + fed)[-len(fed) :]


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_ragged_rows_match_solo_rows(tiny_models, name):
    model = tiny_models[name]
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(4, model.vocab_size, (n,), generator=g).tolist() for n in (5, 9, 1)]
    lm = HFBatchedLM(model.model, model.vocab_size, 3)
    lm.extend([p[:-1] for p in prompts], keep_last=1)  # a prompt of one id feeds nothing in the prefill
    contexts = [p[:-1] for p in prompts]
    first = [[p[-1], *f] for p, f in zip(prompts, ([3, 4, 5], [6], [7, 8, 9, 10]))]
    for feeds, keeps in ((first, (2, 0, 4)), (([11], [12, 13], [14]), (1, 2, 0))):  # keep k+1 of each row's feed
        out = lm.extend(feeds)  # (3, T, V), right-aligned
        for i, fed in enumerate(feeds):
            torch.testing.assert_close(out[i, -len(fed) :], solo_logits(model, contexts[i], fed), atol=1e-5, rtol=1e-5)
        contexts = [c + f[: k + 1] for c, f, k in zip(contexts, feeds, keeps)]
        lm.keep([len(c) for c in contexts])
        assert lm.tokens == contexts and lm.lengths == [len(c) for c in contexts]
    lm.compact()
    assert lm.valid.shape[1] == max(lm.lengths)
    lm.select([2, 0])
    out = lm.extend([[5], [6, 7]])
    for j, i in enumerate([2, 0]):
        fed = [[5], [6, 7]][j]
        torch.testing.assert_close(out[j, -len(fed) :], solo_logits(model, contexts[i], fed), atol=1e-5, rtol=1e-5)


def test_holes_are_cropped_or_compacted(tiny_models):
    model = tiny_models["llama"]
    lm = HFBatchedLM(model.model, model.vocab_size, 2)
    lm.extend([[5, 6, 7], [8, 9]])
    lm.extend([[1, 2, 3, 4], [1, 2]])
    lm.keep([3, 2])  # every new slot is a hole in both rows: cropped
    assert lm.valid.shape[1] == 3 + 0 and lm.lengths == [3, 2]
    for _ in range(12):  # one row keeps a token per pass, the other none: holes pile up until compact() runs
        before = lm.lengths
        lm.extend([[1, 2, 3], [4, 5, 6]])
        lm.keep([before[0] + 1, before[1]])
    assert lm.valid.shape[1] <= 2 * max(lm.lengths) + 16 + 3
    assert lm.valid.sum(dim=1).tolist() == lm.lengths == [15, 2]


def test_bad_calls_raise(tiny_models):
    model = tiny_models["llama"]
    lm = HFBatchedLM(model.model, model.vocab_size, 2)
    for call in (lambda: lm.extend([[1]]), lambda: lm.extend([[], []]), lambda: lm.keep([1])):
        with pytest.raises(ValueError):
            call()
    with pytest.raises(ValueError):
        HFBatchedLM(model.model, model.vocab_size, 0)
