"""Tests for the fake OpenAI server, driven through the real ``openai.AsyncOpenAI`` client."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import pytest
from openai import AsyncOpenAI

from tests.fakes.openai_api import (
    IMAGE_TOKENS,
    IMAGES_REFUSED_MESSAGE,
    ErrorBurst,
    ErrorReply,
    FakeOpenAI,
    Hang,
    RecordedRequest,
    Reply,
    ToolCallSpec,
    Usage,
    count_prompt_tokens,
)

MODEL = "gpt-test"
MESSAGES: list[Any] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Say hello."},
]
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_dir",
            "description": "List a directory.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    },
]


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def client(fake: FakeOpenAI) -> AsyncIterator[AsyncOpenAI]:
    api = AsyncOpenAI(api_key="sk-test", base_url=fake.url, max_retries=0)
    try:
        yield api
    finally:
        await api.close()


async def collect_stream(client: AsyncOpenAI, **kwargs: Any) -> list[Any]:
    stream = await client.chat.completions.create(
        model=MODEL, messages=MESSAGES, stream=True, **kwargs
    )
    chunks = []
    async with stream:
        async for chunk in stream:
            chunks.append(chunk)
    return chunks


async def test_url_ends_with_v1(fake: FakeOpenAI) -> None:
    assert fake.url.startswith("http://127.0.0.1:")
    assert fake.url.endswith("/v1")


async def test_url_before_start_raises() -> None:
    with pytest.raises(RuntimeError):
        _ = FakeOpenAI().url


async def test_non_streaming_text(fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake.script(Reply(text="Hello there!"))

    completion = await client.chat.completions.create(model=MODEL, messages=MESSAGES)

    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert completion.model == MODEL
    assert completion.created > 0
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == "Hello there!"
    assert not choice.message.tool_calls
    assert choice.finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.prompt_tokens > 0
    assert completion.usage.completion_tokens == len("Hello there!") // 4 + 1
    assert completion.usage.total_tokens == (
        completion.usage.prompt_tokens + completion.usage.completion_tokens
    )


async def test_non_streaming_tool_calls_and_explicit_usage(
    fake: FakeOpenAI, client: AsyncOpenAI
) -> None:
    fake.script(
        Reply(
            tool_calls=[ToolCallSpec("read_file", {"path": "a.txt"}, id="call_abc")],
            usage=Usage(prompt_tokens=11, completion_tokens=7),
        )
    )

    completion = await client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS)

    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    assert choice.message.tool_calls is not None
    (call,) = choice.message.tool_calls
    assert call.id == "call_abc"
    assert call.type == "function"
    assert call.function.name == "read_file"
    assert json.loads(call.function.arguments) == {"path": "a.txt"}
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (11, 7)
    assert completion.usage.total_tokens == 18


async def test_unique_completion_ids(fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake.script(Reply(text="a"), Reply(text="b"))

    first = await client.chat.completions.create(model=MODEL, messages=MESSAGES)
    second = await client.chat.completions.create(model=MODEL, messages=MESSAGES)

    assert first.id != second.id


async def test_streaming_text_arrives_in_several_chunks(
    fake: FakeOpenAI, client: AsyncOpenAI
) -> None:
    text = "The quick brown fox jumps over the lazy dog, twice over."
    fake.script(Reply(text=text))

    chunks = await collect_stream(client)

    assert all(chunk.object == "chat.completion.chunk" for chunk in chunks)
    assert len({chunk.id for chunk in chunks}) == 1
    assert chunks[0].id.startswith("chatcmpl-")
    assert all(chunk.model == MODEL for chunk in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    pieces = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert len(pieces) > 1
    assert "".join(pieces) == text
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].usage is None  # include_usage was not requested
    assert fake.requests[0].stream is True


async def test_streaming_parallel_tool_calls_with_usage(
    fake: FakeOpenAI, client: AsyncOpenAI
) -> None:
    fake.script(
        Reply(
            text="Let me look.",
            tool_calls=[
                ToolCallSpec("read_file", {"path": "docs/very/long/path/README.md"}),
                ToolCallSpec("list_dir", {"path": "src/somewhere/deep"}, id="call_custom"),
            ],
        )
    )

    chunks = await collect_stream(client, tools=TOOLS, stream_options={"include_usage": True})

    text = ""
    calls: dict[int, dict[str, str]] = {}
    argument_chunks = 0
    finish_reasons = []
    for chunk in chunks[:-1]:
        (choice,) = chunk.choices
        if choice.finish_reason:
            finish_reasons.append(choice.finish_reason)
        text += choice.delta.content or ""
        for delta in choice.delta.tool_calls or []:
            call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            if delta.id:
                call["id"] = delta.id
            if delta.function and delta.function.name:
                call["name"] = delta.function.name
            if delta.function and delta.function.arguments:
                call["arguments"] += delta.function.arguments
                argument_chunks += 1

    assert text == "Let me look."
    assert finish_reasons == ["tool_calls"]
    assert set(calls) == {0, 1}
    assert calls[0]["name"] == "read_file"
    assert json.loads(calls[0]["arguments"]) == {"path": "docs/very/long/path/README.md"}
    assert calls[0]["id"].startswith("call_")
    assert calls[1] == {
        "id": "call_custom",
        "name": "list_dir",
        "arguments": json.dumps({"path": "src/somewhere/deep"}),
    }
    assert argument_chunks > 2  # arguments really are split over chunks

    usage_chunk = chunks[-1]
    assert usage_chunk.choices == []
    assert usage_chunk.usage is not None
    assert usage_chunk.usage.prompt_tokens > 0
    assert usage_chunk.usage.completion_tokens > 0
    assert fake.requests[0].tools == ["read_file", "list_dir"]


async def test_default_tool_call_ids_are_unique(fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake.script(
        Reply(tool_calls=[ToolCallSpec("read_file", {}), ToolCallSpec("read_file", {})]),
        Reply(tool_calls=[ToolCallSpec("read_file", {})]),
    )

    first = await client.chat.completions.create(model=MODEL, messages=MESSAGES)
    second = await client.chat.completions.create(model=MODEL, messages=MESSAGES)

    ids = [c.id for c in (first.choices[0].message.tool_calls or [])]
    ids += [c.id for c in (second.choices[0].message.tool_calls or [])]
    assert len(ids) == 3
    assert len(set(ids)) == 3
    assert all(i.startswith("call_") for i in ids)


async def test_malformed_arguments_pass_through_verbatim(
    fake: FakeOpenAI, client: AsyncOpenAI
) -> None:
    broken = '{"path": "a.txt", oops'
    fake.script(
        Reply(tool_calls=[ToolCallSpec("read_file", broken)]),
        Reply(tool_calls=[ToolCallSpec("read_file", broken)]),
    )

    completion = await client.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert completion.choices[0].message.tool_calls is not None
    assert completion.choices[0].message.tool_calls[0].function.arguments == broken

    chunks = await collect_stream(client)
    streamed = "".join(
        delta.function.arguments or ""
        for chunk in chunks
        for choice in chunk.choices
        for delta in choice.delta.tool_calls or []
        if delta.function
    )
    assert streamed == broken


async def test_error_reply_500_raises_internal_server_error(
    fake: FakeOpenAI, client: AsyncOpenAI
) -> None:
    fake.script(ErrorReply(status=500, message="boom"))

    with pytest.raises(openai.InternalServerError) as info:
        await client.chat.completions.create(model=MODEL, messages=MESSAGES)

    assert info.value.status_code == 500
    assert "boom" in info.value.message
    assert info.value.body == {
        "message": "boom",
        "type": "server_error",
        "param": None,
        "code": None,
    }


async def test_error_reply_429_raises_rate_limit_error(
    fake: FakeOpenAI, client: AsyncOpenAI
) -> None:
    fake.script(ErrorReply(status=429, message="slow down"), ErrorReply(status=429))

    with pytest.raises(openai.RateLimitError):
        await client.chat.completions.create(model=MODEL, messages=MESSAGES)
    with pytest.raises(openai.RateLimitError):
        await collect_stream(client)


async def test_hang_times_out_client(fake: FakeOpenAI) -> None:
    fake.script(Hang())
    api = AsyncOpenAI(api_key="sk-test", base_url=fake.url, max_retries=0, timeout=0.5)
    try:
        started = time.monotonic()
        with pytest.raises(openai.APITimeoutError):
            await api.chat.completions.create(model=MODEL, messages=MESSAGES)
        assert time.monotonic() - started < 5
    finally:
        await api.close()


async def test_hang_does_not_block_stop() -> None:
    fake = FakeOpenAI()
    await fake.start()
    fake.script(Hang())
    api = AsyncOpenAI(api_key="sk-test", base_url=fake.url, max_retries=0, timeout=30)
    try:
        task = asyncio.create_task(api.chat.completions.create(model=MODEL, messages=MESSAGES))
        for _ in range(200):
            if fake.requests:
                break
            await asyncio.sleep(0.01)
        assert fake.requests

        started = time.monotonic()
        await fake.stop()
        assert time.monotonic() - started < 2
        with pytest.raises(openai.APIError):
            await task
    finally:
        await api.close()


async def test_delay_is_applied(fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake.script(Reply(text="late", delay=0.3))

    started = time.monotonic()
    completion = await client.chat.completions.create(model=MODEL, messages=MESSAGES)

    assert time.monotonic() - started >= 0.25
    assert completion.choices[0].message.content == "late"


async def test_responder_sees_request_messages(fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    seen: list[RecordedRequest] = []

    def responder(request: RecordedRequest) -> Reply:
        seen.append(request)
        return Reply(text=f"echo: {request.messages[-1]['content']}")

    fake.responder = responder
    fake.script(Reply(text="queued, must not be used"))

    completion = await client.chat.completions.create(model=MODEL, messages=MESSAGES)

    assert completion.choices[0].message.content == "echo: Say hello."
    assert seen[0].messages == MESSAGES
    assert seen[0].model == MODEL
    assert fake.remaining == 1


async def test_async_responder(fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    async def responder(request: RecordedRequest) -> Reply | ErrorReply:
        await asyncio.sleep(0)
        if len(request.messages) > 2:
            return ErrorReply(status=503, message="too long")
        return Reply(text="ok")

    fake.responder = responder

    completion = await client.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert completion.choices[0].message.content == "ok"
    with pytest.raises(openai.InternalServerError):
        await client.chat.completions.create(
            model=MODEL, messages=[*MESSAGES, {"role": "user", "content": "more"}]
        )


async def test_responder_exception_is_recorded(fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    def responder(request: RecordedRequest) -> Reply:
        raise ValueError("bad responder")

    fake.responder = responder

    with pytest.raises(openai.InternalServerError):
        await client.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert isinstance(fake.errors[0], ValueError)


async def test_requests_are_recorded(fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake.script(Reply(text="one"), Reply(text="two"))

    await client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS)
    await collect_stream(client, stream_options={"include_usage": True})

    assert len(fake.requests) == 2
    first, second = fake.requests
    assert first.messages == MESSAGES
    assert first.model == MODEL
    assert first.tools == ["read_file", "list_dir"]
    assert first.stream is False
    assert first.body["model"] == MODEL
    assert first.headers["authorization"] == "Bearer sk-test"
    assert second.stream is True
    assert second.include_usage is True
    assert second.tools == []


async def test_no_scripted_reply_left(fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        await client.chat.completions.create(model=MODEL, messages=MESSAGES)

    assert "FakeOpenAI: no scripted reply left" in info.value.message
    assert fake.unexpected == fake.requests
    assert len(fake.unexpected) == 1


async def test_assert_all_used(fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake.script(Reply(text="one"), Reply(text="two"))
    await client.chat.completions.create(model=MODEL, messages=MESSAGES)

    with pytest.raises(AssertionError, match="1 scripted"):
        fake.assert_all_used()

    await client.chat.completions.create(model=MODEL, messages=MESSAGES)
    fake.assert_all_used()


async def test_script_rejects_non_replies(fake: FakeOpenAI) -> None:
    with pytest.raises(TypeError):
        fake.script("hello")  # type: ignore[arg-type]


async def test_models_endpoint(fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    models = [model.id async for model in client.models.list()]
    assert models == ["fake-model"]

    fake.script(Reply(text="hi"))
    await client.chat.completions.create(model=MODEL, messages=MESSAGES)

    models = [model.id async for model in client.models.list()]
    assert models == [MODEL]


async def test_raw_sse_format(fake: FakeOpenAI) -> None:
    fake.script(Reply(text="Hello, streaming world!"))
    body = {"model": MODEL, "messages": MESSAGES, "stream": True}

    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{fake.url}/chat/completions", json=body) as response,
    ):
        assert response.status == 200
        assert response.content_type == "text/event-stream"
        raw = await response.text()

    events = raw.split("\n\n")
    assert events[-1] == ""
    assert events[-2] == "data: [DONE]"
    assert all(event.startswith("data: ") for event in events[:-1])
    first = json.loads(events[0].removeprefix("data: "))
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    last = json.loads(events[-3].removeprefix("data: "))
    assert last["choices"][0]["delta"] == {}
    assert last["choices"][0]["finish_reason"] == "stop"


async def test_client_abandoning_stream_midway(fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake.script(Reply(text="x" * 400, chunk_delay=0.01), Reply(text="after"))

    stream = await client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
    async with stream:
        async for _chunk in stream:
            break

    completion = await client.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert completion.choices[0].message.content == "after"


# --------------------------------------------------------------------------- bad days


async def test_error_reply_carries_retry_after_and_code(
    fake: FakeOpenAI, client: AsyncOpenAI
) -> None:
    fake.script(
        ErrorReply(status=429, message="slow down", retry_after=2.5, retry_after_ms=2500),
        ErrorReply(status=503, retry_after="Wed, 21 Oct 2015 07:28:00 GMT", code="overloaded"),
    )

    with pytest.raises(openai.RateLimitError) as rate:
        await collect_stream(client)
    with pytest.raises(openai.InternalServerError) as server:
        await collect_stream(client)

    assert rate.value.response.headers["retry-after"] == "2.5"
    assert rate.value.response.headers["retry-after-ms"] == "2500"
    assert server.value.status_code == 503
    assert server.value.response.headers["retry-after"] == "Wed, 21 Oct 2015 07:28:00 GMT"
    assert isinstance(server.value.body, dict) and server.value.body["code"] == "overloaded"


async def test_error_burst_by_count_then_the_next_reply(
    fake: FakeOpenAI, client: AsyncOpenAI
) -> None:
    fake.script(
        ErrorBurst(error=ErrorReply(status=503, message="busy"), count=3), Reply(text="back")
    )

    for _ in range(3):
        with pytest.raises(openai.InternalServerError):
            await collect_stream(client)
    chunks = await collect_stream(client)

    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "back"
    assert len(fake.requests) == 4
    fake.assert_all_used()


async def test_error_burst_by_duration(fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake.script(ErrorBurst(duration=0.3), Reply(text="ok"))

    started = time.monotonic()
    refused = 0
    while True:
        try:
            await collect_stream(client)
        except openai.RateLimitError:
            refused += 1
            await asyncio.sleep(0.05)
            continue
        break

    assert refused >= 2
    assert time.monotonic() - started >= 0.3
    fake.assert_all_used()


def test_error_burst_needs_an_end() -> None:
    with pytest.raises(ValueError):
        ErrorBurst()


async def test_stall_after_sends_some_chunks_then_nothing(fake: FakeOpenAI) -> None:
    fake.script(Reply(text="abcdefghijklmnop", stall_after=2))
    api = AsyncOpenAI(api_key="sk-test", base_url=fake.url, max_retries=0, timeout=0.5)
    chunks: list[Any] = []
    try:
        stream = await api.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
        with pytest.raises(openai.APITimeoutError):
            async with stream:
                async for chunk in stream:
                    chunks.append(chunk)
    finally:
        await api.close()

    assert len(chunks) == 2
    assert chunks[1].choices[0].delta.content == "abcdefgh"


async def test_drop_after_breaks_the_connection_mid_stream(
    fake: FakeOpenAI, client: AsyncOpenAI
) -> None:
    fake.script(Reply(text="abcdefghijklmnop", drop_after=2), Reply(text="fine"))
    chunks: list[Any] = []

    stream = await client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
    with pytest.raises(openai.APIConnectionError):
        async with stream:
            async for chunk in stream:
                chunks.append(chunk)

    assert len(chunks) == 2
    # The server goes on answering other requests.
    assert len(await collect_stream(client)) > 1


async def test_in_flight_is_counted(fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake.script(*(Reply(text="x", delay=0.2) for _ in range(3)))

    await asyncio.gather(*(collect_stream(client) for _ in range(3)))

    assert fake.max_in_flight == 3
    assert fake.in_flight == 0


def test_count_prompt_tokens_counts_messages_tool_calls_and_tools() -> None:
    base = count_prompt_tokens({"messages": [{"role": "user", "content": "hello world"}]})
    # hello world is two o200k tokens; three for the message, three for the request.
    assert base == 2 + 3 + 3
    with_call = count_prompt_tokens(
        {
            "messages": [
                {"role": "user", "content": "hello world"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c1", "function": {"name": "ls", "arguments": '{"path": "."}'}}
                    ],
                },
            ]
        }
    )
    assert with_call > base + 3
    with_tools = count_prompt_tokens(
        {"messages": [{"role": "user", "content": "hello world"}], "tools": TOOLS}
    )
    assert with_tools > base + 20
    parts = count_prompt_tokens(
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "hello world"}]}]}
    )
    assert parts == base


async def test_usage_reports_the_counted_prompt_tokens(
    fake: FakeOpenAI, client: AsyncOpenAI
) -> None:
    fake.script(Reply(text="hi"))

    chunks = await collect_stream(client, tools=TOOLS, stream_options={"include_usage": True})

    counted = fake.requests[0].prompt_tokens
    assert counted == count_prompt_tokens(fake.requests[0].body) > 0
    assert chunks[-1].usage.prompt_tokens == counted


async def test_context_window_refuses_long_requests_like_openai() -> None:
    async with FakeOpenAI(context_window=50) as fake:
        fake.script(Reply(text="short is fine"))
        api = AsyncOpenAI(api_key="sk-test", base_url=fake.url, max_retries=0)
        try:
            await collect_stream(api)
            long = [{"role": "user", "content": "word " * 200}]
            with pytest.raises(openai.BadRequestError) as info:
                await api.chat.completions.create(model=MODEL, messages=long, stream=True)
        finally:
            await api.close()

    counted = fake.requests[1].prompt_tokens
    assert counted > 200
    assert info.value.status_code == 400
    assert info.value.body == {
        "message": f"This model's maximum context length is 50 tokens. However, your "
        f"messages resulted in {counted} tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
    fake.assert_all_used()


PNG_URL = "data:image/png;base64,iVBORw0KGgo="
WITH_IMAGE: list[Any] = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "hello world"},
            {"type": "image_url", "image_url": {"url": PNG_URL}},
        ],
    }
]


def test_an_image_part_counts_a_fixed_amount_whatever_its_data() -> None:
    base = count_prompt_tokens({"messages": [{"role": "user", "content": "hello world"}]})
    assert count_prompt_tokens({"messages": WITH_IMAGE}) == base + IMAGE_TOKENS
    huge = json.loads(json.dumps(WITH_IMAGE))
    huge[0]["content"][1]["image_url"]["url"] = "data:image/png;base64," + "A" * 1_000_000
    assert count_prompt_tokens({"messages": huge}) == base + IMAGE_TOKENS


async def test_image_parts_are_accepted_and_recorded(fake: FakeOpenAI, client: AsyncOpenAI) -> None:
    fake.script(Reply(text="a picture"))

    stream = await client.chat.completions.create(model=MODEL, messages=WITH_IMAGE, stream=True)
    async with stream:
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    assert text == "a picture"
    assert fake.requests[0].image_urls == [PNG_URL]
    assert fake.requests[0].messages[0]["content"][0] == {"type": "text", "text": "hello world"}


async def test_a_text_only_model_refuses_images_like_openai() -> None:
    async with FakeOpenAI(accepts_images=False) as fake:
        fake.script(Reply(text="text is fine"))
        api = AsyncOpenAI(api_key="sk-test", base_url=fake.url, max_retries=0)
        try:
            with pytest.raises(openai.BadRequestError) as info:
                await api.chat.completions.create(model=MODEL, messages=WITH_IMAGE, stream=True)
            await collect_stream(api)
        finally:
            await api.close()

    assert info.value.status_code == 400
    assert info.value.body == {
        "message": IMAGES_REFUSED_MESSAGE,
        "type": "invalid_request_error",
        "param": "messages.[0].content.[1].type",
        "code": None,
    }
    assert len(fake.requests) == 2 and fake.requests[0].image_urls == [PNG_URL]
    fake.assert_all_used()  # the refused request took no scripted reply
