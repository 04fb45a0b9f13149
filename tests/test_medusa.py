"""Medusa heads as drafter: exactness (greedy identity on a tiny Llama, chains and trees; sampled first-token and
first-two-token distributions on a toy), the hidden-row rule with its known-bad control, loading and refusing heads,
resume, recordings, the policy and the command line."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from specviz.config import RunConfig
from specviz.core.decoding import DecodeConfig, SpeculativeDecoder
from specviz.core.protocols import Draft
from specviz.core.sampling import SamplingConfig, warp
from specviz.drafters.medusa import MedusaDrafter
from specviz.models import HFCachedLM
from specviz.models.medusa import HeadsError, MedusaHeads, save_heads, target_fingerprint
from specviz.runs import RunModels, build_decoder, load_target_heads, make_drafter
from tests.conftest import TINY_PROMPTS
from tests.toys import TableLM, ToyLM, assert_same_run, greedy_equals_plain, paused_and_resumed, pooled_pvalue

pytestmark = pytest.mark.usefixtures("one_thread")
K = 4


def fingerprint(target) -> str:
    return target_fingerprint(target.model.get_input_embeddings().weight)


def fit_heads(target, texts: list[str], steps: int = 100, seed: int = 0, token_input: bool = False) -> MedusaHeads:
    """K heads fitted in a second to the target's own greedy continuations (random non-zero start), so drafts are
    accepted part of the time: the head for t+1+i learns the token the target committed i places later (heads with
    a token input also read the token at t+1)."""
    hidden, newest, labels = [], [], []
    for text in texts:
        ids = target.tokenizer(text)["input_ids"]
        plain = build_decoder(RunConfig(target="t", drafter="none", max_new_tokens=24, chat=False), RunModels(target), ids, baseline=True)
        plain.run()
        seq = ids + plain.generated
        lm = HFCachedLM(target.model, target.vocab_size, keep_hidden=True)
        lm.extend(seq)
        for t in range(len(seq) - 1 - K):  # row t chose seq[t + 1]; head i guesses seq[t + 1 + i]
            hidden.append(lm.last_hidden[t])
            newest.append(seq[t + 1])
            labels.append([seq[t + 1 + i] for i in range(1, K + 1)])
    h, y = torch.stack(hidden).clone(), torch.tensor(labels).T  # (N, H), (K, N)
    e = target.model.get_input_embeddings().weight.detach()[torch.tensor(newest)].clone() if token_input else None  # (N, H)
    torch.manual_seed(seed)
    heads = MedusaHeads(h.shape[-1], K, 1, token_input=token_input)
    for p in heads.parameters():
        torch.nn.init.normal_(p, std=0.1)
    heads.requires_grad_(True)
    lm_head = target.model.get_output_embeddings()
    opt = torch.optim.Adam(heads.parameters(), lr=3e-2)
    for _ in range(steps):
        logits = heads.logits(h, lm_head, e)  # (K, N, V)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return heads.requires_grad_(False)


@pytest.fixture(scope="module")
def heads_dir(tiny_models, tiny_dir, tmp_path_factory):
    target = tiny_models["llama"]
    folder = tmp_path_factory.mktemp("heads") / "llama_heads"
    save_heads(fit_heads(target, [p["prompt"] for p in TINY_PROMPTS]), folder, str(tiny_dir["llama"]), fingerprint(target))
    return folder


@pytest.fixture(scope="module")
def token_heads_dir(tiny_models, tiny_dir, tmp_path_factory):
    """Heads that read the newest token as well (specviz's default for trained heads)."""
    target = tiny_models["llama"]
    folder = tmp_path_factory.mktemp("heads") / "llama_token_heads"
    heads = fit_heads(target, [p["prompt"] for p in TINY_PROMPTS], token_input=True)
    save_heads(heads, folder, str(tiny_dir["llama"]), fingerprint(target))
    return folder


def medusa_config(heads_dir, **kw) -> RunConfig:
    base = dict(target="llama", drafter="medusa", medusa_heads=str(heads_dir), num_draft_tokens=6, auto_k=False, max_new_tokens=24, chat=False)  # a fixed k: both branches of the rule every run, whatever auto would pick
    return RunConfig(**(base | kw))


def ids_of(target, prompt: str) -> list[int]:
    return target.tokenizer(prompt)["input_ids"]


# -- greedy: token-identical to plain decoding ------------------------------------------------------------------


@pytest.mark.parametrize("width", [1, 2, 3])
def test_greedy_medusa_is_plain_greedy_chains_and_trees(tiny_models, heads_dir, width):
    target = tiny_models["llama"]
    config = medusa_config(heads_dir, tree_width=width)

    def within_the_heads(spec) -> None:
        assert max(r.num_drafted for r in spec.records) <= (K if width == 1 else 6)

    accepted, rejected = greedy_equals_plain(config, target, [ids_of(target, p["prompt"]) for p in TINY_PROMPTS], width, within_the_heads)
    assert accepted > 0 and rejected > 0  # both branches of the rule were taken


@pytest.mark.parametrize("width", [1, 2, 3])
def test_greedy_medusa_with_a_token_input_is_plain_greedy(tiny_models, token_heads_dir, width):
    """Heads that read the newest token too: still token-identical to plain greedy, chains and trees, both paths."""
    target = tiny_models["llama"]
    config = medusa_config(token_heads_dir, tree_width=width)
    accepted = rejected = 0
    for p in TINY_PROMPTS:
        ids = ids_of(target, p["prompt"])
        spec = build_decoder(config, RunModels(target), ids)
        spec.run()
        plain = build_decoder(config, RunModels(target), ids, baseline=True)
        plain.run()
        assert spec.generated == plain.generated, p["title"]
        accepted += sum(r.num_accepted for r in spec.records)
        rejected += sum(r.num_drafted - r.num_accepted for r in spec.records)
    assert accepted > 0 and rejected > 0


class StaleTokenDrafter(MedusaDrafter):
    """Known-bad: hands the heads the token before the newest (the context's second-to-last), not the newest."""

    def propose(self, context, k, generator):
        return super().propose(list(context[:-1]) or list(context), k, generator)


def test_token_heads_read_the_newest_token_and_a_stale_one_drafts_worse(tiny_models, token_heads_dir):
    """The heads get the context's last token (the one the observed row chose); handing them the one before it
    (known-bad) keeps the output exact but lowers acceptance."""
    target = tiny_models["llama"]
    config = medusa_config(token_heads_dir)
    seen = []
    kept = {}
    for name in ("newest", "stale"):
        total = 0
        for p in TINY_PROMPTS:
            ids = ids_of(target, p["prompt"])
            dec = build_decoder(config, RunModels(target), ids)
            if name == "stale":
                dec.drafter.__class__ = StaleTokenDrafter
            else:
                inner = dec.drafter.head_logits
                dec.drafter.head_logits = lambda h, newest, inner=inner, dec=dec: (seen.append((newest, dec.tokens[-1])), inner(h, newest))[1]
            dec.run()
            total += sum(r.num_accepted for r in dec.records)
        kept[name] = total
    assert seen and all(newest == last for newest, last in seen)
    assert kept["newest"] > kept["stale"]


def test_token_input_heads_round_trip_and_are_refused_without_their_weights(tiny_models, token_heads_dir, tmp_path):
    """config.json says specviz_token_input; the loaded heads read the token; a folder that says so without the
    weights (or says it with a non-boolean) is refused with a clear message; untrained token input is plain Medusa."""
    from safetensors.torch import load_file, save_file

    from specviz.models.medusa import TOKEN_INPUT_KEY, WEIGHTS_FILE, load_heads

    target = tiny_models["llama"]
    saved = json.loads((token_heads_dir / "config.json").read_text(encoding="utf-8"))
    assert saved[TOKEN_INPUT_KEY] is True
    heads = load_heads(token_heads_dir, 32, fingerprint(target))
    assert heads.reads_token
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps(saved), encoding="utf-8")
    weights = {k: v for k, v in load_file(str(token_heads_dir / WEIGHTS_FILE)).items() if not k.startswith("token_input")}
    save_file(weights, str(broken / WEIGHTS_FILE))
    with pytest.raises(HeadsError, match="token_input"):
        load_heads(broken, 32, fingerprint(target))
    (broken / "config.json").write_text(json.dumps(saved | {TOKEN_INPUT_KEY: "yes"}), encoding="utf-8")
    with pytest.raises(HeadsError, match="true or false"):
        load_heads(broken, 32, fingerprint(target))
    fresh, plain = MedusaHeads(32, 2, 1, token_input=True), MedusaHeads(32, 2, 1)
    plain.load_state_dict({k: v for k, v in fresh.state_dict().items() if not k.startswith("token_input")})
    h, e = torch.randn(5, 32), torch.randn(5, 32)
    torch.testing.assert_close(fresh(h, e), plain(h))  # W_in starts at zero


