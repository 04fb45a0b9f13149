"""One request checked and encoded: the body (JSON, capped in bytes and in time) -> its fields checked (Checked) -> the
prompt's ids (a Job), or an ApiError with OpenAI's error fields and a message that says what to change. The caps are
the owner's (ServiceConfig); the prompt is counted in the target's tokens, after the chat template.

The steps are split so the server can order them (specviz.workshop.service.server): whatever a client may send is
bounded before it costs anything (read_json: application/json only, MAX_BODY_BYTES, the read deadline; parsed off the
event loop), the fields are checked without the tokenizer (check_request), and only then, holding one of the owner's
slots, the prompt is tokenized off the event loop (encode_job)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from dataclasses import dataclass
from typing import Literal

import anyio
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse

from specviz.config import RunConfig, field_named
from specviz.core.limits import SEED_MAX
from specviz.workshop.service.config import ServiceConfig

MAX_BODY_BYTES = 2 * 1024 * 1024  # the longest prompt the character cap lets through, JSON-escaped, fits
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

    def body(self) -> dict:
        """OpenAI's error shape: {"error": {"message", "type", "param", "code"}}."""
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), self.status)


def server_error() -> ApiError:
    """A failure inside the engine, as the client sees it: that it happened, nothing of how (the log has the traceback)."""
    return ApiError(500, "The server failed on this request; its log says why. Try again, or tell whoever runs it.", code="server_error", kind="server_error")


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
class Checked:
    """A request whose fields passed every check that needs no tokenizer."""

    kind: Literal["chat", "text"]
    prompt: str | list[dict[str, str]]  # the text prompt, or the chat's messages (contents as text)
    max_tokens: int
    run: RunConfig  # the service's config with this request's sampling and max_tokens
    stream: bool
    include_usage: bool
    stop: tuple[str, ...]


async def read_json(request: Request, timeout_s: float) -> dict:
    """The request's body as a JSON object: Content-Type application/json, at most MAX_BODY_BYTES, arrived within
    timeout_s, parsed off the event loop; ApiError (415, 413, 408, 400) otherwise."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json":
        raise ApiError(415, "Send the body as JSON, with the header Content-Type: application/json.", code="unsupported_media_type")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ApiError(413, f"The body is {int(declared):,} bytes; this server reads at most {MAX_BODY_BYTES:,}.", code="body_too_large")
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise ApiError(413, f"The body is over {MAX_BODY_BYTES:,} bytes, the most this server reads.", code="body_too_large")
                chunks.append(chunk)
    except TimeoutError:
        raise ApiError(408, f"The body did not arrive within {timeout_s:g} s.", code="request_timeout") from None
    except ClientDisconnect:
        raise ApiError(400, "The client went away before its body arrived.") from None
    body = await anyio.to_thread.run_sync(parse_json, b"".join(chunks))
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    return body


def parse_json(raw: bytes) -> object:
    """Strict JSON (no NaN or Infinity); ApiError 400 for anything else, a number of over 4,300 digits included."""

    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    try:
        return json.loads(raw, parse_constant=refuse)
    except json.JSONDecodeError as exc:
        raise ApiError(400, f"The request body is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}).") from None
    except (ValueError, RecursionError):  # not UTF-8, NaN, a number too long to convert, nesting too deep
        raise ApiError(400, "The request body is not valid JSON: it must be UTF-8, nested at most a few hundred deep, "
                       "with numbers of at most 4,300 digits and no NaN or Infinity.") from None  # fmt: skip


def check_request(body: dict, kind: Literal["chat", "text"], config: ServiceConfig) -> Checked:
    """Every check that needs no tokenizer (cheap: run on the event loop before a slot is taken); ApiError saying what
    is wrong."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "Name the model: this server serves " f"{config.model_id!r}.", "model", "missing_model")
    if model != config.model_id:
        raise ApiError(404, f"The model {model!r} does not exist on this server; it serves {config.model_id!r} (GET /v1/models).", "model", "model_not_found")
    if body.get("n", 1) != 1:
        raise ApiError(400, "n must be 1: this server decodes one choice per request.", "n", "unsupported")
    for name in ("tools", "functions"):
        if body.get(name):
            raise ApiError(400, f"{name} are not supported by this server.", name, "unsupported")
    if body.get("logprobs") not in (None, False, 0):
        raise ApiError(400, "logprobs are not supported by this server.", "logprobs", "unsupported")
    prompt = _chat_messages(body.get("messages")) if kind == "chat" else _text_prompt(body.get("prompt"))
    max_tokens = _max_tokens(body, kind, config)
    base = config.run
    temperature = _number(body, "temperature", base.temperature, *field_named("temperature").widget_range)  # RunConfig's table
    top_p = _number(body, "top_p", base.top_p, *field_named("top_p").widget_range)
    seed = body.get("seed", base.seed)
    if seed is None:
        seed = base.seed
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
        raise ApiError(400, "seed must be a whole number of at least 0.", "seed")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "stream must be true or false.", "stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise ApiError(400, "stream_options must be an object.", "stream_options")
    try:
        run = dataclasses.replace(base, temperature=temperature, top_p=top_p, seed=seed, max_new_tokens=max_tokens)
    except ValueError as exc:  # RunConfig's own message: what to change
        raise ApiError(400, str(exc)) from None
    return Checked(kind, prompt, max_tokens, run, stream, bool(options.get("include_usage")), _stops(body.get("stop")))


