"""EAGLE as drafter: the features handed over are the rows that chose the committed tokens (with a known-bad control),
greedy identity on a tiny Llama (chains and EAGLE-2 trees, float32 and fp16 weights, full and draft vocabulary, both
paths of the rule), the first and first-two sampled tokens on a toy with a known-bad control, resume and restore,
refusing heads, and `train-heads --kind eagle` on a tiny model: data cached and resumable, the go/no-go report."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from specviz import cli
from specviz.config import RunConfig
from specviz.core.decoding import DecodeConfig, SpeculativeDecoder
from specviz.core.protocols import Draft
from specviz.core.sampling import SamplingConfig, warp
from specviz.drafters.eagle import EagleDrafter, FeatureHead
from specviz.experiments.training import eagle, gate, teacher
from specviz.experiments.training.config import EAGLE_TINY, EagleConfig
from specviz.models import HFCachedLM
from specviz.models.eagle import EagleHead, EagleShape, load_eagle, save_eagle
from specviz.models.medusa import HeadsError, target_fingerprint
from specviz.models.vocab import save_token_counts
from specviz.runs import RunModels, build_decoder, load_target_eagle
from tests.conftest import TINY_PROMPTS, VERIFIED_PRECISIONS
from tests.toys import TableLM, assert_first_two, assert_same_run, first_two_tokens, greedy_equals_plain, paused_and_resumed

pytestmark = pytest.mark.usefixtures("one_thread")


def fingerprint(target) -> str:
    return target_fingerprint(target.model.get_input_embeddings().weight)


def own_sequences(target, texts: list[str], new: int = 24) -> eagle.Sequences:
    """The target's greedy continuations of texts, read back with its features: one sequence per text."""
    packs = []
    for text in texts:
        ids = target.tokenizer(text)["input_ids"]
        plain = build_decoder(RunConfig(target="t", drafter="none", max_new_tokens=new, chat=False), RunModels(target), ids, baseline=True)
        plain.run()
        seq = ids + plain.generated
        lm = HFCachedLM(target.model, target.vocab_size, keep_hidden=True)
        logits = lm.extend(seq)
        n = len(seq) - 1  # row t chose seq[t + 1]
        packs.append(dict(hidden=lm.last_hidden[:n].to(torch.float16).clone(), tokens=torch.tensor(seq[1:]), argmax=logits[:n].argmax(-1),
                          lengths=[n]))  # fmt: skip
    return eagle.Sequences.join(*packs)


def fit_eagle(target, texts: list[str], steps: int = 120, seed: int = 0) -> EagleHead:
    """An EAGLE head fitted in seconds to the target's own greedy continuations (EAGLE's loss), so drafts are accepted
    part of the time."""
    seqs = own_sequences(target, texts)
    config = dataclasses.replace(EAGLE_TINY, seg_len=32, batch_size=64, noise=0.0, lr=1e-2, train_vocab="full")
    frozen = eagle.frozen_parts(target, config, seqs)
    head = EagleHead(EagleShape.of_target(target.model.config), torch.Generator().manual_seed(seed))
    opt = torch.optim.Adam(head.parameters(), lr=1e-2)
    batch = eagle.make_batch(seqs, seqs.segments(config.seg_len), config.seg_len)
    for _ in range(steps):
        loss, _ = eagle.eagle_loss(head, frozen, batch, config)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return head.eval().requires_grad_(False)


@pytest.fixture(scope="module")
def eagle_dir(tiny_models, tiny_dir, tmp_path_factory):
    """A fitted head for the tiny llama with token counts (a draft vocabulary of its own continuations' tokens)."""
    target = tiny_models["llama"]
    folder = tmp_path_factory.mktemp("eagle") / "llama_eagle"
    texts = [p["prompt"] for p in TINY_PROMPTS]
    save_eagle(fit_eagle(target, texts), folder, str(tiny_dir["llama"]), fingerprint(target))
    seqs = own_sequences(target, texts)
    counts = torch.bincount(torch.cat([seqs.tokens, seqs.argmax]), minlength=target.vocab_size)
    save_token_counts(folder, counts)
    return folder


