"""`/tasks` controls of sub-agent tasks, end to end: Steer a running child through a modal,
Merge or Discard an isolated child's branch, and the handoff in the detail and the log."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from bot.store.sessions import SessionKey
from bot.store.tasks import TaskRecord
from bot.subagents.handoff import Claim, Handoff
from tests.fakes.openai_api import RecordedRequest, Reply, ToolCallSpec
from tests.slack.harness import ALICE, BOB, TEAM, SlackHarness, next_ts, until

STEER = "baton_steer_task"
MERGE = "baton_merge_task"
DISCARD = "baton_discard_task"
STEERING = "Only look at the src/ directory, please."


def is_main(request: RecordedRequest) -> bool:
    return str(request.messages[0]["content"]).startswith("You are Baton")


def background(prompt: str) -> Reply:
    arguments = {"subagent_type": "explore", "prompt": prompt, "background": True,
                 "description": "Count TODOs"}  # fmt: skip
    return Reply(tool_calls=[ToolCallSpec("task", arguments, id="bg")])


def buttons(blocks: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Every button of `blocks` by (action id, value)."""
    found = {}
    for block in blocks:
        for element in block.get("elements") or ():
            if element.get("type") == "button":
                found[(element["action_id"], element["value"])] = element
    return found


def ephemeral_texts(harness: SlackHarness) -> list[str]:
    return [e["text"] for e in harness.slack.ephemerals]


class Child:
    """A background child whose first model call waits for `release`; it then lists files
    and, on its next call, answers."""

    def __init__(self, harness: SlackHarness) -> None:
        self.release = asyncio.Event()
        self.requests: list[RecordedRequest] = []
        self.main: list[Reply] = []
        harness.llm.responder = self.respond

    async def respond(self, request: RecordedRequest) -> Reply:
        if is_main(request):
            return self.main.pop(0) if self.main else Reply(text="ok")
        self.requests.append(request)
        if len(self.requests) == 1:
            await self.release.wait()
            return Reply(tool_calls=[ToolCallSpec("list_files", {"path": "."}, id="l1")])
        return Reply(text="3 TODOs in src/.")


async def start_child(harness: SlackHarness, child: Child, *, channel: str = "C1") -> str:
    child.main += [background("count the TODOs"), Reply(text="started")]
    ts = await harness.mention("count TODOs in the background", channel=channel)
    await until(lambda: "started" in json.dumps(harness.thread(channel, ts)))
    await until(lambda: len(child.requests) >= 1)
    return ts


async def panel_buttons(harness: SlackHarness, *, user: str = ALICE, text: str = "") -> dict:
    before = len(harness.slack.ephemerals)
    assert await harness.command(text, user=user) == 200
    await until(lambda: len(harness.slack.ephemerals) > before)
    return buttons(harness.slack.ephemerals[-1].get("blocks") or [])


async def open_steer_modal(harness: SlackHarness, task_id: str) -> dict[str, Any]:
    before = len(harness.slack.calls_to("views.open"))
    assert await harness.click(STEER, task_id, user=ALICE) == 200
    await until(lambda: len(harness.slack.calls_to("views.open")) > before)
    return harness.slack.calls_to("views.open")[-1].params["view"]


def steer_submission(view: dict[str, Any], text: str, *, user: str) -> str:
    """The form body Slack posts when `user` submits the Steer modal `view` with `text`."""
    submitted = {
        **view,
        "id": "VSTEER",
        "team_id": TEAM,
        "state": {
            "values": {
                "baton_steer_input": {
                    "baton_steer_text": {"type": "plain_text_input", "value": text}
                }
            }
        },
    }
    payload = {
        "type": "view_submission",
        "team": {"id": TEAM, "domain": "baton-test"},
        "user": {"id": user, "username": user.lower(), "team_id": TEAM},
        "api_app_id": "ABATON",
        "token": "legacy",
        "trigger_id": f"{time.time()}.trigger",
        "view": submitted,
    }
    return urlencode({"payload": json.dumps(payload)})


async def submit(harness: SlackHarness, view: dict[str, Any], text: str, *, user: str) -> Any:
    """Post a view_submission of the Steer modal `view` with `text` typed in, as Slack would."""
    body = steer_submission(view, text, user=user)
    return await harness.post(body, content_type="application/x-www-form-urlencoded")


async def log_of(harness: SlackHarness, task_id: str) -> tuple[str, ...]:
    detail = await harness.baton.tracker.get(task_id)
    assert detail is not None
    return detail.log


