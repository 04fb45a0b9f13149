"""The directory backend of the room's store: today's run directory, file for file (the embedded default).

A name is a file in the directory (0700; each file 0600). A blob is a file replaced atomically (write_atomic), a list
is a file of lines appended with O_APPEND, a counter is a small file "<count> <started>" updated under an flock, a
lock is an flock of the file of that name, a replica's heartbeat is ``replica-<name>.alive`` (its mtime the beat). The
stamp is each file's (inode, mtime ns, size): a writer replaces or appends, so any change changes it. Replicas on one
machine share the directory; across machines it would need a shared disk (use Redis instead).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Hashable, Iterable, Iterator
from pathlib import Path

from specviz.workshop.files import flocked, write_atomic
from specviz.workshop.store.interface import LOCK_TIMEOUT_S, Entry, check_name

TMP_PREFIX = ".tmp-"  # write_atomic's temporary files
TMP_GRACE_S = 60.0  # a temporary file younger than this is another replica's write in progress
POLL_S = 0.2  # wait()'s poll
REPLICA_PREFIX, REPLICA_SUFFIX = "replica-", ".alive"


class DirectoryStore:
    """The room's state as files in one directory (specviz.workshop.store's interface)."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self.description = f"the directory {self.root}"

    def _path(self, name: str) -> Path:
        return self.root / check_name(name)

    def _ensure_dir(self) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.root.stat().st_mode & 0o077:
            os.chmod(self.root, 0o700)  # an existing directory others could read: close it

    # --- blobs ---------------------------------------------------------------------------------------------------

    def get(self, name: str, limit: int) -> bytes | None:
        try:
            with open(self._path(name), "rb") as f:
                return f.read(limit + 1)
        except FileNotFoundError:
            return None

    def put(self, name: str, data: bytes, ttl_s: float | None = None) -> None:
        path = self._path(name)
        self._ensure_dir()
        write_atomic(path, data)

    def delete(self, name: str) -> bool:
        try:
            self._path(name).unlink()
        except FileNotFoundError:
            return False
        return True

    def touch(self, name: str, ttl_s: float | None = None) -> bool:
        try:
            os.utime(self._path(name))
        except FileNotFoundError:
            return False
        return True

    def stat(self, name: str) -> Entry | None:
        try:
            info = self._path(name).stat()
        except FileNotFoundError:
            return None
        return Entry(name, info.st_size, info.st_mtime)

    def entries(self, prefix: str = "", suffix: str = "") -> list[Entry]:
        """Files named prefix*suffix, oldest first. A temporary file no longer being written (a writer that died
        mid-write) is garbage: it goes here."""
        out = []
        now = time.time()
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        for name in names:
            if name.startswith(TMP_PREFIX):
                self._clear_tmp(name, now)
                continue
            if not (name.startswith(prefix) and name.endswith(suffix)):
                continue
            try:
                check_name(name)
                info = (self.root / name).stat()
            except (ValueError, FileNotFoundError):  # not ours, or another replica removed it meanwhile
                continue
            out.append(Entry(name, info.st_size, info.st_mtime))
        out.sort(key=lambda e: (e.mtime, e.name))
        return out

    def _clear_tmp(self, name: str, now: float) -> None:
        path = self.root / name
        with contextlib.suppress(OSError):
            if now - path.stat().st_mtime >= TMP_GRACE_S:
                path.unlink()

    # --- counters, lists -----------------------------------------------------------------------------------------

    def incr(self, name: str, ttl_s: float) -> int:
        path = self._path(name)
        self._ensure_dir()
        with flocked(self.root / f".{name}.lock"):
            now = time.time()
            count, started = 0, now
            with contextlib.suppress(OSError, ValueError):
                raw_count, raw_started = path.read_bytes().split()
                count, started = int(raw_count), float(raw_started)
            if not 0 <= now - started < ttl_s or count < 0:
                count, started = 0, now
            count += 1
            write_atomic(path, f"{count} {started!r}".encode("ascii"))
        return count

    def append(self, name: str, line: bytes) -> int:
        if b"\n" in line:
            raise ValueError("a list's line holds no newline")
        path = self._path(name)
        self._ensure_dir()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line + b"\n")
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def lines(self, name: str, limit: int) -> list[bytes]:
        data = self.get(name, limit - 1) if limit > 0 else b""
        return [line for line in (data or b"").split(b"\n") if line]

    def replace_lines(self, name: str, lines: Iterable[bytes]) -> int:
        data = b"".join(line + b"\n" for line in lines)
        self.put(name, data)
        return len(data)

    def size(self, name: str) -> int:
        try:
            return self._path(name).stat().st_size
        except FileNotFoundError:
            return 0

    # --- coordination --------------------------------------------------------------------------------------------

    def lock(self, name: str, timeout_s: float = LOCK_TIMEOUT_S) -> contextlib.AbstractContextManager[None]:
        """An flock of the file `name` (it waits as flock does: a holder that dies releases it)."""
        return flocked(self._path(name))

    def stamp(self, *names: str) -> Hashable:
        out = []
        for name in names:
            try:
                info = os.stat(self._path(name))
                out.append((info.st_ino, info.st_mtime_ns, info.st_size))
            except OSError:
                out.append(None)
        return tuple(out)

    def wait(self, names: Iterable[str], since: Hashable, timeout_s: float) -> Hashable:
        return self.watch(names).wait(since, timeout_s)

    def watch(self, names: Iterable[str]) -> _PollWatch:
        return _PollWatch(self, tuple(names))

    # --- replicas ------------------------------------------------------------------------------------------------

    def heartbeat(self, replica: str, ttl_s: float, info: str = "") -> None:
        name = check_name(f"{REPLICA_PREFIX}{check_name(replica)}{REPLICA_SUFFIX}")
        self.put(name, json.dumps({"ttl": ttl_s, "info": info[:200]}).encode("utf-8"))

    def replicas(self) -> dict[str, str]:
        alive = {}
        now = time.time()
        for entry in self.entries(REPLICA_PREFIX, REPLICA_SUFFIX):
            try:
                raw = json.loads(self.get(entry.name, 1024) or b"")
                ttl, info = float(raw["ttl"]), str(raw["info"])
            except (ValueError, TypeError, KeyError, OSError):
                continue
            if now - entry.mtime < ttl:
                alive[entry.name[len(REPLICA_PREFIX) : -len(REPLICA_SUFFIX)]] = info
        return alive

    def ping(self) -> None:
        self._ensure_dir()
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise OSError(f"{self.description} cannot be written by this server's user")


class _PollWatch:
    """The directory's watch: a poll of the stamp every POLL_S."""

    def __init__(self, store: DirectoryStore, names: tuple[str, ...]) -> None:
        self.store, self.names = store, names

    def wait(self, since: Hashable, timeout_s: float) -> Hashable:
        deadline = time.monotonic() + timeout_s
        for _ in _polls(deadline):
            now = self.store.stamp(*self.names)
            if now != since:
                return now
        return self.store.stamp(*self.names)

    def close(self) -> None:
        pass


def _polls(deadline: float) -> Iterator[None]:
    """Yield now, then every POLL_S until deadline."""
    while True:
        yield
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(POLL_S, left))
