"""The presenter key's limits in the app on both backends of the room's store (the directory, a real redis-server):
wrong keys from one client lock it out in a new session too, and while Redis is away the page says the key cannot be
checked (nothing is compared) and the counts are still there when it returns."""

from __future__ import annotations

import pytest

from specviz.workshop import presenter_key as pk
from specviz.workshop.queues import reset_queues
from tests.store_helpers import needs_redis
from tests.test_app_present import KEY, present, texts
from tests.test_app_saved_runs import _shared_room, page, room_runs  # noqa: F401  (room_runs is a fixture)
from tests.test_app_shared import click


@pytest.fixture()
def keyed_room(room_runs, monkeypatch):  # noqa: F811
    monkeypatch.setenv("SPECVIZ_PRESENTER_KEY", KEY)
    return room_runs


def test_wrong_keys_lock_out_the_client_in_a_new_session_on_both_backends(keyed_room):
    for _ in range(pk.CLIENT_FREE_TRIES):
        present(page(), "guess")
    assert keyed_room.store.get(pk.GUARD_NAME, pk.MAX_GUARD_BYTES) is not None  # counted in the room's store
    fresh = page()
    present(fresh, KEY)
    assert "Too many wrong keys from your address" in texts(fresh) and "no key is checked" in texts(fresh)


@needs_redis
def test_while_redis_is_away_the_key_cannot_be_checked_and_the_page_says_so(redis_server, monkeypatch, tiny_dir, tmp_path):
    _shared_room(monkeypatch, tiny_dir)
    monkeypatch.setenv("SPECVIZ_RUN_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("SPECVIZ_STORE", redis_server.url)
    monkeypatch.setenv("SPECVIZ_PRESENTER_KEY", KEY)
    reset_queues()
    for _ in range(pk.CLIENT_FREE_TRIES):
        present(page(), "guess")
    at = page()
    click(at, "step")
    redis_server.stop()
    present(at, KEY)
    shown = texts(at)
    assert "cannot be checked right now" in shown and "unreachable" in shown and not at.exception
    assert at.session_state["present_key"] == ""  # the key is never kept
    redis_server.start()
    present(at, KEY)
    assert "Too many wrong keys from your address" in texts(at)  # the counts survived the outage
    reset_queues()
