"""What a participant's client may send a shared server (specviz.ui.common.backmsgs), without a server: the BackMsg
allowlist (every kind of this Streamlit's BackMsg is allowed or refused on purpose), the cap on names and the rate of
file_urls_requests, the upload checks (ids the server issued to that session, each uploader's cap, per-session and
per-process counts and bytes), the upload limits beside the real uploaders, and HAProxy refusing an oversized upload
body by its Content-Length before a replica sees it (a real haproxy in front of a tiny HTTP server). The same guard
against a real server, from a raw client: tests/browser/test_shared_doors.py."""

from __future__ import annotations

import http.client
import http.server
import logging
import subprocess
import threading
import time
import tomllib
from pathlib import Path

import pytest
from streamlit.proto.BackMsg_pb2 import BackMsg

from specviz.core.race import MAX_FILE_BYTES
from specviz.recording.load import MAX_BYTES
from specviz.ui.common import backmsgs
from specviz.ui.common.backmsgs import ALLOWED, ALLOWED_OPERATIONS, MAX_NAMES, URL_REQUESTS_PER_MIN, Doors, UploadCaps
from specviz.workshop.processes import free_port
from specviz.workshop.replicas.balancer import MAX_UPLOAD_BODY, Backend, haproxy_config
from tests.test_room_supervisor import HAPROXY, needs_haproxy

REPO = Path(__file__).resolve().parents[1]
SHARED, LOCAL = (lambda sid: False), (lambda sid: True)
MB = 2**20


def _broken(sid):
    raise RuntimeError("no such session")


def message(kind: str, names: int = 1, payload: str = "") -> BackMsg:
    """A BackMsg of this kind (a file_urls_request with `names` names, a backend_operation_request with `payload`)."""
    msg = BackMsg()
    field = BackMsg.DESCRIPTOR.fields_by_name[kind]
    if kind == "file_urls_request":
        msg.file_urls_request.file_names.extend(["f.json"] * names)
    elif kind == "backend_operation_request":
        getattr(msg.backend_operation_request, payload).SetInParent()
    elif field.message_type is not None:
        getattr(msg, kind).SetInParent()
    else:
        setattr(msg, kind, True)
    return msg


def test_every_backmsg_kind_is_allowed_or_refused_on_purpose():
    assert backmsgs.available(), "this Streamlit's BackMsg, AppSession or upload manager changed: update specviz/ui/common/backmsgs.py"
    kinds = [f.name for f in BackMsg.DESCRIPTOR.oneofs_by_name["type"].fields]
    guard = Doors(SHARED)
    passed = {k for k in kinds if k != "backend_operation_request" and guard.allow(message(k), "s")}
    assert passed == ALLOWED - {"backend_operation_request"} == {"rerun_script", "stop_script", "app_heartbeat", "file_urls_request"}
    for dropped in ("clear_cache", "load_git_info", "set_run_on_save", "debug_shutdown_runtime", "debug_disconnect_websocket"):
        assert dropped in kinds and dropped not in passed
    payloads = [f.name for f in BackMsg.DESCRIPTOR.fields_by_name["backend_operation_request"].message_type.oneofs_by_name["payload"].fields]
    allowed = {p for p in payloads if guard.allow(message("backend_operation_request", payload=p), "s")}
    assert allowed == ALLOWED_OPERATIONS and "install_skills" not in allowed  # it writes files into the app's folder
    for kind in kinds:  # the owner in local mode keeps Streamlit's behaviour; a session whose mode cannot be told does not
        assert Doors(LOCAL).allow(message(kind, names=3, payload="install_skills"), "s")
        if kind not in ALLOWED:
            assert not Doors(_broken).allow(message(kind), "s")


def test_file_urls_requests_are_capped_in_names_and_rate_per_session():
    now = [0.0]
    guard = Doors(SHARED, clock=lambda: now[0])
    assert not guard.allow(message("file_urls_request", names=MAX_NAMES + 1), "a")
    assert not guard.allow(message("file_urls_request", names=1_000), "a")
    assert [guard.allow(message("file_urls_request"), "a") for _ in range(URL_REQUESTS_PER_MIN + 3)].count(True) == URL_REQUESTS_PER_MIN
    assert guard.allow(message("file_urls_request"), "b"), "another session has its own allowance"
    now[0] = 61.0
    assert guard.allow(message("file_urls_request"), "a"), "a minute later the session may ask again"
    assert Doors(LOCAL).allow(message("file_urls_request", names=5), "a")


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_refusals_are_logged_once_per_session_and_kind():
    guard, seen = Doors(SHARED), _Lines()
    backmsgs.log.addHandler(seen)  # streamlit's logger does not propagate to pytest's
    try:
        for _ in range(5):
            guard.allow(message("clear_cache"), "session-a")
            guard.allow(message("load_git_info"), "session-a")
            guard.allow(message("clear_cache"), "session-b")
        assert len(seen.lines) == 3, seen.lines
        guard.forget("session-a")  # the session ended: its marks go with it
        guard.allow(message("clear_cache"), "session-a")
        assert len(seen.lines) == 4
    finally:
        backmsgs.log.removeHandler(seen)


