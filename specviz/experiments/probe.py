"""The probe: stream a few answers from any OpenAI-compatible endpoint, timestamp every chunk, count the tokens each
carried, and read the burst signature (specviz.core.bursts): is the service speculating, and with what tau?

It talks through the official `openai` client: the standard's own client, so the requests are what a real user's are,
and its SSE parsing and retries are done right (a retry happens only before the first byte of a stream, never inside
one). Redirects are not followed: an endpoint that answers 3xx is reported, not chased (on a shared server a redirect
must not carry the server's requests to an address nobody allowed). A caller can hand in ``guard``, called with the
URL of every request before it is sent (the app's allow-list, specviz.workshop.probe_urls).

What an endpoint can make the probe hold is bounded (ProbeTransport): the whole probe ends by ``deadline_s`` (a server
that trickles a byte at a time, or goes silent, is cut off then), each response is read up to ``max_stream_bytes``,
and no proxy is taken from the environment (HTTP_PROXY and friends would send a shared server's requests, and what
they carry, wherever the variables of its process point).

Tokens per chunk: with the target's tokenizer when the model is known (the whole answer tokenized once, each token
given to the chunk its last character arrived in), otherwise each chunk counts as one token ("chunks"); the result
says which. A service that sends several tokens per chunk is then undercounted, never its cadence.

What the server says of itself (ServerReport), when it says it: vLLM's ``metrics.speculative_decoding`` (on the
usage chunk), SGLang's ``meta_info`` (``spec_accept_length``, ``spec_accept_rate``, ``spec_verify_ct``, ...), llama.cpp's
``timings`` (``draft_n``, ``draft_n_accepted``: a rate, no step count, so no acceptance length), specviz's own
``usage.specviz`` (tokens per target pass). The result sets the server's acceptance length beside the one the bursts
inferred, and their difference; without any of them, the bursts alone.

Requests go one after another (never at once: the probe measures one user's view, not the server under load); the
prompts are the benchmark's (assets/prompts.json) for the category, cycled.
"""

from __future__ import annotations

import functools
import importlib
import math
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from specviz.core.bursts import Arrivals, BurstReport, analyze

CATEGORIES = ("copy", "code", "prose", "qa")
MAX_REQUESTS = 50
MAX_TOKENS = 4096
MAX_STREAM_BYTES = 4 * 1024 * 1024  # default cap per response: 4,096 tokens at ~200 bytes a chunk is under 1 MB
Guard = Callable[[str], None]  # raises ValueError for a URL that may not be requested
ProgressFn = Callable[[int, int, str], None]


@dataclass(frozen=True)
class ProbeSpec:
    base_url: str
    model: str
    category: str = "copy"
    n: int = 5  # requests, one after another
    max_tokens: int = 128
    temperature: float = 0.0
    endpoint: Literal["chat", "completions"] = "chat"
    timeout_s: float = 120.0  # per request: to connect, and between two reads
    deadline_s: float = 600.0  # the whole probe, every request together
    max_stream_bytes: int = MAX_STREAM_BYTES  # per response

    def __post_init__(self) -> None:
        if not isinstance(self.base_url, str) or not self.base_url.lower().startswith(("http://", "https://")) or len(self.base_url) > 2000:
            raise ValueError(f"The base URL must start with http:// or https://, e.g. http://127.0.0.1:8000/v1; got {self.base_url!r}.")
        if not isinstance(self.model, str) or not self.model.strip() or len(self.model) > 200:
            raise ValueError("Name the model the endpoint serves (1 to 200 characters); GET /v1/models lists them.")
        if self.category not in CATEGORIES:
            raise ValueError(f"The category must be one of {', '.join(CATEGORIES)}; got {self.category!r}.")
        if not 1 <= self.n <= MAX_REQUESTS:
            raise ValueError(f"The number of requests must be between 1 and {MAX_REQUESTS}; got {self.n}.")
        if not 1 <= self.max_tokens <= MAX_TOKENS:
            raise ValueError(f"max tokens must be between 1 and {MAX_TOKENS}; got {self.max_tokens}.")
        if not 0.0 <= self.temperature <= 2.0:
            raise ValueError(f"The temperature must be between 0 and 2; got {self.temperature}.")
        if self.endpoint not in ("chat", "completions"):
            raise ValueError(f"The endpoint must be chat or completions; got {self.endpoint!r}.")
        if not 0 < self.timeout_s <= 3600 or not math.isfinite(self.timeout_s):
            raise ValueError("The timeout must be between 0 and 3600 seconds.")
        if not 0 < self.deadline_s <= 24 * 3600 or not math.isfinite(self.deadline_s):
            raise ValueError("The deadline must be between 0 and 86400 seconds.")
        if not 1024 <= self.max_stream_bytes <= 1 << 30:
            raise ValueError("The byte cap per response must be between 1 KiB and 1 GiB.")


