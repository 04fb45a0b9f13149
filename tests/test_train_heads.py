"""python -m specviz train-heads: self-distilled Medusa heads on a tiny random Llama, in seconds.

The loss falls, held-out accuracy is reported, a resumed run ends with the same weights as an uninterrupted
one, the folder loads with load_heads and carries the tiny model's fingerprint, and the CLI runs end to end."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest
import torch

from specviz import cli
from specviz.experiments.training import medusa, own_text, save
from specviz.experiments.training.config import DATA_VERSION, TINY, TrainConfig
from specviz.models.medusa import HeadsError, load_heads, target_fingerprint

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny_data(tiny_models, tmp_path_factory):
    cache = tmp_path_factory.mktemp("heads_cache")
    return medusa.load_or_make_data(tiny_models["llama"], TINY, cache, progress=False), cache


def test_labels_are_the_targets_argmax_i_positions_later():
    labels = medusa.head_labels(torch.tensor([5, 6, 7, 8]), num_heads=3)
    assert labels.tolist() == [[6, 7, 8], [7, 8, -100], [8, -100, -100], [-100, -100, -100]]


def test_training_prompts_hold_out_the_benchmark_prompts():
    from specviz.experiments.prompts import DEFAULT_PROMPTS

    bench = [p["prompt"] for p in json.loads(DEFAULT_PROMPTS.read_text(encoding="utf-8"))]
    prompts = own_text.training_prompts(0)
    assert len(prompts) == len(set(prompts)) > 400
    assert not set(prompts) & set(bench)
    assert own_text.training_prompts(0) == prompts and own_text.training_prompts(1) != prompts


# The shipped heads' record, and what their data was made from: the prompt list (sha256 of its JSON, seed 0) and the
# keys of the cached data under ~/.cache/specviz/medusa (medusa-data-KEY.pt, medusa-parts-KEY/).
SHIPPED_CONFIG = Path(__file__).resolve().parents[1] / "assets" / "medusa_smollm2_135m" / "config.json"
PROMPTS_SHA256 = "acb9e9c59ee5221b13caf5ea9c8619c2dfe7e4de7e7f7722c9aef29c82bd4630"
DATA_KEY, PARTS_KEY = "589e036d58386501", "8bf8030fa6001161"


def _sha256(prompts: list[str]) -> str:
    return hashlib.sha256(json.dumps(prompts).encode()).hexdigest()


def test_the_cached_datas_key_and_prompt_list_are_the_shipped_heads():
    """The cache key names the recipe (DATA_VERSION and the settings), not the prompts: a change to
    assets/training_prompts.json fails here until DATA_VERSION is bumped with it (and these constants follow)."""
    shipped = json.loads(SHIPPED_CONFIG.read_text(encoding="utf-8"))
    config, fingerprint = TrainConfig(**shipped["training"]["config"]), shipped["target_fingerprint"]
    assert DATA_VERSION == 2
    assert config.data_key(fingerprint) == DATA_KEY and config.data_key(fingerprint, with_budget=False) == PARTS_KEY
    prompts = own_text.training_prompts(config.seed)
    assert len(prompts) == 1328 and shipped["training"]["prompts"] <= len(prompts)
    assert _sha256(prompts) == PROMPTS_SHA256


def test_an_edited_prompt_file_is_another_list_and_a_broken_one_is_refused(tmp_path):
    """The known-bad control of the pin above: one word changed gives another hash; a file of the wrong shape, a
    ValueError naming it."""
    doc = json.loads(own_text.TRAINING_PROMPTS.read_text(encoding="utf-8"))
    doc["groups"][0]["subjects"][0] = "the water cycles"
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc), encoding="utf-8")
    assert _sha256(own_text.training_prompts(0, edited)) != PROMPTS_SHA256
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"groups": [{"templates": ["Explain {topic}."], "subjects": ["tides"]}]}), encoding="utf-8")
    with pytest.raises(ValueError, match="broken.json"):
        own_text.training_prompts(0, broken)


def test_data_is_cached_and_split(tiny_models, tiny_data):
    data, cache = tiny_data
    assert data.train_hidden.dtype == torch.float16 and data.train_labels.shape[1] == TINY.num_heads
    assert data.heldout_hidden.shape[0] > 0 and data.train_hidden.shape[0] >= 4 * data.heldout_hidden.shape[0]
    assert len(list(cache.glob("medusa-data-*.pt"))) == 1
    again = medusa.load_or_make_data(tiny_models["llama"], TINY, cache, progress=False)  # from the cache
    assert torch.equal(again.train_hidden, data.train_hidden) and torch.equal(again.heldout_labels, data.heldout_labels)
    parts = sorted(next(cache.glob("medusa-parts-*")).glob("batch-*.pt"))
    assert len(parts) >= 2
    next(cache.glob("medusa-data-*.pt")).unlink()
    parts[-1].unlink()  # as if generation had been interrupted in its last batch: the others are reused
    resumed = medusa.load_or_make_data(tiny_models["llama"], TINY, cache, progress=False)
    assert torch.equal(resumed.train_hidden, data.train_hidden) and torch.equal(resumed.train_labels, data.train_labels)


def test_loss_falls_and_accuracy_is_reported(tiny_models, tiny_data, tmp_path):
    data, _ = tiny_data
    result = medusa.train_heads(tiny_models["llama"], data, TINY, tmp_path / "ckpt.pt", progress=False)
    first = sum(c["loss"] for c in result.curve[:5]) / 5
    last = sum(c["loss"] for c in result.curve[-5:]) / 5
    assert last < 0.9 * first
    final = result.evals[-1]
    assert final.step == TINY.steps and len(final.top1) == len(final.top5) == TINY.num_heads
    assert all(0 <= a1 <= a5 <= 1 for a1, a5 in zip(final.top1, final.top5))
    assert final.top1[0] > result.evals[0].top1[0]  # better than the untrained heads (the LM head itself)


def test_resume_gives_the_same_weights_as_an_uninterrupted_run(tiny_models, tiny_data, tmp_path):
    data, _ = tiny_data
    lm, config = tiny_models["llama"], dataclasses.replace(TINY, steps=12, checkpoint_every=5, eval_every=5)
    whole = medusa.train_heads(lm, data, config, tmp_path / "a.pt", progress=False)
    medusa.train_heads(lm, data, config, tmp_path / "b.pt", progress=False, stop_after=7)  # checkpoints at 5 and 7
    resumed = medusa.train_heads(lm, data, config, tmp_path / "b.pt", resume=True, progress=False)
    for a, b in zip(whole.heads.state_dict().values(), resumed.heads.state_dict().values()):
        assert torch.equal(a, b)
    assert [c["loss"] for c in whole.curve] == [c["loss"] for c in resumed.curve]
    with pytest.raises(ValueError, match="settings differ"):
        medusa.train_heads(lm, data, dataclasses.replace(config, lr=0.01), tmp_path / "b.pt", resume=True, progress=False)
    with pytest.raises(ValueError, match="no checkpoint"):
        medusa.train_heads(lm, data, config, tmp_path / "none.pt", resume=True, progress=False)


def test_shipped_folder_loads_with_the_tiny_models_fingerprint(tiny_models, tiny_data, tmp_path):
    data, _ = tiny_data
    lm = tiny_models["llama"]
    config = dataclasses.replace(TINY, steps=5)
    result = medusa.train_heads(lm, data, config, tmp_path / "c.pt", progress=False)
    medusa.ship(result, config, tmp_path / "heads", "tiny-llama")
    fingerprint = target_fingerprint(lm.model.get_input_embeddings().weight)
    saved = json.loads((tmp_path / "heads" / "config.json").read_text(encoding="utf-8"))
    assert saved["target_fingerprint"] == fingerprint and saved["medusa_num_heads"] == config.num_heads
    assert len(saved["heldout_top1"]) == config.num_heads and saved["training"]["config"]["steps"] == 5
    heads = load_heads(tmp_path / "heads", lm.model.config.hidden_size, fingerprint)
    for a, b in zip(heads.state_dict().values(), result.heads.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-3)  # float16 on disk
    other = tiny_models["llama_draft"]
    with pytest.raises(HeadsError, match="tiny-llama"):
        load_heads(tmp_path / "heads", 32, target_fingerprint(other.model.get_input_embeddings().weight))
    assert (tmp_path / "heads" / save.CURVE_FILE).is_file()


def test_cli_trains_end_to_end_on_a_tiny_model(capsys, tiny_dir, tmp_path):
    out = tmp_path / "heads"
    args = ["train-heads", "--target", str(tiny_dir["llama"]), "--tiny", "--steps", "6", "--out", str(out),
            "--cache-dir", str(tmp_path / "cache"), "--no-progress"]  # fmt: skip
    assert cli.main(args) == 0
    printed = capsys.readouterr().out
    assert "held-out top-1" in printed and "wrote" in printed
    saved = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert saved["training"]["command"].startswith("python -m specviz train-heads --tiny")
    assert cli.main(args + ["--resume"]) == 0  # the finished run's checkpoint: nothing left to do, same heads
    assert cli.main(["train-heads", "--target", str(tiny_dir["llama"]), "--tiny", "--steps", "0"]) == 2


def test_config_refuses_bad_values():
    with pytest.raises(ValueError, match="steps"):
        TrainConfig(steps=0)
    with pytest.raises(ValueError, match="sampled_fraction"):
        TrainConfig(sampled_fraction=2)


def test_shipped_heads_belong_to_the_embedded_target(smollm):
    """assets/medusa_smollm2_135m: Medusa's layout, under 20 MB, the embedded target's fingerprint (load_heads
    refuses heads for another target), held-out accuracy recorded that falls from head 1 to head 4, and the token input."""
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "assets" / "medusa_smollm2_135m"
    assert (folder / "medusa_lm_head.safetensors").stat().st_size < 20_000_000
    fingerprint = target_fingerprint(smollm.model.get_input_embeddings().weight)
    heads = load_heads(folder, smollm.model.config.hidden_size, fingerprint, "SmolLM2-135M-Instruct")
    saved = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert saved["base_model_name_or_path"] == "HuggingFaceTB/SmolLM2-135M-Instruct" and heads.num_heads == 4
    assert saved["heldout_top1"][0] > saved["heldout_top1"][3] > 0.05
    assert heads.reads_token and saved["specviz_token_input"] is True  # the shipped heads read the newest token too


def test_the_data_keeps_the_token_after_each_position(tiny_data):
    """x_{t+1}, the token the target committed after position t: at a greedy position it is the target's argmax,
    which is also head 1's label one position earlier (labels[t, 0] == argmax[t + 1])."""
    data, _ = tiny_data
    assert data.train_tokens.shape == data.train_hidden.shape[:1] and data.heldout_tokens.shape == data.heldout_hidden.shape[:1]
    assert data.train_tokens.dtype == torch.long


