"""specviz as a service: the engine behind an OpenAI-compatible API (``python -m specviz serve``), so any client (the
`openai` package, curl, the probe) can stream from a speculating server and from a plain one and compare.

Endpoints: ``GET /v1/models``, ``POST /v1/chat/completions``, ``POST /v1/completions`` (``stream`` true or false),
``GET /health``, ``GET /metrics`` (Prometheus). Starlette and uvicorn (the ASGI stack Streamlit itself runs on), not a hand-written HTTP server.

How it decodes:

* **One model turn at a time, first come first served.** Every model pass (a request's prefill, each round) waits in
  one FIFO queue (an asyncio lock: its waiters are served in order) and runs on one model thread; a stream takes one
  turn per round, so concurrent streams interleave round by round and none starves the others. A long prefill runs in
  chunks (specviz.core.protocols.PREFILL_CHUNK_TOKENS) and between two hands its turn to the requests waiting and
  queues again at the back (Service._pause), so a stream waits for one chunk, never for a whole prefill.
* **Each round's tokens are sent as soon as they are committed.** ``chunks="round"`` (the default) writes one SSE
  chunk per round carrying all its tokens, as vLLM does; ``chunks="token"`` writes one chunk per token, a round's
  chunks back to back. A probe sees the rounds in the chunk sizes with the first, in the gaps with the second.
* **Caps** (the owner's flags): max_tokens per request, prompt tokens (counted with the target's tokenizer, after the
  chat template), and requests in flight (streams and not); over a cap the request is refused with OpenAI's error
  shape (``{"error": {"message", "type", "param", "code"}}``) and a message that says what to change.
* **What a client can make it hold** is bounded before it costs anything: the body (application/json only, at most
  request.MAX_BODY_BYTES, within the read deadline, parsed off the event loop), a slot taken before the prompt is
  tokenized (off the event loop), connections (uvicorn's limit), a request head's and a stalled write's deadlines
  (specviz.workshop.service.connection). With an API key, every /v1 request must send it (a Bearer token, compared in
  constant time). An error's message says what to change, never what failed inside (the log has the traceback).
* **The truth, for checking a probe**: ``usage.specviz`` = ``{"target_passes", "tokens_per_target_pass", "drafter",
  "k_policy", "tree_width"}`` (in a stream, in the usage chunk that ``stream_options.include_usage`` asks for), and the header
  ``x-specviz-tokens-per-target-pass`` on a whole response. ``report_truth=False`` leaves all of it out (the room
  exercise hides which service speculates).
* **vLLM's per-request metrics**: ``metrics.speculative_decoding`` (SpecDecodeSteps, specviz.core.metrics) on a whole
  response and on the stream's usage chunk only; ``spec_decode_metrics`` summary, detailed (per step too) or off.
  Absent on a plain server and under a hidden truth. ``GET /metrics``: the counters (workshop/service/prometheus.py).
* **A client that goes away ends its decode**: a watcher on the connection cancels the request at its next await (a
  round already running finishes on the model thread: torch cannot be interrupted), the decoder is dropped and the
  slot freed.

Exactness is the engine's: each request is a fresh decoder from specviz.runs, greedy output identical to plain decoding.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from specviz.core.decoding import SpeculativeDecoder
from specviz.core.metrics import SpecDecodeSteps
from specviz.core.protocols import PREFILL_CHUNK_TOKENS, pausable
from specviz.workshop.service.config import ServiceConfig
from specviz.workshop.service.hosts import guard_hosts
from specviz.workshop.service.prometheus import ServiceMetrics
from specviz.workshop.service.request import ApiError, Job, check_request, encode_job, read_json, server_error
from specviz.workshop.service.response import (
    DONE,
    EventStream,
    Finished,
    StreamChunks,
    completion_body,
    response_metrics,
    sse,
    truth_headers,
    until_disconnect,
    usage,
)
from specviz.workshop.service.text import Detokenizer, StopText
from specviz.workshop.service.turns import ModelThread

if TYPE_CHECKING:  # specviz.runs (and the model layer with it) is imported when a request first decodes
    from specviz.runs import RunModels

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LongPrefill:
    """A turn's work that prefills more than one chunk: it pauses between chunks, so it must run at the top of the model
    thread, never nested inside another prefill's pause (Service._pause)."""

    build: Callable[[], Any]

    def __call__(self) -> Any:
        return self.build()


class _Deferred(Exception):
    """A LongPrefill whose turn came inside another's pause: it gives the turn back unstarted and queues again."""