@dataclass(frozen=True)
class ServerReport:
    """What one response said of its own speculation, in vLLM's terms (None where the server gave no such number).
    acceptance_length: tokens per verify step, the bonus token counted (vLLM's mean_acceptance_length; specviz's
    tokens per target pass when that is all a server sent)."""

    source: str  # where it was read: "vLLM metrics.speculative_decoding", "SGLang meta_info", "llama.cpp timings", "specviz usage.specviz"
    acceptance_length: float | None = None
    acceptance_rate: float | None = None  # accepted / drafted
    verify_steps: int | None = None  # the steps the length is per (usage.specviz: target passes, drafting or not)
    accepted: int | None = None
    drafted: int | None = None
    histogram: tuple[int, ...] = ()  # vLLM's acceptance_histogram

    def to_json(self) -> dict:
        return {"source": self.source, "mean_acceptance_length": self.acceptance_length, "draft_acceptance_rate": self.acceptance_rate,
                "target_passes" if self.source.startswith("specviz") else "num_spec_steps": self.verify_steps,
                "num_accepted_draft_tokens": self.accepted, "num_draft_tokens": self.drafted,
                "acceptance_histogram": list(self.histogram) or None}  # fmt: skip


def _num(x) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) else None


def _count(x) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) and x >= 0 else None


def _ratio(a: int | None, b: int | None) -> float | None:
    return a / b if a is not None and b else None


def server_report(fields: dict, completion_tokens: int | None = None) -> ServerReport | None:
    """The server's own numbers from a response's fields (a whole response, or every chunk's top-level fields merged,
    with "meta_info" also looked for in usage), the first shape found: vLLM's, SGLang's, llama.cpp's, specviz's."""
    vllm = (fields.get("metrics") or {}).get("speculative_decoding") if isinstance(fields.get("metrics"), dict) else None
    if isinstance(vllm, dict):
        hist, steps = vllm.get("acceptance_histogram"), _count(vllm.get("num_spec_steps"))
        measured = steps != 0  # no verify step: vLLM's 1.0 and 0.0 are placeholders, not a measured length and rate
        return ServerReport(
            "vLLM metrics.speculative_decoding", _num(vllm.get("mean_acceptance_length")) if measured else None,
            _num(vllm.get("draft_acceptance_rate")) if measured else None,
            steps, _count(vllm.get("num_accepted_draft_tokens")), _count(vllm.get("num_draft_tokens")),
            tuple(h for h in hist if _count(h) is not None) if isinstance(hist, list) else (),
        )  # fmt: skip
    usage = fields.get("usage") if isinstance(fields.get("usage"), dict) else {}
    shapes = (fields.get("meta_info"), usage.get("meta_info"), usage)
    meta = next((m for m in shapes if isinstance(m, dict) and ("spec_accept_length" in m or "spec_verify_ct" in m)), None)
    if meta is not None:
        steps, accepted, drafted = _count(meta.get("spec_verify_ct")), _count(meta.get("spec_accept_token_num")), _count(meta.get("spec_draft_token_num"))
        tokens = _count(meta.get("completion_tokens")) or completion_tokens
        length = _num(meta.get("spec_accept_length"))
        return ServerReport("SGLang meta_info", length if length is not None else _ratio(tokens, steps),
                            _num(meta.get("spec_accept_rate")) if _num(meta.get("spec_accept_rate")) is not None else _ratio(accepted, drafted),
                            steps, accepted, drafted)  # fmt: skip
    timings = fields.get("timings")
    if isinstance(timings, dict) and "draft_n" in timings:
        drafted, accepted = _count(timings.get("draft_n")), _count(timings.get("draft_n_accepted"))
        return ServerReport("llama.cpp timings", None, _ratio(accepted, drafted), None, accepted, drafted)
    own = usage.get("specviz")
    if isinstance(own, dict) and _count(own.get("target_passes")):
        return ServerReport("specviz usage.specviz", _ratio(completion_tokens or _count(usage.get("completion_tokens")), own["target_passes"]),
                            verify_steps=own["target_passes"])  # fmt: skip
    return None


