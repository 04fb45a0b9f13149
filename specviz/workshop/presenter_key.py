"""The presenter key: the owner's setting, how strong it must be, a strong one made for the owner, and the limits on
wrong keys that every replica of a room shares.

A wrong key is counted twice, in one small value of the room's store the replicas share (KeyGuard; the file
``room.keyguard`` in the run directory, or Redis with SPECVIZ_STORE: specviz.workshop.store):

* **per client** (its address, specviz.workshop.clients: the TCP peer, or behind a trusted proxy the first untrusted
  hop of X-Forwarded-For; an IPv6 address by its /48, one site's allocation, whose /64s its holder has by the
  thousand): CLIENT_FREE_TRIES wrong keys, then a wait of CLIENT_LOCK_S that doubles with each further wrong key up
  to CLIENT_MAX_LOCK_S. A new browser session, a reload or a cleared session state is the same client: the count is
  not in the session.
* **for the room**, whoever sends them: at most ROOM_MAX_WRONG wrong keys in any ROOM_WINDOW_S; past that the room
  is locked until the oldest of them is ROOM_WINDOW_S old.

A client that must wait is told how long, and its key is **not compared** (nor counted): an answer that differs
between the right key and a wrong one is an oracle, and an oracle answered at the rate requests arrive is no limit.

**The right key always gets in; guessing stays slow.** A room lock that refused everyone would let anyone with a few
addresses keep the teacher out for the whole workshop. So the room lock holds only *suspects*: clients with
CLIENT_FREE_TRIES wrong keys on record (kept FORGET_CLIENT_S after the last). A client with fewer is still compared
during a room lock, the right key presents, and every wrong key it sends then locks it at once (CLIENT_LOCK_S,
doubling). Why this is not an oracle that speeds guessing up: while the room is locked each address gets at most
CLIENT_FREE_TRIES compared guesses per FORGET_CLIENT_S, spaced by its own locks, and no more once the guard
remembers MAX_CLIENTS clients (new clients then wait with the suspects: forgetting a client to make room would hand
its address fresh tries). The bound while locked: 3 guesses an hour per address (IPv4, or IPv6 /48), at most
3 x MAX_CLIENTS an hour whatever the attacker holds, besides the room's own ROOM_MAX_WRONG per ROOM_WINDOW_S. A
generated key (144 bits) or 16 random characters stays out of reach at that rate by many orders of magnitude; a
phrase a person makes up is weaker, which is why the room makes the key. What a lock can still do: keep out the teacher's *own* address after three of its own wrong keys (a short
wait), or an address the teacher shares with the attacker (one NAT): the owner then deletes ``room.keyguard``.

The value holds counts, times and client addresses only: never the key, a hash of it or what was typed. Updates hold
the store's lock (an flock in the directory; a leased key in Redis), so two replicas, on one host or several, cannot
both spend the room's last try. When the store cannot be reached, attempt() raises StoreUnavailable and compares
nothing: no key is checked while the limits cannot be kept.

Plain Python: no streamlit (specviz.ui.room.present is the page's side).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import math
import os
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from specviz.workshop.policy import PRESENTER_KEY_SECRET
from specviz.workshop.store import Store, StoreUnavailable
from specviz.workshop.store.directory import DirectoryStore

log = logging.getLogger(__name__)

KEY_ENV = "SPECVIZ_PRESENTER_KEY"
KEY_SECRET = PRESENTER_KEY_SECRET  # its name in the [specviz] secrets table
MIN_KEY_CHARS = 16
MIN_DISTINCT_CHARS = 8
GENERATED_KEY_BYTES = 18  # secrets.token_urlsafe: 24 characters, 144 bits

GUARD_NAME = "room.keyguard"
GUARD_LOCK_NAME = ".room.keyguard.lock"
MAX_GUARD_BYTES = 256 * 1024
ROOM_MAX_WRONG = 10  # wrong keys the room takes, from everyone together, in any ROOM_WINDOW_S
ROOM_WINDOW_S = 600.0
CLIENT_FREE_TRIES = 3  # one client's wrong keys before it waits
CLIENT_LOCK_S = 30.0  # its first wait, doubling with each further wrong key
CLIENT_MAX_LOCK_S = 900.0
FORGET_CLIENT_S = 3600.0  # a client quiet (and not locked) this long starts again from nothing
IPV6_PREFIX = 48  # IPv6 clients are counted by this network (guard_key)
MAX_CLIENTS = 2000  # beyond this the longest-quiet clients are forgotten (the room's count still holds)

Outcome = Literal["off", "weak", "empty", "locked", "wrong", "ok"]


# --- the key ---------------------------------------------------------------------------------------------------


def presenter_key(env: Mapping[str, str] | None = None, secrets_table: Mapping | None = None) -> str | None:
    """The owner's presenter key as configured: SPECVIZ_PRESENTER_KEY, else presenter_key in the [specviz] secrets
    table; None when neither is set or the value is blank. It may still be too weak to use (key_weakness)."""
    env = os.environ if env is None else env
    raw = env.get(KEY_ENV)
    if raw is None or not str(raw).strip():
        raw = (secrets_table or {}).get(KEY_SECRET)
    if not isinstance(raw, str) or not raw.strip():
        return None
    return raw.strip()


def key_weakness(key: str) -> str | None:
    """Why a presenter key is too weak to use, or None. The rules (no length or content of the key in the answer):
    at least MIN_KEY_CHARS characters, MIN_DISTINCT_CHARS of them different, from at least two kinds (lower case,
    upper case, digits, anything else, a space included), and not one shorter piece repeated ("abcabcabc...")."""
    kinds = sum(any(test(c) for c in key) for test in (str.islower, str.isupper, str.isdigit, lambda c: not c.isalnum()))
    periodic = len(key) > 1 and key in (key + key)[1:-1]
    if len(key) < MIN_KEY_CHARS or len(set(key)) < MIN_DISTINCT_CHARS or kinds < 2 or periodic:
        return (
            f"a presenter key needs at least {MIN_KEY_CHARS} characters, at least {MIN_DISTINCT_CHARS} different ones, "
            "from at least two kinds (lower case, upper case, digits, symbols or spaces), and no repeated pattern"
        )
    return None


def generate_key() -> str:
    """A strong random key (144 bits, URL-safe characters) that passes key_weakness."""
    while True:
        key = secrets.token_urlsafe(GENERATED_KEY_BYTES)
        if key_weakness(key) is None:
            return key


def check_key(given: object, configured: str | None) -> bool:
    """given is the configured key (constant time in the key's content); False when presenting is off or given empty."""
    if configured is None or not isinstance(given, str) or not given.strip():
        return False
    return hmac.compare_digest(given.strip().encode("utf-8"), configured.encode("utf-8"))


# --- the limits on wrong keys ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """What one try at the key got: outcome, and for 'locked' (or a 'wrong' that earned a wait) the seconds to wait
    and whose wait it is ('client': this address's; 'room': everyone's)."""

    outcome: Outcome
    wait_s: float = 0.0
    locked: Literal["", "client", "room"] = ""


@dataclass
class _Client:
    wrong: int = 0
    locked_until: float = 0.0
    last: float = 0.0


class KeyGuard:
    """The room's and each client's wrong keys, in the store's ``room.keyguard`` (module docstring). A path means
    that directory's store."""

    def __init__(self, store: Store | str | os.PathLike, clock: Callable[[], float] = time.time) -> None:
        self.store: Store = DirectoryStore(store) if isinstance(store, (str, os.PathLike)) else store
        self._clock = clock  # wall-clock seconds: the replicas share the value, and a restart must not forget it

    def attempt(self, given: object, configured: str | None, client: str) -> Verdict:
        """One try at the key by ``client`` (an address). 'off' (no key set), 'weak' (the key set is too weak: no
        key works), 'locked' (wait: nothing compared, nothing counted), 'empty', 'wrong' or 'ok'. A room lock holds
        suspects only (module docstring: the right key always gets in). Raises StoreUnavailable (nothing compared)
        when the room's store cannot be reached."""
        if configured is None:
            return Verdict("off")
        if key_weakness(configured) is not None:
            return Verdict("weak")
        client = guard_key(client)
        with self.store.lock(GUARD_LOCK_NAME):
            now = self._clock()
            room, clients = self._read(now)
            entry = clients.get(client, _Client())
            room_wait = self._room_wait(room, now)
            client_wait = max(0.0, entry.locked_until - now)
            suspect = entry.wrong >= CLIENT_FREE_TRIES or (client not in clients and len(clients) >= MAX_CLIENTS)
            if client_wait > 0 or (room_wait > 0 and suspect):  # a lock-out never compares the key
                wait = client_wait if room_wait <= 0 or not suspect else max(room_wait, client_wait)
                return Verdict("locked", wait, "room" if room_wait > 0 and suspect and room_wait >= client_wait else "client")
            if not isinstance(given, str) or not given.strip():
                return Verdict("empty")
            if check_key(given, configured):
                if client in clients:
                    del clients[client]
                    self._write(room, clients)
                return Verdict("ok")
            room.append(now)
            entry.wrong, entry.last = entry.wrong + 1, now
            if entry.wrong >= CLIENT_FREE_TRIES or room_wait > 0:  # during a room lock every compared wrong key locks its client
                entry.locked_until = now + min(CLIENT_MAX_LOCK_S, CLIENT_LOCK_S * 2 ** max(0, entry.wrong - CLIENT_FREE_TRIES))
            clients[client] = entry
            self._write(room, clients)
        room_wait, client_wait = self._room_wait(room, now), max(0.0, entry.locked_until - now)
        log.warning("room: a wrong presenter key from %s (%d in the room's last %.0f min)", client, len(room), ROOM_WINDOW_S / 60)  # never the key
        if entry.wrong < CLIENT_FREE_TRIES:
            room_wait = 0.0  # not a suspect: the room's lock does not hold it (its own may)
        if room_wait <= 0 and client_wait <= 0:
            return Verdict("wrong")
        return Verdict("wrong", max(room_wait, client_wait), "room" if room_wait >= client_wait else "client")

    @staticmethod
    def _room_wait(room: list[float], now: float) -> float:
        if len(room) < ROOM_MAX_WRONG:
            return 0.0
        return max(0.0, sorted(room)[-ROOM_MAX_WRONG] + ROOM_WINDOW_S - now)

    def _read(self, now: float) -> tuple[list[float], dict[str, _Client]]:
        """The room's recent wrong keys and the clients worth remembering (older ones pruned). A value that is not
        ours reads as empty (logged): it is only ever written here, atomically. An unreachable store raises."""
        try:
            data = self.store.get(GUARD_NAME, MAX_GUARD_BYTES)
        except StoreUnavailable:
            raise
        except OSError as exc:
            log.warning("cannot read the presenter-key guard: %s", exc.strerror or exc)
            return [], {}
        if data is None:
            return [], {}
        try:
            if len(data) > MAX_GUARD_BYTES:
                raise ValueError("too large")
            raw = json.loads(data)
            room = sorted(float(t) for t in raw["room"] if _time(t) and now - ROOM_WINDOW_S < t <= now + 1)[-ROOM_MAX_WRONG:]
            clients = {}
            for address, (wrong, locked_until, last) in raw["clients"].items():
                if isinstance(address, str) and _time(wrong) and wrong == int(wrong) and _time(locked_until) and _time(last):
                    clients[address[:64]] = _Client(int(wrong), min(float(locked_until), now + CLIENT_MAX_LOCK_S), float(last))
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError, UnicodeDecodeError):
            log.warning("the presenter-key guard file is damaged; its counts start again")
            return [], {}
        clients = {a: c for a, c in clients.items() if c.locked_until > now or now - c.last < FORGET_CLIENT_S}
        if len(clients) > MAX_CLIENTS:
            clients = dict(sorted(clients.items(), key=lambda item: item[1].last)[-MAX_CLIENTS:])
        return room, clients

    def _write(self, room: list[float], clients: dict[str, _Client]) -> None:
        data = {"room": room, "clients": {a: [c.wrong, c.locked_until, c.last] for a, c in clients.items()}}
        self.store.put(GUARD_NAME, json.dumps(data, separators=(",", ":")).encode("utf-8"), ttl_s=FORGET_CLIENT_S + CLIENT_MAX_LOCK_S)


def guard_key(address: str) -> str:
    """The name a client is counted under: its address, an IPv6 address by its /48 (one site's allocation: a free
    tunnel broker hands out a /48, 65,536 /64s)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address[:64]  # "local", "unknown"
    if ip.version == 6:
        return str(ipaddress.ip_network(f"{ip}/{IPV6_PREFIX}", strict=False))
    return str(ip)


def _time(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and 0 <= value < 10**11