def test_uploads_need_an_issued_id_and_fit_their_uploader_the_session_and_the_process():
    caps = UploadCaps(session_files=3, session_bytes=10 * MB, minted=5, process_files=5, process_bytes=16 * MB)
    guard = Doors(SHARED, caps)
    assert guard.mint("a", ["a1", "a2"], 50 * MB)
    guard.expect("a", 4 * MB)  # the page drew the race's uploader: the URLs minted from now on take 4 MB
    assert guard.mint("a", ["a3", "a4"], 50 * MB)
    assert guard.mint("b", ["b1", "b2", "b3"], 50 * MB)
    none: dict = {}
    assert guard.check_upload("a", "a1", 1000, none) is None
    assert "did not issue" in guard.check_upload("a", "made-up", 1000, none)
    assert "did not issue" in guard.check_upload("a", "b1", 1000, none), "another session's id is not this session's"
    assert "Content-Length" in guard.check_upload("a", "a1", None, none)
    assert "at most" in guard.check_upload("a", "a3", 4 * MB + 1, none) and guard.check_upload("a", "a3", 4 * MB, none) is None
    assert "one session" in guard.check_upload("a", "a1", 11 * MB, none)
    stored = {"a": {"a1": 1, "a2": 1, "a3": 1}}
    assert "one session" in guard.check_upload("a", "a4", 1, stored)  # a fourth file
    assert guard.check_upload("a", "a3", 1, stored) is None, "a file sent again replaces itself"
    stored = {"a": {"a1": 8 * MB}, "x": {"x1": 7 * MB}}
    assert "this server" in guard.check_upload("b", "b1", 2 * MB, stored)  # 17 MB in all
    stored = {"a": {"a1": 1, "a2": 1}, "x": {"x1": 1, "x2": 1, "x3": 1}}
    assert "this server" in guard.check_upload("b", "b1", 1, stored)  # a sixth file
    assert not guard.mint("a", ["a5", "a6"], 50 * MB), "no more than caps.minted unused URLs per session"
    assert Doors(LOCAL, caps).check_upload("a", "made-up", 100 * MB, none) is None  # the owner keeps Streamlit's behaviour
    guard.forget("a")
    assert "did not issue" in guard.check_upload("a", "a1", 1, none), "a session's ids go with it"


def test_the_upload_limits_match_the_real_uploaders():
    """server.maxUploadSize is the largest real upload (a recording); each uploader's own cap is declared beside it
    (expect_upload) and fits under it; a client's frame is capped far below Streamlit's 25 MB."""
    server = tomllib.loads((REPO / ".streamlit" / "config.toml").read_text())["server"]
    assert server["maxUploadSize"] * MB == MAX_BYTES >= MAX_FILE_BYTES
    assert server["maxWidgetStateSize"] <= 1
    uploaders = {"specviz/ui/step_through/replay.py": "expect_upload(MAX_BYTES)", "specviz/ui/labs/race.py": "expect_upload(MAX_FILE_BYTES)"}
    for path, declared in uploaders.items():
        text = (REPO / path).read_text()
        assert declared in text and text.count("file_uploader(") == 1
    found = subprocess.run(["git", "grep", "-l", "file_uploader(", "--", "specviz", "pages", "app.py"], cwd=REPO, capture_output=True, text=True).stdout.split()
    assert sorted(found) == sorted(uploaders), "a new uploader declares its cap with backmsgs.expect_upload"
    assert MAX_UPLOAD_BODY > MAX_BYTES


class _Backend(http.server.BaseHTTPRequestHandler):
    seen: list[tuple[str, int]] = []

    def do_PUT(self):  # noqa: N802 (http.server's name)
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        type(self).seen.append((self.path, length))
        self.send_response(204)
        self.end_headers()

    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def _put(port: int, length: int | None, body: bytes = b"") -> int:
    """A PUT to the upload route with this Content-Length (None: chunked, no length), sending `body`."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest("PUT", "/_stcore/upload_file/session/file")
        conn.putheader(*(("Content-Length", str(length)) if length is not None else ("Transfer-Encoding", "chunked")))
        conn.endheaders(body or None)
        return conn.getresponse().status
    finally:
        conn.close()


@needs_haproxy
def test_haproxy_refuses_an_upload_body_over_the_largest_upload_by_its_content_length(tmp_path):
    backend = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Backend)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    port = free_port()
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(haproxy_config("127.0.0.1", port, [Backend("r1", "127.0.0.1", backend.server_address[1])]))
    proc = subprocess.Popen([HAPROXY, "-f", str(cfg)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                status = _put(port, 3, b"abc")
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("haproxy did not start")
                time.sleep(0.2)
        assert status == 204 and _Backend.seen == [("/_stcore/upload_file/session/file", 3)]
        assert _put(port, MAX_UPLOAD_BODY + 1) == 413  # headers only: HAProxy answers without waiting for the body
        assert _put(port, 25 * 10**9) == 413
        assert _put(port, None, b"3\r\nabc\r\n0\r\n\r\n") == 413  # no Content-Length: a browser always sends one
        assert len(_Backend.seen) == 1, "the replica never saw the oversized uploads"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        backend.shutdown()
