"""The room's store (specviz.workshop.store): the same semantics on the directory and on a real redis-server."""

from __future__ import annotations

import os
import threading
import time

import pytest

from specviz.workshop.store import StoreUnavailable, check_name, open_store
from specviz.workshop.store.directory import TMP_GRACE_S, DirectoryStore
from tests.store_helpers import RedisServer, needs_redis


def test_blobs_put_get_delete_and_list(room_store):
    s = room_store
    assert s.get("a.json", 100) is None
    s.put("a.json", b"one")
    time.sleep(0.01)
    s.put("b.json", b"twotwo")
    s.put("c.other", b"x")
    assert s.get("a.json", 100) == b"one"
    assert s.get("b.json", 3) == b"twot"  # at most limit + 1 bytes: the caller sees it is too large
    assert [(e.name, e.size) for e in s.entries(suffix=".json")] == [("a.json", 3), ("b.json", 6)]  # oldest first
    assert [e.name for e in s.entries(prefix="c.")] == ["c.other"]
    time.sleep(0.01)
    assert s.touch("a.json") and not s.touch("none.json")
    assert [e.name for e in s.entries(suffix=".json")] == ["b.json", "a.json"]  # touched: now the newest
    assert s.size("b.json") == 6 and s.size("none.json") == 0
    assert s.stat("b.json").size == 6 and abs(s.stat("b.json").mtime - time.time()) < 60 and s.stat("none.json") is None
    assert s.delete("a.json") and not s.delete("a.json")
    assert s.get("a.json", 100) is None
    assert [e.name for e in s.entries(suffix=".json")] == ["b.json"]


def test_names_are_never_paths(room_store):
    for bad in ("../x", "a/b", "", ".", "..", "x" * 200, "a\nb", None):
        with pytest.raises(ValueError):
            room_store.put(bad, b"")  # type: ignore[arg-type]
    assert check_name(".room.lock") == ".room.lock"


def test_counters_count_and_expire(room_store):
    assert [room_store.incr("wrong.count", 60) for _ in range(3)] == [1, 2, 3]
    assert room_store.incr("other.count", 0.2) == 1
    time.sleep(0.3)
    assert room_store.incr("other.count", 0.2) == 1  # forgotten after its ttl


def test_lists_append_read_compact(room_store):
    s = room_store
    assert s.lines("board-x.jsonl", 1000) == []
    assert s.append("board-x.jsonl", b"one") == 4
    assert s.append("board-x.jsonl", b"two") == 8
    assert s.lines("board-x.jsonl", 1000) == [b"one", b"two"]
    assert s.size("board-x.jsonl") == 8
    assert s.replace_lines("board-x.jsonl", [b"two"]) == 4
    assert s.lines("board-x.jsonl", 1000) == [b"two"] and s.size("board-x.jsonl") == 4
    with pytest.raises(ValueError):
        s.append("board-x.jsonl", b"a\nb")
    assert s.delete("board-x.jsonl") and s.lines("board-x.jsonl", 1000) == []


def test_the_stamp_changes_with_every_write(room_store):
    s = room_store
    before = s.stamp("room.presentation")
    s.put("room.presentation", b"1")
    after = s.stamp("room.presentation")
    assert after != before
    s.put("room.presentation", b"22")
    assert s.stamp("room.presentation") != after
    again = s.stamp("room.presentation")
    s.delete("room.presentation")
    assert s.stamp("room.presentation") != again


def test_wait_wakes_on_a_change_and_times_out(room_store):
    s = room_store
    since = s.stamp("room.presentation")
    t0 = time.monotonic()
    assert s.wait(["room.presentation"], since, 0.3) == since  # nothing changed: back after the timeout
    assert time.monotonic() - t0 >= 0.25
    waiting = threading.Event()
    woke: list = []

    def follower():
        waiting.set()
        woke.append(s.wait(["room.presentation"], since, 10))

    thread = threading.Thread(target=follower)
    thread.start()
    waiting.wait(5)
    s.put("room.presentation", b"new")
    thread.join(10)
    assert woke and woke[0] != since  # woken by the change (well before the 10 s timeout)


def test_the_lock_excludes_a_second_holder(room_store):
    s = room_store
    inside, release, order = threading.Event(), threading.Event(), []

    def first():
        with s.lock(".room.lock"):
            order.append("first in")
            inside.set()
            release.wait(5)
            order.append("first out")

    def second():
        inside.wait(5)
        with s.lock(".room.lock"):
            order.append("second in")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    inside.wait(5)
    time.sleep(0.1)  # the second is waiting on the lock (it cannot have got in: the first holds it until released)
    assert order == ["first in"]
    release.set()
    for t in threads:
        t.join(10)
    assert order == ["first in", "first out", "second in"]


def test_replica_liveness_expires(room_store):
    room_store.heartbeat("r1", 0.3, "10.0.0.1:8501")
    room_store.heartbeat("r2", 30, "10.0.0.2:8501")
    assert room_store.replicas() == {"r1": "10.0.0.1:8501", "r2": "10.0.0.2:8501"}
    time.sleep(0.4)
    assert room_store.replicas() == {"r2": "10.0.0.2:8501"}


