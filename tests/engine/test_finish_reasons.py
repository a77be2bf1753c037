"""Answers the provider ends early: cut at the output limit, or stopped by a filter.

A cut answer is continued where it stopped (a few times at most), then said to be
cut; a filtered one is said plainly. Neither is reported as done.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import openai
import pytest

from bot.engine import Done, Engine, LLMClient, RunEvent
from bot.engine.loop import CONTINUE_PROMPT, CUT_NOTE, FILTERED_NOTE, MAX_CONTINUATIONS
from bot.tools.base import ToolRegistry
from tests.fakes.openai_api import FakeOpenAI, Reply


@pytest.fixture
async def engine(fake_llm: FakeOpenAI) -> AsyncIterator[Engine]:
    client = openai.AsyncOpenAI(api_key="sk-test", base_url=fake_llm.url, max_retries=0)
    yield Engine(
        llm=LLMClient(client, retry_deadline_s=2), model="fake-model", tools=ToolRegistry()
    )
    await client.close()


async def done_of(engine: Engine) -> Done:
    events: list[RunEvent] = [e async for e in engine.run_stream("write the report")]
    done = events[-1]
    assert isinstance(done, Done)
    return done


async def test_a_cut_answer_is_continued_where_it_stopped(
    engine: Engine, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(
        Reply(text="The report, part one; ", finish_reason="length"),
        Reply(text="part two.", finish_reason="stop"),
    )
    done = await done_of(engine)
    assert done.stop_reason == "completed"
    assert done.final_text == "The report, part one; part two."
    second = fake_llm.requests[1].messages
    assert second[-2] == {"role": "assistant", "content": "The report, part one; "}
    assert second[-1]["role"] == "user" and second[-1]["content"] == CONTINUE_PROMPT


async def test_an_answer_cut_again_and_again_is_said_to_be_cut(
    engine: Engine, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(*(Reply(text=f"piece {n} ", finish_reason="length")
                      for n in range(MAX_CONTINUATIONS + 1)))  # fmt: skip
    done = await done_of(engine)
    assert done.stop_reason == "length"
    assert done.final_text == f"piece 0 piece 1 piece 2 \n\n{CUT_NOTE}"
    assert len(fake_llm.requests) == MAX_CONTINUATIONS + 1


async def test_a_filtered_answer_is_said_plainly(engine: Engine, fake_llm: FakeOpenAI) -> None:
    fake_llm.script(Reply(text="Here is how to", finish_reason="content_filter"))
    done = await done_of(engine)
    assert done.stop_reason == "content_filter"
    assert done.final_text == f"Here is how to\n\n{FILTERED_NOTE}"
    assert len(fake_llm.requests) == 1
