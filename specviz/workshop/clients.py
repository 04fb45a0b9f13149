"""Who is at the other end of a browser session: the address per-client limits count, and whether it may be the owner.

Plain Python (no streamlit): specviz.ui.common.client reads the websocket's TCP peer and the headers of its upgrade request
and hands them here.

**The owner** is a client that this machine's owner could only be, at its keyboard, in a browser that typed a local
address. All four must hold; anyone else is a participant, whatever the server's bind address or SPECVIZ_MODE says:

* the TCP peer is this machine's loopback;
* the request carries no proxy header (X-Forwarded-For, Forwarded, X-Real-IP, ...): a proxy on this machine (HAProxy
  in a room, nginx, a tunnel such as ngrok or cloudflared) makes every client's peer look like loopback;
* the Host header names loopback (``localhost``, ``127.0.0.1``, ``[::1]``, any port): a web page at another name whose
  DNS answer was switched to 127.0.0.1 (DNS rebinding) reaches the server from the owner's own browser, on loopback,
  with no proxy header, but its Host is that name;
* an Origin header, when there is one (browsers always send it on a websocket), names loopback too: a page from
  another site, or a proxy that passes no header but the browser's Origin through.

A bare TCP tunnel (``ssh -L``) adds no header and keeps the Host the client typed: behind one, set SPECVIZ_MODE=shared.

**A client's address** for per-client limits (the presenter key's lock, sessions per client, the queue's rotation)
is the TCP peer, unless the peer is a *trusted proxy*: loopback (the room's HAProxy, a proxy on this machine) and the
networks in SPECVIZ_TRUSTED_PROXIES (comma-separated CIDRs or addresses: the container network's gateway in front of
a container, a balancer on another host). From a trusted peer the hops its X-Forwarded-For (or Forwarded) lists are
walked from the right, skipping trusted proxies; the first untrusted hop is the client. Entries to its left are
whatever the client sent and are never read, so a client cannot choose its address. A trusted proxy must append to
X-Forwarded-For (nginx: ``$proxy_add_x_forwarded_for``; HAProxy: ``option forwardfor``), or replace it. When both
headers are present and name different clients, or a hop is not an address, the client is "unknown".
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import os
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)

TRUSTED_PROXIES_ENV = "SPECVIZ_TRUSTED_PROXIES"
LOOPBACK_NETWORKS = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))  # always trusted
PROXY_HEADERS = frozenset({"x-forwarded-for", "forwarded", "x-real-ip", "x-forwarded-host", "x-forwarded-proto", "cf-connecting-ip", "true-client-ip", "x-client-ip"})
LOCAL = "local"  # the address of the owner: a loopback client with no proxy in between, naming loopback
LOOPBACK = "loopback"  # the address of any other loopback client with no proxy header (a page at another name): counted, capped
UNKNOWN = "unknown"
MAX_ADDRESS_CHARS = 64
MAX_HOPS = 32  # hops read from the right of a forwarding header; a longer chain is a client's invention
LOOPBACK_NAMES = frozenset({"localhost"})

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class Client:
    """One browser session's client: its address for limits, and whether it is this machine's owner at the keyboard."""

    address: str  # an IP address, LOCAL (the owner, never capped), LOOPBACK or UNKNOWN
    owner_possible: bool  # loopback peer, no proxy header, loopback Host and Origin: the only client local mode may trust
    why: str  # one line a page can show ("you connect from this machine", "through a proxy", ...)


def _ip(text: str | None) -> Address | None:
    """An IP address from a peer or a header entry ('[::1]:8501', '10.0.0.1:443', '"::ffff:10.0.0.1"'), or None.
    An IPv4-mapped IPv6 address is its IPv4 address. A header is client text until checked."""
    if not text:
        return None
    candidate = text.strip().strip('"')[:MAX_ADDRESS_CHARS]
    if candidate.startswith("[") and "]" in candidate:
        candidate = candidate[1 : candidate.index("]")]
    elif candidate.count(":") == 1:  # IPv4 with a port
        candidate = candidate.split(":")[0]
    try:
        ip = ipaddress.ip_address(candidate.split("%")[0])
    except ValueError:
        return None
    mapped = getattr(ip, "ipv4_mapped", None)
    return mapped if mapped is not None else ip


def is_loopback(peer: str | None) -> bool:
    """The TCP peer is this machine (127.0.0.0/8, ::1, an IPv4-mapped loopback); None (no peer known) counts as not."""
    ip = _ip(peer)
    return bool(ip is not None and ip.is_loopback)


def is_loopback_host(host: str | None) -> bool:
    """A Host header (or an origin's host[:port]) that names this machine's loopback: localhost, a loopback address
    (127.0.0.1, [::1]), with any port. Another name, even one that resolves to 127.0.0.1, is not: DNS rebinding."""
    if not host:
        return False
    text = host.strip().lower()
    if text.startswith("["):
        name, bracket, port = text[1:].partition("]")
        if not bracket or (port and not (port.startswith(":") and port[1:].isdigit())):
            return False
    else:
        name, colon, port = text.partition(":")
        if colon and not port.isdigit():  # a bare IPv6 address, or a port that is not one
            return False
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def is_loopback_origin(origin: str | None) -> bool:
    """An Origin header naming a page served from this machine's loopback (http(s)://localhost:8501, ...); "null" and
    anything else are not."""
    if not origin:
        return False
    try:
        parsed = urllib.parse.urlsplit(origin.strip())
    except ValueError:
        return False
    if parsed.scheme not in ("http", "https") or "@" in parsed.netloc or parsed.path not in ("", "/") or parsed.query:
        return False
    return is_loopback_host(parsed.netloc)


@functools.lru_cache(maxsize=8)
def _parse_networks(text: str) -> tuple[Network, ...]:
    networks: list[Network] = list(LOOPBACK_NETWORKS)
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            log.warning("%s: %r is not an address or a CIDR network; it is ignored", TRUSTED_PROXIES_ENV, entry[:60])
    return tuple(networks)


def trusted_proxies(environ: Mapping[str, str] | None = None) -> tuple[Network, ...]:
    """Loopback and the networks of SPECVIZ_TRUSTED_PROXIES (a malformed entry is logged and ignored)."""
    environ = os.environ if environ is None else environ
    return _parse_networks(environ.get(TRUSTED_PROXIES_ENV, "")[:4096])


def _trusted(ip: Address, networks: tuple[Network, ...]) -> bool:
    return any(ip.version == n.version and ip in n for n in networks)


def forwarded_for(values: Iterable[str]) -> list[str]:
    """The hops of X-Forwarded-For headers, left to right (repeated headers joined in order)."""
    return [hop.strip() for value in values for hop in value.split(",")]


def forwarded_rfc7239(values: Iterable[str]) -> list[str]:
    """The for= hops of Forwarded headers (RFC 7239), left to right; an element without for= is a hop we cannot read."""
    hops = []
    for value in values:
        for element in value.split(","):
            pairs = dict(p.strip().partition("=")[::2] for p in element.split(";") if "=" in p)
            hops.append(next((v for k, v in pairs.items() if k.strip().lower() == "for"), ""))
    return hops


def first_untrusted(hops: list[str], networks: tuple[Network, ...]) -> str | None:
    """Walking the hops from the right, skipping trusted proxies: the first untrusted one (the leftmost when all are
    trusted). None when a hop on the way is not an address (obfuscated, made up) or there are no hops."""
    for hop in reversed(hops[-MAX_HOPS:]):
        ip = _ip(hop)
        if ip is None:
            return None
        if not _trusted(ip, networks):
            return str(ip)
    first = _ip(hops[0]) if hops and len(hops) <= MAX_HOPS else None
    return None if first is None else str(first)


def _values(pairs: list[tuple[str, str]], name: str) -> list[str]:
    return [str(v) for n, v in pairs if str(n).strip().lower() == name]


def _owner_check(pairs: list[tuple[str, str]]) -> str | None:
    """Why a loopback client with no proxy header still cannot be the owner (its Host or Origin), or None."""
    hosts, origins = _values(pairs, "host"), _values(pairs, "origin")
    if len(hosts) != 1 or not is_loopback_host(hosts[0]):
        return "your browser reached this server under a name other than localhost or 127.0.0.1, so it may be another site's page"
    if not all(is_loopback_origin(o) for o in origins):
        return "the page that opened this connection comes from another site"
    return None


def identify(peer: str | None, headers: Iterable[tuple[str, str]] | Mapping[str, str], environ: Mapping[str, str] | None = None) -> Client:
    """The client of a session whose websocket's TCP peer is ``peer`` (None: unknown) and whose upgrade request
    carried ``headers`` (pairs, repeated names allowed, or a mapping). ``environ``: SPECVIZ_TRUSTED_PROXIES."""
    pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
    names = {str(name).strip().lower() for name, _ in pairs}
    peer_ip = _ip(peer)
    if peer_ip is None:
        return Client(UNKNOWN, False, "this server cannot tell where you connect from")
    if peer_ip.is_loopback and not names & PROXY_HEADERS:
        why_not = _owner_check(pairs)
        if why_not is None:
            return Client(LOCAL, True, "you connect from this machine, with no proxy in between")
        return Client(LOOPBACK, False, why_not)
    networks = trusted_proxies(environ)
    if not _trusted(peer_ip, networks):  # whatever headers it sends, a client elsewhere cannot pick its address
        return Client(str(peer_ip), False, "you connect from another machine")
    answers = {first_untrusted(hops, networks) for hops in (forwarded_for(_values(pairs, "x-forwarded-for")), forwarded_rfc7239(_values(pairs, "forwarded"))) if hops}
    if not answers:  # a trusted peer that names no client: itself, or (on loopback) a proxy that does not say
        if peer_ip.is_loopback:
            return Client(UNKNOWN, False, "you connect through a proxy or tunnel on this machine that does not say who you are")
        return Client(str(peer_ip), False, "you connect from another machine")
    address = answers.pop() if len(answers) == 1 else None
    if address is None:
        return Client(UNKNOWN, False, "you connect through a proxy whose headers do not say who you are")
    return Client(address, False, "you connect through a proxy")