def test_open_store_picks_the_backend(tmp_path):
    assert isinstance(open_store({"SPECVIZ_RUN_DIR": str(tmp_path)}), DirectoryStore)
    assert open_store({}, root=tmp_path).root == tmp_path
    with pytest.raises(ValueError, match="SPECVIZ_STORE must be a redis:// or rediss:// URL") as err:
        open_store({"SPECVIZ_STORE": "http://user:hunter2@host/"})
    assert "hunter2" not in str(err.value)


def test_the_directory_store_keeps_todays_file_names(tmp_path):
    s = DirectoryStore(tmp_path / "runs")
    s.put("abc.json", b"{}")
    s.append("board-x.jsonl", b"p")
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["abc.json", "board-x.jsonl"]
    assert (tmp_path / "runs").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "runs" / "abc.json").stat().st_mode & 0o777 == 0o600


@needs_redis
def test_an_unreachable_redis_says_so_without_its_password(redis_server):
    url = redis_server.url.replace("redis://", "redis://:hunter2@")
    redis_server.stop(save=False)
    store = open_store({"SPECVIZ_STORE": url})
    with pytest.raises(StoreUnavailable) as err:
        store.put("a.json", b"{}")
    text = str(err.value)
    assert "unreachable" in text and f"127.0.0.1:{redis_server.port}/0" in text and "hunter2" not in text
    assert isinstance(err.value, OSError)


@needs_redis
def test_a_password_in_the_url_is_used_and_never_shown(tmp_path):
    server = RedisServer(tmp_path / "redis", password="s3cret-pass")
    server.start()
    try:
        assert "s3cret-pass" in server.url
        good = open_store({"SPECVIZ_STORE": server.url})
        good.put("a.json", b"1")
        assert good.get("a.json", 10) == b"1" and "s3cret-pass" not in good.description
        wrong = open_store({"SPECVIZ_STORE": server.url.replace("s3cret-pass", "guess")})
        with pytest.raises(OSError) as err:
            wrong.get("a.json", 10)
        assert "guess" not in str(err.value) and "s3cret-pass" not in str(err.value) and "Redis at 127.0.0.1" in str(err.value)
    finally:
        server.stop(save=False)


@needs_redis
def test_a_full_redis_says_the_store_is_full(tmp_path):
    server = RedisServer(tmp_path / "redis", args=("--maxmemory", "2mb", "--maxmemory-policy", "noeviction"))
    server.start()
    try:
        store = open_store({"SPECVIZ_STORE": server.url})
        with pytest.raises(OSError, match="is full: Redis reached its maxmemory") as err:
            for i in range(100):
                store.put(f"run-{i}.json", b"x" * 100_000)
        assert not isinstance(err.value, StoreUnavailable) and err.value.errno is None
        assert store.get("run-0.json", 10) == b"x" * 11  # reads still work
    finally:
        server.stop(save=False)


def test_a_dead_writers_temporary_file_is_cleared_and_a_live_one_is_left(tmp_path):
    s = DirectoryStore(tmp_path)
    s.put("a.json", b"{}")
    stale, fresh = tmp_path / ".tmp-dead.json", tmp_path / ".tmp-busy.json"
    stale.write_bytes(b"x" * 100)
    fresh.write_bytes(b"y")
    old = time.time() - 2 * TMP_GRACE_S
    os.utime(stale, (old, old))
    assert [e.name for e in s.entries(suffix=".json")] == ["a.json"]  # never listed as a blob
    assert not stale.exists() and fresh.exists()  # another replica's write in progress stays


def test_a_watch_wakes_on_each_change_and_is_closed(room_store):
    s = room_store
    watch = s.watch(["room.presentation", "room.race"])
    try:
        stamp = watch.wait(s.stamp("room.presentation", "room.race"), 0.05)  # nothing yet: the same stamp back
        assert stamp == s.stamp("room.presentation", "room.race")
        for name in ("room.presentation", "room.race"):
            waiting, woke = threading.Event(), []

            def follower(since=stamp, waiting=waiting, woke=woke):
                waiting.set()
                woke.append(watch.wait(since, 10))

            thread = threading.Thread(target=follower)
            thread.start()
            waiting.wait(5)
            s.put(name, b"new")
            thread.join(10)
            assert woke and woke[0] != stamp
            stamp = woke[0]
    finally:
        watch.close()


@needs_redis
def test_a_watch_that_lost_redis_says_so_and_subscribes_again(redis_server):
    s = open_store({"SPECVIZ_STORE": redis_server.url})
    watch = s.watch(["room.presentation"])
    since = watch.wait(None, 0.05)
    redis_server.stop()
    with pytest.raises(StoreUnavailable):
        watch.wait(since, 0.2)
    redis_server.start()
    s.put("room.presentation", b"back")
    assert watch.wait(since, 5) != since
    watch.close()