def test_heads_read_the_token_by_default_and_plain_medusa_on_request(tiny_models, tiny_data, tmp_path):
    """The default trains heads with a token input over the training vocabulary; --plain-medusa's config trains
    Medusa's own heads; the full-vocabulary softmax trains too. Evaluations always score the full vocabulary."""
    data, _ = tiny_data
    lm = tiny_models["llama"]
    config = dataclasses.replace(TINY, steps=4)
    token = medusa.train_heads(lm, data, config, tmp_path / "t.pt", progress=False)
    assert token.heads.reads_token and 0 < token.facts["train_vocab"] <= lm.vocab_size
    plain = medusa.train_heads(lm, data, dataclasses.replace(config, token_input=False, train_vocab="full"), tmp_path / "p.pt", progress=False)
    assert not plain.heads.reads_token and plain.facts["train_vocab"] is None
    frozen = medusa.frozen_parts(lm, config, data)
    ids = frozen.vocab[[0, -1]]
    assert frozen.train_labels(torch.tensor([[int(ids[0]), -100, int(ids[1])]])).tolist() == [[0, -100, len(frozen.vocab) - 1]]
    medusa.ship(token, config, tmp_path / "heads", "tiny-llama")
    saved = json.loads((tmp_path / "heads" / "config.json").read_text(encoding="utf-8"))
    assert saved["specviz_token_input"] is True and saved["training"]["config"]["token_input"] is True
