"""The room's supervisor: N `streamlit run app.py` replicas on loopback ports, started warm, their output relayed with
each line prefixed by its replica's id, each started again when it exits (after a back-off when it keeps dying);
HAProxy started in front (specviz.workshop.replicas.balancer) and again if it dies, in front of any replicas on other hosts
too (--backend: started there by `specviz replica`, specviz.workshop.replicas.worker); a status file; everything stopped on
SIGINT/SIGTERM. The replicas always run in shared mode and share one store (SPECVIZ_STORE, else one run directory) and
one cookie secret. replica_command and shared_env are the one recipe for a replica, here and on a worker."""

from __future__ import annotations

import json
import logging
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specviz.workshop.budgets import MEMORY_SHARE_ENV, memory_limit, memory_share
from specviz.workshop.files import write_atomic
from specviz.workshop.presenter_key import KEY_ENV, KEY_SECRET
from specviz.workshop.processes import die_with_parent, free_port, stop_processes
from specviz.workshop.replicas.balancer import (
    Backend,
    RoomError,
    check_port_free,
    check_tls_cert,
    conn_per_source,
    find_haproxy,
    haproxy_config,
    parse_backend,
)
from specviz.workshop.replicas.key import room_presenter_key, secrets_files, terminal
from specviz.workshop.saved_runs import default_run_dir
from specviz.workshop.store import STORE_ENV

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[3]  # app.py lives here
COOKIE_SECRET_ENV = "STREAMLIT_SERVER_COOKIE_SECRET"  # signs Streamlit's cookies (XSRF): one value for the whole room
RESTART_BACKOFF_S = (0.5, 1, 2, 5, 10, 30)  # after consecutive quick exits
QUICK_EXIT_S = 30.0  # a replica that lived shorter than this counts as a quick exit


# A replica is `streamlit run app.py`, started after importing the app's heavy libraries (torch, transformers, plotly,
# pandas, through specviz.models and specviz.viz, which import no streamlit). Streamlit imports an app's modules when
# the first session runs its script: a fresh replica's first participant waited seconds for them, and the replica
# grew by about 450 MB at that moment, which read as memory a room's followers never gave back (docs/rooms.md).
# The guard on what participants send (specviz.ui.common.backmsgs) is installed before the server starts, so a
# restarted replica is never unguarded until its first session runs the script. It waits for the room's store (Redis
# down: it says so and waits) and then says it is alive every few seconds (specviz.workshop.liveness).
WARM_START = (
    "import specviz.models, specviz.viz; from specviz.ui.common.sessions import guard_server; guard_server(); "
    "from specviz.workshop.liveness import replica_start; replica_start(); "
    "from streamlit.web.cli import main; main(prog_name='streamlit')"
)


def replica_command(address: str, port: int, replica_id: str, streamlit_args: Sequence[str] = ()) -> list[str]:
    """The command line of one replica: `streamlit run app.py` on address:port, started warm (WARM_START), headless,
    its log lines carrying its id."""
    return [
        sys.executable, "-c", WARM_START, "run", str(REPO / "app.py"), "--server.port", str(port),
        "--server.address", address, "--server.headless", "true", "--server.fileWatcherType", "none",
        "--logger.messageFormat", f"%(asctime)s {replica_id} %(levelname)s %(name)s: %(message)s", *streamlit_args,
    ]  # fmt: skip


def shared_env(env: dict[str, str]) -> dict[str, str]:
    """A replica's environment from env: always shared mode (every browser reaches a replica through a balancer, so
    none of them is the owner at the keyboard; an inherited SPECVIZ_MODE=local is overridden, and the log says so),
    unbuffered output, no usage statistics."""
    env = dict(env)
    inherited = env.get("SPECVIZ_MODE", "").strip()
    if inherited.lower() not in ("", "shared"):
        log.warning("SPECVIZ_MODE=%s is ignored: a room's replicas always run in shared mode (docs/workshop.md)", inherited[:40])
    env["SPECVIZ_MODE"] = "shared"
    env.update(PYTHONUNBUFFERED="1", STREAMLIT_BROWSER_GATHER_USAGE_STATS="false")
    return env