def eagle_config(folder, **kw) -> RunConfig:
    base = dict(target="llama", drafter="eagle", eagle_head=str(folder), num_draft_tokens=5, max_new_tokens=24, chat=False)
    return RunConfig(**(base | kw))


def ids_of(target, prompt: str) -> list[int]:
    return target.tokenizer(prompt)["input_ids"]


# -- greedy: token-identical to plain decoding ------------------------------------------------------------------


@pytest.mark.parametrize("precision", VERIFIED_PRECISIONS)
@pytest.mark.parametrize(("width", "draft_vocab"), [(1, 0), (2, 0), (3, 0), (1, 24), (2, 24)])
def test_greedy_eagle_is_plain_greedy_chains_and_trees(tiny_models_at, eagle_dir, precision, width, draft_vocab):
    target = tiny_models_at(precision, "llama")
    config = eagle_config(eagle_dir, tree_width=width, draft_vocab=draft_vocab)

    def only_the_draft_vocabulary(spec) -> None:
        if draft_vocab:
            assert {t for r in spec.records for t in r.drafted} <= set(spec.drafter.vocab_ids.tolist())

    prompts = [ids_of(target, p["prompt"]) for p in TINY_PROMPTS]
    accepted, rejected = greedy_equals_plain(config, target, prompts, width, only_the_draft_vocabulary)
    assert accepted > 0 and rejected > 0  # both branches of the rule were taken


def test_the_features_handed_over_are_the_rows_that_chose_the_committed_tokens(tiny_models, eagle_dir):
    """After every round the drafter's cache holds one entry per committed position, computed from the target's true
    features there: the same keys as a drafter fed once with a fresh pass over the whole text."""
    target = tiny_models["llama"]
    for width in (1, 3):
        dec = build_decoder(eagle_config(eagle_dir, tree_width=width), RunModels(target), ids_of(target, TINY_PROMPTS[1]["prompt"]))
        while not dec.done:
            dec.step()
            dec.hand_over()
            dec.drafter.feed()  # the drafter feeds what it was handed at its next draft; feed it now to look
            assert dec.drafter.length == len(dec.tokens) - 1
        fresh = build_decoder(eagle_config(eagle_dir), RunModels(target), list(dec.tokens))
        fresh.hand_over()
        fresh.drafter.feed()
        torch.testing.assert_close(dec.drafter.cache.keys, fresh.drafter.cache.keys, atol=1e-4, rtol=1e-4)


class LastRowsDecoder(SpeculativeDecoder):
    """Known-bad: hands the features reader the pass's last rows, not the rows that chose the committed tokens."""

    def keep_for_drafter(self, newest, drafted, verified, num_emitted):
        rows = self._last_hidden()  # the round's rows, one per row of its logits (a carried round's carried row first)
        super().keep_for_drafter(newest, drafted, verified, num_emitted)
        if self.features is not None:
            start, _, tokens = self.features
            self.features = (start, rows[-len(tokens) :], tokens)


def test_handing_over_the_wrong_rows_drafts_worse(tiny_models, eagle_dir):
    from specviz.runs import RunModels, make_drafter

    target = tiny_models["llama"]
    kept = {}
    for name, cls in (("right", SpeculativeDecoder), ("wrong", LastRowsDecoder)):
        total = 0
        for p in TINY_PROMPTS:
            config = eagle_config(eagle_dir)
            ids = ids_of(target, p["prompt"])
            dec = cls(HFCachedLM(target.model, target.vocab_size, keep_hidden=True), make_drafter(config, RunModels(target)), ids,
                      config.decode_config(target.eos_token_ids))  # fmt: skip
            dec.run()
            plain = build_decoder(config, RunModels(target), ids, baseline=True)
            plain.run()
            assert dec.generated == plain.generated  # exact either way
            total += sum(r.num_accepted for r in dec.records)
        kept[name] = total
    assert kept["right"] > kept["wrong"]


# -- sampled: the target's distribution, with a known-bad control ------------------------------------------------

V, PROMPT = 10, [1, 2, 3]


class ToyCache:
    def __init__(self) -> None:
        self.length = 0

    def crop(self, length: int) -> None:
        self.length = min(self.length, length)


