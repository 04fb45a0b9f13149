"""Browser sessions seen recently, and freeing those whose tab went away or that sat idle (SessionRegistry; the
sweeper that calls it every few seconds is specviz.workshop.sweeper). Plain Python (threading), no streamlit."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class SessionRegistry:
    """Sessions seen recently: id -> (their state, last activity, when their connection was first seen gone).

    sweep() frees a session whose connection has been gone for gone_after_s (everything it kept) and, once, the runs
    of a connected session idle for idle_after_s. Thread-safe; the free callback runs outside the lock.

    Each session is noted with its client's address (specviz.workshop.clients), so admits() can cap the sessions one
    address holds at once."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, list] = {}  # id -> [state, last_touch, gone_since, idle_freed, client address]

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def touch(self, session_id: str, state: object, address: str | None = None) -> None:
        with self._lock:
            self._entries[session_id] = [state, self._clock(), None, False, address]

    def sessions_of(self, address: str) -> int:
        """Sessions of this client address still connected (a session the sweeper saw gone no longer counts)."""
        with self._lock:
            return sum(1 for e in self._entries.values() if e[4] == address and e[2] is None)

    def admits(self, session_id: str, address: str, cap: int) -> bool:
        """May this session be served: it is known already, or its address holds fewer than cap sessions (cap 0: no cap)."""
        with self._lock:
            if not cap or session_id in self._entries:
                return True
            return sum(1 for e in self._entries.values() if e[4] == address and e[2] is None) < cap

    def states(self) -> list[object]:
        """The state of every session tracked now (a snapshot; the sweeper reads what they hold)."""
        with self._lock:
            return [entry[0] for entry in self._entries.values()]

    def sweep(
        self,
        is_active: Callable[[str], bool],
        free: Callable[[str, object, bool], None],
        gone_after_s: float,
        idle_after_s: float,
    ) -> int:
        """Free what is due; returns how many sessions were freed (wholly or their runs)."""
        now = self._clock()
        due: list[tuple[str, object, bool]] = []
        with self._lock:
            for sid, entry in list(self._entries.items()):
                state, last, gone_since, idle_freed, _ = entry
                if not is_active(sid):
                    if gone_since is None:
                        entry[2] = now
                    elif now - gone_since >= gone_after_s:
                        due.append((sid, state, True))
                        del self._entries[sid]
                    continue
                entry[2] = None  # reconnected
                if not idle_freed and now - last >= idle_after_s:
                    entry[3] = True
                    due.append((sid, state, False))
        for sid, state, whole in due:
            try:
                free(sid, state, whole)
            except Exception:
                log.exception("freeing session %s failed", sid)
        return len(due)
