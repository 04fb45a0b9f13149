"""Issue 42, item 8, on a real shared-mode server: a session refused by the per-client cap of sessions shows the
message and then the server closes its websocket (code 1008) and the session, so a client over its cap holds no
connection open; an admitted session of the same address stays connected. No browser: the protocol client."""

from __future__ import annotations

import time

import pytest
from websockets.exceptions import ConnectionClosed

from specviz.loadtest.protocol import StSession
from tests.browser.conftest import run_app

FORWARDED = {"X-Forwarded-For": "203.0.113.9"}  # one client address, as the room's balancer says it


def closed_code(session: StSession, within_s: float) -> int | None:
    """The close code once the server closes the session's websocket (reading what else it sends meanwhile), or None."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            session._ws.recv(timeout=max(0.1, deadline - time.monotonic()))
        except ConnectionClosed as exc:
            return exc.rcvd.code if exc.rcvd is not None else -1
        except TimeoutError:
            return None
    return None


@pytest.fixture()
def server(tmp_path, tiny_dir):
    env = {
        "SPECVIZ_MODE": "shared", "SPECVIZ_TARGETS": str(tiny_dir["llama"]), "SPECVIZ_RUN_DIR": str(tmp_path / "runs"),
        "SPECVIZ_MAX_SESSIONS_PER_CLIENT": "1",
    }  # fmt: skip
    with run_app(tmp_path / "server.log", env=env) as handle:
        yield handle


def test_a_session_over_the_cap_is_told_then_hung_up_on(server):
    with StSession(server.url, headers=FORWARDED) as admitted:
        assert not any("sessions open" in a for a in admitted.alerts()), admitted.alerts()
        with StSession(server.url, headers=FORWARDED) as refused:
            assert any("already has 1 sessions open" in a for a in refused.alerts()), refused.alerts()  # the message first
            assert closed_code(refused, within_s=30) == 1008  # then the server hangs up
        admitted.rerun()  # the admitted session of the same address is still connected and served
        assert not admitted.exceptions() and not any("sessions open" in a for a in admitted.alerts())
    assert "Traceback" not in server.log()
