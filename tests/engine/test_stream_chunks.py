"""Streamed chunks as compatible servers really send them, over HTTP to the fake.

The request goes out through the openai client's `post` as the JSON Baton built, and
chunks are read into Baton's own lenient model: these are the shapes that must still
make an answer, and the ones that must not.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from bot.engine import ChatMessage, LLMClient, ModelWaiting
from bot.engine.llm import MAX_REPORTED_TOKENS, MAX_TOOL_CALLS, LLMResponse, TextChunk
from bot.errors import LLMError
from tests.fakes.openai_api import FakeOpenAI, RawStream, Reply

MESSAGES = [ChatMessage(role="user", content="hello")]
TOOL = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
    if delta is not None:
        choice["delta"] = delta
    return {"id": "c", "object": "chat.completion.chunk", "choices": [choice]}


def piece(**fields: Any) -> dict[str, Any]:
    """A chunk holding one tool-call piece."""
    return chunk({"tool_calls": [fields]})


@pytest.fixture
async def quick_llm(fake_llm: FakeOpenAI) -> AsyncIterator[LLMClient]:
    """An LLMClient whose backoffs pass at once, giving up after 2 s of retrying."""
    client = openai.AsyncOpenAI(api_key="sk-test", base_url=fake_llm.url, max_retries=0)

    async def sleep(_: float) -> None:
        await asyncio.sleep(0)

    yield LLMClient(client, sleep=sleep, retry_deadline_s=2.0)
    await client.close()


async def answer(llm: LLMClient, tools: list[dict[str, Any]] | None = None) -> LLMResponse:
    items = [i async for i in llm.stream(model="fake-model", messages=MESSAGES, tools=tools or [])]
    final = items[-1]
    assert isinstance(final, LLMResponse), items
    return final


async def test_the_request_is_the_json_baton_built(fake_llm: FakeOpenAI, llm: LLMClient) -> None:
    fake_llm.script(Reply(text="hi"))
    await answer(llm, [TOOL])
    body = fake_llm.requests[0].body
    assert body["messages"] == [{"role": "user", "content": "hello"}]
    assert body["tools"] == [TOOL]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["parallel_tool_calls"] is True
    assert fake_llm.requests[0].headers["authorization"] == "Bearer sk-test"


async def test_tool_call_pieces_without_an_index_still_make_separate_calls(
    fake_llm: FakeOpenAI, llm: LLMClient
) -> None:
    fake_llm.script(
        RawStream(
            events=[
                piece(id="a", function={"name": "read_file", "arguments": '{"pa'}),
                piece(function={"arguments": 'th": "x.py"}'}),
                piece(id="b", function={"name": "read_file", "arguments": '{"path": "y.py"}'}),
                chunk({}, "tool_calls"),
            ]
        )
    )
    response = await answer(llm)
    assert [(c.id, c.name, json.loads(c.arguments)) for c in response.tool_calls] == [
        ("a", "read_file", {"path": "x.py"}),
        ("b", "read_file", {"path": "y.py"}),
    ]


async def test_nulls_and_missing_fields_are_read_as_nothing(
    fake_llm: FakeOpenAI, llm: LLMClient
) -> None:
    fake_llm.script(
        RawStream(
            events=[
                {"choices": None, "usage": None},
                chunk(None),  # a choice without a delta
                chunk({"content": None, "tool_calls": None}),
                chunk({"content": "Hel", "role": "assistant", "refusal": None, "extra": [1]}),
                {**chunk({"content": "lo"}), "unknown_top_level": {"a": 1}},
                chunk({}, "stop"),
                {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}},
            ]
        )
    )
    response = await answer(llm)
    assert response.text == "Hello"
    assert response.finish_reason == "stop"
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (7, 2)


@pytest.mark.parametrize(
    "bad",
    [
        {"choices": "not a list"},
        {"choices": [{"delta": {"content": ["not", "text"]}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": "first"}]}}]},
        [1, 2, 3],
    ],
)
async def test_a_chunk_that_is_not_a_chunk_is_retried_then_reported(
    fake_llm: FakeOpenAI, quick_llm: LLMClient, bad: object
) -> None:
    fake_llm.responder = lambda _request: RawStream(events=[chunk({"content": "hi"}), bad])
    with pytest.raises(LLMError) as raised:
        async for item in quick_llm.stream(model="fake-model", messages=MESSAGES, tools=[]):
            assert not isinstance(item, LLMResponse)
            if isinstance(item, ModelWaiting):
                assert item.reason == "unreadable answer"
                assert item.discard_text  # "hi" came before the bad chunk
            else:
                assert isinstance(item, TextChunk)
    assert "not a Chat Completions chunk" in str(raised.value)
    assert len(fake_llm.requests) >= 2  # it was tried again


async def test_an_error_event_inside_the_stream_is_retried(
    fake_llm: FakeOpenAI, llm: LLMClient
) -> None:
    fake_llm.script(
        RawStream(events=[chunk({"content": "par"}), {"error": {"message": "overloaded"}}]),
        Reply(text="whole answer"),
    )
    items = [i async for i in llm.stream(model="fake-model", messages=MESSAGES, tools=[])]
    waits = [i for i in items if isinstance(i, ModelWaiting)]
    assert [w.reason for w in waits] == ["connection dropped"]
    final = items[-1]
    assert isinstance(final, LLMResponse)
    assert final.text == "whole answer"


async def test_pieces_repeating_their_calls_id_stay_one_call(
    fake_llm: FakeOpenAI, llm: LLMClient
) -> None:
    fake_llm.script(
        RawStream(
            events=[
                piece(id="a", function={"name": "read_file", "arguments": '{"path": '}),
                piece(id="a", function={"arguments": '"x.py"}'}),
                piece(id="b", function={"name": "read_file", "arguments": "{}"}),
                piece(id="b", function={"arguments": ""}),
                chunk({}, "tool_calls"),
            ]
        )
    )
    response = await answer(llm)
    assert [(c.id, c.arguments) for c in response.tool_calls] == [
        ("a", '{"path": "x.py"}'),
        ("b", "{}"),
    ]


async def test_an_answer_with_a_flood_of_tool_calls_is_refused_not_run(
    fake_llm: FakeOpenAI, llm: LLMClient
) -> None:
    flood = [piece(id=f"c{n}", function={"name": "read_file"}) for n in range(MAX_TOOL_CALLS + 1)]
    fake_llm.script(RawStream(events=[*flood, chunk({}, "tool_calls")]))
    with pytest.raises(LLMError, match=f"more than {MAX_TOOL_CALLS} tool calls"):
        await answer(llm)
    assert len(fake_llm.requests) == 1  # refused at once, not asked again


async def test_a_data_line_that_is_not_json_is_retried_then_reported(
    fake_llm: FakeOpenAI, quick_llm: LLMClient
) -> None:
    fake_llm.responder = lambda _request: RawStream(events=[chunk({"content": "hi"}), "{oops"])
    with pytest.raises(LLMError, match="not JSON"):
        await answer(quick_llm)
    assert len(fake_llm.requests) >= 2


async def test_reported_usage_is_kept_within_sense(fake_llm: FakeOpenAI, llm: LLMClient) -> None:
    """A hostile provider reporting negative tokens must not lower the metered spend."""
    fake_llm.script(
        RawStream(
            events=[
                chunk({"content": "ok"}, "stop"),
                {"choices": [], "usage": {"prompt_tokens": -500, "completion_tokens": 10**30}},
            ]
        )
    )
    response = await answer(llm)
    assert response.usage.prompt_tokens == 0
    assert response.usage.completion_tokens == MAX_REPORTED_TOKENS
