"""Bad provider days: retries, stalls and the concurrency cap, over HTTP to the fake."""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from bot.describe import describe_event
from bot.engine import (
    ChatMessage,
    Done,
    Engine,
    ErrorEvent,
    LLMClient,
    ModelWaiting,
    RunEvent,
    TextDelta,
    ToolResult,
)
from bot.engine.llm import LLMResponse, TextChunk
from bot.errors import ContextLengthError, LLMError
from bot.tools.base import Tool, ToolArguments, ToolRegistry
from tests.fakes.openai_api import (
    ErrorBurst,
    ErrorReply,
    FakeOpenAI,
    Hang,
    RecordedRequest,
    Reply,
    ScriptedReply,
    ToolCallSpec,
)

MESSAGES = [ChatMessage(role="user", content="hello")]


class StepArguments(ToolArguments):
    pass


class StepTool(Tool):
    """A real tool that counts how often it ran."""

    name = "step"
    description = "Do one step of the work."
    arguments = StepArguments
    read_only = True

    def __init__(self) -> None:
        self.runs = 0

    async def run(self, args: Any) -> str:
        self.runs += 1
        return f"step done ({self.runs})"


class FakeTime:
    """An injected clock and sleep: long backoffs pass at once."""

    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


@pytest.fixture
async def openai_client(fake_llm: FakeOpenAI) -> AsyncIterator[openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(api_key="sk-test", base_url=fake_llm.url, max_retries=0)
    yield client
    await client.close()


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


def timed_llm(client: openai.AsyncOpenAI, fake_time: FakeTime, **kwargs: Any) -> LLMClient:
    return LLMClient(client, sleep=fake_time.sleep, clock=fake_time.clock, **kwargs)


async def call(llm: LLMClient) -> list[TextChunk | ModelWaiting | LLMResponse]:
    return [item async for item in llm.stream(model="fake-model", messages=MESSAGES, tools=())]


def waits_of(items: list[Any]) -> list[ModelWaiting]:
    return [item for item in items if isinstance(item, ModelWaiting)]


def response_of(items: list[Any]) -> LLMResponse:
    assert isinstance(items[-1], LLMResponse), items[-1]
    return items[-1]


async def run(engine: Engine, transcript: list[ChatMessage] | None = None) -> list[RunEvent]:
    return [event async for event in engine.run_stream("do the work", transcript=transcript)]


def step_then(*replies: ScriptedReply | ErrorBurst) -> tuple[Any, ...]:
    return (Reply(tool_calls=[ToolCallSpec("step", {})]), *replies)


# --------------------------------------------------------------------------- runs survive


async def test_a_real_429_burst_is_waited_out_without_redoing_a_tool_step(
    fake_llm: FakeOpenAI, openai_client: openai.AsyncOpenAI
) -> None:
    step = StepTool()
    rate_limited = ErrorReply(status=429, message="Rate limit reached", retry_after=0.2)
    fake_llm.script(*step_then(ErrorBurst(error=rate_limited, duration=1.5), Reply(text="done")))
    engine = Engine(
        llm=LLMClient(openai_client, retry_deadline_s=10),
        model="fake-model",
        tools=ToolRegistry([step]),
    )

    started = time.monotonic()
    events = await run(engine)

    assert time.monotonic() - started >= 1.5
    assert step.runs == 1
    done = events[-1]
    assert isinstance(done, Done) and done.stop_reason == "completed"
    assert done.final_text == "done"
    waiting = [e for e in events if isinstance(e, ModelWaiting)]
    assert len(waiting) >= 3
    assert [w.attempt for w in waiting] == list(range(1, len(waiting) + 1))
    assert all(w.reason == "rate limited" and 0.2 <= w.wait_s <= 0.3 for w in waiting)
    # The waits come between the tool step and the answer, as events of the run.
    first_wait = events.index(waiting[0])
    assert any(isinstance(e, ToolResult) for e in events[:first_wait])
    assert not any(isinstance(e, ErrorEvent) for e in events)
    fake_llm.assert_all_used()


async def test_a_ten_second_burst_is_survived(
    fake_llm: FakeOpenAI, openai_client: openai.AsyncOpenAI, fake_time: FakeTime
) -> None:
    step = StepTool()
    rate_limited = ErrorReply(status=429, message="Rate limit reached", retry_after=1)
    fake_llm.script(*step_then(ErrorBurst(error=rate_limited, count=10), Reply(text="done")))
    engine = Engine(
        llm=timed_llm(openai_client, fake_time), model="fake-model", tools=ToolRegistry([step])
    )

    events = await run(engine)

    done = events[-1]
    assert isinstance(done, Done) and done.stop_reason == "completed"
    assert step.runs == 1
    assert len(fake_time.waits) == 10
    assert 10 <= fake_time.now <= 11
    # One tool step, ten refused calls, one answer: the step's call was not repeated.
    assert len(fake_llm.requests) == 12


async def test_backoff_grows_without_retry_after(
    fake_llm: FakeOpenAI, openai_client: openai.AsyncOpenAI, fake_time: FakeTime
) -> None:
    fake_llm.script(ErrorBurst(error=ErrorReply(status=503), count=5), Reply(text="ok"))

    items = await call(timed_llm(openai_client, fake_time))

    assert response_of(items).text == "ok"
    for retry, wait in enumerate(fake_time.waits, start=1):
        ceiling = min(30.0, 2.0 ** (retry - 1))
        assert ceiling / 2 <= wait <= ceiling
    assert [w.reason for w in waits_of(items)] == ["server error 503"] * 5


@pytest.mark.parametrize("status", [500, 502, 503, 504, 529, 408, 409])
async def test_passing_statuses_are_retried(
    fake_llm: FakeOpenAI, openai_client: openai.AsyncOpenAI, fake_time: FakeTime, status: int
) -> None:
    fake_llm.script(ErrorReply(status=status, message="try later"), Reply(text="ok"))

    items = await call(timed_llm(openai_client, fake_time))

    assert response_of(items).text == "ok"
    [waiting] = waits_of(items)
    expected = {408: "timed out", 409: "conflict, HTTP 409"}.get(status, f"server error {status}")
    assert (waiting.reason, waiting.attempt, waiting.discard_text) == (expected, 1, False)


# --------------------------------------------------------------------------- Retry-After


@pytest.mark.parametrize(
    ("error", "low", "high"),
    [
        (ErrorReply(status=429, retry_after=7), 7.0, 7.7),
        (ErrorReply(status=429, retry_after_ms=2500), 2.5, 2.75),
        (ErrorReply(status=503, retry_after=0), 0.0, 0.0),
    ],
)
async def test_retry_after_is_honoured(
    fake_llm: FakeOpenAI,
    openai_client: openai.AsyncOpenAI,
    fake_time: FakeTime,
    error: ErrorReply,
    low: float,
    high: float,
) -> None:
    fake_llm.script(error, Reply(text="ok"))

    items = await call(timed_llm(openai_client, fake_time))

    assert response_of(items).text == "ok"
    assert low <= fake_time.waits[0] <= high
    assert waits_of(items)[0].wait_s == fake_time.waits[0]


async def test_retry_after_as_an_http_date(
    fake_llm: FakeOpenAI, openai_client: openai.AsyncOpenAI, fake_time: FakeTime
) -> None:
    when = email.utils.formatdate(time.time() + 20, usegmt=True)
    fake_llm.script(ErrorReply(status=429, retry_after=when), Reply(text="ok"))

    await call(timed_llm(openai_client, fake_time))

    assert 18 <= fake_time.waits[0] <= 23


# --------------------------------------------------------------------------- giving up


async def test_the_deadline_ends_the_run_with_its_partial_work(
    fake_llm: FakeOpenAI, openai_client: openai.AsyncOpenAI, fake_time: FakeTime
) -> None:
    step = StepTool()
    overloaded = ErrorReply(status=503, message="overloaded")
    fake_llm.script(*step_then(ErrorBurst(error=overloaded, count=1000)))
    engine = Engine(
        llm=timed_llm(openai_client, fake_time, retry_deadline_s=20),
        model="fake-model",
        tools=ToolRegistry([step]),
    )
    transcript: list[ChatMessage] = []

    events = await run(engine, transcript)

    assert fake_time.now <= 20
    [error] = [e for e in events if isinstance(e, ErrorEvent)]
    assert "HTTP 503: overloaded" in error.message
    assert "gave up after" in error.message and "server error 503" in error.message
    done = events[-1]
    assert isinstance(done, Done) and done.stop_reason == "error"
    # The finished step stays done: it ran once and its result is in the transcript.
    assert step.runs == 1
    assert [m.role for m in transcript] == ["user", "assistant", "tool"]
    assert transcript[-1].content == "step done (1)"


async def test_giving_up_says_what_kept_failing_first_and_last(
    fake_llm: FakeOpenAI, openai_client: openai.AsyncOpenAI, fake_time: FakeTime
) -> None:
    fake_llm.script(
        ErrorReply(status=429, message="slow down"),
        ErrorBurst(error=ErrorReply(status=503, message="overloaded"), count=1000),
    )

    with pytest.raises(LLMError) as info:
        await call(timed_llm(openai_client, fake_time, retry_deadline_s=10))

    message = str(info.value)
    assert message.startswith("the model provider answered HTTP 429: slow down — gave up after")
    assert "(rate limited, server error 503); last: " in message
    assert message.endswith("the model provider answered HTTP 503: overloaded")


async def test_a_wait_past_the_deadline_is_not_begun(
    fake_llm: FakeOpenAI, openai_client: openai.AsyncOpenAI, fake_time: FakeTime
) -> None:
    fake_llm.script(ErrorReply(status=429, message="slow down", retry_after=600))

    with pytest.raises(LLMError, match="rate limited"):
        await call(timed_llm(openai_client, fake_time, retry_deadline_s=120))

    assert fake_time.waits == []
    assert len(fake_llm.requests) == 1


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_client_errors_are_not_retried(
    fake_llm: FakeOpenAI, openai_client: openai.AsyncOpenAI, fake_time: FakeTime, status: int
) -> None:
    fake_llm.script(ErrorReply(status=status, message="you asked wrong"))

    with pytest.raises(LLMError, match=f"HTTP {status}: you asked wrong") as info:
        await call(timed_llm(openai_client, fake_time))

    assert not isinstance(info.value, ContextLengthError)
    assert len(fake_llm.requests) == 1
    assert fake_time.waits == []


async def test_context_length_is_recognisable(fake_time: FakeTime) -> None:
    async with FakeOpenAI(context_window=5) as fake:
        client = openai.AsyncOpenAI(api_key="sk-test", base_url=fake.url, max_retries=0)
        try:
            with pytest.raises(ContextLengthError) as info:
                await call(timed_llm(client, fake_time))
        finally:
            await client.close()

    assert info.value.limit == 5
    assert info.value.tokens == fake.requests[0].prompt_tokens
    assert "maximum context length is 5 tokens" in str(info.value)
    assert len(fake.requests) == 1


async def test_context_length_is_recognised_by_its_message_too(
    fake_llm: FakeOpenAI, openai_client: openai.AsyncOpenAI, fake_time: FakeTime
) -> None:
    fake_llm.script(
        ErrorReply(
            status=400,
            message="This model's maximum context length is 8192 tokens. However, you "
            "requested 9000 tokens (8000 in the messages, 1000 in the completion).",
            error_type="invalid_request_error",
        )
    )

    with pytest.raises(ContextLengthError) as info:
        await call(timed_llm(openai_client, fake_time))

    assert (info.value.limit, info.value.tokens) == (8192, 9000)


async def test_an_unreachable_provider_gives_up_at_the_deadline(fake_time: FakeTime) -> None:
    client = openai.AsyncOpenAI(api_key="sk-test", base_url="http://127.0.0.1:9/v1", max_retries=0)
    try:
        with pytest.raises(LLMError, match="could not reach the model provider"):
            await call(timed_llm(client, fake_time, retry_deadline_s=5))
    finally:
        await client.close()
    assert fake_time.waits and fake_time.now <= 5


# --------------------------------------------------------------------------- broken streams


async def test_a_stalled_stream_is_abandoned_and_retried(
    fake_llm: FakeOpenAI, openai_client: openai.AsyncOpenAI
) -> None:
    fake_llm.script(
        Reply(text="the first answer, which stalls", stall_after=2), Reply(text="again")
    )

    started = time.monotonic()
    items = await call(LLMClient(openai_client, stall_timeout_s=0.3, retry_deadline_s=10))

    assert 0.3 <= time.monotonic() - started < 5
    [waiting] = waits_of(items)
    assert waiting.reason == "no answer for 0.3 s"
    assert waiting.discard_text is True
    before = items.index(waiting)
    assert [i.text for i in items[:before] if isinstance(i, TextChunk)] == ["the firs"]
    assert response_of(items).text == "again"
    assert "".join(i.text for i in items[before:] if isinstance(i, TextChunk)) == "again"


async def test_no_answer_at_all_is_a_stall_too(
    fake_llm: FakeOpenAI, openai_client: openai.AsyncOpenAI
) -> None:
    fake_llm.script(Hang(), Reply(text="here"))

    items = await call(LLMClient(openai_client, stall_timeout_s=0.3, retry_deadline_s=10))

    [waiting] = waits_of(items)
    assert (waiting.reason, waiting.discard_text) == ("no answer for 0.3 s", False)
    assert response_of(items).text == "here"


async def test_a_dropped_stream_is_retried_discarding_its_text(
    fake_llm: FakeOpenAI, openai_client: openai.AsyncOpenAI, fake_time: FakeTime
) -> None:
    fake_llm.script(Reply(text="half an answer and then", drop_after=3), Reply(text="whole"))

    items = await call(timed_llm(openai_client, fake_time))

    [waiting] = waits_of(items)
    assert (waiting.reason, waiting.attempt, waiting.discard_text) == (
        "connection dropped",
        1,
        True,
    )
    assert response_of(items).text == "whole"


async def test_a_dropped_stream_in_a_run_shows_as_a_discarding_wait(
    fake_llm: FakeOpenAI, openai_client: openai.AsyncOpenAI
) -> None:
    fake_llm.script(Reply(text="half an answer and then", drop_after=3), Reply(text="whole"))
    engine = Engine(
        llm=LLMClient(openai_client, retry_deadline_s=10), model="fake-model", tools=ToolRegistry()
    )

    events = await run(engine)

    kinds = [type(e).__name__ for e in events]
    assert kinds[:3] == ["TextDelta", "TextDelta", "ModelWaiting"]
    waiting = events[2]
    assert isinstance(waiting, ModelWaiting) and waiting.discard_text
    after = "".join(e.text for e in events[3:] if isinstance(e, TextDelta))
    assert after == "whole"
    done = events[-1]
    assert isinstance(done, Done) and done.final_text == "whole"


# --------------------------------------------------------------------------- concurrency


async def test_the_concurrency_cap_holds(
    fake_llm: FakeOpenAI, openai_client: openai.AsyncOpenAI
) -> None:
    cap = 3
    fake_llm.script(*(Reply(text="ok", delay=0.2) for _ in range(cap + 5)))
    llm = LLMClient(openai_client, max_concurrent=cap)

    results = await asyncio.gather(*(call(llm) for _ in range(cap + 5)))

    assert all(response_of(items).text == "ok" for items in results)
    assert fake_llm.max_in_flight == cap
    fake_llm.assert_all_used()


async def test_a_call_waiting_out_a_backoff_holds_no_place(
    fake_llm: FakeOpenAI, openai_client: openai.AsyncOpenAI
) -> None:
    finished: list[str] = []
    refused: set[str] = set()

    def respond(request: RecordedRequest) -> ScriptedReply:
        who = request.messages[-1]["content"]
        if who == "slow" and who not in refused:
            refused.add(who)
            return ErrorReply(status=429, retry_after=0.5)
        return Reply(text=who)

    fake_llm.responder = respond
    llm = LLMClient(openai_client, max_concurrent=1, retry_deadline_s=10)

    async def ask(who: str) -> None:
        messages = [ChatMessage(role="user", content=who)]
        async for item in llm.stream(model="fake-model", messages=messages, tools=()):
            if isinstance(item, LLMResponse):
                finished.append(item.text)

    slow = asyncio.create_task(ask("slow"))
    await asyncio.sleep(0.1)  # slow is refused and backs off
    await ask("quick")
    await slow

    assert finished == ["quick", "slow"]


# --------------------------------------------------------------------------- sub-agent log


def test_a_wait_is_one_line_in_a_sub_agent_log() -> None:
    line = describe_event(ModelWaiting(reason="rate limited", attempt=2, wait_s=1.5))
    assert line == "… waiting for the model (rate limited, retry 2)"
