"""The one boundary to the model provider: OpenAI Chat Completions, streamed.

Everything the loop needs comes out as typed items. Passing trouble (rate limits,
server errors, timeouts, dropped or stalled streams) is retried here with backoff up
to a deadline per call, announced by `ModelWaiting` items; whatever is left comes out
as `LLMError` (`ContextLengthError` for a request too long for the model) with a
message a person can read.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import logging
import math
import random
import re
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import httpx2
import openai
import pydantic

from bot import metrics, tracing
from bot.engine.chunks import Chunk
from bot.engine.events import ModelWaiting
from bot.engine.messages import ChatMessage, ToolCall, Usage
from bot.errors import ContextLengthError, LLMError

logger = logging.getLogger(__name__)
DEFAULT_MAX_CONCURRENT = 32
DEFAULT_RETRY_DEADLINE_S = 120.0
DEFAULT_STALL_TIMEOUT_S = 60.0
# One answer, from the request to its last chunk: a stream that trickles on without end
# must not hold a run (and a place under the cap) for ever.
DEFAULT_ANSWER_TIMEOUT_S = 900.0
# Tool calls one answer may hold; past it the answer is refused, not run.
MAX_TOOL_CALLS = 128
# The most tokens one answer may report for either side (a 32-bit column's range).
MAX_REPORTED_TOKENS = 2**31 - 1
# Backoff without a Retry-After: 1 s, 2 s, 4 s … up to 30 s, each drawn from its upper
# half so that many runs hit by the same outage do not come back in step.
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0
# A Retry-After shorter than this says "now": taken on the first retry only, after which
# the backoff above applies, so a provider saying "now" for ever is not asked in a loop.
MIN_STATED_WAIT_S = 0.1
# Statuses worth another try: timeout, conflict, rate limit, and the server's own errors.
_RETRIED_CLIENT_STATUSES = frozenset({408, 409, 429})
_CONTEXT_LENGTH = re.compile(
    r"context[_ ]length[_ ]exceeded|maximum context length|context (?:length|window)"
    r"[^.]*(?:exceed|too long)",
    re.IGNORECASE,
)
# A provider refusing image parts for the model asked (OpenAI, vLLM, llama.cpp, Ollama,
# LM Studio, DeepSeek word it so), as opposed to refusing one image (too large, broken),
# which says nothing of the model.
_IMAGES_REFUSED = re.compile(
    r"invalid content type|unsupported content(?: part)? type|content type[^.]*not supported"
    r"|unknown variant\W{0,2}image_url"
    r"|(?:image|vision|multi-?modal)[^.]*(?:not (?:be )?(?:supported|accepted|allowed|enabled|"
    r"available)|unsupported|only (?:be )?supported)"
    r"|(?:does ?n[o']t|do ?n[o']t|cannot|can't) (?:support|accept|handle|take) "
    r"(?:images?|image inputs?|image_url|vision|multi-?modal)"
    r"|not an? (?:vision|multi-?modal|image)[- ](?:capable |enabled )?model",
    re.IGNORECASE,
)
# A figure as providers write it: 128000, 128,000, 128 000 or 128k.
_NUMBER = r"(\d{1,3}(?:[, ]\d{3})+|\d+)\s*(k\b)?"
_LIMIT = re.compile(rf"maximum context length is {_NUMBER}", re.IGNORECASE)
_TOKENS = re.compile(rf"(?:resulted in|requested) {_NUMBER} tokens", re.IGNORECASE)

Sleep = Callable[[float], Awaitable[object]]
Clock = Callable[[], float]


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS context of the model's HTTP client, made as the client would make it
    (certificates from SSL_CERT_FILE or SSL_CERT_DIR, else the bundled ones), once per
    process: loading the certificates costs about 30 ms of CPU per client."""
    return httpx2.create_ssl_context()


def model_http_client() -> openai.DefaultAsyncHttpxClient:
    """An HTTP client for `openai.AsyncOpenAI`: the SDK's defaults, the shared TLS context."""
    return openai.DefaultAsyncHttpxClient(verify=tls_context())


@dataclass(frozen=True, slots=True, kw_only=True)
class TextChunk:
    """A piece of streamed answer text."""

    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMResponse:
    """One complete model response: its text, its tool calls, and what it cost."""

    text: str
    tool_calls: tuple[ToolCall, ...]
    usage: Usage
    finish_reason: str | None
    # The model that answered, as the provider names it (None: it did not say).
    model: str | None = None