def pooled_acceptance_length(reports: Sequence[ServerReport | None]) -> float | None:
    """The server's acceptance length over every request: weighted by verify steps where every request gave its steps,
    else the plain mean of the lengths given; None when no request gave one."""
    lengths = [r for r in reports if r is not None and r.acceptance_length is not None]
    if not lengths:
        return None
    if all(r.verify_steps for r in lengths):
        return sum(r.acceptance_length * r.verify_steps for r in lengths) / sum(r.verify_steps for r in lengths)  # type: ignore[operator]
    return sum(r.acceptance_length for r in lengths) / len(lengths)  # type: ignore[misc]


@dataclass(frozen=True)
class ProbedStream:
    """One streamed answer as the probe saw it."""

    arrivals: Arrivals  # chunks with text: when, and how many tokens each
    characters: int
    finish_reason: str | None
    server_tokens: int | None  # usage.completion_tokens, when the server sent usage
    server_passes: int | None  # usage.specviz.target_passes, when the server reports its own (specviz serve)
    server_report: ServerReport | None = None  # what the server said of its speculation, in any shape it is read in

    @property
    def server_tokens_per_pass(self) -> float | None:
        return self.server_tokens / self.server_passes if self.server_tokens and self.server_passes else None

    def to_json(self) -> dict:
        a = self.arrivals
        return {"chunk_times_s": list(a.times_s), "chunk_tokens": list(a.tokens), "tokens": a.num_tokens, "characters": self.characters,
                "ttft_s": a.ttft_s, "tokens_per_s": a.decode_tokens_per_s(), "finish_reason": self.finish_reason,
                "server_completion_tokens": self.server_tokens, "server_target_passes": self.server_passes,
                "server_reported": self.server_report.to_json() if self.server_report else None}  # fmt: skip


@dataclass(frozen=True)
class ProbeResult:
    spec: ProbeSpec
    streams: tuple[ProbedStream, ...]
    counted_as: str  # "tokens (<tokenizer>)" or "chunks"
    report: BurstReport

    @property
    def server_tau(self) -> float | None:
        """The server's own tokens per target pass over every request, when every one reported it."""
        if not self.streams or any(s.server_passes is None or s.server_tokens is None for s in self.streams):
            return None
        passes = sum(s.server_passes or 0 for s in self.streams)
        return sum(s.server_tokens or 0 for s in self.streams) / passes if passes else None

    @property
    def reported_acceptance_length(self) -> float | None:
        """The server's own acceptance length over every request (pooled_acceptance_length), None if it gave none."""
        return pooled_acceptance_length([s.server_report for s in self.streams])

    @property
    def acceptance_length(self) -> dict:
        """Reported (the server's) beside inferred (tokens per burst) and their difference, inferred − reported. The bursts
        count every target pass; vLLM's length only the passes that drafted, so a drafter that often has nothing (prompt
        lookup before the text repeats) puts the inferred τ below it, near the server's tokens per target pass."""
        reported, inferred = self.reported_acceptance_length, self.report.tau
        sources = sorted({s.server_report.source for s in self.streams if s.server_report is not None})
        return {"reported": reported, "inferred": inferred, "difference": inferred - reported if reported is not None and inferred is not None else None,
                "source": ", ".join(sources) or None}  # fmt: skip

    def to_json(self) -> dict:
        s = self.spec
        return {
            "base_url": s.base_url, "model": s.model, "category": s.category, "n": s.n, "max_tokens": s.max_tokens,
            "temperature": s.temperature, "endpoint": s.endpoint, "counted_as": self.counted_as,
            "analysis": self.report.to_json(), "server_tokens_per_target_pass": self.server_tau, "acceptance_length": self.acceptance_length,
            "requests": [st.to_json() for st in self.streams],
        }  # fmt: skip


class ChunkCounter:
    """Tokens per chunk with a tokenizer: the answer tokenized once, each token given to the chunk that holds its last
    character (offsets when the tokenizer gives them, else by re-encoding each prefix)."""

    def __init__(self, tokenizer, name: str) -> None:
        self.tokenizer = tokenizer
        self.name = name

    def __call__(self, texts: Sequence[str]) -> list[int]:
        ends, total = [], 0
        for text in texts:
            total += len(text)
            ends.append(total)
        whole = "".join(texts)
        counts = [0] * len(texts)
        try:
            encoded = self.tokenizer(whole, add_special_tokens=False, return_offsets_mapping=True)
            offsets = encoded["offset_mapping"]
        except (NotImplementedError, TypeError, ValueError, KeyError):
            offsets = None
        if offsets is not None:
            chunk = 0
            for start, end in offsets:
                last = max(end - 1, start)
                while chunk < len(ends) - 1 and last >= ends[chunk]:
                    chunk += 1
                counts[chunk] += 1
            return counts
        before = 0
        for i, end in enumerate(ends):
            now = len(self.tokenizer(whole[:end], add_special_tokens=False)["input_ids"])
            counts[i], before = max(0, now - before), max(now, before)
        return counts


