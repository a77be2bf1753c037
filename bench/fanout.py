"""Fan-out: 16 background sub-agents whose model takes 1 s each.

Run: `make bench` or `.venv/bin/python -m bench.fanout [--children N] [--latency S]
[--repeats R]`.

Engine: the wall time from the main agent's `task` calls to the last child's finish,
against the ideal (one latency) and the sequential time (N latencies).

Through Slack: the bot as deployed (tests/slack/harness.py: signed events over HTTP, the
fake Slack Web API, Slack's real rate limits in `RateBudget()`), one mention whose turn
starts the N children in the background; the time from the first child's model request
to the last child's result posted in the thread (median of R runs), against the ideal:
one model latency, every result in the thread as soon as the children end. Measured
twice: children that hand their result back with `submit_result` in their one answer,
as their prompt tells them, and children that only answer in text (Baton then asks each
once for its handoff: one more model call each).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.settings import bench_settings
from bot.app import build_baton
from bot.slack.rate_budget import CHANNEL_MESSAGES, CHANNEL_METHODS, RateBudget
from bot.slack.thread_surface import REVEAL_AFTER_S
from bot.store import SessionKey
from tests.fakes.openai_api import FakeOpenAI, RecordedRequest, Reply, ToolCallSpec
from tests.fakes.slack_api import RecordedCall
from tests.slack.harness import SlackHarness, start_harness, until

MAIN_MARK = "You are Baton"
RESULT = "Result of job"
RESULTS = re.compile(rf"{RESULT} (\d+)")
# At Slack's real pace results may take a while: wait this long at most.
SETTLE_S = 120.0


async def measure(children: int, latency: float) -> float:
    async with FakeOpenAI() as fake:
        main_calls = 0

        def respond(request: RecordedRequest) -> Reply:
            nonlocal main_calls
            if str(request.messages[0]["content"]).startswith(MAIN_MARK):
                main_calls += 1
                if main_calls == 1:
                    calls = [
                        ToolCallSpec(
                            "task",
                            {"subagent_type": "explore", "prompt": f"job {n}", "background": True},
                        )
                        for n in range(children)
                    ]
                    return Reply(tool_calls=calls)
                return Reply(text="started")
            return Reply(text="child result", delay=latency)

        fake.responder = respond
        with tempfile.TemporaryDirectory() as directory:
            root = Path(directory)
            (root / "ws").mkdir()
            settings = bench_settings(root, fake.url, max_background_tasks=children)
            baton = await build_baton(settings)
            try:
                key = SessionKey.terminal("bench")
                started = time.perf_counter()
                async for _ in baton.conversations.run_turn(key, "fan out"):
                    pass
                turn_done = time.perf_counter()
                await baton.tracker.wait_for_children()
                finished = time.perf_counter()
                session = await baton.conversations.store.get_or_create(key)
                tasks = await baton.tracker.list(session_id=session.id, limit=children + 1)
            finally:
                await baton.close()
        states = {t.state for t in tasks}
        if len(tasks) != children or states != {"completed"}:
            raise SystemExit(f"expected {children} completed tasks, got {len(tasks)}: {states}")
        print(f"turn returned after      {turn_done - started:6.2f} s (does not wait for children)")
        return finished - started


class TimedCalls(list[RecordedCall]):
    """The fake Slack's call log, with the time each call arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def append(self, call: RecordedCall) -> None:
        self.times.append(time.perf_counter())
        super().append(call)

    def clear(self) -> None:
        self.times.clear()
        super().clear()


@dataclass(frozen=True, slots=True)
class SlackFanout:
    """One fan-out through Slack, in seconds from the first child's model request."""

    last_result: float  # the last result posted in the thread
    slack_floor: float  # the earliest Slack's channel limit lets a result be posted
    messages: int  # the Slack messages that carried the results

    def ideal(self, latency: float) -> float:
        """Every child ends one model latency in and its result goes out at once, unless
        Slack's channel limit allows no message so soon."""
        return max(latency, self.slack_floor)


def child_task(n: int) -> ToolCallSpec:
    arguments = {"subagent_type": "explore", "prompt": f"job {n}", "background": True}
    return ToolCallSpec("task", arguments)


