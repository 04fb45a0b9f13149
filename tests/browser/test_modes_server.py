"""Owner powers stay with the owner in every common deployment (issue 32, item 5), against real servers through the
protocol client (specviz/loadtest/protocol.py), which reads the sidebar's widgets and its mode line:

* `streamlit run app.py --server.address ""` (every interface) reached through this machine's non-loopback address is
  shared (no trust remote code, no downloads, no pickle, no free-text model box); the same server on 127.0.0.1 is
  local. The same with SPECVIZ_MODE=local: it cannot give a client from another machine owner powers.
* a server on localhost behind a reverse proxy on this machine (a small HAProxy adding X-Forwarded-For) is shared
  through the proxy and local straight on 127.0.0.1.
* a raw websocket client on loopback that names another site (issue 42, item 3): a page at a DNS-rebinding name
  (its Host and Origin are evil.example), a page from another site (its Origin), and visitors through a proxy that
  adds no header (HAProxy without ``option forwardfor``; their Host and Origin are the public name) are all shared.
  Known-bad (the code before): the peer and the proxy headers alone decided, so each of these got owner options.
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
    {forwardfor}
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
def reverse_proxy(tmp_path, app_port: int, forwardfor: bool = True) -> Iterator[str]:
    """HAProxy on a free loopback port in front of the app, adding X-Forwarded-For as an owner's nginx should
    (forwardfor=False: no header at all, as docs/deploy.md's nginx snippet once did)."""
    port = _free_port()
    config = tmp_path / "haproxy.cfg"
    text = HAPROXY_CONFIG.format(port=port, app_port=app_port, forwardfor="option forwardfor" if forwardfor else "")
    config.write_text(textwrap.dedent(text), encoding="utf-8")
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
            assert_shared(proxied, "you connect through a proxy")
        assert_local(server.url)



@pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (scripts/test.sh installs it: apt-get install haproxy)")
def test_a_page_at_another_name_and_a_header_less_proxy_are_shared(tmp_path, tiny_dir):
    """The server started the README way (localhost, no SPECVIZ_MODE). From loopback with no proxy header, a client
    whose Host and Origin are evil.example (what the owner's browser sends for a page whose name now resolves to
    127.0.0.1) is shared; so is a visitor through a proxy that adds nothing, whose browser names the public site."""
    env = {"SPECVIZ_TARGETS": str(tiny_dir["llama"]), "SPECVIZ_RUN_DIR": str(tmp_path / "runs")}
    with run_app(tmp_path / "server.log", env=env) as server:
        port = int(server.url.rsplit(":", 1)[1])
        name_why = "your browser reached this server under a name other than localhost or 127.0.0.1, so it may be another site's page"
        assert_shared(server.url, name_why, {"Host": f"evil.example:{port}"})  # Origin http://evil.example:PORT, as a browser's
        assert_shared(server.url, name_why, {"Host": f"127.0.0.1.nip.io:{port}"})
        with reverse_proxy(tmp_path, port, forwardfor=False) as proxied:
            public = {"Host": "specviz.example.org", "Origin": "https://specviz.example.org"}
            assert_shared(proxied, name_why, public)
        assert_local(server.url)  # the owner at the keyboard keeps local mode
        with StSession(server.url, headers={"Host": f"localhost:{port}"}) as session:
            assert sidebar(session)[1].startswith("Local mode: you are this machine's owner")


def test_a_page_from_another_site_is_never_the_owner(tmp_path, tiny_dir):
    """Host localhost, Origin another site's: Streamlit's own origin rule closes the websocket, or the page is shared.
    Either way, no owner options (the unit tests in tests/test_clients.py check our rule alone)."""
    env = {"SPECVIZ_TARGETS": str(tiny_dir["llama"]), "SPECVIZ_RUN_DIR": str(tmp_path / "runs")}
    with run_app(tmp_path / "server.log", env=env) as server:
        port = int(server.url.rsplit(":", 1)[1])
        try:
            with StSession(server.url, headers={"Host": f"localhost:{port}", "Origin": "http://evil.example"}, timeout_s=30) as session:
                labels, line = sidebar(session)
        except Exception as exc:  # the door closed before any script ran
            assert "1008" in str(exc) or "closed" in str(exc).lower() or "rejected" in str(exc).lower(), repr(exc)
        else:
            assert line == "Shared mode: the page that opened this connection comes from another site.", line
            assert not set(OWNER_ONLY) & labels


@pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (scripts/test.sh installs it: apt-get install haproxy)")
def test_a_room_started_with_mode_local_runs_shared_replicas(tmp_path, tiny_dir):
    with room(tmp_path, str(tiny_dir["llama"]), SPECVIZ_MODE="local") as (status, log, _):
        with StSession(status["url"]) as session:
            labels, line = sidebar(session)
            assert line.startswith("Shared mode"), line
            assert not set(OWNER_ONLY) & labels and FREE_TEXT_TARGET not in labels, sorted(labels)
        said = log.read_text(errors="replace")
        assert "SPECVIZ_MODE=local is ignored: a room's replicas always run in shared mode" in said, said[-2000:]
