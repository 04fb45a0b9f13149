"""`python -m specviz room` and the presenter key's way across the room's network: HAProxy passes the browser's
address on (``option forwardfor``) and the replicas read it (a proxy on loopback is trusted); ``--tls-cert PEM`` serves HTTPS
only (a real room with a self-signed certificate made by openssl: /_stcore/health over HTTPS with that certificate
as the CA, the app's page over a TLS websocket, and plain HTTP gets no answer), with a clear message for a PEM that
cannot work; a weak key set by the owner is said at start and on the page; and a room without a key makes a strong one and shows it once on its terminal (a pty here),
nowhere else: not in the status file, the run directory or the replicas' output."""

from __future__ import annotations

import os
import pty
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from specviz.loadtest.protocol import StSession
from specviz.workshop.presenter_key import key_weakness
from specviz.workshop.processes import free_port
from specviz.workshop.replicas.balancer import (
    CONN_PER_SOURCE,
    CONN_PER_SOURCE_ENV,
    Backend,
    RoomError,
    check_tls_cert,
    conn_per_source,
    haproxy_config,
)
from specviz.workshop.replicas.key import room_presenter_key, secrets_table
from tests.test_room_supervisor import HAPROXY, _alive, _status, needs_haproxy, wait_or_fail

REPO = Path(__file__).resolve().parents[1]
OPENSSL = shutil.which("openssl")
needs_openssl = pytest.mark.skipif(OPENSSL is None, reason="openssl is not installed")
STRONG = "Tea-and-speculation-2026"