class HiddenTableLM(TableLM):
    """TableLM whose 'hidden state' at a row is the row's logits (H = V)."""

    def extend(self, ids, last_only: bool = False):
        out = super().extend(ids, last_only)
        self.last_hidden = out
        return out


def toy_head(seed: int = 0, vocab_ids: torch.Tensor | None = None) -> FeatureHead:
    """A toy EAGLE layer: the next 'feature' is tanh(f A + e(x) B), its logits that times C (over vocab_ids' columns)."""
    g = torch.Generator().manual_seed(seed)
    a, b, c = torch.randn(V, V, generator=g) * 0.3, torch.randn(V, V, generator=g), torch.randn(V, V, generator=g)

    def forward(cache, features, ids, positions, mask):
        cache.length += features.shape[0]
        return torch.tanh(features.float() @ a + b[ids])

    cols = c if vocab_ids is None else c[:, vocab_ids]
    return FeatureHead(ToyCache, forward, lambda f: f @ cols * 1.5, torch.device("cpu"), vocab_ids)


class GreedyDraftSoftQ(EagleDrafter):
    """Known-bad: drafts the argmax at every step but reports the soft q."""

    def propose(self, context, k, generator):
        sampling = self.sampling
        self.sampling = SamplingConfig()  # greedy draws
        draft = super().propose(context, k, generator)
        self.sampling = sampling
        if not draft.token_ids:
            return draft
        feature, qs = self.last, []
        self.cache.crop(self.length)
        for i, tok in enumerate(draft.token_ids):
            qs.append(warp(self.head.logits(feature), sampling))
            feature = self.head.forward(self.cache, feature, torch.tensor([tok]), torch.tensor([self.length + i]), None)
        return Draft(draft.token_ids, torch.cat(qs))


@pytest.mark.parametrize(("drafter_cls", "width", "exact"), [(EagleDrafter, 1, True), (EagleDrafter, 3, True), (GreedyDraftSoftQ, 1, False)])
def test_first_and_first_two_sampled_tokens_follow_the_target(drafter_cls, width, exact):
    from tests.toys import TreeTableLM

    class HiddenTreeLM(TreeTableLM):
        def extend(self, ids, last_only: bool = False):
            out = super().extend(ids, last_only)
            self.last_hidden = out
            return out

        def extend_tree(self, ids, parents):
            out = super().extend_tree(ids, parents)
            self.last_hidden = out
            return out

    def run(seed: int) -> SpeculativeDecoder:
        config = DecodeConfig(2, SamplingConfig(temperature=1.0), seed, 3, tree_width=width)
        dec = SpeculativeDecoder(HiddenTreeLM(0, scale=0.3), drafter_cls(toy_head(), SamplingConfig(temperature=1.0), V), PROMPT, config)
        dec.run()
        return dec

    assert_first_two(first_two_tokens(TableLM(0, scale=0.3), PROMPT, 1.0, 1_500, run), exact)


def test_the_dynamic_tree_keeps_the_most_confident_nodes_as_a_tree():
    """EAGLE-2: at most k nodes, every node's parent among them, siblings distinct and most confident first, and a
    node kept only if no dropped node was more confident."""
    drafter = EagleDrafter(toy_head(3), SamplingConfig(), V)
    drafter.prepare(PROMPT)
    drafter.observe_features(0, torch.randn(2, V, generator=torch.Generator().manual_seed(1)), [2, 3])
    for k, width in ((1, 2), (4, 2), (7, 3), (12, 2)):
        tree = drafter.propose_tree(PROMPT, k, width, torch.Generator())
        assert 1 <= len(tree.token_ids) <= k and all(p < i for i, p in enumerate(tree.parents))
        for parent in set(tree.parents):
            kids = [tree.token_ids[i] for i, p in enumerate(tree.parents) if p == parent]
            assert len(set(kids)) == len(kids) <= width
        drafter.rollback(PROMPT)
        assert drafter.cache.length == drafter.length == 2


