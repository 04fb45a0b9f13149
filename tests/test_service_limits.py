"""specviz serve on an address anyone can reach (issue 42, item 7), each attack from a raw socket against the server as
`specviz serve` runs it (tests.service_helpers.serving): the body's size, type and JSON; a slot before tokenizing and
the tokenizing off the event loop; connection, head, body and write deadlines; an API key (also through the official
openai client); error messages without internals; a model id that is a name. The tiny random Llama keeps them fast; the
chunked prefill test needs the embedded model's context."""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
import time

import openai
import pytest

from specviz.config import RunConfig
from specviz.runs import resolve_models
from specviz.workshop.service.config import ServiceConfig, served_name
from specviz.workshop.service.request import MAX_BODY_BYTES
from specviz.workshop.service.server import Service
from tests.service_helpers import serving, wait_until

MODEL = "tiny"
KEY = "sk-test-0123456789abcdef"


def tiny_service(tiny_dir, tiny_models, drafter: str = "none", **caps) -> Service:
    run = RunConfig(target=str(tiny_dir["llama"]), drafter=drafter, dtype="float32", device="cpu")
    return Service(ServiceConfig(run, caps.pop("model_id", MODEL), **caps), resolve_models(run, target=tiny_models["llama"]))


@pytest.fixture(scope="module")
def service(tiny_dir, tiny_models):
    return tiny_service(tiny_dir, tiny_models, max_tokens=16, read_timeout_s=2.0, write_timeout_s=2.0, max_streams=2, max_connections=8)


@pytest.fixture(scope="module")
def root(service):
    with serving(service) as url:
        yield url


def address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def request_bytes(path: str, body: bytes = b"", method: str = "POST", content_type: str | None = "application/json", headers: tuple[str, ...] = ()) -> bytes:
    head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close", f"Content-Length: {len(body)}", *headers]
    if content_type:
        head.append(f"Content-Type: {content_type}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def exchange(url: str, data: bytes, timeout_s: float = 60.0) -> tuple[int, bytes]:
    """Send data on a fresh connection while reading until the server closes it: (status, body). The reading runs
    beside the sending, so an answer the server gives before it has read everything (then resets) is still seen."""
    received: list[bytes] = []
    with socket.create_connection(address(url), timeout=timeout_s) as s:

        def read() -> None:
            try:
                while chunk := s.recv(65536):
                    received.append(chunk)
            except OSError:  # reset after its answer
                pass

        reader = threading.Thread(target=read)
        reader.start()
        try:
            s.sendall(data)
        except OSError:  # the server answered and closed before reading it all
            pass
        reader.join(timeout_s)
    head, _, body = b"".join(received).partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def openai_error(body: bytes) -> dict:
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}  # OpenAI's shape
    return error


