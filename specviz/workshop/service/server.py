"""specviz as a service: the engine behind an OpenAI-compatible API (``python -m specviz serve``), so any client (the
`openai` package, curl, the probe) can stream from a speculating server and from a plain one and compare.

Endpoints: ``GET /v1/models``, ``POST /v1/chat/completions``, ``POST /v1/completions`` (``stream`` true or false),
``GET /health``. Starlette and uvicorn (the ASGI stack Streamlit itself runs on), not a hand-written HTTP server.

How it decodes:

* **One model turn at a time, first come first served.** Every model pass (a request's prefill, each round) waits in
  one FIFO queue (an asyncio lock: its waiters are served in order) and runs on one model thread; a stream takes one
  turn per round, so concurrent streams interleave round by round and none starves the others.
* **Each round's tokens are sent as soon as they are committed.** ``chunks="round"`` (the default) writes one SSE
  chunk per round carrying all its tokens, as vLLM does; ``chunks="token"`` writes one chunk per token, a round's
  chunks back to back. A probe sees the rounds in the chunk sizes with the first, in the gaps with the second.
* **Caps** (the owner's flags): max_tokens per request, prompt tokens (counted with the target's tokenizer, after the
  chat template), and requests in flight (streams and not); over a cap the request is refused with OpenAI's error
  shape (``{"error": {"message", "type", "param", "code"}}``) and a message that says what to change.
* **The truth, for checking a probe**: ``usage.specviz`` = ``{"target_passes", "tokens_per_target_pass", "drafter",
  "num_draft_tokens"}`` (in a stream, in the usage chunk that ``stream_options.include_usage`` asks for), and the header
  ``x-specviz-tokens-per-target-pass`` on a whole response. ``report_truth=False`` leaves all of it out (the room
  exercise hides which service speculates).
* **A client that goes away ends its decode**: a watcher on the connection cancels the request at its next await (a
  round already running finishes on the model thread: torch cannot be interrupted), the decoder is dropped and the
  slot freed.

Exactness is the engine's: each request is a fresh decoder from specviz.runs, greedy output identical to plain decoding.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import secrets
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from specviz.config import MAX_NEW_TOKENS, RunConfig, field_named
from specviz.core.decoding import SpeculativeDecoder

if TYPE_CHECKING:  # the command line reads ServiceConfig's defaults for every subcommand's parser: no models imported then
    from specviz.runs import RunModels

log = logging.getLogger(__name__)

ChunkMode = Literal["round", "token"]
MAX_MESSAGES = 256
MAX_PROMPT_CHARS = 200_000  # refused before tokenizing: the token cap is the real one
MAX_STOP = 4  # stop sequences per request, as OpenAI allows
MAX_STOP_CHARS = 200
ROLES = ("system", "developer", "user", "assistant")


class ApiError(Exception):
    """A request the service refuses: HTTP status and OpenAI's error fields."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def response(self) -> JSONResponse:
        return JSONResponse({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}, self.status)


@dataclass(frozen=True)
class ServiceConfig:
    """What the owner set on the command line."""

    run: RunConfig  # target, drafter and its settings; temperature, top_p and seed are a request's defaults
    model_id: str  # the id /v1/models lists and every request must name
    max_tokens: int = 256  # cap on a request's max_tokens (also its default)
    max_prompt_tokens: int = 2048  # cap on the prompt, in the target's tokens, after the chat template
    max_streams: int = 4  # requests in flight (streamed or not); more are refused with 429
    chunks: ChunkMode = "round"
    report_truth: bool = True  # usage.specviz and the header; False hides what the service does
    queue_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        if not self.model_id.strip() or len(self.model_id) > 200:
            raise ValueError("The served model id must be 1 to 200 characters.")
        for name, low, high in (("max_tokens", 1, MAX_NEW_TOKENS), ("max_prompt_tokens", 1, 1_000_000), ("max_streams", 1, 1024)):
            value = getattr(self, name)
            if not (low <= value <= high):
                raise ValueError(f"--{name.replace('_', '-')} must be between {low} and {high}; got {value}.")
        if self.chunks not in ("round", "token"):
            raise ValueError(f"--chunks must be 'round' or 'token'; got {self.chunks!r}.")
        if not self.queue_timeout_s > 0:
            raise ValueError("The queue timeout must be positive.")