@pytest.mark.parametrize("width", [1, 3])
def test_the_observed_row_is_the_one_whose_lm_head_chose_the_newest_token(tiny_models, heads_dir, width):
    """After every round, the hidden state handed over gives, through the target's LM head, exactly the newest
    committed token (greedy): the row head i counts from. After the prefill it is the row of the token before the newest."""
    target = tiny_models["llama"]
    ids = ids_of(target, TINY_PROMPTS[1]["prompt"])
    dec = build_decoder(medusa_config(heads_dir, tree_width=width), RunModels(target), ids)
    alone = HFCachedLM(target.model, target.vocab_size, keep_hidden=True)
    alone.extend(ids[:-1])
    torch.testing.assert_close(dec.hidden, alone.last_hidden[-1])
    lm_head = target.model.get_output_embeddings()
    while not dec.done:
        dec.step()
        assert dec.drafter.hidden is dec.hidden
        if not dec.finished:  # an EOS among the accepted drafts ends the run before the round's last token
            with torch.inference_mode():
                assert int(lm_head(dec.hidden).argmax()) == dec.tokens[-1]


def test_the_adapter_keeps_the_lm_heads_input(tiny_models):
    """lm_head(last_hidden) == logits, for a pass, a last_only prefill (every row kept, the last one's logits) and a tree."""
    target = tiny_models["llama"]
    lm_head = torch.inference_mode()(target.model.get_output_embeddings())  # another test may leave weights needing grad
    lm = HFCachedLM(target.model, target.vocab_size, keep_hidden=True)
    first = lm.extend([5, 6, 7], last_only=True)
    assert lm.last_hidden.shape == (3, 32)
    torch.testing.assert_close(lm_head(lm.last_hidden[-1:]).float(), first)
    logits = lm.extend([8, 9])
    torch.testing.assert_close(lm_head(lm.last_hidden).float(), logits)
    tree = lm.extend_tree([10, 11, 12], [-1, -1, 0])
    torch.testing.assert_close(lm_head(lm.last_hidden).float(), tree)
    plain = HFCachedLM(target.model, target.vocab_size)
    plain.extend([5, 6])
    assert plain.last_hidden is None  # off unless the run asks