def replica_memory_share(env: dict[str, str], replicas: int) -> str:
    """Each replica's share of memory for its KV caches (SPECVIZ_KV_MEMORY_SHARE): the room's share (the owner's, or
    a quarter) divided between the replicas, so N replicas together stay within it instead of taking N quarters."""
    try:
        return f"{memory_share(env) / max(1, replicas):.6f}"
    except ValueError as exc:
        raise RoomError(str(exc)) from None


def write_status(path: Path, status: dict) -> None:
    """Replace the status file atomically (readers never see half a file)."""
    write_atomic(path, json.dumps(status, indent=1).encode("utf-8"))


@dataclass
class Replica:
    """One supervised `streamlit run app.py` on a loopback port (started warm: WARM_START)."""

    id: str
    port: int
    proc: subprocess.Popen | None = None
    started: float = 0.0
    quick_exits: int = 0
    restart_at: float | None = None  # when it exited: the time to start it again
    buffer: bytes = field(default=b"", repr=False)


class Supervisor:
    """Start the replicas and the balancer, keep them running, stop all of them on SIGINT/SIGTERM."""

    def __init__(self, replicas: int, port: int, bind: str = "127.0.0.1", status_file: str | None = None, streamlit_args: Sequence[str] = (),
                 tls_cert: str | None = None, backends: Sequence[str] = ()) -> None:  # fmt: skip
        """backends: HOST:PORT of replicas on other hosts (`specviz replica` there), balanced beside the local ones."""
        if replicas < 0 or (replicas == 0 and not backends):
            raise RoomError(f"--replicas must be at least 1 (or 0 with --backend HOST:PORT for replicas started elsewhere); got {replicas}.")
        try:
            self.backends = [parse_backend(b, replicas + i) for i, b in enumerate(backends)]  # ids after the local r1..rN
        except ValueError as exc:
            raise RoomError(str(exc)) from None
        self.haproxy = find_haproxy()  # before anything starts: a missing haproxy starts nothing
        self.tls_cert = check_tls_cert(tls_cert) if tls_cert is not None else None
        check_port_free(bind, port)
        self.port, self.bind = port, bind
        self.status_file = Path(status_file).resolve() if status_file else None
        self.streamlit_args = list(streamlit_args)
        self.replicas = [Replica(f"r{i + 1}", free_port()) for i in range(replicas)]
        self.balancer: subprocess.Popen | None = None
        self.selector = selectors.DefaultSelector()
        self.stopping = False
        self.env = self._replica_env()
        self.per_source = conn_per_source(self.env)  # a bad setting fails before anything starts
        self.config_dir = Path(tempfile.mkdtemp(prefix="specviz-room-"))

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.bind in ("0.0.0.0", "") else self.bind
        return f"{'https' if self.tls_cert else 'http'}://{f'[{host}]' if ':' in host else host}:{self.port}"

    def _replica_env(self) -> dict[str, str]:
        """Shared mode (shared_env). One run directory and one cookie secret for all replicas (a browser moved to
        another replica stays valid), and the balancer's X-Forwarded-For read (it is on loopback, which
        specviz.workshop.clients always trusts). With replicas on other hosts the cookie secret must be the owner's:
        one made here would differ from theirs."""
        env = shared_env(dict(os.environ))
        env.setdefault("SPECVIZ_RUN_DIR", str(default_run_dir(env)))
        if self.backends and self.replicas and not env.get(COOKIE_SECRET_ENV):
            raise RoomError(f"A room with --backend and local replicas needs the room's one cookie secret: set {COOKIE_SECRET_ENV} here and on every worker (e.g. to the output of `python3 -c 'import secrets; print(secrets.token_hex(32))'`).")
        env.setdefault(COOKIE_SECRET_ENV, secrets.token_hex(32))
        if "OMP_NUM_THREADS" not in env:  # the owner's choice wins
            env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads_per_replica(len(self.replicas)))
        env[MEMORY_SHARE_ENV] = replica_memory_share(env, len(self.replicas))
        return env

    def _check_store(self) -> None:
        """Say when replicas on other hosts and this machine's share no store: without SPECVIZ_STORE the room's state
        (saved runs, the presentation, the key's counters) stays in each host's own run directory."""
        if self.backends and self.replicas and not self.env.get(STORE_ENV, "").strip():
            log.warning("%s is not set: this machine's replicas keep the room's state in %s, which the replicas on other hosts do not see; "
                        "set %s=redis://HOST:6379/0 here and on every worker (docs/rooms.md, Several machines)", STORE_ENV, self.env["SPECVIZ_RUN_DIR"], STORE_ENV)  # fmt: skip

    def _log_budget(self) -> None:
        """Say at start what memory each replica's KV-cache budget is cut from (each replica logs its budget in tokens
        when its first run reserves: specviz.ui.common.budgets)."""
        if not self.replicas:
            return
        if self.env.get("SPECVIZ_MAX_KV_TOKENS", "").strip() not in ("", "0"):
            log.info("KV-cache budget: SPECVIZ_MAX_KV_TOKENS=%s tokens per replica (%d replicas)", self.env["SPECVIZ_MAX_KV_TOKENS"][:20], len(self.replicas))
            return
        limit = memory_limit()
        try:
            import psutil

            ram = int(psutil.virtual_memory().total)
        except Exception:
            ram = None
        memory = min(m for m in (limit, ram) if m is not None) if (limit or ram) else None
        share = float(self.env[MEMORY_SHARE_ENV])
        where = "the container's limit" if limit is not None and (ram is None or limit <= ram) else "the machine's RAM"
        shown = f"{memory / 2**30:.1f} GiB ({where})" if memory else "unknown memory"
        log.info("KV-cache budget: each of %d replicas may hold %.1f%% of %s for runs' caches", len(self.replicas), 100 * share, shown)

    def _start_replica(self, r: Replica) -> None:
        cmd = replica_command("127.0.0.1", r.port, r.id, self.streamlit_args)
        env = dict(self.env, SPECVIZ_REPLICA_ID=r.id)
        r.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        os.set_blocking(r.proc.stdout.fileno(), False)
        self.selector.register(r.proc.stdout, selectors.EVENT_READ, r)
        r.started, r.restart_at = time.monotonic(), None
        log.info("replica %s started on 127.0.0.1:%d (pid %d)", r.id, r.port, r.proc.pid)

    def _start_balancer(self) -> None:
        backends = [*(Backend(r.id, "127.0.0.1", r.port) for r in self.replicas), *self.backends]
        path = self.config_dir / "haproxy.cfg"
        path.write_text(haproxy_config(self.bind, self.port, backends, self.tls_cert, self.per_source), encoding="utf-8")
        check = subprocess.run([self.haproxy, "-c", "-q", "-f", str(path)], capture_output=True, text=True)
        if check.returncode != 0:
            raise RoomError(f"HAProxy refused the room's configuration: {(check.stderr or check.stdout).strip()[-800:]}")
        self.balancer = subprocess.Popen([self.haproxy, "-db", "-f", str(path)], stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        log.info("balancer (haproxy pid %d) on %s", self.balancer.pid, self.url)

    def status(self) -> dict:
        return {
            "url": self.url,
            "balancer_pid": self.balancer.pid if self.balancer else None,
            "replicas": [{"id": r.id, "port": r.port, "pid": r.proc.pid if r.proc and r.proc.poll() is None else None} for r in self.replicas],
            "backends": [{"id": b.id, "host": b.host, "port": b.port} for b in self.backends],
        }

    def _write_status(self) -> None:
        if self.status_file is not None:
            write_status(self.status_file, self.status())

    def run(self) -> int:
        """Start everything, supervise until asked to stop, then stop everything. Returns the exit code."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._ask_stop)
        try:
            self._presenter_key()
            self._check_store()
            self._log_budget()
            for r in self.replicas:
                self._start_replica(r)
            self._start_balancer()
            self._write_status()
            elsewhere = f" and {len(self.backends)} on other hosts ({', '.join(f'{b.host}:{b.port}' for b in self.backends)})" if self.backends else ""
            print(f"specviz room: {len(self.replicas)} replicas{elsewhere} behind {self.url} (Ctrl-C stops the room)", file=sys.stderr, flush=True)
            while not self.stopping:
                self._relay_logs(0.5)
                self._supervise()
            return 0
        finally:
            self.stop()

    def _presenter_key(self) -> None:
        """Give the replicas a strong presenter key when the owner set none, shown once on the terminal; say so when
        the owner's key is too weak to use (room_presenter_key)."""
        key, warning = room_presenter_key(self.env, secrets_files(REPO))
        if warning:
            print(warning, file=sys.stderr, flush=True)
        if key is not None and self.backends:  # a key made here would reach only the local replicas
            if self.replicas:
                print(f"specviz room: no presenter key is set here, so presenting is off on this machine's replicas: every replica needs the same key; set {KEY_ENV} here and on every worker.", file=sys.stderr, flush=True)
            return
        if key is None:
            return
        with terminal() as tty:
            if tty is None:
                log.warning("no presenter key is set and this room has no terminal to show a new one on, so presenting is off: set %s", KEY_ENV)
                return
            self.env[KEY_ENV] = key
            tty.write(f"specviz room: the presenter key for this room (shown once, kept nowhere else): {key}\n"
                      f"  Type it in *Present to the room* in the sidebar. Set {KEY_ENV} (or {KEY_SECRET} in the secrets file) to choose your own.\n")  # fmt: skip
            tty.flush()

    def _ask_stop(self, signum, frame) -> None:
        self.stopping = True

    def _supervise(self) -> None:
        """Start again every replica that exited (after a back-off when it keeps dying); fail if the balancer died."""
        now, changed = time.monotonic(), False
        for r in self.replicas:
            if r.proc is not None and r.proc.poll() is not None and r.restart_at is None:
                self._drain(r)
                lived = now - r.started
                r.quick_exits = r.quick_exits + 1 if lived < QUICK_EXIT_S else 0
                delay = RESTART_BACKOFF_S[min(r.quick_exits, len(RESTART_BACKOFF_S) - 1)] if r.quick_exits else 0.0
                log.warning("replica %s exited with code %s after %.0f s; starting it again in %.1f s", r.id, r.proc.returncode, lived, delay)
                r.restart_at, changed = now + delay, True
            if r.restart_at is not None and now >= r.restart_at and not self.stopping:
                self._start_replica(r)
                changed = True
        if self.balancer is not None and self.balancer.poll() is not None and not self.stopping:
            log.warning("the balancer (haproxy) exited with code %s; starting it again", self.balancer.returncode)
            self._start_balancer()
            changed = True
        if changed:
            self._write_status()

    def _relay_logs(self, timeout: float) -> None:
        """Copy the replicas' output to ours, each line prefixed with its replica's id."""
        try:
            events = self.selector.select(timeout)
        except InterruptedError:
            return
        for key, _ in events:
            self._drain(key.data)

    def _drain(self, r: Replica) -> None:
        if r.proc is None or r.proc.stdout is None or r.proc.stdout.closed:
            return
        try:
            chunk = r.proc.stdout.read() or b""
        except (BlockingIOError, ValueError):
            chunk = b""
        r.buffer += chunk
        *lines, r.buffer = r.buffer.split(b"\n")
        for line in lines:
            sys.stderr.write(f"[{r.id}] {line.decode('utf-8', 'replace')}\n")
        sys.stderr.flush()
        if r.proc.poll() is not None:  # the pipe is done: stop watching it
            self.selector.unregister(r.proc.stdout)
            r.proc.stdout.close()

    def stop(self) -> None:
        """SIGTERM every child, wait, SIGKILL what is left; remove the status file (the room is gone)."""
        self.stopping = True
        stop_processes([p for p in [self.balancer, *(r.proc for r in self.replicas)] if p is not None])
        if self.status_file is not None:
            self.status_file.unlink(missing_ok=True)
        shutil.rmtree(self.config_dir, ignore_errors=True)


def threads_per_replica(replicas: int, cores: int | None = None) -> int:
    """torch's threads for one replica's passes: the cores shared out (each replica would otherwise start a thread per
    core, and N replicas' threads would fight over the same cores), at least one."""
    return max(1, (cores or os.cpu_count() or 2) // max(1, replicas))


def default_replicas() -> int:
    """Half the cores (a replica's model pass wants a second core), at least one."""
    return max(1, (os.cpu_count() or 2) // 2)
