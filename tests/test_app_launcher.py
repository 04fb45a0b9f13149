"""`python -m specviz app`: the app started with shared mode's guard before the server (issue 42, item 1), as a room's
replicas and the container start. A real server in shared mode, a raw client that ran no script: its two-name
file_urls_request and its clear_cache are dropped and logged. The control: a plain `streamlit run app.py` answers
the same request (its guard starts only at a session's first script run) and says so in its log once it does."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.proto.BackMsg_pb2 import BackMsg

from specviz.cli import app as app_cli
from specviz.cli.main import main
from specviz.loadtest.protocol import StSession
from specviz.workshop.processes import answers_ok, free_port, stop_processes
from specviz.workshop.replicas.supervisor import WARM_START

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 120
RUN_TIMEOUT_S = 180  # a page run on a busy 2-core machine
FLAGS = ("--server.address", "127.0.0.1", "--server.headless", "true", "--server.fileWatcherType", "none")


def test_app_passes_every_flag_after_it_to_streamlit_run_after_warm_start(monkeypatch):
    execs = []
    monkeypatch.setattr(app_cli.os, "execv", lambda path, argv: execs.append(argv))
    assert main(["app", "--server.address", "0.0.0.0", "--server.port", "8501"]) == 0
    assert main(["app", "--", "--server.port", "8502"]) == 0
    assert execs[0] == [sys.executable, "-c", WARM_START, "run", str(REPO / "app.py"), "--server.address", "0.0.0.0", "--server.port", "8501"]
    assert execs[1][-2:] == ["--server.port", "8502"] and "--" not in execs[1]
    assert app_cli.streamlit_argv([])[-1] == str(REPO / "app.py")
    with pytest.raises(SystemExit):  # --help is ours; every other flag is streamlit's
        main(["app", "--help"])


def start(cmd: list[str], tmp: Path, name: str) -> tuple[subprocess.Popen, str, Path]:
    port, log = free_port(), tmp / f"{name}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMLIT_", "SPECVIZ_"))}
    env.update(PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", STREAMLIT_BROWSER_GATHER_USAGE_STATS="false", SPECVIZ_MODE="shared", SPECVIZ_RUN_DIR=str(tmp / f"{name}-runs"))
    with open(log, "wb") as out:
        proc = subprocess.Popen([*cmd, "--server.port", str(port), *FLAGS], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while not answers_ok(f"{url}/_stcore/health"):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_processes([proc], grace_s=15)
            pytest.fail(f"{name} did not start:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.25)
    return proc, url, log


@pytest.fixture
def launched(tmp_path) -> Iterator[tuple[str, Path]]:
    proc, url, log = start([sys.executable, "-m", "specviz", "app"], tmp_path, "app")
    try:
        yield url, log
    finally:
        stop_processes([proc], grace_s=15)


def clear_cache() -> BackMsg:
    msg = BackMsg()
    msg.clear_cache = True
    return msg


def test_a_launched_server_drops_a_raw_clients_hostile_messages_before_any_script_ran(launched):
    url, log = launched
    attacker = StSession(url, timeout_s=RUN_TIMEOUT_S)
    attacker.connect()  # no session of this server has run the script
    try:
        assert attacker.upload_urls(["a.json", "b.json"], timeout_s=5) is None, "two names: no uploader of specviz asks that"
        attacker.send(clear_cache())
        urls = attacker.upload_urls(["one.json"])
        assert urls and len(urls) == 1, "what an uploader sends still passes"
    finally:
        attacker.close()
    time.sleep(0.5)
    lines = [line for line in log.read_text(errors="replace").splitlines() if "refused" in line]
    assert any("file_urls_request" in line for line in lines) and any("clear_cache" in line for line in lines), lines
    assert "starts now, at the first script run" not in log.read_text(errors="replace")


def test_control_a_plain_streamlit_run_answers_them_until_a_script_ran(tmp_path):
    proc, url, log = start([sys.executable, "-m", "streamlit", "run", "app.py"], tmp_path, "plain")
    try:
        attacker = StSession(url, timeout_s=RUN_TIMEOUT_S)
        attacker.connect()
        urls = attacker.upload_urls(["a.json", "b.json"], timeout_s=10)
        attacker.close()
        assert urls and len(urls) == 2, "unguarded before the first script run: the hole `specviz app` closes"
        page = StSession(url, timeout_s=RUN_TIMEOUT_S)
        page.open()  # the first script run installs the guard, late, and the log says so
        page.close()
        time.sleep(0.5)
        assert "python -m specviz app" in log.read_text(errors="replace")
    finally:
        stop_processes([proc], grace_s=15)
