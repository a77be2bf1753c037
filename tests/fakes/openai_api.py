"""A fake OpenAI-compatible Chat Completions HTTP server for tests.

The fake speaks enough of the OpenAI wire protocol that the real ``openai.AsyncOpenAI``
client can talk to it (``base_url=fake.url``). Tests script the replies up front, either as
a FIFO queue (``fake.script(...)``) or with a ``fake.responder`` callable, and inspect
``fake.requests`` afterwards.

Bad days can be scripted too: ``ErrorBurst`` answers 429s or 5xx for a while or a number
of requests, ``Reply(stall_after=…)`` stops sending mid-stream, ``Reply(drop_after=…)``
closes the connection mid-stream, and ``FakeOpenAI(context_window=N)`` refuses requests
longer than ``N`` tokens as OpenAI does (HTTP 400, ``context_length_exceeded``).

User messages may carry content-part arrays (text and ``image_url`` parts);
``RecordedRequest.image_urls`` lists the images a request sent, and
``FakeOpenAI(accepts_images=False)`` answers a request with images as a text-only
model does (HTTP 400, ``Invalid content type. image_url is only supported by …``).

Example:
    async with FakeOpenAI() as fake:
        fake.script(Reply(text="hello"), Reply(tool_calls=[ToolCallSpec("ls", {"path": "."})]))
        client = AsyncOpenAI(api_key="sk-test", base_url=fake.url, max_retries=0)
        ...
        await client.close()
        fake.assert_all_used()
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import time
import uuid
import warnings
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from bot.subagents.handoff import HANDOFF_REQUEST
from tests.fakes.serving import FakeServer, listen_on_loopback

__all__ = [
    "ErrorBurst",
    "ErrorReply",
    "FakeOpenAI",
    "Hang",
    "RawStream",
    "RecordedRequest",
    "Reply",
    "Responder",
    "ScriptedReply",
    "ToolCallSpec",
    "Usage",
    "count_prompt_tokens",
    "o200k_tokens",
]

# What OpenAI answers when a text-only model is sent an image part.
IMAGES_REFUSED_MESSAGE = "Invalid content type. image_url is only supported by certain models."

DEFAULT_MODEL = "fake-model"
NO_REPLY_MESSAGE = "FakeOpenAI: no scripted reply left"


# --------------------------------------------------------------------------- reply values


@dataclass(frozen=True, kw_only=True)
class Usage:
    """Token usage reported for a completion.

    Attributes:
        prompt_tokens: Tokens attributed to the request.
        completion_tokens: Tokens attributed to the generated answer.
        total_tokens: Sum of both; computed when left as ``None``.
    """

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int | None = None

    def to_json(self) -> dict[str, int]:
        """Return the OpenAI ``usage`` object for this value."""
        total = self.total_tokens
        if total is None:
            total = self.prompt_tokens + self.completion_tokens
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": total,
        }


@dataclass(frozen=True)
class ToolCallSpec:
    """One tool call the fake model should make.

    Attributes:
        name: Function name.
        arguments: A dict (sent JSON-encoded) or a string (sent verbatim, so it may be
            malformed JSON on purpose).
        id: Tool call id; a unique ``call_<n>`` is generated when ``None``.
    """

    name: str
    arguments: str | dict[str, Any] = field(default_factory=dict)
    id: str | None = None

    @property
    def arguments_json(self) -> str:
        """The arguments exactly as they go over the wire."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments)


@dataclass(frozen=True, kw_only=True)
class Reply:
    """A successful chat completion.

    Attributes:
        text: Assistant message content.
        tool_calls: Tool calls the assistant makes (streamed in parallel when several).
        usage: Reported token usage; plausible numbers are computed when ``None``.
        delay: Seconds to wait before answering at all.
        chunk_delay: Seconds to wait between streamed chunks (streaming only).
        finish_reason: Defaults to ``"tool_calls"`` when there are tool calls, else ``"stop"``.
        stall_after: Stream this many chunks (the role chunk counts), then send nothing
            more, holding the connection open until the client gives up.
        drop_after: Stream this many chunks, then close the connection without finishing.
    """

    text: str = ""
    tool_calls: Sequence[ToolCallSpec] = ()
    usage: Usage | None = None
    delay: float = 0.0
    chunk_delay: float = 0.0
    finish_reason: str | None = None
    stall_after: int | None = None
    drop_after: int | None = None

    @property
    def effective_finish_reason(self) -> str:
        """The finish reason that will be sent."""
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if self.tool_calls else "stop"


