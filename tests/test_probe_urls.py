"""Shared mode: a participant can probe only the owner's listed services (specviz/workshop/probe_urls.py), never another
address on the server's machine (127.0.0.1, localhost, [::1], other spellings, DNS names that resolve to them), and a
redirect does not carry the probe anywhere else. The redirect tests use real servers, and a known-bad control shows a
client that follows redirects would have reached the unlisted one."""

from __future__ import annotations

import socket

import openai
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse, RedirectResponse
from starlette.routing import Route

from specviz.experiments.probe import ProbeSpec, probe
from specviz.workshop.policy import Policy, load_policy
from specviz.workshop.probe_urls import check_probe_url, guard_for, parse
from tests.service_helpers import running

LISTED = ["http://127.0.0.1:8001/v1", "http://127.0.0.1:8002/v1"]


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8001/v1", "http://127.0.0.1:8001/v1/", "HTTP://127.0.0.1:8001/v1", "http://127.0.0.1:8001//v1",
        "http://127.0.0.1:8001/v1/chat/completions", "http://127.0.0.1:8002/v1",
    ],
)  # fmt: skip
def test_listed_services_and_their_paths_are_allowed(url):
    assert check_probe_url(url, LISTED).startswith("http://127.0.0.1:800")


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost:8001/v1",  # a name that resolves to 127.0.0.1
        "http://localhost.:8001/v1",
        "http://[::1]:8001/v1",
        "http://127.1:8001/v1", "http://2130706433:8001/v1", "http://0x7f.0.0.1:8001/v1", "http://127.0.0.2:8001/v1",
        "http://127.0.0.1.nip.io:8001/v1",  # a public DNS name that resolves to 127.0.0.1
        "http://127.0.0.1:8501/v1",  # the app's own port
        "http://127.0.0.1/v1", "https://127.0.0.1:8001/v1",
        "http://127.0.0.1:8001/v2", "http://127.0.0.1:8001/v1x", "http://127.0.0.1:8001/",
        "http://127.0.0.1:8001/v1/../../_stcore/health", "http://127.0.0.1:8001/v1/%2e%2e/x", "http://127.0.0.1:8001/v1\\..\\x",
        "http://user@127.0.0.1:8001/v1", "http://127.0.0.1:8001@evil.example/v1", "http://127.0.0.1:8001/v1?x=1",
        "http://127.0.0.1:8001/v1#a", "ftp://127.0.0.1:8001/v1", "file:///etc/passwd", "//127.0.0.1:8001/v1", "", "   ",
        "http://127.0.0.1:99999/v1", "http:// 127.0.0.1:8001/v1",
    ],
)  # fmt: skip
def test_everything_else_is_refused(url):
    with pytest.raises(ValueError):
        check_probe_url(url, LISTED)


def test_nothing_listed_means_nothing_to_probe_and_the_owner_probes_anything():
    with pytest.raises(ValueError, match="listed none"):
        check_probe_url("http://127.0.0.1:8001/v1", [])
    assert check_probe_url("http://localhost:9000/v1", None) == "http://localhost:9000/v1"
    with pytest.raises(ValueError):
        check_probe_url("http://user@localhost:9000/v1", None)  # even the owner's URL must be plain


def test_ipv6_and_default_ports_are_normalised():
    assert str(parse("http://[::1]/v1")) == "http://[::1]:80/v1"
    assert str(parse("https://Example.COM/v1/")) == "https://example.com:443/v1"


def test_the_policy_reads_the_list_and_refuses_a_bad_entry():
    policy = load_policy(env={"SPECVIZ_PROBE_URLS": " http://127.0.0.1:8001/v1 , http://127.0.0.1:8002/v1"}, server_address="0.0.0.0")
    assert policy.shared and policy.probe_urls == tuple(LISTED)
    assert Policy().probe_urls == ()  # nothing by default
    with pytest.raises(ValueError, match="SPECVIZ_PROBE_URLS"):
        load_policy(env={"SPECVIZ_PROBE_URLS": "http://user@127.0.0.1:8001/v1"}, server_address="0.0.0.0")
    assert load_policy(secrets={"probe_urls": ["http://127.0.0.1:8001/v1"]}, server_address="0.0.0.0").probe_urls == (LISTED[0],)


@pytest.fixture()
def unlisted():
    """A service nobody listed, counting the requests that reach it."""
    hits: list[str] = []

    async def anything(request):
        hits.append(request.url.path)
        return JSONResponse({"error": {"message": "reached"}}, 418)

    app = Starlette(routes=[Route("/{path:path}", anything, methods=["GET", "POST"])])
    with running(app) as root:
        yield root, hits


@pytest.fixture()
def redirector(unlisted):
    """A listed service that redirects every request to the unlisted one."""
    target, _ = unlisted

    async def redirect(request):
        return RedirectResponse(target + request.url.path, status_code=307)

    app = Starlette(routes=[Route("/{path:path}", redirect, methods=["GET", "POST"])])
    with running(app) as root:
        yield root + "/v1"


def test_a_redirect_does_not_carry_the_probe_elsewhere(redirector, unlisted):
    _, hits = unlisted
    spec = ProbeSpec(redirector, "m", n=1, max_tokens=4)
    with pytest.raises(ValueError, match="redirect"):
        probe(spec, ["hi"], guard=guard_for([redirector]))
    assert hits == []
    # known-bad control: a client that follows redirects (openai's default) is carried to the unlisted service
    with openai.OpenAI(base_url=redirector, api_key="x", max_retries=0) as naive, pytest.raises(openai.APIStatusError):
        naive.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert hits == ["/v1/chat/completions"]


def test_a_name_that_resolves_to_a_listed_address_is_still_refused(unlisted):
    root, hits = unlisted  # http://127.0.0.1:PORT
    port = root.rsplit(":", 1)[1]
    assert "127.0.0.1" in {info[4][0] for info in socket.getaddrinfo("localhost", int(port))}  # localhost does resolve there
    for url in (f"http://localhost:{port}/v1", f"http://[::1]:{port}/v1"):
        with pytest.raises(ValueError, match="not on this server's list"):
            probe(ProbeSpec(url, "m", n=1, max_tokens=4), ["hi"], guard=guard_for([root + "/v1"]))
    assert hits == []  # refused before any request left