# ------------------------------------------------------------------------- steering


async def test_steer_from_tasks_reaches_the_running_child_before_its_next_call(
    harness: SlackHarness,
) -> None:
    child = Child(harness)
    await start_child(harness, child)
    found = await panel_buttons(harness)
    assert (STEER, "task-explore-1") in found and ("baton_cancel_task", "task-explore-1") in found

    view = await open_steer_modal(harness, "task-explore-1")
    assert view["callback_id"] == "baton_steer_view"
    field = view["blocks"][-1]["element"]
    assert field["multiline"] is True and field["max_length"] == 4_000
    response = await submit(harness, view, STEERING, user=ALICE)
    assert response.status == 200
    await until(lambda: any("✉ Sent to `task-explore-1`" in t for t in ephemeral_texts(harness)))
    assert harness.slack.ephemerals[-1]["channel"] == "C1"
    assert any(
        line.startswith(f"✉ <@{ALICE}>: Only look")
        for line in await log_of(harness, "task-explore-1")
    )

    child.release.set()
    await until(lambda: len(child.requests) >= 2)
    sent = json.dumps(child.requests[1].messages, ensure_ascii=False)
    assert STEERING in sent and f"<@{ALICE}>" in sent
    assert STEERING not in json.dumps(child.requests[0].messages)
    await harness.settle()


async def test_steer_by_someone_not_allowed_is_refused_and_sends_nothing(
    harness: SlackHarness,
) -> None:
    child = Child(harness)
    await start_child(harness, child)
    # Bob sees the panel but no Steer button, and clicking one anyway is refused.
    found = await panel_buttons(harness, user=BOB)
    assert (STEER, "task-explore-1") not in found
    opened = len(harness.slack.calls_to("views.open"))
    await harness.click(STEER, "task-explore-1", user=BOB)
    await until(lambda: any("can steer it" in t for t in ephemeral_texts(harness)))
    assert len(harness.slack.calls_to("views.open")) == opened

    # A submission in Bob's name of the modal Alice opened is refused as well.
    view = await open_steer_modal(harness, "task-explore-1")
    before = len(harness.slack.ephemerals)
    assert (await submit(harness, view, STEERING, user=BOB)).status == 200
    await until(lambda: len(harness.slack.ephemerals) > before)
    assert "Only the person who started this task" in ephemeral_texts(harness)[-1]
    child.release.set()
    await until(lambda: len(child.requests) >= 2)
    assert STEERING not in json.dumps(child.requests[1].messages)
    assert not any(line.startswith("✉") for line in await log_of(harness, "task-explore-1"))
    await harness.settle()


async def test_a_forged_submission_for_a_task_of_another_channel_sends_nothing(
    harness: SlackHarness,
) -> None:
    child = Child(harness)
    await start_child(harness, child, channel="C2")
    view = {
        "type": "modal",
        "callback_id": "baton_steer_view",
        "private_metadata": json.dumps({"task": "task-explore-1", "channel": "C1"}),
        "blocks": [],
    }
    before = len(harness.slack.ephemerals)
    assert (await submit(harness, view, STEERING, user=ALICE)).status == 200
    # Metadata that is not what the modal writes: nothing either.
    garbage = {**view, "private_metadata": "task-explore-1"}
    assert (await submit(harness, garbage, STEERING, user=ALICE)).status == 200
    await harness.surface.turns.idle(runs=False)  # both submissions were handled
    assert len(harness.slack.ephemerals) == before
    assert not any(line.startswith("✉") for line in await log_of(harness, "task-explore-1"))
    child.release.set()
    await until(lambda: len(child.requests) >= 2)
    assert STEERING not in json.dumps(child.requests[1].messages)
    await harness.settle()


async def test_steering_a_task_that_finished_meanwhile_says_so(harness: SlackHarness) -> None:
    child = Child(harness)
    await start_child(harness, child)
    view = await open_steer_modal(harness, "task-explore-1")
    child.release.set()
    await harness.settle()
    detail = await harness.baton.tracker.get("task-explore-1")
    assert detail is not None and detail.task.state == "completed"
    assert (await submit(harness, view, STEERING, user=ALICE)).status == 200
    await until(lambda: any("finished meanwhile" in t for t in ephemeral_texts(harness)))
    assert not any(line.startswith("✉") for line in await log_of(harness, "task-explore-1"))
    # And a Steer click on it now does not open the modal.
    opened = len(harness.slack.calls_to("views.open"))
    await harness.click(STEER, "task-explore-1", user=ALICE)
    await until(lambda: any("no longer running" in t for t in ephemeral_texts(harness)))
    assert len(harness.slack.calls_to("views.open")) == opened


