"""A draft vocabulary (specviz.models.vocab): the V' most counted tokens, the LM head cut to their rows (plain,
float16-packed, tied), Medusa heads drafting over it exactly (greedy identity on a tiny Llama in float32 and fp16
weights, chains and trees; the first and first-two sampled tokens on a toy) with the known-bad control of a q that
leaves out the mass outside V', and `train-heads --count-vocab` for an existing heads folder."""

from __future__ import annotations

import json

import pytest
import torch

from specviz import cli
from specviz.config import RunConfig
from specviz.core.decoding import DecodeConfig, SpeculativeDecoder
from specviz.core.protocols import Draft
from specviz.core.sampling import SamplingConfig, draw, to_full_vocab, warp
from specviz.drafters.medusa import MedusaDrafter
from specviz.models.precision import PackedFP16Linear
from specviz.models.vocab import (
    COUNTS_FILE,
    ReducedHead,
    VocabError,
    coverage,
    draft_vocab_ids,
    read_token_counts,
    save_token_counts,
)
from specviz.runs import RunModels, build_decoder
from tests.conftest import TINY_PROMPTS, VERIFIED_PRECISIONS, skip_unless_precision_runs
from tests.toys import TableLM, assert_first_two, first_two_tokens

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_draft_vocabulary_is_the_most_counted_tokens_ties_by_id():
    counts = torch.tensor([5, 0, 9, 5, 1, 9])
    assert draft_vocab_ids(counts, 3).tolist() == [0, 2, 5]  # 9, 9, then the lower id of the two 5s
    assert draft_vocab_ids(counts, 6).tolist() == list(range(6))
    assert coverage(counts, torch.tensor([2, 5])) == pytest.approx(18 / 29)
    with pytest.raises(VocabError, match="1 to 6"):
        draft_vocab_ids(counts, 7)


def test_counts_round_trip_and_a_folder_without_them_says_what_to_run(tmp_path):
    save_token_counts(tmp_path, torch.tensor([3, 1, 4]), {"source": "test"})
    assert read_token_counts(tmp_path, 3).tolist() == [3, 1, 4]
    with pytest.raises(VocabError, match="this target's vocabulary has 5"):
        read_token_counts(tmp_path, 5)
    with pytest.raises(VocabError, match="--count-vocab"):
        read_token_counts(tmp_path / "none", 3)
    (tmp_path / COUNTS_FILE).write_bytes(b"junk")
    with pytest.raises(VocabError, match="not a readable"):
        read_token_counts(tmp_path, 3)


@pytest.mark.parametrize("packed", [False, True])
def test_the_reduced_head_scores_exactly_the_rows_of_the_full_one(packed):
    if packed:
        skip_unless_precision_runs("fp16-weights")
    full = torch.nn.Linear(16, 40, bias=False)
    head = PackedFP16Linear.from_module(full) if packed else full
    ids = torch.tensor([3, 7, 21, 39])
    states = torch.randn(5, 16)
    reduced = ReducedHead(head, ids)
    torch.testing.assert_close(reduced(states), head(states).float()[:, ids])
    tied = torch.nn.Embedding(40, 16)
    tied.weight = full.weight  # a head tied to the input embedding reads its rows from there
    torch.testing.assert_close(ReducedHead(head, ids, rows=tied)(states), head(states).float()[:, ids])


def test_to_full_vocab_puts_zero_outside_the_draft_vocabulary():
    q = torch.tensor([[0.25, 0.75]])
    assert to_full_vocab(q, torch.tensor([1, 3]), 5).tolist() == [[0.0, 0.25, 0.0, 0.75, 0.0]]
    assert to_full_vocab(q, None, 5) is q


# -- Medusa over a draft vocabulary: greedy identity ------------------------------------------------------------------


@pytest.fixture(scope="module")
def counted_heads(tiny_models, tiny_heads, tmp_path_factory):
    """The tiny random heads with token counts: what the tiny llama says after the test prompts."""
    import shutil

    target = tiny_models["llama"]
    folder = tmp_path_factory.mktemp("counted") / "heads"
    shutil.copytree(tiny_heads, folder)
    tokens = []
    for p in TINY_PROMPTS:
        ids = target.tokenizer(p["prompt"])["input_ids"]
        plain = build_decoder(RunConfig(target="t", drafter="none", max_new_tokens=24, chat=False), RunModels(target), ids, baseline=True)
        plain.run()
        tokens += ids + plain.generated
    save_token_counts(folder, torch.bincount(torch.tensor(tokens), minlength=target.vocab_size))
    return folder


