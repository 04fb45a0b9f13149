"""Child processes a server starts (a room's replicas and balancer, the room exercise's two services, the load tools'
servers): a free loopback port to give one, whether one answers yet, a child that dies with its parent, and stopping a
group of them."""

from __future__ import annotations

import ctypes
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Sequence

STOP_GRACE_S = 10.0


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def answers_ok(url: str, timeout_s: float = 2.0) -> bool:
    """A GET of `url` answers 200: a child server's health check. Refused, timed out or any other status: False."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return resp.status == 200
    except OSError:  # URLError and HTTPError are OSErrors
        return False


def die_with_parent() -> None:
    """In the child, before exec: get SIGTERM when the supervisor dies, even by SIGKILL (Linux), so nothing is orphaned."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def stop_processes(procs: Sequence[subprocess.Popen], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM every process still running, wait up to grace_s for all of them together, SIGKILL what is left."""
    running = [p for p in procs if p.poll() is None]
    for p in running:
        p.terminate()
    deadline = time.monotonic() + grace_s
    for p in running:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)