@dataclass(frozen=True)
class Job:
    """One validated request."""

    kind: Literal["chat", "text"]
    prompt_ids: list[int]
    run: RunConfig  # the service's config with this request's sampling and max_tokens
    stream: bool
    include_usage: bool
    stop: tuple[str, ...]


@dataclass(frozen=True)
class Finished:
    """What one request did (Service.history, for tests and the log)."""

    rounds: int
    tokens: int
    reason: Literal["stop", "length", "disconnected", "error"]


class Detokenizer:
    """Token ids -> text as it becomes whole: a piece of a character is held back until its last byte arrives.
    Decodes a short window (from the last whole point), so each token costs a constant amount of work."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.prefix = 0  # window start
        self.read = 0  # ids whose text has been given out

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def add(self, token_id: int) -> str:
        self.ids.append(int(token_id))
        before = self._decode(self.ids[self.prefix : self.read])
        text = self._decode(self.ids[self.prefix :])
        if len(text) > len(before) and not text.endswith("\ufffd"):
            self.prefix, self.read = self.read, len(self.ids)
            return text[len(before) :]
        return ""


class StopText:
    """Text on its way out, checked for stop sequences: what may be sent now, and whether a stop sequence ended it.
    The longest tail that could still become a stop sequence is held back until it cannot."""

    def __init__(self, stop: Sequence[str]) -> None:
        self.stop = [s for s in stop if s]
        self.pending = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        if self.stopped:
            return ""
        self.pending += text
        hits = [(i, s) for s in self.stop if (i := self.pending.find(s)) >= 0]
        if hits:
            cut = min(i for i, _ in hits)
            out, self.pending, self.stopped = self.pending[:cut], "", True
            return out
        hold = max((n for s in self.stop for n in range(len(s) - 1, 0, -1) if self.pending.endswith(s[:n])), default=0)
        out = self.pending[: len(self.pending) - hold]
        self.pending = self.pending[len(self.pending) - hold :]
        return out

    def flush(self) -> str:
        out, self.pending = ("" if self.stopped else self.pending), ""
        return out


def new_model_thread() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="specviz-model")


def load_on_model_thread(config: ServiceConfig, load: Callable[[], RunModels], **options) -> Service:
    """A Service whose models were loaded on its own model thread. Load the models anywhere else (the main thread)
    and torch's first parallel regions there start an OpenMP team of that thread's; the model thread's passes then
    start a second team, and on the 2-core machine here every pass ran at half speed (plain decoding 25-28 tokens/s in
    a worker thread against 61 on the thread that loaded the model, 53 when the worker loaded it too)."""
    thread = new_model_thread()
    models = thread.submit(load).result()
    return Service(config, models, model_thread=thread, **options)


class Service:
    """The API over one target and drafter. Per-request state lives in the request's coroutine; the models are only
    read. ``app`` is the Starlette application."""

    def __init__(self, config: ServiceConfig, models: RunModels, *, history: int = 64, model_thread: concurrent.futures.ThreadPoolExecutor | None = None) -> None:
        self.config = config
        self.models = models
        self.tokenizer = models.target.tokenizer
        self.created = int(time.time())
        self.active = 0  # requests holding a slot
        self.waiting = 0  # requests waiting for a model turn
        self.rounds_run = 0  # every round this service decoded
        self.history: deque[Finished] = deque(maxlen=history)
        self.decoders: weakref.WeakSet[SpeculativeDecoder] = weakref.WeakSet()  # alive now (tests: nothing leaks)
        self._turn: asyncio.Lock | None = None  # made in the server's event loop
        # every model pass on one thread: torch's OpenMP team belongs to the thread that calls it, so passes from a
        # pool of threads would each start their own team and oversubscribe the cores (docs/performance.md)
        self._model_thread = model_thread or new_model_thread()
        self.app = Starlette(
            routes=[
                Route("/v1/models", self.list_models, methods=["GET"]),
                Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
                Route("/v1/completions", self.completions, methods=["POST"]),
                Route("/health", self.health, methods=["GET"]),
            ],
            exception_handlers={404: self._not_found, 405: self._not_allowed},
        )

    # --- endpoints ------------------------------------------------------------------------------------------

    async def list_models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": self.config.model_id, "object": "model", "created": self.created, "owned_by": "specviz"}]})

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "active": self.active, "waiting": self.waiting, "max_streams": self.config.max_streams})

    async def chat_completions(self, request: Request) -> Response:
        return await self._handle(request, "chat")

    async def completions(self, request: Request) -> Response:
        return await self._handle(request, "text")

    async def _not_found(self, request: Request, exc: Exception) -> Response:
        return ApiError(404, f"No endpoint {request.url.path}; this server has /v1/models, /v1/chat/completions and /v1/completions.", code="not_found").response()

    async def _not_allowed(self, request: Request, exc: Exception) -> Response:
        return ApiError(405, f"{request.method} is not allowed on {request.url.path}.", code="method_not_allowed").response()

    async def _handle(self, request: Request, kind: Literal["chat", "text"]) -> Response:
        try:
            body = await _json_body(request)
            job = self.job(body, kind)
            self._reserve()
        except ApiError as exc:
            return exc.response()
        if job.stream:
            return EventStream(self._events(job), self._release, self._truth_headers(None))
        try:
            result = await until_disconnect(request, self._complete(job))
        except ApiError as exc:
            return exc.response()
        except Exception as exc:  # a failure inside the engine: the client gets OpenAI's shape, the log the traceback
            log.exception("request failed")
            return ApiError(500, f"The server failed on this request ({type(exc).__name__}: {exc}).", code="server_error", kind="server_error").response()
        finally:
            self._release()
        if result is None:
            return Response(status_code=499)  # the client is gone; nobody reads this
        body, finished = result
        return JSONResponse(body, headers=self._truth_headers(finished))

    # --- validating a request -----------------------------------------------------------------------------------

    def job(self, body: dict, kind: Literal["chat", "text"]) -> Job:
        """The request checked and encoded; ApiError saying what is wrong."""
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise ApiError(400, "Name the model: this server serves " f"{self.config.model_id!r}.", "model", "missing_model")
        if model != self.config.model_id:
            raise ApiError(404, f"The model {model!r} does not exist on this server; it serves {self.config.model_id!r} (GET /v1/models).", "model", "model_not_found")
        if body.get("n", 1) != 1:
            raise ApiError(400, "n must be 1: this server decodes one choice per request.", "n", "unsupported")
        for name in ("tools", "functions"):
            if body.get(name):
                raise ApiError(400, f"{name} are not supported by this server.", name, "unsupported")
        if body.get("logprobs") not in (None, False, 0):
            raise ApiError(400, "logprobs are not supported by this server.", "logprobs", "unsupported")
        prompt_ids = self._chat_ids(body.get("messages")) if kind == "chat" else self._text_ids(body.get("prompt"))
        if len(prompt_ids) > self.config.max_prompt_tokens:
            raise ApiError(
                400, f"The prompt is {len(prompt_ids):,} tokens (counted with the target's tokenizer); this server takes at most "
                f"{self.config.max_prompt_tokens:,}. Shorten it.", "messages" if kind == "chat" else "prompt", "context_length_exceeded",
            )  # fmt: skip
        max_tokens = self._max_tokens(body, kind)
        room = _max_positions(self.models.target) - len(prompt_ids)
        if max_tokens > room:
            raise ApiError(400, f"The prompt ({len(prompt_ids):,} tokens) plus max_tokens ({max_tokens:,}) exceeds the model's context; lower max_tokens.", "max_tokens", "context_length_exceeded")
        base = self.config.run
        temperature = _number(body, "temperature", base.temperature, *field_named("temperature").widget_range)  # RunConfig's table
        top_p = _number(body, "top_p", base.top_p, *field_named("top_p").widget_range)
        seed = body.get("seed", base.seed)
        if seed is None:
            seed = base.seed
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
            raise ApiError(400, "seed must be a whole number of at least 0.", "seed")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise ApiError(400, "stream must be true or false.", "stream")
        options = body.get("stream_options") or {}
        if not isinstance(options, dict):
            raise ApiError(400, "stream_options must be an object.", "stream_options")
        try:
            run = dataclasses.replace(base, temperature=temperature, top_p=top_p, seed=seed, max_new_tokens=max_tokens)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        return Job(kind, prompt_ids, run, stream, bool(options.get("include_usage")), _stops(body.get("stop")))

    def _chat_ids(self, messages: object) -> list[int]:
        if not isinstance(messages, list) or not 1 <= len(messages) <= MAX_MESSAGES:
            raise ApiError(400, f"messages must be a list of 1 to {MAX_MESSAGES} messages.", "messages")
        clean, chars = [], 0
        for m in messages:
            if not isinstance(m, dict) or m.get("role") not in ROLES:
                raise ApiError(400, f"Each message needs a role ({', '.join(ROLES)}) and content.", "messages")
            content = _content_text(m.get("content"))
            chars += len(content)
            clean.append({"role": "system" if m["role"] == "developer" else m["role"], "content": content})
        if chars > MAX_PROMPT_CHARS:
            raise ApiError(400, f"The messages hold {chars:,} characters; this server reads at most {MAX_PROMPT_CHARS:,}.", "messages", "context_length_exceeded")
        if not any(m["content"].strip() for m in clean):
            raise ApiError(400, "The messages are empty: write something to answer.", "messages")
        return encode_chat(self.tokenizer, clean)

    def _text_ids(self, prompt: object) -> list[int]:
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if not isinstance(prompt, str) or not prompt.strip():
            raise ApiError(400, "prompt must be one non-empty string.", "prompt")
        if len(prompt) > MAX_PROMPT_CHARS:
            raise ApiError(400, f"The prompt is {len(prompt):,} characters; this server reads at most {MAX_PROMPT_CHARS:,}.", "prompt", "context_length_exceeded")
        return list(self.tokenizer(prompt)["input_ids"])

    def _max_tokens(self, body: dict, kind: str) -> int:
        name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
        value = body.get(name)
        if value is None:
            return self.config.max_tokens if kind == "chat" else min(16, self.config.max_tokens)  # OpenAI's completions default: 16
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ApiError(400, f"{name} must be a whole number of at least 1.", name)
        if value > self.config.max_tokens:
            raise ApiError(400, f"{name} is {value:,}; this server allows at most {self.config.max_tokens:,} tokens per request.", name, "max_tokens_too_large")
        return value

    def _reserve(self) -> None:
        if self.active >= self.config.max_streams:
            raise ApiError(429, f"This server decodes at most {self.config.max_streams} requests at a time and all are busy; try again in a moment.",
                           code="too_many_requests", kind="rate_limit_error")  # fmt: skip
        self.active += 1

    def _release(self) -> None:
        self.active -= 1

    def _truth_headers(self, finished: Finished | None) -> dict[str, str]:
        if finished is None or not self.config.report_truth or not finished.rounds:
            return {}
        return {"x-specviz-tokens-per-target-pass": f"{finished.tokens / finished.rounds:.4f}"}

    # --- decoding -----------------------------------------------------------------------------------------------

    async def _turn_for(self, work: Callable[[], Any]) -> Any:
        """Run work (one model pass) in a worker thread, in the queue's next turn."""
        if self._turn is None:
            self._turn = asyncio.Lock()  # FIFO: a released lock wakes its longest waiter
        self.waiting += 1
        try:
            async with asyncio.timeout(self.config.queue_timeout_s):
                await self._turn.acquire()
        except TimeoutError:
            raise ApiError(503, f"Waited {self.config.queue_timeout_s:.0f} s for the model without a turn: the server is busy. Try again in a minute.",
                           code="queue_timeout", kind="server_error") from None  # fmt: skip
        finally:
            self.waiting -= 1
        try:
            # Cancelled (the client left), a pass not yet started is dropped and one running finishes on the model thread
            # (torch cannot be interrupted) while the next turn's pass queues behind it: passes never overlap.
            return await asyncio.wrap_future(self._model_thread.submit(work))
        finally:
            self._turn.release()

    async def _rounds(self, job: Job, outcome: list[Finished]) -> AsyncIterator[list[str]]:
        """Prefill, then one round per turn; yields each round's new text, one piece per token (stop sequences cut,
        pieces of characters held back). Appends the request's Finished to outcome and to self.history, however it ends."""
        finished = Finished(0, 0, "error")
        rounds = tokens = 0
        try:
            from specviz.runs import decoder_for

            decoder: SpeculativeDecoder = await self._turn_for(lambda: decoder_for(job.run, self.models, job.prompt_ids, top_n=1))
            self.decoders.add(decoder)
            detok, stops = Detokenizer(self.tokenizer), StopText(job.stop)
            eos = set(self.models.target.eos_token_ids)
            reason: Literal["stop", "length"] = "length"
            while not decoder.done and not stops.stopped:
                record = await self._turn_for(decoder.step)
                rounds, tokens = rounds + 1, tokens + len(record.emitted)
                self.rounds_run += 1
                pieces = [stops.feed(detok.add(t)) for t in record.emitted]
                if record.emitted and record.emitted[-1] in eos:
                    reason = "stop"
                if decoder.done or stops.stopped:
                    pieces.append(stops.flush())
                yield [p for p in pieces if p]
            finished = Finished(rounds, tokens, "stop" if stops.stopped else reason)
        except (asyncio.CancelledError, GeneratorExit):
            finished = Finished(rounds, tokens, "disconnected")
            raise
        finally:
            outcome.append(finished)
            self.history.append(finished)
            log.info("request done: %s", finished)

    async def _complete(self, job: Job) -> tuple[dict, Finished]:
        text: list[str] = []
        outcome: list[Finished] = []
        async with contextlib.aclosing(self._rounds(job, outcome)) as rounds:
            async for pieces in rounds:
                text.extend(pieces)
        finished = outcome[0]
        content = "".join(text)
        choice = (
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finished.reason, "logprobs": None}
            if job.kind == "chat" else {"index": 0, "text": content, "finish_reason": finished.reason, "logprobs": None}
        )  # fmt: skip
        body = {"id": _request_id(job.kind), "object": "chat.completion" if job.kind == "chat" else "text_completion",
                "created": int(time.time()), "model": self.config.model_id, "choices": [choice], "usage": self._usage(job, finished)}  # fmt: skip
        return body, finished

    async def _events(self, job: Job) -> AsyncIterator[bytes]:
        """The SSE stream: a role chunk (chat), one chunk per round (or per token), a finish chunk, usage, [DONE]."""
        ident, created = _request_id(job.kind), int(time.time())
        obj = "chat.completion.chunk" if job.kind == "chat" else "text_completion"

        def chunk(text: str | None, finish: str | None = None, role: bool = False) -> bytes:
            if job.kind == "chat":
                delta = ({"role": "assistant", "content": ""} if role else {}) | ({"content": text} if text is not None else {})
                choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
            else:
                choice = {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}
            return sse({"id": ident, "object": obj, "created": created, "model": self.config.model_id, "choices": [choice]})

        outcome: list[Finished] = []
        try:
            if job.kind == "chat":
                yield chunk(None, role=True)
            async with contextlib.aclosing(self._rounds(job, outcome)) as rounds:
                async for pieces in rounds:
                    if not pieces:
                        continue
                    if self.config.chunks == "round":
                        yield chunk("".join(pieces))
                    else:
                        yield b"".join(chunk(p) for p in pieces)  # the round's chunks in one write: together, as committed
            finished = outcome[0]
            yield chunk(None if job.kind == "chat" else "", finish=finished.reason)
            if job.include_usage:
                yield sse({"id": ident, "object": obj, "created": created, "model": self.config.model_id, "choices": [],
                           "usage": self._usage(job, finished)})  # fmt: skip
            yield b"data: [DONE]\n\n"
        except ApiError as exc:  # a queue timeout mid-stream: the stream ends with OpenAI's error event
            yield sse({"error": {"message": exc.message, "type": exc.kind, "param": exc.param, "code": exc.code}})
        except Exception as exc:  # a failure inside the engine, mid-stream: the same, and the traceback to the log
            log.exception("stream failed")
            yield sse({"error": {"message": f"The server failed on this request ({type(exc).__name__}: {exc}).", "type": "server_error",
                                 "param": None, "code": "server_error"}})  # fmt: skip

    def _usage(self, job: Job, finished: Finished) -> dict:
        usage: dict[str, Any] = {"prompt_tokens": len(job.prompt_ids), "completion_tokens": finished.tokens,
                                 "total_tokens": len(job.prompt_ids) + finished.tokens}  # fmt: skip
        if self.config.report_truth:
            run = self.config.run
            usage["specviz"] = {
                "target_passes": finished.rounds, "tokens_per_target_pass": finished.tokens / finished.rounds if finished.rounds else None,
                "drafter": run.drafter, "num_draft_tokens": 0 if run.drafter == "none" else run.num_draft_tokens,
            }  # fmt: skip
        return usage