@pytest.mark.parametrize("precision", VERIFIED_PRECISIONS)
@pytest.mark.parametrize("width", [1, 2])
def test_greedy_medusa_over_a_draft_vocabulary_is_plain_greedy(tiny_models_at, counted_heads, precision, width):
    target = tiny_models_at(precision, "llama")
    config = RunConfig(target="llama", drafter="medusa", medusa_heads=str(counted_heads), draft_vocab=20, num_draft_tokens=3, auto_k=False,
                       tree_width=width, max_new_tokens=24, chat=False)  # fmt: skip
    drafted = 0
    for p in TINY_PROMPTS:
        ids = target.tokenizer(p["prompt"])["input_ids"]
        spec = build_decoder(config, RunModels(target), ids)
        spec.run()
        plain = build_decoder(config, RunModels(target), ids, baseline=True)
        plain.run()
        assert spec.generated == plain.generated, p["title"]
        allowed = set(spec.drafter.vocab_ids.tolist())
        assert len(allowed) == 20 and {t for r in spec.records for t in r.drafted} <= allowed
        drafted += sum(r.num_drafted for r in spec.records)
    assert drafted > 0
    assert "draft vocabulary 20" in spec.drafter.name


def test_a_draft_vocabulary_needs_counts_and_fits_the_target(tiny_models, tiny_heads):
    target = tiny_models["llama"]
    ids = target.tokenizer(TINY_PROMPTS[0]["prompt"])["input_ids"]
    with pytest.raises(VocabError, match="--count-vocab"):
        build_decoder(RunConfig(target="t", drafter="medusa", medusa_heads=str(tiny_heads), draft_vocab=8, chat=False), RunModels(target), ids)
    with pytest.raises(ValueError, match="draft vocabulary is 0"):
        RunConfig(drafter="medusa", draft_vocab=-1)


# -- sampled: exact over V', and the known-bad q that leaves out the mass outside V' ----------------------------------

K, V, PROMPT = 4, 10, [1, 2, 3]
DRAFT_IDS = torch.tensor([0, 2, 3, 5, 6, 8])  # V' = 6 of the toy's 10 tokens


class HiddenTableLM(TableLM):
    def extend(self, ids, last_only: bool = False):
        out = super().extend(ids, last_only)
        self.last_hidden = out
        return out


def toy_heads(columns: torch.Tensor | None):
    mixes = torch.randn(K, V, V, generator=torch.Generator().manual_seed(0)) * 0.4  # (K, H, V)
    return lambda h, newest: torch.einsum("h,khv->kv", h, mixes)[:, columns] if columns is not None else torch.einsum("h,khv->kv", h, mixes)


class FullDrawReducedQ(MedusaDrafter):
    """Known-bad: draws from the full vocabulary's q but reports q over V' only (renormalised there), leaving out the
    mass outside V'."""

    def propose(self, context, k, generator):
        heads = self.heads_q(min(k, self.num_heads), context[-1])
        if heads is None:
            return Draft(())
        _, q_full = heads
        ids = draw(q_full, generator)
        kept = torch.zeros_like(q_full)
        kept[:, DRAFT_IDS] = q_full[:, DRAFT_IDS]
        return Draft(tuple(ids.tolist()), kept / kept.sum(-1, keepdim=True))


@pytest.mark.parametrize(("drafter", "exact"), [("reduced", True), ("bad", False)])
def test_first_and_first_two_sampled_tokens_follow_the_target(drafter, exact):
    sampling = SamplingConfig(temperature=1.0)

    def make() -> MedusaDrafter:
        if drafter == "reduced":
            return MedusaDrafter(toy_heads(DRAFT_IDS), K, sampling, vocab_ids=DRAFT_IDS, vocab_size=V)
        return FullDrawReducedQ(toy_heads(None), K, sampling)

    def run(seed: int) -> SpeculativeDecoder:
        dec = SpeculativeDecoder(HiddenTableLM(0, scale=0.3), make(), PROMPT, DecodeConfig(2, sampling, seed, 3))
        dec.run()
        return dec

    assert_first_two(first_two_tokens(TableLM(0, scale=0.3), PROMPT, 1.0, 1_500, run), exact)


