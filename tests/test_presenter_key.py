"""The presenter key (specviz.workshop.presenter_key, plain Python): the owner's setting, the strength a key needs
(weak keys refused, a generated key strong), and the limits on wrong keys that every replica shares, per client
address and for the room, in one value of the room's store that holds no key (on the directory and on a real
redis-server). Each limit has a known-bad control:
the old per-session gate, which a new session or a cleared session state reset."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass

import pytest

from specviz.workshop import presenter_key as pk
from specviz.workshop.policy import load_policy
from specviz.workshop.presenter_key import KeyGuard, check_key, generate_key, key_weakness, presenter_key
from specviz.workshop.store import StoreUnavailable, open_store
from specviz.workshop.store.directory import DirectoryStore
from tests.store_helpers import needs_redis

KEY = "Tea-and-speculation-2026"


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def guard_text(store) -> str:
    return store.get(pk.GUARD_NAME, pk.MAX_GUARD_BYTES).decode()


def test_the_setting_and_the_comparison():
    assert presenter_key({}, {}) is None and presenter_key({"SPECVIZ_PRESENTER_KEY": "  "}, {}) is None
    assert presenter_key({}, {"presenter_key": KEY}) == KEY
    assert presenter_key({"SPECVIZ_PRESENTER_KEY": "env"}, {"presenter_key": KEY}) == "env"
    assert check_key(KEY, KEY) and check_key(f" {KEY} ", KEY) and not check_key(KEY[:-1], KEY) and not check_key("", KEY)
    assert not check_key("anything", None) and not check_key(None, KEY) and not check_key([KEY], KEY)


def test_the_key_in_the_secrets_table_is_accepted_by_the_policy_and_not_kept_in_it():
    policy = load_policy(env={}, secrets={"presenter_key": KEY, "mode": "shared"})
    assert KEY not in repr(policy)


@pytest.mark.parametrize(
    "weak",
    ["1234", "s3cret", "workshop", "correcthorse", "1234567890123456", "aaaaaaaaaaaaaaaaaaaaaaaa", "abcdefghijklmnopqrstuvwxyz",
     "Password1Password1", "ab12ab12ab12ab12ab12", "AAAAAAAAAAAAAAAA1"],
)  # fmt: skip
def test_weak_keys_are_refused_without_quoting_them(weak):
    why = key_weakness(weak)
    assert why is not None and why == key_weakness("x")  # the same words for every weak key: nothing about this one


@pytest.mark.parametrize("strong", [KEY, "correct horse battery staple", "a presenter key for the test", "xK9#mQ2$vL7!pR4@"])
def test_strong_keys_pass(strong):
    assert key_weakness(strong) is None


def test_a_generated_key_is_strong_and_new_each_time():
    keys = {generate_key() for _ in range(50)}
    assert len(keys) == 50 and all(key_weakness(k) is None and len(k) >= 24 for k in keys)


def test_a_weak_configured_key_turns_presenting_off_even_for_itself(room_store):
    guard = KeyGuard(room_store)
    assert guard.attempt("1234", "1234", "10.0.0.1").outcome == "weak"
    assert guard.attempt("x", None, "10.0.0.1").outcome == "off"
    assert room_store.get(pk.GUARD_NAME, 10) is None


def test_wrong_keys_from_one_client_lock_it_out_across_sessions_and_replicas(room_store):
    """Every KeyGuard is another session (or another replica): the count is the file's. Known-bad control: the old
    per-session gate gave every new session CLIENT_FREE_TRIES fresh tries."""
    clock = Clock()
    sessions = [KeyGuard(room_store, clock) for _ in range(pk.CLIENT_FREE_TRIES + 2)]
    for guard in sessions[: pk.CLIENT_FREE_TRIES - 1]:
        assert guard.attempt("guess", KEY, "10.0.0.1") == pk.Verdict("wrong")
    verdict = sessions[pk.CLIENT_FREE_TRIES - 1].attempt("guess", KEY, "10.0.0.1")
    assert verdict == pk.Verdict("wrong", pk.CLIENT_LOCK_S, "client")
    clock.now += 1
    assert sessions[-1].attempt(KEY, KEY, "10.0.0.1") == pk.Verdict("locked", pk.CLIENT_LOCK_S - 1, "client")  # even the right key waits
    assert KeyGuard(room_store, clock).attempt(KEY, KEY, "10.0.0.2").outcome == "ok"  # another client is not held up
    clock.now += pk.CLIENT_LOCK_S
    assert sessions[0].attempt("guess", KEY, "10.0.0.1") == pk.Verdict("wrong", 2 * pk.CLIENT_LOCK_S, "client")  # doubling
    clock.now += 2 * pk.CLIENT_LOCK_S
    assert sessions[1].attempt(KEY, KEY, "10.0.0.1").outcome == "ok"
    assert sessions[2].attempt("guess", KEY, "10.0.0.1") == pk.Verdict("wrong")  # the right key cleared its count

    @dataclass
    class SessionGate:  # the known-bad control: the count in the session, as before
        wrong: int = 0

        def attempt(self, given: str) -> str:
            self.wrong += 1
            return "locked" if self.wrong > pk.CLIENT_FREE_TRIES else "wrong"

    assert [SessionGate().attempt("guess") for _ in range(10)] == ["wrong"] * 10  # a fresh session each try: never locked


def _spend_the_rooms_budget(store, clock: Clock, suspect: str = "10.1.0.1") -> None:
    """One suspect (CLIENT_FREE_TRIES wrong keys) and single wrong keys from other addresses, one second apart,
    until the room has taken ROOM_MAX_WRONG: the room is locked for ROOM_WINDOW_S from the first."""
    for _ in range(pk.CLIENT_FREE_TRIES):
        clock.now += 1
        KeyGuard(store, clock).attempt("guess", KEY, suspect)
    for i in range(pk.ROOM_MAX_WRONG - pk.CLIENT_FREE_TRIES):
        clock.now += 1
        assert KeyGuard(store, clock).attempt("guess", KEY, f"10.1.2.{i}").outcome == "wrong"


def test_a_room_lock_holds_the_suspects_and_never_the_right_key_of_a_clean_client(room_store):
    """Many addresses spend the room's budget: a suspect's key (the right one included) is not compared until the
    oldest wrong key is ROOM_WINDOW_S old, but the teacher's right key from an address with no wrong keys presents.
    Known-bad (the code before): the room lock held everyone, so any attacker with a few addresses kept the teacher
    out for the whole workshop."""
    clock = Clock()
    first = clock.now + 1
    _spend_the_rooms_budget(room_store, clock)
    compared = []
    real = pk.check_key
    try:
        pk.check_key = lambda given, configured: compared.append(given) or real(given, configured)
        clock.now += pk.CLIENT_LOCK_S + 1  # the suspect's own lock is over; the room's is not
        locked = KeyGuard(room_store, clock).attempt(KEY, KEY, "10.1.0.1")
        assert locked.outcome == "locked" and locked.locked == "room" and compared == []  # a lock-out never compares the key
        assert locked.wait_s == pytest.approx(first + pk.ROOM_WINDOW_S - clock.now)
        assert KeyGuard(room_store, clock).attempt(KEY, KEY, "10.9.0.1") == pk.Verdict("ok")  # the teacher, never seen before
        assert KeyGuard(room_store, clock).attempt(KEY, KEY, "10.1.2.0") == pk.Verdict("ok")  # one wrong key of its own: not a suspect
    finally:
        pk.check_key = real
    clock.now = first + pk.ROOM_WINDOW_S + 0.5  # the oldest wrong key left the window: the suspect is compared again
    assert KeyGuard(room_store, clock).attempt(KEY, KEY, "10.1.0.1").outcome == "ok"


def test_during_a_room_lock_each_address_gets_a_few_spaced_guesses_an_hour_and_no_more(room_store):
    """The price of letting clean clients in: an address is compared at most CLIENT_FREE_TRIES times while the room
    is locked, each wrong key locking it first (no faster than its own locks), then it is a suspect for
    FORGET_CLIENT_S. An oracle would be: a locked room that compares every try and answers the right one."""
    for attacker in ("10.7.0.1", "2001:db8::1"):  # an IPv6 attacker gets no more for its /48's many addresses
        clock = Clock()
        room_store.delete(pk.GUARD_NAME)  # a room of its own
        _spend_the_rooms_budget(room_store, clock)
        verdicts = []
        for n in range(100):  # a try every 5 s for the rest of the room's lock
            clock.now += 5
            address = attacker if "." in attacker else f"2001:db8:0:{n + 1:x}::1"  # a new /64 each time
            verdicts.append(KeyGuard(room_store, clock).attempt("guess", KEY, address))
        wrong = [v for v in verdicts if v.outcome == "wrong"]
        assert len(wrong) == pk.CLIENT_FREE_TRIES and all(v.locked == "client" and v.wait_s >= pk.CLIENT_LOCK_S for v in wrong[:-1])
        assert wrong[-1].locked == "room"  # the last made it a suspect: the room's lock holds it now
        assert {v.outcome for v in verdicts} == {"wrong", "locked"}
    assert pk.guard_key("2001:db8::1") == pk.guard_key("2001:db8:0:ffff::1") == "2001:db8::/48" != pk.guard_key("2001:db8:1::1")
    assert pk.guard_key("10.7.0.1") == "10.7.0.1" and pk.guard_key("unknown") == "unknown"

    # known-bad control: a room lock that compares a locked client's key and answers the right one is an oracle:
    # every try is checked, at the rate they arrive
    def oracle(given: str) -> str:
        return "ok" if check_key(given, KEY) else "locked"

    answers = [oracle(f"guess {n}") for n in range(1000)] + [oracle(KEY)]
    assert answers.count("locked") == 1000 and answers[-1] == "ok"  # 1,001 compared tries, the right one found


def test_when_the_guard_is_full_new_clients_wait_with_the_suspects(room_store, monkeypatch):
    """Forgetting a client to remember a new one would hand the forgotten address fresh tries: while the room is
    locked and the guard remembers MAX_CLIENTS clients, a new client is not compared."""
    monkeypatch.setattr(pk, "MAX_CLIENTS", pk.ROOM_MAX_WRONG - pk.CLIENT_FREE_TRIES + 1)
    clock = Clock()
    _spend_the_rooms_budget(room_store, clock)
    assert KeyGuard(room_store, clock).attempt(KEY, KEY, "10.8.0.1").locked == "room"
    assert not guard_text(room_store).count("10.8.0.1")


def test_replicas_trying_at_once_lose_no_count(room_store):
    """Threads with their own KeyGuard (replicas sharing the room's store) guess at once, one address each: the
    store's lock loses no update (the file's counts are the verdicts'), no address is compared more than CLIENT_FREE_TRIES
    times, and the room's budget is spent."""
    clock = Clock()
    verdicts: dict[str, list[str]] = {}
    start = threading.Barrier(8)

    def guess(n: int) -> None:
        guard, address = KeyGuard(room_store, clock), f"10.3.{n}.1"
        start.wait()
        verdicts[address] = [guard.attempt("guess", KEY, address).outcome for _ in range(6)]

    threads = [threading.Thread(target=guess, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    data = json.loads(guard_text(room_store))
    assert all(data["clients"][a][0] == v.count("wrong") <= pk.CLIENT_FREE_TRIES for a, v in verdicts.items())
    assert sum(v.count("wrong") for v in verdicts.values()) >= pk.ROOM_MAX_WRONG <= len(data["room"])


def test_the_guard_file_holds_counts_times_and_addresses_only(room_store):
    clock = Clock()
    for i in range(4):
        KeyGuard(room_store, clock).attempt(f"guess-{KEY}-{i}", KEY, "10.4.0.1")
    KeyGuard(room_store, clock).attempt(KEY, KEY, "10.4.0.2")
    text = guard_text(room_store)
    data = json.loads(text)
    assert set(data) == {"room", "clients"} and set(data["clients"]) == {"10.4.0.1"}
    assert all(isinstance(t, float) for t in data["room"])
    assert all(isinstance(v, (int, float)) for entry in data["clients"].values() for v in entry)
    assert "guess" not in text and KEY not in text and "Tea" not in text
    if isinstance(room_store, DirectoryStore):
        assert (room_store.root / pk.GUARD_NAME).stat().st_mode & 0o077 == 0


@pytest.mark.parametrize("content", [b"", b"not json", b"[]", b'{"room": "x", "clients": {}}', b'{"room": [], "clients": {"a": [1]}}', b"\xff" * 10])
def test_a_damaged_guard_file_starts_the_counts_again_and_is_rewritten(room_store, content):
    room_store.put(pk.GUARD_NAME, content)
    assert KeyGuard(room_store).attempt("guess", KEY, "10.5.0.1").outcome == "wrong"
    assert json.loads(guard_text(room_store))["clients"]["10.5.0.1"][0] == 1


def test_quiet_clients_are_forgotten_and_the_file_stays_small(room_store, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(pk, "MAX_CLIENTS", 5)
    monkeypatch.setattr(pk, "ROOM_MAX_WRONG", 10**6)
    for i in range(12):
        KeyGuard(room_store, clock).attempt("guess", KEY, f"10.6.0.{i}")
    assert len(json.loads(guard_text(room_store))["clients"]) <= 6
    clock.now += pk.FORGET_CLIENT_S + 1
    KeyGuard(room_store, clock).attempt("guess", KEY, "10.6.1.1")
    assert set(json.loads(guard_text(room_store))["clients"]) == {"10.6.1.1"}


@needs_redis
def test_while_redis_is_away_no_key_is_compared_and_the_counts_survive(redis_server, monkeypatch):
    store, clock = open_store({"SPECVIZ_STORE": redis_server.url}), Clock()
    for _ in range(pk.CLIENT_FREE_TRIES):
        KeyGuard(store, clock).attempt("guess", KEY, "10.2.0.1")
    redis_server.stop()
    compared = []
    monkeypatch.setattr(pk, "check_key", lambda given, configured: compared.append(given))
    with pytest.raises(StoreUnavailable, match="unreachable"):
        KeyGuard(store, clock).attempt(KEY, KEY, "10.2.0.1")
    assert compared == []  # the limits cannot be kept: nothing is compared
    monkeypatch.undo()
    redis_server.start()
    assert KeyGuard(store, clock).attempt(KEY, KEY, "10.2.0.1").outcome == "locked"  # its wrong keys were not forgotten