@dataclass(frozen=True, kw_only=True)
class ErrorReply:
    """An HTTP error with an OpenAI-style error body.

    Attributes:
        status: HTTP status code (500 -> ``InternalServerError``, 429 -> ``RateLimitError``...).
        message: ``error.message`` in the body.
        delay: Seconds to wait before answering.
        retry_after: Sent as the ``Retry-After`` header: seconds, or a string sent as is
            (an HTTP date).
        retry_after_ms: Sent as the ``retry-after-ms`` header.
        code: ``error.code`` in the body.
        error_type: ``error.type`` in the body.
    """

    status: int = 500
    message: str = "internal error"
    delay: float = 0.0
    retry_after: float | str | None = None
    retry_after_ms: float | None = None
    code: str | None = None
    error_type: str = "server_error"

    def headers(self) -> dict[str, str]:
        """The response headers this error carries."""
        headers: dict[str, str] = {}
        if self.retry_after is not None:
            value = self.retry_after
            headers["Retry-After"] = value if isinstance(value, str) else f"{value:g}"
        if self.retry_after_ms is not None:
            headers["retry-after-ms"] = f"{self.retry_after_ms:g}"
        return headers


@dataclass(frozen=True, kw_only=True, eq=False)
class ErrorBurst:
    """A scripted stretch of errors: every request gets ``error`` until the burst is over.

    Put it in the queue with ``fake.script(...)``; it does not use up the replies after it.
    The burst starts with the first request it answers and is over once ``count`` requests
    were answered or ``duration`` seconds have passed, whichever comes first (at least one
    of them must be given); the next request then takes the next scripted reply.

    Attributes:
        error: The answer to each request during the burst.
        duration: Seconds the burst lasts.
        count: Requests the burst answers.
    """

    error: ErrorReply = field(
        default_factory=lambda: ErrorReply(status=429, message="Rate limit reached")
    )
    duration: float | None = None
    count: int | None = None

    def __post_init__(self) -> None:
        if self.duration is None and self.count is None:
            raise ValueError("an ErrorBurst needs a duration or a count")


@dataclass(frozen=True, kw_only=True)
class Hang:
    """Never answer: hold the request until the client gives up or the server stops."""


@dataclass(frozen=True, kw_only=True)
class RawStream:
    """A streamed answer written exactly as given: each event is sent as one SSE
    `data:` line (JSON-encoded unless it is a str), then `data: [DONE]`. For the odd
    chunks some compatible servers send."""

    events: Sequence[object]
    delay: float = 0.0


ScriptedReply = Reply | ErrorReply | Hang | RawStream
Scripted = ScriptedReply | ErrorBurst
Responder = Callable[["RecordedRequest"], "ScriptedReply | Awaitable[ScriptedReply]"]


# --------------------------------------------------------------------------- recording


