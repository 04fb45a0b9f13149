"""Streamlit's developer messages from a participant are dropped before Streamlit handles them.

A browser (or any websocket client) can send BackMsgs that Streamlit's developer menu sends, whatever
``client.toolbarMode`` hides: ``clear_cache`` clears ``st.cache_data`` and ``st.cache_resource`` for the whole
process (and the sender's session state: its presenter-key back-off too), ``load_git_info`` runs git commands on the
server's event loop (which every session's websocket waits on), ``set_run_on_save`` changes a developer's reload
setting. specviz keeps nothing a clear could take (specviz.workshop.resources), so a clear costs the room nothing
but cached theory figures; dropping these messages for every session in shared mode keeps even that, and the git
commands, off the server. The owner in local mode keeps Streamlit's behaviour.

These are Streamlit internals (``AppSession.handle_backmsg`` and the BackMsg oneof), so ``available()`` checks they
are there, as specviz.ui.room.push does; where they are not, nothing is installed and a warning says so (the registries
alone still keep the models, the watcher and the locks).
"""

from __future__ import annotations

from collections.abc import Callable

from streamlit.logger import get_logger

from specviz.workshop.resources import singleton

log = get_logger(__name__)  # streamlit's handler: the server's log shows what was dropped

DEVELOPER_MESSAGES = frozenset({"clear_cache", "load_git_info", "set_run_on_save"})


def available() -> bool:
    """Streamlit's AppSession dispatches BackMsgs in handle_backmsg, and the BackMsg oneof names our messages."""
    try:
        from streamlit.proto.BackMsg_pb2 import BackMsg
        from streamlit.runtime.app_session import AppSession

        fields = {f.name for f in BackMsg.DESCRIPTOR.oneofs_by_name["type"].fields}
        return callable(getattr(AppSession, "handle_backmsg", None)) and DEVELOPER_MESSAGES <= fields
    except Exception:  # an import, attribute or oneof missing in another Streamlit version
        return False


def install(is_local: Callable[[str], bool]) -> bool:
    """Once per process: drop the developer messages of every session for which is_local(session_id) is not True
    (an error there drops too). False where Streamlit's internals differ (nothing installed)."""
    return singleton("drop-developer-messages", lambda: _install(is_local))


def _install(is_local: Callable[[str], bool]) -> bool:
    if not available():
        log.warning("this Streamlit has no AppSession.handle_backmsg as specviz knows it: developer messages (clear_cache, ...) are not filtered")
        return False
    from streamlit.runtime.app_session import AppSession

    handle = AppSession.handle_backmsg

    def handle_backmsg(self, msg) -> None:
        kind = msg.WhichOneof("type")
        if should_drop(kind, self.id, is_local):
            log.info("dropped a %s message from session %s (shared mode)", kind, self.id[:8])
            return
        handle(self, msg)

    handle_backmsg.__wrapped__ = handle  # type: ignore[attr-defined]
    AppSession.handle_backmsg = handle_backmsg
    return True


def should_drop(kind: str | None, session_id: str, is_local: Callable[[str], bool]) -> bool:
    """A developer message from a session not in local mode (or whose mode cannot be told) is dropped; every other
    message is Streamlit's to handle."""
    if kind not in DEVELOPER_MESSAGES:
        return False
    try:
        return is_local(session_id) is not True
    except Exception:
        log.exception("could not tell the mode of session %s: its %s message is dropped", session_id[:8], kind)
        return True
