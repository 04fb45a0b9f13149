"""`specviz serve` as anyone on the network reaches it, which must stay up for its key's holders: a service of its own (the embedded target,
an API key), a victim asking for a short completion about every second with the key, and from raw sockets: a
request without the key, a body declared over the cap, a form post, a 5,000-digit number, connections that trickle
their head a byte at a time (slowloris), and a stream whose client never reads. What each got, the victim's
latency and failures, /health's latency while the slow connections are open, and the service's RSS."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from specviz.loadtest import harness as lp
from specviz.loadtest.attacks.harness import SAMPLE_EVERY_S, Config, Harness
from specviz.loadtest.server import rss_mb
from specviz.workshop.processes import answers_ok, free_port, stop_processes

MODEL = "victim-model"
START_TIMEOUT_S = 180.0
VICTIM_MAX_TOKENS = 8
BIG_DECLARED = 100 * 2**20  # a body's declared length, far over the 2 MB cap


def _head(method: str, path: str, body: bytes, headers: tuple[str, ...]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close", *headers]
    if not any(h.lower().startswith("content-length:") for h in headers):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def exchange(port: int, data: bytes, timeout_s: float = 60.0) -> int | str:
    """Send data on a fresh connection and read the answer's status (or what went wrong, as text)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
            with contextlib.suppress(OSError):  # an answer before the whole body was read: then a reset
                s.sendall(data)
            got = b""
            while b"\r\n" not in got:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
        return int(got.split(b" ")[1]) if got.startswith(b"HTTP/") else "closed unanswered"
    except OSError as exc:
        return type(exc).__name__


def _chat(max_tokens: int = VICTIM_MAX_TOKENS, **extra) -> bytes:
    return json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "Repeat: the cat sat on the mat."}], "max_tokens": max_tokens, **extra}).encode()


class ServiceVictim:
    """A client with the key: one short chat completion about every every_s; seconds and failures per request."""

    def __init__(self, port: int, key: str, every_s: float) -> None:
        self.port, self.key, self.every_s = port, key, every_s
        self.seconds: list[float] = []
        self.failures: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="service-victim")

    def _run(self) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            status = exchange(self.port, _head("POST", "/v1/chat/completions", _chat(), ("Content-Type: application/json", f"Authorization: Bearer {self.key}")), timeout_s=120)
            seconds = time.monotonic() - t0
            if status == 200:
                self.seconds.append(seconds)
            else:
                self.failures.append(str(status))
            self.stop.wait(max(0.05, self.every_s - seconds))

    def stats(self) -> dict:
        s = self.seconds
        return {"requests": len(s) + len(self.failures), "p50": lp.rounded(lp.percentile(s, 0.5), 2), "p95": lp.rounded(lp.percentile(s, 0.95), 2),
                "max": lp.rounded(max(s), 2) if s else None, "failures": len(self.failures), "errors": self.failures[:3]}  # fmt: skip


def _trickle(port: int, hold_s: float, stop: threading.Event, out: dict) -> None:
    """A slowloris connection: a head one byte every 2 s, never finished. out (this connection's own): "held" when it
    was still open after hold_s, else "closed_after_s" (the server let it go)."""
    t0 = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            for byte in b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 10_000:
                if stop.is_set() or time.monotonic() - t0 > hold_s:
                    out["held"] = True
                    return
                s.sendall(bytes([byte]))
                stop.wait(2.0)
    except OSError:
        pass
    out["closed_after_s"] = round(time.monotonic() - t0, 1)


