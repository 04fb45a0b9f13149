"""Prompt lookup on hand-written sequences: longest n-gram first, the occurrence with the longest
continuation, unambiguous backoff, () on a miss, k cap; the drafter's index agrees with the pure scan."""

import random

import pytest
import torch

from specviz.drafters import PromptLookupDrafter, lookup_continuation


def test_the_longest_ngram_wins_over_a_more_recent_shorter_one():
    #          0  1  2  3  4  5  6  7  8  9  10
    context = [1, 2, 3, 9, 5, 2, 3, 7, 1, 2, 3]
    assert lookup_continuation(context, 4, ngram_max=3) == (9, 5, 2, 3)  # "1 2 3" at 0
    # "2 3" at 1 and at 5 both have 4 tokens after them; the one at 1 also matches the "1" before the tail
    assert lookup_continuation(context, 4, ngram_max=2) == (9, 5, 2, 3)


def test_the_occurrence_with_the_longest_continuation_wins_over_the_latest():
    # copying a passage: the latest "a b" is inside the copy, two tokens before the end
    passage = [1, 2, 3, 4, 5, 6, 7, 8]
    context = [9, *passage, 9, 1, 2, 3, 1, 2]
    #                                  ^ a restart of the copy: "1 2" latest at 12, with only "3 1 2" after it
    assert lookup_continuation(context, 5, ngram_max=2) == (3, 4, 5, 6, 7)
    # the latest-occurrence rule would have drafted (3, 1, 2)
    assert lookup_continuation(context, 5, ngram_max=2) != tuple(context[14:19])


def test_equal_continuations_go_to_the_longer_match_then_the_latest():
    context = [5, 6, 1, 5, 6, 2, 5, 6, 3, 0, 0, 0, 5, 6]
    assert lookup_continuation(context, 1, ngram_max=2) == (3,)  # all full: equal matches, the latest wins
    context = [7, 5, 6, 1, 0, 5, 6, 2, 0, 0, 0, 7, 5, 6]
    assert lookup_continuation(context, 2, ngram_max=2) == (1, 0)  # "7 5 6" at 0 is the longer match


def test_backs_off_to_shorter_ngrams():
    context = [4, 8, 1, 2, 3, 8]  # "2 3 8" and "3 8" never occurred before; "8" did, at 1
    assert lookup_continuation(context, 2, ngram_max=3) == (1, 2)


def test_a_shorter_ngram_drafts_only_when_unambiguous():
    context = [4, 8, 1, 5, 8, 2, 3, 8]  # "8" was followed by 1 and by 2: no evidence after a backoff
    assert lookup_continuation(context, 2, ngram_max=3) == ()
    # at the longest order tried the same ambiguity still drafts: both continuations are full, the latest wins
    assert lookup_continuation(context, 2, ngram_max=1) == (2, 3)
    context = [4, 8, 1, 5, 8, 1, 3, 8]  # "8" always followed by 1
    assert lookup_continuation(context, 2, ngram_max=3) == (1, 3)


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
    # the earliest "4 4" has the most tokens after it
    assert lookup_continuation([4, 4, 4, 4, 4], 2, ngram_max=2) == (4, 4)
    assert lookup_continuation([4, 4, 4, 4, 4], 9, ngram_max=2) == (4, 4, 4)


def test_the_drafters_index_agrees_with_the_pure_scan():
    rng = random.Random(0)
    for _ in range(400):
        seq = [rng.randrange(4) for _ in range(rng.randrange(1, 60))]
        ngram_max = rng.randint(1, 4)
        drafter = PromptLookupDrafter(ngram_max, rng.randint(1, ngram_max))
        drafter.prepare(seq[: rng.randrange(0, len(seq) + 1)])  # the rest arrives as the run commits it
        for end in sorted({rng.randrange(1, len(seq) + 1), len(seq)}):
            k = rng.randrange(0, 8)
            assert drafter.propose(seq[:end], k, torch.Generator()).token_ids == lookup_continuation(seq[:end], k, drafter.ngram_max, drafter.ngram_min)
    drafter = PromptLookupDrafter(2)
    drafter.prepare([1, 2, 3, 1, 2])
    assert drafter.propose([5, 6, 5], 2, torch.Generator()).token_ids == (6, 5)  # a different stream: rebuilt


def test_the_drafter_proposes_without_a_distribution():
    drafter = PromptLookupDrafter(ngram_max=2)
    draft = drafter.propose([5, 6, 1, 5, 6], 2, torch.Generator())
    assert draft.token_ids == (1, 5) and draft.q_draft is None
    assert drafter.has_q is False
    assert drafter.propose([1, 2, 3], 2, torch.Generator()).token_ids == ()


@pytest.mark.parametrize("ngram_max, ngram_min", [(0, 1), (2, 3), (3, 0)])
def test_bad_ngram_sizes_raise(ngram_max, ngram_min):
    with pytest.raises(ValueError, match="ngram_min <= ngram_max"):
        PromptLookupDrafter(ngram_max=ngram_max, ngram_min=ngram_min)
