"""The Redis backend of the room's store: replicas on any host share one Redis (SPECVIZ_STORE=redis://…).

Keys, under the prefix ``specviz:`` (one room per Redis database; the URL's /N picks it):

    b:<name>      a blob (a string; PX its TTL when put with one)
    index         a sorted set: blob name -> its mtime (entries(); a name whose blob expired is pruned on listing)
    l:<name>      a list (RPUSH), ls:<name> its size in bytes (newlines counted, as the directory's file)
    c:<name>      a counter (INCR, PEXPIRE NX: forgotten ttl after its first increment)
    k:<name>      a lock: a random token, SET NX PX (a lease: a holder that dies lets go after LEASE_S)
    v:<name>      the name's write counter (stamp()), bumped with every put, append, replace and delete, which also
                  PUBLISH on the channel ch:<name> (wait() subscribes; a poll of the stamps is the fallback)
    r:<name>      a replica alive (SET PX ttl: the heartbeat)

Writes to one name are one MULTI/EXEC or one Lua script: a reader sees a write whole or not at all. mtimes are this
host's time.time(), as the callers compare them with (keep the hosts' clocks in step: NTP). Connection errors and
timeouts become StoreUnavailable naming the store (host, port, database: never the password); a Redis at its
maxmemory (run it with ``maxmemory-policy noeviction``: specviz evicts, Redis must not drop keys by itself) refuses
writes, an OSError that says the store is full.
"""

from __future__ import annotations

import contextlib
import functools
import secrets
import time
from collections.abc import Hashable, Iterable, Iterator
from urllib.parse import urlsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from specviz.workshop.store.interface import LOCK_TIMEOUT_S, Entry, StoreUnavailable, check_name

PREFIX = "specviz:"
SOCKET_TIMEOUT_S = 2.0  # a Redis that does not answer in this long counts as unreachable for this call
LEASE_S = 15.0  # a lock's lease: a holder that died lets go after this long
POLL_S = 0.5  # wait()'s fallback poll
LOCK_POLL_S = 0.005

