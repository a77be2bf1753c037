"""A hostile provider, an injected model and a curious user against request fitting and
compaction: the real engine and openai client over HTTP to the fake."""

from __future__ import annotations

from collections.abc import AsyncIterator

import openai
import pytest

from bot.engine import ChatMessage, Done, Engine, LLMClient, RunEvent
from bot.tools.base import ToolRegistry
from tests.fakes.openai_api import ErrorReply, FakeOpenAI, Reply


@pytest.fixture
async def client(fake_llm: FakeOpenAI) -> AsyncIterator[openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(api_key="sk-test", base_url=fake_llm.url, max_retries=0)
    yield client
    await client.close()


def history(turns: int) -> list[ChatMessage]:
    messages: list[ChatMessage] = []
    for n in range(turns):
        messages.append(ChatMessage(role="user", content=f"question {n}: " + "words " * 40))
        messages.append(ChatMessage(role="assistant", content=f"answer {n}: " + "more " * 40))
    return messages


async def run(engine: Engine, prompt: str, past: list[ChatMessage]) -> list[RunEvent]:
    return [e async for e in engine.run_stream(prompt, history=past)]


@pytest.mark.parametrize(
    "stated",
    ["128k", "128,000", "128 000", "10"],
)
async def test_a_stated_window_is_read_whole_and_a_tiny_one_is_not_believed(
    client: openai.AsyncOpenAI, fake_llm: FakeOpenAI, stated: str
) -> None:
    """'maximum context length is 128k' once read as 128 tokens: every later request of
    the model was cut to the 256-token floor, for the life of the process."""
    message = (
        f"This model's maximum context length is {stated} tokens. However, your messages "
        "resulted in 200000 tokens. Please reduce the length of the messages."
    )
    refusal = ErrorReply(
        status=400, message=message, code="context_length_exceeded", error_type="invalid"
    )
    fake_llm.script(refusal, Reply(text="ok"), Reply(text="ok again"))
    engine = Engine(
        llm=LLMClient(client, retry_deadline_s=2),
        model="fake-model",
        tools=ToolRegistry(),
        context_window=100_000,
    )
    past = history(20)  # about 2,000 tokens
    await run(engine, "first", past)
    events = await run(engine, "second", past)
    done = events[-1]
    assert isinstance(done, Done) and done.final_text == "ok again"
    last = fake_llm.requests[-1]
    assert len(last.messages) == len(past) + 1
    assert last.prompt_tokens > 1_500
