"""A replica that dies or is stopped: the others report or carry on its work."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from tests.fakes.openai_api import RecordedRequest, Reply, ToolCallSpec
from tests.replicas.harness import cluster, is_main, text_of
from tests.slack.harness import BOT

# DESIGN.md, Scale: "the work of a replica that died is reported within seconds by
# the others"; issue 12 says within 10 s of the kill.
REPORTED_WITHIN_S = 10.0


async def hang() -> Reply:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


async def test_kill_9_of_a_replica_is_reported_by_the_other_within_10_s(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        a, b = await c.start(2)

        async def respond(request: RecordedRequest) -> Reply:
            asked = text_of(request.messages)
            if is_main(request) and "in the background" in asked:
                if request.messages[-1]["role"] == "tool":
                    return Reply(text="Started it in the background.")
                return Reply(tool_calls=[ToolCallSpec("task", {
                    "subagent_type": "explore", "prompt": "look at every file",
                    "background": True, "description": "Look around"}, id="t1")])  # fmt: skip
            return await hang()  # the foreground turn, and the background child

        c.llm.responder = respond
        background = await c.mention(a, "look around in the background")
        await c.until(
            lambda: "Started it in the background." in c.thread_text("C1", background)
            and len(c.llm.requests) == 3,
            within=30, what="the background task running on A",
        )  # fmt: skip
        foreground = await c.mention(a, "a long question")
        await c.until(lambda: len(c.llm.requests) == 4, what="A's foreground turn")
        await c.until(
            lambda: c.find_button("C1", foreground, "baton_cancel_run") is not None,
            what="the foreground run's progress message",
        )
        await asyncio.sleep(0.5)  # A has heartbeaten since; the expiry counts from that
        killed = c.kill(a)

        def run_reported() -> bool:
            return any(
                m.get("user") == BOT and "Interrupted by a restart" in text_of(m)
                for m in c.thread("C1", foreground)
            )

        def task_reported() -> bool:
            return any(
                m.get("user") == BOT and "interrupted by a restart" in text_of(m).lower()
                for m in c.thread("C1", background)
            )

        run_seen, task_seen = await asyncio.gather(
            c.until(run_reported, within=30, what="the foreground run reported by B"),
            c.until(task_reported, within=30, what="the background task reported by B"),
        )
        run_after, task_after = run_seen - killed, task_seen - killed
        print(f"after kill -9: run reported in {run_after:.1f} s, task in {task_after:.1f} s")
        assert run_after <= REPORTED_WITHIN_S, f"run reported {run_after:.1f} s after the kill"
        assert task_after <= REPORTED_WITHIN_S, f"task reported {task_after:.1f} s after the kill"
        for ts in (foreground, background):
            thread = c.thread_text("C1", ts)
            assert "Cancelled" not in thread and "cancelled" not in thread, thread
        # Reported once, by one replica.
        await asyncio.sleep(1.5)
        reports = [
            m for m in c.thread("C1", background)
            if "interrupted by a restart" in text_of(m).lower()
        ]  # fmt: skip
        assert len(reports) == 1, text_of(reports)
        # The interrupted run offers Retry; pressed on B, B runs the question again with
        # the thread's history so far, and answers it.
        retry = c.find_button("C1", foreground, "baton_retry_run")
        assert retry is not None, c.thread_text("C1", foreground)
        c.llm.responder = None
        c.llm.script(Reply(text="ANSWER-AFTER-RETRY"))
        assert await c.click(b, retry) == 200
        await c.until(
            lambda: "ANSWER-AFTER-RETRY" in c.thread_text("C1", foreground),
            what="the retried question answered by B",
        )
        asked = text_of(c.llm.requests[-1].messages)
        assert asked.count("a long question") == 1, asked


async def test_a_rolling_restart_loses_nothing(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        a = (await c.start(1, BATON_SHUTDOWN_GRACE_S="15"))[0]
        b = (await c.start(1))[0]

        def respond(request: RecordedRequest) -> Reply:
            if "the deploy's question" in text_of(request.messages):
                return Reply(text="ANSWER-FROM-A: took two seconds.", delay=2.0)
            return Reply(text="ANSWER-FROM-B: the retry was answered.")

        c.llm.responder = respond
        first = await c.mention(a, "the deploy's question")
        await c.until(lambda: len(c.llm.requests) == 1, what="A's turn under way")
        stopped = c.terminate(a)
        async with asyncio.timeout(5):
            while True:  # until A has taken the signal
                async with c.http.get(f"{a.url}/healthz") as health:
                    if health.status == 503:
                        break
                await asyncio.sleep(0.05)
        # Slack delivers a new mention to A while it drains: 503, so Slack tries again,
        # and its retry lands on B.
        event = c.mention_event("a question during the deploy")
        assert await c.send_event(a, event, event_id="EvDeploy") == 503, c.logs()
        assert time.monotonic() - stopped < 2, "A took the new mention's 503 after its turn"
        assert await c.send_event(b, event, event_id="EvDeploy", retry=1) == 200, c.logs()

        assert await c.exit_code(a, within=30) == 0, a.log()
        await c.until(
            lambda: "ANSWER-FROM-A" in c.thread_text("C1", first)
            and "✓ Done" in c.thread_text("C1", first),
            what="A's turn finished",
        )  # fmt: skip
        await c.until(
            lambda: "ANSWER-FROM-B" in c.thread_text("C1", event["ts"])
            and "✓ Done" in c.thread_text("C1", event["ts"]),
            what="the retried mention answered by B",
        )  # fmt: skip
        for ts in (first, event["ts"]):
            thread = c.thread_text("C1", ts)
            assert "Cancelled" not in thread and "Interrupted" not in thread, thread
        assert len(c.llm.requests) == 2, json.dumps([r.messages[-1] for r in c.llm.requests])
        assert b.running
