"""A service bound to loopback answers only requests that name loopback in their Host (``localhost``, ``127.0.0.1``,
``[::1]``, any port): the rule of specviz.workshop.clients.is_loopback_host, the one the app's owner check uses.

Why: a web page at another name whose DNS answer switches to 127.0.0.1 (DNS rebinding) is, to the browser, the same
site as before, so it may send requests to ``http://evil.example:8000/v1/...``, which now reach this machine's
loopback, and read the answers; its Host header is still ``evil.example``. A server bound to another address is
meant for other machines and keeps every Host. Refusals are 403 in OpenAI's error shape."""

from __future__ import annotations

import ipaddress
import logging

from specviz.workshop.clients import is_loopback_host
from specviz.workshop.service.request import ApiError

log = logging.getLogger(__name__)


def binds_loopback(host: str) -> bool:
    """The bind address is this machine's loopback only (localhost, 127.0.0.0/8, ::1)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class LoopbackHostsOnly:
    """ASGI middleware: an HTTP request whose one Host header does not name loopback gets a 403 and reaches no route."""

    def __init__(self, app) -> None:
        self.app = app
        self._logged = False

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            hosts = [value.decode("latin-1") for name, value in scope.get("headers", ()) if name.lower() == b"host"]
            if len(hosts) != 1 or not is_loopback_host(hosts[0]):
                if not self._logged:  # once: a page probing in a loop must not fill the log
                    log.warning("refused a request naming another host than loopback (a web page at another name?)")
                    self._logged = True
                refusal = ApiError(403, "This server listens on loopback and answers only requests addressed to localhost, 127.0.0.1 or [::1].",
                                   code="host_not_allowed")  # fmt: skip
                await refusal.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)


def guard_hosts(app, host: str):
    """app as it should be served on ``host``: behind LoopbackHostsOnly when that is loopback, unchanged otherwise."""
    return LoopbackHostsOnly(app) if binds_loopback(host) else app
