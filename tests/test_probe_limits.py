"""What an endpoint can make the probe hold (issue 42, item 8): the whole probe ends by its deadline even against a
server that trickles bytes or goes silent, a response is read up to a byte cap, no proxy is taken from the
environment; and on the race page a participant runs one probe at a time (specviz.workshop.jobs.LongJobs by client)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import pytest
from starlette.applications import Starlette
from starlette.responses import StreamingResponse
from starlette.routing import Route

from specviz.experiments.probe import ProbeSpec, probe
from tests.service_helpers import running


def chunk(text: str) -> bytes:
    body = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def endpoint(behaviour: str) -> Starlette:
    """A fake OpenAI-compatible chat endpoint: 'ok' answers three chunks; 'trickle' sends a byte every 0.1 s for ever;
    'silent' sends its headers and then nothing; 'flood' sends chunks as fast as it can, for ever."""

    async def events():
        if behaviour == "ok":
            for text in ("a", " b", " c"):
                yield chunk(text)
            yield b"data: [DONE]\n\n"
        elif behaviour == "trickle":
            while True:
                yield b":"
                await asyncio.sleep(0.1)
        elif behaviour == "silent":
            yield b": hello\n\n"
            await asyncio.sleep(3600)
        else:
            while True:
                yield chunk("x" * 1000)
                await asyncio.sleep(0)

    async def chat(request):
        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


@pytest.mark.parametrize("behaviour", ["trickle", "silent"])
def test_the_whole_probe_ends_by_its_deadline(behaviour):
    with running(endpoint(behaviour)) as root:
        spec = ProbeSpec(root + "/v1", "m", n=3, max_tokens=8, timeout_s=60, deadline_s=2)
        start = time.monotonic()
        with pytest.raises(ValueError, match="deadline of 2 s"):
            probe(spec, ["hi"])
        assert time.monotonic() - start < 10  # not the 60 s read timeout, nor three of them


def test_a_response_is_read_up_to_the_byte_cap():
    with running(endpoint("flood")) as root:
        spec = ProbeSpec(root + "/v1", "m", n=1, max_tokens=8, timeout_s=30, deadline_s=60, max_stream_bytes=64 * 1024)
        with pytest.raises(ValueError, match="over 65,536 bytes"):
            probe(spec, ["hi"])


def test_no_proxy_is_taken_from_the_environment(monkeypatch):
    """A proxy named in the environment sees nothing: the probe goes straight to the listed service."""
    proxy = socket.socket()
    proxy.bind(("127.0.0.1", 0))
    proxy.listen(8)
    proxy.settimeout(0.2)
    seen: list[bytes] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = proxy.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    seen.append(conn.recv(65536))
                except OSError:
                    pass

    watcher = threading.Thread(target=accept, daemon=True)
    watcher.start()
    url = f"http://127.0.0.1:{proxy.getsockname()[1]}"
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, url)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    try:
        with running(endpoint("ok")) as root:
            result = probe(ProbeSpec(root + "/v1", "m", n=1, max_tokens=8, timeout_s=10), ["hi"])
        assert result.streams[0].characters == len("a b c")
        assert seen == []
    finally:
        stop.set()
        watcher.join(5)
        proxy.close()
