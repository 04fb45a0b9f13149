"""Redraw a page from the server: one watcher per process reruns the pages whose view of the room's presentation
went out of date, instead of every page polling it.

Streamlit reruns a page when its browser asks: a click, or a fragment's run_every timer. A follower's page polled the
presentation file every 0.5 s, so with 15 followers on a replica the process ran 30 fragment reruns a second doing
nothing, and a presenter's Step reached each follower only at its next tick, 0-0.5 s later, after which its whole page
(sidebar included) was drawn again (docs/rooms.md).

Here one daemon thread per process waits for the presentation to change and re-reads it only then: on Redis it
waits for the change's announcement (pub/sub, specviz.workshop.store), with a poll of the stamp as the fallback in
case one was lost; on a run directory it looks at the file's stamp every POLL_S, as it always did. While the room's store is unreachable it
keeps the presentation it last read (followers keep their view) and tries again. A follower's page registers what it drew (the key of the presentation, computed by
specviz.ui.room.follow) and the id of its stage fragment. When the same presentation moved on (a Step, a round picked
in the presenter's inspector) the watcher asks that session to rerun its stage fragment, which looks the presentation
up again and draws it. Everything else (a presentation that starts, stops or is taken over) is a whole-page change
the pages' own poll picks up. A participant's Step in flight in this process goes first, for MAX_DEFER_S at most
(with the room stepping, some Step is nearly always in flight); nothing else holds the followers up: another
participant's long job (a benchmark sweep, a lab) and the background baselines take turns of other kinds
(specviz.workshop.queues.TurnKind), and a follower's redraw takes no model turn. It never reads or writes a
session's state, and it asks a session to redraw only itself, from the room's store every replica shares.

How: the rerun is queued as the browser's own fragment reruns are (a RerunData for the fragment, on the server's
event loop), without widget values, so the session keeps the ones its browser last sent: a click that is on its way
is not undone. These are Streamlit internals, so ``available()`` checks they are there; where they are not
(AppTest, another Streamlit version), pages poll (specviz.ui.room.follow.watch). Followers keep a slow poll as a
safety net either way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from specviz.ui.common import st_internals

log = logging.getLogger(__name__)

POLL_S = 0.05  # the watcher looks this often at the stamp (one stat) where changes are not announced, or a redraw waits
WAIT_S = 1.0  # where they are (Redis), the longest one wait for an announcement lasts
MAX_DEFER_S = 0.5  # the longest a due redraw waits for participants' Steps in flight in this process


@dataclass
class Registration:
    """What a follower's page drew of the presentation, and the fragment that redraws it."""

    key: Hashable  # the key of the presentation the page drew (specviz.ui.room.follow: id and version)
    presentation_id: str  # the presentation it follows
    fragment_id: str  # its stage fragment
    pushed: Hashable = None  # the key a rerun was last asked for (not asked again until the page registers anew)


def _app_session(session_id: str):
    """The AppSession of an active session in this process, or None."""
    instance = st_internals.runtime_instance()
    if instance is None:
        return None
    info = instance._session_mgr.get_active_session_info(session_id)
    return None if info is None else info.session


def current_fragment_id() -> str | None:
    """The id of the fragment the calling code runs in, or None (outside a fragment, or another Streamlit)."""
    try:
        return st_internals.fragment_id_now()
    except (ImportError, AttributeError, RuntimeError):  # RuntimeError: not a script thread
        return None


def available() -> bool:
    """This process runs Streamlit's server, and its internals are the ones push_rerun uses."""
    try:
        instance, app_session = st_internals.runtime_instance(), st_internals.app_session()
        fields = st_internals.rerun_data().__dataclass_fields__
        return (
            instance is not None
            and hasattr(instance._session_mgr, "get_active_session_info")
            and all(hasattr(app_session, name) for name in ("has_fragment", "_create_scriptrunner"))
            and {"fragment_id", "widget_states", "query_string", "page_script_hash"} <= set(fields)
        )
    except Exception:  # an import or attribute missing in another Streamlit version
        return False


def push_rerun(session_id: str, fragment_id: str) -> bool:
    """Ask session ``session_id`` to rerun its fragment ``fragment_id`` (on the server's event loop), keeping the
    widget values its browser last sent. False: no such active session."""
    app = _app_session(session_id)
    if app is None:
        return False
    app._event_loop.call_soon_threadsafe(_rerun_fragment, app, fragment_id)
    return True


