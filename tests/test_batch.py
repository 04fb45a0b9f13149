"""B streams at once (specviz.core.batch) on toy models: ragged acceptance (rows accepting 0..k drafts in one
round, a row ending early at EOS) against each row's solo greedy run, the known-bad shared cache length, sampled
rows distributed as the target per row (chi-square), and the same on a tiny random transformers model."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

from specviz.core.batch import BatchDecoder, batch_stats
from specviz.core.decoding import DecodeConfig, SpeculativeDecoder
from specviz.core.protocols import Draft
from specviz.core.sampling import SamplingConfig, warp
from specviz.drafters import ModelDrafter, NoDrafter, PromptLookupDrafter
from tests.toys import TABLE_V as V
from tests.toys import BatchedToyLM, SharedLengthToyLM, TableLM, plain_greedy, pooled_pvalue

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = [[1, 2, 3, 4, 1, 2, 3], [5, 6], [7], [2, 2, 9, 1, 4]]


class OracleDrafter:
    """Drafts the target's greedy continuation for its first ``right`` tokens, then a wrong token each time: a row
    that accepts exactly min(right, k) drafts in every round."""

    name = "oracle"
    has_q = False
    can_branch = False
    reads_hidden = False
    reads_features = False
    reads_logits = False
    keeps_state = False
    device = torch.device("cpu")

    def __init__(self, target: TableLM, right: int) -> None:
        self.target, self.right = target, right

    def prepare(self, prompt_ids: Sequence[int]) -> None:
        pass

    def propose(self, context: Sequence[int], k: int, generator: torch.Generator) -> Draft:
        seq, out = list(context), []
        for i in range(k):
            tok = int(self.target.logits_after(seq).argmax())
            tok = tok if i < self.right else (tok + 1) % V
            out.append(tok)
            seq.append(tok)
        return Draft(tuple(out))

    def rollback(self, committed: Sequence[int]) -> None:
        pass


def batch(drafters, prompts=PROMPTS, k=4, max_new=24, eos=(), lm=BatchedToyLM, vocab=V):
    config = DecodeConfig(num_draft_tokens=k, max_new_tokens=max_new, eos_token_ids=eos)
    return BatchDecoder(lm([TableLM(0, vocab_size=vocab) for _ in prompts]), drafters, prompts, config)


def run_checked(dec: BatchDecoder) -> BatchDecoder:
    """Run to the end: one batched target pass per round; every active row's cache holds its committed tokens but the newest."""
    while not dec.done:
        calls = dec.target.extend_calls
        dec.step()
        assert dec.target.extend_calls == calls + 1, "one batched target pass per round"
        for row, b in enumerate(dec.active):
            assert list(dec.target.rows[row].tokens) == dec.tokens[b][:-1]
    return dec


def test_rows_accepting_0_to_k_drafts_in_one_round_match_their_solo_greedy_runs():
    k = 4
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(k + 2)]
    rights = list(range(k + 2))  # 0..k accepted; the last row's drafts are all right too
    dec = batch([OracleDrafter(TableLM(0), r) for r in rights], prompts, k=k)
    first = dec.step()
    assert first.accepted == tuple(min(r, k) for r in rights)
    assert first.committed == tuple(min(r, k) + 1 for r in rights)
    run_checked(dec)
    for b, p in enumerate(prompts):
        assert dec.generated(b) == plain_greedy(TableLM(0), p, 24), f"row {b}"


@pytest.mark.parametrize("kind", ["none", "lookup", "model"])
def test_greedy_rows_equal_solo_greedy(kind):
    drafters = {
        "none": lambda: NoDrafter(),
        "lookup": lambda: PromptLookupDrafter(ngram_max=3),
        "model": lambda: ModelDrafter(TableLM(0, noise=2.0), SamplingConfig()),
    }[kind]
    dec = run_checked(batch([drafters() for _ in PROMPTS], k=0 if kind == "none" else 4))
    for b, p in enumerate(PROMPTS):
        assert dec.generated(b) == plain_greedy(TableLM(0), p, 24)
    stats = batch_stats(dec)
    assert stats.new_tokens == 24 * len(PROMPTS) and stats.streams == len(PROMPTS)
    if kind == "none":
        assert len(dec.rounds) == 24 and stats.tokens_per_target_pass == 1.0


def test_stats_record_the_passes_shapes():
    """What the batch prediction prices: rows and width of every pass (the widest row's 1 + drafts), the forwards'
    own time within the rounds', drafts per row; a row that finishes early shrinks the later passes."""
    rights = [0, 1, 2, 4]
    dec = run_checked(batch([OracleDrafter(TableLM(0), r) for r in rights], max_new=12))
    stats = batch_stats(dec)
    assert dec.rounds[0].width == 5 and all(r.width == 1 + max(r.drafted) for r in dec.rounds)
    assert sum(n for _, _, n in stats.schedule) == stats.rounds == len(dec.rounds)
    assert sum(rows * n for rows, _, n in stats.schedule) == stats.passes
    assert {rows for rows, _, _ in stats.schedule} > {len(PROMPTS)}  # the fast row ended first: narrower passes later
    assert stats.verify_width == pytest.approx(sum(r.width for r in dec.rounds) / len(dec.rounds))
    assert stats.drafted_per_row == pytest.approx(sum(map(sum, (r.drafted for r in dec.rounds))) / stats.passes)
    assert 0 < stats.pass_s <= stats.decode_s and stats.overhead_ms_per_row >= 0
    plain = batch_stats(run_checked(batch([NoDrafter() for _ in PROMPTS], k=0, max_new=6)))
    assert plain.schedule == ((len(PROMPTS), 1, 6),) and plain.verify_width == 1.0 and plain.drafted_per_row == 0.0