class EventStream(Response):
    """A streamed response that stops its producer when the client disconnects: one task sends the events, another
    waits for the connection's http.disconnect and cancels the first (at its next await). on_close runs once, always."""

    media_type = "text/event-stream"

    def __init__(self, events: AsyncIterator[bytes], on_close: Callable[[], None], headers: dict[str, str] | None = None) -> None:
        self.events = events
        self.on_close = on_close
        self.status_code = 200
        self.background = None
        self.init_headers({"cache-control": "no-cache", "x-accel-buffering": "no", **(headers or {})})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as group:

                async def pump() -> None:
                    try:
                        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
                        async for event in self.events:
                            await send({"type": "http.response.body", "body": event, "more_body": True})
                        await send({"type": "http.response.body", "body": b"", "more_body": False})
                    except OSError:  # the client went away between the watcher's checks
                        pass
                    group.cancel_scope.cancel()

                async def watch() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    group.cancel_scope.cancel()

                group.start_soon(pump)
                group.start_soon(watch)
        finally:
            await self.events.aclose()  # a producer cancelled mid-round has already run its finally; this is a no-op then
            self.on_close()


async def until_disconnect(request: Request, work: Awaitable[Any]) -> Any:
    """Await work unless the client disconnects first (then work is cancelled at its next await and None returned)."""
    result: list[Any] = []
    errors: list[Exception] = []

    async with anyio.create_task_group() as group:

        async def run() -> None:
            try:
                result.append(await work)
            except Exception as exc:  # raised below, as itself (a task group would wrap it in an ExceptionGroup)
                errors.append(exc)
            group.cancel_scope.cancel()

        async def watch() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass
            group.cancel_scope.cancel()

        group.start_soon(run)
        group.start_soon(watch)
    if errors:
        raise errors[0]
    if not result and asyncio.iscoroutine(work):
        work.close()
    return result[0] if result else None


