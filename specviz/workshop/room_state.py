"""The room's small shared records (the presentation, the board, the lesson's marks, the race exercise), by name, on
the room's store: the run directory every replica shares (the embedded default) or Redis (SPECVIZ_STORE=redis://...).

    files = room_files(root_or_store)
    files.put("room.presentation", data)           # replaced whole: readers see the old record or the new one
    files.get("room.presentation", limit)          # bytes, or None (missing, or larger than limit)
    files.append("board-<id>.jsonl", line)         # the record's new size; one write, never interleaved
    with files.lock("room"): ...                   # one read-modify-write at a time, across replicas and hosts
    files.stamp(name)                              # changes whenever the record does; cheap (a stat, one GET)
    files.publish("presentation"); files.changes("presentation")   # followers told of a change (pub/sub on Redis)

Both backends keep the same semantics (tests run against both). A name is a file name in the run directory, or a key
under the room's prefix in Redis. When Redis cannot be reached every call raises StoreUnreachable, an OSError whose
words a page can show (specviz.workshop.saved_runs.write_problem): nothing is read as missing because the store is
away, so a page keeps what it drew and tries again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Hashable, Iterator
from pathlib import Path
from typing import Protocol

from specviz.workshop.files import flocked, write_atomic

log = logging.getLogger(__name__)

UNREACHABLE = "the room's store is unreachable (the page tries again by itself)"
LOCK_TIMEOUT_S = 10.0  # a Redis lock whose holder died is free again after this
LOCK_WAIT_S = 5.0  # the longest a writer waits for the lock before it says the store is unreachable


class StoreUnreachable(OSError):
    """The room's store (Redis) did not answer; the message is for the page."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(UNREACHABLE)
        self.detail = detail


class Changes(Protocol):
    """What a process's watcher waits on (specviz.ui.room.push)."""

    def stamp(self) -> Hashable:
        """Changes when the watched record may have changed (then re-read it)."""

    def wait(self, timeout_s: float) -> None:
        """Block until a change is announced, or timeout_s passed."""


class RoomFiles(Protocol):
    where: str  # which store: a directory's path, or Redis' address and prefix (never a password)

    def get(self, name: str, limit: int) -> bytes | None: ...
    def put(self, name: str, data: bytes) -> None: ...
    def delete(self, *names: str) -> None: ...
    def append(self, name: str, data: bytes) -> int: ...
    def size(self, name: str) -> int: ...
    def stamp(self, name: str) -> Hashable | None: ...
    def names(self, prefix: str, suffix: str) -> list[str]: ...
    def lock(self, name: str) -> contextlib.AbstractContextManager[None]: ...
    def publish(self, channel: str) -> None: ...
    def changes(self, channel: str, stamp_of: str) -> Changes: ...


# --- the run directory -------------------------------------------------------------------------------------------


class DirectoryFiles:
    """Files in one directory: atomic replacement, O_APPEND, flock, a stat as the stamp; changes are polled."""

    POLL_S = 0.05  # how often a watcher looks at a record's stamp (one stat)

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self.where = str(self.root)

    def path(self, name: str) -> Path:
        return self.root / name

    def get(self, name: str, limit: int) -> bytes | None:
        try:
            with open(self.root / name, "rb") as f:
                data = f.read(limit + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("cannot read %s: %s", name, exc.strerror or exc)
            return None
        if len(data) > limit:
            log.warning("%s is too large (over %d bytes); ignored", name, limit)
            return None
        return data

    def put(self, name: str, data: bytes) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(self.root / name, data)

    def delete(self, *names: str) -> None:
        for name in names:
            (self.root / name).unlink(missing_ok=True)

    def append(self, name: str, data: bytes) -> int:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.root / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, data)
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def size(self, name: str) -> int:
        try:
            return (self.root / name).stat().st_size
        except FileNotFoundError:
            return 0

    def stamp(self, name: str) -> Hashable | None:
        try:
            info = os.stat(self.root / name)
        except OSError:
            return None
        return (info.st_ino, info.st_mtime_ns, info.st_size)

    def names(self, prefix: str, suffix: str) -> list[str]:
        return sorted(p.name for p in self.root.glob(f"{prefix}*{suffix}"))

    def lock(self, name: str) -> contextlib.AbstractContextManager[None]:
        return flocked(self.root / f".{name}.lock")

    def publish(self, channel: str) -> None:
        pass  # watchers poll the file's stamp

    def changes(self, channel: str, stamp_of: str) -> Changes:
        return _Polled(self, stamp_of)


class _Polled:
    def __init__(self, files: DirectoryFiles, name: str) -> None:
        self._files, self._name = files, name

    def stamp(self) -> Hashable:
        return self._files.stamp(self._name)

    def wait(self, timeout_s: float) -> None:
        time.sleep(min(timeout_s, DirectoryFiles.POLL_S))


# --- Redis -------------------------------------------------------------------------------------------------------


def _unreachable(func):
    """Redis' connection and timeout errors, as StoreUnreachable (logged once per call, without the URL)."""
    import functools

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        import redis

        try:
            return func(*args, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError, redis.exceptions.LockError) as exc:
            log.warning("room: the store is unreachable (%s)", type(exc).__name__)
            raise StoreUnreachable(type(exc).__name__) from None

    return wrapper