# -- the hidden-row rule on a toy, with its known-bad control ---------------------------------------------------


class OneHotLM(ToyLM):
    """Token after x is x + 1 (mod V); a row's 'hidden state' is the one-hot of the token fed there, so the row whose
    logits chose token n holds n - 1."""

    def logits_after(self, seq):
        return torch.nn.functional.one_hot(torch.tensor((seq[-1] + 1) % self.vocab_size), self.vocab_size).float() * 20.0

    def extend(self, ids, last_only: bool = False):
        out = super().extend(ids, last_only)
        self.last_hidden = torch.nn.functional.one_hot(torch.tensor([int(i) for i in ids]), self.vocab_size).float()
        return out


def successor_heads(vocab: int, wrong_when_odd: bool = True):
    """Head i guesses (x + 1 + i) from the row holding x, i.e. the token i places after the newest one, except head 2,
    which errs when x is odd (so rounds see rejections)."""

    def head_logits(h: torch.Tensor, newest: int) -> torch.Tensor:
        x = int(h.argmax())
        rows = [(x + 1 + i + (1 if i == 2 and wrong_when_odd and x % 2 else 0)) % vocab for i in range(1, K + 1)]  # (K,)
        return torch.nn.functional.one_hot(torch.tensor(rows), vocab).float() * 10.0

    return head_logits


class LastRowDecoder(SpeculativeDecoder):
    """Known-bad: hands the drafter the pass's last row, not the row that chose the newest token."""

    def observe(self, row):
        super().observe(None if row is None else -1)


def _acceptance(decoder_cls) -> float:
    vocab, config = 50, DecodeConfig(num_draft_tokens=4, max_new_tokens=40)
    drafter = MedusaDrafter(successor_heads(vocab), K, config.sampling)
    dec = decoder_cls(OneHotLM(vocab), drafter, [3, 4, 5], config)
    dec.run()
    assert dec.generated == [(6 + i) % vocab for i in range(40)]  # exact either way
    return sum(r.num_accepted for r in dec.records) / sum(r.num_drafted for r in dec.records)


def test_the_right_row_drafts_what_the_target_says_next_and_the_last_row_does_not():
    right, wrong = _acceptance(SpeculativeDecoder), _acceptance(LastRowDecoder)
    assert right >= 0.25  # head 1 is always right from the right row
    assert wrong < 0.1  # known-bad: after a rejection the last row is a stale draft's, every head guesses off


