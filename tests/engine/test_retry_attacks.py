"""A hostile provider against the retry layer and the loop, over real HTTP.

Streams the fake cannot script (a clean end with no finish, a trickle that never
ends) come from a small SSE server of this file's own.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import openai
import pytest
from aiohttp import web

from bot.engine import ChatMessage, Done, Engine, ErrorEvent, LLMClient, RunEvent
from bot.errors import LLMError
from bot.tools.base import Tool, ToolArguments, ToolRegistry
from tests.fakes.openai_api import ErrorBurst, ErrorReply, FakeOpenAI, Reply

MESSAGES = [ChatMessage(role="user", content="hello")]


class StepArguments(ToolArguments):
    path: str


class StepTool(Tool):
    name = "step"
    description = "Do one step of the work."
    arguments = StepArguments
    read_only = True

    def __init__(self) -> None:
        self.runs: list[str] = []

    async def run(self, args: Any) -> str:
        self.runs.append(args.path)
        return f"step done on {args.path}"


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-x",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def call_chunks(arguments: str) -> list[dict[str, Any]]:
    first = {"index": 0, "id": "call_1", "type": "function",
             "function": {"name": "step", "arguments": ""}}  # fmt: skip
    return [
        chunk({"role": "assistant", "content": None}),
        chunk({"tool_calls": [first]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}),
    ]


Stream = Callable[[web.StreamResponse], Any]


class RawSSE:
    """Answers each chat request with the next scripted coroutine writing raw SSE."""

    def __init__(self) -> None:
        self.scripts: list[Stream] = []
        self.requests: list[dict[str, Any]] = []
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(await request.json())
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await self.scripts.pop(0)(response)
        return response

    async def __aenter__(self) -> RawSSE:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handle)
        self.runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        host, port = self.runner.addresses[0][:2]
        self.url = f"http://{host}:{port}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


async def send(response: web.StreamResponse, events: list[dict[str, Any]], done: bool) -> None:
    for event in events:
        await response.write(f"data: {json.dumps(event)}\n\n".encode())
    if done:
        await response.write(b"data: [DONE]\n\n")
    await response.write_eof()


@pytest.fixture
async def raw() -> AsyncIterator[RawSSE]:
    async with RawSSE() as server:
        yield server


def client_of(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key="sk-test", base_url=url, max_retries=0)


async def events_of(engine: Engine) -> list[RunEvent]:
    return [e async for e in engine.run_stream("do the work")]


async def test_a_stream_that_ends_cleanly_mid_tool_call_runs_nothing(raw: RawSSE) -> None:
    """No finish_reason and no [DONE]: the answer is incomplete, not a call to run."""
    step = StepTool()

    async def cut_short(response: web.StreamResponse) -> None:
        await send(response, call_chunks('{"path": "a"}'), done=False)

    async def whole(response: web.StreamResponse) -> None:
        events = [*call_chunks('{"path": "b"}'), chunk({}, "tool_calls")]
        await send(response, events, done=True)

    async def answer(response: web.StreamResponse) -> None:
        await send(response, [chunk({"content": "done"}), chunk({}, "stop")], done=True)

    raw.scripts += [cut_short, whole, answer]
    client = client_of(raw.url)
    engine = Engine(
        llm=LLMClient(client, retry_deadline_s=5), model="fake-model", tools=ToolRegistry([step])
    )
    events = await events_of(engine)
    await client.close()
    assert step.runs == ["b"]
    done = events[-1]
    assert isinstance(done, Done) and done.final_text == "done"


async def test_a_stream_that_trickles_forever_is_bounded(raw: RawSSE) -> None:
    """A chunk every 50 ms never stalls, but the answer as a whole has a time limit."""

    async def trickle(response: web.StreamResponse) -> None:
        await response.write(f"data: {json.dumps(chunk({'role': 'assistant'}))}\n\n".encode())
        while True:
            await asyncio.sleep(0.05)
            await response.write(f"data: {json.dumps(chunk({'content': 'la '}))}\n\n".encode())

    raw.scripts += [trickle]
    client = client_of(raw.url)
    llm = LLMClient(client, retry_deadline_s=0.5, stall_timeout_s=0.3, answer_timeout_s=1.0)
    engine = Engine(llm=llm, model="fake-model", tools=ToolRegistry())
    started = time.monotonic()
    events = await asyncio.wait_for(events_of(engine), timeout=10)
    await client.close()
    assert time.monotonic() - started < 3
    [error] = [e for e in events if isinstance(e, ErrorEvent)]
    assert "took longer than 1 s" in error.message
    done = events[-1]
    assert isinstance(done, Done) and done.stop_reason == "error"


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


@pytest.mark.parametrize(
    "error",
    [
        ErrorReply(status=429, retry_after=0),
        ErrorReply(status=429, retry_after=-30),
        ErrorReply(status=429, retry_after="nan"),
        ErrorReply(status=503, retry_after="Wed, 21 Oct 2015 07:28:00 GMT"),
        ErrorReply(status=429, retry_after_ms=0),
    ],
)
async def test_a_retry_after_of_now_forever_does_not_hammer_the_provider(
    fake_llm: FakeOpenAI, error: ErrorReply
) -> None:
    """'Retry now' is taken once; after that the wait grows as without a Retry-After."""
    fake_llm.script(ErrorBurst(error=error, count=500), Reply(text="ok"))
    client = client_of(fake_llm.url)
    fake_time = FakeTime()
    llm = LLMClient(client, sleep=fake_time.sleep, clock=fake_time.clock, retry_deadline_s=60)
    with pytest.raises(LLMError, match="gave up after"):
        async for _ in llm.stream(model="fake-model", messages=MESSAGES, tools=()):
            pass
    await client.close()
    assert len(fake_llm.requests) < 15
    assert fake_time.waits[1:] and all(wait >= 0.5 for wait in fake_time.waits[1:])
