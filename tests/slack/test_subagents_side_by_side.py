"""Sub-agents side by side, end to end through Slack: the real Bolt app, requests signed as
Slack signs them, the fake Slack Web API and the fake model. An isolated background child
whose branch is merged from /tasks, a foreground group whose claims disagree, a lead that
delegates to its helper, project memory across threads, and the control tools a parent
uses on its children (only in its own thread)."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from bot.config import PermissionsConfig
from tests.fakes.openai_api import RecordedRequest, Reply, ToolCallSpec
from tests.slack.harness import ALICE, MAIN_MARK, SlackHarness, start_harness, until

MERGE = "baton_merge_task"
DISCARD = "baton_discard_task"
CODER = "CODER-PROMPT"
ANALYST = "ANALYST-PROMPT"
LEAD = "LEAD-PROMPT"
HELPER = "HELPER-PROMPT"
SCRIBE = "SCRIBE-PROMPT"
EXPLORE = "Your job is to investigate"
STEERING = "Only look at the src/ directory, please."

AGENTS = {
    "coder": ("description: Edits files.\nisolation: worktree", CODER),
    "analyst": ("description: Analyses one question.", ANALYST),
    "lead": ("description: Leads.\nallowed_subagents: [helper]", LEAD),
    "helper": ("description: Helps.", HELPER),
    "scribe": ("description: Keeps notes.\nmemory: project", SCRIBE),
}


def write_agents(tmp_path: Path) -> None:
    directory = tmp_path / "agents"
    directory.mkdir(exist_ok=True)
    for name, (front, prompt) in AGENTS.items():
        (directory / f"{name}.md").write_text(f"---\nname: {name}\n{front}\n---\n{prompt}\n")


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[SlackHarness]:
    """The Slack harness with this file's agents; background children may write files."""
    write_agents(tmp_path)
    async for value in start_harness(
        tmp_path, permissions=PermissionsConfig(allow=("write_file",))
    ):
        yield value


Responder = Callable[[RecordedRequest], Awaitable[Reply]]


class Router:
    """Answers the main agent from a queue and each sub-agent (known by a mark in its
    system prompt) with a function of its own; keeps every sub-agent's requests."""

    def __init__(self, harness: SlackHarness) -> None:
        self.main: list[Reply] = []
        self.children: dict[str, Responder] = {}
        self.seen: dict[str, list[RecordedRequest]] = {}
        harness.llm.responder = self.respond

    async def respond(self, request: RecordedRequest) -> Reply:
        system = str(request.messages[0]["content"])
        if system.startswith(MAIN_MARK):
            return self.main.pop(0) if self.main else Reply(text="ok")
        for mark, responder in self.children.items():
            if mark in system:
                self.seen.setdefault(mark, []).append(request)
                return await responder(request)
        return Reply(text="unexpected agent")


def task(agent: str, prompt: str, *, id: str, **more: Any) -> ToolCallSpec:
    return ToolCallSpec("task", {"subagent_type": agent, "prompt": prompt, **more}, id=id)


def submit(answer: str, claims: list[dict[str, str]] | None = None, id: str = "s") -> Reply:
    arguments = {"status": "complete", "answer": answer, "evidence": ["src/cache.py:12"],
                 "claims": claims or []}  # fmt: skip
    return Reply(tool_calls=[ToolCallSpec("submit_result", arguments, id=id)])


def has_tool_result(request: RecordedRequest) -> bool:
    return any(m.get("role") == "tool" for m in request.messages)


def tool_results(request: RecordedRequest) -> list[str]:
    return [str(m.get("content")) for m in request.messages if m.get("role") == "tool"]


def task_enum(request: RecordedRequest) -> list[str]:
    schema = next(t for t in request.body["tools"] if t["function"]["name"] == "task")
    return schema["function"]["parameters"]["properties"]["subagent_type"]["enum"]


def dumped(harness: SlackHarness, channel: str, ts: str) -> str:
    return json.dumps(harness.thread(channel, ts), ensure_ascii=False)


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


def buttons(blocks: list[dict[str, Any]]) -> set[tuple[str, str]]:
    found = set()
    for block in blocks:
        for element in block.get("elements") or ():
            if element.get("type") == "button":
                found.add((element["action_id"], element["value"]))
    return found


async def tasks_panel(harness: SlackHarness, text: str = "") -> dict[str, Any]:
    before = len(harness.slack.ephemerals)
    assert await harness.command(text, user=ALICE) == 200
    await until(lambda: len(harness.slack.ephemerals) > before)
    return harness.slack.ephemerals[-1]


# ---------------------------------------------------------- isolated child, merged