def tokenizer_for(choice: str, model: str) -> ChunkCounter | None:
    """--tokenizer: 'none' counts chunks; 'auto' uses the model's own tokenizer when specviz can load it without a download
    (the embedded target, a local folder or .gguf); anything else is loaded as a model source."""
    from specviz.config import EMBEDDED_TARGET
    from specviz.models import load_model

    choice = choice.strip()
    if choice == "none":
        return None
    if choice == "auto":
        if model != EMBEDDED_TARGET and not Path(model).expanduser().exists():
            return None
        choice = model
    loaded = load_model(choice, "cpu")
    return ChunkCounter(loaded.tokenizer, loaded.name)


def probe(
    spec: ProbeSpec,
    prompts: Sequence[str],
    counter: Callable[[Sequence[str]], list[int]] | None = None,
    *,
    api_key: str = "specviz-probe",
    guard: Guard | None = None,
    on_progress: ProgressFn | None = None,
) -> ProbeResult:
    """spec.n streaming requests, one after another, prompts cycled; ValueError with a message on any failure."""
    if not prompts:
        raise ValueError(f"No {spec.category} prompts to send.")
    if guard is not None:
        guard(spec.base_url)
    client = _client(spec, api_key, guard, time.monotonic() + spec.deadline_s)
    streams = []
    try:
        for i in range(spec.n):
            streams.append(_one(client, spec, prompts[i % len(prompts)], counter))
            if on_progress:
                a = streams[-1].arrivals
                on_progress(i + 1, spec.n, f"{a.num_tokens} tokens in {len(a.times_s)} chunks")
    finally:
        client.close()
    name = getattr(counter, "name", None)
    counted_as = "chunks" if counter is None else f"tokens ({name})" if name else "tokens"
    return ProbeResult(spec, tuple(streams), counted_as, analyze([s.arrivals for s in streams]))


def _client(spec: ProbeSpec, api_key: str, guard: Guard | None, deadline: float):
    import openai

    def check(request) -> None:  # every request, before it is sent
        if guard is not None:
            guard(str(request.url))

    transport = ProbeTransport(_http_library().HTTPTransport(trust_env=False), deadline, spec.deadline_s, spec.max_stream_bytes, spec.base_url)
    http = openai.DefaultHttpxClient(follow_redirects=False, event_hooks={"request": [check]}, timeout=spec.timeout_s, trust_env=False, transport=transport)
    return openai.OpenAI(base_url=spec.base_url, api_key=api_key, max_retries=1, timeout=spec.timeout_s, http_client=http)


def _http_library():
    """The HTTP library under the openai client (its default client's base class's package)."""
    import openai

    base = next(c for c in openai.DefaultHttpxClient.__mro__ if not c.__module__.startswith("openai"))
    return importlib.import_module(base.__module__.split(".")[0])


