"""The server stops within 5 s of SIGTERM: a real `streamlit run app.py`, no mocks. (The same with a run in the
middle of Run to end is in tests/browser/test_untrusted.py.) Also the pieces: the exit hook and the one-job rule."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from specviz.workshop import jobs
from specviz.workshop.jobs import JobRefused, LongJobs
from specviz.workshop.processes import answers_ok

REPO = Path(__file__).resolve().parents[1]
EXIT_WITHIN_S = 5.0


def start_server(log_path: Path, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """`streamlit run app.py` on a free loopback port; returns once /_stcore/health answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")} | {"HF_HUB_OFFLINE": "1", **(env or {})}
    cmd = [
        sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port), "--server.headless", "true",
        "--server.address", "127.0.0.1", "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false",
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=full_env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 90
    while True:
        if answers_ok(f"{url}/_stcore/health"):
            return proc, url
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"streamlit did not start:\n{log_path.read_text(errors='replace')[-3000:]}")
        time.sleep(0.25)


def stop_within(proc: subprocess.Popen, seconds: float) -> tuple[int | None, float]:
    """SIGTERM, then (return code, seconds until exit); kills and returns (None, ...) if it did not exit in time."""
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
        return None, time.monotonic() - start
    return code, time.monotonic() - start


def test_server_exits_within_5_s_of_sigterm(tmp_path):
    proc, _ = start_server(tmp_path / "server.log")
    code, took = stop_within(proc, EXIT_WITHIN_S)
    log = (tmp_path / "server.log").read_text(errors="replace")
    assert code is not None, f"still running {took:.1f} s after SIGTERM:\n{log[-2000:]}"
    assert code == 0, f"exit code {code}:\n{log[-2000:]}"


def test_exit_hook_waits_for_turns_in_flight_then_gives_up(monkeypatch):
    monkeypatch.setattr(jobs, "shutting_down", threading.Event())
    left = [2]

    def in_flight() -> int:
        left[0] = max(0, left[0] - 1)
        return left[0]

    assert jobs.wait_for_turns(in_flight, timeout_s=2.0, poll_s=0.01)
    assert jobs.shutting_down.is_set()
    with pytest.raises(jobs.JobStopped, match="shutting down"):
        jobs.check_running()
    start = time.monotonic()
    assert not jobs.wait_for_turns(lambda: 1, timeout_s=0.2, poll_s=0.01)  # a stuck turn does not hold the exit
    assert time.monotonic() - start < 1.0


def test_one_long_job_per_participant():
    clock = [100.0]
    registry = LongJobs(clock=lambda: clock[0])
    with registry.hold("session-a", "a benchmark sweep"):
        clock[0] += 42
        with pytest.raises(JobRefused, match=r"already have a benchmark sweep running \(started 42 s ago\)"):
            with registry.hold("session-a", "the cost profile"):
                pass
        with registry.hold("session-b", "the cost profile"):  # another participant is not affected
            assert len(registry) == 2
        assert registry.running("session-a").what == "a benchmark sweep"
    assert registry.running("session-a") is None
    with pytest.raises(RuntimeError):
        with registry.hold("session-a", "a benchmark sweep"):
            raise RuntimeError("the job failed")
    assert len(registry) == 0  # a failed job frees its slot
