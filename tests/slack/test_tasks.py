"""Background post-back, `/tasks` with View log and Cancel, and App Home, end to end."""

from __future__ import annotations

import asyncio
import json

from tests.fakes.openai_api import RecordedRequest, Reply, ToolCallSpec
from tests.fakes.slack_api import RecordedCall
from tests.slack.harness import ALICE, BOB, MAIN_MARK, SlackHarness, until
from tests.slack.test_quiet_threads import dm

EXPLORE = "Your job is to investigate"


def is_main(request: RecordedRequest) -> bool:
    return str(request.messages[0]["content"]).startswith(MAIN_MARK)


def background(prompt: str, id: str = "bg") -> Reply:
    return Reply(
        tool_calls=[
            ToolCallSpec(
                "task",
                {"subagent_type": "explore", "prompt": prompt, "background": True,
                 "description": "Count TODOs"},
                id=id,
            )
        ]
    )  # fmt: skip


def buttons(blocks: list[dict]) -> list[dict]:
    found = []
    for block in blocks:
        if block.get("type") == "actions":
            found += block["elements"]
        if block.get("accessory", {}).get("type") == "button":
            found.append(block["accessory"])
    return found


def script_counting_task(harness: SlackHarness) -> asyncio.Event:
    """The model starts a background task that counts TODOs and says so; the child
    answers once the returned event is set; the next turn says what it found."""
    release = asyncio.Event()
    main_replies = [background("count the TODOs in src"), Reply(text="Started a task."),
                    Reply(text="It found 3 TODOs.")]  # fmt: skip

    async def respond(request: RecordedRequest) -> Reply:
        if is_main(request):
            return main_replies.pop(0)
        await release.wait()
        return Reply(text="There are 3 TODOs in src/.")

    harness.llm.responder = respond
    return release


async def test_background_result_is_posted_back_and_reaches_the_next_turn(
    harness: SlackHarness,
) -> None:
    release = script_counting_task(harness)
    ts = await harness.mention("count TODOs in the background")
    # The turn ends while the child still works.
    await until(lambda: "Started a task." in json.dumps(harness.thread("C1", ts)))
    assert harness.baton.tracker.is_running_here("task-explore-1")
    release.set()
    await until(lambda: "There are 3 TODOs" in json.dumps(harness.thread("C1", ts)))
    posted = json.dumps(harness.thread("C1", ts), ensure_ascii=False)
    assert "task-explore-1" in posted and "· done ·" in posted
    await harness.mention("what did it find?", thread_ts=ts)
    await harness.settle()
    prompt = [r for r in harness.llm.requests if is_main(r)][-1].messages[-1]["content"]
    assert '<task id="task-explore-1" agent="explore" state="completed">' in prompt
    assert "There are 3 TODOs in src/." in prompt


async def test_a_background_result_in_a_dm_is_a_new_message_of_the_conversation(
    harness: SlackHarness,
) -> None:
    """A DM is one conversation over many Slack threads (its session is the DM's, not a
    thread's): a finished task is posted as a new message of the DM, never as a reply
    to a thread named after the session ("dm"), and the next message reads it."""
    release = script_counting_task(harness)
    ts = await dm(harness, "count TODOs in the background")
    await until(lambda: "Started a task." in json.dumps(harness.thread("D1", ts)))
    release.set()

    def result_posts() -> list[RecordedCall]:
        return [
            c
            for c in harness.slack.calls_to("chat.postMessage")
            if "There are 3 TODOs" in json.dumps(c.params)
        ]

    await until(lambda: bool(result_posts()))
    assert [c.params.get("channel") for c in result_posts()] == ["D1"]
    assert [c.params.get("thread_ts") for c in result_posts()] == [None]
    assert not [c for c in harness.slack.calls if c.params.get("thread_ts") == "dm"]
    await dm(harness, "what did it find?")
    await harness.settle()
    prompt = [r for r in harness.llm.requests if is_main(r)][-1].messages[-1]["content"]
    assert "There are 3 TODOs in src/." in prompt


async def start_background_task(harness: SlackHarness, channel: str, prompt: str) -> str:
    """Start a background task in `channel` whose child waits until the test ends."""
    replies = [background(prompt), Reply(text="started")]

    async def respond(request: RecordedRequest) -> Reply:
        if is_main(request):
            return replies.pop(0)
        await asyncio.Event().wait()
        return Reply(text="never")

    harness.llm.responder = respond
    ts = await harness.mention("start it", channel=channel)
    await until(lambda: "started" in json.dumps(harness.thread(channel, ts)))
    return ts


