"""Adaptive k: the schedule's bounds, the k recorded per round, and the option reaching the decoder
from RunConfig and the CLI flag."""

from __future__ import annotations

import pytest

from specviz.core.decoding import DecodeConfig, SpeculativeDecoder, next_k
from specviz.core.sampling import SamplingConfig
from specviz.drafters import NGramDrafter, NoDrafter, PromptLookupDrafter
from tests.toys import BigramLM, plain_greedy

V = 10
PROMPT = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 5, 1, 2]


def replay(records, k0: int, ceiling: int, max_new: int) -> list[int]:
    """The k each round should have asked for under the documented schedule."""
    ks, k, remaining = [], k0, max_new
    for r in records:
        ks.append(min(k, remaining - 1))
        remaining -= len(r.emitted)
        if r.drafted:
            k = min(ceiling, k + 2) if r.num_accepted == r.num_drafted else max(1, k - 1)
    return ks


def test_next_k_schedule_and_bounds():
    cfg = DecodeConfig(num_draft_tokens=3, adaptive_k=True, max_draft_tokens=6)
    assert next_k(3, 3, 3, cfg) == 5  # all kept: +2
    assert next_k(5, 5, 5, cfg) == 6  # ... capped at the ceiling
    assert next_k(6, 6, 6, cfg) == 6
    assert next_k(3, 3, 1, cfg) == 2  # a rejection: -1
    assert next_k(1, 1, 0, cfg) == 1  # ... never below 1
    assert next_k(4, 0, 0, cfg) == 4  # nothing drafted: no evidence, no change
    fixed = DecodeConfig(num_draft_tokens=3)
    assert next_k(3, 3, 3, fixed) == 3 and next_k(3, 3, 0, fixed) == 3


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("make_drafter", [lambda: NGramDrafter(V, threshold=0.0), lambda: NGramDrafter(V), lambda: PromptLookupDrafter()])
def test_adaptive_k_stays_in_bounds_and_is_recorded_per_round(make_drafter, temperature):
    ceiling, k0, max_new = 5, 2, 60
    config = DecodeConfig(num_draft_tokens=k0, sampling=SamplingConfig(temperature=temperature), max_new_tokens=max_new, adaptive_k=True, max_draft_tokens=ceiling, seed=3)
    lm = BigramLM()
    decoder = SpeculativeDecoder(lm, make_drafter(), PROMPT, config)
    seen = []
    while not decoder.done:
        decoder.step()
        seen.append(decoder.k)
        assert 1 <= decoder.k <= ceiling
    ks = [r.num_draft_tokens for r in decoder.records]
    assert ks == replay(decoder.records, k0, ceiling, max_new)
    assert all(len(r.drafted) <= r.num_draft_tokens <= ceiling for r in decoder.records)
    assert len(set(ks)) > 1  # it moved
    if temperature == 0.0:
        assert decoder.generated == plain_greedy(lm, PROMPT, max_new)


def test_fixed_k_is_the_default_and_never_moves():
    decoder = SpeculativeDecoder(BigramLM(), NGramDrafter(V, threshold=0.0), PROMPT, DecodeConfig(num_draft_tokens=3, max_new_tokens=40))
    decoder.run()
    assert not DecodeConfig().adaptive_k
    assert {r.num_draft_tokens for r in decoder.records[:-1]} == {3}  # the last round may be cut by the length limit


def test_plain_decoding_keeps_k_at_zero_even_when_adaptive():
    config = DecodeConfig(num_draft_tokens=0, max_new_tokens=10, adaptive_k=True)
    decoder = SpeculativeDecoder(BigramLM(), NoDrafter(), PROMPT, config)
    decoder.run()
    assert [r.num_draft_tokens for r in decoder.records] == [0] * 10


def test_run_config_and_cli_flag_reach_the_decoder():
    from specviz.cli import build_parser
    from specviz.cli.options import config_from_args
    from specviz.config import RunConfig

    assert RunConfig().adaptive_k is False
    args = build_parser().parse_args(["generate", "--prompt", "hi", "--drafter", "ngram", "--adaptive-k", "-k", "3"])
    config = config_from_args(args)
    assert config.adaptive_k and config.drafter == "ngram" and config.num_draft_tokens == 3
    decode = config.decode_config()
    assert decode.adaptive_k and decode.num_draft_tokens == 3
    plain = config_from_args(build_parser().parse_args(["generate", "--prompt", "hi"]))
    assert not plain.adaptive_k and not plain.decode_config().adaptive_k