def chat(content: str = "the cat", **extra) -> bytes:
    return json.dumps({"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 2, **extra}).encode()


def test_a_plain_request_still_answers(root):
    status, body = exchange(root, request_bytes("/v1/chat/completions", chat()))
    assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == 2


def test_a_body_over_the_cap_is_refused_before_it_is_read(root):
    padding = b"x" * (MAX_BODY_BYTES + 10)
    body = chat()[:-1] + b', "pad": "' + padding + b'"}'  # valid JSON the old server read whole and answered
    status, answer = exchange(root, request_bytes("/v1/chat/completions", body))
    assert status == 413 and openai_error(answer)["code"] == "body_too_large"
    # declared too long: refused on the header, before a byte of the body is sent
    with socket.create_connection(address(root), timeout=30) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 999999999\r\n\r\n")
        assert b" 413 " in s.recv(65536).split(b"\r\n")[0]


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"])
def test_only_json_is_read(root, content_type):
    status, answer = exchange(root, request_bytes("/v1/chat/completions", chat(), content_type=content_type))
    assert status == 415 and "application/json" in openai_error(answer)["message"]


@pytest.mark.parametrize(
    "body",
    [
        b'{"model": "tiny", "seed": ' + b"7" * 5000 + b"}",  # over Python's 4,300 digits: a bare 500 before
        b'{"model": "tiny", "user": NaN, "messages": [{"role": "user", "content": "a"}]}',  # not JSON: was read, and answered
        b'{"model": "tiny", "user": -Infinity, "messages": [{"role": "user", "content": "a"}]}',
        b"[" * 100_000 + b"]" * 100_000,  # nesting too deep
        b'{"model": "tiny", "messages": [{"role": "user", "content": "\\ud800"}]}',  # half a surrogate pair: the tokenizer raised
        b'{"model": "tiny", "prompt": "\\udfff b"}',
        b"\xff\xfe{}",
        b"{",
        b"",
    ],
)
def test_every_malformed_body_is_a_400_in_openais_shape(root, body):
    path = "/v1/completions" if b'"prompt"' in body else "/v1/chat/completions"
    status, answer = exchange(root, request_bytes(path, body))
    assert status == 400, answer
    assert openai_error(answer)["type"] == "invalid_request_error"


def test_a_slot_is_taken_before_the_prompt_is_tokenized_and_the_tokenizing_leaves_the_event_loop(tiny_dir, tiny_models):
    """A tokenizer held on a gate the test holds: meanwhile the server answers /health (the event loop is free), and with
    the one slot taken a second request is refused 429 without being tokenized (before: every prompt was tokenized on the
    event loop, and only then counted against the cap)."""
    service = tiny_service(tiny_dir, tiny_models, max_streams=1)
    gate, entered, calls = threading.Event(), threading.Event(), []
    tokenizer = service.models.target.tokenizer

    class Gated:
        def __getattr__(self, name):
            return getattr(tokenizer, name)

        def __call__(self, text, *args, **kwargs):
            calls.append(text)
            if "slow" in text:
                entered.set()
                assert gate.wait(60)
            return tokenizer(text, *args, **kwargs)

    service.models = dataclasses.replace(service.models, target=dataclasses.replace(service.models.target, tokenizer=Gated()))
    with serving(service) as root:
        first = threading.Thread(target=exchange, args=(root, request_bytes("/v1/completions", json.dumps({"model": MODEL, "prompt": "slow", "max_tokens": 1}).encode())))
        first.start()
        try:
            assert entered.wait(30)
            start = time.monotonic()
            status, body = exchange(root, request_bytes("/health", method="GET", content_type=None), timeout_s=10)
            assert status == 200 and time.monotonic() - start < 5
            n = len(calls)
            status, body = exchange(root, request_bytes("/v1/completions", json.dumps({"model": MODEL, "prompt": "another " * 1000, "max_tokens": 1}).encode()))
            assert status == 429 and openai_error(body)["code"] == "too_many_requests"
            assert len(calls) == n  # refused before its prompt cost anything
        finally:
            gate.set()
            first.join(60)
    assert service.active == 0


def test_a_head_that_never_ends_is_cut_off(root):
    with socket.create_connection(address(root), timeout=30) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and nothing more
        start = time.monotonic()
        assert s.recv(100) == b""  # closed by the server (the read deadline is 2 s here)
        assert time.monotonic() - start < 20


def test_a_body_that_never_arrives_is_a_408(root):
    with socket.create_connection(address(root), timeout=30) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        start = time.monotonic()
        head = s.recv(65536)
        assert b" 408 " in head.split(b"\r\n")[0] and time.monotonic() - start < 20


def test_connections_over_the_limit_get_503(tiny_dir, tiny_models):
    service = tiny_service(tiny_dir, tiny_models, max_streams=1, max_connections=3)
    with serving(service) as root:
        idle = [socket.create_connection(address(root), timeout=30) for _ in range(3)]
        try:
            wait_until(lambda: exchange(root, request_bytes("/health", method="GET", content_type=None))[0] == 503, 30, "a 503 over the limit")
        finally:
            for s in idle:
                s.close()
        wait_until(lambda: exchange(root, request_bytes("/health", method="GET", content_type=None))[0] == 200, 30, "the server answering again")


def test_a_client_that_never_reads_loses_its_stream_and_its_slot(tiny_dir, tiny_models):
    """The client asks for a long stream and reads nothing: once the server's small send buffers are full its writes stall,
    and after the write deadline the connection is dropped, the decode ends and the slot is free (before: held for ever)."""
    service = tiny_service(tiny_dir, tiny_models, model_id="m" * 200, max_tokens=240, max_streams=1, chunks="token", write_timeout_s=1.0)
    body = json.dumps({"model": "m" * 200, "prompt": "the", "max_tokens": 240, "stream": True}).encode()
    with serving(service) as root:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
        s.connect(address(root))
        try:
            s.sendall(request_bytes("/v1/completions", body))
            wait_until(lambda: service.active == 0 and len(service.history) == 1, 60, "the stalled stream being dropped")
            assert service.history[-1].reason == "disconnected" and service.history[-1].tokens < 240
        finally:
            s.close()


def test_an_api_key_is_asked_of_every_v1_request(tiny_dir, tiny_models):
    service = tiny_service(tiny_dir, tiny_models, api_key=KEY)
    with serving(service) as root:
        for path, method, body in (("/v1/models", "GET", b""), ("/v1/chat/completions", "POST", chat()), ("/v1/completions", "POST", chat())):
            for headers in ((), ("Authorization: Bearer wrong-key-0123456789",), (f"Authorization: Basic {KEY}",), (f"Authorization: Bearer {KEY}x",)):
                status, answer = exchange(root, request_bytes(path, body, method=method, headers=headers))
                assert status == 401 and openai_error(answer)["code"] == "invalid_api_key"
        assert exchange(root, request_bytes("/v1/chat/completions", chat(), headers=(f"Authorization: Bearer {KEY}",)))[0] == 200
        assert exchange(root, request_bytes("/health", method="GET", content_type=None))[0] == 200  # health stays open
        with openai.OpenAI(base_url=root + "/v1", api_key=KEY, max_retries=0, timeout=60) as good:
            assert [m.id for m in good.models.list().data] == [MODEL]
            assert good.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "the cat"}], max_tokens=2).usage.completion_tokens == 2
        with openai.OpenAI(base_url=root + "/v1", api_key="not-the-key", max_retries=0, timeout=60) as bad, pytest.raises(openai.AuthenticationError):
            bad.models.list()


