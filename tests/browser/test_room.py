"""A room in a real browser: `python -m specviz room --replicas 2` (real HAProxy, real replicas), a session stepped
through the balancer, every replica SIGKILLed and started again by the supervisor, the URL reloaded with its run
token: the run is back at the same round, and Step continues it exactly (the stream equals an uninterrupted run's)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlparse

import pytest

from specviz.loadtest.browser import click_button, exceptions, main_text, metric_value, stream_text, wait, wait_idle
from specviz.loadtest.server import stop_server
from specviz.workshop.saved_runs import RunStore
from tests.browser.conftest import REPO, _free_port, _healthy
from tests.test_room_supervisor import wait_or_fail

STEP_TIMEOUT_S = 180
PROMPT = "the quick brown fox jumps over the lazy dog the quick brown fox"
SETTINGS = {"drafter": "ngram", "temperature": "1", "seed": "5", "max_new_tokens": "24", "num_draft_tokens": "3", "prompt": PROMPT}
HAPROXY = next((p for p in ("/usr/sbin/haproxy", "/usr/bin/haproxy") if os.path.exists(p)), None)


def _status(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _all_up(status_file: Path, log: Path, old_pids: set[int] = frozenset()) -> dict:
    """The status once every replica runs (with a pid not in old_pids) and answers its health check."""

    def ready():
        s = _status(status_file)
        if not s or any(r["pid"] is None or r["pid"] in old_pids for r in s["replicas"]):
            return None
        return s if all(_healthy(f"http://127.0.0.1:{r['port']}") for r in s["replicas"]) and _healthy(s["url"]) else None

    return wait_or_fail(ready, 120, "every replica up", log)


@contextlib.contextmanager
def room(tmp_path: Path, target: str, **extra_env: str) -> Iterator[tuple[dict, Path, Path]]:
    status_file, log, run_dir = tmp_path / "room.json", tmp_path / "room.log", tmp_path / "runs"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMLIT_", "SPECVIZ_"))}
    env.update(HF_HUB_OFFLINE="1", SPECVIZ_TARGETS=target, SPECVIZ_RUN_DIR=str(run_dir), **extra_env)
    cmd = [sys.executable, "-m", "specviz", "room", "--replicas", "2", "--port", str(_free_port()), "--status-file", str(status_file)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield _all_up(status_file, log), log, run_dir
    finally:
        stop_server(proc, timeout_s=30)


def open_url(driver, url: str) -> None:
    """open_page for a full URL with a query (open_page appends a path, which would end the last value with '/')."""
    driver.get(url)
    wait(driver, STEP_TIMEOUT_S).until(lambda d: d.find_elements("css selector", '[data-testid="stMainBlockContainer"] [data-testid="stElementContainer"]'))
    wait_idle(driver, STEP_TIMEOUT_S)


def step(driver, rounds_before: int) -> None:
    click_button(driver, "step")
    wait(driver, STEP_TIMEOUT_S).until(lambda d: metric_value(d, "rounds") == str(rounds_before + 1))
    wait_idle(driver, STEP_TIMEOUT_S)


def run_token(driver) -> str | None:
    values = parse_qs(urlparse(driver.current_url).query).get("run")
    return values[-1] if values else None


@pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (scripts/test.sh installs it: apt-get install haproxy)")
def test_a_run_survives_every_replica_being_killed(make_driver, tmp_path, tiny_dir):
    with room(tmp_path, str(tiny_dir["llama"])) as (status, log, run_dir):
        url = f"{status['url']}/?{urlencode(SETTINGS)}"
        solo = make_driver()  # the uninterrupted run, through the same balancer
        open_url(solo, url)
        solo_texts = []
        for n in range(4):
            step(solo, n)
            solo_texts.append(stream_text(solo))
        expected = solo_texts[-1]
        stay = make_driver()  # a tab left open across the crash: its next Step restores and steps
        open_url(stay, url)
        step(stay, 0)

        driver = make_driver()
        open_url(driver, url)
        step(driver, 0)
        step(driver, 1)
        token = wait_or_fail(lambda: run_token(driver), 30, "the run token in the URL", log)
        assert "Served by replica r" in driver.find_element("css selector", '[data-testid="stSidebar"]').text
        saved_url = driver.current_url

        for r in status["replicas"]:
            os.kill(r["pid"], signal.SIGKILL)
        _all_up(tmp_path / "room.json", log, old_pids={r["pid"] for r in status["replicas"]})

        # the tab left open reconnects to a new replica, whose first full run restores the run from its URL (?run=);
        # a Step is a fragment run, which a fresh session cannot serve before that, so the tab waits for the restore
        wait(stay, STEP_TIMEOUT_S).until(lambda d: "Restored this run at round 1" in main_text(d))
        click_button(stay, "step")
        wait(stay, STEP_TIMEOUT_S).until(lambda d: metric_value(d, "rounds") == "2")
        wait_idle(stay, STEP_TIMEOUT_S)
        assert stream_text(stay) == solo_texts[1]

        open_url(driver, saved_url)  # a reload after the crash, on whichever replica the balancer picks
        wait(driver, STEP_TIMEOUT_S).until(lambda d: metric_value(d, "rounds") == "2")
        assert "Restored this run at round 2" in main_text(driver)
        assert run_token(driver) not in (None, token)  # this browser's own copy under a new token
        step(driver, 2)
        step(driver, 3)
        assert stream_text(driver) == expected
        assert RunStore(run_dir).load(run_token(driver)).num_rounds == 4
        assert exceptions(driver) == exceptions(solo) == exceptions(stay) == []
        assert "Traceback" not in log.read_text(errors="replace")
