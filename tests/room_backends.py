"""The room's store in tests: `room_where` runs a test once on a run directory and once on a real redis-server
(Debian's package, started on a free port for the session; each test gets its own key prefix).

    from tests.room_backends import redis_server, room_where  # noqa: F401  (fixtures)
    def test_x(room_where): room = PresentationStore(room_where)
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from specviz.workshop.processes import free_port
from specviz.workshop.room_state import RedisFiles, redis_files

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory) -> Iterator[str]:
    """A redis-server of its own on a free loopback port, no persistence; yields its URL."""
    if not Path(REDIS_SERVER).exists():
        pytest.fail("redis-server is missing: scripts/test.sh installs Debian's redis-server")
    port, folder = free_port(), tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen([REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(folder)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                redis_files(url).client.ping()
                break
            except Exception:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(params=["directory", "redis"])
def room_where(request, tmp_path) -> Path | RedisFiles:
    """The room's store: a run directory (a path), or Redis (its records under a prefix of this test's own)."""
    if request.param == "directory":
        return tmp_path
    url = request.getfixturevalue("redis_server")
    return redis_files(url, prefix=f"test-{secrets.token_hex(6)}:")