async def test_isolated_background_child_is_posted_then_merged_from_tasks(
    harness: SlackHarness,
) -> None:
    workspace = harness.baton.workspace.root
    make_repo(workspace)
    first = git(workspace, "rev-parse", "HEAD").strip()
    router = Router(harness)
    router.main += [
        Reply(tool_calls=[task("coder", "add a line", id="c", background=True,
                               description="Edit notes")]),
        Reply(text="started the coder"),
    ]  # fmt: skip

    async def coder(request: RecordedRequest) -> Reply:
        if has_tool_result(request):
            return Reply(text="added a line to notes.txt")
        arguments = {"path": "notes.txt", "content": "line one\nfrom the coder\n"}
        return Reply(tool_calls=[ToolCallSpec("write_file", arguments, id="w")])

    router.children[CODER] = coder
    ts = await harness.mention("have the coder add a line")
    await until(lambda: "baton/task-coder-1" in dumped(harness, "C1", ts))
    await harness.settle()

    posted = dumped(harness, "C1", ts)
    assert "started the coder" in posted and "task-coder-1" in posted
    assert "Changes: committed on branch baton/task-coder-1" in posted
    assert "notes.txt (+1" in posted and "1 file changed" in posted
    # The child worked in its own worktree: the main checkout is as it was.
    assert (workspace / "notes.txt").read_text() == "line one\n"
    assert git(workspace, "status", "--porcelain") == ""
    assert git(workspace, "rev-parse", "HEAD").strip() == first
    assert "baton/task-coder-1" in git(workspace, "branch", "--list")

    panel = await tasks_panel(harness)
    assert {(MERGE, "task-coder-1"), (DISCARD, "task-coder-1")} <= buttons(panel["blocks"])
    assert "waiting to be merged" in json.dumps(panel["blocks"], ensure_ascii=False)

    before = len(harness.slack.ephemerals)
    assert await harness.click(MERGE, "task-coder-1", user=ALICE) == 200
    await until(lambda: len(harness.slack.ephemerals) > before)
    assert harness.slack.ephemerals[-1]["text"].startswith("✓ Merged `baton/task-coder-1`")

    parents = git(workspace, "rev-list", "--parents", "-n", "1", "HEAD").split()
    assert len(parents) == 3 and parents[1] == first  # a merge commit on top of main
    assert git(workspace, "show", "HEAD:notes.txt") == "line one\nfrom the coder\n"
    assert (workspace / "notes.txt").read_text() == "line one\nfrom the coder\n"
    assert git(workspace, "status", "--porcelain") == ""

    panel = await tasks_panel(harness)
    shown = json.dumps(panel["blocks"], ensure_ascii=False)
    assert "· merged" in shown and (MERGE, "task-coder-1") not in buttons(panel["blocks"])


# ------------------------------------------------------------ a group that disagrees


async def test_three_foreground_tasks_of_one_group_come_back_in_one_block_with_the_conflict(
    harness: SlackHarness,
) -> None:
    router = Router(harness)
    router.main += [
        Reply(tool_calls=[
            task("analyst", f"why is the cache slow? angle {n}", id=f"g{n}", group="cache")
            for n in (1, 2, 3)
        ]),
        Reply(text="The analysts disagree on the root cause."),
    ]  # fmt: skip
    positions = {"angle 1": "stale cache entries", "angle 2": "a race in the retry loop"}

    async def analyst(request: RecordedRequest) -> Reply:
        prompt = str(request.messages[1]["content"])
        angle = next((a for a in positions if a in prompt), None)
        if has_tool_result(request) or angle is None:
            return Reply(text="done")  # the third never submits: it gets "uncertain"
        claims = [{"topic": "root cause", "position": positions[angle]}]
        return submit(f"It is {positions[angle]}.", claims)

    router.children[ANALYST] = analyst
    ts = await harness.mention("why is the cache slow? ask three analysts")
    await until(lambda: "The analysts disagree" in dumped(harness, "C1", ts))
    await harness.settle()

    after = harness.main_requests()[1]
    results = tool_results(after)
    assert len(results) == 3
    blocks = [r for r in results if "<task_group" in r]
    assert len(blocks) == 1 and blocks[0].count("<task_group") == 1
    block = blocks[0]
    assert 'name="cache"' in block and "CONFLICT" in block and "root cause" in block
    assert "stale cache entries" in block and "a race in the retry loop" in block
    assert "uncertain" in block
    assert any("The analysts disagree on the root cause." in t
               for t in harness.bot_texts("C1", ts))  # fmt: skip


# -------------------------------------------------------------------------- nesting