@dataclass(slots=True)
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Answer:
    """What one attempt has streamed so far."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    usage: Usage = field(default_factory=lambda: Usage(requests=1))
    finish_reason: str | None = None
    model: str | None = None
    _last: int | None = None  # the call the last tool-call piece went to

    def add(self, chunk: Chunk) -> str:
        """Take one stream chunk in; return its answer text ("" when none)."""
        if chunk.model:
            self.model = chunk.model
        if chunk.usage is not None:
            self.usage = Usage(
                prompt_tokens=_count(chunk.usage.prompt_tokens),
                completion_tokens=_count(chunk.usage.completion_tokens),
                requests=1,
            )
        text = ""
        for choice in chunk.choices or ():
            delta = choice.delta
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
            if delta is None:
                continue
            if delta.content:
                self.text.append(delta.content)
                text += delta.content
            for piece in delta.tool_calls or ():
                key = self._index(piece.index, piece.id)
                if key not in self.calls and len(self.calls) >= MAX_TOOL_CALLS:
                    raise LLMError(
                        f"the model provider's answer has more than {MAX_TOOL_CALLS} tool calls"
                    )
                partial = self.calls.setdefault(key, _PartialCall())
                self._last = key
                if piece.id:
                    partial.id = piece.id
                if piece.function is not None:
                    if piece.function.name:
                        partial.name += piece.function.name
                    if piece.function.arguments:
                        partial.arguments.append(piece.function.arguments)
        return text

    def _index(self, index: int | None, call_id: str | None) -> int:
        """The call a piece belongs to. Some servers leave `index` out: a piece with an id
        then starts the next call, one without continues the last."""
        if index is not None:
            return index
        last = self._last
        if last is None:
            return 0
        # Some repeat the call's id on each of its pieces: only a new id is a new call.
        if call_id and call_id != self.calls[last].id:
            return last + 1
        return last

    def response(self) -> LLMResponse:
        tool_calls = tuple(
            ToolCall(
                id=partial.id or f"call_{index}",
                name=partial.name,
                arguments="".join(partial.arguments),
            )
            for index, partial in sorted(self.calls.items())
        )
        return LLMResponse(
            text="".join(self.text),
            tool_calls=tool_calls,
            usage=self.usage,
            finish_reason=self.finish_reason,
            model=self.model,
        )


class _ImagesRefused(Exception):
    """The provider said the model takes no image parts."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class _Transient(Exception):
    """One attempt failed in a way worth retrying."""

    def __init__(self, reason: str, detail: str, retry_after: float | None = None) -> None:
        super().__init__(detail)
        self.reason = reason  # short, for people watching the run: "rate limited"
        self.detail = detail  # the whole story, for the error if retries run out
        self.retry_after = retry_after


