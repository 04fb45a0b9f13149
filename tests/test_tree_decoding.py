"""Token-tree rounds in the decoding loop, on toy LMs: greedy output token-identical to plain greedy for every
tree drafter and width 1-4, the caches hold exactly the committed tokens after every round, one target pass
per round, EOS and the length limit inside a tree, and the first two sampled tokens follow the target."""

from __future__ import annotations

import pytest
import torch

from specviz.core.decoding import DecodeConfig, SpeculativeDecoder
from specviz.core.sampling import SamplingConfig, warp
from specviz.drafters import ModelDrafter, NGramDrafter, PromptLookupDrafter
from tests.test_decoding import PROMPT, V, check_caches
from tests.toys import TableLM, TreeTableLM, plain_greedy, pooled_pvalue

pytestmark = pytest.mark.usefixtures("one_thread")
GREEDY = SamplingConfig()


def make_drafter(kind: str, sampling: SamplingConfig, scale: float = 1.0):
    if kind == "ngram":
        return NGramDrafter(V, n_max=3, threshold=0.0)
    if kind == "model":
        return ModelDrafter(TableLM(0, noise=2.0, scale=scale), sampling)
    if kind == "lookup":  # no trees: falls back to chains
        return PromptLookupDrafter(ngram_max=3)
    raise ValueError(kind)


def decoder(kind, k, width, max_new=40, eos=(), sampling=GREEDY, seed=0, scale=1.0):
    config = DecodeConfig(num_draft_tokens=k, sampling=sampling, seed=seed, max_new_tokens=max_new, eos_token_ids=eos, tree_width=width)
    return SpeculativeDecoder(TreeTableLM(0, scale=scale), make_drafter(kind, sampling, scale), PROMPT, config)


def run_checked(dec: SpeculativeDecoder) -> SpeculativeDecoder:
    while not dec.done:
        before, calls, first = len(dec.tokens), dec.target.extend_calls, dec.carried_row is not None
        record = dec.step()
        # one target pass per round; none for a first round that drafted nothing (the prefill computed its row)
        assert dec.target.extend_calls == calls + (0 if first and not record.drafted else 1), "one target pass per round"
        assert dec.tokens[before:] == list(record.emitted)
        assert len(record.drafted) <= record.num_draft_tokens
        check_caches(dec)
    return dec


@pytest.mark.parametrize("kind", ["ngram", "model", "lookup"])
@pytest.mark.parametrize("width", [1, 2, 3, 4])
@pytest.mark.parametrize("k", [1, 4, 7])
def test_greedy_tree_equals_plain_greedy(kind, width, k):
    dec = run_checked(decoder(kind, k, width))
    assert dec.generated == plain_greedy(TableLM(0), PROMPT, 40)
    trees = [r for r in dec.records if r.is_tree]
    assert bool(trees) == (width > 1 and kind != "lookup")
    for r in trees:
        assert len(r.tree_parents) == r.num_drafted <= k
        assert r.num_accepted == len(r.accepted_path)


@pytest.mark.parametrize("kind", ["ngram", "model"])
def test_a_greedy_tree_round_spends_random_numbers_on_its_uniforms_only(kind):
    """At temperature 0 the tree rule takes the argmax (no race over the vocabulary): the run's generator ends where
    drawing each round's uniforms alone leaves it, and the tokens are plain greedy's."""
    dec = run_checked(decoder(kind, 4, 3, max_new=24))
    assert dec.generated == plain_greedy(TableLM(0), PROMPT, 24)
    assert any(r.is_tree for r in dec.records)
    replay = torch.Generator().manual_seed(0)
    for record in dec.records:
        assert tuple(torch.rand(record.num_drafted, generator=replay).tolist()) == record.uniforms
    assert torch.equal(dec.generator.get_state(), replay.get_state())


def test_trees_accept_siblings_a_chain_would_have_missed():
    records = run_checked(decoder("model", 6, 3, max_new=60)).records
    assert any(r.accepted_path and r.tree_parents[r.accepted_path[0]] == -1 and r.accepted_path[0] != 0 for r in records)
    fates = {f for r in records for f in r.draft_fates}
    assert {"accepted", "rejected"} <= fates