def _call_in(loop: asyncio.AbstractEventLoop, callback: Callable[[], Any]) -> None:
    """callback in loop, from any thread; nothing once the loop is closed (the server stopped while a pass ran)."""
    try:
        loop.call_soon_threadsafe(callback)
    except RuntimeError:
        pass


def new_model_thread() -> ModelThread:
    return ModelThread("specviz-model")


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

    def __init__(self, config: ServiceConfig, models: RunModels, *, history: int = 64, model_thread: ModelThread | None = None) -> None:
        self.config = config
        self.models = models
        self.tokenizer = models.target.tokenizer
        self.created = int(time.time())
        self.active = 0  # requests holding a slot
        self.waiting = 0  # requests waiting for a model turn
        self.rounds_run = 0  # every round this service decoded
        self.handed_on = 0  # times a long prefill let the waiting requests' passes run between two of its chunks
        self.deferred = 0  # times a long prefill whose turn came inside another's pause queued again to start on top
        self.history: deque[Finished] = deque(maxlen=history)
        self.decoders: weakref.WeakSet[SpeculativeDecoder] = weakref.WeakSet()  # alive now (tests: nothing leaks)
        self.metrics = ServiceMetrics(config)  # GET /metrics: this server's own registry
        self._turn: asyncio.Lock | None = None  # made in the server's event loop
        self._loop: asyncio.AbstractEventLoop | None = None  # that loop
        self._nested = 0  # passes running inside a paused prefill (model thread only): they never pause themselves
        self._tokenizing = anyio.CapacityLimiter(1)  # one prompt tokenized at a time, off the event loop
        # every model pass on one thread: torch's OpenMP team belongs to the thread that calls it, so passes from a
        # pool of threads would each start their own team and oversubscribe the cores (docs/performance.md)
        self._model_thread = model_thread or new_model_thread()
        self.app = Starlette(
            routes=[
                Route("/v1/models", self.list_models, methods=["GET"]),
                Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
                Route("/v1/completions", self.completions, methods=["POST"]),
                Route("/health", self.health, methods=["GET"]),
                Route("/metrics", self.prometheus, methods=["GET"]),
            ],
            exception_handlers={404: self._not_found, 405: self._not_allowed, Exception: self._failed},
        )

    # --- endpoints ------------------------------------------------------------------------------------------

    async def list_models(self, request: Request) -> Response:
        try:
            self._authorize(request)
        except ApiError as exc:
            return exc.response()
        return JSONResponse({"object": "list", "data": [{"id": self.config.model_id, "object": "model", "created": self.created, "owned_by": "specviz"}]})

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "active": self.active, "waiting": self.waiting, "max_streams": self.config.max_streams})

    async def prometheus(self, request: Request) -> Response:
        """The counters; with an API key, the scraper sends it too (Prometheus' ``authorization`` with a bearer token)."""
        try:
            self._authorize(request)
        except ApiError as exc:
            return exc.response()
        return Response(self.metrics.scrape(), headers={"content-type": self.metrics.content_type})

    async def chat_completions(self, request: Request) -> Response:
        return await self._handle(request, "chat")

    async def completions(self, request: Request) -> Response:
        return await self._handle(request, "text")

    async def _not_found(self, request: Request, exc: Exception) -> Response:
        return ApiError(404, f"No endpoint {request.url.path}; this server has /v1/models, /v1/chat/completions and /v1/completions.", code="not_found").response()

    async def _not_allowed(self, request: Request, exc: Exception) -> Response:
        return ApiError(405, f"{request.method} is not allowed on {request.url.path}.", code="method_not_allowed").response()

    async def _failed(self, request: Request, exc: Exception) -> Response:
        log.error("request to %s failed", request.url.path, exc_info=exc)
        return server_error().response()

    def _authorize(self, request: Request) -> None:
        """With an API key: the request's Bearer token must be it (compared in constant time); ApiError 401 if not."""
        key = self.config.api_key
        if key is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
            raise ApiError(401, "Incorrect or missing API key: send the key this server was started with as Authorization: Bearer <key>.",
                           code="invalid_api_key")  # fmt: skip

    async def _handle(self, request: Request, kind: Literal["chat", "text"]) -> Response:
        try:
            self._authorize(request)
            checked = check_request(await read_json(request, self.config.read_timeout_s), kind, self.config)
            self._reserve()  # before the prompt costs anything: a slot is what bounds the tokenizing too
        except ApiError as exc:
            return exc.response()
        try:
            job = await anyio.to_thread.run_sync(encode_job, checked, self.config, self.models.target, limiter=self._tokenizing)
        except ApiError as exc:
            self._release()
            return exc.response()
        except Exception:
            self._release()
            log.exception("encoding a prompt failed")
            return server_error().response()
        if job.stream:
            return EventStream(self._events(job), self._release, truth_headers(self.config, None))
        try:
            result = await until_disconnect(request, self._complete(job))
        except ApiError as exc:
            return exc.response()
        except Exception:  # a failure inside the engine: the client gets OpenAI's shape, the log the traceback
            log.exception("request failed")
            return server_error().response()
        finally:
            self._release()
        if result is None:
            return Response(status_code=499)  # the client is gone; nobody reads this
        body, finished = result
        return JSONResponse(body, headers=truth_headers(self.config, finished))

    # --- slots --------------------------------------------------------------------------------------------------

    def _reserve(self) -> None:
        if self.active >= self.config.max_streams:
            raise ApiError(429, f"This server decodes at most {self.config.max_streams} requests at a time and all are busy; try again in a moment.",
                           code="too_many_requests", kind="rate_limit_error")  # fmt: skip
        self.active += 1

    def _release(self) -> None:
        self.active -= 1

    # --- decoding -----------------------------------------------------------------------------------------------

    async def _turn_for(self, work: Callable[[], Any]) -> Any:
        """Run work (one model pass) on the model thread, in the queue's next turn. The turn ends when the work does:
        cancelled (the client left), a pass not yet started is dropped and one running finishes first (torch cannot be
        interrupted), so passes never overlap."""
        if self._turn is None:
            self._turn = asyncio.Lock()  # FIFO: a released lock wakes its longest waiter
            self._loop = asyncio.get_running_loop()
        loop, turn = self._loop, self._turn
        while True:
            self.waiting += 1
            try:
                async with asyncio.timeout(self.config.queue_timeout_s):
                    await turn.acquire()
            except TimeoutError:
                raise ApiError(503, f"Waited {self.config.queue_timeout_s:.0f} s for the model without a turn: the server is busy. Try again in a minute.",
                               code="queue_timeout", kind="server_error") from None  # fmt: skip
            finally:
                self.waiting -= 1
            future = self._model_thread.submit(lambda: self._in_turn(work))
            future.add_done_callback(lambda _: _call_in(loop, turn.release))
            try:
                return await asyncio.wrap_future(future)
            except _Deferred:  # a long prefill handed a turn inside another's pause: queue again, to start where it can pause
                self.deferred += 1

    def _in_turn(self, work: Callable[[], Any]) -> Any:
        """On the model thread: work, with a long prefill's pause points handing the turn on (_pause)."""
        if self._nested and isinstance(work, LongPrefill):
            raise _Deferred
        with pausable(self._pause):
            return work()

    def _pause(self) -> float:
        """On the model thread, between two chunks of a long prefill: with requests waiting, give the turn to them and
        run their passes here until this one's turn comes back at the back of the queue; the seconds that took (not
        the prefill's own time). A pass run nested never pauses itself: it sits above the paused one on this thread's
        stack, so it must end first; a long prefill is therefore never run nested (_Deferred) but queued again."""
        if self._nested or not self.waiting or self._loop is None:
            return 0.0
        start = time.perf_counter()
        back = asyncio.run_coroutine_threadsafe(self._hand_on(), self._loop)
        self._nested += 1
        try:
            self._model_thread.run_until(back)
        finally:
            self._nested -= 1
        back.result()
        self.handed_on += 1
        return time.perf_counter() - start

    async def _hand_on(self) -> None:
        """In the event loop, for a paused prefill: release its turn to the first waiter and queue for it again."""
        assert self._turn is not None
        self._turn.release()
        self.waiting += 1
        try:
            await self._turn.acquire()
        finally:
            self.waiting -= 1

    async def _rounds(self, job: Job, outcome: list[Finished]) -> AsyncIterator[list[str]]:
        """Prefill, then one round per turn; yields each round's new text, one piece per token (stop sequences cut,
        pieces of characters held back). Appends the request's Finished to outcome and to self.history, however it ends."""
        finished = Finished(0, 0, "error")
        rounds = tokens = 0
        decoder: SpeculativeDecoder | None = None
        start = last = time.perf_counter()
        try:
            from specviz.runs import build_decoder

            def build() -> SpeculativeDecoder:
                return build_decoder(job.run, self.models, job.prompt_ids, top_n=1)

            decoder: SpeculativeDecoder = await self._turn_for(LongPrefill(build) if len(job.prompt_ids) > PREFILL_CHUNK_TOKENS else build)
            self.decoders.add(decoder)
            detok, stops = Detokenizer(self.tokenizer), StopText(job.stop)
            eos = set(self.models.target.eos_token_ids)
            reason: Literal["stop", "length"] = "length"
            while not decoder.done and not stops.stopped:
                record = await self._turn_for(decoder.step)
                now = time.perf_counter()
                if record.emitted and not tokens:
                    self.metrics.first_token(now - start)
                gaps = [0.0] * max(len(record.emitted) - 1, 0)  # a round's tokens are committed together
                if record.emitted and tokens:
                    gaps.insert(0, now - last)  # its first token: the gap since the request's previous one
                self.metrics.round(record, gaps)
                last = now if record.emitted else last
                rounds, tokens = rounds + 1, tokens + len(record.emitted)
                self.rounds_run += 1
                pieces = [stops.feed(detok.add(t)) for t in record.emitted]
                if record.emitted and record.emitted[-1] in eos:
                    reason = "stop"
                if decoder.done or stops.stopped:
                    pieces.append(stops.flush())
                yield [p for p in pieces if p]
            finished = Finished(rounds, tokens, "stop" if stops.stopped else reason, self._steps(decoder, job))
        except (asyncio.CancelledError, GeneratorExit):
            finished = Finished(rounds, tokens, "disconnected", self._steps(decoder, job))
            raise
        finally:
            self.metrics.finished(job.kind, finished.reason)
            outcome.append(finished)
            self.history.append(finished)
            log.info("request done: %s", finished)

    @staticmethod
    def _steps(decoder: SpeculativeDecoder | None, job: Job) -> SpecDecodeSteps:
        """The request's verify steps, from its decoder's records (none before its prefill)."""
        return SpecDecodeSteps.of(decoder.records if decoder else (), 0 if job.run.drafter == "none" else job.run.num_draft_tokens)

    async def _complete(self, job: Job) -> tuple[dict, Finished]:
        text: list[str] = []
        outcome: list[Finished] = []
        async with contextlib.aclosing(self._rounds(job, outcome)) as rounds:
            async for pieces in rounds:
                text.extend(pieces)
        finished = outcome[0]
        return completion_body(job, finished, "".join(text), self.config), finished

    async def _events(self, job: Job) -> AsyncIterator[bytes]:
        """The SSE stream: a role chunk (chat), one chunk per round (or per token), a finish chunk, usage, [DONE]."""
        chunks = StreamChunks(job.kind, self.config.model_id)
        outcome: list[Finished] = []
        try:
            if job.kind == "chat":
                yield chunks.text(None, role=True)
            async with contextlib.aclosing(self._rounds(job, outcome)) as rounds:
                async for pieces in rounds:
                    if not pieces:
                        continue
                    if self.config.chunks == "round":
                        yield chunks.text("".join(pieces))
                    else:
                        yield b"".join(chunks.text(p) for p in pieces)  # the round's chunks in one write: together, as committed
            finished = outcome[0]
            yield chunks.text(None if job.kind == "chat" else "", finish=finished.reason)
            if job.include_usage:
                yield chunks.usage(usage(job, finished, self.config), response_metrics(finished, self.config))
            yield DONE
        except ApiError as exc:  # a queue timeout mid-stream: the stream ends with OpenAI's error event
            yield sse(exc.body())
        except Exception:  # a failure inside the engine, mid-stream: the same, and the traceback to the log
            log.exception("stream failed")
            yield sse(server_error().body())


def server_config(service: Service, host: str, port: int, **options):
    """The uvicorn config that serves service with its owner's connection limits (specviz.workshop.service.connection),
    answering on loopback only requests whose Host names loopback (specviz.workshop.service.hosts)."""
    from specviz.workshop.service.connection import server_config as config_for

    c = service.config
    return config_for(guard_hosts(service.app, host), host, port, c.max_connections, c.read_timeout_s, c.write_timeout_s, **options)


def run_server(service: Service, host: str, port: int) -> None:
    """Serve until interrupted (uvicorn; Ctrl+C or SIGTERM stops it). On loopback only requests naming loopback in
    their Host are answered (specviz.workshop.service.hosts: DNS rebinding)."""
    import uvicorn

    uvicorn.Server(server_config(service, host, port)).run()
