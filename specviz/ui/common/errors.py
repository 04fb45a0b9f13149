"""What a participant sees when a page fails: a message, never a traceback or a server path. (friendly_error: a run's
failure as one message that says what to do, for the pages that show it themselves.)

app.py runs every page inside guard(). An uncaught exception from the page is logged with its traceback under a short
incident id (the owner finds it in the server's log) and the page shows one line naming that id; the script then ends
normally, so the session stays usable and its next rerun runs the page afresh. The owner (local mode) also sees the
traceback. Streamlit's control flow passes through untouched: st.rerun and st.stop raise BaseExceptions (not caught
here), and a fragment's error that Streamlit already drew (FragmentHandledException) is re-raised.

What guard() cannot reach, Streamlit draws itself: an exception in a widget callback (they run before the script), in
a fragment's own rerun, or in Streamlit's reading of a widget value before the script runs. How much it shows is the
process-wide option `client.showErrorDetails` ("full" by default: type, message and traceback with server paths).
So the first shared-mode session a real server runs sets it to "none" for the process (a generic message; the log
keeps the rest), before that session can reach any of those paths. Once set it stays: the owner's own tracebacks
are then in the log (and, for the page itself, still on the page).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st
import torch
from streamlit.errors import FragmentHandledException
from streamlit.logger import get_logger

from specviz.ui.common import st_internals, widgets
from specviz.ui.common.access import current_policy
from specviz.workshop.saved_runs import disk_full, write_problem

log = get_logger(__name__)  # streamlit's handler: the traceback lands in the server's log

OPTION = "client.showErrorDetails"
HIDDEN = "none"


def friendly_error(exc: BaseException) -> str:
    """An exception from a run -> one message that says what to do (no traceback; the traceback goes to the log)."""
    if isinstance(exc, torch.OutOfMemoryError):
        return "Out of memory. Press Reset, then lower max new tokens or k, pick a smaller model, dtype bfloat16, or the CPU."
    if isinstance(exc, ValueError):  # includes ModelLoadError: its message already says what to do
        return str(exc)
    log.exception("step-through run failed")
    return f"Unexpected {type(exc).__name__}: {exc}. Press Reset to start again; if it happens again, try another model or device."


def real_server() -> bool:
    """A real Streamlit server runs this script (not AppTest's mocked runtime, not bare python)."""
    return st_internals.server_runtime() is not None


def hide_error_details() -> None:
    """Streamlit's own error boxes show a generic message only, for the whole process (see the module docstring)."""
    if st.get_option(OPTION) != HIDDEN:
        st.set_option(OPTION, HIDDEN)
        log.info("specviz: shared mode, so Streamlit's error boxes show no details (%s = %r)", OPTION, HIDDEN)


def message(exc: BaseException, incident: str) -> str:
    """The one line a participant sees for an uncaught exception: what to do, and the incident id for the owner."""
    if disk_full(exc):
        return f"This page could not finish: {write_problem(exc)}. (Incident {incident}.)"
    return (
        f"Something went wrong on this page (incident {incident}; the server's log has the details). Press **Reset** or "
        "reload the page to go on; if it happens again, tell the person running the server."
    )


@contextmanager
def guard() -> Iterator[None]:
    """Around a page's run (app.py): an uncaught exception becomes a logged incident and a one-line message."""
    widgets.tolerate_unreadable_values()
    shared = current_policy().shared
    if shared and real_server():
        hide_error_details()
    try:
        widgets.say_dropped()
        yield
    except FragmentHandledException:
        raise  # Streamlit drew it already (as client.showErrorDetails says) and ends the run
    except Exception as exc:
        incident = secrets.token_hex(4)
        log.error("specviz incident %s: the page raised %s", incident, type(exc).__name__, exc_info=exc)
        st.error(message(exc, incident), icon="⚠️")
        if not shared:
            st.exception(exc)  # the owner, on their own machine: the traceback too
