"""MCP tools in real runs: Baton as built for Slack, a real stdio MCP server in the sandbox,
the fake model over HTTP. Permissions, children's narrowed tools, images, failures."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.app import Baton
from bot.config import McpServerConfig, PermissionsConfig
from bot.engine.hooks import ApprovalDecision, ApprovalRequest
from tests.fakes.openai_api import FakeOpenAI, RecordedRequest, Reply, ToolCallSpec
from tests.mcp.conftest import stdio_config, until
from tests.subagents.harness import Router, make_baton, run_turn, wait_finished

# Their stdio server runs in the real sandbox.
pytestmark = pytest.mark.usefixtures("sandbox")

SEARCH = "mcp__tracker__search_issues"
CREATE = "mcp__tracker__create_issue"


def call(name: str, arguments: dict[str, Any], id: str = "call_1") -> Reply:
    return Reply(tool_calls=[ToolCallSpec(name, arguments, id=id)])


def tool_messages(request: RecordedRequest) -> list[str]:
    return [str(m.get("content")) for m in request.messages if m.get("role") == "tool"]


async def tracker_baton(tmp_path: Path, fake: FakeOpenAI, **overrides: Any) -> Baton:
    """Baton with the demo server as `tracker`, once it is up."""
    servers = overrides.pop("mcp_servers", {"tracker": stdio_config()})
    baton = await make_baton(tmp_path, fake, mcp_servers=servers, **overrides)
    await asyncio.wait_for(baton.mcp.settle(), 30)
    return baton


@pytest.fixture
async def approvals() -> AsyncIterator[list[ApprovalRequest]]:
    yield []


def approving(asked: list[ApprovalRequest]) -> Any:
    async def approval(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request)
        return ApprovalDecision(approved=True, message="approved by a person")

    return approval


async def test_a_run_offers_the_tools_of_the_servers_up_and_start_up_does_not_wait(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    # A server that never answers its handshake: Baton starts anyway, without its tools.
    silent = McpServerConfig(
        command=(sys.executable, "-c", "import time; time.sleep(60)"),
        paths=(Path(sys.prefix), Path(sys.base_prefix)),
    )
    baton = await make_baton(
        tmp_path, fake_llm, mcp_servers={"tracker": stdio_config(), "silent": silent}
    )
    try:
        statuses = {s.name: s for s in baton.mcp.status()}
        assert statuses["silent"].state == "connecting"
        tracker = next(s for s in baton.mcp.servers if s.name == "tracker")
        await asyncio.wait_for(tracker.settled.wait(), 30)
        fake_llm.script(Reply(text="hello"))
        await run_turn(baton, "hi")
        offered = fake_llm.requests[0].tools
        assert SEARCH in offered and CREATE in offered
        assert not any(name.startswith("mcp__silent__") for name in offered)
        assert baton.mcp.status()[1].state == "connecting"
    finally:
        await baton.close()


async def test_an_mcp_tool_asks_a_person_even_when_the_server_says_read_only(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    baton = await tracker_baton(tmp_path, fake_llm)
    asked: list[ApprovalRequest] = []
    try:
        fake_llm.script(call(SEARCH, {"query": "login bug"}), Reply(text="found them"))
        await run_turn(baton, "find the login bugs", approval=approving(asked))
        # Nobody to ask (no approval at all): refused, never run.
        fake_llm.script(call(SEARCH, {"query": "other"}, id="call_2"), Reply(text="ok"))
        await run_turn(baton, "again")
    finally:
        await baton.close()
    assert [(a.tool_name, json.loads(a.arguments)) for a in asked] == [
        (SEARCH, {"query": "login bug"})
    ]
    assert "MCP server tracker" in asked[0].reason
    assert "allow rule" in asked[0].reason
    assert "3 issues match 'login bug'" in tool_messages(fake_llm.requests[1])[0]
    refused = tool_messages(fake_llm.requests[3])[-1]
    assert refused.startswith("Not run: this call needs a person's approval")


@pytest.mark.parametrize(
    ("allow", "deny", "search_asks", "create", "create_asks"),
    [
        ([SEARCH], [], False, "ran", True),
        (["mcp__tracker__*"], [], False, "ran", False),
        (["mcp__*"], [], False, "ran", False),
        (["mcp__tracker__*"], [CREATE], False, "denied", False),
        (["mcp__other__*"], ["mcp__tracker__*"], None, "denied", False),
    ],
)
async def test_rules_name_mcp_tools_one_by_one_or_by_server(
    tmp_path: Path,
    fake_llm: FakeOpenAI,
    allow: list[str],
    deny: list[str],
    search_asks: bool | None,
    create: str,
    create_asks: bool,
) -> None:
    baton = await tracker_baton(
        tmp_path, fake_llm, permissions=PermissionsConfig(allow=tuple(allow), deny=tuple(deny))
    )
    asked: list[ApprovalRequest] = []
    try:
        fake_llm.script(
            Reply(
                tool_calls=[
                    ToolCallSpec(SEARCH, {"query": "q"}, id="call_s"),
                    ToolCallSpec(CREATE, {"title": "t"}, id="call_c"),
                ]
            ),
            Reply(text="done"),
        )
        await run_turn(baton, "work", approval=approving(asked))
    finally:
        await baton.close()
    names = [a.tool_name for a in asked]
    search_result, create_result = tool_messages(fake_llm.requests[1])
    if search_asks is None:
        assert search_result.startswith("Permission denied")
    else:
        assert (SEARCH in names) is search_asks
        assert "3 issues match" in search_result
    assert (CREATE in names) is create_asks
    if create == "ran":
        assert "created issue 't'" in create_result
    else:
        assert create_result.startswith("Permission denied: the rule deny:")


async def test_a_background_child_never_waits_for_a_person_on_an_mcp_tool(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    baton = await tracker_baton(tmp_path, fake_llm)
    router = Router(fake_llm)
    router.main += [
        call("task", {"subagent_type": "general-purpose", "prompt": "file it", "background": True}),
        Reply(text="started"),
    ]
    router.default_child = lambda request: (
        call(CREATE, {"title": "from a child"})
        if not tool_messages(request)
        else Reply(text="could not")
    )
    asked: list[ApprovalRequest] = []
    try:
        await run_turn(baton, "file an issue in the background", approval=approving(asked))
        tasks = await baton.tracker.list(channel_id="C1")
        await wait_finished(baton, tasks[0].id)
        log = await baton.tracker.store.log(tasks[0].id)
    finally:
        await baton.close()
    assert asked == []
    child = router.child_requests()
    assert CREATE in child[0].tools
    refused = tool_messages(child[1])[0]
    assert "created issue" not in refused
    assert "denied" in refused.lower() or "not run" in refused.lower()
    assert any(CREATE in line for line in log)


async def test_a_childs_tools_are_narrowed_by_its_file_and_never_exceed_its_parent(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "searcher.md").write_text(
        f"---\nname: searcher\ndescription: Searches.\ntools: {SEARCH}\n---\nSEARCHER-MARK\n"
    )
    (agents / "tracker-all.md").write_text(
        "---\nname: tracker-all\ndescription: All tracker tools.\n"
        "tools: mcp__tracker__*\ndisallowed_tools: mcp__tracker__exit_now\n---\nALL-MARK\n"
    )
    (agents / "no-mcp.md").write_text(
        "---\nname: no-mcp\ndescription: No MCP.\ndisallowed_tools: mcp__*\n---\nNOMCP-MARK\n"
    )
    baton = await tracker_baton(
        tmp_path, fake_llm, permissions=PermissionsConfig(allow=("mcp__tracker__*",))
    )
    router = Router(fake_llm)
    router.main += [
        Reply(
            tool_calls=[
                ToolCallSpec("task", {"subagent_type": name, "prompt": "go"}, id=f"call_{name}")
                for name in ("searcher", "tracker-all", "no-mcp")
            ]
        ),
        Reply(text="all done"),
    ]
    # The searcher tries a tool its file does not give it.
    router.children["SEARCHER-MARK"] = [call(CREATE, {"title": "sneaky"}), Reply(text="no")]
    router.children["ALL-MARK"] = [Reply(text="fine")]
    router.children["NOMCP-MARK"] = [Reply(text="fine")]
    try:
        await run_turn(baton, "delegate")
    finally:
        await baton.close()
    first: dict[str, list[str]] = {}
    for request in router.child_requests():
        mark = str(request.messages[0]["content"]).splitlines()[0]
        first.setdefault(mark, request.tools)
    mcp_of = {
        mark: sorted(t for t in tools if t.startswith("mcp__")) for mark, tools in first.items()
    }
    assert mcp_of["SEARCHER-MARK"] == [SEARCH]
    assert CREATE in mcp_of["ALL-MARK"] and "mcp__tracker__exit_now" not in mcp_of["ALL-MARK"]
    assert mcp_of["NOMCP-MARK"] == []
    searcher_second = [
        r for r in router.child_requests() if "SEARCHER-MARK" in str(r.messages[0]["content"])
    ][1]
    assert (
        "there is no tool named 'mcp__tracker__create_issue'" in tool_messages(searcher_second)[0]
    )


async def test_images_reach_the_model_and_big_results_are_capped(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    baton = await tracker_baton(
        tmp_path, fake_llm, permissions=PermissionsConfig(allow=("mcp__tracker__*",))
    )
    try:
        fake_llm.script(
            Reply(
                tool_calls=[
                    ToolCallSpec("mcp__tracker__image", {}, id="call_i"),
                    ToolCallSpec("mcp__tracker__big", {"size": 200_000}, id="call_b"),
                ]
            ),
            Reply(text="seen"),
        )
        await run_turn(baton, "look")
    finally:
        await baton.close()
    follow = fake_llm.requests[1]
    assert [url[:22] for url in follow.image_urls] == ["data:image/png;base64,"]
    image_text, big_text = tool_messages(follow)
    assert "mcp__tracker__image-1" in image_text
    assert len(big_text) < 40_000 and "output truncated" in big_text


async def test_a_server_dying_mid_run_is_a_tool_error_and_the_run_goes_on(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    baton = await tracker_baton(
        tmp_path, fake_llm, permissions=PermissionsConfig(allow=("mcp__tracker__*",))
    )
    tracker = baton.mcp.servers[0]
    try:
        fake_llm.script(
            call("mcp__tracker__exit_now", {}),
            call(SEARCH, {"query": "q"}, id="call_2"),
            Reply(text="the tracker is down"),
        )
        events = await run_turn(baton, "crash it")
        await until(lambda: tracker.state == "up")
        fake_llm.script(Reply(text="hello again"))
        await run_turn(baton, "and now?")
    finally:
        await baton.close()
    crashed = tool_messages(fake_llm.requests[1])[0]
    assert crashed.startswith("Error: the MCP server tracker closed the connection")
    after = tool_messages(fake_llm.requests[2])[-1]
    assert after.startswith("Error: ")
    assert "tracker" in after
    assert events  # the run ended normally, with its answer
    assert SEARCH in fake_llm.requests[3].tools  # offered again once reconnected