class ProbeTransport:
    """The client's HTTP transport with the probe's limits: no request starts after the deadline and none waits past it
    (each request's timeouts shortened to the time left; the response's socket shut down when the deadline comes, so
    a read blocked on a silent server ends too), and a response's body is read up to max_bytes. A limit reached raises
    ValueError with a message."""

    def __init__(self, inner, deadline: float, deadline_s: float, max_bytes: int, base_url: str) -> None:
        self.inner, self.deadline, self.max_bytes, self.base_url = inner, deadline, max_bytes, base_url
        self.late = f"{base_url} did not finish within the probe's deadline of {deadline_s:g} s."

    def handle_request(self, request):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise ValueError(self.late)
        timeouts = request.extensions.get("timeout") or {}
        request.extensions["timeout"] = {k: left if v is None else min(v, left) for k, v in timeouts.items()} or dict.fromkeys(("connect", "read", "write", "pool"), left)
        response = self.inner.handle_request(request)
        response.stream = _capped_body_class()(response.stream, self, _socket_of(response))
        return response

    def close(self) -> None:
        self.inner.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _CappedBody:
    """A response body read under ProbeTransport's limits."""

    def __init__(self, inner, limits: ProbeTransport, sock: socket.socket | None) -> None:
        self.inner, self.limits, self.sock = inner, limits, sock

    def __iter__(self):
        limits, read = self.limits, 0
        watchdog = threading.Timer(max(0.0, limits.deadline - time.monotonic()), self._cut) if self.sock is not None else None
        if watchdog is not None:
            watchdog.daemon = True
            watchdog.start()
        try:
            for chunk in self.inner:
                read += len(chunk)
                if read > limits.max_bytes:
                    raise ValueError(f"The answer from {limits.base_url} was over {limits.max_bytes:,} bytes, the most the probe reads of one.")
                if time.monotonic() > limits.deadline:
                    raise ValueError(limits.late)
                yield chunk
        except ValueError:
            raise
        except Exception:
            if time.monotonic() >= limits.deadline:  # the watchdog cut a read short
                raise ValueError(limits.late) from None
            raise
        finally:
            if watchdog is not None:
                watchdog.cancel()

    def _cut(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # type: ignore[union-attr]
        except OSError:
            pass

    def close(self) -> None:
        self.inner.close()


@functools.cache
def _capped_body_class() -> type:
    """_CappedBody as the HTTP library's SyncByteStream (its client checks a response's stream is one)."""
    return type("CappedBody", (_CappedBody, _http_library().SyncByteStream), {})


def _socket_of(response) -> socket.socket | None:
    stream = response.extensions.get("network_stream")
    try:
        sock = stream.get_extra_info("socket") if stream is not None else None
    except Exception:  # a transport without it: the shortened timeouts still bound the wait
        return None
    return sock if isinstance(sock, socket.socket) else None


def _one(client, spec: ProbeSpec, prompt: str, counter) -> ProbedStream:
    """One streaming request: a timestamp per chunk that carries text."""
    import openai

    times: list[float] = []
    texts: list[str] = []
    finish = None
    usage = None
    fields: dict = {}  # every chunk's top-level fields beyond the standard's, merged (metrics, timings, meta_info)
    try:
        start = time.perf_counter()
        if spec.endpoint == "chat":
            stream = client.chat.completions.create(
                model=spec.model, messages=[{"role": "user", "content": prompt}], max_tokens=spec.max_tokens,
                temperature=spec.temperature, stream=True, stream_options={"include_usage": True},
            )  # fmt: skip
        else:
            stream = client.completions.create(
                model=spec.model, prompt=prompt, max_tokens=spec.max_tokens, temperature=spec.temperature, stream=True,
                stream_options={"include_usage": True},
            )  # fmt: skip
        with stream:
            for chunk in stream:
                now = time.perf_counter() - start
                if getattr(chunk, "usage", None) is not None:
                    usage = chunk.usage
                fields.update(chunk.model_extra or {})
                for choice in chunk.choices or ():
                    fields.update({k: v for k, v in (choice.model_extra or {}).items() if k == "meta_info"})
                    text = choice.delta.content if spec.endpoint == "chat" else choice.text
                    if text:
                        times.append(now)
                        texts.append(text)
                    finish = choice.finish_reason or finish
    except openai.APIStatusError as exc:
        status = exc.status_code
        if 300 <= status < 400:
            raise ValueError(f"{spec.base_url} answered {status} (a redirect); the probe follows no redirects: give the final URL.") from None
        raise ValueError(f"{spec.base_url} answered {status}: {_message(exc)}") from None
    except openai.APITimeoutError:
        raise ValueError(f"{spec.base_url} did not answer within {spec.timeout_s:g} s.") from None
    except openai.APIConnectionError as exc:
        cause = exc.__cause__
        if isinstance(cause, ValueError):  # the guard refused a request
            raise ValueError(str(cause)) from None
        raise ValueError(f"Could not reach {spec.base_url}: {cause or exc}. Is the service running, and is the URL right?") from None
    counts = counter(texts) if counter is not None else [1] * len(texts)
    server_tokens = server_passes = None
    if usage is not None:
        server_tokens = getattr(usage, "completion_tokens", None)
        extra = (getattr(usage, "model_extra", None) or {}).get("specviz")
        if isinstance(extra, dict) and isinstance(extra.get("target_passes"), int):
            server_passes = extra["target_passes"]
        fields["usage"] = usage.model_dump()
    report = server_report(fields, server_tokens)
    return ProbedStream(Arrivals.of(times, counts), sum(len(t) for t in texts), finish, server_tokens, server_passes, report)


def _message(exc) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"][:500]
    return str(exc)[:500]