@dataclass(frozen=True)
class RecordedRequest:
    """A chat completion request received by the fake.

    Attributes:
        body: The parsed JSON body.
        headers: Request headers, with lower-cased names.
        prompt_tokens: The request's size in o200k tokens, as the fake counts it (see
            ``count_prompt_tokens``); reported as ``usage.prompt_tokens``.
    """

    body: dict[str, Any]
    headers: dict[str, str]
    prompt_tokens: int = 0

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The ``messages`` list of the request."""
        return list(self.body.get("messages") or [])

    @property
    def model(self) -> str | None:
        """The requested model."""
        return self.body.get("model")

    @property
    def image_urls(self) -> list[str]:
        """The URLs (``data:`` URLs for uploads) of every image part, in order."""
        return [url for _, _, url in _image_parts(self.body)]

    @property
    def tools(self) -> list[str]:
        """Names of the tool functions offered in the request."""
        names: list[str] = []
        for tool in self.body.get("tools") or []:
            function = tool.get("function") or {}
            if "name" in function:
                names.append(function["name"])
        return names

    @property
    def stream(self) -> bool:
        """Whether a streamed response was requested."""
        return bool(self.body.get("stream"))

    @property
    def include_usage(self) -> bool:
        """Whether ``stream_options.include_usage`` was requested."""
        options = self.body.get("stream_options") or {}
        return bool(options.get("include_usage"))


# --------------------------------------------------------------------------- server


def _asks_for_handoff(body: dict[str, Any]) -> bool:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return False
    last = messages[-1]
    return last.get("role") == "user" and last.get("content") == HANDOFF_REQUEST


def _chunks(text: str, size: int) -> Iterator[str]:
    for start in range(0, len(text), size):
        yield text[start : start + size]


def _error_body(
    message: str,
    error_type: str = "server_error",
    *,
    code: str | None = None,
    param: str | None = None,
) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def _image_parts(body: dict[str, Any]) -> list[tuple[int, int, str]]:
    """(message index, part index, url) of each ``image_url`` content part."""
    found: list[tuple[int, int, str]] = []
    for m, message in enumerate(body.get("messages") or []):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for p, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") == "image_url":
                image = part.get("image_url")
                url = image.get("url") if isinstance(image, dict) else image
                found.append((m, p, str(url or "")))
    return found


# An image part counts as much as OpenAI bills a 1024x1024 image at high detail.
IMAGE_TOKENS = 765
# Tokens added per message (role and separators) and once per request (the reply's
# priming), roughly as OpenAI's own counting guide has it.
MESSAGE_OVERHEAD_TOKENS = 3
REQUEST_OVERHEAD_TOKENS = 3
_encoding: Any = None
# bpe-openai refuses an input of more than 200,000 tokens; a character is at most 4.
_PIECE_CHARS = 50_000


def _load_encoding() -> Any:
    """The fake's own o200k tokenizer, built once per process (a few tenths of a second:
    `start` builds it in a thread, so it is not part of the first answer's latency)."""
    global _encoding
    if _encoding is None:
        # bpe_openai reads its tables with importlib.resources.open_binary, deprecated.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import bpe_openai

            _encoding = bpe_openai.get_encoding("o200k_base")
    return _encoding


def o200k_tokens(text: str) -> int:
    """Exact o200k tokens of `text`, as a real OpenAI model counts them (Baton estimates).
    Long texts are counted in pieces (a piece boundary costs at most a token or two)."""
    encoding = _load_encoding()
    return sum(
        len(encoding.encode_ordinary(text[start : start + _PIECE_CHARS]))
        for start in range(0, len(text), _PIECE_CHARS)
    )


def count_prompt_tokens(body: dict[str, Any]) -> int:
    """Count a chat request's tokens the way the fake enforces its context window.

    Every message's content (text parts of a list too, ``IMAGE_TOKENS`` an image part,
    whatever its data), name, and tool calls (name and arguments), plus
    ``MESSAGE_OVERHEAD_TOKENS`` a message, plus the tool schemas as JSON, plus
    ``REQUEST_OVERHEAD_TOKENS``.
    """
    total = REQUEST_OVERHEAD_TOKENS
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        total += MESSAGE_OVERHEAD_TOKENS
        content = message.get("content")
        if isinstance(content, str):
            total += o200k_tokens(content)
        elif isinstance(content, list):
            for part in content:
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "image_url":
                    total += IMAGE_TOKENS
                elif isinstance(part.get("text"), str):
                    total += o200k_tokens(part["text"])
        if isinstance(message.get("name"), str):
            total += o200k_tokens(message["name"])
        for call in message.get("tool_calls") or []:
            function = (call.get("function") or {}) if isinstance(call, dict) else {}
            total += o200k_tokens(str(function.get("name") or ""))
            total += o200k_tokens(str(function.get("arguments") or ""))
    if tools := body.get("tools"):
        total += o200k_tokens(json.dumps(tools))
    return total


