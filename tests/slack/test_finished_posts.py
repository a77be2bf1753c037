"""Results of background tasks that end together go to their thread in one message."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.slack.blocks import task_finished_message
from bot.slack.rate_budget import RateBudget
from bot.slack.text import MARKDOWN_BLOCKS_LIMIT, MESSAGE_BLOCKS_LIMIT
from bot.slack.thread_surface import take_finished_posts
from bot.store.tasks import TaskRecord
from tests.fakes.openai_api import RecordedRequest, Reply, ToolCallSpec
from tests.slack.harness import MAIN_MARK, SlackHarness, start_harness, until
from tests.slack.test_blocks import make_task


def finished(n: int, result: str = "done") -> TaskRecord:
    return make_task(id=f"task-explore-{n}", result=result)


@pytest.mark.parametrize(
    ("results", "taken"),
    [
        (["a"], 1),
        (["a", "b", "c"], 3),
        # Two blocks each: a message holds 25 results.
        (["r"] * (MESSAGE_BLOCKS_LIMIT // 2 + 3), MESSAGE_BLOCKS_LIMIT // 2),
        # The markdown of one message is capped as a whole.
        (["x" * 7_000, "y" * 7_000], 1),
        (["x" * 6_000, "y" * (MARKDOWN_BLOCKS_LIMIT - 6_100)], 2),
        # A result too long to show whole goes alone, with its file.
        (["a", "z" * 20_000], 1),
        (["z" * 20_000, "a"], 1),
    ],
)
def test_one_message_takes_what_it_holds(results: list[str], taken: int) -> None:
    waiting = [finished(n, result) for n, result in enumerate(results)]
    posts = take_finished_posts(waiting, render=task_finished_message)
    assert len(posts) == taken
    assert len(waiting) == len(results) - taken
    blocks = [block for post in posts for block in post.blocks]
    assert len(blocks) <= MESSAGE_BLOCKS_LIMIT
    assert sum(len(b["text"]) for b in blocks if b["type"] == "markdown") <= max(
        MARKDOWN_BLOCKS_LIMIT, len(posts[0].blocks[-1]["text"])
    )


@pytest.fixture
async def paced(tmp_path: Path) -> AsyncIterator[SlackHarness]:
    # Slack's limits twice as fast: a channel takes a message every 0.56 s.
    async for harness in start_harness(tmp_path, rate_budget=RateBudget.scaled(2)):
        yield harness


async def test_results_that_end_together_come_in_one_message(paced: SlackHarness) -> None:
    release = asyncio.Event()
    started = 0

    async def respond(request: RecordedRequest) -> Reply:
        nonlocal started
        if str(request.messages[0]["content"]).startswith(MAIN_MARK):
            if started:
                return Reply(text="Started three tasks.")
            started = 1
            return Reply(
                tool_calls=[
                    ToolCallSpec(
                        "task",
                        {"subagent_type": "explore", "prompt": f"job {n}", "background": True},
                    )
                    for n in range(3)
                ]
            )
        job = str(request.messages[-1]["content"]).rpartition("job ")[2]
        await release.wait()
        return Reply(text=f"Result of job {job}.")

    paced.llm.responder = respond
    ts = await paced.mention("three jobs in the background")
    await until(lambda: "Started three tasks." in json.dumps(paced.thread("C1", ts)))
    release.set()
    await until(lambda: json.dumps(paced.thread("C1", ts)).count("Result of job") >= 3)
    await paced.settle()
    carriers = [
        call
        for call in paced.slack.calls_to("chat.postMessage")
        if "Result of job" in json.dumps(call.params)
    ]
    assert len(carriers) == 1
    posted = json.dumps(carriers[0].params)
    assert all(f"Result of job {n}." in posted for n in range(3))
    assert all(f"task-explore-{n}" in posted for n in (1, 2, 3))
