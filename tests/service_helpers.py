"""A real uvicorn server in a thread for a specviz Service (or any ASGI app), on a free loopback port; and the one
bounded poll (wait_until) the threaded tests wait on instead of sleeping."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator


@contextlib.contextmanager
def running(app, host: str = "127.0.0.1", timeout_s: float = 30.0, config=None) -> Iterator[str]:
    """Serve app (or, given, a uvicorn config) until the block ends; yields its root URL (http://127.0.0.1:PORT).
    Always stops the server."""
    import uvicorn

    server = uvicorn.Server(config or uvicorn.Config(app, host=host, port=0, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, name="test-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(15)


def serving(service) -> contextlib.AbstractContextManager[str]:
    """A specviz Service served as `specviz serve` serves it (its connection limits and deadlines); yields the root URL."""
    from specviz.workshop.service.server import server_config

    return running(None, config=server_config(service, "127.0.0.1", 0, lifespan="off"))


def wait_until(condition, timeout_s: float = 60.0, what: str = "the condition") -> None:
    """Poll condition() until it is true (an event the code under test causes), or fail after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout_s:.0f} s")
        time.sleep(0.02)
