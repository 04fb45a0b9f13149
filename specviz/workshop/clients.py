"""Who is at the other end of a browser session: the address per-client limits count, and whether it may be the owner.

Plain Python (no streamlit): specviz.ui.common.client reads the websocket's TCP peer and the headers of its upgrade request
and hands them here.

A proxy on this machine (HAProxy in a room, nginx, a tunnel such as ngrok or cloudflared) makes every client's TCP
peer look like loopback, so the peer alone says nothing. Hence two rules:

* **The owner** is a client whose TCP peer is this machine's loopback *and* whose request carries no proxy header
  (X-Forwarded-For, Forwarded, X-Real-IP, ...). Anyone else is a participant, whatever the server's bind address or
  SPECVIZ_MODE says. (A bare TCP tunnel, ``ssh -L``, adds no header: behind one, set SPECVIZ_MODE=shared.)
* **A client's address** for per-client limits is the TCP peer; behind a proxy we started ourselves (the room's
  HAProxy, which sets SPECVIZ_TRUST_PROXY=1 in its replicas' environment) and only when the peer is loopback, the
  *last* X-Forwarded-For entry, the one that proxy appended (earlier entries are whatever the client sent).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

TRUST_PROXY_ENV = "SPECVIZ_TRUST_PROXY"
PROXY_HEADERS = frozenset({"x-forwarded-for", "forwarded", "x-real-ip", "x-forwarded-host", "x-forwarded-proto", "cf-connecting-ip", "true-client-ip", "x-client-ip"})
LOCAL = "local"  # the address of a loopback client with no proxy in between
MAX_ADDRESS_CHARS = 64


@dataclass(frozen=True)
class Client:
    """One browser session's client: its address for limits, and whether it is this machine's owner at the keyboard."""

    address: str  # an IP address, LOCAL, or "unknown"
    owner_possible: bool  # loopback peer, no proxy header: the only client local mode may trust
    why: str  # one line a page can show ("you connect from this machine", "through a proxy", ...)


def is_loopback(peer: str | None) -> bool:
    """The TCP peer is this machine (127.0.0.0/8, ::1, an IPv4-mapped loopback); None (no peer known) counts as not."""
    if not peer:
        return False
    try:
        ip = ipaddress.ip_address(peer.strip().strip("[]").split("%")[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))


def _clean(text: str) -> str | None:
    """An IP address from a header entry, or None (a header is client text until checked)."""
    candidate = text.strip().strip('"')
    if candidate.startswith("[") and "]" in candidate:
        candidate = candidate[1 : candidate.index("]")]
    elif candidate.count(":") == 1:  # IPv4 with a port
        candidate = candidate.split(":")[0]
    try:
        return str(ipaddress.ip_address(candidate[:MAX_ADDRESS_CHARS]))
    except ValueError:
        return None


def identify(peer: str | None, headers: Iterable[tuple[str, str]] | Mapping[str, str], environ: Mapping[str, str] | None = None) -> Client:
    """The client of a session whose websocket's TCP peer is ``peer`` (None: unknown) and whose upgrade request
    carried ``headers`` (pairs, repeated names allowed, or a mapping)."""
    environ = os.environ if environ is None else environ
    pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
    names = {str(name).strip().lower() for name, _ in pairs}
    proxied = bool(names & PROXY_HEADERS)
    loopback = is_loopback(peer)
    if loopback and not proxied:
        return Client(LOCAL, True, "you connect from this machine, with no proxy in between")
    trusted = environ.get(TRUST_PROXY_ENV, "").strip().lower() in ("1", "true", "yes", "on")
    if loopback and trusted:
        forwarded = [v for n, v in pairs if str(n).strip().lower() == "x-forwarded-for"]
        last = forwarded[-1].split(",")[-1] if forwarded else ""
        address = _clean(last) or "unknown"
        return Client(address, False, "you connect through this room's balancer")
    if loopback:
        return Client("unknown", False, "you connect through a proxy or tunnel on this machine")
    address = _clean(peer or "") or "unknown"
    return Client(address, False, "you connect from another machine")
