"""The cost profile on a tiny model: its shape and keys, the JSON round trip and the CLI (no timing assertions)."""

from __future__ import annotations

import json

import pytest

from specviz import cli
from specviz.core.profile import SCHEMA, CostProfile, load_profile
from specviz.core.theory import VerifyCurve
from specviz.experiments.cost_profile import measure_profile, shipped_profiles

pytestmark = pytest.mark.usefixtures("one_thread")


def test_measure_profile_shape(tiny_models):
    calls = []
    profile = measure_profile(tiny_models["llama"], max_tokens=5, context_length=16, repeats=2, number=1, on_progress=lambda *a: calls.append(a))
    assert len(profile.pass_ms) == 5 and all(t > 0 for t in profile.pass_ms)
    curve = profile.curve
    assert isinstance(curve, VerifyCurve) and curve.k_max == 4 and curve.costs[0] == 1.0
    assert set(profile.draft_cost) == {"ngram", "lookup", "early-exit", "recycle"}  # no heads for the tiny model: skipped
    assert all(c >= 0 for c in profile.draft_cost.values())
    assert profile.context_length == 16 and profile.threads >= 1 and profile.torch_version
    assert calls[-1][0] == calls[-1][1] == 2 * (5 + 4)  # every pass size and drafter, twice
    obj = profile.to_json()
    assert obj["schema"] == SCHEMA
    assert list(obj["verify_cost"]) == ["0", "1", "2", "3", "4"]
    assert CostProfile.from_json(json.loads(json.dumps(obj))) == profile


def test_cpu_clock_and_bad_arguments(tiny_models):
    target = tiny_models["llama"]
    profile = measure_profile(target, max_tokens=2, context_length=8, repeats=1, number=1, clock="cpu", drafters=("lookup",))
    assert profile.clock == "cpu" and set(profile.draft_cost) == {"lookup"}
    for kwargs in ({"max_tokens": 1}, {"clock": "gpu"}, {"drafters": ("model",)}, {"repeats": 0}):
        with pytest.raises(ValueError):
            measure_profile(target, **kwargs)


@pytest.mark.parametrize(
    "obj",
    [
        [],
        {"schema": "nope"},
        {"schema": SCHEMA, "target": "x"},
        {"schema": SCHEMA, "target": "x", "device": "cpu", "device_name": "c", "dtype": "float32", "torch_version": "2",
         "threads": 1, "clock": "wall", "context_length": 8, "repeats": 1, "pass_ms": [1.0, -1.0]},
    ],
)
def test_bad_profiles_raise_value_error(obj, tmp_path):
    with pytest.raises(ValueError):
        CostProfile.from_json(obj)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(obj))
    with pytest.raises(ValueError):
        load_profile(path)


def test_shipped_profiles_load():
    profiles = shipped_profiles()
    assert "profile_cpu" in profiles
    cpu = profiles["profile_cpu"]
    assert cpu.curve.k_max >= 16 and cpu.device == "cpu"
    assert {"ngram", "lookup", "early-exit"} <= set(cpu.draft_cost)


def test_cli_profile_writes_json(capsys, tiny_dir, tmp_path):
    out = tmp_path / "profile.json"
    code = cli.main(["profile", "--target", str(tiny_dir["llama"]), "--max-tokens", "3", "--context", "8", "--repeats", "1", "--threads", "1", "--out", str(out)])
    stdout = capsys.readouterr().out
    assert code == 0
    assert "verify cost" in stdout and "draft cost c, ngram" in stdout
    assert load_profile(out).curve.k_max == 2
    assert cli.main(["profile", "--target", str(tiny_dir["llama"]), "--threads", "0"]) == 2


def test_batch_passes_schema_and_round_trip(tiny_models):
    profile = measure_profile(tiny_models["llama"], max_tokens=3, context_length=8, repeats=1, number=1, drafters=(), batch_sizes=(2, 1))
    assert profile.batch_sizes == (1, 2)
    assert all(len(profile.batch_pass(b)) == 3 and all(t > 0 for t in profile.batch_pass(b)) for b in (1, 2))
    obj = json.loads(json.dumps(profile.to_json()))
    assert obj["batch_pass_ms"].keys() == {"1", "2"} and all(len(v) == 3 for v in obj["batch_pass_ms"].values())
    assert CostProfile.from_json(obj) == profile
    with pytest.raises(ValueError):
        measure_profile(tiny_models["llama"], batch_sizes=(0,))


def test_a_profile_without_batch_passes_still_loads():
    obj = {"schema": SCHEMA, "target": "x", "device": "cpu", "device_name": "c", "dtype": "float32", "torch_version": "2",
           "threads": 1, "clock": "wall", "context_length": 8, "repeats": 1, "pass_ms": [1.0, 1.5]}
    assert CostProfile.from_json(obj).batch_sizes == ()
    for bad in ({"x": [1.0]}, {"2": []}, {"2": [1.0, -1.0]}, {"0": [1.0]}):
        with pytest.raises(ValueError):
            CostProfile.from_json(obj | {"batch_pass_ms": bad})


def test_cli_profile_batch(capsys, tiny_dir, tmp_path):
    out = tmp_path / "profile.json"
    code = cli.main(["profile", "--target", str(tiny_dir["llama"]), "--max-tokens", "2", "--context", "8", "--repeats", "1",
                     "--threads", "1", "--batch", "1,4", "--out", str(out)])
    assert code == 0 and "ms per row-token" in capsys.readouterr().out
    assert load_profile(out).batch_sizes == (1, 4)
    with pytest.raises(SystemExit):
        cli.main(["profile", "--batch", "1,x"])


def test_profile_times_medusa_heads(tiny_models, tiny_heads):
    """Medusa's c: one call of its K heads and one LM-head read over their rows, per drafted token, from the context's
    hidden state (without it the heads would draft nothing and cost nothing); a target without heads skips it."""
    target = tiny_models["llama"]
    profile = measure_profile(target, max_tokens=3, context_length=16, repeats=1, number=1, drafters=("medusa",), heads_folder=str(tiny_heads))
    assert set(profile.draft_cost) == {"medusa"} and profile.draft_ms_per_token["medusa"] > 0
    skipped = measure_profile(target, max_tokens=3, context_length=16, repeats=1, number=1, drafters=("lookup", "medusa"))
    assert set(skipped.draft_cost) == {"lookup"}  # the shipped heads belong to the embedded target, not this one


def test_heads_are_timed_over_the_full_and_a_draft_vocabulary(tiny_models, tiny_heads, tmp_path):
    """Medusa heads with token counts: timed twice, "medusa" and "medusa@16" (the same heads over 16 tokens)."""
    import shutil

    import torch

    from specviz.models.vocab import save_token_counts

    folder = tmp_path / "heads"
    shutil.copytree(tiny_heads, folder)
    target = tiny_models["llama"]
    save_token_counts(folder, torch.arange(target.vocab_size))
    profile = measure_profile(target, max_tokens=2, context_length=8, repeats=1, number=1, drafters=("medusa",), heads_folder=str(folder),
                              draft_vocabs=(16,))  # fmt: skip
    assert set(profile.draft_cost) == {"medusa", "medusa@16"}