_ENTRIES = """
local all = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local out = {}
for i = 1, #all, 2 do
  local name = all[i]
  if string.sub(name, 1, #ARGV[1]) == ARGV[1] and (#ARGV[2] == 0 or string.sub(name, -#ARGV[2]) == ARGV[2]) then
    local key = ARGV[3] .. name
    if redis.call('EXISTS', key) == 1 then
      table.insert(out, name)
      table.insert(out, all[i + 1])
      table.insert(out, redis.call('STRLEN', key))
    else
      redis.call('ZREM', KEYS[1], name)
    end
  end
end
return out
"""
_TOUCH = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2])
if tonumber(ARGV[3]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return 1
"""
_UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def describe(url: str) -> str:
    """'Redis at host:port/db' (TLS said), never the password."""
    parts = urlsplit(url)
    db = parts.path.strip("/") or "0"
    tls = " (TLS)" if parts.scheme == "rediss" else ""
    return f"Redis at {parts.hostname or 'localhost'}:{parts.port or 6379}/{db}{tls}"


@functools.lru_cache(maxsize=8)
def redis_store(url: str) -> RedisStore:
    """One RedisStore (one connection pool) per URL per process."""
    try:
        client = redis.Redis.from_url(
            url,
            socket_timeout=SOCKET_TIMEOUT_S,
            socket_connect_timeout=SOCKET_TIMEOUT_S,
            retry=Retry(NoBackoff(), 1),
            health_check_interval=30,
        )
    except ValueError as exc:
        raise ValueError(f"SPECVIZ_STORE is not a Redis URL this client reads ({exc}).") from None
    return RedisStore(client, describe(url))


class RedisStore:
    """The room's state in Redis (specviz.workshop.store's interface; module docstring for the keys)."""

    def __init__(self, client: redis.Redis, description: str, prefix: str = PREFIX) -> None:
        self.client = client
        self.description = description
        self.prefix = prefix
        self._entries = client.register_script(_ENTRIES)
        self._touch = client.register_script(_TOUCH)
        self._unlock = client.register_script(_UNLOCK)

    def _key(self, kind: str, name: str) -> str:
        return f"{self.prefix}{kind}:{check_name(name)}"

    @contextlib.contextmanager
    def _reachable(self) -> Iterator[None]:
        try:
            yield
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            raise StoreUnavailable(f"the room's store ({self.description}) is unreachable ({_reason(exc)}); specviz tries again") from None
        except redis.exceptions.ResponseError as exc:
            said = str(exc).rpartition("caused error: ")[2]  # a pipeline's error names the command and its key: not shown
            if "maxmemory" in said or said.startswith("OOM"):  # noeviction at maxmemory: writes refused, reads work
                raise OSError(f"the room's store ({self.description}) is full: Redis reached its maxmemory (tell the person running it)") from None
            raise OSError(f"the room's store ({self.description}) refused the operation ({_reason(said)})") from None

    def _changed(self, pipe: redis.client.Pipeline, name: str) -> None:
        """Queue the name's stamp bump and its notice."""
        pipe.incr(self._key("v", name))
        pipe.publish(self._key("ch", name), b"1")

    # --- blobs ---------------------------------------------------------------------------------------------------

    def get(self, name: str, limit: int) -> bytes | None:
        key = self._key("b", name)
        with self._reachable():
            pipe = self.client.pipeline(transaction=True)
            pipe.exists(key)
            pipe.getrange(key, 0, limit)
            exists, data = pipe.execute()
        return bytes(data) if exists else None

    def put(self, name: str, data: bytes, ttl_s: float | None = None) -> None:
        with self._reachable():
            pipe = self.client.pipeline(transaction=True)
            pipe.set(self._key("b", name), data, px=_ms(ttl_s) if ttl_s else None)
            pipe.zadd(f"{self.prefix}index", {name: time.time()})
            self._changed(pipe, name)
            pipe.execute()

    def delete(self, name: str) -> bool:
        with self._reachable():
            pipe = self.client.pipeline(transaction=True)
            pipe.delete(self._key("b", name), self._key("l", name), self._key("ls", name))
            pipe.zrem(f"{self.prefix}index", name)
            self._changed(pipe, name)
            gone = pipe.execute()[0]
        return gone > 0

    def touch(self, name: str, ttl_s: float | None = None) -> bool:
        with self._reachable():
            return bool(self._touch(keys=[self._key("b", name), f"{self.prefix}index"], args=[time.time(), name, _ms(ttl_s) if ttl_s else 0]))

    def stat(self, name: str) -> Entry | None:
        key = self._key("b", name)
        with self._reachable():
            pipe = self.client.pipeline(transaction=True)
            pipe.exists(key)
            pipe.strlen(key)
            pipe.zscore(f"{self.prefix}index", name)
            exists, size, mtime = pipe.execute()
        return Entry(name, int(size), float(mtime or 0.0)) if exists else None

    def entries(self, prefix: str = "", suffix: str = "") -> list[Entry]:
        with self._reachable():
            flat = self._entries(keys=[f"{self.prefix}index"], args=[prefix, suffix, f"{self.prefix}b:"])
        out = [Entry(flat[i].decode(), int(flat[i + 2]), float(flat[i + 1])) for i in range(0, len(flat), 3)]
        out.sort(key=lambda e: (e.mtime, e.name))
        return out

    # --- counters, lists -----------------------------------------------------------------------------------------

    def incr(self, name: str, ttl_s: float) -> int:
        key = self._key("c", name)
        with self._reachable():
            pipe = self.client.pipeline(transaction=True)
            pipe.incr(key)
            pipe.pexpire(key, _ms(ttl_s), nx=True)
            return int(pipe.execute()[0])

    def append(self, name: str, line: bytes) -> int:
        if b"\n" in line:
            raise ValueError("a list's line holds no newline")
        with self._reachable():
            pipe = self.client.pipeline(transaction=True)
            pipe.rpush(self._key("l", name), line)
            pipe.incrby(self._key("ls", name), len(line) + 1)
            self._changed(pipe, name)
            return int(pipe.execute()[1])

    def lines(self, name: str, limit: int) -> list[bytes]:
        with self._reachable():
            raw = self.client.lrange(self._key("l", name), 0, -1)
        out, used = [], 0
        for line in raw:
            used += len(line) + 1
            if used > limit:
                break
            out.append(bytes(line))
        return out

    def replace_lines(self, name: str, lines: Iterable[bytes]) -> int:
        lines = list(lines)
        if any(b"\n" in line for line in lines):
            raise ValueError("a list's line holds no newline")
        size = sum(len(line) + 1 for line in lines)
        with self._reachable():
            pipe = self.client.pipeline(transaction=True)
            pipe.delete(self._key("l", name))
            if lines:
                pipe.rpush(self._key("l", name), *lines)
            pipe.set(self._key("ls", name), size)
            self._changed(pipe, name)
            pipe.execute()
        return size

    def size(self, name: str) -> int:
        with self._reachable():
            pipe = self.client.pipeline(transaction=False)
            pipe.strlen(self._key("b", name))
            pipe.get(self._key("ls", name))
            blob, listed = pipe.execute()
        return int(blob) or int(listed or 0)

    # --- coordination --------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def lock(self, name: str, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
        """SET NX PX with a random token; released only by its holder (compare and delete, one script)."""
        key, token = self._key("k", name), secrets.token_hex(16)
        deadline = time.monotonic() + timeout_s
        with self._reachable():
            while not self.client.set(key, token, nx=True, px=_ms(LEASE_S)):
                if time.monotonic() > deadline:
                    raise StoreUnavailable(f"the room's store ({self.description}) is busy: its lock {name!r} was held for over {timeout_s:.0f} s; specviz tries again")
                time.sleep(LOCK_POLL_S)
        try:
            yield
        finally:
            with contextlib.suppress(redis.exceptions.RedisError):  # unreachable now: the lease lets go by itself
                self._unlock(keys=[key], args=[token])

    def stamp(self, *names: str) -> Hashable:
        if not names:
            return ()
        with self._reachable():
            return tuple(self.client.mget([self._key("v", n) for n in names]))

    def wait(self, names: Iterable[str], since: Hashable, timeout_s: float) -> Hashable:
        watch = self.watch(names)
        try:
            return watch.wait(since, timeout_s)
        finally:
            watch.close()

    def watch(self, names: Iterable[str]) -> _RedisWatch:
        return _RedisWatch(self, tuple(names))

    # --- replicas ------------------------------------------------------------------------------------------------

    def heartbeat(self, replica: str, ttl_s: float, info: str = "") -> None:
        with self._reachable():
            self.client.set(self._key("r", replica), info[:200].encode("utf-8"), px=_ms(ttl_s))

    def replicas(self) -> dict[str, str]:
        start = len(f"{self.prefix}r:")
        with self._reachable():
            keys = list(self.client.scan_iter(match=f"{self.prefix}r:*", count=500))
            values = self.client.mget(keys) if keys else []
        return {k.decode()[start:]: v.decode("utf-8", "replace") for k, v in zip(keys, values) if v is not None}

    def ping(self) -> None:
        with self._reachable():
            self.client.ping()


