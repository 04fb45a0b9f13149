"""The room's store: the one place every replica of a room keeps what they share (saved runs, the presentation, the
board, the wrong-key counters, the exercise's guesses, which replicas are alive). One small interface, two backends:

* the **directory** (the default, nothing to install): today's files in the run directory, exactly as before (a name
  is a file name in it; writes are atomic renames, locks are flocks, a change is seen by polling a stat);
* **Redis** (``SPECVIZ_STORE=redis://[:password@]host:6379/0``, ``rediss://`` for TLS): replicas on any host share
  it; a change is published (pub/sub) and a stamp still polls as the fallback.

A room-state module is written against ``Store`` only and gets one from ``open_store``::

    from specviz.workshop.store import Store, open_store

    class Tally:
        def __init__(self, store: Store) -> None:
            self.store = store

        def add(self, vote: str) -> None:
            with self.store.lock(".tally.lock"):             # read-modify-write: one writer at a time, every host
                raw = self.store.get("room.tally", 4096)     # bytes or None; more than 4096 bytes: not ours
                votes = json.loads(raw) if raw else []
                self.store.put("room.tally", json.dumps(votes + [vote]).encode())

        def changed_since(self, stamp) -> bool:                # a follower redraws only when this is True
            return self.store.stamp("room.tally") != stamp

    tally = Tally(open_store())                              # SPECVIZ_STORE, else the run directory

    watch = store.watch(["room.tally"])                      # a watcher thread: woken by a change (Redis pub/sub;
    stamp = watch.wait(stamp, timeout_s=5)                   # the directory polls), or after 5 s; watch.close() at the end

Names are file names (letters, digits, ``.``, ``_``, ``-``; a leading dot for lock and hidden names): never a path,
never a participant's text unchecked. The same name means the same thing on both backends. Values are bytes the
caller validates like hostile input (a damaged value reads as the caller decides, never as an exception it forgot).
A backend that cannot be reached raises StoreUnavailable (an OSError whose message names the store, never its
password, and says specviz retries); the directory raises OSError as the disk says (ENOSPC on a full disk).
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

_NAME = re.compile(r"\.?[A-Za-z0-9_-][A-Za-z0-9._-]{0,159}")
LOCK_TIMEOUT_S = 10.0  # how long lock() waits for another holder before it gives up (StoreUnavailable)


class StoreUnavailable(OSError):
    """The room's store cannot be reached (Redis down, a network between); the message says which store and that
    specviz retries. Never carries the store's password."""


@dataclass(frozen=True)
class Entry:
    """A blob as entries() lists it: its name, its size in bytes and when it was last put or touched."""

    name: str
    size: int
    mtime: float  # time.time() of its last put() or touch()


def check_name(name: str) -> str:
    """name if it is a store name (see the module docstring); ValueError otherwise (a programming error or hostile)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise ValueError(f"not a store name: {str(name)[:40]!r}")
    return name


class Watch(Protocol):
    """What Store.watch returns: wait() as Store.wait, on the names it was made for, and close()."""

    def wait(self, since: Hashable, timeout_s: float) -> Hashable: ...

    def close(self) -> None: ...


class Store(Protocol):
    """What the room's state modules need of a store. Every method may raise StoreUnavailable (Redis) or OSError."""

    description: str  # for messages and logs: "the directory /srv/runs" or "Redis at host:6379/0" (no password)

    # --- blobs: one value per name, replaced whole -------------------------------------------------------------
    def get(self, name: str, limit: int) -> bytes | None:
        """The value, at most limit + 1 bytes of it (more than limit: too large, the caller's rule); None if absent."""
        ...

    def put(self, name: str, data: bytes, ttl_s: float | None = None) -> None:
        """Replace the value atomically (readers see the old or the new one). ttl_s: Redis may drop it after that
        long without a put or touch (the directory keeps it: callers expire by entries()' mtime, as before)."""
        ...

    def delete(self, name: str) -> bool:
        """Remove a blob or a list of this name; True when something went."""
        ...

    def touch(self, name: str, ttl_s: float | None = None) -> bool:
        """Mark a blob as used now (its mtime; its TTL restarts); False when there is none."""
        ...

    def stat(self, name: str) -> Entry | None:
        """One blob's entry (its size and mtime), or None when there is none."""
        ...

    def entries(self, prefix: str = "", suffix: str = "") -> list[Entry]:
        """Every blob whose name starts with prefix and ends with suffix, oldest (mtime) first."""
        ...

    # --- counters, lists ---------------------------------------------------------------------------------------
    def incr(self, name: str, ttl_s: float) -> int:
        """Add one to a counter and return it: atomic across replicas and hosts. A counter starts at 0 and is
        forgotten ttl_s after it started (its first increment)."""
        ...

    def append(self, name: str, line: bytes) -> int:
        """Append one line (no newline in it) to a list; returns the list's size in bytes after it (newlines counted)."""
        ...

    def lines(self, name: str, limit: int) -> list[bytes]:
        """The list's lines in order (at most limit bytes read; [] when there is none)."""
        ...

    def replace_lines(self, name: str, lines: Iterable[bytes]) -> int:
        """Replace the whole list atomically (compaction); returns its size in bytes."""
        ...

    def size(self, name: str) -> int:
        """A blob's or a list's size in bytes (a list's newlines counted); 0 when there is none."""
        ...

    # --- coordination ------------------------------------------------------------------------------------------
    def lock(self, name: str, timeout_s: float = LOCK_TIMEOUT_S) -> AbstractContextManager[None]:
        """Hold the exclusive lock `name` for a with-block, across replicas and hosts (directory: an flock of the
        file `name`; Redis: a key with a lease, so a dead holder cannot keep it)."""
        ...

    def stamp(self, *names: str) -> Hashable:
        """Something that changes whenever any of these names is written or removed: compare it with the one you drew
        (directory: a stat per name; Redis: one MGET of their write counters)."""
        ...

    def wait(self, names: Iterable[str], since: Hashable, timeout_s: float) -> Hashable:
        """Block until stamp(*names) differs from since or timeout_s passed; returns the stamp now (Redis: woken by
        pub/sub, with a poll as the fallback; directory: a poll)."""
        ...

    def watch(self, names: Iterable[str]) -> Watch:
        """A long-lived wait() on these names for a watcher thread (Redis: one subscription kept open, not one per
        wait). Close it when done; a failed wait (StoreUnavailable) subscribes again on the next one."""
        ...

    # --- replicas ----------------------------------------------------------------------------------------------
    def heartbeat(self, replica: str, ttl_s: float, info: str = "") -> None:
        """Say that replica (a store name) is alive for the next ttl_s seconds, with a short info (its address)."""
        ...

    def replicas(self) -> dict[str, str]:
        """The replicas alive now: name -> info."""
        ...

    def ping(self) -> None:
        """Return when the store can be used; raise StoreUnavailable (or OSError) saying why not."""
        ...