class RedisFiles:
    """Keys under prefix in one Redis database. A record is a string; each write also counts up "<name>@v" in the same
    transaction, so a stamp is one GET and a record replaced by one of the same size still changes it. Locks are
    Redis' own (SET NX with a timeout, released by its token); a change is announced on "<prefix>ch:<channel>"."""

    FALLBACK_POLL_S = 2.0  # a watcher re-reads at least this often, in case an announcement was lost

    def __init__(self, client, prefix: str = "specviz:") -> None:
        self.client, self.prefix = client, prefix
        kwargs = client.connection_pool.connection_kwargs
        self.where = f"redis {kwargs.get('host', kwargs.get('path', ''))}:{kwargs.get('port', '')}/{kwargs.get('db', 0)} {prefix}"

    def _key(self, name: str) -> str:
        return self.prefix + name

    @_unreachable
    def get(self, name: str, limit: int) -> bytes | None:
        data = self.client.get(self._key(name))
        if data is not None and len(data) > limit:
            log.warning("%s is too large (over %d bytes); ignored", name, limit)
            return None
        return data

    @_unreachable
    def put(self, name: str, data: bytes) -> None:
        pipe = self.client.pipeline(transaction=True)
        pipe.set(self._key(name), data)
        pipe.incr(self._key(name + "@v"))
        pipe.execute()

    @_unreachable
    def delete(self, *names: str) -> None:
        if not names:
            return
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(*(self._key(n) for n in names))
        for name in names:
            pipe.incr(self._key(name + "@v"))
        pipe.execute()

    @_unreachable
    def append(self, name: str, data: bytes) -> int:
        pipe = self.client.pipeline(transaction=True)
        pipe.append(self._key(name), data)
        pipe.incr(self._key(name + "@v"))
        return int(pipe.execute()[0])

    @_unreachable
    def size(self, name: str) -> int:
        return int(self.client.strlen(self._key(name)))

    @_unreachable
    def stamp(self, name: str) -> Hashable | None:
        value = self.client.get(self._key(name + "@v"))
        return None if value is None else int(value)

    @_unreachable
    def names(self, prefix: str, suffix: str) -> list[str]:
        start = len(self.prefix)
        found = {k.decode() if isinstance(k, bytes) else k for k in self.client.scan_iter(match=self._key(prefix) + "*", count=1000)}
        return sorted(k[start:] for k in found if k.endswith(suffix))

    @contextlib.contextmanager
    def lock(self, name: str) -> Iterator[None]:
        import redis

        lock = self.client.lock(self._key(f"lock:{name}"), timeout=LOCK_TIMEOUT_S, blocking_timeout=LOCK_WAIT_S, thread_local=False)
        try:
            acquired = lock.acquire()
        except (redis.ConnectionError, redis.TimeoutError):
            raise StoreUnreachable("lock") from None
        if not acquired:
            raise StoreUnreachable("the lock was held too long")
        try:
            yield
        finally:
            with contextlib.suppress(redis.RedisError):  # expired or unreachable: it frees itself after LOCK_TIMEOUT_S
                lock.release()

    @_unreachable
    def publish(self, channel: str) -> None:
        self.client.publish(self._key(f"ch:{channel}"), b"1")

    def changes(self, channel: str, stamp_of: str) -> Changes:
        return _Subscribed(self, self._key(f"ch:{channel}"))


class _Subscribed:
    """A subscription that counts announcements: stamp() is (announcements heard, the fallback poll's tick), so the
    watcher re-reads after each announcement and at least every FALLBACK_POLL_S. A lost connection is
    resubscribed on the next wait (and counts as a change: announcements may have been missed meanwhile)."""

    def __init__(self, files: RedisFiles, channel: str) -> None:
        self._files, self._channel = files, channel
        self._pubsub = None
        self._heard = 0
        self._lock = threading.Lock()

    def stamp(self) -> Hashable:
        return (self._heard, int(time.monotonic() / RedisFiles.FALLBACK_POLL_S))

    def wait(self, timeout_s: float) -> None:
        import redis

        with self._lock:
            try:
                if self._pubsub is None:
                    self._pubsub = self._files.client.pubsub(ignore_subscribe_messages=True)
                    self._pubsub.subscribe(self._channel)
                    self._heard += 1
                message = self._pubsub.get_message(timeout=timeout_s)
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                self._close()
                time.sleep(timeout_s)
                return
            if message is not None:
                self._heard += 1

    def _close(self) -> None:
        if self._pubsub is not None:
            with contextlib.suppress(Exception):
                self._pubsub.close()
        self._pubsub = None


_CLIENTS: dict[str, object] = {}
_CLIENTS_LOCK = threading.Lock()


def redis_files(url: str, prefix: str = "specviz:") -> RedisFiles:
    """The room's records in Redis at url (one client per process and URL: it pools its connections)."""
    import redis

    with _CLIENTS_LOCK:
        client = _CLIENTS.get(url)
        if client is None:
            client = _CLIENTS[url] = redis.Redis.from_url(url, socket_timeout=2.0, socket_connect_timeout=2.0)
    return RedisFiles(client, prefix)


def room_files(where) -> RoomFiles:
    """A path is the run directory; anything with the primitives is used as it is."""
    if isinstance(where, (str, os.PathLike)):
        return DirectoryFiles(where)
    return where