async def test_tasks_panel_lists_this_channel_only_with_view_log_and_cancel(
    harness: SlackHarness,
) -> None:
    await start_background_task(harness, "C2", "secret work in the other channel")
    await start_background_task(harness, "C1", "count every TODO comment in the repository now")
    assert await harness.command() == 200
    await until(lambda: len(harness.slack.ephemerals) == 1)
    panel = harness.slack.ephemerals[0]
    rendered = json.dumps(panel["blocks"], ensure_ascii=False)
    assert panel["user"] == ALICE and panel["channel"] == "C1"
    assert "● " in rendered and "task-explore-2" in rendered
    assert "count every TODO comment in the repository now"[:48] in rendered
    assert "secret work" not in rendered and "task-explore-1" not in rendered
    actions = {b["action_id"]: b["value"] for b in buttons(panel["blocks"])}
    assert actions["baton_view_log"] == "task-explore-2"
    assert actions["baton_cancel_task"] == "task-explore-2"

    # View log opens a modal with the log.
    assert await harness.click("baton_view_log", "task-explore-2", user=ALICE) == 200
    await until(lambda: bool(harness.slack.calls_to("views.open")))
    view = harness.slack.calls_to("views.open")[0].params["view"]
    assert view["type"] == "modal"
    assert "Starting explore" in json.dumps(view, ensure_ascii=False)

    # A task of another channel cannot be opened from this one.
    await harness.click("baton_view_log", "task-explore-1", user=ALICE)
    await asyncio.sleep(0.2)
    assert len(harness.slack.calls_to("views.open")) == 1

    # Bob did not start it and is no approver: refused. Alice may cancel.
    await harness.click("baton_cancel_task", "task-explore-2", user=BOB)
    await until(lambda: any("Only the person" in e["text"] for e in harness.slack.ephemerals))
    assert harness.baton.tracker.is_running_here("task-explore-2")
    await harness.click("baton_cancel_task", "task-explore-2", user=ALICE)
    await until(lambda: not harness.baton.tracker.is_running_here("task-explore-2"))
    detail = await harness.baton.tracker.get("task-explore-2")
    assert detail is not None and detail.task.state == "cancelled"
    assert await harness.command("task-explore-2") == 200
    await until(lambda: any("task-explore-2" in json.dumps(e.get("blocks") or [])
                            and "⊘" in json.dumps(e.get("blocks") or [], ensure_ascii=False)
                            for e in harness.slack.ephemerals))  # fmt: skip
    assert await harness.command("task-explore-1") == 200  # other channel's id
    await until(lambda: any("no task `task-explore-1`" in e["text"]
                            for e in harness.slack.ephemerals))  # fmt: skip


async def test_app_home_shows_counts_and_the_viewers_tasks(harness: SlackHarness) -> None:
    await start_background_task(harness, "C1", "home task")
    event = {"type": "app_home_opened", "user": ALICE, "channel": "D1", "tab": "home",
             "event_ts": "1.1"}  # fmt: skip
    assert (await harness.send_event(event)).status == 200
    await until(lambda: bool(harness.slack.calls_to("views.publish")))
    call = harness.slack.calls_to("views.publish")[0]
    assert call.params["user_id"] == ALICE
    rendered = json.dumps(call.params["view"], ensure_ascii=False)
    assert "⚙ 1 running · 0 done" in rendered and "task-explore-1" in rendered


async def test_a_cancelled_task_reports_what_it_spent_until_then(harness: SlackHarness) -> None:
    """Its child made a model call before the cancel: the thread and /tasks show that
    call's tokens, not zero."""
    replies = [background("read every file"), Reply(text="started")]
    child_calls = 0

    async def respond(request: RecordedRequest) -> Reply:
        nonlocal child_calls
        if is_main(request):
            return replies.pop(0)
        child_calls += 1
        if child_calls == 1:
            return Reply(tool_calls=[ToolCallSpec("list_files", {"path": "."}, id="l1")])
        await asyncio.Event().wait()
        return Reply(text="never")

    harness.llm.responder = respond
    ts = await harness.mention("start it")
    await until(lambda: child_calls == 2)
    await harness.click("baton_cancel_task", "task-explore-1", user=ALICE)
    await until(lambda: "cancelled by" in json.dumps(harness.thread("C1", ts)))
    detail = await harness.baton.tracker.get("task-explore-1")
    assert detail is not None and detail.task.state == "cancelled"
    assert detail.task.prompt_tokens > 0 and detail.task.completion_tokens > 0
    finished = [m for m in harness.thread("C1", ts) if "cancelled by" in json.dumps(m)][-1]
    assert "0 in / 0 out" not in json.dumps(finished, ensure_ascii=False)
    assert f"{detail.task.prompt_tokens:,} in" in json.dumps(finished, ensure_ascii=False)