def sse(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n\n"


def _request_id(kind: str) -> str:
    return ("chatcmpl-" if kind == "chat" else "cmpl-") + secrets.token_hex(12)


async def _json_body(request: Request) -> dict:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise ApiError(400, "The request body is not JSON.") from None
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    return body


def _content_text(content: object) -> str:
    """A message's content: a string, or a list of {"type": "text", "text": ...} parts (others refused)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    raise ApiError(400, "A message's content must be text (a string, or a list of text parts).", "messages")


def _number(body: dict, name: str, default: float, low: float, high: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ApiError(400, f"{name} must be a number from {low:g} to {high:g}.", name)
    return float(value)


def _stops(stop: object) -> tuple[str, ...]:
    if stop is None:
        return ()
    items = [stop] if isinstance(stop, str) else stop
    if not isinstance(items, list) or len(items) > MAX_STOP or not all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS for s in items):
        raise ApiError(400, f"stop must be a string or a list of at most {MAX_STOP} non-empty strings of up to {MAX_STOP_CHARS} characters.", "stop")
    return tuple(items)


def encode_chat(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """A chat's messages (contents as text) -> ids through the tokenizer's chat template, ready for the assistant's turn
    (as specviz.models.encode_prompt renders one user turn); without a template, the contents joined by blank lines."""
    if getattr(tokenizer, "chat_template", None):
        rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return list(tokenizer(rendered, add_special_tokens=False)["input_ids"])
    return list(tokenizer("\n\n".join(m["content"] for m in messages))["input_ids"])


def _max_positions(target) -> int:
    return int(getattr(target.model.config, "max_position_embeddings", None) or 1_000_000)


def run_server(service: Service, host: str, port: int) -> None:
    """Serve until interrupted (uvicorn; Ctrl+C or SIGTERM stops it)."""
    import uvicorn

    uvicorn.run(service.app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5)
