"""`specviz serve` bound to loopback answers only requests naming loopback in their Host (DNS rebinding: a page at
evil.example whose name now resolves to 127.0.0.1 sends Host: evil.example), with a 403 in OpenAI's error shape; bound
to another address it keeps every Host. The app is the one run_server hands uvicorn (its server_config), served on a
free loopback port; requests are written on a raw socket, so the Host is exactly what the test says."""

from __future__ import annotations

import json
import socket
import urllib.parse

import pytest

from specviz.config import EMBEDDED_TARGET, RunConfig
from specviz.runs import resolve_models
from specviz.workshop.service import server as service_server
from specviz.workshop.service.config import ServiceConfig
from specviz.workshop.service.hosts import binds_loopback
from specviz.workshop.service.server import Service
from tests.service_helpers import running

pytestmark = pytest.mark.smollm


def served_app(smollm, monkeypatch, bind: str):
    """The ASGI app run_server would serve on ``bind`` (the app of the uvicorn config it runs)."""
    run = RunConfig(target=EMBEDDED_TARGET, drafter="lookup", num_draft_tokens=4, dtype="float32", device="cpu")
    service = Service(ServiceConfig(run, EMBEDDED_TARGET, max_tokens=4), resolve_models(run, target=smollm))
    return service_server.server_config(service, bind, 8000).app


def raw_get(root: str, path: str, host_line: str | None) -> tuple[int, bytes]:
    """GET path with exactly this Host line (None: none); the status and the body."""
    parsed = urllib.parse.urlsplit(root)
    with socket.create_connection((parsed.hostname, parsed.port), timeout=30) as sock:
        head = f"GET {path} HTTP/1.1\r\n" + (f"Host: {host_line}\r\n" if host_line is not None else "") + "Connection: close\r\n\r\n"
        sock.sendall(head.encode("latin-1"))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[1]


@pytest.mark.parametrize("bind", ["127.0.0.1", "localhost", "::1"])
def test_on_loopback_a_foreign_host_is_refused_in_openais_shape(smollm, monkeypatch, bind):
    app = served_app(smollm, monkeypatch, bind)
    with running(app) as root:
        port = urllib.parse.urlsplit(root).port
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "localhost"):
            status, body = raw_get(root, "/v1/models", host)
            assert status == 200 and json.loads(body)["data"][0]["id"] == EMBEDDED_TARGET
        for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.nip.io:{port}", f"localhost.evil.example:{port}"):
            status, body = raw_get(root, "/v1/models", host)
            assert status == 403, (host, status, body)
            error = json.loads(body)["error"]
            assert set(error) == {"message", "type", "param", "code"} and error["code"] == "host_not_allowed"
        status, _ = raw_get(root, "/health", "evil.example")
        assert status == 403  # every route, health included: a page learns nothing about the service


def test_on_another_address_every_host_is_served(smollm, monkeypatch):
    """Known-bad control for the rule's reach: bound to 0.0.0.0 the service is meant for other machines, whatever
    name they use. (The code before served every Host on loopback too: the first test fails there.)"""
    app = served_app(smollm, monkeypatch, "0.0.0.0")
    with running(app) as root:
        status, body = raw_get(root, "/v1/models", "specviz.example.org")
        assert status == 200


def test_binds_loopback():
    assert binds_loopback("127.0.0.1") and binds_loopback("::1") and binds_loopback("[::1]") and binds_loopback("LOCALHOST")
    assert not binds_loopback("0.0.0.0") and not binds_loopback("") and not binds_loopback("192.0.2.1") and not binds_loopback("::")
