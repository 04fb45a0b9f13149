"""Owner powers stay with the owner in every common deployment (issue 32, item 5), against real servers through the
protocol client (specviz/loadtest/protocol.py), which reads the sidebar's widgets and its mode line:

* `streamlit run app.py --server.address ""` (every interface) reached through this machine's non-loopback address is
  shared (no trust remote code, no downloads, no pickle, no free-text model box); the same server on 127.0.0.1 is
  local. The same with SPECVIZ_MODE=local: it cannot give a client from another machine owner powers.
* a server on localhost behind a reverse proxy on this machine (a small HAProxy adding X-Forwarded-For) is shared
  through the proxy and local straight on 127.0.0.1.
* a room (`python -m specviz room`) started from a shell with SPECVIZ_MODE=local runs its replicas in shared mode,
  and its log says the setting was ignored.

The tiny llama is the only target, so no big model loads."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import textwrap
import time
from collections.abc import Iterator

import psutil
import pytest

from specviz.loadtest.protocol import StSession
from tests.browser.conftest import _free_port, _healthy, run_app
from tests.browser.test_room import HAPROXY, room

OWNER_ONLY = ("trust remote code", "allow downloads from the hub", "allow pickle checkpoints")
FREE_TEXT_TARGET = "Target model: hub id, local folder or .gguf"
START_TIMEOUT_S = 60


def outside_address() -> str | None:
    """This machine's first non-loopback IPv4 address (None: it has none)."""
    for addresses in psutil.net_if_addrs().values():
        for a in addresses:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                return a.address
    return None


def sidebar(session: StSession) -> tuple[set[str], str]:
    """The sidebar's widget labels and its mode line."""
    labels = {getattr(n.proto, n.kind).label for n in session.nodes.values() if n.path and n.path[0] == 1 and n.kind not in ("block", "markdown", "alert", "heading")}
    line = next((t for t in session.texts() if t.startswith(("Local mode", "Shared mode"))), "")
    return labels, line


def assert_shared(url: str, why: str, headers: dict[str, str] | None = None) -> None:
    with StSession(url, headers=headers) as session:
        labels, line = sidebar(session)
        assert not session.exceptions(), session.exceptions()
        assert line == f"Shared mode: {why}.", line
        assert not set(OWNER_ONLY) & labels and FREE_TEXT_TARGET not in labels, sorted(labels)
        assert "Target model (this server's list)" in labels, sorted(labels)


def assert_local(url: str) -> None:
    with StSession(url) as session:
        labels, line = sidebar(session)
        assert not session.exceptions(), session.exceptions()
        assert line.startswith("Local mode: you are this machine's owner"), line
        assert set(OWNER_ONLY) <= labels and FREE_TEXT_TARGET in labels, sorted(labels)


@pytest.mark.parametrize("mode", [None, "local"])
def test_a_server_on_every_interface_is_shared_from_another_machine_and_local_on_loopback(tmp_path, tiny_dir, mode):
    address = outside_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address to reach the server through")
    env = {"SPECVIZ_TARGETS": str(tiny_dir["llama"]), "SPECVIZ_RUN_DIR": str(tmp_path / "runs")} | ({"SPECVIZ_MODE": mode} if mode else {})
    with run_app(tmp_path / "server.log", env=env, args=("--server.address", "")) as server:
        outside = server.url.replace("127.0.0.1", address)
        assert _healthy(outside), f"the server does not answer on {address}: it did not bind every interface"
        assert_shared(outside, "you connect from another machine")
        assert_local(server.url)
        assert "specviz mode: the server listens on every interface" in server.log(), server.log()[-2000:]


HAPROXY_CONFIG = """
defaults
    mode http
    option forwardfor
    timeout connect 5s
    timeout client 1m
    timeout server 1m
    timeout tunnel 1h

frontend proxy
    bind 127.0.0.1:{port}

    default_backend app

backend app
    server app 127.0.0.1:{app_port}
"""


@contextlib.contextmanager
def reverse_proxy(tmp_path, app_port: int) -> Iterator[str]:
    """HAProxy on a free loopback port in front of the app, adding X-Forwarded-For, as an owner's nginx would."""
    port = _free_port()
    config = tmp_path / "haproxy.cfg"
    config.write_text(textwrap.dedent(HAPROXY_CONFIG.format(port=port, app_port=app_port)), encoding="utf-8")
    proc = subprocess.Popen([HAPROXY, "-db", "-f", str(config)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _healthy(url):
            assert proc.poll() is None, f"haproxy exited with code {proc.returncode}"
            assert time.monotonic() < deadline, "haproxy did not pass the app's health check"
            time.sleep(0.25)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=15)


@pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (scripts/test.sh installs it: apt-get install haproxy)")
def test_localhost_behind_a_reverse_proxy_is_shared(tmp_path, tiny_dir):
    env = {"SPECVIZ_TARGETS": str(tiny_dir["llama"]), "SPECVIZ_RUN_DIR": str(tmp_path / "runs")}
    with run_app(tmp_path / "server.log", env=env) as server:
        with reverse_proxy(tmp_path, int(server.url.rsplit(":", 1)[1])) as proxied:
            assert_shared(proxied, "you connect through a proxy or tunnel on this machine")
        assert_local(server.url)


@pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (scripts/test.sh installs it: apt-get install haproxy)")
def test_a_room_started_with_mode_local_runs_shared_replicas(tmp_path, tiny_dir):
    with room(tmp_path, str(tiny_dir["llama"]), SPECVIZ_MODE="local") as (status, log, _):
        with StSession(status["url"]) as session:
            labels, line = sidebar(session)
            assert line.startswith("Shared mode"), line
            assert not set(OWNER_ONLY) & labels and FREE_TEXT_TARGET not in labels, sorted(labels)
        said = log.read_text(errors="replace")
        assert "SPECVIZ_MODE=local is ignored: a room's replicas always run in shared mode" in said, said[-2000:]
