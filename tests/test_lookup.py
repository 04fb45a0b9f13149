"""Prompt lookup on hand-written sequences: longest n-gram first, most recent occurrence, () on a miss, k cap."""

import pytest
import torch

from specviz.drafters import PromptLookupDrafter, lookup_continuation


def test_the_longest_ngram_wins_over_a_more_recent_shorter_one():
    #          0  1  2  3  4  5  6  7  8  9  10
    context = [1, 2, 3, 9, 5, 2, 3, 7, 1, 2, 3]
    assert lookup_continuation(context, 4, ngram_max=3) == (9, 5, 2, 3)  # "1 2 3" at 0
    assert lookup_continuation(context, 4, ngram_max=2) == (7, 1, 2, 3)  # "2 3" most recently at 5


def test_the_most_recent_occurrence_wins():
    context = [5, 6, 1, 5, 6, 2, 5, 6]
    assert lookup_continuation(context, 3, ngram_max=2) == (2, 5, 6)
    assert lookup_continuation(context, 1, ngram_max=2) == (2,)


def test_backs_off_to_shorter_ngrams():
    context = [4, 8, 1, 2, 3, 8]  # "2 3 8" and "3 8" never occurred before; "8" did, at 1
    assert lookup_continuation(context, 2, ngram_max=3) == (1, 2)


def test_a_miss_returns_an_empty_tuple():
    assert lookup_continuation([1, 2, 3, 4], 4) == ()
    assert lookup_continuation([7], 4) == ()
    assert lookup_continuation([], 4) == ()


def test_ngram_min_limits_the_back_off():
    context = [1, 2, 9, 3, 2]  # only the 1-gram "2" occurred before
    assert lookup_continuation(context, 3, ngram_max=3, ngram_min=2) == ()
    assert lookup_continuation(context, 3, ngram_max=3, ngram_min=1) == (9, 3, 2)


@pytest.mark.parametrize("k, expected", [(0, ()), (1, (8,)), (2, (8, 7)), (10, (8, 7))])
def test_k_caps_the_proposal_and_the_context_end_cuts_it(k, expected):
    assert lookup_continuation([7, 8, 7], k, ngram_max=1) == expected


def test_a_run_of_one_token_proposes_more_of_it():
    assert lookup_continuation([3, 4, 4, 4], 5, ngram_max=2) == (4,)
    # the most recent match ends one token before the tail, so only that one token follows it
    assert lookup_continuation([4, 4, 4, 4, 4], 2, ngram_max=2) == (4,)


def test_the_drafter_proposes_without_a_distribution():
    drafter = PromptLookupDrafter(ngram_max=2)
    draft = drafter.propose([5, 6, 1, 5, 6], 2, torch.Generator())
    assert draft.token_ids == (1, 5) and draft.q_draft is None
    assert drafter.has_distribution is False
    assert drafter.propose([1, 2, 3], 2, torch.Generator()).token_ids == ()


@pytest.mark.parametrize("ngram_max, ngram_min", [(0, 1), (2, 3), (3, 0)])
def test_bad_ngram_sizes_raise(ngram_max, ngram_min):
    with pytest.raises(ValueError, match="ngram_min <= ngram_max"):
        PromptLookupDrafter(ngram_max=ngram_max, ngram_min=ngram_min)
