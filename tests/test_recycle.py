"""Token Recycling as drafter: the table filled from every pass (prefill and verify, rejected drafts included),
greedy identity on a tiny Llama (chains and trees, float32 and fp16 weights), the first and first-two sampled tokens
on a toy with a known-bad control, the state carried through a checkpoint and a saved run, and the command line."""

from __future__ import annotations

import json

import pytest
import torch

from specviz.config import RunConfig
from specviz.core.decoding import DecodeConfig, SpeculativeDecoder
from specviz.core.protocols import Draft
from specviz.core.resume import RunState
from specviz.core.sampling import SamplingConfig
from specviz.drafters.recycle import EMPTY, RecycleDrafter
from specviz.runs import RunModels, SavedDecoder, build_decoder, resume_decoder
from tests.conftest import TINY_PROMPTS, VERIFIED_PRECISIONS
from tests.toys import TableLM, TreeTableLM, first_two_tokens, greedy_equals_plain

pytestmark = pytest.mark.usefixtures("one_thread")
V = 10
PROMPT = [1, 2, 3, 4, 1, 2, 3]  # repeats itself, so the prefill fills the rows the first rounds follow


def recycle_config(**kw) -> RunConfig:
    return RunConfig(**(dict(target="llama", drafter="recycle", num_draft_tokens=6, auto_k=False, max_new_tokens=24, chat=False) | kw))


# -- the table ---------------------------------------------------------------------------------------------------------


def test_the_prefill_and_every_verify_pass_fill_the_table_rejected_drafts_included():
    target = TableLM(0)
    dec = SpeculativeDecoder(target, RecycleDrafter(V, top=3), PROMPT, DecodeConfig(num_draft_tokens=3, max_new_tokens=12))
    drafter = dec.drafter
    drafter.fold()
    for tok in set(PROMPT[:-1]):  # every prompt token the prefill read: its latest row's top 3
        last = max(i for i, t in enumerate(PROMPT[:-1]) if t == tok)
        assert drafter.table[tok].tolist() == torch.topk(target.logits_after(PROMPT[: last + 1]), 3).indices.tolist()
    assert drafter.table[PROMPT[-1]].tolist() != [EMPTY] * 3  # 3 was read at position 2
    record = dec.step()
    assert record.num_drafted > 0 and record.drafted[0] == int(drafter.table[PROMPT[-1], 0])
    dec.hand_over()
    drafter.fold()  # the verify pass: the newest token's row and every drafted node's, the rejected ones' too
    context = list(PROMPT)
    for tok in record.drafted:
        context.append(tok)
        assert drafter.table[tok].tolist() == torch.topk(target.logits_after(context), 3).indices.tolist()


def test_the_table_is_the_runs_own_and_starts_empty():
    first, second = RecycleDrafter(V), RecycleDrafter(V)
    first.observe_logits([5], torch.randn(1, V))
    first.fold()
    assert first.table[5, 0] != EMPTY and bool((second.table == EMPTY).all())
    first.prepare([1, 2])
    assert bool((first.table == EMPTY).all())
    assert first.propose([1, 2], 4, torch.Generator()).token_ids == ()  # nothing read yet: nothing to follow


def test_a_chain_follows_the_first_column_and_stops_at_an_unread_token():
    drafter = RecycleDrafter(V, top=2)
    drafter.table[3] = torch.tensor([4, 6])
    drafter.table[4] = torch.tensor([5, 7])
    draft = drafter.propose([9, 3], 6, torch.Generator())
    assert draft.token_ids == (4, 5) and draft.q_draft is None and draft.on_device.tolist() == [4, 5]
    tree = drafter.propose_tree([9, 3], 4, 2, torch.Generator())
    assert tree.token_ids == (4, 6, 5, 7) and tree.parents == (-1, -1, 0, 0) and tree.scheme == "distinct"


def test_table_slots_name_the_row_and_column_of_every_drafted_token(tiny_models):
    """The inspector's "which table entry proposed it", derived from the record alone: checked against the table."""
    from specviz.core.metrics import table_slots
    from specviz.viz.frames import table_entries_frame

    target = tiny_models["llama"]
    for width in (1, 3):
        dec = build_decoder(recycle_config(tree_width=width), RunModels(target), target.tokenizer(TINY_PROMPTS[0]["prompt"])["input_ids"])
        for _ in range(4):
            dec.hand_over()
            dec.drafter.fold()
            table = dec.drafter.table.clone()
            newest = dec.tokens[-1]
            record = dec.step()
            for node, (parent, column) in enumerate(table_slots(record)):
                row = newest if parent < 0 else record.drafted[parent]
                assert int(table[row, column]) == record.drafted[node]
            frame = table_entries_frame(record, str, str(newest))
            assert list(frame["row"]) == [str(newest if p < 0 else record.drafted[p]) for p, _ in table_slots(record)]


