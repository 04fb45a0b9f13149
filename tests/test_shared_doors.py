"""A real shared-mode server started as a room's replica is (WARM_START), spoken to by a raw client
(specviz.loadtest.protocol) that sends every BackMsg kind with hostile sizes before any script ran, and uploads under
ids it was never given (issue 42, items 1 and 2). The guard (specviz.ui.common.backmsgs) is there from the server's
start: only the allowed kinds reach Streamlit (each refusal logged once per session), a million-name
file_urls_request closes that client's websocket unread and a 300,000-name one is dropped unanswered, while another
session's page still runs and the health check answers at once; an upload is stored only under an id minted for
that session and within its uploader's and its session's caps, refused before the body is read otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.proto.BackMsg_pb2 import BackMsg
from websockets.exceptions import ConnectionClosed

from specviz.loadtest.protocol import StSession
from specviz.ui.common.backmsgs import ALLOWED, UPLOAD_CAPS, URL_REQUESTS_PER_MIN
from specviz.workshop.processes import answers_ok, free_port
from specviz.workshop.replicas.supervisor import WARM_START

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 120
RUN_TIMEOUT_S = 180  # a page run on a busy 2-core machine
HEALTH_WITHIN_S = 2.0  # the health check right after the hostile frames (the unguarded server took 13.7 s)
MB = 2**20


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, int]]:
    """The app in shared mode, started as a room's replica is; (its URL, its log, its pid)."""
    tmp = tmp_path_factory.mktemp("doors")
    port, log = free_port(), tmp / "streamlit.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMLIT_", "SPECVIZ_"))}
    env.update(PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", STREAMLIT_BROWSER_GATHER_USAGE_STATS="false", SPECVIZ_MODE="shared", SPECVIZ_RUN_DIR=str(tmp / "runs"))
    cmd = [sys.executable, "-c", WARM_START, "run", "app.py", "--server.port", str(port), "--server.address", "127.0.0.1",
           "--server.headless", "true", "--server.fileWatcherType", "none"]  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not answers_ok(f"{url}/_stcore/health"):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the server did not start:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.25)
        yield url, log, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def hostile(kind: str) -> BackMsg:
    """A BackMsg of this kind, as large as a field allows in a frame under the cap."""
    msg = BackMsg()
    field = BackMsg.DESCRIPTOR.fields_by_name[kind]
    if kind == "backend_operation_request":
        msg.backend_operation_request.request_id = "x" * 100_000
        msg.backend_operation_request.install_skills.SetInParent()
    elif field.message_type is not None and kind != "file_urls_request":
        getattr(msg, kind).SetInParent()
    elif field.message_type is None:
        setattr(msg, kind, True)
    return msg


def refusals(log: Path, session_id: str) -> list[str]:
    return [line for line in log.read_text(errors="replace").splitlines() if "refused" in line and session_id[:8] in line]


def session_of(urls: list[tuple[str, str]]) -> str:
    return urls[0][1].rstrip("/").split("/")[-2]  # /_stcore/upload_file/<session>/<file id>


def health_s(url: str) -> float:
    t0 = time.perf_counter()
    with urllib.request.urlopen(f"{url}/_stcore/health", timeout=60) as resp:
        resp.read()
    return time.perf_counter() - t0


def test_a_raw_client_reaches_streamlit_only_with_what_a_page_sends(server):
    url, log, _ = server
    victim = StSession(url, timeout_s=RUN_TIMEOUT_S)
    victim.open()
    attacker = StSession(url, timeout_s=RUN_TIMEOUT_S)
    attacker.connect()  # no script has run for this session: the guard must be there already
    urls = attacker.upload_urls(["one.json"])
    assert urls and len(urls) == 1, "one name, as an uploader asks: answered"
    sid = session_of(urls)
    assert attacker.upload_urls(["a.json", "b.json"], timeout_s=3) is None, "two names: no single-file uploader asks that"
    for _ in range(2):  # twice each: refused both times, logged once
        for kind in (f.name for f in BackMsg.DESCRIPTOR.oneofs_by_name["type"].fields):
            if kind not in ALLOWED or kind == "backend_operation_request":
                attacker.send(hostile(kind))
    crowd = BackMsg()
    crowd.file_urls_request.file_names.extend(["x"] * 300_000)  # under the frame cap: parsed, then dropped unanswered
    attacker.send(crowd)
    assert attacker.upload_urls(["two.json"], timeout_s=10), "the session still speaks (and the guard answers in order)"
    assert health_s(url) < HEALTH_WITHIN_S
    lines = refusals(log, sid)
    for kind in ("clear_cache", "load_git_info", "set_run_on_save", "backend_operation_request install_skills"):
        assert sum(f"a {kind}" in line for line in lines) == 1, (kind, lines)
    assert sum("file_urls_request" in line for line in lines) == 1, lines  # two names, then 300,000: one line
    assert "No handler" not in log.read_text(errors="replace")
    assert victim.rerun().status == 0 and not victim.exceptions()

    million = BackMsg()
    million.file_urls_request.file_names.extend(["x"] * 1_000_000)  # ~3 MB: over the frame cap
    with pytest.raises((ConnectionClosed, ConnectionError)):  # refused as it arrives: a 1009 close, or a reset mid-send
        attacker.send(million)
        attacker.upload_urls(["three.json"], timeout_s=10)
    assert health_s(url) < HEALTH_WITHIN_S
    assert victim.rerun().status == 0 and not victim.exceptions(), "the other session is untouched"
    victim.close()


