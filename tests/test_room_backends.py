"""Replicas a room did not start (issue 46, item 2): `specviz replica` on a worker (the room's cookie secret, store and
trusted proxies; shared mode; started warm) and `specviz room --replicas 0 --backend HOST:PORT ...` balancing them.

The end-to-end test stands in for other hosts with this machine's non-loopback address: the replicas listen there,
so HAProxy reaches them from that address (not loopback, which a replica always trusts) and each replica must be
told that the balancer is a trusted proxy. Checked: pages through HAProxy on both replicas; the presenter key's
per-client count reads the balancer's X-Forwarded-For (three wrong keys lock one client, not its neighbour); a
replica that does not trust the peer ignores a client's X-Forwarded-For (three claimed addresses are one client); a
killed replica is taken out by HAProxy's health check and every new page lands on the other. The two balanced
replicas share what a room shares across hosts, Redis (a redis-server of the test's own), and no run directory.
Known-bad: the code before refused --replicas 0 and had no `replica` command."""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from specviz.cli import build_parser
from specviz.loadtest.protocol import StSession
from specviz.workshop import presenter_key as pk
from specviz.workshop.processes import answers_ok, free_port
from specviz.workshop.replicas.balancer import Backend, RoomError
from specviz.workshop.replicas.supervisor import Supervisor
from specviz.workshop.replicas.worker import replica_id, worker_env
from tests.store_helpers import needs_redis
from tests.test_room_supervisor import _status, needs_haproxy, wait_or_fail

REPO = Path(__file__).resolve().parents[1]
KEY = "a presenter key for the backends test"
SECRET = "0123456789abcdef" * 4
HEALTH_TIMEOUT_S = 240


