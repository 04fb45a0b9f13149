"""Which URLs the probe may send requests to from a shared server: the owner's allow-list (SPECVIZ_PROBE_URLS, or
``probe_urls`` in the [specviz] secrets table; empty by default, so participants probe nothing).

A participant must never make the server send requests to an address of their choosing (the server's own ports, a
balancer's stats page, anything on its network). So a URL is allowed only when it matches a listed one exactly on
scheme, host and port, and its path starts with the listed path segment by segment. Hosts are compared as written,
never resolved: ``localhost``, ``[::1]``, ``127.1``, ``2130706433`` or a DNS name that resolves to 127.0.0.1 are each
another host than ``127.0.0.1``, and are refused unless listed themselves. A URL with a user name, a query, a fragment,
a percent sign, a backslash, or a ``.`` / ``..`` path segment is refused outright (no way to spell a listed URL
differently, nor to step out of its path). The probe follows no redirects and checks every request it sends against
the same list (specviz.experiments.probe ``guard``).

The owner's own tools (the command line, a localhost app) are not limited: check_probe_url(url, None) only checks
the URL's shape.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_URL_CHARS = 2000
DEFAULT_PORTS = {"http": 80, "https": 443}
_BAD_CHARS = re.compile(r"[\x00-\x20\x7f\\%]")


@dataclass(frozen=True)
class ProbeUrl:
    """A URL taken apart and normalised: scheme and host lower-case, the port explicit, the path as segments."""

    scheme: str
    host: str  # as written (lower-case; an IPv6 address in brackets)
    port: int
    segments: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}/{'/'.join(self.segments)}".rstrip("/")

    def within(self, listed: ProbeUrl) -> bool:
        """Same scheme, host and port, and the path under the listed one (segment by segment)."""
        return (self.scheme, self.host, self.port) == (listed.scheme, listed.host, listed.port) and self.segments[: len(listed.segments)] == listed.segments


def parse(url: object) -> ProbeUrl:
    """The URL normalised, or ValueError saying what is wrong with it."""
    if not isinstance(url, str) or not url.strip():
        raise ValueError("Give the service's base URL, e.g. http://127.0.0.1:8001/v1.")
    url = url.strip()
    if len(url) > MAX_URL_CHARS or _BAD_CHARS.search(url):
        raise ValueError("The URL holds spaces, control characters, a backslash or a percent sign; write it plainly, e.g. http://127.0.0.1:8001/v1.")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ValueError(f"{url!r} is not a URL with a valid port.") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise ValueError(f"The URL must start with http:// or https://; got {url!r}.")
    if "@" in parts.netloc:
        raise ValueError("The URL must not hold a user name or password.")
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise ValueError("The URL must not hold a query (?) or a fragment (#): give the API's base URL.")
    host = (parts.hostname or "").lower()
    if not host:
        raise ValueError(f"The URL names no host: {url!r}.")
    if ":" in host:
        host = f"[{host}]"  # IPv6, as written in a URL
    segments = tuple(s for s in parts.path.split("/") if s)
    if any(s in (".", "..") for s in segments):
        raise ValueError("The URL's path must not hold . or .. segments.")
    return ProbeUrl(scheme, host.rstrip("."), port if port is not None else DEFAULT_PORTS[scheme], segments)


def parse_list(urls: Sequence[str]) -> tuple[ProbeUrl, ...]:
    """The owner's list, each entry checked (ValueError naming the bad one)."""
    out = []
    for url in urls:
        try:
            out.append(parse(url))
        except ValueError as exc:
            raise ValueError(f"SPECVIZ_PROBE_URLS (or probe_urls in secrets.toml): {url!r}: {exc}") from None
    return tuple(out)


def check_probe_url(url: object, allowed: Sequence[str] | None) -> str:
    """url normalised when it may be probed: any well-formed http(s) URL for the owner (allowed None), else only one
    within an entry of the owner's list. ValueError with a message a participant can act on."""
    parsed = parse(url)
    if allowed is None:
        return str(parsed)
    listed = parse_list(allowed)
    if not listed:
        raise ValueError("This shared server probes no services: the person running it has listed none (SPECVIZ_PROBE_URLS).")
    if not any(parsed.within(entry) for entry in listed):
        raise ValueError(f"{url!r} is not on this server's list of services to probe; pick one of {', '.join(map(str, listed))}.")
    return str(parsed)


def guard_for(allowed: Sequence[str] | None):
    """A probe guard: raises ValueError for any request URL outside the list (None: the owner, nothing refused but a
    malformed URL)."""

    def guard(url: str) -> None:
        check_probe_url(url, allowed)

    return guard