def test_file_urls_requests_are_rate_limited_per_session(server):
    url, _, _ = server
    s = StSession(url, timeout_s=RUN_TIMEOUT_S)
    s.connect()
    answered = sum(bool(s.upload_urls([f"{i}.json"], timeout_s=2 if i >= URL_REQUESTS_PER_MIN else 10)) for i in range(URL_REQUESTS_PER_MIN + 2))
    assert answered == min(URL_REQUESTS_PER_MIN, UPLOAD_CAPS.minted)
    s.close()


def test_uploads_are_kept_only_under_issued_ids_and_within_the_caps(server):
    url, _, _ = server
    a, b = StSession(url, timeout_s=RUN_TIMEOUT_S), StSession(url, timeout_s=RUN_TIMEOUT_S)
    a.connect()
    b.connect()
    (fid, path), *_ = a.upload_urls(["run.json"])
    base = path.rsplit("/", 1)[0]
    assert a.upload(path, b'{"a": 1}') == 204
    assert a.upload(f"{base}/a-made-up-id", b'{"a": 1}') == 403
    (other, other_path), *_ = b.upload_urls(["run.json"])
    assert a.upload(f"{base}/{other}", b'{"a": 1}') == 403, "an id minted for another session"
    assert a.upload(f"{base}/{fid}", b"", declared=60 * MB, timeout_s=15) == 413  # over server.maxUploadSize
    more = [a.upload_urls([f"{i}.json"])[0][1] for i in range(UPLOAD_CAPS.session_files)]
    statuses = [a.upload(p, b"{}") for p in more]
    assert statuses == [204] * (UPLOAD_CAPS.session_files - 1) + [413], "one file stored before, then up to the session's cap"
    a.close()
    b.close()


def test_an_uploader_cap_holds_before_the_body_is_read(server):
    url, _, _ = server
    s = StSession(url, timeout_s=RUN_TIMEOUT_S, page="race")
    s.open()  # the race page draws its uploader (4 MB): the URLs minted now take 4 MB
    (_, path), *_ = s.upload_urls(["race.json"])
    assert s.upload(path, b"", declared=10 * MB, timeout_s=15) == 413, "refused on its Content-Length, no body sent"
    assert s.upload(path, b'{"not": "a race"}') == 204
    s.close()


def test_a_frame_over_the_cap_is_refused_as_it_arrives_not_read_into_memory(server):
    """Streamlit gave uvicorn its 200 MB outbound cap as the inbound limit: a 100 MB frame was read whole (RSS up by
    at least its size) before Streamlit closed the connection for its size."""
    import threading

    import psutil

    url, _, pid = server
    proc, peak, done = psutil.Process(pid), [0], threading.Event()
    base = proc.memory_info().rss

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.01)

    s = StSession(url, timeout_s=RUN_TIMEOUT_S)
    s.connect()
    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    try:
        with pytest.raises((ConnectionClosed, ConnectionError)):  # the connection ends: a reset while sending, or 1009 after
            s.send(b"\x00" * (100 * MB))
            s.upload_urls(["after.json"], timeout_s=30)
        time.sleep(0.5)
    finally:
        done.set()
        watcher.join(timeout=5)
        s.close()
    assert (peak[0] - base) / MB < 40, f"the server grew {(peak[0] - base) / MB:.0f} MB while a 100 MB frame arrived"
    assert health_s(url) < HEALTH_WITHIN_S