def test_a_failure_inside_tells_the_client_nothing_of_it(tiny_dir, tiny_models, monkeypatch):
    service = tiny_service(tiny_dir, tiny_models)

    async def broken(work):
        raise RuntimeError("/home/owner/secret/model.py line 3: cache exploded")

    monkeypatch.setattr(service, "_turn_for", broken)
    with serving(service) as root:
        for stream in (False, True):
            status, answer = exchange(root, request_bytes("/v1/chat/completions", chat(stream=stream)))
            text = answer.decode()
            assert "secret" not in text and "RuntimeError" not in text and "exploded" not in text
            assert "failed on this request" in text
            assert status == (200 if stream else 500)  # a stream's headers went before the failure: its error is an event
    assert service.active == 0


def test_the_default_model_id_is_a_name_never_a_path(tmp_path, tiny_dir):
    from specviz.cli.main import build_parser
    from specviz.cli.serve import service_config

    assert served_name(str(tiny_dir["llama"])) == "llama"
    assert served_name(str(tmp_path / "weights" / "SmolLM2-360M.Q8_0.gguf")) == "SmolLM2-360M.Q8_0"
    assert served_name("~/models/phi") == "phi"
    assert served_name("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert served_name("embedded:SmolLM2-135M-Instruct") == "embedded:SmolLM2-135M-Instruct"
    args = build_parser().parse_args(["serve", "--target", str(tiny_dir["llama"]), "--drafter", "none"])
    config = service_config(args, "none", False)
    assert config.model_id == "llama" and str(tiny_dir["llama"]) not in config.model_id
    assert KEY not in repr(ServiceConfig(config.run, "x", api_key=KEY))  # the key stays out of logs
    with pytest.raises(ValueError, match="api-key"):
        ServiceConfig(config.run, "x", api_key="short")


def test_a_long_prefill_lets_a_waiting_stream_go_between_its_chunks(smollm):
    """B streams; two clients send prompts of several prefill chunks at once. Between two chunks a prefill hands the turn
    to the waiting passes (B's rounds run on the model thread, nested in its pause) and queues again; the other long
    prefill, handed a turn there, queues again to start where it can pause too (before: each whole prefill was one
    turn, and every stream waited for all of it). B leaves once both are answered."""
    from specviz.config import EMBEDDED_TARGET

    run = RunConfig(target=EMBEDDED_TARGET, drafter="lookup", num_draft_tokens=4, dtype="float32", device="cpu")
    service = Service(ServiceConfig(run, "smol", max_prompt_tokens=2048, max_tokens=400), resolve_models(run, target=smollm))
    b_started, a_done = threading.Event(), threading.Event()

    def stream_b(root: str) -> None:
        with openai.OpenAI(base_url=root + "/v1", api_key="t", max_retries=0, timeout=300) as c:
            with c.chat.completions.create(model="smol", messages=[{"role": "user", "content": "Count from one to two hundred in words."}],
                                           max_tokens=400, stream=True) as stream:  # fmt: skip
                for chunk in stream:
                    if chunk.choices and chunk.choices[0].delta.content:
                        b_started.set()
                    if a_done.is_set():
                        break

    with serving(service) as root:
        b = threading.Thread(target=stream_b, args=(root,))
        b.start()
        try:
            assert b_started.wait(120)
            rounds_before = service.rounds_run
            answers: list = []

            def long_prompt(prompt: str) -> None:
                with openai.OpenAI(base_url=root + "/v1", api_key="t", max_retries=0, timeout=300) as c:
                    answers.append(c.completions.create(model="smol", prompt=prompt, max_tokens=1))  # over 3 chunks of 256

            longs = [threading.Thread(target=long_prompt, args=(f"the {animal} sat on the mat. " * 110,)) for animal in ("cat", "dog")]
            for t in longs:
                t.start()
            for t in longs:
                t.join(300)
            assert len(answers) == 2 and all(a.usage.prompt_tokens > 3 * 256 for a in answers)
        finally:
            a_done.set()
            b.join(300)
        assert service.handed_on >= 1  # a long prefill gave its turn away at least once, with B waiting
        assert service.deferred >= 1  # the other long prefill, handed a turn inside that pause, queued again (it would run whole)
        assert service.rounds_run > rounds_before + 2  # B's rounds went on meanwhile (the long prompts' own rounds are two)
        wait_until(lambda: service.active == 0, 60, "both slots coming back")