async def test_a_lead_delegates_to_its_helper_and_the_thread_shows_both(
    harness: SlackHarness,
) -> None:
    router = Router(harness)
    router.main += [
        Reply(tool_calls=[task("lead", "lead the work", id="L")]),
        Reply(text="all done: HELPER-SAID-HI"),
    ]

    async def lead(request: RecordedRequest) -> Reply:
        step = len(router.seen[LEAD])
        if step == 1:
            return Reply(tool_calls=[task("helper", "help with the work", id="H")])
        if step == 2:
            return submit("lead finished: HELPER-SAID-HI", id="ls")
        return Reply(text="submitted")

    async def helper(request: RecordedRequest) -> Reply:
        if not has_tool_result(request):
            return Reply(tool_calls=[ToolCallSpec("list_files", {"path": "."}, id="hl")])
        return Reply(text="HELPER-SAID-HI")

    router.children[LEAD] = lead
    router.children[HELPER] = helper
    ts = await harness.mention("lead the work")
    await until(lambda: "all done: HELPER-SAID-HI" in dumped(harness, "C1", ts))
    await harness.settle()

    assert task_enum(router.seen[LEAD][0]) == ["helper"]
    assert router.seen[HELPER], "the helper never ran"
    for request in router.seen[HELPER]:
        assert "task" not in request.tools
    # The lead got the helper's result; the main agent got the lead's.
    assert any("HELPER-SAID-HI" in r for r in tool_results(router.seen[LEAD][-1]))

    # The progress message (posted, then updated in place) showed both agents' steps.
    shown = [
        str(call.params.get("text", ""))
        for method in ("chat.postMessage", "chat.update")
        for call in harness.slack.calls_to(method)
    ]
    everything = "\n".join(shown)
    assert any(line.startswith("[lead] ") for t in shown for line in t.split("\n")), everything
    assert any(line.startswith("[helper] ") for t in shown for line in t.split("\n")), everything
    assert "[helper]" in everything and "list_files" in everything


# --------------------------------------------------------------------------- memory


async def test_project_memory_written_in_one_thread_is_read_in_another(
    harness: SlackHarness,
) -> None:
    note = "The build runs with make check."
    router = Router(harness)
    router.main += [
        Reply(tool_calls=[task("scribe", "find how to build", id="s1")]),
        Reply(text="noted"),
        Reply(tool_calls=[task("scribe", "build it", id="s2")]),
        Reply(text="built"),
    ]

    async def scribe(request: RecordedRequest) -> Reply:
        if len(router.seen[SCRIBE]) == 1:
            return Reply(tool_calls=[ToolCallSpec("remember", {"note": note}, id="r")])
        return Reply(text="done")

    router.children[SCRIBE] = scribe
    first = await harness.mention("find out how to build")
    await until(lambda: "noted" in dumped(harness, "C1", first))
    await harness.settle()

    memory = harness.baton.workspace.root / ".baton" / "memory" / "scribe.md"
    lines = memory.read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("- ") and lines[0].endswith(f": {note}")
    assert note not in str(router.seen[SCRIBE][0].messages[0]["content"])

    second = await harness.mention("build it", channel="C2")
    await until(lambda: "built" in dumped(harness, "C2", second))
    await harness.settle()
    later = [r for r in router.seen[SCRIBE] if "build it" in str(r.messages[1]["content"])]
    assert later, "the scribe did not run in the second thread"
    assert lines[0] in str(later[0].messages[0]["content"])


# --------------------------------------------------------------- parent's control tools


async def test_the_parent_steers_its_background_child_and_another_thread_cannot_see_it(
    harness: SlackHarness,
) -> None:
    release = asyncio.Event()
    router = Router(harness)
    router.main += [
        Reply(tool_calls=[task("explore", "count the TODOs", id="bg", background=True,
                               description="Count TODOs")]),
        Reply(text="started"),
        Reply(tool_calls=[ToolCallSpec("steer_task", {"id": "task-explore-1",
                                                      "message": STEERING}, id="st")]),
        Reply(text="steered"),
        Reply(tool_calls=[ToolCallSpec("task_status", {"id": "task-explore-1"}, id="ts")]),
        Reply(text="looked"),
    ]  # fmt: skip

    async def explore(request: RecordedRequest) -> Reply:
        if len(router.seen[EXPLORE]) == 1:
            await release.wait()
            return Reply(tool_calls=[ToolCallSpec("list_files", {"path": "."}, id="l1")])
        return Reply(text="3 TODOs in src/.")

    router.children[EXPLORE] = explore
    ts = await harness.mention("count TODOs in the background")
    await until(lambda: "started" in dumped(harness, "C1", ts))
    await until(lambda: len(router.seen.get(EXPLORE, ())) >= 1)

    await harness.mention("only src/ matters, tell it", thread_ts=ts)
    await until(lambda: "steered" in dumped(harness, "C1", ts))
    steer_result = tool_results(harness.main_requests()[3])
    assert any("Sent to task-explore-1" in r for r in steer_result), steer_result

    # Another thread: the task runs, but it is not among that run's children.
    other = await harness.mention("how is task-explore-1 doing?")
    await until(lambda: "looked" in dumped(harness, "C1", other))
    status = tool_results(harness.main_requests()[5])
    assert any("there is no task" in r for r in status), status
    assert harness.baton.tracker.is_running_here("task-explore-1")

    release.set()
    await until(lambda: len(router.seen[EXPLORE]) >= 2)
    sent = json.dumps(router.seen[EXPLORE][1].messages, ensure_ascii=False)
    assert STEERING in sent
    assert STEERING not in json.dumps(router.seen[EXPLORE][0].messages, ensure_ascii=False)
    await until(lambda: "3 TODOs in src/." in dumped(harness, "C1", ts))
    await harness.settle()