def make_cert(folder: Path, name: str = "room") -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (EC P-256, a day long), made by openssl."""
    cert, key = folder / f"{name}-cert.pem", folder / f"{name}-key.pem"
    subprocess.run(
        [OPENSSL, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def pem(folder: Path, *parts: Path, name: str = "room.pem") -> Path:
    out = folder / name
    out.write_bytes(b"".join(p.read_bytes() for p in parts))
    out.chmod(0o600)
    return out


def room_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMLIT_", "SPECVIZ_"))}
    env.update(HF_HUB_OFFLINE="1", SPECVIZ_RUN_DIR=str(tmp_path / "runs"), HOME=str(tmp_path / "home"), **extra)
    return env


def stop(room: subprocess.Popen, pids: list[int], log: Path) -> None:
    room.terminate()
    try:
        room.wait(timeout=30)
    except subprocess.TimeoutExpired:
        room.kill()
        room.wait(timeout=5)
    for pid in pids:
        wait_or_fail(lambda pid=pid: not _alive(pid), 10, f"pid {pid} to end", log)


@needs_haproxy
@needs_openssl
def test_the_configuration_passes_the_clients_address_on_and_binds_tls_when_asked(tmp_path):
    cert, key = make_cert(tmp_path)
    room_pem = pem(tmp_path, cert, key, name="a room's cert.pem")  # a space in the path is quoted for HAProxy
    for tls in (None, str(room_pem)):
        config = haproxy_config("0.0.0.0", 8443, [Backend("r1", "127.0.0.1", 8501)], tls)
        assert "option forwardfor" in config
        assert (f'bind 0.0.0.0:8443 ssl crt "{room_pem}"' in config) == (tls is not None)
        path = tmp_path / "room.cfg"
        path.write_text(config)
        check = subprocess.run([HAPROXY, "-c", "-f", str(path)], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr + config
    with pytest.raises(ValueError, match="quotes"):
        haproxy_config("0.0.0.0", 8443, [Backend("r1", "127.0.0.1", 8501)], 'x" ssl crt /etc/shadow "')


@needs_openssl
def test_a_pem_that_cannot_serve_https_is_refused_with_a_clear_message(tmp_path):
    cert, key = make_cert(tmp_path)
    other_cert, other_key = make_cert(tmp_path, "other")
    assert check_tls_cert(str(pem(tmp_path, cert, key))) == str((tmp_path / "room.pem").resolve())
    encrypted = tmp_path / "encrypted-key.pem"
    subprocess.run([OPENSSL, "pkey", "-in", str(key), "-aes256", "-passout", "pass:secret", "-out", str(encrypted)], check=True, capture_output=True)
    cases = {
        str(tmp_path / "missing.pem"): "cannot read it",
        str(pem(tmp_path, cert, name="cert-only.pem")): "holds no private key",
        str(pem(tmp_path, key, name="key-only.pem")): "holds no certificate",
        str(pem(tmp_path, cert, other_key, name="mismatch.pem")): "do not load together",
        str(pem(tmp_path, cert, encrypted, name="encrypted.pem")): "encrypted key is not supported",
    }
    unreadable = pem(tmp_path, other_cert, other_key, name="unreadable.pem")
    unreadable.chmod(0)
    if not os.access(unreadable, os.R_OK):  # root reads anything
        cases[str(unreadable)] = "cannot read it"
    for path, said in cases.items():
        with pytest.raises(RoomError, match=said) as caught:
            check_tls_cert(path)
        assert "cat cert.pem key.pem > room.pem" in str(caught.value)


def test_the_room_makes_a_key_only_when_the_owner_set_none(tmp_path):
    secrets_file = tmp_path / "secrets.toml"
    key, said = room_presenter_key({}, [secrets_file])
    assert key is not None and key_weakness(key) is None and said == ""
    assert room_presenter_key({"SPECVIZ_PRESENTER_KEY": STRONG}, [secrets_file]) == (None, "")
    weak, said = room_presenter_key({"SPECVIZ_PRESENTER_KEY": "1234"}, [secrets_file])
    assert weak is None and "too weak" in said and "1234" not in said
    secrets_file.write_text(f'[specviz]\npresenter_key = "{STRONG}"\n')
    assert secrets_table([tmp_path / "none.toml", secrets_file]) == {"presenter_key": STRONG}
    assert room_presenter_key({}, [secrets_file]) == (None, "")  # the owner's key from the secrets file


def _replica_env(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode(errors="replace").partition("=")[::2] for item in raw if b"=" in item)


@needs_haproxy
@needs_openssl
def test_a_room_with_a_certificate_serves_https_only_and_says_when_the_key_is_weak(tmp_path, tiny_dir, monkeypatch):
    cert, key = make_cert(tmp_path)
    room_pem = pem(tmp_path, cert, key)
    port, status_file, log = free_port(), tmp_path / "room.json", tmp_path / "room.log"
    cmd = [sys.executable, "-m", "specviz", "room", "--replicas", "1", "--port", str(port), "--status-file", str(status_file), "--tls-cert", str(room_pem)]
    with open(log, "wb") as out:
        env = room_env(tmp_path, SPECVIZ_PRESENTER_KEY="1234", SPECVIZ_TARGETS=str(tiny_dir["llama"]))
        room = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    pids: list[int] = []
    try:
        status = wait_or_fail(lambda: _status(status_file), 60, "the status file", log)
        pids = [status["balancer_pid"], *(r["pid"] for r in status["replicas"])]
        assert status["url"] == f"https://127.0.0.1:{port}"
        context = ssl.create_default_context(cafile=str(cert))

        def healthy():
            try:
                with urllib.request.urlopen(f"{status['url']}/_stcore/health", timeout=5, context=context) as resp:
                    return resp.status == 200 and resp.read().strip() == b"ok"
            except OSError:
                return False

        wait_or_fail(healthy, 120, "health over HTTPS", log)
        with pytest.raises(OSError):  # plain HTTP on the room's port: a TLS handshake, never a page
            urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=5).read()
        with pytest.raises(OSError, match="CERTIFICATE_VERIFY_FAILED"):  # a client that does not trust the certificate stops
            urllib.request.urlopen(f"{status['url']}/_stcore/health", timeout=5, context=ssl.create_default_context()).read()
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the protocol client's HTTPS and wss trust the room's certificate
        with StSession(status["url"]) as page:  # the app itself, over a TLS websocket through HAProxy
            assert not page.exceptions() and any("too weak" in a and "1234" not in a for a in page.alerts()), page.alerts()
        replica = _replica_env(status["replicas"][0]["pid"])
        assert replica["SPECVIZ_PRESENTER_KEY"] == "1234"  # no key made over the owner's
        text = log.read_text(errors="replace")
        (said,) = [line for line in text.splitlines() if "presenter key set for this room is too weak, so presenting is off" in line]
        assert "1234" not in said
    finally:
        stop(room, pids, log)


@needs_haproxy
def test_a_room_without_a_key_makes_a_strong_one_and_shows_it_on_its_terminal_only(tmp_path):
    port, status_file = free_port(), tmp_path / "room.json"
    master, slave = pty.openpty()
    cmd = [sys.executable, "-m", "specviz", "room", "--replicas", "1", "--port", str(port), "--status-file", str(status_file)]
    out_log = tmp_path / "stdout.log"
    with open(out_log, "wb") as out:
        room = subprocess.Popen(cmd, cwd=REPO, env=room_env(tmp_path), stdin=subprocess.DEVNULL, stdout=out, stderr=slave, start_new_session=True)
    os.close(slave)
    transcript, done = bytearray(), threading.Event()

    def drain() -> None:  # the terminal: read it all (a full pty would block the room)
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            transcript.extend(chunk)
        done.set()

    threading.Thread(target=drain, daemon=True).start()
    log = tmp_path / "terminal.log"
    pids: list[int] = []
    try:
        status = wait_or_fail(lambda: _status(status_file), 60, "the status file", out_log)
        pids = [status["balancer_pid"], *(r["pid"] for r in status["replicas"])]
        marker = b"the presenter key for this room (shown once, kept nowhere else): "
        wait_or_fail(lambda: marker in transcript, 30, "the key on the terminal", out_log)
        key = bytes(transcript).split(marker, 1)[1].split(b"\r")[0].split(b"\n")[0].decode()
        assert key_weakness(key) is None and len(key) >= 24
        replica = _replica_env(status["replicas"][0]["pid"])
        assert replica["SPECVIZ_PRESENTER_KEY"] == key  # the replicas have it
        wait_or_fail(lambda: b"You can now view your Streamlit app" in transcript or None, 120, "the replica's start on the terminal", out_log)
    finally:
        stop(room, pids, out_log)
        done.wait(timeout=10)
        os.close(master)
    log.write_bytes(bytes(transcript))
    assert bytes(transcript).count(key.encode()) == 1  # shown once: the replicas' relayed output never has it
    assert key not in out_log.read_text(errors="replace") and not status_file.exists()
    for path in (tmp_path / "runs").rglob("*"):
        assert not path.is_file() or key.encode() not in path.read_bytes(), path


def _http_on(sock: socket.socket) -> bytes:
    """One request on an open connection: the answer's first bytes, or b"" when the balancer closed it unanswered."""
    try:
        sock.sendall(b"GET /_stcore/health HTTP/1.1\r\nHost: room\r\n\r\n")
        return sock.recv(64)
    except (ConnectionResetError, BrokenPipeError):
        return b""


