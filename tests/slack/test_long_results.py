"""A sub-agent's 60,000-character answer reaches the thread whole, whatever path it took:
a background child's handoff, its last text (no handoff), its partial work when cut at
its turn limit, and an `@agent` run. End to end: the Bolt app over HTTP, fake Slack,
fake model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bot.slack.blocks import log_pages, task_log_modal
from bot.store.tasks import TaskDetail
from tests.fakes.openai_api import RecordedRequest, Reply, ToolCallSpec
from tests.slack.harness import MAIN_MARK, SlackHarness, until
from tests.slack.test_blocks import make_task
from tests.subagents.harness import numbered_lines

SIZE = 60_000
LOOPER = "LOOPER-PROMPT"


def is_main(request: RecordedRequest) -> bool:
    return str(request.messages[0]["content"]).startswith(MAIN_MARK)


def thread_text(harness: SlackHarness, ts: str) -> str:
    """What the thread holds for a reader: its messages' markdown blocks, then the files
    uploaded to it."""
    blocks = [
        block.get("text", "")
        for message in harness.thread("C1", ts)
        for block in message.get("blocks") or ()
        if block.get("type") == "markdown"
    ]
    files = [f.text for f in harness.slack.files if f.thread_ts == ts]
    return "\n".join([*blocks, *files])


def holds_whole(harness: SlackHarness, ts: str, answer: str) -> bool:
    """Whether the thread shows `answer` in one piece: in a file, or in its messages."""
    if any(answer in f.text for f in harness.slack.files if f.thread_ts == ts):
        return True
    return answer.replace("\n", "") in thread_text(harness, ts).replace("\n", "")


def child_answer(answer: str, how: str) -> Reply:
    if how == "handoff":
        arguments = {"status": "complete", "answer": answer}
        return Reply(tool_calls=[ToolCallSpec("submit_result", arguments, id="s")])
    if how == "turn limit":
        return Reply(text=answer, tool_calls=[ToolCallSpec("list_dir", {})])
    return Reply(text=answer)


@pytest.mark.parametrize("how", ["handoff", "last text", "turn limit"])
async def test_a_background_childs_long_answer_is_posted_whole(
    harness: SlackHarness, tmp_path: Path, how: str
) -> None:
    (tmp_path / "agents").mkdir(exist_ok=True)
    (tmp_path / "agents" / "looper.md").write_text(
        f"---\nname: looper\ndescription: Writes.\nmax_turns: 1\n---\n{LOOPER}\n"
    )
    answer = numbered_lines(SIZE)
    agent = "looper" if how == "turn limit" else "explore"
    main = [
        Reply(
            tool_calls=[
                ToolCallSpec(
                    "task",
                    {"subagent_type": agent, "prompt": "write it all", "background": True},
                    id="bg",
                )
            ]
        ),
        Reply(text="Started a task."),
    ]

    async def respond(request: RecordedRequest) -> Reply:
        return main.pop(0) if is_main(request) else child_answer(answer, how)

    harness.llm.responder = respond
    ts = await harness.mention("write a lot in the background")
    await harness.settle()
    await until(lambda: f"task-{agent}-1" in json.dumps(harness.thread("C1", ts)))
    await harness.settle()
    record = (await harness.baton.tracker.get(f"task-{agent}-1")).task  # type: ignore[union-attr]
    assert record.state == ("failed" if how == "turn limit" else "completed")
    assert holds_whole(harness, ts, answer)


@pytest.mark.parametrize("how", ["handoff", "last text"])
async def test_an_agent_runs_long_answer_is_posted_whole(harness: SlackHarness, how: str) -> None:
    answer = numbered_lines(SIZE)
    harness.llm.responder = lambda request: child_answer(answer, how)
    ts = await harness.mention("@explore write it all")
    await harness.settle()
    assert not harness.main_requests()
    assert holds_whole(harness, ts, answer)
    assert "task-explore-1" in thread_text(harness, ts)


def test_view_log_shows_a_long_result_whole() -> None:
    """The full log a cut result points people to holds every line of it."""
    answer = numbered_lines(SIZE)
    detail = TaskDetail(task=make_task(result=answer), log=("Starting explore",))
    shown = "".join(
        json.dumps(task_log_modal(detail, page=page)["blocks"], ensure_ascii=False)
        for page in range(log_pages(detail))
    )
    numbers = re.findall(r"line (\d{5}) of", answer)
    assert len(numbers) > 1_000
    assert all(f"line {number} of" in shown for number in numbers)
