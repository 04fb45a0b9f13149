"""The presenter key against a raw client in a real room (`python -m specviz room --replicas 2`, HAProxy with
`option forwardfor`, the protocol client, no browser): every guess from a fresh websocket session (a fresh cookie
jar, so the guesses land on both replicas), several client addresses (127.0.0.x sources: HAProxy passes each on in
X-Forwarded-For). One client is locked out after three wrong keys however many sessions it opens, and a clear_cache
(which clears the sender's session state) does not give it more; the room as a whole takes ROOM_MAX_WRONG wrong keys,
after which a suspect's key (three wrong keys on record), the right one included, is not even checked, a client with
fewer is checked but locked by each wrong key, and the teacher's right key from a new address presents (issue 42,
item 4). Known-bad (the code before): the count lived in the session, so each fresh session had three more tries and
the fourth session's right key presented; later, the room's lock held everyone, so a few addresses guessing kept the
teacher out."""

from __future__ import annotations

import json

import pytest

from specviz.loadtest.protocol import StSession
from specviz.workshop import presenter_key as pk
from specviz.workshop.presentation import PresentationStore
from tests.browser.test_room import HAPROXY, room

KEY = "a presenter key for the test"


def guess(url: str, source: str, key: str, clear_cache: bool = False) -> tuple[str, str | None]:
    """One try at the key from a fresh session (its own cookie jar) connecting from `source`: what the sidebar said,
    and the replica that served it."""
    with StSession(url, source=source) as session:
        if clear_cache:  # the developer menu's clear: it clears this session's state (and every cache)
            session.clear_cache()
            session.rerun()
        session.set_widget("present_key", key)
        session.click("present")
        said = " ".join(session.alerts())
        replica = next((c.value for c in session.cookies if c.name == "SERVERID"), None)
        assert not session.exceptions(), session.exceptions()
    return said, replica


@pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (scripts/test.sh installs it: apt-get install haproxy)")
def test_fresh_sessions_and_clear_cache_do_not_reset_the_count_and_the_room_locks_for_everyone(tmp_path, tiny_dir):
    with room(tmp_path, str(tiny_dir["llama"]), SPECVIZ_PRESENTER_KEY=KEY) as (status, log, run_dir):
        url, replicas = status["url"], set()
        for n in range(pk.CLIENT_FREE_TRIES):
            said, replica = guess(url, "127.0.0.11", f"guess number {n}")
            replicas.add(replica)
            assert "That is not the presenter key" in said, said
        assert "wait 30 s" in said and "from your address" in said
        said, replica = guess(url, "127.0.0.11", KEY)  # the fourth fresh session, with the right key
        replicas.add(replica)
        assert "Too many wrong keys from your address" in said and "no key is checked" in said, said
        said, _ = guess(url, "127.0.0.11", KEY, clear_cache=True)
        assert "Too many wrong keys from your address" in said, said
        assert replicas == {"r1", "r2"}  # the count is the room's, not one replica's
        assert PresentationStore(run_dir).read() is None

        others = [f"127.0.0.{20 + i}" for i in range(pk.ROOM_MAX_WRONG - pk.CLIENT_FREE_TRIES)]
        for source in others:  # each of them a first wrong key: together they spend the room's budget
            said, _ = guess(url, source, "another guess")
            assert "That is not the presenter key" in said, said
        said, _ = guess(url, others[0], "a second guess")  # one wrong key on record: checked, then locked at once
        assert "That is not the presenter key" in said and "from your address" in said, said
        said, _ = guess(url, others[0], KEY)
        assert "Too many wrong keys from your address" in said and "no key is checked" in said, said
        said, _ = guess(url, "127.0.0.11", KEY)  # the suspect: not checked while the room is locked
        assert "Too many wrong keys" in said and "no key is checked" in said, said
        assert PresentationStore(run_dir).read() is None
        said, _ = guess(url, "127.0.0.99", KEY)  # the teacher, from an address with no wrong keys: the right key works
        assert "Step once first" in said and "Too many wrong keys" not in said, said  # the key got in (no run to present yet)

        guard = json.loads((run_dir / pk.GUARD_NAME).read_text())
        assert len(guard["room"]) >= pk.ROOM_MAX_WRONG and set(guard["clients"]) == {"127.0.0.11", *others}
        text = log.read_text(errors="replace")
        assert KEY not in text and KEY not in (run_dir / pk.GUARD_NAME).read_text() and "Traceback" not in text