def test_a_one_token_prompt_drafts_nothing_in_its_first_round():
    vocab = 50
    dec = SpeculativeDecoder(OneHotLM(vocab), MedusaDrafter(successor_heads(vocab), K, SamplingConfig()), [7], DecodeConfig(max_new_tokens=8))
    assert dec.hidden is None
    first = dec.step()
    assert first.num_drafted == 0 and first.emitted == (8,)
    assert dec.step().num_drafted > 0


# -- sampled: the target's distribution, with a known-bad control ------------------------------------------------

V, PROMPT = 10, [1, 2, 3]


class HiddenTableLM(TableLM):
    """TableLM whose 'hidden state' at a row is the row's logits (H = V)."""

    def extend(self, ids, last_only: bool = False):
        out = super().extend(ids, last_only)
        self.last_hidden = out
        return out


def toy_heads(seed: int = 0):
    mixes = torch.randn(K, V, V, generator=torch.Generator().manual_seed(seed)) * 0.4  # (K, H, V)
    return lambda h, newest: torch.einsum("h,khv->kv", h, mixes)  # (K, V)


class GreedyDraftSoftQ(MedusaDrafter):
    """Known-bad: drafts each head's argmax but reports the soft q (the 'greedy draft scored with soft q' bug)."""

    def propose(self, context, k, generator):
        heads = self.heads_q(min(k, self.num_heads), context[-1])
        if heads is None:
            return Draft(())
        logits, q = heads
        return Draft(tuple(logits.argmax(-1).tolist()), q)


def _toy_run(drafter_cls, seed: int, sampling: SamplingConfig, max_new: int) -> SpeculativeDecoder:
    drafter = drafter_cls(toy_heads(), K, sampling)
    dec = SpeculativeDecoder(HiddenTableLM(0, scale=0.3), drafter, PROMPT, DecodeConfig(2, sampling, seed, max_new))
    dec.run()
    return dec


@pytest.mark.parametrize(("drafter_cls", "exact"), [(MedusaDrafter, True), (GreedyDraftSoftQ, False)])
def test_first_and_first_two_sampled_tokens_follow_the_target(drafter_cls, exact):
    n, sampling = 1_500, SamplingConfig(temperature=1.0)
    target = TableLM(0, scale=0.3)
    first = warp(target.logits_after(PROMPT), sampling)  # (V,)
    joint = torch.stack([first[a] * warp(target.logits_after(PROMPT + [a]), sampling) for a in range(V)])  # (V, V)
    ones, pairs = torch.zeros(V), torch.zeros(V, V)
    accepted = rejected = 0
    for seed in range(n):
        dec = _toy_run(drafter_cls, seed, sampling, max_new=3)  # round 1 drafts 2 tokens (heads 1 and 2)
        a, b = dec.generated[:2]
        ones[a] += 1
        pairs[a, b] += 1
        accepted += dec.records[0].num_accepted
        rejected += "rejected" in dec.records[0].draft_fates
    p_one, p_two = pooled_pvalue(ones, first), pooled_pvalue(pairs, joint)
    if exact:
        assert p_one > 1e-3 and p_two > 1e-3
        assert accepted > 0 and rejected > 0
    else:
        assert min(p_one, p_two) < 1e-6


# -- heads on disk: Medusa-1 checkpoints, refusals -----------------------------------------------------------------


def test_a_medusa1_checkpoint_with_its_own_lm_heads_loads_and_decodes_exactly(tiny_models, tiny_dir, tmp_path):
    target = tiny_models["llama"]
    heads = MedusaHeads(32, 2, 1, vocab_size=target.vocab_size)
    torch.manual_seed(3)
    for p in heads.parameters():
        torch.nn.init.normal_(p, std=0.2)
    save_heads(heads, tmp_path / "m1", "some/base-model", fingerprint(target))
    loaded = load_target_heads(str(tmp_path / "m1"), target)
    assert loaded.own_lm_heads is not None and loaded.num_heads == 2
    config = medusa_config(tmp_path / "m1", tree_width=2)
    ids = ids_of(target, TINY_PROMPTS[0]["prompt"])
    spec = build_decoder(config, RunModels(target, heads=loaded), ids)
    spec.run()
    plain = build_decoder(config, RunModels(target), ids, baseline=True)
    plain.run()
    assert spec.generated == plain.generated
    h = torch.randn(32)
    own = torch.stack([head(block(h)) for head, block in zip(loaded.own_lm_heads, loaded.blocks)])
    torch.testing.assert_close(spec.drafter.head_logits(h, 0), own[:, : target.vocab_size])