def test_adaptive_k_through_build_decoder_on_a_tiny_model(tiny_models):
    from specviz.config import RunConfig
    from specviz.runs import RunModels, build_decoder

    target = tiny_models["llama"]
    prompt_ids = target.tokenizer("one two three four one two three four one two three")["input_ids"]
    config = RunConfig(target="tiny", drafter="ngram", ngram_threshold=0.0, num_draft_tokens=2, adaptive_k=True, max_new_tokens=30, chat=False)
    decoder = build_decoder(config, RunModels(target), prompt_ids)
    decoder.run()
    ks = [r.num_draft_tokens for r in decoder.records]
    assert decoder.config.adaptive_k and decoder.stats().drafted > 0
    assert ks == replay(decoder.records, 2, decoder.config.max_draft_tokens, 30)
    baseline = build_decoder(config, RunModels(target), prompt_ids, baseline=True)
    baseline.run()
    assert decoder.generated == baseline.generated


def test_cli_defaults_are_run_config_defaults():
    import dataclasses

    from specviz.cli import build_parser
    from specviz.cli.options import config_from_args
    from specviz.config import DRAFTER_KINDS, RunConfig

    from_cli = config_from_args(build_parser().parse_args(["generate", "--prompt", "hi"]))
    assert dataclasses.asdict(from_cli) == dataclasses.asdict(RunConfig())
    assert DRAFTER_KINDS[0] == RunConfig().drafter  # the app's drafter menu starts at the default


def test_the_owners_k_cap_bounds_adaptive_k():
    """SPECVIZ_MAX_DRAFT_TOKENS=2 measured k 2, 2, 4, 6, 5, 5, 5, 7, 9, 11 (issue 32): the policy's cap is now adaptive
    k's ceiling, carried by the config (so a saved and restored run keeps it). Known-bad control: the same run without
    the policy grows past the cap, so the check can see it."""
    from specviz.config import RunConfig
    from specviz.workshop.policy import Policy

    asked = RunConfig(target="toy", drafter="ngram", ngram_threshold=0.0, num_draft_tokens=2, adaptive_k=True, max_new_tokens=60)
    capped = Policy(targets=("toy",), max_draft_tokens=2).enforce(asked)[0]
    assert capped.max_draft_tokens == 2 and capped.decode_config().max_draft_tokens == 2

    def rounds(config: RunConfig) -> list:
        decoder = SpeculativeDecoder(BigramLM(), NGramDrafter(V, threshold=0.0), PROMPT, config.decode_config())
        decoder.run()
        return decoder.records

    records = rounds(capped)
    assert all(r.num_draft_tokens <= 2 and len(r.drafted) <= 2 and len(r.emitted) <= 3 for r in records)
    assert max(len(r.emitted) for r in records) == 3  # it did reach the cap
    assert max(r.num_draft_tokens for r in rounds(asked)) > 2  # known-bad: the engine's own ceiling lets k grow


def test_a_restored_run_keeps_the_ceiling_even_from_an_older_file():
    """A state saved with a larger k (a file from before the ceiling was recorded) resumes at most at the ceiling."""
    from specviz.core.decoding import resume

    config = DecodeConfig(num_draft_tokens=2, max_new_tokens=40, adaptive_k=True, max_draft_tokens=8)
    lm = BigramLM()
    decoder = SpeculativeDecoder(lm, NGramDrafter(V, threshold=0.0), PROMPT, config)
    while decoder.k <= 2 and not decoder.done:
        decoder.step()
    state, done = decoder.state(), len(decoder.records)
    lower = DecodeConfig(num_draft_tokens=2, max_new_tokens=40, adaptive_k=True, max_draft_tokens=2)
    again = resume(BigramLM(), NGramDrafter(V, threshold=0.0), PROMPT, decoder.generated, decoder.records, lower, state)
    assert state.k > 2 and again.k == 2
    again.run()
    assert all(r.num_draft_tokens <= 2 for r in again.records[done:])
