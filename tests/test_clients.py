"""Who is at the other end of a session (specviz.workshop.clients): the owner only on loopback, with no proxy header,
a loopback Host and (when sent) a loopback Origin; and the address per-client limits count: the TCP peer, or behind
a trusted proxy (loopback, SPECVIZ_TRUSTED_PROXIES) the first untrusted hop of X-Forwarded-For / Forwarded from the
right. Peers such as 172.17.0.1 (a container network's gateway) and 10.x are strings here: no traffic leaves."""

from __future__ import annotations

import pytest

from specviz.workshop.clients import (
    LOCAL,
    first_untrusted,
    identify,
    is_loopback,
    is_loopback_host,
    is_loopback_origin,
    trusted_proxies,
)

OWNER_HEADERS = [("Host", "localhost:8501"), ("Origin", "http://localhost:8501"), ("User-Agent", "x")]
GATEWAY = {"SPECVIZ_TRUSTED_PROXIES": "172.17.0.1/32"}  # docs/deploy.md: a container behind a TLS proxy on its host
BALANCER = {"SPECVIZ_TRUSTED_PROXIES": "10.0.0.0/24, 2001:db8:1::/48"}  # a balancer on another host


@pytest.mark.parametrize("peer", ["127.0.0.1", "127.8.9.1", "::1", "[::1]", "::ffff:127.0.0.1"])
@pytest.mark.parametrize("host", ["localhost:8501", "LOCALHOST", "127.0.0.1:8501", "127.0.0.1", "[::1]:8501", "[::1]"])
def test_a_loopback_peer_without_proxy_headers_naming_loopback_may_be_the_owner(peer, host):
    client = identify(peer, [("Host", host), ("Origin", f"http://{host}"), ("User-Agent", "x")], {})
    assert client.owner_possible and client.address == LOCAL
    assert identify(peer, [("Host", host)], {}).owner_possible  # no Origin (not a browser): the Host decides


@pytest.mark.parametrize(
    "host",
    ["evil.example:8501", "evil.example", "localhost.evil.example", "127.0.0.1.nip.io:8501", "my-laptop:8501", "", "localhost:http",
     "::1", "[::1", "localhost:8501:1", "0.0.0.0:8501", "10.0.0.5:8501"],
)  # fmt: skip
def test_a_foreign_host_is_never_the_owner(host):
    """DNS rebinding: a page at evil.example whose name now resolves to 127.0.0.1 connects from the owner's browser,
    on loopback, with no proxy header; its Host (and Origin) is its own name. Known-bad (the code before): the peer
    and the proxy headers alone made it the owner."""
    client = identify("127.0.0.1", [("Host", host), ("Origin", f"http://{host}")], {})
    assert not client.owner_possible and "localhost" in client.why
    assert client.address == "loopback" != LOCAL  # counted like any participant: the owner's address is never capped
    assert not identify("127.0.0.1", [("Host", host)], {}).owner_possible


def test_no_host_or_two_hosts_is_not_the_owner():
    assert not identify("127.0.0.1", [], {}).owner_possible
    assert not identify("127.0.0.1", [("Host", "localhost"), ("Host", "evil.example")], {}).owner_possible


@pytest.mark.parametrize("origin", ["http://evil.example", "http://evil.example:8501", "null", "https://localhost.evil.example", "file://", "ftp://localhost", "http://user@localhost:8501", "http://localhost:8501/x"])
def test_a_foreign_origin_is_never_the_owner(origin):
    """A page from another site that reaches http://localhost:8501 (its Host is loopback): the Origin says whose page."""
    client = identify("127.0.0.1", [("Host", "localhost:8501"), ("Origin", origin)], {})
    assert not client.owner_possible and "another site" in client.why
    assert not identify("127.0.0.1", [("Host", "localhost:8501"), ("Origin", "http://localhost:8501"), ("Origin", origin)], {}).owner_possible


def test_a_header_less_proxy_is_not_the_owner():
    """nginx without proxy_set_header lines (docs/deploy.md before): the peer is loopback, no proxy header, the Host is
    nginx's proxy_pass target (127.0.0.1:8501), but a visitor's browser sends its own Origin, which nginx passes on."""
    headers = [("Host", "127.0.0.1:8501"), ("Origin", "https://specviz.example.org"), ("Connection", "upgrade")]
    assert not identify("127.0.0.1", headers, {}).owner_possible
    # with `proxy_set_header Host $host` (and still no X-Forwarded-For) the Host gives it away too
    assert not identify("127.0.0.1", [("Host", "specviz.example.org"), ("Origin", "https://specviz.example.org")], {}).owner_possible


@pytest.mark.parametrize("header", ["X-Forwarded-For", "x-real-ip", "Forwarded", "X-Forwarded-Host", "CF-Connecting-IP"])
def test_a_proxy_header_on_loopback_is_never_the_owner(header):
    client = identify("127.0.0.1", [*OWNER_HEADERS, (header, "203.0.113.7")], {})
    assert not client.owner_possible


@pytest.mark.parametrize("peer", ["10.0.0.2", "203.0.113.9", "2001:db8::1", "::ffff:10.0.0.2"])
def test_a_remote_peer_is_a_participant_at_its_own_address_whatever_it_says(peer):
    client = identify(peer, [*OWNER_HEADERS, ("X-Forwarded-For", "127.0.0.1"), ("Forwarded", "for=198.51.100.1")], {})
    assert not client.owner_possible
    assert client.address == peer.removeprefix("::ffff:")