def test_heads_for_another_target_or_hidden_size_are_refused(tiny_models, tmp_path):
    target, other = tiny_models["llama"], tiny_models["other_tok"]
    save_heads(MedusaHeads(32, 2, 1), tmp_path / "other", "other-model", fingerprint(other))
    with pytest.raises(HeadsError, match="other-model.*not for .*llama"):
        load_target_heads(str(tmp_path / "other"), target)
    save_heads(MedusaHeads(16, 2, 1), tmp_path / "small", "a 16-wide model", "")
    with pytest.raises(HeadsError, match="hidden size 32"):
        make_drafter(medusa_config(tmp_path / "small"), RunModels(target))
    with pytest.raises(HeadsError, match="No Medusa heads folder"):
        load_target_heads(str(tmp_path / "nowhere"), target)


def test_the_command_line_runs_medusa_and_reports_bad_heads(tiny_dir, heads_dir, tmp_path, capsys):
    from specviz.cli import main

    common = ["generate", "--target", str(tiny_dir["llama"]), "--drafter", "medusa", "--no-chat", "--prompt", "the quick brown fox",
              "--max-new-tokens", "12", "--device", "cpu", "--dtype", "float32",
              "--draft-vocab", "0"]  # fmt: skip  # the tiny heads have no token counts (Medusa's measured best is 8,192)
    assert main([*common, "--medusa-heads", str(heads_dir), "--check-baseline"]) == 0
    assert "same as plain greedy" in capsys.readouterr().out
    assert main([*common, "--medusa-heads", str(tmp_path / "nowhere")]) == 2
    assert "No Medusa heads folder" in capsys.readouterr().err


# -- resume, recordings, policy --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("width", "temperature"), [(1, 0.0), (2, 0.0), (1, 1.0), (3, 1.0)])
def test_a_resumed_medusa_run_continues_exactly(tiny_models, heads_dir, width, temperature):
    target = tiny_models["llama"]
    config = medusa_config(heads_dir, tree_width=width, temperature=temperature, num_draft_tokens=4, max_new_tokens=20, seed=5)
    ids = ids_of(target, TINY_PROMPTS[2]["prompt"])
    dec, _, resumed = paused_and_resumed(config, target, ids)
    torch.testing.assert_close(resumed.hidden, dec.hidden)  # the re-prefill's row that chose the newest token is the same row
    assert_same_run(resumed, config, target, ids)


def test_checkpoint_and_restore_bring_the_hidden_state_back(tiny_models, heads_dir):
    target = tiny_models["llama"]
    dec = build_decoder(medusa_config(heads_dir, temperature=1.0, seed=2), RunModels(target), ids_of(target, TINY_PROMPTS[0]["prompt"]))
    dec.step()
    point = dec.state()
    again = dec.step()
    dec.step()
    dec.restore(point)
    assert dec.drafter.hidden is point.hand_overs.hidden
    assert dec.step().emitted == again.emitted


def test_the_heads_folder_round_trips_through_a_recording_and_is_validated():
    from specviz.recording.build import recorded_run  # noqa: F401
    from specviz.recording.load import load_recording  # noqa: F401
    from specviz.recording.schema import RecordingError  # noqa: F401

    config = RunConfig(drafter="medusa", medusa_heads="/srv/heads/smollm2")
    run = recorded_run("A", config, [])
    assert type(run).model_validate_json(run.model_dump_json()).config == config
    for bad in ("", "  ", "x" * 1_001, "a\x1b[2Jb"):
        with pytest.raises(ValueError, match="Medusa heads folder"):
            RunConfig(drafter="medusa", medusa_heads=bad)


def test_shared_mode_allows_only_the_owners_heads():
    from specviz.workshop.policy import Policy, load_policy

    asked = RunConfig(drafter="medusa", medusa_heads="/home/someone/heads")
    config, refusals, _ = Policy().enforce(asked)
    assert config.medusa_heads is None and config.drafter == "medusa" and "not on this server's list" in refusals[0]
    assert Policy().enforce(RunConfig(drafter="medusa"))[1] == []  # the shipped heads
    owner = load_policy(env={}, secrets={"allowed_medusa_heads": ["/home/someone/heads"]}, server_address="0.0.0.0")
    capped = dataclasses.replace(asked, max_draft_tokens=owner.max_draft_tokens)  # adaptive k's ceiling: quietly the owner's k cap
    assert owner.enforce(asked) == (capped, [], [])
    assert Policy.local().enforce(asked) == (asked, [], [])