class _RedisWatch:
    """One subscription to the names' channels, kept between waits. Each wait subscribes first (when it has no
    subscription), then compares the stamp, so a change between the caller's stamp and the subscription is not
    missed; then it sleeps on the channels, reading the stamp again at least every POLL_S (the fallback)."""

    def __init__(self, store: RedisStore, names: tuple[str, ...]) -> None:
        self.store, self.names = store, names
        self._pubsub: redis.client.PubSub | None = None

    def wait(self, since: Hashable, timeout_s: float) -> Hashable:
        deadline = time.monotonic() + timeout_s
        try:
            with self.store._reachable():
                if self._pubsub is None:
                    self._pubsub = self.store.client.pubsub(ignore_subscribe_messages=True)
                    self._pubsub.subscribe(*[self.store._key("ch", n) for n in self.names])
                while True:
                    now = self.store.stamp(*self.names)
                    left = deadline - time.monotonic()
                    if now != since or left <= 0:
                        return now
                    if self._pubsub.get_message(timeout=min(POLL_S, left)) is not None:
                        while self._pubsub.get_message(timeout=0) is not None:
                            pass  # several notices waiting: one read of the stamp for all of them
        except OSError:
            self.close()  # subscribe again next time
            raise

    def close(self) -> None:
        if self._pubsub is not None:
            with contextlib.suppress(redis.exceptions.RedisError, OSError):
                self._pubsub.close()
            self._pubsub = None


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _reason(exc: BaseException | str) -> str:
    """The client's words, cut short (they can name the host, never the password)."""
    return (str(exc) or type(exc).__name__).splitlines()[0][:160]
