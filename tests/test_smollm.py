"""The embedded SmolLM2-135M-Instruct: greedy speculative output equals plain greedy and transformers' generate."""

from __future__ import annotations

import pytest
import torch

from specviz.config import RunConfig
from specviz.models import LoadedModel, encode_prompt
from specviz.runs import RunModels, build_decoder
from tests.conftest import VERIFIED_PRECISIONS

pytestmark = [pytest.mark.smollm, pytest.mark.usefixtures("one_thread")]  # see conftest.one_thread

COPY_PROMPT = (
    "Repeat the following paragraph exactly: A speculative decoder drafts a few tokens cheaply, "
    "and the target model checks all of them in one forward pass, keeping the ones it agrees with."
)
MAX_NEW = 24


@pytest.fixture(scope="module")
def prompt_ids(smollm: LoadedModel) -> list[int]:
    return encode_prompt(smollm.tokenizer, COPY_PROMPT, chat=True)


def hf_greedy(model: LoadedModel, prompt_ids: list[int]) -> list[int]:
    input_ids = torch.tensor([prompt_ids])
    out = model.model.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        do_sample=False,
        max_new_tokens=MAX_NEW,
        eos_token_id=list(model.eos_token_ids),
    )
    return out[0, len(prompt_ids) :].tolist()


@pytest.fixture(scope="module")
def reference(smollm_at, prompt_ids: list[int]):
    """precision -> transformers' greedy output of SmolLM2 loaded in that precision."""
    cache: dict[str, list[int]] = {}

    def get(precision: str) -> list[int]:
        if precision not in cache:
            cache[precision] = hf_greedy(smollm_at(precision), prompt_ids)
        return cache[precision]

    return get


def test_the_prompt_is_wrapped_in_the_chat_template(smollm, prompt_ids):
    text = smollm.tokenizer.decode(prompt_ids)
    assert text.count("<|im_start|>") >= 2 and text.rstrip().endswith("<|im_start|>assistant")
    assert encode_prompt(smollm.tokenizer, COPY_PROMPT, chat=False) != prompt_ids


@pytest.mark.parametrize("precision", VERIFIED_PRECISIONS)
def test_baseline_equals_generate(smollm_at, prompt_ids, reference, precision):
    dec = build_decoder(RunConfig(max_new_tokens=MAX_NEW), RunModels(smollm_at(precision)), prompt_ids, baseline=True)
    dec.run()
    assert dec.generated == reference(precision)
    assert len(reference(precision)) == MAX_NEW  # the copy is long enough that the limit, not EOS, ends it


@pytest.mark.parametrize("precision", VERIFIED_PRECISIONS)
@pytest.mark.parametrize("drafter", ["lookup", "early-exit", "ngram", "recycle"])
def test_greedy_speculative_equals_generate(smollm_at, prompt_ids, reference, drafter, precision):
    smollm = smollm_at(precision)
    # the default drafter with its default settings; the others at k = 4
    config = RunConfig(max_new_tokens=MAX_NEW) if drafter == "ngram" else RunConfig(drafter=drafter, num_draft_tokens=4, auto_k=False, max_new_tokens=MAX_NEW)
    dec = build_decoder(config, RunModels(smollm), prompt_ids)
    dec.run()
    assert dec.generated == reference(precision)
    stats = dec.stats()
    assert stats.drafted > 0 and stats.target_passes < MAX_NEW  # it drafted, and some drafts saved a pass
    assert stats.alpha is not None and 0 < stats.alpha <= 1  # prompt lookup's: the mean p_target of its checked drafts


def test_the_default_example_speculates_from_the_first_round(smollm: LoadedModel):
    """The page's first example with the default settings (issue 43): the first Step already drafts and keeps, so a
    newcomer's first round commits more than one token for its one target pass."""
    from specviz.ui.common.prompts import load_examples

    config = RunConfig()
    example = load_examples()[0]
    dec = build_decoder(config, RunModels(smollm), encode_prompt(smollm.tokenizer, example.prompt, chat=config.chat))
    first = dec.step()
    assert first.num_drafted >= 1 and first.num_accepted >= 1 and len(first.emitted) > 1, (first.num_drafted, first.num_accepted, first.emitted)