async def test_an_empty_or_too_long_steering_text_is_refused_in_the_modal(
    harness: SlackHarness,
) -> None:
    child = Child(harness)
    await start_child(harness, child)
    view = await open_steer_modal(harness, "task-explore-1")
    for text in ("   ", "x" * 4_001):
        response = await submit(harness, view, text, user=ALICE)
        assert response.status == 200
        errors = json.loads(await response.text())
        assert errors["response_action"] == "errors" and "baton_steer_input" in errors["errors"]
    await harness.surface.turns.idle(runs=False)
    assert not any(line.startswith("✉") for line in await log_of(harness, "task-explore-1"))
    child.release.set()
    await harness.settle()


# ------------------------------------------------------------------------- branches


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def make_repo(workspace: Path) -> None:
    git(workspace, "init", "-q", "-b", "main")
    git(workspace, "config", "user.email", "dev@example.com")
    git(workspace, "config", "user.name", "Dev")
    (workspace / "notes.txt").write_text("line one\n")
    git(workspace, "add", "notes.txt")
    git(workspace, "commit", "-q", "-m", "first")


def make_branch(workspace: Path, branch: str, content: str) -> None:
    git(workspace, "checkout", "-q", "-b", branch)
    (workspace / "notes.txt").write_text(content)
    git(workspace, "commit", "-q", "-am", f"work of {branch}")
    git(workspace, "checkout", "-q", "main")


async def finished_task(
    harness: SlackHarness,
    task_id: str,
    *,
    channel: str = "C1",
    branch: str | None = None,
    handoff: Handoff | None = None,
) -> TaskRecord:
    """A finished coder task of `channel` started by Alice, as the tracker would store it."""
    sessions = harness.baton.conversations.store
    session = await sessions.get_or_create(
        SessionKey.slack_thread(team_id=TEAM, channel_id=channel, thread_ts=next_ts())
    )
    store = harness.baton.tracker.store
    await store.create(
        task_id=task_id, session_id=session.id, channel_id=channel, agent="coder",
        description="Edit notes", prompt="edit notes.txt", background=True, started_by=ALICE,
    )  # fmt: skip
    record = await store.finish(
        task_id, state="completed", result="edited", error=None,
        branch=branch, change="notes.txt | 2 +-" if branch else None,
        handoff=handoff.to_json() if handoff else None,
    )  # fmt: skip
    assert record is not None
    return record


async def reply_to(harness: SlackHarness, action: str, task_id: str, *, user: str = ALICE,
                   channel: str = "C1") -> str:  # fmt: skip
    before = len(harness.slack.ephemerals)
    assert await harness.click(action, task_id, user=user, channel=channel) == 200
    await until(lambda: len(harness.slack.ephemerals) > before)
    return harness.slack.ephemerals[-1]["text"]


async def test_merge_from_tasks_merges_the_branch_once(harness: SlackHarness) -> None:
    workspace = harness.baton.workspace.root
    make_repo(workspace)
    make_branch(workspace, "baton/task-coder-1", "line one\nfrom the coder\n")
    await finished_task(harness, "task-coder-1", branch="baton/task-coder-1")

    found = await panel_buttons(harness)
    assert (MERGE, "task-coder-1") in found and (DISCARD, "task-coder-1") in found
    shown = json.dumps(harness.slack.ephemerals[-1]["blocks"], ensure_ascii=False)
    assert "baton/task-coder-1" in shown and "notes.txt | 2 +-" in shown
    assert "waiting to be merged" in shown

    await harness.click("baton_view_log", "task-coder-1", user=ALICE)
    await until(lambda: bool(harness.slack.calls_to("views.open")))
    view = harness.slack.calls_to("views.open")[-1].params["view"]
    texts = [block["text"]["text"] for block in view["blocks"] if block["type"] == "section"]
    assert any(t.startswith("⎇ `baton/task-coder-1` · waiting to be merged") for t in texts)
    assert "```\nnotes.txt | 2 +-\n```" in texts

    reply = await reply_to(harness, MERGE, "task-coder-1")
    assert reply.startswith("✓ Merged `baton/task-coder-1`")
    assert (workspace / "notes.txt").read_text() == "line one\nfrom the coder\n"
    assert "Merge baton/task-coder-1" in git(workspace, "log", "-1", "--format=%s")
    assert git(workspace, "status", "--porcelain") == ""

    again = await reply_to(harness, MERGE, "task-coder-1")
    assert "merged already" in again
    found = await panel_buttons(harness)
    assert (MERGE, "task-coder-1") not in found
    assert "· merged" in json.dumps(harness.slack.ephemerals[-1]["blocks"], ensure_ascii=False)