async def measure_slack(children: int, latency: float, *, submit: bool = True) -> SlackFanout:
    """One mention whose turn starts `children` background children, through the bot as
    deployed, at Slack's real pace."""
    with tempfile.TemporaryDirectory() as directory:
        harnesses = start_harness(
            Path(directory),
            rate_budget=RateBudget(),
            reveal_after_s=REVEAL_AFTER_S,
            max_background_tasks=children,
        )
        async with contextlib.aclosing(harnesses):
            async for harness in harnesses:
                return await fan_out(harness, children, latency, submit=submit)
    raise AssertionError("the harness did not start")


def child_answer(job: str, latency: float, *, submit: bool) -> Reply:
    """A child's one answer: its result handed back with submit_result, or as text."""
    text = f"{RESULT} {job}."
    if not submit:
        return Reply(text=text, delay=latency)
    handoff = {"status": "complete", "answer": text, "evidence": [f"job {job}"]}
    return Reply(tool_calls=[ToolCallSpec("submit_result", handoff)], delay=latency)


async def fan_out(
    harness: SlackHarness, children: int, latency: float, *, submit: bool
) -> SlackFanout:
    harness.slack.calls = calls = TimedCalls()
    child_requests: list[float] = []
    main_requests: list[float] = []

    def respond(request: RecordedRequest) -> Reply:
        if str(request.messages[0]["content"]).startswith(MAIN_MARK):
            main_requests.append(time.perf_counter())
            if len(main_requests) == 1:
                return Reply(tool_calls=[child_task(n) for n in range(children)])
            return Reply(text="Started them.")
        child_requests.append(time.perf_counter())
        job = str(request.messages[-1]["content"]).rpartition("job ")[2]
        return child_answer(job.strip(), latency, submit=submit)

    harness.llm.responder = respond
    await harness.mention("fan out")
    await until(lambda: len(results_posted(calls)) == children, within=SETTLE_S)
    await harness.settle(within=SETTLE_S)
    first = min(child_requests)
    posted = results_posted(calls)
    # Slack's floor: the run posts its progress message when asked, its answer once the
    # model gave it (at the earliest an interval after the progress message), and a
    # result an interval after that.
    interval = CHANNEL_MESSAGES.interval
    progress = min(
        at for call, at in zip(calls, calls.times, strict=True) if call.method in CHANNEL_METHODS
    )
    answer = max(main_requests[-1], progress + interval)
    return SlackFanout(
        last_result=max(posted.values()) - first,
        slack_floor=answer + interval - first,
        messages=len(set(posted.values())),
    )


def results_posted(calls: TimedCalls) -> dict[str, float]:
    """When each child's result was posted in the thread, by job number."""
    posted: dict[str, float] = {}
    for call, at in zip(calls, calls.times, strict=True):
        if call.method == "chat.postMessage" and call.ok:
            for job in RESULTS.findall(json.dumps(call.params)):
                posted.setdefault(job, at)
    return posted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--children", type=int, default=16)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    wall = asyncio.run(measure(args.children, args.latency))
    ideal = args.latency
    sequential = args.children * args.latency
    print(f"{args.children} background children, model latency {args.latency:.1f} s each")
    print(f"wall time                {wall:6.2f} s")
    print(f"ideal (all in parallel)  {ideal:6.2f} s   overhead {wall - ideal:+.2f} s")
    print(f"sequential               {sequential:6.2f} s   speed-up {sequential / wall:.1f}x")
    print(
        f"through Slack (signed events, fake Slack at Slack's real rate limits), median of "
        f"{args.repeats}; ideal: the model latency ({args.latency:.2f} s), or when later the "
        "first message Slack's channel limit allows after the run's own progress message "
        "and answer"
    )
    for submit, how in ((True, "submit_result"), (False, "text only, asked for a handoff")):
        runs = [
            asyncio.run(measure_slack(args.children, args.latency, submit=submit))
            for _ in range(args.repeats)
        ]
        took = statistics.median(r.last_result for r in runs)
        ideal_slack = statistics.median(r.ideal(args.latency) for r in runs)
        ratio = statistics.median(r.last_result / r.ideal(args.latency) for r in runs)
        messages = statistics.median(r.messages for r in runs)
        print(
            f"children ending with {how}: first child request to last result posted "
            f"{took:6.2f} s   {ratio:.2f}x the ideal ({ideal_slack:.2f} s); the "
            f"{args.children} results came in {messages:g} message(s)"
        )
        target = args.latency + CHANNEL_MESSAGES.interval
        verdict = "met" if took <= target else "NOT met"
        print(
            f"=== target: within the model latency plus one channel interval "
            f"({target:.2f} s): {verdict}"
        )


if __name__ == "__main__":
    main()