# -- greedy: token-identical to plain decoding ----------------------------------------------------------------------


@pytest.mark.parametrize("precision", VERIFIED_PRECISIONS)
@pytest.mark.parametrize("width", [1, 2, 3])
def test_greedy_recycle_is_plain_greedy_chains_and_trees(tiny_models_at, precision, width):
    target = tiny_models_at(precision, "llama")
    config = recycle_config(tree_width=width)
    accepted, rejected = greedy_equals_plain(config, target, [target.tokenizer(p["prompt"])["input_ids"] for p in TINY_PROMPTS], width)
    assert accepted > 0 and rejected > 0  # both branches of the rule were taken


# -- sampled: the target's distribution, with a known-bad control ----------------------------------------------------


class SoftQRecycle(RecycleDrafter):
    """Known-bad: drafts the table's first column but reports a soft q, spread over the row's candidates."""

    has_q = True

    def propose(self, context, k, generator):
        draft = super().propose(context, k, generator)
        if not draft.token_ids:
            return draft
        q = torch.zeros(len(draft.token_ids), self.vocab_size)
        rows = [context[-1], *draft.token_ids[:-1]]
        for i, tok in enumerate(rows):
            q[i, self.table[tok]] = 1.0 / self.top
        return Draft(draft.token_ids, q)


@pytest.mark.parametrize(("drafter_cls", "width", "exact"), [(RecycleDrafter, 1, True), (RecycleDrafter, 2, True), (SoftQRecycle, 1, False)])
def test_first_and_first_two_sampled_tokens_follow_the_target(drafter_cls, width, exact):
    target = TreeTableLM(1, scale=0.5)

    def run(seed: int) -> SpeculativeDecoder:
        config = DecodeConfig(2, SamplingConfig(temperature=1.0), seed, 3, tree_width=width)
        dec = SpeculativeDecoder(TreeTableLM(1, scale=0.5), drafter_cls(V, top=3), PROMPT, config)
        dec.run()
        return dec

    result = first_two_tokens(target, PROMPT, 1.0, 1_500, run)
    if exact:
        assert result.p_one > 1e-3 and result.p_two > 1e-3
        assert result.accepted > 0 and result.rejected > 0
    else:
        assert min(result.p_one, result.p_two) < 1e-6


# -- a checkpoint, a saved run ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("width", "temperature"), [(1, 0.0), (2, 0.0), (1, 1.0), (3, 1.0)])
def test_a_resumed_recycle_run_continues_exactly(tiny_models, width, temperature):
    target = tiny_models["llama"]
    config = recycle_config(tree_width=width, temperature=temperature, num_draft_tokens=4, max_new_tokens=24, seed=5)
    ids = target.tokenizer(TINY_PROMPTS[0]["prompt"])["input_ids"]
    solo = build_decoder(config, RunModels(target), ids)
    solo.run()
    dec = build_decoder(config, RunModels(target), ids)
    for _ in range(4):
        dec.step()
    raw = json.loads(json.dumps(dec.state().to_dict()))
    assert raw["drafter_state"]
    state = RunState.from_dict(raw, len(dec.records))
    resumed = resume_decoder(config, RunModels(target), ids, SavedDecoder(list(dec.generated), list(dec.records), state, config.seed))
    dec.drafter.fold()  # saving left the last pass pending (folded into a copy)
    assert torch.equal(resumed.drafter.table, dec.drafter.table)  # carried: the rejected drafts' rows too
    resumed.run()
    assert resumed.generated == solo.generated
    assert [r.drafted for r in resumed.records] == [r.drafted for r in solo.records]
    with pytest.raises(ValueError, match="no state"):  # a saved run without the table cannot continue exactly
        resume_decoder(config, RunModels(target), ids, SavedDecoder(list(dec.generated), list(dec.records), RunState.from_dict(raw | {"drafter_state": None}, len(dec.records)), config.seed))


def test_the_carried_table_is_not_the_one_a_reprefill_rebuilds(tiny_models):
    """Known-bad control for carrying the state: the committed text alone (a re-prefill) gives another table, since
    rejected drafts' rows were written too (a token last read as a rejected sibling keeps that context's guesses)."""
    target = tiny_models["llama"]
    differ = 0
    for p in TINY_PROMPTS:
        ids = target.tokenizer(p["prompt"])["input_ids"]
        dec = build_decoder(recycle_config(num_draft_tokens=6, tree_width=3), RunModels(target), ids)
        dec.run()
        dec.hand_over()
        dec.drafter.fold()
        rebuilt = build_decoder(recycle_config(num_draft_tokens=6), RunModels(target), list(dec.tokens))
        rebuilt.drafter.fold()
        differ += int((rebuilt.drafter.table != dec.drafter.table).any(-1).sum())
    assert differ > 0