@pytest.mark.parametrize("max_new", [1, 2, 3, 5])
def test_max_new_tokens_is_exact_with_trees(max_new):
    dec = run_checked(decoder("model", 6, 2, max_new=max_new))
    assert dec.generated == plain_greedy(TableLM(0), PROMPT, max_new)


def test_eos_inside_a_tree_stops_there():
    ref = plain_greedy(TableLM(0), PROMPT, 40)
    eos = ref[3]
    dec = run_checked(decoder("model", 6, 2, eos=(eos,)))
    assert dec.generated == ref[: ref.index(eos) + 1]


def test_first_two_sampled_tokens_follow_the_target_with_trees():
    n, scale, sampling = 1_200, 0.3, SamplingConfig(temperature=1.0)
    target = TableLM(0, scale=scale)
    first = warp(target.logits_after(PROMPT), sampling)
    joint = torch.stack([first[a] * warp(target.logits_after(PROMPT + [a]), sampling) for a in range(V)])  # (V, V)
    counts = torch.zeros(V, V)
    seen = set()
    for seed in range(n):
        dec = decoder("model", 4, 2, max_new=2, sampling=sampling, seed=seed, scale=scale)
        dec.run()
        counts[dec.generated[0], dec.generated[1]] += 1
        seen |= {f for r in dec.records for f in r.emitted_fates}
    assert pooled_pvalue(counts, joint) > 1e-3
    assert {"accepted", "resampled"} <= seen


def test_tree_width_is_validated():
    with pytest.raises(ValueError, match="tree_width"):
        DecodeConfig(tree_width=5)
    with pytest.raises(ValueError, match="tree_width"):
        DecodeConfig(tree_width=0)


@pytest.mark.parametrize("kind", ["ngram", "model"])
def test_a_tree_runs_first_pass_feeds_only_its_tree_under_the_carried_row(kind):
    """The prefill cached the newest token and kept its row: the first tree hangs under the cache, its root's children
    following the newest token, and the pass feeds only the nodes. The tokens stay plain greedy's."""
    dec = decoder(kind, 6, 2, max_new=12)
    assert dec.carried_row is not None and list(dec.target.tokens) == PROMPT
    fed: list[tuple[int, ...]] = []
    extend_tree = dec.target.extend_tree
    dec.target.extend_tree = lambda ids, parents: fed.append(tuple(parents)) or extend_tree(ids, parents)  # type: ignore[method-assign]
    first = dec.step()
    assert first.is_tree and fed == [first.tree_parents]  # the nodes alone, the root's children at -1 (the cache)
    run_checked(dec)
    assert dec.generated == plain_greedy(TableLM(0), PROMPT, 12)


def test_a_tree_round_takes_the_newest_token_pending_or_carried_not_both():
    dec = decoder("model", 4, 2)
    drafted = dec.draft(4)
    with pytest.raises(ValueError, match="pending or its row carried"):
        dec.round.verify([PROMPT[-1]], drafted, dec.generator, dec.carried_row)
    with pytest.raises(ValueError, match="pending or its row carried"):
        dec.round.verify([], drafted, dec.generator)


@pytest.mark.parametrize("kind", ["ngram", "model"])
def test_a_tree_runs_plain_rounds_are_chain_passes(kind):
    """A round of a tree run that drafts nothing (k: auto's k = 0) is a plain pass: the chain's one-token extend, not a
    tree pass with its mask over the whole context and a compaction of the cache. The tokens stay plain greedy's and
    the cache stays the committed tokens'."""
    dec = decoder(kind, 4, 2, max_new=24)
    trees: list[int] = []
    extend_tree = dec.target.extend_tree
    dec.target.extend_tree = lambda ids, parents: trees.append(len(dec.records)) or extend_tree(ids, parents)  # type: ignore[method-assign]
    plain = set()
    while not dec.done:
        dec.k = 0 if len(dec.records) % 2 else 4
        calls = dec.target.extend_calls
        record = dec.step()
        if not record.drafted:
            plain.add(record.index)
            assert dec.target.extend_calls == calls + (record.index > 0)  # the first round's row came with the prefill
        check_caches(dec)
    assert plain and not plain & set(trees) and trees, (plain, trees)
    assert dec.generated == plain_greedy(TableLM(0), PROMPT, 24)