def _one_request(port: int) -> bytes:
    """A new connection, one request, closed: the answer's first bytes, or b"" when refused."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    except ConnectionResetError:
        return b""
    with sock:
        return _http_on(sock)


@needs_haproxy
def test_one_source_holds_at_most_its_share_of_the_balancers_connections(tmp_path):
    """Three open connections from one address: a fourth is closed unanswered; once one closes, a new one is served."""
    port = free_port()
    config = haproxy_config("127.0.0.1", port, [Backend("r1", "127.0.0.1", free_port())], per_source=3)  # no replica: 503s
    assert "sc0_conn_cur gt 3" in config and "sc0_conn_cur" not in haproxy_config("127.0.0.1", port, [Backend("r1", "127.0.0.1", 1)], per_source=0)
    (tmp_path / "room.cfg").write_text(config)
    proc = subprocess.Popen([HAPROXY, "-db", "-f", str(tmp_path / "room.cfg")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    held: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 20
        while True:  # the balancer is up once it answers
            try:
                probe = socket.create_connection(("127.0.0.1", port), timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline, "haproxy did not start"
                time.sleep(0.1)
        held.append(probe)
        assert _http_on(probe).startswith(b"HTTP/1.1 503")  # kept alive: it stays open and counted
        for _ in range(2):
            held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            assert _http_on(held[-1]).startswith(b"HTTP/1.1 503")
        assert _one_request(port) == b""  # the fourth: refused
        held.pop().close()
        while True:  # the balancer counts the closed one out
            answer = _one_request(port)
            if answer:
                break
            assert time.monotonic() < deadline, "a closed connection was never counted out"
            time.sleep(0.1)
        assert answer.startswith(b"HTTP/1.1 503")
    finally:
        for s in held:
            s.close()
        proc.terminate()
        proc.wait(timeout=10)


def test_the_rooms_connection_limit_setting():
    assert conn_per_source({}) == CONN_PER_SOURCE and conn_per_source({CONN_PER_SOURCE_ENV: "0"}) == 0
    for bad in ("-1", "lots", "1e9", "99999999"):
        with pytest.raises(RoomError, match=CONN_PER_SOURCE_ENV):
            conn_per_source({CONN_PER_SOURCE_ENV: bad})