def encode_job(checked: Checked, config: ServiceConfig, target) -> Job:
    """The checked request encoded for target (a loaded target model: its tokenizer and context length), and the
    prompt's token caps checked. Slow for a long prompt: the server calls it off the event loop, holding a slot."""
    kind = checked.kind
    tokenizer = target.tokenizer
    prompt_ids = encode_chat(tokenizer, checked.prompt) if isinstance(checked.prompt, list) else list(tokenizer(checked.prompt)["input_ids"])
    if len(prompt_ids) > config.max_prompt_tokens:
        raise ApiError(
            400, f"The prompt is {len(prompt_ids):,} tokens (counted with the target's tokenizer); this server takes at most "
            f"{config.max_prompt_tokens:,}. Shorten it.", "messages" if kind == "chat" else "prompt", "context_length_exceeded",
        )  # fmt: skip
    room = _max_positions(target) - len(prompt_ids)
    if checked.max_tokens > room:
        raise ApiError(400, f"The prompt ({len(prompt_ids):,} tokens) plus max_tokens ({checked.max_tokens:,}) exceeds the model's context; lower max_tokens.", "max_tokens", "context_length_exceeded")
    return Job(kind, prompt_ids, checked.run, checked.stream, checked.include_usage, checked.stop)


def _chat_messages(messages: object) -> list[dict[str, str]]:
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
    return clean


def _text_prompt(prompt: object) -> str:
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt.strip():
        raise ApiError(400, "prompt must be one non-empty string.", "prompt")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ApiError(400, f"The prompt is {len(prompt):,} characters; this server reads at most {MAX_PROMPT_CHARS:,}.", "prompt", "context_length_exceeded")
    _unicode(prompt, "prompt")
    return prompt


def _max_tokens(body: dict, kind: str, config: ServiceConfig) -> int:
    name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    value = body.get(name)
    if value is None:
        return config.max_tokens if kind == "chat" else min(16, config.max_tokens)  # OpenAI's completions default: 16
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ApiError(400, f"{name} must be a whole number of at least 1.", name)
    if value > config.max_tokens:
        raise ApiError(400, f"{name} is {value:,}; this server allows at most {config.max_tokens:,} tokens per request.", name, "max_tokens_too_large")
    return value


def _content_text(content: object) -> str:
    """A message's content: a string, or a list of {"type": "text", "text": ...} parts (others refused)."""
    if isinstance(content, str):
        return _unicode(content, "messages")
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
        return _unicode("".join(p["text"] for p in content), "messages")
    raise ApiError(400, "A message's content must be text (a string, or a list of text parts).", "messages")


def _unicode(text: str, param: str) -> str:
    """text, if it is whole Unicode (JSON can carry half a surrogate pair, which no tokenizer takes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(400, "The text holds an unpaired surrogate (\\ud800-\\udfff): send whole Unicode characters.", param) from None
    return text


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