class FakeOpenAI(FakeServer):
    """An in-process fake of the OpenAI Chat Completions API.

    Serves ``POST /v1/chat/completions`` (plain JSON or SSE streaming) and
    ``GET /v1/models`` on ``127.0.0.1`` with an ephemeral port.

    Attributes:
        context_window: When set, requests counted at more tokens than this are refused
            with OpenAI's HTTP 400 ``context_length_exceeded`` error.
        accepts_images: When False, requests with an image part are refused with the
            HTTP 400 OpenAI gives a text-only model (recorded, never scripted).
        requests: Every chat completion request received, in arrival order.
        unexpected: Requests that arrived when no scripted reply was left (answered 500).
        errors: Exceptions raised by ``responder`` (the request was answered 500).
        responder: When set, called with each request to produce the reply (sync or async);
            takes precedence over the scripted queue.
        in_flight: Chat requests being answered right now.
        max_in_flight: The most chat requests ever answered at once.
    """

    def __init__(
        self,
        *,
        chunk_size: int = 8,
        context_window: int | None = None,
        accepts_images: bool = True,
    ) -> None:
        """Create a stopped fake server.

        Args:
            chunk_size: Characters per streamed content / arguments chunk.
            context_window: Tokens a request may hold; unlimited when ``None``.
            accepts_images: Whether the model takes ``image_url`` content parts.
        """
        if chunk_size < 1:
            raise ValueError("chunk_size must be >= 1")
        self.chunk_size = chunk_size
        self.context_window = context_window
        self.accepts_images = accepts_images
        self.in_flight = 0
        self.max_in_flight = 0
        self._burst_state: dict[int, tuple[float, int]] = {}
        self.requests: list[RecordedRequest] = []
        # Baton asks a sub-agent that ended without `submit_result` once for its handoff.
        # Unless a test scripts that exchange (`declines_handoffs = False`), the fake
        # answers it alone, as a model that declines: with no text and no call. Those
        # requests are kept here, apart from `requests` and the script.
        self.declines_handoffs = True
        self.handoff_requests: list[RecordedRequest] = []
        self.unexpected: list[RecordedRequest] = []
        self.errors: list[BaseException] = []
        self.responder: Responder | None = None
        self._queue: deque[Scripted] = deque()
        self._models_seen: list[str] = []
        self._call_ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._stopping = asyncio.Event()
        self._url: str | None = None

    # ----------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Start listening on 127.0.0.1 with an ephemeral port."""
        if self._runner is not None:
            raise RuntimeError("FakeOpenAI already started")
        if _encoding is None:
            await asyncio.to_thread(_load_encoding)
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle_chat)
        app.router.add_get("/v1/models", self._handle_models)
        self._stopping = asyncio.Event()
        runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0
        )
        self._url = await listen_on_loopback(runner) + "/v1"
        self._runner = runner

    async def stop(self) -> None:
        """Stop the server; pending ``Hang`` / delayed replies are released at once."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        self._stopping.set()
        await runner.cleanup()

    @property
    def url(self) -> str:
        """Base URL ending in ``/v1``, suitable for ``AsyncOpenAI(base_url=...)``."""
        if self._url is None:
            raise RuntimeError("FakeOpenAI not started")
        return self._url

    # ----------------------------------------------------------------- scripting

    def script(self, *replies: Scripted) -> None:
        """Append replies to the FIFO queue used when no ``responder`` is set.

        Args:
            *replies: ``Reply``, ``ErrorReply``, ``Hang`` or ``ErrorBurst`` values,
                answered in order.
        """
        for reply in replies:
            if not isinstance(reply, Reply | ErrorReply | Hang | RawStream | ErrorBurst):
                raise TypeError(f"not a scripted reply: {reply!r}")
        self._queue.extend(replies)

    @property
    def remaining(self) -> int:
        """Number of scripted replies not consumed yet."""
        return len(self._queue)

    def assert_all_used(self) -> None:
        """Assert every scripted reply has been consumed.

        Raises:
            AssertionError: If scripted replies remain in the queue.
        """
        if self._queue:
            raise AssertionError(
                f"FakeOpenAI: {len(self._queue)} scripted repl(y/ies) not used: "
                f"{list(self._queue)!r} (requests received: {len(self.requests)})"
            )

    # ----------------------------------------------------------------- helpers

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but return early when the server is stopping."""
        if seconds <= 0 or self._stopping.is_set():
            return
        try:
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)
        except TimeoutError:
            pass

    async def _next_reply(self, recorded: RecordedRequest) -> ScriptedReply:
        if self.responder is not None:
            try:
                result = self.responder(recorded)
                if inspect.isawaitable(result):
                    result = await result
            except Exception as exc:
                self.errors.append(exc)
                return ErrorReply(status=500, message=f"FakeOpenAI: responder raised {exc!r}")
            if not isinstance(result, Reply | ErrorReply | Hang | RawStream):
                message = f"FakeOpenAI: responder returned {result!r}"
                self.errors.append(TypeError(message))
                return ErrorReply(status=500, message=message)
            return result
        while self._queue and isinstance(burst := self._queue[0], ErrorBurst):
            if (answer := self._burst_answer(burst)) is not None:
                return answer
            self._queue.popleft()
        if not self._queue:
            self.unexpected.append(recorded)
            return ErrorReply(status=500, message=NO_REPLY_MESSAGE)
        reply = self._queue.popleft()
        assert not isinstance(reply, ErrorBurst)
        return reply

    def _burst_answer(self, burst: ErrorBurst) -> ErrorReply | None:
        """The burst's error for one more request, or None once the burst is over."""
        now = time.monotonic()
        started, answered = self._burst_state.get(id(burst), (now, 0))
        if burst.count is not None and answered >= burst.count:
            return None
        if burst.duration is not None and now - started >= burst.duration:
            return None
        self._burst_state[id(burst)] = (started, answered + 1)
        return burst.error

    def _tool_call_ids(self, reply: Reply) -> list[str]:
        return [call.id or f"call_{next(self._call_ids)}" for call in reply.tool_calls]

    @staticmethod
    def _usage(reply: Reply, recorded: RecordedRequest) -> dict[str, int]:
        if reply.usage is not None:
            return reply.usage.to_json()
        completion_chars = len(reply.text) + sum(
            len(call.name) + len(call.arguments_json) for call in reply.tool_calls
        )
        return Usage(
            prompt_tokens=recorded.prompt_tokens, completion_tokens=completion_chars // 4 + 1
        ).to_json()

    # ----------------------------------------------------------------- handlers

    async def _handle_models(self, request: web.Request) -> web.Response:
        models = self._models_seen or [DEFAULT_MODEL]
        data = [
            {"id": model, "object": "model", "created": 0, "owned_by": "fake-openai"}
            for model in models
        ]
        return web.json_response({"object": "list", "data": data})

    async def _handle_chat(self, request: web.Request) -> web.StreamResponse:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._answer_chat(request)
        finally:
            self.in_flight -= 1

    async def _answer_chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return web.json_response(
                _error_body("FakeOpenAI: body is not valid JSON", "invalid_request_error"),
                status=400,
            )
        if not isinstance(body, dict):
            return web.json_response(
                _error_body("FakeOpenAI: body must be a JSON object", "invalid_request_error"),
                status=400,
            )
        recorded = RecordedRequest(
            body=body,
            headers={k.lower(): v for k, v in request.headers.items()},
            prompt_tokens=count_prompt_tokens(body),
        )
        if self.declines_handoffs and _asks_for_handoff(body):
            self.handoff_requests.append(recorded)
            return await self._reply(request, recorded, Reply(text=""))
        self.requests.append(recorded)
        model = recorded.model or DEFAULT_MODEL
        if model not in self._models_seen:
            self._models_seen.append(model)
        if self.context_window is not None and recorded.prompt_tokens > self.context_window:
            message = (
                f"This model's maximum context length is {self.context_window} tokens. "
                f"However, your messages resulted in {recorded.prompt_tokens} tokens. "
                "Please reduce the length of the messages."
            )
            body = _error_body(
                message, "invalid_request_error", code="context_length_exceeded", param="messages"
            )
            return web.json_response(body, status=400)
        if not self.accepts_images and (images := _image_parts(body)):
            message_index, part_index, _ = images[0]
            param = f"messages.[{message_index}].content.[{part_index}].type"
            body = _error_body(IMAGES_REFUSED_MESSAGE, "invalid_request_error", param=param)
            return web.json_response(body, status=400)

        return await self._reply(request, recorded, await self._next_reply(recorded))

    async def _reply(
        self, request: web.Request, recorded: RecordedRequest, reply: ScriptedReply
    ) -> web.StreamResponse:
        model = recorded.model or DEFAULT_MODEL
        if isinstance(reply, Hang):
            # Cancelled by aiohttp when the client disconnects; released by stop().
            await self._stopping.wait()
            return web.json_response(_error_body("FakeOpenAI: server stopping"), status=503)
        await self._sleep(reply.delay)
        if isinstance(reply, ErrorReply):
            return web.json_response(
                _error_body(reply.message, reply.error_type, code=reply.code),
                status=reply.status,
                headers=reply.headers(),
            )
        if isinstance(reply, RawStream):
            return await self._raw_stream(request, reply)
        if recorded.stream:
            return await self._stream(request, recorded, reply, model)
        return web.json_response(self._completion(recorded, reply, model))

    def _completion(self, recorded: RecordedRequest, reply: Reply, model: str) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": reply.text if (reply.text or not reply.tool_calls) else None,
            "refusal": None,
        }
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_json},
                }
                for call, call_id in zip(reply.tool_calls, self._tool_call_ids(reply), strict=True)
            ]
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "system_fingerprint": None,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": reply.effective_finish_reason,
                }
            ],
            "usage": self._usage(reply, recorded),
        }

    async def _raw_stream(self, request: web.Request, reply: RawStream) -> web.StreamResponse:
        response = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream; charset=utf-8"}
        )
        await response.prepare(request)
        for event in reply.events:
            data = event if isinstance(event, str) else json.dumps(event)
            await response.write(f"data: {data}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _stream(
        self, request: web.Request, recorded: RecordedRequest, reply: Reply, model: str
    ) -> web.StreamResponse:
        include_usage = recorded.include_usage
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            data: dict[str, Any] = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": None,
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
                ],
            }
            if include_usage:
                data["usage"] = None
            return data

        events: list[dict[str, Any]] = [chunk({"role": "assistant", "content": ""})]
        events += [chunk({"content": piece}) for piece in _chunks(reply.text, self.chunk_size)]
        for index, (call, call_id) in enumerate(
            zip(reply.tool_calls, self._tool_call_ids(reply), strict=True)
        ):
            first = {
                "index": index,
                "id": call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            events.append(chunk({"tool_calls": [first]}))
            events += [
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                for piece in _chunks(call.arguments_json, self.chunk_size)
            ]
        events.append(chunk({}, reply.effective_finish_reason))
        if include_usage:
            final = chunk({})
            final["choices"] = []
            final["usage"] = self._usage(reply, recorded)
            events.append(final)

        response = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
            },
        )
        await response.prepare(request)
        try:
            for position, event in enumerate(events):
                if position == reply.stall_after:
                    # Cancelled by aiohttp when the client disconnects; released by stop().
                    await self._stopping.wait()
                    return response
                if position == reply.drop_after:
                    # Mid-body, with no last chunk: the client sees the connection break.
                    if request.transport is not None:
                        request.transport.abort()
                    return response
                if position:
                    await self._sleep(reply.chunk_delay)
                await response.write(f"data: {json.dumps(event)}\n\n".encode())
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except ConnectionError:
            pass  # client went away mid-stream
        return response
