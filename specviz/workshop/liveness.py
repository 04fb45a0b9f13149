"""Replica liveness on the room's store: a replica waits for the store before it serves (saying so while it waits),
then says every HEARTBEAT_EVERY_S that it is alive (a key with a TTL of HEARTBEAT_TTL_S: a replica that died drops
out by itself). Any host sharing the store lists the live ones with store.replicas() (name -> host and pid).

    store = open_store()
    wait_for_store(store)                          # logs "unreachable: waiting" until it answers (Redis down)
    Heartbeat(store, "r1", "host-a:8501").start()  # a daemon thread; a missed beat is logged once, not fatal

A room's replica does both before Streamlit starts (replica_start, from specviz.workshop.replicas.supervisor's WARM_START).
Plain Python: no streamlit.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Mapping

from specviz.workshop.store import Store, check_name, open_store

log = logging.getLogger(__name__)

HEARTBEAT_EVERY_S = 5.0
HEARTBEAT_TTL_S = 3 * HEARTBEAT_EVERY_S  # two missed beats and the replica is gone from alive()
RETRY_EVERY_S = 2.0  # wait_for_store's retry
SAY_AGAIN_S = 60.0  # while waiting, the log says so again this often


def wait_for_store(store: Store, stop: threading.Event | None = None, every_s: float = RETRY_EVERY_S) -> bool:
    """Return once the store answers (True), or when stop is set (False). While it does not, log why (at once, then
    every SAY_AGAIN_S): a replica that starts while Redis is down says so and waits instead of serving pages that
    cannot save."""
    stop = stop or threading.Event()
    waited, said = 0.0, -SAY_AGAIN_S
    while True:
        try:
            store.ping()
        except OSError as exc:
            if waited - said >= SAY_AGAIN_S:
                log.warning("%s; this replica waits for it before it serves (waiting %.0f s so far)", exc, waited)
                said = waited
        else:
            if waited:
                log.warning("the room's store (%s) answers after %.0f s: this replica serves", store.description, waited)
            return True
        if stop.wait(every_s):
            return False
        waited += every_s


class Heartbeat:
    """A daemon thread that says every every_s that this replica is alive (store.heartbeat with a TTL of ttl_s). A
    store that stops answering is logged once (and once when it answers again); the beats go on trying."""

    def __init__(self, store: Store, replica: str, info: str = "", every_s: float = HEARTBEAT_EVERY_S, ttl_s: float = HEARTBEAT_TTL_S) -> None:
        self.store, self.replica, self.info = store, check_name(replica), info
        self.every_s, self.ttl_s = every_s, ttl_s
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="specviz-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def beat(self) -> bool:
        """One beat; False when the store did not take it."""
        try:
            self.store.heartbeat(self.replica, self.ttl_s, self.info)
        except OSError as exc:
            log.debug("heartbeat missed: %s", exc)
            return False
        return True

    def _run(self) -> None:
        ok = True
        while not self.stop.is_set():
            now_ok = self.beat()
            if now_ok != ok:
                log.warning("replica %s: %s", self.replica, "the room's store answers again" if now_ok else f"cannot reach the room's store ({self.store.description}); it keeps trying")
            ok = now_ok
            self.stop.wait(self.every_s)


def replica_start(env: Mapping[str, str] | None = None) -> Heartbeat | None:
    """Before a room's replica serves: wait for the room's store, then start its heartbeat (SPECVIZ_REPLICA_ID names
    it; without one, nothing happens). A bad SPECVIZ_STORE is left for the pages to say."""
    env = os.environ if env is None else env
    replica = env.get("SPECVIZ_REPLICA_ID", "").strip()
    if not replica:
        return None
    try:
        store = open_store(env)
        name = check_name(replica)
    except ValueError as exc:
        log.warning("replica liveness is off: %s", exc)
        return None
    wait_for_store(store)
    return Heartbeat(store, name, f"{socket.gethostname()} pid {os.getpid()}").start()