# -- resume, restore ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("width", "temperature"), [(1, 0.0), (2, 0.0), (1, 1.0), (3, 1.0)])
def test_a_resumed_eagle_run_continues_exactly(tiny_models, eagle_dir, width, temperature):
    target = tiny_models["llama"]
    config = eagle_config(eagle_dir, tree_width=width, temperature=temperature, num_draft_tokens=4, max_new_tokens=20, seed=5)
    ids = ids_of(target, TINY_PROMPTS[2]["prompt"])
    _, state, resumed = paused_and_resumed(config, target, ids)
    assert state.drafter_state is None  # EAGLE's cache is rebuilt from the re-prefill, not saved
    assert_same_run(resumed, config, target, ids)


def test_checkpoint_and_restore_feed_the_features_again(tiny_models, eagle_dir):
    target = tiny_models["llama"]
    dec = build_decoder(eagle_config(eagle_dir, temperature=1.0, seed=2), RunModels(target), ids_of(target, TINY_PROMPTS[0]["prompt"]))
    dec.step()
    point = dec.state()
    again = dec.step()
    dec.step()
    dec.restore(point)
    assert dec.step().drafted == again.drafted


# -- heads on disk --------------------------------------------------------------------------------------------------


def test_heads_for_another_target_or_of_another_kind_are_refused(tiny_models, eagle_dir, tmp_path, tiny_heads):
    target, other = tiny_models["llama"], tiny_models["other_tok"]
    save_eagle(EagleHead(EagleShape.of_target(other.model.config)), tmp_path / "other", "other-model", fingerprint(other))
    with pytest.raises(HeadsError, match="other-model.*not for .*llama"):
        load_target_eagle(str(tmp_path / "other"), target)
    with pytest.raises(HeadsError, match="does not describe an EAGLE head"):
        load_target_eagle(str(tiny_heads), target)  # a Medusa folder
    with pytest.raises(HeadsError, match="No EAGLE head folder"):
        load_target_eagle(str(tmp_path / "nowhere"), target)
    small = EagleShape(16, 2, 2, 8, 32)
    save_eagle(EagleHead(small), tmp_path / "small", "a 16-wide model", "")
    with pytest.raises(HeadsError, match="hidden size 32"):
        load_target_eagle(str(tmp_path / "small"), target)
    loaded = load_eagle(eagle_dir, EagleShape.of_target(target.model.config), fingerprint(target))
    assert not loaded.training and loaded.shape.hidden_size == 32


def test_the_shipped_head_missing_says_how_to_train_one(tiny_models, monkeypatch, tmp_path):
    import specviz.runs

    monkeypatch.setattr(specviz.runs, "SHIPPED_EAGLE", tmp_path / "eagle_smollm2_135m")
    with pytest.raises(HeadsError, match="train-heads --kind eagle"):
        load_target_eagle(None, tiny_models["llama"])


def test_the_command_line_runs_eagle_with_a_draft_vocabulary(tiny_dir, eagle_dir, capsys):
    common = ["generate", "--target", str(tiny_dir["llama"]), "--drafter", "eagle", "--eagle-head", str(eagle_dir), "--no-chat",
              "--prompt", TINY_PROMPTS[0]["prompt"], "--max-new-tokens", "12", "--device", "cpu", "--dtype", "float32"]  # fmt: skip
    assert cli.main([*common, "--draft-vocab", "24", "--check-baseline"]) == 0
    assert "same as plain greedy" in capsys.readouterr().out
    assert cli.main([*common, "--draft-vocab", "100000"]) == 2
    assert "larger than the target" in capsys.readouterr().err


# -- training -------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_eagle_data(tiny_models, tmp_path_factory):
    cache = tmp_path_factory.mktemp("eagle_cache")
    config = dataclasses.replace(EAGLE_TINY, data_tokens=200)
    return eagle.load_or_make_eagle_data(tiny_models["llama"], config, cache, progress=False), cache, config


def test_the_teacher_forced_text_is_offline_cached_and_resumable(tiny_models, tiny_eagle_data):
    data, cache, config = tiny_eagle_data
    assert data.facts["teacher_forced"]["positions"] >= config.teacher_tokens
    assert data.train.hidden.dtype == torch.float16 and data.heldout.positions > 0
    parts = sorted(next(cache.glob("eagle-teacher-parts-*")).glob("batch-*.pt"))
    assert len(parts) >= 2
    next(cache.glob("eagle-teacher-*.pt")).unlink()
    parts[-1].unlink()  # as if reading had been interrupted in its last batch: the others are reused
    again = eagle.load_or_make_eagle_data(tiny_models["llama"], config, cache, progress=False)
    assert torch.equal(again.train.hidden, data.train.hidden) and again.train.lengths == data.train.lengths
    docs = teacher.teacher_documents(0)
    assert len(next(docs)) >= 200  # the machine's own text: the standard library at least


