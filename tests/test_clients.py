"""Who is at the other end of a session (specviz.workshop.clients): the owner only on loopback with no proxy header,
and the address per-client limits count, taken from X-Forwarded-For only behind the room's own balancer."""

from __future__ import annotations

import pytest

from specviz.workshop.clients import LOCAL, identify, is_loopback

ROOM = {"SPECVIZ_TRUST_PROXY": "1"}


@pytest.mark.parametrize("peer", ["127.0.0.1", "127.8.9.1", "::1", "[::1]", "::ffff:127.0.0.1"])
def test_a_loopback_peer_without_proxy_headers_may_be_the_owner(peer):
    client = identify(peer, [("Host", "localhost:8501"), ("User-Agent", "x")], {})
    assert client.owner_possible and client.address == LOCAL


@pytest.mark.parametrize("header", ["X-Forwarded-For", "x-real-ip", "Forwarded", "X-Forwarded-Host", "CF-Connecting-IP"])
def test_a_proxy_header_on_loopback_is_never_the_owner(header):
    client = identify("127.0.0.1", [(header, "203.0.113.7")], {})
    assert not client.owner_possible
    assert client.address == "unknown"  # an untrusted proxy's header is not an address either


@pytest.mark.parametrize("peer", ["10.0.0.2", "203.0.113.9", "2001:db8::1", None, "", "not-an-ip"])
def test_a_remote_or_unknown_peer_is_a_participant(peer):
    client = identify(peer, [], {})
    assert not client.owner_possible
    assert client.address == (peer if peer and ":" not in peer and peer[0].isdigit() else "2001:db8::1" if peer == "2001:db8::1" else "unknown")


def test_behind_the_rooms_balancer_the_last_forwarded_address_counts():
    """HAProxy appends its own X-Forwarded-For line; what the client sent comes first and is ignored."""
    headers = [("X-Forwarded-For", "1.1.1.1, 9.9.9.9"), ("X-Forwarded-For", "198.51.100.4")]
    assert identify("127.0.0.1", headers, ROOM).address == "198.51.100.4"
    assert identify("127.0.0.1", [("X-Forwarded-For", "1.1.1.1, 198.51.100.5")], ROOM).address == "198.51.100.5"
    assert identify("127.0.0.1", [("X-Forwarded-For", "<script>")], ROOM).address == "unknown"


def test_a_forwarded_header_from_a_remote_peer_is_ignored_even_in_a_room():
    """Only a loopback peer can be our balancer: a remote client cannot pick its own address."""
    assert identify("203.0.113.9", [("X-Forwarded-For", "127.0.0.1")], ROOM).address == "203.0.113.9"


def test_known_bad_trusting_the_first_forwarded_entry_would_let_a_client_choose_its_address():
    headers = [("X-Forwarded-For", "6.6.6.6, 198.51.100.4")]
    first = headers[0][1].split(",")[0].strip()
    assert first == "6.6.6.6" and identify("127.0.0.1", headers, ROOM).address != first


def test_is_loopback():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and not is_loopback("10.0.0.1") and not is_loopback(None)