@pytest.mark.parametrize("peer", [None, "", "not-an-ip"])
def test_an_unknown_peer_is_an_unknown_participant(peer):
    client = identify(peer, OWNER_HEADERS, {})
    assert not client.owner_possible and client.address == "unknown"


def test_behind_a_proxy_on_loopback_the_first_untrusted_hop_from_the_right_counts():
    """The room's HAProxy (and nginx with $proxy_add_x_forwarded_for) append the address they saw; what the client
    sent comes first and is never read."""
    headers = [("X-Forwarded-For", "1.1.1.1, 9.9.9.9"), ("X-Forwarded-For", "198.51.100.4")]
    assert identify("127.0.0.1", headers, {}).address == "198.51.100.4"
    assert identify("127.0.0.1", [("X-Forwarded-For", "1.1.1.1, 198.51.100.5")], {}).address == "198.51.100.5"
    assert identify("127.0.0.1", [("X-Forwarded-For", "<script>")], {}).address == "unknown"
    assert identify("127.0.0.1", [("X-Forwarded-For", "127.0.0.9")], {}).address == "127.0.0.9"  # a client on this machine
    assert identify("127.0.0.1", [("X-Real-IP", "198.51.100.4")], {}).address == "unknown"  # a proxy that names nobody we read


def test_behind_a_tls_proxy_in_front_of_a_container_the_gateway_is_trusted():
    """docs/deploy.md's recipe: nginx on the host, the app in a container; the container sees the bridge's gateway.
    Known-bad (the code before): only a loopback peer's header was read, so every participant was 172.17.0.1 and
    three wrong keys from anyone locked the teacher out."""
    before = identify("172.17.0.1", [("X-Forwarded-For", "198.51.100.4")], {})
    assert before.address == "172.17.0.1"  # not trusted by default: the gateway's own address, headers ignored
    for client_address in ("198.51.100.4", "198.51.100.5"):
        client = identify("172.17.0.1", [("Host", "specviz.example.org"), ("X-Forwarded-For", f"6.6.6.6, {client_address}")], GATEWAY)
        assert client.address == client_address and not client.owner_possible
    assert identify("172.17.0.1", [], GATEWAY).address == "172.17.0.1"  # the host itself, through the published port


def test_behind_two_trusted_proxies_the_walk_skips_both():
    """A balancer on another host (10.0.0.7) in front of nginx on this machine: X-Forwarded-For has the client, then
    the balancer; both proxies are skipped from the right, an address the client wrote further left is not read."""
    headers = [("X-Forwarded-For", "203.0.113.66, 198.51.100.4, 10.0.0.7")]
    assert identify("127.0.0.1", headers, BALANCER).address == "198.51.100.4"
    assert identify("127.0.0.1", headers, {}).address == "10.0.0.7"  # the balancer untrusted: it is the client
    assert identify("10.0.0.7", [("X-Forwarded-For", "2001:db8:1::5, 2001:db8:2::9")], BALANCER).address == "2001:db8:2::9"
    assert identify("10.0.0.7", [("X-Forwarded-For", "10.0.0.3")], BALANCER).address == "10.0.0.3"  # all trusted: the leftmost


def test_the_forwarded_header_and_disagreeing_headers():
    forwarded = [("Forwarded", 'for=203.0.113.66;proto=https, for="[2001:db8:cafe::17]:4711";by=10.0.0.7')]
    assert identify("10.0.0.7", forwarded, BALANCER).address == "2001:db8:cafe::17"
    assert identify("10.0.0.7", [("Forwarded", "for=_hidden")], BALANCER).address == "unknown"
    # a client's own Forwarded beside the proxy's X-Forwarded-For: they disagree, so nobody is named
    both = [("Forwarded", "for=192.0.2.1"), ("X-Forwarded-For", "198.51.100.4")]
    assert identify("10.0.0.7", both, BALANCER).address == "unknown"
    assert identify("10.0.0.7", [("Forwarded", "for=198.51.100.4"), ("X-Forwarded-For", "198.51.100.4")], BALANCER).address == "198.51.100.4"


def test_known_bad_trusting_the_first_forwarded_entry_would_let_a_client_choose_its_address():
    headers = [("X-Forwarded-For", "6.6.6.6, 198.51.100.4")]
    first = headers[0][1].split(",")[0].strip()
    assert first == "6.6.6.6" and identify("127.0.0.1", headers, {}).address != first
    assert first_untrusted(["6.6.6.6", "198.51.100.4"], trusted_proxies({})) == "198.51.100.4"


def test_the_trusted_proxies_setting():
    networks = trusted_proxies({"SPECVIZ_TRUSTED_PROXIES": "172.17.0.1, 10.0.0.0/8 ,, not-a-network"})
    assert {str(n) for n in networks} == {"127.0.0.0/8", "::1/128", "172.17.0.1/32", "10.0.0.0/8"}
    assert {str(n) for n in trusted_proxies({})} == {"127.0.0.0/8", "::1/128"}  # loopback always: the room's balancer


def test_loopback_names():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and not is_loopback("10.0.0.1") and not is_loopback(None)
    assert is_loopback_host("localhost:8501") and is_loopback_host("[::1]:80") and not is_loopback_host("evil.example")
    assert is_loopback_origin("http://127.0.0.1:8501") and not is_loopback_origin("null") and not is_loopback_origin(None)