class LLMClient:
    """Streams Chat Completions through an `openai.AsyncOpenAI` client.

    Build the openai client with `max_retries=0`: retrying is done here, where it can
    be announced to the run, bounded by a deadline and abandon a stalled stream.
    `max_concurrent` caps the calls in flight for the whole process; a call waiting
    out a backoff does not hold a place.

    A model the provider says takes no images gets its calls again with a note in
    place of each image part, and is remembered (for this client, one per process) so
    that its later calls send the notes straight away.
    """

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        *,
        max_concurrent: int = DEFAULT_MAX_CONCURRENT,
        retry_deadline_s: float = DEFAULT_RETRY_DEADLINE_S,
        stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S,
        answer_timeout_s: float = DEFAULT_ANSWER_TIMEOUT_S,
        sleep: Sleep = asyncio.sleep,
        clock: Clock = time.monotonic,
    ) -> None:
        if max_concurrent < 1:
            raise ValueError("max_concurrent must be at least 1")
        if min(retry_deadline_s, stall_timeout_s, answer_timeout_s) <= 0:
            raise ValueError("the deadline and the timeouts must be positive")
        self.client = client
        self.max_concurrent = max_concurrent
        self.retry_deadline_s = retry_deadline_s
        self.stall_timeout_s = stall_timeout_s
        self.answer_timeout_s = answer_timeout_s
        self._sleep = sleep
        self._clock = clock
        self._slots = asyncio.Semaphore(max_concurrent)
        self._no_images: set[str] = set()

    def accepts_images(self, model: str) -> bool:
        """False once the provider refused image parts for `model`."""
        return model not in self._no_images

    def _refuse_images(self, model: str, detail: str) -> None:
        if model in self._no_images:
            return
        self._no_images.add(model)
        logger.warning(
            "%s takes no images (%s): its images are named in text from now on", model, detail
        )

    def stream(
        self,
        *,
        model: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[dict[str, Any]],
    ) -> AsyncIterator[TextChunk | ModelWaiting | LLMResponse]:
        """Yield text chunks as they arrive, then exactly one `LLMResponse`.

        Before each retry a `ModelWaiting` comes out; when it says `discard_text`, the
        text chunks yielded so far are void and the answer starts again. With traces on,
        the call (its retries included) is a `chat {model}` span.

        Raises:
            ContextLengthError: The request is too long for the model.
            LLMError: The provider refused the request, or kept failing until the
                deadline.
        """
        traced = tracing.current()
        if not traced.enabled:
            return self._stream(model, messages, tools, tracing.INVALID_SPAN)
        return self._traced(traced, model, messages, tools)

    async def _traced(
        self,
        traced: tracing.Tracing,
        model: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[dict[str, Any]],
    ) -> AsyncIterator[TextChunk | ModelWaiting | LLMResponse]:
        """`_stream` within a span of its own, which says what the call cost and how it
        ended (and, capturing content, what it sent and what came back)."""
        span = traced.chat(model=model, server=self.client.base_url.host)
        if traced.capture_content:
            _capture_request(traced, span, messages)
        retries = 0
        try:
            async with aclosing(self._stream(model, messages, tools, span)) as items:
                async for item in items:
                    if isinstance(item, ModelWaiting):
                        retries += 1
                    elif isinstance(item, LLMResponse):
                        _trace_response(traced, span, item)
                    yield item
        except BaseException as exc:
            tracing.failed(span, exc)
            raise
        finally:
            if retries:
                span.set_attribute("baton.model.retries", retries)
            span.end()

    async def _stream(
        self,
        model: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[dict[str, Any]],
        span: tracing.Span,
    ) -> AsyncIterator[TextChunk | ModelWaiting | LLMResponse]:
        images = self.accepts_images(model) and any(m.images for m in messages)
        request: dict[str, Any] = {
            "model": model,
            "messages": [m.to_openai(images=images) for m in messages],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            request["tools"] = list(tools)
            request["parallel_tool_calls"] = True
        started = self._clock()
        called_at = time.monotonic()  # real time for the latency metric, whatever the clock
        retries = 0
        reasons: list[str] = []  # what went wrong, each once, for the final error
        first: _Transient | None = None  # often the cause; later failures may differ
        while True:
            answer = _Answer()
            streamed_text = False
            try:
                # The place is held for this attempt only, never during a backoff.
                async with self._slots, aclosing(self._attempt(request, span)) as chunks:
                    async for chunk in chunks:
                        if text := answer.add(chunk):
                            streamed_text = True
                            yield TextChunk(text=text)
                if answer.finish_reason is None:
                    # The stream ended without saying the answer was done: its tool calls
                    # may be half built, its text half written. Not to be used.
                    raise _Transient(
                        "connection dropped", "the model provider's answer ended unfinished"
                    )
            except _ImagesRefused as refused:
                if not images:
                    raise LLMError(refused.detail) from refused.__cause__
                # Once, at once: the same request with notes in place of the images.
                self._refuse_images(model, refused.detail)
                images = False
                request["messages"] = [m.to_openai(images=False) for m in messages]
                continue
            except _Transient as failure:
                retries += 1
                first = first or failure
                if failure.reason not in reasons:
                    reasons.append(failure.reason)
                wait = self._backoff(retries, failure.retry_after)
                elapsed = self._clock() - started
                if elapsed + wait > self.retry_deadline_s:
                    message = (
                        f"{first.detail} — gave up after {retries} "
                        f"attempt{'s' if retries > 1 else ''} over {elapsed:.0f} s "
                        f"({', '.join(reasons)})"
                    )
                    if failure.detail != first.detail:
                        message += f"; last: {failure.detail}"
                    raise LLMError(message) from failure.__cause__
                yield ModelWaiting(
                    reason=failure.reason,
                    attempt=retries,
                    wait_s=wait,
                    discard_text=streamed_text,
                )
                await self._sleep(wait)
                continue
            usage = answer.usage
            metrics.record_llm_call(
                time.monotonic() - called_at,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
            )
            yield answer.response()
            return

    async def _attempt(self, request: dict[str, Any], span: tracing.Span) -> AsyncIterator[Chunk]:
        """One HTTP call: its chunks, with any failure sorted into retry or not.

        The request goes out through the client's `post` as the JSON it already is, and
        chunks come back as plain JSON read into `Chunk`: `chat.completions.create`
        walks the whole request in Python first (about 0.16 s for a 600-message
        history, holding the event loop) and builds its own models for every chunk.
        The client's transport, authentication, status errors and SSE decoding are
        used as they are.
        """
        stall = f"no answer for {self.stall_timeout_s:g} s"
        loop = asyncio.get_running_loop()
        ends = loop.time() + self.answer_timeout_s
        try:
            # The call's span is current for the request alone: no yield happens in it.
            with tracing.active(span):
                async with asyncio.timeout(self.stall_timeout_s):
                    stream = await self.client.post(
                        "/chat/completions",
                        body=request,
                        cast_to=object,
                        stream=True,
                        stream_cls=openai.AsyncStream[object],
                        # As chat.completions.create: the API key, never an admin key.
                        options={"security": {"bearer_auth": True}},
                    )
        except TimeoutError as exc:
            raise _Transient(
                stall, f"the model provider sent nothing for {self.stall_timeout_s:g} s"
            ) from exc
        except openai.OpenAIError as exc:
            raise self._failure(exc, streaming=False) from exc
        async with stream:
            chunks = aiter(stream)
            while True:
                try:
                    async with asyncio.timeout(min(self.stall_timeout_s, ends - loop.time())):
                        chunk = await anext(chunks)
                except StopAsyncIteration:
                    return
                except TimeoutError as exc:
                    if loop.time() >= ends:
                        raise _Transient(
                            "answer too slow",
                            "the model provider's answer took longer than "
                            f"{self.answer_timeout_s:g} s",
                        ) from exc
                    raise _Transient(
                        stall,
                        f"the model provider's answer stalled for {self.stall_timeout_s:g} s",
                    ) from exc
                except openai.OpenAIError as exc:
                    raise self._failure(exc, streaming=True) from exc
                except ValueError as exc:  # a data line that is not JSON
                    raise _Transient(
                        "unreadable answer",
                        f"the model provider sent a line that is not JSON: {exc}",
                    ) from exc
                try:
                    parsed = Chunk.model_validate(chunk)
                except pydantic.ValidationError as exc:
                    raise _Transient(
                        "unreadable answer",
                        "the model provider sent a chunk that is not a Chat Completions "
                        f"chunk: {_clipped(repr(chunk))}",
                    ) from exc
                yield parsed

    def _failure(self, exc: openai.OpenAIError, *, streaming: bool) -> _Transient:
        """Sort a provider failure: a `_Transient` to retry, or raise `LLMError`."""
        if isinstance(exc, openai.APITimeoutError):
            return _Transient("timed out", f"the model provider did not answer in time ({exc})")
        if isinstance(exc, openai.APIConnectionError):
            if streaming:
                return _Transient(
                    "connection dropped", f"the model provider's answer broke off ({exc})"
                )
            return _Transient(
                "could not connect",
                f"could not reach the model provider at {self.client.base_url} ({exc})",
            )
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            message = _error_message(exc)
            detail = f"the model provider answered HTTP {status}: {message}"
            if _is_context_length(exc, message):
                raise ContextLengthError(
                    detail, limit=_first_int(_LIMIT, message), tokens=_first_int(_TOKENS, message)
                ) from exc
            if status in (400, 415, 422) and _IMAGES_REFUSED.search(message):
                raise _ImagesRefused(detail) from exc
            if status == 429:
                return _Transient("rate limited", detail, _retry_after(exc.response.headers))
            if status >= 500 or status in _RETRIED_CLIENT_STATUSES:
                reason = {408: "timed out", 409: "conflict, HTTP 409"}.get(
                    status, f"server error {status}"
                )
                return _Transient(reason, detail, _retry_after(exc.response.headers))
            raise LLMError(detail) from exc
        if isinstance(exc, openai.APIError) and streaming:
            # An error event inside the stream: the provider gave up on this answer.
            return _Transient(
                "connection dropped", f"the model provider's answer broke off ({exc})"
            )
        raise LLMError(f"the model provider's answer could not be read ({exc})") from exc

    def _backoff(self, retry: int, retry_after: float | None) -> float:
        if retry_after is not None and (retry_after >= MIN_STATED_WAIT_S or retry == 1):
            # The provider said when; a little spread keeps waiting runs out of step.
            return retry_after + random.uniform(0, min(1.0, retry_after / 10))
        ceiling = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (retry - 1))
        return random.uniform(ceiling / 2, ceiling)