def test_checkpoint_and_restore_bring_the_table_back(tiny_models):
    target = tiny_models["llama"]
    dec = build_decoder(recycle_config(temperature=1.0, seed=2), RunModels(target), target.tokenizer(TINY_PROMPTS[0]["prompt"])["input_ids"])
    dec.step()
    point = dec.state()
    again = dec.step()
    dec.step()
    dec.restore(point)
    assert dec.step().drafted == again.drafted


def test_load_state_refuses_what_is_not_a_table():
    drafter = RecycleDrafter(V, top=2)
    drafter.table[3] = torch.tensor([4, 6])
    saved = drafter.save_state()
    other = RecycleDrafter(V, top=2)
    other.load_state(saved)
    assert torch.equal(other.table, drafter.table)
    for bad, message in ((b"junk", "not readable"), (RecycleDrafter(V, top=3).save_state(), "does not fit"),
                         (_table_with(12), "outside this vocabulary")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            other.load_state(bad)
    with pytest.raises(ValueError, match="drafter state"):
        RunState.from_dict({"generator": "AAAA", "draft_generator": None, "k": 2, "finished": False, "drafter_state": 7}, 0)


def _table_with(token: int) -> bytes:
    from safetensors.torch import save

    return save({"tokens": torch.tensor([token], dtype=torch.int32), "rows": torch.tensor([[1, 2]], dtype=torch.int32)})


def test_the_command_line_runs_recycle_and_checks_it_against_plain(tiny_dir, capsys):
    from specviz.cli import main

    args = ["generate", "--target", str(tiny_dir["llama"]), "--drafter", "recycle", "--no-chat", "--prompt", TINY_PROMPTS[0]["prompt"],
            "--max-new-tokens", "12", "--device", "cpu", "--dtype", "float32", "--check-baseline", "--tree-width", "2"]  # fmt: skip
    assert main(args) == 0
    assert "same as plain greedy" in capsys.readouterr().out


def test_batched_decoding_refuses_a_drafter_that_reads_the_targets_logits():
    from specviz.core.batch import BatchDecoder
    from tests.toys import BatchedToyLM

    with pytest.raises(ValueError, match="logits"):
        BatchDecoder(BatchedToyLM([TableLM(0)]), [RecycleDrafter(V)], [PROMPT], DecodeConfig())


def test_a_recycle_run_survives_the_run_directory_and_its_recording_replays(tiny_models, tmp_path):
    """A saved run (workshop.saved_runs) carries the table, so the restored run continues exactly; the recording of an
    EAGLE or recycle run keeps its settings; a share link may name the new drafters."""
    from specviz.recording.build import build_recording, dumps, recorded_run
    from specviz.recording.load import load_recording
    from specviz.ui.room.share import parse_query
    from specviz.workshop.saved_runs import RunStore, SavedRun, new_token

    target = tiny_models["llama"]
    config = recycle_config(temperature=1.0, seed=3, num_draft_tokens=4, tree_width=2)
    ids = target.tokenizer(TINY_PROMPTS[0]["prompt"])["input_ids"]
    solo = build_decoder(config, RunModels(target), ids)
    solo.run()
    dec = build_decoder(config, RunModels(target), ids)
    for _ in range(3):
        dec.step()
    env = dict(model="tiny", dtype="float32", device="cpu", device_name="cpu", torch="2", vocab_size=target.vocab_size)
    recording = build_recording(prompt="p", prompt_ids=ids, runs=[recorded_run("recycle", config, dec.records)], baseline=None,
                                token_text=lambda i: f"t{i}", environment=env)  # fmt: skip
    store, token = RunStore(tmp_path / "runs"), new_token()
    store.save(token, SavedRun(recording, (dec.state(),)))
    back = store.load(token)
    run = back.recording.runs[0]
    saved = SavedDecoder([t for r in run.records for t in r.emitted], run.records, back.states[0], run.seed)
    resumed = resume_decoder(run.config, RunModels(target), ids, saved)
    resumed.run()
    assert resumed.generated == solo.generated
    eagle = RunConfig(drafter="eagle", eagle_head="/srv/eagle", draft_vocab=8192)
    again = load_recording(dumps(build_recording(prompt="p", prompt_ids=ids, runs=[recorded_run("e", eagle, [])], baseline=None,
                                                 token_text=str, environment=env)))  # fmt: skip
    assert again.runs[0].config == eagle
    restored = parse_query({"drafter": "recycle"})
    assert restored.values["drafter"] == "recycle" and not restored.warnings
