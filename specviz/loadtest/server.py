"""One `streamlit run app.py` for a load test: started on a free loopback port (offline, file watcher off), its health,
stopped; and its memory (RSS), once or sampled in a thread. The tests start their own (tests/browser/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from specviz.loadtest import REPO
from specviz.workshop.processes import answers_ok, free_port

LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
START_TIMEOUT_S = 120


def healthy(url: str) -> bool:
    """Streamlit's health endpoint answers 200."""
    return answers_ok(f"{url}/_stcore/health")


def start_server(mode: str, log_path: Path, *, drop_env: tuple[str, ...] = ("STREAMLIT_",), args: Sequence[str] = (), timeout_s: float = START_TIMEOUT_S) -> tuple[subprocess.Popen, str]:
    """The app in SPECVIZ_MODE=`mode`, its output in `log_path`; returns (the process, its URL) once healthy.
    drop_env: prefixes of inherited variables to drop; args: more streamlit flags. SystemExit with the log's tail
    when it does not start."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop_env)}
    env.update(PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", STREAMLIT_BROWSER_GATHER_USAGE_STATS="false", SPECVIZ_MODE=mode)
    cmd = [
        sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port), "--server.headless", "true",
        "--server.address", "127.0.0.1", "--server.fileWatcherType", "none", *args,
    ]  # fmt: skip
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while not healthy(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_server(proc)
            raise SystemExit(f"the server did not start:\n{log_path.read_text(errors='replace')[-3000:]}")
        time.sleep(0.25)
    return proc, url


def stop_server(proc: subprocess.Popen, timeout_s: float = 15) -> None:
    """SIGTERM (a room stops HAProxy and its replicas on it), then SIGKILL after `timeout_s`."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def rss_mb(pid: int | None) -> float | None:
    """A process's resident memory in MiB (psutil, or /proc without it); None when it cannot be read."""
    if pid is None:
        return None
    try:
        import psutil

        return psutil.Process(pid).memory_info().rss / 2**20
    except ImportError:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except Exception:
        return None
    return None


class RssSampler:
    """The server's RSS every `every_s` seconds in a thread; peak and last."""

    def __init__(self, pid: int | None, every_s: float = 0.5) -> None:
        self.pid, self.every_s, self.samples = pid, every_s, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            value = rss_mb(self.pid)
            if value is not None:
                self.samples.append(value)
            self._stop.wait(self.every_s)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)
