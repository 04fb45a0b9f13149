"""A room for a load test: `python -m specviz room --replicas N` started with a fresh run directory and always stopped,
its handle (URL, status file, log), HAProxy's stickiness (which replica a protocol session is on, or pinning one
there), and the replicas' `specviz.timing` lines from the room's log. The room's scenarios (room_load, presenter,
forks, attacks) build on this module; it imports none of them."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from specviz.loadtest import REPO
from specviz.loadtest import harness as lp
from specviz.loadtest.protocol import StSession
from specviz.loadtest.server import healthy, stop_server
from specviz.ui.common.timing import parse_line
from specviz.workshop.processes import free_port

STICKY_COOKIE = "SERVERID"  # HAProxy's stickiness cookie (specviz.workshop.replicas.balancer.haproxy_config)
ROOM_START_TIMEOUT_S = 180


@dataclass(frozen=True)
class RoomHandle:
    url: str
    status_file: Path
    log_path: Path

    def status(self) -> dict | None:
        try:
            return json.loads(self.status_file.read_text())
        except (OSError, ValueError):
            return None

    def pid_of(self, replica: str) -> int | None:
        status = self.status() or {"replicas": []}
        return next((r["pid"] for r in status["replicas"] if r["id"] == replica), None)


def wait_all_up(status_file: Path, timeout_s: float = ROOM_START_TIMEOUT_S, old_pids: frozenset[int] = frozenset()) -> dict:
    """The room's status once every replica runs (with a pid not in old_pids) and the balancer answers."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            s = json.loads(status_file.read_text())
            pids_new = all(r["pid"] is not None and r["pid"] not in old_pids for r in s["replicas"])
            if pids_new and all(healthy(f"http://127.0.0.1:{r['port']}") for r in s["replicas"]) and healthy(s["url"]):
                return s
        time.sleep(0.25)
    raise TimeoutError(f"the room's replicas were not all up within {timeout_s:.0f} s")


@contextlib.contextmanager
def room(replicas: int, workdir: Path, env: dict[str, str] | None = None, args: Sequence[str] = ()) -> Iterator[RoomHandle]:
    """`python -m specviz room --replicas N [args]` on a free port with a fresh run directory; always stopped
    (SIGTERM: the room stops HAProxy and every replica)."""
    status_file, log_path = workdir / "room.json", workdir / "room.log"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")}
    full_env.update(HF_HUB_OFFLINE="1", SPECVIZ_RUN_DIR=str(workdir / "runs"), **(env or {}))
    cmd = [sys.executable, "-m", "specviz", "room", "--replicas", str(replicas), "--port", str(free_port()), "--status-file", str(status_file), *args]
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=full_env, stdout=out, stderr=subprocess.STDOUT)
    try:
        try:
            status = wait_all_up(status_file)
        except TimeoutError as exc:
            raise SystemExit(f"{exc}:\n{log_path.read_text(errors='replace')[-3000:]}") from None
        yield RoomHandle(status["url"], status_file, log_path)
    finally:
        stop_server(proc, timeout_s=30)


def sticky_replica(session: StSession) -> str | None:
    return next((c.value for c in session.cookies if c.name == STICKY_COOKIE), None)


def pin_replica(session: StSession, replica: str) -> StSession:
    """Send a session (before it opens) to one replica, as a browser holding that replica's sticky cookie goes."""
    session.set_cookie(STICKY_COOKIE, replica)
    return session


def replica_lines(log_path: Path, offset: int) -> dict[str, list[dict]]:
    """The timing lines written after byte `offset` of the room's log, by replica id (the `[rN]` prefix)."""
    with open(log_path, "rb") as f:
        f.seek(offset)
        text = f.read().decode("utf-8", errors="replace")
    by_replica: dict[str, list[dict]] = {}
    for line in text.splitlines():
        if line.startswith("[r") and "]" in line and (fields := parse_line(line)) is not None:
            by_replica.setdefault(line[1 : line.index("]")], []).append(fields)
    return by_replica


def pooled_steps(by_replica: dict[str, list[dict]]) -> dict:
    """p50/p95 server-side Step over the Steps of every replica together (never one replica's figure), with how many
    Steps that is and the worst replica's p95 next to it, so a slow replica cannot hide in the pool."""
    times = [float(t["script_s"]) for rlines in by_replica.values() for t in lp.step_lines(rlines)]
    worst = [lp.percentile([float(t["script_s"]) for t in lp.step_lines(r)], 0.95) for r in by_replica.values()]
    worst = [w for w in worst if w is not None]
    return {"p50": lp.rounded(lp.percentile(times, 0.5)), "p95": lp.rounded(lp.percentile(times, 0.95)), "steps": len(times), "worst_replica_p95": lp.rounded(max(worst)) if worst else None}
