"""`python -m specviz room`: the HAProxy configuration (checked by the real haproxy), a clear message when haproxy is
missing, and a real room on loopback: replicas behind the balancer, sticky cookie, a killed replica started again,
the status file kept current, and nothing left running after SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from specviz.workshop.processes import free_port
from specviz.workshop.replicas.balancer import Backend, haproxy_config, parse_backend
from specviz.workshop.replicas.supervisor import Supervisor, threads_per_replica
from specviz.workshop.store.directory import DirectoryStore

REPO = Path(__file__).resolve().parents[1]
HAPROXY = next((p for p in ("/usr/sbin/haproxy", "/usr/bin/haproxy") if os.path.exists(p)), None)
needs_haproxy = pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (scripts/test.sh installs it: apt-get install haproxy)")


def _specviz(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specviz", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)


@needs_haproxy
def test_printed_configurations_are_valid_haproxy(tmp_path):
    cases = [("--replicas", "3"), ("--backend", "10.0.0.5:8501", "--backend", "worker-2:8501", "--bind", "0.0.0.0", "--port", "80")]
    for args in cases:
        out = _specviz("room", "--print-config", *args)
        assert out.returncode == 0, out.stderr
        assert "cookie SERVERID insert indirect nocache" in out.stdout and "option httpchk GET /_stcore/health" in out.stdout
        assert "timeout tunnel" in out.stdout and "option redispatch" in out.stdout
        path = tmp_path / "room.cfg"
        path.write_text(out.stdout)
        check = subprocess.run([HAPROXY, "-c", "-f", str(path)], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr + out.stdout
    assert "server r2 worker-2:8501 cookie r2" in out.stdout


def test_config_and_backend_parsing_refuse_nonsense():
    with pytest.raises(ValueError):
        haproxy_config("127.0.0.1", 8500, [])
    for bad in ("nohost", ":80", "host:", "host:99999", "host:http"):
        with pytest.raises(ValueError):
            parse_backend(bad, 0)
    assert parse_backend("[::1]:8501", 1) == Backend("r2", "::1", 8501)


def test_replicas_share_the_cores_out_instead_of_each_taking_all():
    assert threads_per_replica(2, cores=2) == 1
    assert threads_per_replica(8, cores=16) == 2
    assert threads_per_replica(3, cores=2) == 1  # never zero


@needs_haproxy
def test_each_replica_gets_its_share_of_threads_unless_the_owner_chose(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    room = Supervisor(2, free_port())
    try:
        assert room.env["OMP_NUM_THREADS"] == room.env["MKL_NUM_THREADS"] == str(threads_per_replica(2))
    finally:
        room.stop()
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    room = Supervisor(2, free_port())
    try:
        assert room.env["OMP_NUM_THREADS"] == "3"
    finally:
        room.stop()


def test_a_missing_haproxy_is_a_clear_message_and_starts_nothing(tmp_path):
    env = dict(os.environ, SPECVIZ_HAPROXY=str(tmp_path / "no-haproxy"))
    out = _specviz("room", "--replicas", "1", "--port", str(free_port()), "--status-file", str(tmp_path / "s.json"), env=env)
    assert out.returncode == 2
    assert "HAProxy is not installed" in out.stderr and "apt-get install haproxy" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "s.json").exists()


def wait_or_fail(predicate, timeout: float, what: str, log: Path):
    """predicate()'s first true value within timeout, else fail with the end of the log (the room tests share it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    pytest.fail(f"timed out waiting for {what}:\n{log.read_text(errors='replace')[-4000:]}")


def _status(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def _health(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
            return resp.status, " ".join(resp.headers.get_all("Set-Cookie") or [])
    except OSError:
        return 0, ""


@needs_haproxy
def test_a_room_supervises_its_replicas_and_stops_everything(tmp_path):
    port, status_file, log = free_port(), tmp_path / "room.json", tmp_path / "room.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMLIT_", "SPECVIZ_"))}
    env.update(HF_HUB_OFFLINE="1", SPECVIZ_RUN_DIR=str(tmp_path / "runs"))
    cmd = [sys.executable, "-m", "specviz", "room", "--replicas", "2", "--port", str(port), "--status-file", str(status_file)]
    with open(log, "wb") as out:
        room = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    pids: list[int] = []
    try:
        status = wait_or_fail(lambda: _status(status_file), 60, "the status file", log)
        assert status["url"] == f"http://127.0.0.1:{port}" and [r["id"] for r in status["replicas"]] == ["r1", "r2"]
        pids = [status["balancer_pid"], *(r["pid"] for r in status["replicas"])]
        # one request per try (the check and the answer from the same response); while the replicas start, an answer
        # can come back without the cookie, so the try repeats until a healthy replica answers through the balancer
        code, cookie = wait_or_fail(lambda: h if (h := _health(status["url"]))[0] == 200 and "SERVERID=r" in h[1] else None, 90, "health through the balancer", log)
        assert "SERVERID=r" in cookie  # the stickiness cookie
        store = DirectoryStore(tmp_path / "runs")  # each replica says it is alive in the room's store (specviz.workshop.liveness)
        wait_or_fail(lambda: set(store.replicas()) == {"r1", "r2"}, 30, "both replicas' heartbeats", log)
        os.kill(status["replicas"][0]["pid"], signal.SIGKILL)
        new = wait_or_fail(lambda: (s := _status(status_file)) and s["replicas"][0]["pid"] not in (None, status["replicas"][0]["pid"]) and s, 60, "a restart", log)
        pids.append(new["replicas"][0]["pid"])
        assert new["replicas"][1] == status["replicas"][1] and new["replicas"][0]["port"] == status["replicas"][0]["port"]
        text = log.read_text(errors="replace")
        assert "replica r1 exited with code -9" in text and "[r2]" in text  # each replica's lines carry its id
    finally:
        room.send_signal(signal.SIGTERM)
        room.wait(timeout=30)
    assert room.returncode == 0
    assert not status_file.exists()
    for pid in pids:
        wait_or_fail(lambda pid=pid: not _alive(pid), 10, f"pid {pid} to end", log)


@needs_haproxy
def test_each_replica_gets_its_part_of_the_memory_share_and_the_room_logs_it(monkeypatch, caplog):
    """Issue 42, item 5: N replicas on one machine each sized their KV budget from a quarter of its memory (N quarters
    together); now each gets the room's share divided by N, and the room says at start what that is."""
    import logging
    import shutil

    from specviz.workshop.budgets import MEMORY_SHARE_ENV

    monkeypatch.delenv(MEMORY_SHARE_ENV, raising=False)
    monkeypatch.delenv("SPECVIZ_MAX_KV_TOKENS", raising=False)
    room = Supervisor(4, free_port())
    try:
        assert float(room.env[MEMORY_SHARE_ENV]) == pytest.approx(0.25 / 4)
        with caplog.at_level(logging.INFO, logger="specviz.workshop.replicas"):
            room._log_budget()
        assert "each of 4 replicas may hold 6.2% of" in caplog.text and "GiB" in caplog.text
    finally:
        shutil.rmtree(room.config_dir, ignore_errors=True)
