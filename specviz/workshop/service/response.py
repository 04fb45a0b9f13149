"""What goes back to the client, in OpenAI's shapes: a whole completion's body, a stream's SSE chunks, the usage (with
``usage.specviz``, the truth a probe checks, unless the owner hides it) and its header; and the two ways a client
that goes away ends its request: a streamed response that cancels its producer (EventStream) and a whole one that
stops waiting (until_disconnect)."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from specviz.core.metrics import SpecDecodeSteps
from specviz.workshop.service.config import ServiceConfig
from specviz.workshop.service.request import Job


@dataclass(frozen=True)
class Finished:
    """What one request did (Service.history, for tests and the log)."""

    rounds: int
    tokens: int
    reason: Literal["stop", "length", "disconnected", "error"]
    steps: SpecDecodeSteps = SpecDecodeSteps(0)  # its verify steps, for metrics.speculative_decoding


def speculating(config: ServiceConfig) -> bool:
    """The server drafts and says so: what the speculative-decoding numbers (object and counters) need."""
    return config.report_truth and config.run.drafter != "none"


def response_metrics(finished: Finished, config: ServiceConfig) -> dict | None:
    """vLLM's per-request ``metrics`` ({"speculative_decoding": ...}), or None: a plain server, a hidden truth, or off."""
    if not speculating(config) or config.spec_decode_metrics == "off":
        return None
    return {"speculative_decoding": finished.steps.to_json(detailed=config.spec_decode_metrics == "detailed")}


def usage(job: Job, finished: Finished, config: ServiceConfig) -> dict:
    """OpenAI's usage, plus usage.specviz when the owner reports it: what vLLM's object has no field for (target passes
    counting rounds that drafted nothing, tokens per pass, the drafter and its k policy); its counts are in metrics."""
    out: dict[str, Any] = {"prompt_tokens": len(job.prompt_ids), "completion_tokens": finished.tokens,
                           "total_tokens": len(job.prompt_ids) + finished.tokens}  # fmt: skip
    if config.report_truth:
        run = config.run
        out["specviz"] = {
            "target_passes": finished.rounds, "tokens_per_target_pass": finished.tokens / finished.rounds if finished.rounds else None,
            "drafter": run.drafter, "k_policy": run.k_policy,
            "tree_width": run.tree_width,
        }  # fmt: skip
    return out


def truth_headers(config: ServiceConfig, finished: Finished | None) -> dict[str, str]:
    """x-specviz-tokens-per-target-pass on a whole response (none on a stream, whose headers go before its rounds)."""
    if finished is None or not config.report_truth or not finished.rounds:
        return {}
    return {"x-specviz-tokens-per-target-pass": f"{finished.tokens / finished.rounds:.4f}"}


def completion_body(job: Job, finished: Finished, content: str, config: ServiceConfig) -> dict:
    """A whole chat.completion or text_completion."""
    choice = (
        {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finished.reason, "logprobs": None}
        if job.kind == "chat" else {"index": 0, "text": content, "finish_reason": finished.reason, "logprobs": None}
    )  # fmt: skip
    metrics = response_metrics(finished, config)
    return {"id": request_id(job.kind), "object": "chat.completion" if job.kind == "chat" else "text_completion",
            "created": int(time.time()), "model": config.model_id, "choices": [choice], "usage": usage(job, finished, config),
            **({"metrics": metrics} if metrics else {})}  # fmt: skip


class StreamChunks:
    """One stream's SSE chunks (chat.completion.chunk or text_completion): one id and creation time for them all."""

    def __init__(self, kind: Literal["chat", "text"], model_id: str) -> None:
        self.kind, self.model_id = kind, model_id
        self.ident, self.created = request_id(kind), int(time.time())
        self.object = "chat.completion.chunk" if kind == "chat" else "text_completion"

    def text(self, text: str | None, finish: str | None = None, role: bool = False) -> bytes:
        """A chunk of text (None: none), or the role chunk that opens a chat, or the finish chunk."""
        if self.kind == "chat":
            delta = ({"role": "assistant", "content": ""} if role else {}) | ({"content": text} if text is not None else {})
            choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        else:
            choice = {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}
        return sse({"id": self.ident, "object": self.object, "created": self.created, "model": self.model_id, "choices": [choice]})

    def usage(self, usage: dict, metrics: dict | None = None) -> bytes:
        """The usage chunk that stream_options.include_usage asks for: no choices; the only chunk with metrics."""
        return sse({"id": self.ident, "object": self.object, "created": self.created, "model": self.model_id, "choices": [],
                    "usage": usage, **({"metrics": metrics} if metrics else {})})  # fmt: skip


DONE = b"data: [DONE]\n\n"


def sse(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n\n"


def request_id(kind: str) -> str:
    return ("chatcmpl-" if kind == "chat" else "cmpl-") + secrets.token_hex(12)


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
