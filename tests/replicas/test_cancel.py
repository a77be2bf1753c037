"""Cancel across replicas: the click (or /tasks) reaches B, the work runs on A."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.fakes.openai_api import RecordedRequest, Reply, ToolCallSpec
from tests.replicas.harness import Cluster, Replica, cluster, is_main
from tests.slack.harness import ALICE


async def hang(request: RecordedRequest) -> Reply:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def test_cancel_clicked_on_the_other_replica_stops_the_run(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        a, b = await c.start(2)
        c.llm.responder = hang
        ts = await c.mention(a, "a long job")
        await c.until(lambda: len(c.llm.requests) == 1, what="the model called")
        await c.until(
            lambda: c.find_button("C1", ts, "baton_cancel_run") is not None,
            what="the Cancel button",
        )
        found = c.find_button("C1", ts, "baton_cancel_run")
        assert found is not None
        assert await c.click(b, found, user=ALICE) == 200, c.logs()
        await c.until(
            lambda: f"Cancelled by <@{ALICE}>" in c.thread_text("C1", ts),
            within=15, what="the run ended as cancelled",
        )  # fmt: skip
        await c.quiet()
        assert len(c.llm.requests) == 1, c.logs()
        assert c.find_button("C1", ts, "baton_cancel_run") is None, c.thread_text("C1", ts)
        assert "Interrupted" not in c.thread_text("C1", ts)
        assert a.running and b.running


async def _no_tasks_running(c: Cluster, replica: Replica) -> bool:
    return await c.metric(replica, "baton_tasks_running") == 0


def buttons(blocks: list[dict[str, Any]] | None, action_id: str) -> list[dict[str, Any]]:
    return [
        element
        for block in blocks or ()
        for element in block.get("elements") or (block.get("accessory") or {},)
        if isinstance(element, dict) and element.get("action_id") == action_id
    ]


async def test_a_background_task_on_a_cancelled_through_tasks_on_b(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        a, b = await c.start(2)
        main = [
            Reply(tool_calls=[ToolCallSpec("task", {
                "subagent_type": "explore", "prompt": "look at every file",
                "background": True, "description": "Look around"}, id="t1")]),
            Reply(text="Started it in the background."),
        ]  # fmt: skip
        child_calls: list[RecordedRequest] = []

        async def respond(request: RecordedRequest) -> Reply:
            if is_main(request):
                return main.pop(0)
            child_calls.append(request)  # the child keeps working: a call every 0.3 s
            return Reply(tool_calls=[ToolCallSpec("list_dir", {"path": "."})], delay=0.3)

        c.llm.responder = respond
        ts = await c.mention(a, "look around in the background")
        await c.until(
            lambda: "Started it in the background." in c.thread_text("C1", ts)
            and len(child_calls) >= 2,
            within=30, what="the background task working",
        )  # fmt: skip
        assert await c.command(b, "") == 200, c.logs()
        await c.until(
            lambda: any(buttons(e["blocks"], "baton_cancel_task") for e in c.slack.ephemerals),
            what="the /tasks panel with a Cancel button",
        )
        panel = next(e for e in c.slack.ephemerals if buttons(e["blocks"], "baton_cancel_task"))
        [cancel] = buttons(panel["blocks"], "baton_cancel_task")
        found = {"button": cancel, "message": {"ts": None}}
        assert await c.click(b, found, user=ALICE) == 200, c.logs()
        await c.until(
            lambda: any(f"Cancelled `{cancel['value']}`" in e["text"] for e in c.slack.ephemerals),
            what="the cancel confirmed",
        )
        await c.until(
            lambda: "ancelled" in c.thread_text("C1", ts), what="the thread told of the cancel"
        )
        # A's child learns of it (by the signal, or within its cancel sweep) and stops;
        # once it is gone from A, nothing is left there that could call the model.
        await c.until_true(lambda: _no_tasks_running(c, a), what="the child stopped on A")
        calls = len(child_calls)
        await c.quiet()
        assert len(child_calls) == calls, f"the cancelled child still works\n{c.logs()}"
        thread = c.thread_text("C1", ts)
        assert f"cancelled by <@{ALICE}>" in thread and "nterrupted" not in thread, thread
