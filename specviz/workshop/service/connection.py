"""The web server under a service: uvicorn, with the limits a connection from anywhere needs (server_config).

uvicorn bounds connections (limit_concurrency: more are answered 503) and idle keep-alive, but has no deadline for a
request's head and none for a write: a client that sends a header byte a minute, or asks for a stream and never reads
it, holds its connection (and, reading nothing, its slot) for ever. DeadlineH11 is uvicorn's h11 protocol with both:

* a request's line and headers must arrive within read_timeout_s of the connection opening (or of the last response
  ending); else the connection is closed;
* a write may wait for the client at most write_timeout_s (the transport's buffer full because the client reads
  nothing); else the connection is aborted, which the request sees as a disconnect: its decode ends, its slot is freed.
  What a connection may have waiting to be sent is small (SEND_BUFFER_BYTES in the kernel, WRITE_HIGH_WATER_BYTES in
  the transport: an SSE chunk is about 200 bytes), so a client that reads nothing stalls its writes early and holds
  little memory meanwhile (the kernel's own buffer on loopback grows to 4 MB otherwise).

The body's own deadline is the request's (specviz.workshop.service.request.read_json)."""

from __future__ import annotations

import asyncio
import functools
import logging
import socket

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 16 * 1024  # a request's line and headers (h11's own default, stated)
SEND_BUFFER_BYTES = 16 * 1024  # SO_SNDBUF per connection (Linux doubles it for its bookkeeping)
WRITE_HIGH_WATER_BYTES = 16 * 1024  # the transport's buffer above which a write waits for the client
KEEP_ALIVE_S = 5.0


class DeadlineH11(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request's head and for each stalled write."""

    def __init__(self, *args, read_timeout_s: float, write_timeout_s: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.read_timeout_s, self.write_timeout_s = read_timeout_s, write_timeout_s
        self._head_timer: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER_BYTES)
        self._await_head()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._head_timer, self._write_timer):
            if timer is not None:
                timer.cancel()
        super().connection_lost(exc)

    def _await_head(self) -> None:
        """From now on, the next request's head has read_timeout_s to arrive."""
        if self._head_timer is not None:
            self._head_timer.cancel()
        waiting_after = self.cycle  # a request that starts replaces the cycle
        self._head_timer = self.loop.call_later(self.read_timeout_s, self._head_late, waiting_after)

    def _head_late(self, waiting_after) -> None:
        if self.cycle is waiting_after and not self.transport.is_closing():
            log.info("closing a connection from %s: no request head within %g s", self.client, self.read_timeout_s)
            self.transport.close()

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(self.write_timeout_s, self._write_stalled)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _write_stalled(self) -> None:
        log.info("aborting a connection from %s: it read nothing for %g s", self.client, self.write_timeout_s)
        self._write_timer = None
        self.transport.abort()  # close() would wait for the buffer to drain, which a client that reads nothing never lets


def server_config(app, host: str, port: int, max_connections: int, read_timeout_s: float, write_timeout_s: float, **options) -> uvicorn.Config:
    """uvicorn's config for a service: DeadlineH11, at most max_connections open (more answered 503), keep-alive
    KEEP_ALIVE_S, heads of at most MAX_HEAD_BYTES. options: more of uvicorn.Config's (a test's lifespan="off")."""
    protocol = functools.partial(DeadlineH11, read_timeout_s=read_timeout_s, write_timeout_s=write_timeout_s)
    return uvicorn.Config(
        app, host=host, port=port, http=protocol, limit_concurrency=max_connections, timeout_keep_alive=KEEP_ALIVE_S,
        h11_max_incomplete_event_size=MAX_HEAD_BYTES, log_level="warning", timeout_graceful_shutdown=5, **options,
    )  # fmt: skip
