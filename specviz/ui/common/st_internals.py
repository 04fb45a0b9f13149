"""The one module that reaches into Streamlit's internals (streamlit.runtime, streamlit.proto, streamlit.web), so a
Streamlit upgrade that moves them touches this file only (tests/test_boundaries.py checks that no other ui module,
page or app.py imports them).

Each accessor imports on call, as the callers did before: a missing internal raises ImportError (or AttributeError)
there, and the callers that can work without it (push, the client doors, widgets, navigation) catch it and fall back.
Public Streamlit (st.*, streamlit.logger, streamlit.errors) is imported where it is used."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# --- the running script and the server ----------------------------------------------------------------------------


def script_run_ctx() -> Any | None:
    """The running script's context (session_id, session_state), or None outside a script run."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    return get_script_run_ctx()


def session_id_now() -> str | None:
    """This browser session's id, or None outside a script run."""
    ctx = script_run_ctx()
    return ctx.session_id if ctx is not None else None


def runtime_instance() -> Any | None:
    """Streamlit's runtime, or None outside a server (bare python). AppTest's mocked runtime counts."""
    from streamlit import runtime

    return runtime.get_instance() if runtime.exists() else None


def server_runtime() -> Any | None:
    """The runtime of a real Streamlit server, or None (AppTest's mocked runtime, bare python)."""
    from streamlit.runtime import Runtime

    instance = runtime_instance()
    return instance if type(instance) is Runtime else None


def runtime_started() -> bool:
    """A Runtime exists already (a plain `streamlit run` started its server before the first script run)."""
    from streamlit.runtime import Runtime

    return Runtime.exists()


def fragment_id_now() -> str | None:
    """The id of the fragment the calling thread's script runs in (None outside one). RuntimeError: not a script
    thread."""
    from streamlit.runtime.scriptrunner_utils.script_run_context import ThreadState

    return ThreadState.get().fragment_id


def uses_pages_directory() -> bool:
    """Streamlit's legacy pages/ routing is on (False where this Streamlit has no such flag)."""
    try:
        from streamlit.runtime.pages_manager import PagesManager
    except ImportError:
        return False
    return bool(getattr(PagesManager, "uses_pages_directory", False))


# --- classes specviz wraps or reads (the caller checks they are as it knows them) ------------------------------------


def app_session() -> type:
    """streamlit.runtime.app_session.AppSession: a browser session on the server."""
    from streamlit.runtime.app_session import AppSession

    return AppSession


def app_session_state() -> type:
    """streamlit.runtime.app_session.AppSessionState (SHUTDOWN_REQUESTED, ...)."""
    from streamlit.runtime.app_session import AppSessionState

    return AppSessionState


def rerun_data() -> type:
    """streamlit.runtime.scriptrunner_utils.script_requests.RerunData: what a rerun request carries."""
    from streamlit.runtime.scriptrunner_utils.script_requests import RerunData

    return RerunData


def back_msg() -> type:
    """The protobuf of a browser's message to the server (BackMsg)."""
    from streamlit.proto.BackMsg_pb2 import BackMsg

    return BackMsg


def uploaded_file_manager() -> type:
    """streamlit.runtime.memory_uploaded_file_manager.MemoryUploadedFileManager: where uploads wait in memory."""
    from streamlit.runtime.memory_uploaded_file_manager import MemoryUploadedFileManager

    return MemoryUploadedFileManager


def widget_state_types() -> tuple[type, type, type]:
    """(WidgetState, Serialized, WStates): a client's widget value and the session state's store of them."""
    from streamlit.proto.WidgetStates_pb2 import WidgetState
    from streamlit.runtime.state.session_state import Serialized, WStates

    return WidgetState, Serialized, WStates


def max_widget_state_size_reader() -> Callable[[], int]:
    """What reads server.maxWidgetStateSize in bytes (the largest client message the server handles), when called."""
    from streamlit.runtime.runtime_util import get_max_widget_state_size_bytes

    return get_max_widget_state_size_bytes


def starlette_app_module() -> Any:
    """streamlit.web.server.starlette.starlette_app (its create_upload_routes builds the upload PUT route)."""
    from streamlit.web.server.starlette import starlette_app

    return starlette_app


def starlette_server_module() -> Any:
    """streamlit.web.server.starlette.starlette_server (its _get_uvicorn_config_kwargs sets the websocket's limits)."""
    from streamlit.web.server.starlette import starlette_server

    return starlette_server
