"""Steering across replicas: the child runs on A, the Steer modal is submitted to B."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.fakes.openai_api import RecordedRequest, Reply, ToolCallSpec
from tests.replicas.harness import Cluster, cluster, is_main
from tests.replicas.test_cancel import buttons
from tests.slack.harness import ALICE
from tests.slack.test_task_controls import steer_submission


async def _taken(c: Cluster) -> bool:
    return await c.scalar("SELECT count(*) FROM task_messages WHERE taken") == 1


async def test_a_steer_submitted_to_b_reaches_the_child_running_on_a(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        a, b = await c.start(2)
        main = [
            Reply(tool_calls=[ToolCallSpec("task", {
                "subagent_type": "explore", "prompt": "read everything",
                "background": True, "description": "Read"}, id="t1")]),
            Reply(text="Started it in the background."),
        ]  # fmt: skip
        child_calls: list[RecordedRequest] = []
        release = asyncio.Event()

        async def respond(request: RecordedRequest) -> Reply:
            if is_main(request):
                return main.pop(0)
            child_calls.append(request)
            if len(child_calls) == 1:
                await release.wait()  # the child's first call is in flight meanwhile
                return Reply(tool_calls=[ToolCallSpec("list_dir", {"path": "."})])
            return Reply(text="done reading")

        c.llm.responder = respond
        ts = await c.mention(a, "read in the background")
        await c.until(
            lambda: "Started it in the background." in c.thread_text("C1", ts) and child_calls,
            within=30, what="the background child waiting on its first call",
        )  # fmt: skip
        assert await c.command(b, "") == 200, c.logs()
        await c.until(
            lambda: any(buttons(e["blocks"], "baton_steer_task") for e in c.slack.ephemerals),
            what="the /tasks panel with a Steer button",
        )
        panel = next(e for e in c.slack.ephemerals if buttons(e["blocks"], "baton_steer_task"))
        [steer] = buttons(panel["blocks"], "baton_steer_task")
        opened = len(c.slack.calls_to("views.open"))
        assert await c.click(b, {"button": steer, "message": {"ts": None}}, user=ALICE) == 200
        await c.until(lambda: len(c.slack.calls_to("views.open")) > opened, what="the Steer modal")
        view = c.slack.calls_to("views.open")[-1].params["view"]
        body = steer_submission(view, "Only the src directory, please.", user=ALICE)
        status = await c.post(b, body, content_type="application/x-www-form-urlencoded")
        assert status == 200, c.logs()
        await c.until(
            lambda: any("Sent to" in e["text"] for e in c.slack.ephemerals),
            what="the steer confirmed",
        )
        # B stored it; A takes it (woken by the signal, or by its sweep) and holds it
        # for the child's next call.
        await c.until_true(lambda: _taken(c), what="A took the steering message from the database")
        release.set()
        await c.until(lambda: len(child_calls) >= 2, within=15, what="the child's next call")
        following = json.dumps(child_calls[1].messages)
        assert "Only the src directory, please." in following, c.logs()
        assert f"<@{ALICE}>" in following
        assert "Only the src directory" not in json.dumps(child_calls[0].messages)
