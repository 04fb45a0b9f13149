"""This browser session's client (specviz.workshop.clients decides what it means): read from the websocket Streamlit
holds for the session. Outside a script run (AppTest, bare python) the client is this machine's owner."""

from __future__ import annotations

from specviz.ui.common import st_internals
from specviz.workshop.clients import LOCAL, Client, identify

NO_SERVER = Client(LOCAL, True, "no server: a script or a test on this machine")
UNKNOWN = Client("unknown", False, "this server cannot tell where you connect from")


def current_client() -> Client:
    """The client of the session whose script is running now."""
    ctx = st_internals.script_run_ctx()
    return NO_SERVER if ctx is None else client_of(ctx.session_id)


def client_of(session_id: str) -> Client:
    """The client of the session ``session_id`` (any thread: the server's event loop too)."""
    server = st_internals.server_runtime()
    if server is None:
        return NO_SERVER  # AppTest (a mocked runtime) and bare runs: the script runs on this machine for its owner
    session_client = server.get_client(session_id)
    context = None if session_client is None else session_client.client_context
    if context is None:  # a real server that cannot say who is there: never the owner
        return UNKNOWN
    return identify(context.remote_ip, list(context.headers))
