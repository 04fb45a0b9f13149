"""The run directory: strict tokens, atomic private files, eviction when full (least recently used first, never the
presented run or a live session's), a refused save when only protected runs are left, clear errors for unknown,
expired, damaged and unwritable runs and a full disk. The restore itself is proven in tests/test_resume.py (engine) and the room test."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from specviz.config import RunConfig
from specviz.recording.build import build_recording, recorded_run
from specviz.runs import RunModels, build_decoder
from specviz.workshop import saved_runs
from specviz.workshop.presentation import PresentationStore
from specviz.workshop.saved_runs import (
    LIVE_WINDOW_S,
    RunDirFull,
    RunStore,
    SavedRun,
    SavedRunError,
    check_token,
    default_run_dir,
    disk_full,
    new_token,
    write_problem,
)
from specviz.workshop.store import StoreUnavailable, open_store
from tests.store_helpers import backdate, needs_redis, present, stems
from tests.test_models import prompt_ids

ENV = dict(model="tiny", dtype="float32", device="cpu", device_name="cpu", torch="2")


@pytest.fixture(scope="module")
def saved(tiny_models) -> SavedRun:
    target = tiny_models["llama"]
    ids = prompt_ids(target)
    config = RunConfig(target="llama", temperature=1.0, max_new_tokens=12, ngram_threshold=0.0)
    dec = build_decoder(config, RunModels(target), ids)
    dec.step()
    dec.step()
    recording = build_recording(
        prompt="the prompt", prompt_ids=ids, runs=[recorded_run("n-gram model", config, dec.records)], baseline=None,
        token_text=lambda i: f"t{i}", environment=ENV | {"vocab_size": target.vocab_size},
    )  # fmt: skip
    return SavedRun(recording, (dec.state(),))


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


def test_unknown_expired_and_damaged_runs_say_so(room_store, saved):
    store = RunStore(room_store, max_age_s=3600)
    with pytest.raises(SavedRunError, match="No saved run"):
        store.load(new_token())
    token = new_token()
    store.save(token, saved)
    backdate(room_store, f"{token}.json", 7200)
    with pytest.raises(SavedRunError, match="expired"):
        store.load(token)
    for junk in (b"not json", b'{"format": "specviz-saved-run", "version": 1, "states": [], "recording": {}}', b"[1, 2]"):
        token = new_token()
        room_store.put(f"{token}.json", junk)
        with pytest.raises(SavedRunError):
            store.load(token)


def test_a_full_directory_evicts_the_least_recently_used_runs_first(room_store, saved):
    size = len(saved.to_json().encode())
    store = RunStore(room_store, max_bytes=int(size * 3.5))
    tokens = []
    for i in range(6):
        tokens.append(new_token())
        store.save(tokens[-1], saved)
        backdate(room_store, f"{tokens[-1]}.json", LIVE_WINDOW_S + 100 - i)  # distinct ages, oldest first, none live
    assert stems(room_store) == set(tokens[-3:])  # the three newest fit; the newest written is always kept
    with pytest.raises(SavedRunError, match="No saved run"):
        store.load(tokens[0])


def test_eviction_spares_the_presented_run_and_the_runs_live_sessions_hold(room_store, saved):
    size = len(saved.to_json().encode())
    store = RunStore(room_store, max_bytes=int(size * 3.5))
    presented, held, other, newer = (new_token() for _ in range(4))
    for i, token in enumerate((presented, held, other)):
        store.save(token, saved)
        backdate(room_store, f"{token}.json", LIVE_WINDOW_S + 1000 - i)  # the presented and the held run are the oldest
    present(room_store, presented)
    assert store.presented() == presented
    assert store.touch([held, "not-a-token", new_token()]) == 1  # a live session's sweeper: only runs that exist
    store.save(newer, saved)  # one has to go: the least recently used that is not protected
    assert stems(room_store) == {presented, held, newer}
    assert store.load(presented).num_rounds == 2
    assert not store.remove(presented) and store.remove(newer)  # a session's quota never removes the presented run


def test_the_presentation_file_protects_the_presented_run_in_the_directory(tmp_path, saved):
    store = RunStore(tmp_path, max_bytes=int(len(saved.to_json().encode()) * 1.5))
    presented = new_token()
    store.save(presented, saved)
    backdate(store.store, f"{presented}.json", LIVE_WINDOW_S * 10)
    PresentationStore(tmp_path).start(presented, 2)  # the presentation module's own file
    with pytest.raises(RunDirFull):
        store.save(new_token(), saved)


def test_a_directory_full_of_protected_runs_refuses_the_new_save_and_evicts_nothing(room_store, saved):
    size = len(saved.to_json().encode())
    store = RunStore(room_store, max_bytes=int(size * 2.5))
    presented, live = new_token(), new_token()
    store.save(presented, saved)
    backdate(room_store, f"{presented}.json", LIVE_WINDOW_S * 10)
    present(room_store, presented)
    store.save(live, saved)  # written just now: a live session's
    refused = new_token()
    with pytest.raises(RunDirFull) as caught:
        store.save(refused, saved)
    assert isinstance(caught.value, OSError) and "in use" in write_problem(caught.value)
    assert stems(room_store) == {presented, live}  # nothing protected went, nothing new came
    store.save(live, saved)  # a run's own rewrite needs no room beyond its old size
    backdate(room_store, f"{live}.json", LIVE_WINDOW_S + 1)  # its session went away: the next save may evict it
    store.save(refused, saved)
    assert stems(room_store) == {presented, refused}


def test_a_full_disk_keeps_the_previous_round_and_says_so_without_a_path(tmp_path, saved, monkeypatch):
    store, token = RunStore(tmp_path), new_token()
    store.save(token, saved)
    before = (tmp_path / f"{token}.json").read_bytes()

    def no_space(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(saved_runs.os, "replace", no_space)
    with pytest.raises(OSError) as caught:
        store.save(token, saved)
    assert caught.value.errno == errno.ENOSPC and disk_full(caught.value)
    message = write_problem(caught.value)
    assert "disk is full" in message and str(tmp_path) not in message
    assert (tmp_path / f"{token}.json").read_bytes() == before and [p.name for p in tmp_path.iterdir()] == [f"{token}.json"]
    assert str(tmp_path) not in write_problem(OSError(errno.EACCES, "Permission denied", str(tmp_path / "x")))


def test_a_read_error_is_transient_and_a_missing_run_is_not(room_store, saved, monkeypatch):
    store, token = RunStore(room_store), new_token()
    with pytest.raises(SavedRunError) as missing:
        store.load(token)
    assert not missing.value.transient
    store.save(token, saved)

    def unreadable(name, limit):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(room_store, "get", unreadable)
    with pytest.raises(SavedRunError) as failed:
        store.load(token)
    assert failed.value.transient and "could not be read" in str(failed.value)


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


@needs_redis
def test_saving_while_redis_is_away_says_so_and_works_again_when_it_returns(redis_server, saved):
    store = RunStore(open_store({"SPECVIZ_STORE": redis_server.url}))
    kept, later = new_token(), new_token()
    store.save(kept, saved)
    redis_server.stop()  # Redis goes away mid-workshop
    with pytest.raises(StoreUnavailable) as caught:
        store.save(later, saved)
    message = write_problem(caught.value)
    assert "the room's store" in message and "unreachable" in message and "tries again" in message
    with pytest.raises(SavedRunError) as failed:
        store.load(kept)
    assert failed.value.transient  # the page tries again later: the run is not gone
    redis_server.start()  # back, with what it held
    store.save(later, saved)
    assert store.load(kept).num_rounds == 2 and store.load(later).num_rounds == 2  # nothing lost