def test_the_reduced_q_is_the_heads_warped_distribution_over_v_prime_and_zero_elsewhere():
    sampling = SamplingConfig(temperature=0.7)
    drafter = MedusaDrafter(toy_heads(DRAFT_IDS), K, sampling, vocab_ids=DRAFT_IDS, vocab_size=V)
    drafter.observe(torch.randn(V))
    draft = drafter.propose(PROMPT, 3, torch.Generator().manual_seed(0))
    outside = torch.ones(V, dtype=torch.bool)
    outside[DRAFT_IDS] = False
    assert bool((draft.q_draft[:, outside] == 0).all())
    logits = toy_heads(DRAFT_IDS)(drafter.hidden, PROMPT[-1])[:3]
    torch.testing.assert_close(draft.q_draft[:, DRAFT_IDS], warp(logits, sampling))
    assert set(draft.token_ids) <= set(DRAFT_IDS.tolist())


def test_greedy_drafting_spends_no_random_number():
    """At temperature 0 the argmax is the draw: the generator the rule draws from is left untouched."""
    drafter = MedusaDrafter(toy_heads(None), K, SamplingConfig())
    drafter.observe(torch.randn(V))
    generator = torch.Generator().manual_seed(0)
    before = generator.get_state()
    draft = drafter.propose(PROMPT, 3, generator)
    assert torch.equal(generator.get_state(), before)
    assert list(draft.token_ids) == toy_heads(None)(drafter.hidden, 3)[:3].argmax(-1).tolist()


# -- counting an existing folder's tokens ------------------------------------------------------------------------------


def test_count_vocab_writes_the_counts_of_an_existing_heads_folder(capsys, tiny_dir, tiny_models, tmp_path):
    out = tmp_path / "heads"
    common = ["--target", str(tiny_dir["llama"]), "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "--no-progress"]
    assert cli.main(["train-heads", "--tiny", "--steps", "4", *common]) == 0
    (out / COUNTS_FILE).unlink()  # heads trained before counts were shipped
    capsys.readouterr()
    assert cli.main(["train-heads", "--count-vocab", *common]) == 0
    assert "wrote" in capsys.readouterr().out
    counts = read_token_counts(out, tiny_models["llama"].vocab_size)
    recipe = json.loads((out / "config.json").read_text(encoding="utf-8"))["training"]
    assert int(counts.sum()) == recipe["train_positions"]  # every training position's token, counted once
    assert cli.main(["train-heads", "--count-vocab", "--out", str(tmp_path / "nothing"), "--no-progress"]) == 2


@pytest.mark.smollm
@pytest.mark.parametrize("precision", VERIFIED_PRECISIONS)
def test_the_shipped_heads_over_a_draft_vocabulary_are_plain_greedy_on_smollm(smollm_at, precision, tmp_path):
    """The real target's tied, float16-packed LM head cut to 4,096 rows (counts made up here: exactness does not
    depend on them): greedy output token for token plain greedy, a chain and a tree."""
    import shutil

    from specviz.models import encode_prompt
    from specviz.runs import SHIPPED_HEADS

    smollm = smollm_at(precision)
    folder = tmp_path / "heads"
    shutil.copytree(SHIPPED_HEADS, folder)
    text = " ".join(p["prompt"] for p in TINY_PROMPTS) + " The quick brown fox jumps over the lazy dog. def f(x): return x"
    ids = encode_prompt(smollm.tokenizer, "Write a short paragraph about the sea.", chat=True)
    counts = torch.bincount(torch.tensor(smollm.tokenizer(text)["input_ids"] + ids), minlength=smollm.vocab_size)
    save_token_counts(folder, counts + (torch.arange(smollm.vocab_size) < 4096))  # every id seen, the text's first
    plain = build_decoder(RunConfig(max_new_tokens=24), RunModels(smollm), ids, baseline=True)
    plain.run()
    for width in (1, 2):
        config = RunConfig(drafter="medusa", medusa_heads=str(folder), draft_vocab=4096, num_draft_tokens=3, auto_k=False, tree_width=width, max_new_tokens=24)
        spec = build_decoder(config, RunModels(smollm), ids)
        spec.run()
        assert spec.generated == plain.generated, width
        assert sum(r.num_drafted for r in spec.records) > 0