def _capture_request(
    traced: tracing.Tracing, span: tracing.Span, messages: Sequence[ChatMessage]
) -> None:
    """What a call sends, on its span (content captured): the system prompt, and the
    messages in the GenAI conventions' form, each text redacted and cut."""
    system = [m.content for m in messages if m.role == "system" and m.content]
    if system:
        parts = [{"type": "text", "content": traced.content(text)} for text in system]
        span.set_attribute(tracing.SYSTEM_INSTRUCTIONS, tracing.newest_json(parts))
    sent = [_genai_message(traced, m) for m in messages if m.role != "system"]
    span.set_attribute(tracing.INPUT_MESSAGES, tracing.newest_json(sent))


def _genai_message(traced: tracing.Tracing, message: ChatMessage) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if message.role == "tool":
        parts.append(
            {
                "type": "tool_call_response",
                "id": traced.ident(message.tool_call_id or ""),
                "response": traced.content(message.content or ""),
            }
        )
    elif message.content:
        parts.append({"type": "text", "content": traced.content(message.content)})
    parts += [
        {"type": "text", "content": f"[image {traced.content(image.name)}]"}
        for image in message.images
    ]
    parts += [
        {
            "type": "tool_call",
            "id": traced.ident(call.id),
            "name": traced.ident(call.name),
            "arguments": traced.content(call.arguments),
        }
        for call in message.tool_calls
    ]
    return {"role": message.role, "parts": parts}


