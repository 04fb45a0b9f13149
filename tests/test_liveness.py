"""Replica liveness on the room's store (specviz.workshop.liveness): heartbeats with a TTL on both backends, and a
replica that starts while Redis is down says so and waits until it answers."""

from __future__ import annotations

import logging
import threading
import time

from specviz.workshop import liveness
from specviz.workshop.liveness import Heartbeat, replica_start, wait_for_store
from specviz.workshop.store import open_store
from tests.store_helpers import needs_redis


def test_a_heartbeat_keeps_a_replica_alive_until_it_stops(room_store):
    beat = Heartbeat(room_store, "r1", "host-a pid 1", every_s=0.05, ttl_s=0.4).start()
    deadline = time.monotonic() + 5
    while "r1" not in room_store.replicas() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert room_store.replicas() == {"r1": "host-a pid 1"}
    beat.stop.set()
    beat._thread.join(5)
    time.sleep(0.5)  # past its TTL with no beat: gone by itself
    assert room_store.replicas() == {}


def test_no_replica_id_no_heartbeat(tmp_path):
    assert replica_start({"SPECVIZ_RUN_DIR": str(tmp_path)}) is None


@needs_redis
def test_a_replica_that_starts_while_redis_is_down_says_so_and_waits(redis_server, caplog, monkeypatch):
    redis_server.stop()
    store = open_store({"SPECVIZ_STORE": redis_server.url})
    refused = threading.Event()
    real_ping = store.ping

    def ping():
        try:
            real_ping()
        except OSError:
            refused.set()
            raise

    monkeypatch.setattr(store, "ping", ping)
    done: list[bool] = []
    caplog.set_level(logging.WARNING, logger=liveness.__name__)
    waiter = threading.Thread(target=lambda: done.append(wait_for_store(store, every_s=0.05)))
    waiter.start()
    assert refused.wait(10)  # it tried, and Redis was not there
    assert not done  # still waiting: it does not serve
    redis_server.start()
    waiter.join(10)
    assert done == [True]
    text = caplog.text
    assert "unreachable" in text and "waits for it before it serves" in text and "this replica serves" in text
    assert "127.0.0.1" in text and f":{redis_server.port}/0" in text


@needs_redis
def test_a_stopped_wait_gives_up(redis_server):
    redis_server.stop()
    stop = threading.Event()
    stop.set()
    assert wait_for_store(open_store({"SPECVIZ_STORE": redis_server.url}), stop, every_s=0.05) is False
