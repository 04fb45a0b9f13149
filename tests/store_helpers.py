"""A real redis-server for the tests (Debian's, started on a free port in a temporary folder, as the room tests start
HAProxy) and the room's store on both backends.

    def test_x(room_store):          # runs twice: the directory and Redis
        room_store.put("a.json", b"{}")

    def test_y(redis_server):        # a server of the test's own, to stop and start again mid-test
        redis_server.stop(); ...; redis_server.start()

conftest.py imports the fixtures; scripts/test.sh installs redis-server (apt-get install redis-server).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REDIS = next((p for p in ("/usr/bin/redis-server", shutil.which("redis-server") or "") if p and os.path.exists(p)), None)
needs_redis = pytest.mark.skipif(REDIS is None, reason="redis-server is not installed (scripts/test.sh installs it: apt-get install redis-server)")
BACKENDS = ["directory", pytest.param("redis", marks=needs_redis)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """One redis-server on 127.0.0.1:<port>, its files in folder. It saves only when stopped (SHUTDOWN SAVE), so a
    test that stops it and starts it again finds its data, as a Redis with persistence would."""

    def __init__(self, folder: Path, port: int | None = None, password: str = "", args: tuple[str, ...] = ()) -> None:
        self.folder = folder
        self.port = port or free_port()
        self.password = password
        self.args = args  # more redis-server options ("--maxmemory", "1mb")
        self.url = f"redis://{f':{password}@' if password else ''}127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def _send(self, command: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
            if self.password:
                s.sendall(f"AUTH {self.password}\r\n".encode())
                s.recv(64)
            s.sendall(command)
            return s.recv(64)

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        args = [REDIS, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder), "--save", "", "--appendonly", "no"]
        args += ["--dbfilename", "dump.rdb", "--daemonize", "no", "--loglevel", "warning", *self.args]
        if self.password:
            args += ["--requirepass", self.password]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if self._send(b"PING\r\n").startswith(b"+PONG"):
                    return
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self, save: bool = True) -> None:
        """Stop the server; save: it writes its data first (SHUTDOWN SAVE), so start() brings it back."""
        if self.process is None:
            return
        if save:
            try:
                self._send(b"SHUTDOWN SAVE\r\n")
            except OSError:
                pass
        else:
            self.process.terminate()  # no save points: it exits without writing
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def flush(self) -> None:
        self._send(b"FLUSHALL\r\n")


@pytest.fixture(scope="session")
def shared_redis(tmp_path_factory) -> Iterator[RedisServer]:
    """One redis-server for the session's tests (flushed before each test that takes room_store)."""
    if REDIS is None:
        pytest.skip("redis-server is not installed (scripts/test.sh installs it: apt-get install redis-server)")
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop(save=False)


@pytest.fixture
def redis_server(tmp_path) -> Iterator[RedisServer]:
    """A redis-server of this test's own (stop and start it at will)."""
    if REDIS is None:
        pytest.skip("redis-server is not installed (scripts/test.sh installs it: apt-get install redis-server)")
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.stop(save=False)


@pytest.fixture(params=BACKENDS)
def store_env(request, tmp_path, monkeypatch) -> dict[str, str]:
    """The environment that opens the room's store on each backend: SPECVIZ_RUN_DIR always (a temporary folder),
    SPECVIZ_STORE for Redis (an empty database). Also set in os.environ for the test (monkeypatch)."""
    env = {"SPECVIZ_RUN_DIR": str(tmp_path / "runs")}
    if request.param == "redis":
        server = request.getfixturevalue("shared_redis")
        server.flush()
        env["SPECVIZ_STORE"] = server.url
    else:
        monkeypatch.delenv("SPECVIZ_STORE", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.fixture
def room_store(store_env):
    """The room's store, on each backend in turn."""
    from specviz.workshop.store import open_store

    return open_store(store_env)


def backdate(store, name: str, seconds: float) -> None:
    """Make a blob's mtime `seconds` ago, on either backend (a test's way to age a saved run)."""
    from specviz.workshop.store.directory import DirectoryStore

    stamp = time.time() - seconds
    if isinstance(store, DirectoryStore):
        os.utime(store.root / name, (stamp, stamp))
    else:
        assert store.client.zadd(f"{store.prefix}index", {name: stamp}, xx=True, ch=True) == 1


def stems(store, suffix: str = ".json") -> set[str]:
    """The names in the store ending in suffix, without it (saved runs' tokens)."""
    return {e.name[: -len(suffix)] for e in store.entries(suffix=suffix)}


def present(store, token: str) -> None:
    """The room presents this run (a presentation written into the store as PresentationStore writes it)."""
    from specviz.workshop.presentation import FILE_NAME, Presentation, new_id

    now = time.time()
    store.put(FILE_NAME, Presentation(id=new_id(), run=token, started_at=now, holder=new_id(), heartbeat=now).to_json().encode())