def _trace_response(traced: tracing.Tracing, span: tracing.Span, response: LLMResponse) -> None:
    """What came back, on the call's span: the model, why it ended, the tokens."""
    if response.model:
        span.set_attribute(tracing.RESPONSE_MODEL, traced.ident(response.model))
    if response.finish_reason:
        span.set_attribute(tracing.FINISH_REASONS, [traced.ident(response.finish_reason)])
    span.set_attribute(tracing.INPUT_TOKENS, response.usage.prompt_tokens)
    span.set_attribute(tracing.OUTPUT_TOKENS, response.usage.completion_tokens)
    if traced.capture_content:
        answer = ChatMessage(
            role="assistant", content=response.text or None, tool_calls=response.tool_calls
        )
        message = _genai_message(traced, answer)
        message["finish_reason"] = response.finish_reason or ""
        span.set_attribute(tracing.OUTPUT_MESSAGES, tracing.newest_json([message]))


def _count(tokens: int | None) -> int:
    """A token count as a provider reported it, kept within sense: a negative count
    would lower the metered spend, a huge one overflow the usage columns."""
    return min(max(tokens or 0, 0), MAX_REPORTED_TOKENS)


def _clipped(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _error_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"]
    return exc.message


def _is_context_length(exc: openai.APIStatusError, message: str) -> bool:
    if exc.status_code not in (400, 413, 422):
        return False
    body = exc.body
    error = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("code") == "context_length_exceeded":
        return True
    return bool(_CONTEXT_LENGTH.search(message))


def _first_int(pattern: re.Pattern[str], text: str) -> int | None:
    match = pattern.search(text)
    if match is None:
        return None
    digits, thousands = match.groups()
    return int(re.sub(r"[, ]", "", digits)) * (1000 if thousands else 1)


def _retry_after(headers: Any) -> float | None:
    """Seconds the provider asked us to wait (`retry-after-ms`, `retry-after`), if any."""
    if headers is None:
        return None
    if (millis := headers.get("retry-after-ms")) is not None:
        try:
            seconds = float(millis) / 1000
            if not math.isnan(seconds):
                return max(0.0, seconds)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
        return None if math.isnan(seconds) else max(0.0, seconds)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
