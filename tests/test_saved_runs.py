"""The run directory: strict tokens, atomic private files, eviction when full, clear errors for unknown, expired,
damaged and unwritable runs. The restore itself is proven in tests/test_resume.py (engine) and the room test."""

from __future__ import annotations

import os
import stat
import time

import pytest

from specviz.config import RunConfig
from specviz.core.resume import capture
from specviz.recording import build_recording, recorded_run
from specviz.runs import build_decoder
from specviz.workshop.saved_runs import RunStore, SavedRun, SavedRunError, check_token, default_run_dir, new_token
from tests.test_models import prompt_ids

ENV = dict(model="tiny", dtype="float32", device="cpu", device_name="cpu", torch="2")


@pytest.fixture(scope="module")
def saved(tiny_models) -> SavedRun:
    target = tiny_models["llama"]
    ids = prompt_ids(target)
    config = RunConfig(target="llama", temperature=1.0, max_new_tokens=12, ngram_threshold=0.0)
    dec = build_decoder(config, target, ids)
    dec.step()
    dec.step()
    recording = build_recording(
        prompt="the prompt", prompt_ids=ids, runs=[recorded_run("n-gram model", config, dec.records)], baseline=None,
        token_text=lambda i: f"t{i}", environment=ENV | {"vocab_size": target.vocab_size},
    )  # fmt: skip
    return SavedRun(recording, (capture(dec),))


def test_tokens_are_128_random_bits_in_a_strict_shape():
    tokens = {new_token() for _ in range(50)}
    assert len(tokens) == 50 and all(check_token(t) == t and len(t) == 22 for t in tokens)


@pytest.mark.parametrize(
    "bad", ["", "short", "A" * 21, "A" * 23, "../../../../etc/passwd", "AAAAAAAAAA/AAAAAAAAAAA", "AAAAAAAAAA.AAAAAAAAAAA",
            "AAAAAAAAAAAAAAAAAAAAA\u00e9", "AAAAAAAAAAAAAAAAAAAAA\n", " AAAAAAAAAAAAAAAAAAAAA", None, 12, ["A" * 22]],
)  # fmt: skip
def test_malformed_tokens_are_refused_before_the_disk(tmp_path, bad):
    with pytest.raises(SavedRunError, match="malformed"):
        check_token(bad)
    with pytest.raises(SavedRunError, match="malformed"):
        RunStore(tmp_path / "runs").load(bad)
    assert not (tmp_path / "runs").exists()


def test_a_saved_run_round_trips_in_private_files(tmp_path, saved):
    (tmp_path / "runs").mkdir(mode=0o755)
    os.chmod(tmp_path / "runs", 0o755)
    store, token = RunStore(tmp_path / "runs"), new_token()
    store.save(token, saved)
    back = store.load(token)
    assert back.recording == saved.recording and back.states == saved.states and back.num_rounds == 2
    assert stat.S_IMODE((tmp_path / "runs").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "runs" / f"{token}.json").stat().st_mode) == 0o600
    assert [p.name for p in (tmp_path / "runs").iterdir()] == [f"{token}.json"]  # no temporary file left


def test_unknown_expired_and_damaged_runs_say_so(tmp_path, saved):
    store = RunStore(tmp_path, max_age_s=3600)
    with pytest.raises(SavedRunError, match="No saved run"):
        store.load(new_token())
    token = new_token()
    store.save(token, saved)
    old = time.time() - 7200
    os.utime(tmp_path / f"{token}.json", (old, old))
    with pytest.raises(SavedRunError, match="expired"):
        store.load(token)
    for junk in (b"not json", b'{"format": "specviz-saved-run", "version": 1, "states": [], "recording": {}}', b"[1, 2]"):
        token = new_token()
        (tmp_path / f"{token}.json").write_bytes(junk)
        with pytest.raises(SavedRunError):
            store.load(token)


def test_a_full_directory_evicts_the_oldest_runs_first(tmp_path, saved):
    size = len(saved.to_json().encode())
    store = RunStore(tmp_path, max_bytes=int(size * 3.5))
    tokens = []
    for i in range(6):
        tokens.append(new_token())
        store.save(tokens[-1], saved)
        stamp = time.time() - 100 + i  # distinct ages, oldest first
        os.utime(tmp_path / f"{tokens[-1]}.json", (stamp, stamp))
    kept = sorted(p.stem for p in tmp_path.glob("*.json"))
    assert kept == sorted(tokens[-3:])  # the three newest fit; the newest written is always kept
    with pytest.raises(SavedRunError, match="No saved run"):
        store.load(tokens[0])


def test_an_unwritable_run_directory_is_an_os_error(tmp_path, saved):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(OSError):
        RunStore(blocker / "runs").save(new_token(), saved)


def test_the_run_directory_follows_the_cache_directory_and_settings_are_checked(tmp_path):
    assert default_run_dir({"SPECVIZ_RUN_DIR": str(tmp_path)}) == tmp_path
    assert default_run_dir({"SPECVIZ_CACHE_DIR": str(tmp_path)}) == tmp_path / "runs"
    assert RunStore.from_env({"SPECVIZ_RUN_DIR": str(tmp_path), "SPECVIZ_RUN_DIR_MAX_MB": "2"}).max_bytes == 2 * 2**20
    for bad in ("lots", "0", "-1"):
        with pytest.raises(ValueError, match="SPECVIZ_RUN_DIR_MAX_MB"):
            RunStore.from_env({"SPECVIZ_RUN_DIR_MAX_MB": bad})
