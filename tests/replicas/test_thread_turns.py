"""One thread, two replicas: a thread runs one turn at a time across all replicas, and
a reply that lands on another replica steers the run (DESIGN.md, Scale).

Written against the intended behaviour (issue 12) while it is being built in
bot/slack/threads.py: until it lands these fail.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from tests.fakes.openai_api import RecordedRequest, Reply, ToolCallSpec
from tests.replicas.harness import cluster, is_main, text_of


@dataclass
class Call:
    request: RecordedRequest
    began: float
    ended: float | None = None


def contents(request: RecordedRequest) -> list[str]:
    return [text_of(m.get("content")) for m in request.messages[1:]]


def count(request: RecordedRequest, needle: str) -> int:
    return sum(content.count(needle) for content in contents(request))


async def test_two_mentions_of_a_thread_on_two_replicas_run_one_after_the_other(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path) as c:
        a, b = await c.start(2)
        calls: list[Call] = []

        async def respond(request: RecordedRequest) -> Reply:
            call = Call(request, time.monotonic())
            calls.append(call)
            try:
                if "SECOND" in contents(request)[-1]:
                    return Reply(text="ANSWER-TWO")
                await asyncio.sleep(3)  # the first turn's model takes 3 s
                return Reply(text="ANSWER-ONE")
            finally:
                call.ended = time.monotonic()

        c.llm.responder = respond
        root = await c.mention(a, "FIRST question")
        await c.until(lambda: len(calls) == 1, what="the first turn's model call")
        await asyncio.sleep(0.5)
        await c.mention(b, "SECOND question", thread_ts=root)
        await c.until(
            lambda: "ANSWER-TWO" in c.thread_text("C1", root), within=30, what="both answers"
        )
        await c.quiet()  # a stray third turn would have shown itself
        main = [call for call in calls if is_main(call.request)]
        assert len(main) == 2, [contents(call.request) for call in main]
        first, second = main
        assert first.ended is not None
        # Never two turns of the thread at once: the second call only after the first ended.
        assert second.began >= first.ended, (
            f"the second turn called the model {first.ended - second.began:.2f} s before "
            f"the first turn's call ended\n{c.logs()}"
        )
        assert count(first.request, "SECOND") == 0
        last = main[-1].request
        history = contents(last)
        order = [
            next(i for i, text in enumerate(history) if needle in text)
            for needle in ("FIRST question", "ANSWER-ONE", "SECOND question")
        ]
        assert order == sorted(order), history
        for needle in ("FIRST question", "ANSWER-ONE", "SECOND question"):
            assert count(last, needle) == 1, (needle, history)
        thread = c.thread_text("C1", root)
        assert thread.index("ANSWER-ONE") < thread.index("ANSWER-TWO"), thread
        assert "Cancelled" not in thread and "Interrupted" not in thread, thread


async def test_a_reply_on_the_other_replica_steers_the_run(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        a, b = await c.start(2)
        main: list[RecordedRequest] = []

        async def respond(request: RecordedRequest) -> Reply:
            main.append(request)
            if len(main) == 1:  # the turn's first call: a tool call, after 3 s
                return Reply(tool_calls=[ToolCallSpec("list_dir", {"path": "."})], delay=3.0)
            return Reply(text="Done, with the steering taken into account.")

        c.llm.responder = respond
        root = await c.mention(a, "list the files")
        await c.until(lambda: len(main) == 1, what="A's first model call")
        await asyncio.sleep(0.5)
        steer = await c.reply(b, "STEER-ME: only the Python files please", thread_ts=root)
        await c.until(
            lambda: "Done, with the steering" in c.thread_text("C1", root),
            within=30, what="A's answer",
        )  # fmt: skip
        assert len(main) == 2, [contents(r) for r in main]
        assert count(main[0], "STEER-ME") == 0
        assert count(main[1], "STEER-ME") == 1, (contents(main[1]), c.logs())
        await c.until(
            lambda: "eyes" in c.slack.reactions.get(("C1", steer), []),
            within=5, what="the 👀 on the steering message",
        )  # fmt: skip
        await c.quiet()
        assert len(main) == 2, "the steering message also started a turn of its own"
        thread = c.thread_text("C1", root)
        assert "Not handled" not in thread, thread