def _stalled_reader(port: int, key: str, hold_s: float) -> str:
    """A long stream whose client never reads (a 2 KB receive buffer), read only after hold_s: "still open" (its slot
    held), "dropped by the server" (the write deadline), or "finished" (the buffers held the whole stream)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    s.settimeout(5)
    try:
        s.connect(("127.0.0.1", port))
        body = json.dumps({"model": MODEL, "prompt": "Count: one two three", "max_tokens": 256, "stream": True}).encode()
        s.sendall(_head("POST", "/v1/completions", body, ("Content-Type: application/json", f"Authorization: Bearer {key}")))
        time.sleep(hold_s)
        s.setblocking(False)
        got = b""
        try:  # read what the buffers hold; a connection the server ended reads as EOF, or a reset when it aborted it
            while chunk := s.recv(1 << 20):
                got += chunk
            return "finished" if b"[DONE]" in got else "dropped by the server"
        except BlockingIOError:
            return "still open"
        except OSError:
            return "dropped by the server"
    finally:
        s.close()


def attack_serve(h: Harness, cfg: Config) -> dict:
    """A `specviz serve` of its own (loopback, an API key), its victim, and the raw-socket attacks in turn."""
    key = secrets.token_urlsafe(24)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="specviz-serve-attack-") as tmp:
        log_path = Path(tmp) / "serve.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPECVIZ_")}
        env.update(HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1", SPECVIZ_RUN_DIR=str(Path(tmp) / "runs"))
        cmd = [sys.executable, "-m", "specviz", "serve", "--port", str(port), "--api-key", key, "--model-id", MODEL, "--drafter", "lookup"]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while not answers_ok(f"http://127.0.0.1:{port}/health"):
                if proc.poll() is not None or time.monotonic() > deadline:
                    return {"error": f"serve did not start: {log_path.read_text(errors='replace')[-300:]}"}
                time.sleep(0.5)
            warm = exchange(port, _head("POST", "/v1/chat/completions", _chat(), ("Content-Type: application/json", f"Authorization: Bearer {key}")), timeout_s=300)
            if warm != 200:  # the first request's passes are the slowest (as a replica's first Step): not the victim's
                return {"error": f"serve's first request was answered {warm}"}
            return _attack(port, key, proc.pid, cfg)
        finally:
            stop_processes([proc], grace_s=15)


def _attack(port: int, key: str, pid: int, cfg: Config) -> dict:
    rss: list[float] = []
    stop_rss = threading.Event()

    def sample() -> None:
        while not stop_rss.is_set():
            if (mb := rss_mb(pid)) is not None:
                rss.append(mb)
            stop_rss.wait(SAMPLE_EVERY_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    victim = ServiceVictim(port, key, cfg.victim_every_s)
    victim.thread.start()
    json_type, auth = "Content-Type: application/json", f"Authorization: Bearer {key}"
    out: dict = {
        "no_key": exchange(port, _head("POST", "/v1/chat/completions", _chat(), (json_type,))),
        "wrong_key": exchange(port, _head("POST", "/v1/chat/completions", _chat(), (json_type, "Authorization: Bearer not-the-key-0123456789"))),
        "huge_body": exchange(port, _head("POST", "/v1/chat/completions", b"{", (json_type, auth, f"Content-Length: {BIG_DECLARED}"))),
        "form_post": exchange(port, _head("POST", "/v1/chat/completions", b"a=1", ("Content-Type: application/x-www-form-urlencoded", auth))),
        "huge_integer": exchange(port, _head("POST", "/v1/chat/completions", b'{"model": "x", "max_tokens": ' + b"9" * 5000 + b"}", (json_type, auth))),
    }  # fmt: skip
    slow: list[dict] = [{} for _ in range(cfg.serve_slow_conns)]
    stop = threading.Event()
    trickles = [threading.Thread(target=_trickle, args=(port, cfg.serve_hold_s, stop, mine), daemon=True) for mine in slow]
    for t in trickles:
        t.start()
    stalled: dict = {}
    reader = threading.Thread(target=lambda: stalled.update(result=_stalled_reader(port, key, cfg.serve_hold_s)), daemon=True)
    reader.start()
    time.sleep(min(2.0, cfg.serve_hold_s / 2))
    t0 = time.perf_counter()
    out["health_status"] = exchange(port, _head("GET", "/health", b"", ()))
    out["health_s"] = round(time.perf_counter() - t0, 2)
    reader.join(timeout=cfg.serve_hold_s + 30)
    stop.set()
    for t in trickles:
        t.join(timeout=30)
    victim.stop.set()
    victim.thread.join(timeout=150)
    stop_rss.set()
    sampler.join(timeout=5)
    out.update(
        slow_conns=cfg.serve_slow_conns, hold_s=cfg.serve_hold_s, slow_closed=sum("closed_after_s" in x for x in slow), slow_held=sum(bool(x.get("held")) for x in slow),
        slow_closed_after_s=max((x["closed_after_s"] for x in slow if "closed_after_s" in x), default=None), stalled_reader=stalled.get("result"), victim=victim.stats(),
        rss_before_mb=round(rss[0], 1) if rss else None, rss_peak_mb=round(max(rss), 1) if rss else None,
    )  # fmt: skip
    return out
