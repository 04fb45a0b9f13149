"""The run directory's two file habits, in one place: replace a file atomically, and hold an flock while a
read-modify-write runs, so the replicas sharing the directory never see half a file or interleave two writers.

    write_atomic(root / "room.presentation", data)     # a temporary file (0600) in the same folder, then os.replace
    with flocked(root / ".room.lock"):                  # exclusive, released when the block ends (or the process dies)
        ...
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def write_atomic(path: Path, data: bytes) -> None:
    """Replace path with data: readers see the old file or the new one, never a part (a crash leaves the old one).
    The file is 0600 (mkstemp's mode): only the server's user reads the run directory. OSError as the disk says
    (ENOSPC on a full disk); the temporary file never stays behind."""
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=path.suffix, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def flocked(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive flock on lock_path (made 0600 in a 0700 folder when missing) for the with-block."""
    lock_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