async def test_a_conflicting_merge_names_the_file_and_leaves_the_checkout_clean(
    harness: SlackHarness,
) -> None:
    workspace = harness.baton.workspace.root
    make_repo(workspace)
    make_branch(workspace, "baton/task-coder-1", "the coder's line\n")
    (workspace / "notes.txt").write_text("someone else's line\n")
    git(workspace, "commit", "-q", "-am", "meanwhile on main")
    head = git(workspace, "rev-parse", "HEAD")
    await finished_task(harness, "task-coder-1", branch="baton/task-coder-1")

    reply = await reply_to(harness, MERGE, "task-coder-1")
    assert "conflicts" in reply and "`notes.txt`" in reply
    assert git(workspace, "status", "--porcelain") == ""
    assert git(workspace, "rev-parse", "HEAD") == head
    record = await harness.baton.tracker.store.get("task-coder-1")
    assert record is not None and record.merge_state == "pending"


async def test_discard_deletes_the_branch(harness: SlackHarness) -> None:
    workspace = harness.baton.workspace.root
    make_repo(workspace)
    make_branch(workspace, "baton/task-coder-1", "unwanted\n")
    await finished_task(harness, "task-coder-1", branch="baton/task-coder-1")

    reply = await reply_to(harness, DISCARD, "task-coder-1")
    assert reply.startswith("⊘ Discarded `baton/task-coder-1`")
    assert "baton/" not in git(workspace, "branch", "--list")
    assert (workspace / "notes.txt").read_text() == "line one\n"
    await panel_buttons(harness, text="task-coder-1")
    detail = json.dumps(harness.slack.ephemerals[-1]["blocks"], ensure_ascii=False)
    assert "· discarded" in detail and "baton_merge_task" not in detail


async def test_merge_by_someone_not_allowed_or_from_another_channel_is_refused(
    harness: SlackHarness,
) -> None:
    workspace = harness.baton.workspace.root
    make_repo(workspace)
    make_branch(workspace, "baton/task-coder-1", "from the coder\n")
    await finished_task(harness, "task-coder-1", branch="baton/task-coder-1")

    assert (MERGE, "task-coder-1") not in await panel_buttons(harness, user=BOB)
    reply = await reply_to(harness, MERGE, "task-coder-1", user=BOB)
    assert reply == "Only the person who started this task or an approver can merge its branch."
    reply = await reply_to(harness, DISCARD, "task-coder-1", user=BOB)
    assert "can discard its branch" in reply
    reply = await reply_to(harness, MERGE, "task-coder-1", channel="C2")
    assert reply == "There is no such task in this channel."

    assert "baton/task-coder-1" in git(workspace, "branch", "--list")
    assert (workspace / "notes.txt").read_text() == "line one\n"
    record = await harness.baton.tracker.store.get("task-coder-1")
    assert record is not None and record.merge_state == "pending"


# -------------------------------------------------------------------------- handoff


async def test_detail_and_log_show_the_handoff_escaped(harness: SlackHarness) -> None:
    handoff = Handoff(
        status="uncertain",
        answer="Probably the cache <!channel> & the *retry* loop.",
        evidence=("src/cache.py:12",),
        limitations=("did not run the tests",),
        claims=(Claim(topic="root cause", position="stale cache"),),
    )
    await finished_task(harness, "task-coder-1", handoff=handoff)

    await panel_buttons(harness, text="task-coder-1")
    detail = json.dumps(harness.slack.ephemerals[-1]["blocks"], ensure_ascii=False)
    assert "*Handoff* · uncertain" in detail
    assert "&lt;!channel&gt; &amp; the *retry* loop" in detail and "<!channel>" not in detail
    assert "src/cache.py:12" in detail and "did not run the tests" in detail
    assert "root cause: stale cache" in detail

    await harness.click("baton_view_log", "task-coder-1", user=ALICE)
    await until(lambda: bool(harness.slack.calls_to("views.open")))
    view = json.dumps(harness.slack.calls_to("views.open")[-1].params["view"], ensure_ascii=False)
    assert "*Handoff* · uncertain" in view and "&lt;!channel&gt;" in view
    assert "<!channel>" not in view and "root cause: stale cache" in view