def host_address() -> str | None:
    """This machine's address on its default route (not loopback), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.254", 9))  # no packet is sent: this only picks the route and its source address
            address = s.getsockname()[0]
        except OSError:
            return None
    return None if ipaddress.ip_address(address).is_loopback else address


# --- the worker's environment ------------------------------------------------------------------------------------


def test_a_replica_needs_the_rooms_cookie_secret_and_checks_its_trusted_proxies():
    with pytest.raises(RoomError, match="STREAMLIT_SERVER_COOKIE_SECRET is not set"):
        worker_env({}, "0.0.0.0", 8501)
    with pytest.raises(RoomError, match="'balancer' is not an address"):
        worker_env({"STREAMLIT_SERVER_COOKIE_SECRET": SECRET}, "0.0.0.0", 8501, ["balancer"])
    with pytest.raises(RoomError, match="not an address"):
        worker_env({"STREAMLIT_SERVER_COOKIE_SECRET": SECRET, "SPECVIZ_TRUSTED_PROXIES": "10.0.0.0/33"}, "0.0.0.0", 8501)
    base = {"STREAMLIT_SERVER_COOKIE_SECRET": SECRET, "SPECVIZ_MODE": "local", "SPECVIZ_TRUSTED_PROXIES": "10.0.0.0/24"}
    env, warnings = worker_env(base, "0.0.0.0", 8501, ["10.1.2.3", "10.0.0.0/24"], "w1")
    assert env["SPECVIZ_MODE"] == "shared" and env["SPECVIZ_REPLICA_ID"] == "w1"
    assert env["SPECVIZ_TRUSTED_PROXIES"] == "10.0.0.0/24,10.1.2.3" and env["STREAMLIT_SERVER_COOKIE_SECRET"] == SECRET
    assert len(warnings) == 1 and "SPECVIZ_STORE is not set" in warnings[0]
    _, warnings = worker_env({"STREAMLIT_SERVER_COOKIE_SECRET": SECRET, "SPECVIZ_STORE": "redis://store:6379/0"}, "0.0.0.0", 8501)
    assert len(warnings) == 1 and "no trusted proxy" in warnings[0] and "--trusted-proxy" in warnings[0]
    with pytest.raises(RoomError, match="SPECVIZ_STORE must be a redis") as caught:
        worker_env({"STREAMLIT_SERVER_COOKIE_SECRET": SECRET, "SPECVIZ_STORE": "http://user:hunter2@store/"}, "0.0.0.0", 8501)
    assert "hunter2" not in str(caught.value)
    with pytest.raises(RoomError, match="--id"):
        replica_id("<script>", 8501)
    assert replica_id(None, 8502).endswith(":8502")


def test_the_replica_command_says_what_is_missing_and_starts_nothing(tmp_path):
    env = clean_env(tmp_path)
    for args, said in ((["--port", str(free_port())], "STREAMLIT_SERVER_COOKIE_SECRET is not set"), (["--port", "0"], "is not a port")):
        done = subprocess.run([sys.executable, "-m", "specviz", "replica", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_the_room_balances_backends_with_or_without_local_replicas(monkeypatch, caplog):
    args = build_parser().parse_args(["room", "--replicas", "0", "--backend", "10.0.0.5:8501", "--backend", "worker-2:8501"])
    assert args.replicas == 0 and args.backend == ["10.0.0.5:8501", "worker-2:8501"]
    with pytest.raises(RoomError, match="at least 1 .*--backend"):
        Supervisor(0, free_port())
    with pytest.raises(RoomError, match="not HOST:PORT"):
        Supervisor(0, free_port(), backends=["worker-2"])
    monkeypatch.delenv("STREAMLIT_SERVER_COOKIE_SECRET", raising=False)
    with pytest.raises(RoomError, match="cookie secret"):  # local replicas beside remote ones: one secret for all
        Supervisor(1, free_port(), backends=["10.0.0.5:8501"])
    room = Supervisor(0, free_port(), backends=["10.0.0.5:8501", "worker-2:8501"])
    try:
        assert room.backends == [Backend("r1", "10.0.0.5", 8501), Backend("r2", "worker-2", 8501)]
        assert room.status()["backends"] == [{"id": "r1", "host": "10.0.0.5", "port": 8501}, {"id": "r2", "host": "worker-2", "port": 8501}]
    finally:
        room.stop()
    monkeypatch.setenv("STREAMLIT_SERVER_COOKIE_SECRET", SECRET)
    monkeypatch.delenv("SPECVIZ_STORE", raising=False)
    room = Supervisor(1, free_port(), backends=["10.0.0.5:8501"])
    try:
        assert [b.id for b in room.backends] == ["r2"] and room.env["STREAMLIT_SERVER_COOKIE_SECRET"] == SECRET  # r1 is local
        with caplog.at_level(logging.WARNING, logger="specviz.workshop.replicas"):
            room._check_store()
        assert "SPECVIZ_STORE is not set" in caplog.text  # local replicas beside remote ones would share nothing
        caplog.clear()
        room.env["SPECVIZ_STORE"] = "redis://store:6379/0"
        room._check_store()
        assert not caplog.text
    finally:
        room.stop()


# --- end to end --------------------------------------------------------------------------------------------------


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMLIT_", "SPECVIZ_"))}
    env.update(HF_HUB_OFFLINE="1", HOME=str(tmp_path / "home"), **extra)
    return env


@contextlib.contextmanager
def process(cmd: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def guess(url: str, key: str, source: str | None = None, headers: dict[str, str] | None = None) -> tuple[str, str]:
    """One try at the presenter key from a fresh session: what the sidebar said, and which replica served it."""
    with StSession(url, source=source, headers=headers) as session:
        served = " ".join(t for t in session.texts() if "Served by replica" in t)
        session.set_widget("present_key", key)
        session.click("present")
        said = " ".join(session.alerts())
        assert not session.exceptions(), session.exceptions()
    return said, served


@needs_haproxy
@needs_redis
def test_a_room_of_replicas_it_did_not_start(tmp_path, tiny_dir, redis_server):
    address = host_address()
    if address is None:
        pytest.skip("this machine has no non-loopback address to stand in for another host")
    shared = dict(SPECVIZ_TARGETS=str(tiny_dir["llama"]), SPECVIZ_PRESENTER_KEY=KEY, STREAMLIT_SERVER_COOKIE_SECRET=SECRET)
    ports = [free_port(address) for _ in range(3)]
    worker = [sys.executable, "-m", "specviz", "replica", "--bind", address]
    with contextlib.ExitStack() as stack:
        # as on two hosts: each replica its own run directory, the room's state in Redis
        replicas = [
            stack.enter_context(process([*worker, "--port", str(ports[i]), "--id", f"w{i + 1}", "--trusted-proxy", address],
                                        clean_env(tmp_path, SPECVIZ_RUN_DIR=str(tmp_path / f"runs-w{i + 1}"), SPECVIZ_STORE=redis_server.url, **shared),
                                        tmp_path / f"w{i + 1}.log"))
            for i in range(2)
        ]  # fmt: skip
        # a replica that trusts another proxy only: a client's X-Forwarded-For from this machine's address is not read
        # (its own store, the run directory: its counts stay apart from the room's)
        stack.enter_context(process([*worker, "--port", str(ports[2]), "--id", "w3", "--trusted-proxy", "203.0.113.1"],
                                    clean_env(tmp_path, SPECVIZ_RUN_DIR=str(tmp_path / "runs-w3"), **shared), tmp_path / "w3.log"))  # fmt: skip
        port, status_file, room_log = free_port(), tmp_path / "room.json", tmp_path / "room.log"
        room_cmd = [sys.executable, "-m", "specviz", "room", "--replicas", "0", "--port", str(port), "--status-file", str(status_file),
                    "--backend", f"{address}:{ports[0]}", "--backend", f"{address}:{ports[1]}"]  # fmt: skip
        room = stack.enter_context(process(room_cmd, clean_env(tmp_path), room_log))
        for i, p in enumerate(ports):
            wait_or_fail(lambda p=p: answers_ok(f"http://{address}:{p}/_stcore/health"), HEALTH_TIMEOUT_S, f"replica w{i + 1}", tmp_path / f"w{i + 1}.log")
        status = wait_or_fail(lambda: _status(status_file), 60, "the room's status file", room_log)
        assert status["replicas"] == [] and [b["id"] for b in status["backends"]] == ["r1", "r2"]
        url = status["url"]
        wait_or_fail(lambda: answers_ok(f"{url}/_stcore/health"), 60, "health through the balancer", room_log)
        # one replica up answers health; the guesses below must find both in the rotation (HAProxy logs "2 active")
        wait_or_fail(lambda: "2 active and" in room_log.read_text(errors="replace"), 60, "both replicas up behind the balancer", room_log)
        for w in ("w1", "w2"):
            text = (tmp_path / f"{w}.log").read_text(errors="replace")
            assert "SPECVIZ_STORE is not set" not in text and "no trusted proxy" not in text, text[-2000:]
        assert "SPECVIZ_STORE is not set" in (tmp_path / "w3.log").read_text(errors="replace")

        # pages through HAProxy, on both replicas; the balancer's X-Forwarded-For counts each client apart
        served = set()
        for n in range(pk.CLIENT_FREE_TRIES):
            said, by = guess(url, f"wrong guess {n}", source="127.0.0.11")
            served.add(by)
            assert "That is not the presenter key" in said, said
        assert "from your address" in said, said
        assert served == {"Served by replica w1", "Served by replica w2"}, served
        said, _ = guess(url, "a neighbour's wrong guess", source="127.0.0.12")
        assert "That is not the presenter key" in said and "Too many wrong keys" not in said, said

        # the replica that does not trust this machine's address: three claimed clients are one client
        for n in range(pk.CLIENT_FREE_TRIES):
            said, by = guess(f"http://{address}:{ports[2]}", f"wrong guess {n}", headers={"X-Forwarded-For": f"198.51.100.{n + 1}"})
            assert by == "Served by replica w3" and "That is not the presenter key" in said, said
        assert "from your address" in said, said

        # a dead replica: HAProxy's health check takes it out and every new page lands on the other
        downs = room_log.read_text(errors="replace").count("replicas/r1 is DOWN")  # it was down before it started, too
        os.kill(replicas[0].pid, signal.SIGKILL)
        wait_or_fail(lambda: room_log.read_text(errors="replace").count("replicas/r1 is DOWN") > downs, 60, "the health check to take r1 out", room_log)
        for _ in range(3):
            with StSession(url) as session:
                assert any("Served by replica w2" in t for t in session.texts()) and not session.exceptions(), session.texts()
        assert room.poll() is None