def _rerun_fragment(app, fragment_id: str) -> None:
    """What AppSession.request_rerun does for a browser's fragment rerun, with widget_states None (keep them)."""
    AppSessionState, RerunData = st_internals.app_session_state(), st_internals.rerun_data()
    if app._state == AppSessionState.SHUTDOWN_REQUESTED or not app.has_fragment(fragment_id):
        return  # closing, or a full run since dropped the fragment (that run drew the page anew)
    client = app._client_state
    rerun = RerunData(query_string=client.query_string, page_script_hash=client.page_script_hash, page_name=client.page_name,
                      fragment_id=fragment_id, widget_states=None)  # fmt: skip
    runner = app._scriptrunner
    if runner is not None and runner.request_rerun(rerun):
        return
    app._create_scriptrunner(rerun)


class PresentationWatcher:
    """The process's watcher (module docstring). stamp() is cheap (a stat, or the announcements heard), read() reads
    the presentation, key_of(p, mode) says what a page in that mode draws of it, in_flight() counts the participants'
    Steps holding a model turn in this process (specviz.ui.room.present.steps_in_flight), wait(since, s) blocks until
    the stamp differs from since or s passed (None where nothing is announced: the watcher sleeps POLL_S between looks),
    clock() is time.monotonic."""

    def __init__(self, stamp: Callable[[], object], read: Callable[[], object], key_of: Callable[[object, str], Hashable],
                 in_flight: Callable[[], int], push: Callable[[str, str], bool] = push_rerun,
                 clock: Callable[[], float] = time.monotonic, wait: Callable[[object, float], object] | None = None) -> None:  # fmt: skip
        self._stamp, self._read, self._key_of, self._in_flight, self._push = stamp, read, key_of, in_flight, push
        self._clock, self._wait = clock, wait
        self._unreachable = False  # the last read failed (said once in the log, not on every look)
        self._deferred_since: float | None = None  # when a due redraw first waited for a Step
        self._lock = threading.Lock()
        self._pages: dict[str, Registration] = {}
        self._last_stamp: object = object()  # nothing read yet
        self._presentation: object = None
        self._thread: threading.Thread | None = None

    def register(self, session_id: str, registration: Registration) -> None:
        with self._lock:
            self._pages[session_id] = registration
        self._start()

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._pages.pop(session_id, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pages)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="specviz-presentation-watcher", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while True:
            self._pause()
            try:
                self.check()
            except Exception:  # the watcher must not die; the pages' safety-net poll still redraws them
                log.exception("presentation watcher")

    def _pause(self) -> None:
        """Until the next look: an announcement (or WAIT_S), or POLL_S where nothing is announced or a redraw waits for
        a Step in flight (the stamp does not move for that)."""
        if self._wait is None or self._deferred_since is not None or self._unreachable:
            time.sleep(POLL_S if not self._unreachable else WAIT_S)
            return
        try:
            self._wait(self._last_stamp, WAIT_S)
        except OSError:  # the store went away: check() says so
            time.sleep(POLL_S)

    def check(self) -> int:
        """One look: re-read the presentation if its file changed, then ask every follower whose page drew an
        earlier version of the same presentation to redraw (after a participant's Step in flight here, for
        MAX_DEFER_S at most). Returns how many reruns were asked for."""
        try:
            stamp = self._stamp()
            if stamp != self._last_stamp:
                self._presentation, self._last_stamp = self._read(), stamp
        except OSError as exc:  # the room's store is unreachable: keep what was read, look again next time
            if not self._unreachable:
                log.warning("presentation watcher: %s; followers keep their view", exc)
            self._unreachable = True
            return 0
        if self._unreachable:
            log.info("presentation watcher: the room's store is back")
            self._unreachable = False
        p = self._presentation
        if p is None:
            self._deferred_since = None
            return 0
        want = self._key_of(p, "following")
        with self._lock:
            due = [(sid, reg) for sid, reg in self._pages.items() if reg.presentation_id == p.id and want not in (reg.key, reg.pushed)]
            if not due:
                self._deferred_since = None
                return 0
            if self._in_flight():  # a Step goes first, for a bounded time
                now = self._clock()
                self._deferred_since = now if self._deferred_since is None else self._deferred_since
                if now - self._deferred_since < MAX_DEFER_S:
                    return 0
            self._deferred_since = None
            for _, reg in due:
                reg.pushed = want
        asked = 0
        for sid, reg in due:
            if self._push(sid, reg.fragment_id):
                asked += 1
            else:
                self.forget(sid)  # the session is gone
        return asked