def test_eos_in_one_row_ends_that_row_only():
    vocab = 64  # room for a token that one row emits and the others never do
    solo = {b: plain_greedy(TableLM(0, vocab_size=vocab), p, 24) for b, p in enumerate(PROMPTS)}
    eos = next(t for t in solo[0][2:12] if all(t not in solo[b] for b in solo if b != 0))
    drafters = [ModelDrafter(TableLM(0, vocab_size=vocab, noise=2.0), SamplingConfig()) for _ in PROMPTS]
    dec = run_checked(batch(drafters, eos=(eos,), vocab=vocab))
    assert dec.generated(0) == plain_greedy(TableLM(0, vocab_size=vocab), PROMPTS[0], 24, eos=(eos,))
    assert dec.generated(0)[-1] == eos and len(dec.generated(0)) < 24
    for b in range(1, len(PROMPTS)):
        assert dec.generated(b) == solo[b]
    ended = next(i for i, r in enumerate(dec.rounds) if 0 not in r.streams)
    assert all(0 not in r.streams for r in dec.rounds[ended:]) and len(dec.rounds[ended].streams) == len(PROMPTS) - 1


def test_a_row_at_its_length_limit_leaves_while_the_others_go_on():
    dec = batch([OracleDrafter(TableLM(0), r) for r in (4, 0)], PROMPTS[:2], k=4, max_new=10)
    run_checked(dec)
    assert [len(dec.generated(b)) for b in range(2)] == [10, 10]
    assert max(i for i, r in enumerate(dec.rounds) if 0 in r.streams) < len(dec.rounds) - 1  # row 0 finished first
    assert all(len(r.streams) == 1 for r in dec.rounds[-3:])


def test_known_bad_one_shared_cache_length_fails():
    """Rows accepting different numbers of drafts under one cache length: rejected drafts stay in a row's context."""
    dec = batch([OracleDrafter(TableLM(0), r) for r in (4, 0, 2, 1)], lm=SharedLengthToyLM)
    dec.run()
    assert any(dec.generated(b) != plain_greedy(TableLM(0), p, 24) for b, p in enumerate(PROMPTS))


def first_two_counts(n: int, lm=BatchedToyLM) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(rows, V, V) counts of each row's first two sampled tokens over n batched runs (k = 1, a draft model that
    agrees with the target only partly), and each row's exact (V, V) joint under the target."""
    sampling, scale = SamplingConfig(temperature=1.0), 0.3
    prompts = PROMPTS[:3]
    target = TableLM(0, scale=scale)
    joints = []
    for p in prompts:
        first = warp(target.logits_after(p), sampling)
        joints.append(torch.stack([first[a] * warp(target.logits_after(p + [a]), sampling) for a in range(V)]))  # (V, V)
    counts = torch.zeros(len(prompts), V, V)
    for seed in range(n):
        config = DecodeConfig(num_draft_tokens=1, sampling=sampling, seed=seed, max_new_tokens=2)
        drafters = [ModelDrafter(TableLM(0, noise=2.0, scale=scale), sampling) for _ in prompts]
        dec = BatchDecoder(lm([TableLM(0, scale=scale) for _ in prompts]), drafters, prompts, config)
        dec.run()
        for b in range(len(prompts)):
            a, c = dec.generated(b)
            counts[b, a, c] += 1
    return counts, joints


def test_sampled_rows_follow_the_target_per_row_and_a_shared_length_does_not():
    n = 1_200
    counts, joints = first_two_counts(n)
    for b, joint in enumerate(joints):
        assert pooled_pvalue(counts[b], joint) > 1e-3, f"row {b}"
    bad, _ = first_two_counts(n, SharedLengthToyLM)
    assert min(pooled_pvalue(bad[b], joint) for b, joint in enumerate(joints)) < 1e-6


# -- the transformers path: HFBatchedLM on a tiny random Llama ------------------------------------------------


def solo_plain_greedy(model, prompt: list[int], max_new: int, eos: tuple[int, ...]) -> list[int]:
    from specviz.models import HFCachedLM

    config = DecodeConfig(num_draft_tokens=0, max_new_tokens=max_new, eos_token_ids=eos)
    dec = SpeculativeDecoder(HFCachedLM(model.model, model.vocab_size), NoDrafter(), prompt, config)
    dec.run()
    return dec.generated


@pytest.mark.parametrize("kind", ["none", "lookup", "model"])
def test_tiny_llama_batched_rows_equal_their_solo_greedy_runs(tiny_models, kind):
    from specviz.models import HFBatchedLM, HFCachedLM

    target, draft = tiny_models["llama"], tiny_models["llama_draft"]
    tok = target.tokenizer
    texts = ["the cat sat on the mat and the dog sat on the log the cat sat on the", "the quick brown fox", "one two three",
             "def reverse ( s ) : return s [ : : - 1 ] def reverse ( s ) :"]
    prompts = [list(tok(t)["input_ids"]) for t in texts]
    make = {
        "none": lambda: NoDrafter(),
        "lookup": lambda: PromptLookupDrafter(ngram_max=3),
        "model": lambda: ModelDrafter(HFCachedLM(draft.model, target.vocab_size), SamplingConfig()),
    }[kind]
    eos = tuple(target.eos_token_ids)
    config = DecodeConfig(num_draft_tokens=0 if kind == "none" else 4, max_new_tokens=20, eos_token_ids=eos)
    dec = BatchDecoder(HFBatchedLM(target.model, target.vocab_size, len(prompts)), [make() for _ in prompts], prompts, config)
    dec.run()
    for b, p in enumerate(prompts):
        assert dec.generated(b) == solo_plain_greedy(target, p, 20, eos), f"row {b}"
    if kind == "model":
        assert any(len(set(r.accepted)) > 1 for r in dec.rounds), "rows accepted different numbers of drafts"