def test_training_lowers_the_loss_and_resumes_to_the_same_weights(tiny_models, tiny_eagle_data, tmp_path):
    data, _, config = tiny_eagle_data
    lm = tiny_models["llama"]
    full = eagle.train_eagle(lm, data, config, tmp_path / "a.pt", progress=False)
    first = sum(c["loss"] for c in full.curve[:5]) / 5
    last = sum(c["loss"] for c in full.curve[-5:]) / 5
    assert last < first and len(full.evals) >= 2
    eagle.train_eagle(lm, data, config, tmp_path / "b.pt", progress=False, stop_after=15)
    resumed = eagle.train_eagle(lm, data, config, tmp_path / "b.pt", resume=True, progress=False)
    for key, value in full.head.state_dict().items():
        torch.testing.assert_close(resumed.head.state_dict()[key], value)


def test_cli_trains_an_eagle_head_and_prints_the_go_no_go_report(capsys, tiny_dir, tiny_models, tmp_path):
    out = tmp_path / "eagle"
    args = ["train-heads", "--kind", "eagle", "--target", str(tiny_dir["llama"]), "--tiny", "--steps", "10", "--data-tokens", "200",
            "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "--no-progress"]  # fmt: skip
    assert cli.main(args) == 0
    printed = capsys.readouterr().out
    assert "held-out first-draft-token top-1" in printed and "of a 1-token pass" in printed
    assert ("-> GO" in printed) or ("-> NO-GO" in printed)
    saved = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert saved["specviz_kind"] == "eagle" and saved["target_fingerprint"] == fingerprint(tiny_models["llama"])
    assert saved["training"]["command"].startswith("python -m specviz train-heads --kind eagle --tiny")
    assert 0 <= saved["gate"]["heldout_top1"] <= 1 and saved["gate"]["step_cost"] > 0
    assert (out / "eagle_head.safetensors").is_file() and (out / "token_counts.safetensors").is_file()
    assert cli.main(args + ["--resume"]) == 0  # the finished run's checkpoint: nothing left to do
    target = tiny_models["llama"]
    config = eagle_config(out, tree_width=2)
    ids = ids_of(target, TINY_PROMPTS[0]["prompt"])
    spec, plain = build_decoder(config, RunModels(target), ids), build_decoder(config, RunModels(target), ids, baseline=True)
    spec.run()
    plain.run()
    assert spec.generated == plain.generated


def test_the_gate_report_says_go_only_when_both_hold():
    assert gate.gate_report(0.6, 0.05, 8192, 1_000_000)[0]
    assert not gate.gate_report(0.5, 0.05, 8192, 1_000_000)[0]
    passed, lines = gate.gate_report(0.6, 0.07, 0, 1_000_000)
    assert not passed and "full vocabulary" in lines[2] and lines[-1].strip() == "-> NO-GO"
    with pytest.raises(ValueError, match="multiple of seg_len"):
        EagleConfig(batch_size=100, seg_len=64)


# -- continuing a trained head (--init-from) ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained_head(tiny_models, tiny_eagle_data, tmp_path_factory):
    """A tiny head trained from scratch and shipped (its folder and its result), the stage a continuation starts from."""
    data, _, config = tiny_eagle_data
    root = tmp_path_factory.mktemp("trained_eagle")
    result = eagle.train_eagle(tiny_models["llama"], data, config, root / "a.pt", progress=False)
    eagle.ship_eagle(result, data, config, root / "head", "tiny-llama", "first stage")
    return root / "head", result


def test_a_continued_head_starts_from_its_weights_and_its_curve_goes_on(tiny_models, tiny_eagle_data, trained_head, tmp_path):
    data, _, config = tiny_eagle_data
    lm, (folder, first) = tiny_models["llama"], trained_head
    start = eagle.read_start(folder, lm)
    assert (start.steps, start.positions_seen) == (config.steps, config.steps * config.batch_size)
    assert [e.positions_seen for e in start.evals] == [e.positions_seen for e in first.evals]
    shipped = load_eagle(folder, EagleShape.of_target(lm.model.config)).state_dict()
    for key, value in shipped.items():  # float16 on disk, float32 to train
        assert start.weights[key].dtype == torch.float32 and torch.equal(start.weights[key], value)
    untrained = eagle.train_eagle(lm, data, config, tmp_path / "c0.pt", progress=False, stop_after=0, start=start)
    for key, value in shipped.items():
        assert torch.equal(untrained.head.state_dict()[key], value)

    more = eagle.train_eagle(lm, data, config, tmp_path / "c.pt", progress=False, start=start)
    join, new = more.evals[len(first.evals)], more.evals[len(first.evals) + 1 :]
    assert more.evals[: len(first.evals)] == first.evals
    assert (join.step, join.positions_seen, join.positions) == (config.steps, start.positions_seen, data.heldout.positions)
    assert [e.positions_seen for e in new] == [start.positions_seen + e.step * config.batch_size - start.steps * config.batch_size for e in new]
    assert new[-1].positions_seen == start.positions_seen + config.steps * config.batch_size
    assert [row["step"] for row in more.curve] == list(range(1, 2 * config.steps + 1))
    assert eagle.scaling_table(more.evals)[len(first.evals)] == (start.positions_seen, join.top1, data.heldout.positions)

    eagle.ship_eagle(more, data, config, folder, "tiny-llama", "second stage")  # --out the folder it started from
    saved = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    training = saved["training"]
    assert training["positions_seen"] == 2 * config.steps * config.batch_size and training["steps_total"] == 2 * config.steps
    assert training["init_from"]["positions_seen"] == start.positions_seen and training["init_from"]["weights_sha256"] == start.digest
    (before,) = training["previous_training"]
    assert before["command"] == "first stage" and before["heldout_top1"] == round(first.evals[-1].top1, 4)
    curve = json.loads((folder / "training_curve.json").read_text(encoding="utf-8"))
    assert len(curve["evals"]) == len(more.evals) and len(curve["curve"]) == 2 * config.steps
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no staging folder left behind
    again = eagle.read_start(folder, lm)  # a third stage would go on from here, with both earlier stages recorded
    assert again.positions_seen == 2 * config.steps * config.batch_size and len(again.stages) == 2


def test_a_continuation_resumes_to_the_same_weights_and_only_from_its_own_start(tiny_models, tiny_eagle_data, trained_head, tmp_path):
    data, _, config = tiny_eagle_data
    lm, start = tiny_models["llama"], eagle.read_start(trained_head[0], tiny_models["llama"])
    full = eagle.train_eagle(lm, data, config, tmp_path / "a.pt", progress=False, start=start)
    eagle.train_eagle(lm, data, config, tmp_path / "b.pt", progress=False, stop_after=15, start=start)
    resumed = eagle.train_eagle(lm, data, config, tmp_path / "b.pt", resume=True, progress=False, start=start)
    for key, value in full.head.state_dict().items():
        torch.testing.assert_close(resumed.head.state_dict()[key], value)
    assert [e.positions_seen for e in resumed.evals] == [e.positions_seen for e in full.evals]
    fresh = eagle.checkpoint_path(tmp_path, config, fingerprint(lm))
    assert eagle.checkpoint_path(tmp_path, config, fingerprint(lm), start) != fresh  # the key names the start
    with pytest.raises(ValueError, match="init_from"):  # a continuation's checkpoint does not resume a fresh run
        eagle.train_eagle(lm, data, config, tmp_path / "b.pt", resume=True, progress=False)


def test_a_head_for_another_target_or_of_another_shape_is_not_continued(tiny_models, trained_head, tmp_path):
    folder = trained_head[0]
    assert fingerprint(tiny_models["llama_draft"]) != fingerprint(tiny_models["llama"])
    with pytest.raises(HeadsError, match="--init-from: the head in .* was trained for tiny-llama"):
        eagle.read_start(folder, tiny_models["llama_draft"])
    other = tmp_path / "other"
    other.mkdir()
    for f in folder.iterdir():
        (other / f.name).write_bytes(f.read_bytes())
    saved = json.loads((other / "config.json").read_text(encoding="utf-8"))
    saved["shape"]["intermediate_size"] += 8
    (other / "config.json").write_text(json.dumps(saved), encoding="utf-8")
    with pytest.raises(HeadsError, match="has the shape"):
        eagle.read_start(other, tiny_models["llama"])


def test_a_failed_write_leaves_the_folder_as_it_was(tmp_path):
    from specviz.experiments.training.save import replaced_folder

    out = tmp_path / "head"
    out.mkdir()
    (out / "a.txt").write_text("old", encoding="utf-8")
    (out / "kept.txt").write_text("kept", encoding="utf-8")
    with pytest.raises(RuntimeError), replaced_folder(out) as stage:
        (stage / "a.txt").write_text("half", encoding="utf-8")
        raise RuntimeError("killed mid-write")
    assert (out / "a.txt").read_text(encoding="utf-8") == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["head"]
    with replaced_folder(out) as stage:
        (stage / "a.txt").write_text("new", encoding="utf-8")
    assert (out / "a.txt").read_text(encoding="utf-8") == "new" and (out / "kept.txt").read_text(encoding="utf-8") == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["head"]


def test_cli_continues_a_head_into_its_own_folder(capsys, tiny_dir, tiny_models, tmp_path):
    from specviz.experiments.training.config import CONTINUE_TINY

    out = tmp_path / "eagle"
    args = ["train-heads", "--kind", "eagle", "--target", str(tiny_dir["llama"]), "--tiny", "--steps", "10", "--data-tokens", "200",
            "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "--no-progress"]  # fmt: skip
    assert cli.main(args) == 0
    capsys.readouterr()
    assert cli.main(args + ["--init-from", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"-- continued from {out}" in printed
    rows = [line.split() for line in printed.splitlines() if line[:14].strip().replace(",", "").isdigit()]
    assert [int(r[0].replace(",", "")) for r in rows] == [0, 640, 640, 1280]  # 10 steps of 64 positions, then 10 more
    saved = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert saved["training"]["command"].endswith(f"--init-from {out} --out {out}")
    assert saved["training"]["config"]["lr"] == CONTINUE_TINY["lr"] and saved["gate"]["positions_seen"] == 1280
    assert saved["training"]["previous_training"][0]["config"]["lr"] == EAGLE_TINY.lr
    assert cli.main(args + ["--init-from", str(out), "--resume"]) == 2  # the folder changed: its start's checkpoint is not there
    other = args[:3] + ["--target", str(tiny_dir["llama_draft"])] + args[5:] + ["--init-from", str(out)]
    assert cli.main(other) == 2 and "trained for" in capsys.readouterr().err
    assert cli.main(["train-heads", "--target", str(tiny_dir["llama"]), "--tiny", "--init-from", str(out)]) == 2
    assert "--kind eagle" in capsys.readouterr().err  # Medusa heads train from scratch


def test_plain_rounds_feed_nothing_until_the_next_draft(tiny_models, eagle_dir):
    """k: auto's plain rounds (k = 0) cost the drafter nothing: the handed-over features wait, and the next round that
    drafts feeds them all in one layer call, leaving the same cache as feeding each round at once."""
    target = tiny_models["llama"]
    ids = ids_of(target, TINY_PROMPTS[1]["prompt"])
    dec = build_decoder(eagle_config(eagle_dir), RunModels(target), ids)
    calls = []
    forward = dec.drafter.head.forward
    dec.drafter.head = dataclasses.replace(dec.drafter.head, forward=lambda *a: calls.append(a[1].shape[0]) or forward(*a))
    dec.drafter.prepare(ids)
    calls.clear()
    for start in range(3):
        dec.drafter.observe_features(start, torch.randn(1, target.model.config.hidden_size), [ids[start + 1]])
    assert calls == [] and dec.drafter.length == 0  # nothing fed yet
    dec.drafter.propose(ids, 0, torch.Generator())  # a plain round: still nothing
    assert calls == []
    dec.drafter.propose(ids, 2, torch.Generator())
    assert calls[0] == 3 and dec.drafter.length == 3  # one call over the three positions, then the draft's own steps
