"""MCP tools through Slack as deployed: signed events, the fake Slack Web API, a real
stdio MCP server in the sandbox."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.config import McpServerConfig
from tests.fakes.openai_api import Reply, ToolCallSpec
from tests.mcp.conftest import DEMO, stdio_config
from tests.slack.harness import ALICE, BOB, SlackHarness, start_harness, until

# Their stdio server runs in the real sandbox.
pytestmark = pytest.mark.usefixtures("sandbox")

CREATE = "mcp__tracker__create_issue"


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[SlackHarness]:
    broken = McpServerConfig(
        command=(sys.executable, "-c", "import sys; sys.exit('no tracker token configured')"),
        paths=(Path(sys.prefix), Path(sys.base_prefix)),
    )
    async for value in start_harness(
        tmp_path, mcp_servers={"tracker": stdio_config(), "wiki": broken}
    ):
        await asyncio.wait_for(value.baton.mcp.settle(), 30)
        yield value


async def test_an_mcp_call_asks_in_the_thread_with_its_arguments(harness: SlackHarness) -> None:
    harness.llm.script(
        Reply(tool_calls=[ToolCallSpec(CREATE, {"title": "Login fails on Safari"}, id="c1")]),
        Reply(text="Filed it."),
    )
    ts = await harness.mention("file the Safari bug", user=ALICE)
    await until(lambda: harness.find_button("C1", ts, "baton_approve") is not None)
    found = harness.find_button("C1", ts, "baton_approve")
    assert found is not None
    message = harness.slack.get_message("C1", found["message"]["ts"])
    assert message is not None
    posted = json.dumps(message["blocks"], ensure_ascii=False)
    assert CREATE in posted and "Login fails on Safari" in posted
    assert "MCP server tracker" in posted
    # Someone who may not decide is refused; the call waits.
    await harness.click("baton_approve", found["button"]["value"], user=BOB,
                        message_ts=found["message"]["ts"])  # fmt: skip
    await until(lambda: any("It stays open" in e["text"] for e in harness.slack.ephemerals))
    assert len(harness.llm.requests) == 1
    await harness.click("baton_approve", found["button"]["value"], user=ALICE,
                        message_ts=found["message"]["ts"])  # fmt: skip
    await harness.settle()
    told = str(harness.llm.requests[1].messages[-1]["content"])
    assert told == "created issue 'Login fails on Safari'"
    assert "Filed it." in json.dumps(harness.thread("C1", ts))


async def test_app_home_says_which_servers_are_up_and_why_one_is_not(
    harness: SlackHarness,
) -> None:
    event = {"type": "app_home_opened", "user": ALICE, "channel": "D1", "tab": "home",
             "event_ts": "1.1"}  # fmt: skip
    assert (await harness.send_event(event)).status == 200
    await until(lambda: bool(harness.slack.calls_to("views.publish")))
    rendered = json.dumps(harness.slack.calls_to("views.publish")[0].params["view"])
    assert "tracker: up (" in rendered
    assert "wiki: not available" in rendered
    assert "no tracker token configured" in rendered  # its stderr, quoted


async def test_a_mention_right_after_start_up_is_answered_with_the_servers_tools(
    tmp_path: Path,
) -> None:
    """A stdio server takes a moment to start: the first run waits for it (bounded)
    instead of answering without its tools."""
    # A slow starter: two seconds before the demo server even begins.
    slow = stdio_config(
        command=(
            sys.executable,
            "-c",
            f"import runpy, sys, time; time.sleep(2); sys.argv = [{str(DEMO)!r}]; "
            f"runpy.run_path({str(DEMO)!r}, run_name='__main__')",
        )
    )
    async for harness in start_harness(tmp_path, mcp_servers={"tracker": slow}):
        await first_run_offers_the_servers_tools(harness)


async def first_run_offers_the_servers_tools(harness: SlackHarness) -> None:
    harness.llm.script(Reply(text="Ready."))
    await harness.mention("what can you do?")
    await until(lambda: len(harness.llm.requests) == 1)
    assert CREATE in harness.llm.requests[0].tools
    await harness.settle()


async def test_readyz_waits_for_the_servers_first_attempt_healthz_does_not(
    tmp_path: Path,
) -> None:
    """A server still starting keeps the replica out of a load balancer's rotation
    (`/readyz` 503) until it is up, has failed, or the wait is over; `/healthz` says
    only whether the process is alive and connected."""
    silent = McpServerConfig(
        command=(sys.executable, "-c", "import time; time.sleep(600)"),
        paths=(Path(sys.prefix), Path(sys.base_prefix)),
    )
    async for harness in start_harness(tmp_path, mcp_servers={"silent": silent}):
        await ready_only_once_the_wait_is_over(harness)


async def ready_only_once_the_wait_is_over(harness: SlackHarness) -> None:
    async def get(path: str) -> tuple[int, dict[str, object]]:
        async with harness.http.get(f"{harness.url}{path}") as response:
            return response.status, await response.json()

    status, report = await get("/readyz")
    assert status == 503, report
    assert report["mcp"] == {"silent": "connecting"}
    assert report["waiting_for"] == "MCP servers still connecting"
    assert (await get("/healthz"))[0] == 200
    harness.baton.ready_by = 0.0  # the bounded wait is over: ready without it
    status, report = await get("/readyz")
    assert status == 200, report
    assert report["mcp"] == {"silent": "connecting"}
