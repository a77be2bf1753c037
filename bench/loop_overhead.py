"""Loop overhead: what Baton's agent loop costs per LLM round trip, against a bare loop.

Run: `make bench` or `.venv/bin/python -m bench.loop_overhead [--trips N] [--repeats R]`.

Both loops talk to the same zero-latency fake model (tests/fakes/openai_api.py) over
real HTTP and make the same N round trips: the model asks for `read_file` on a small
file, the result goes back, the model is called again, and the last call answers.

- bare: the `openai` AsyncOpenAI client alone, streaming as Baton does, with Baton's
  system prompt and tool schemas in every request, reading the file itself.
- baton: a main-agent turn as a Slack run drives it (`Conversations.run_turn` with the
  run's token meter, the sub-agent progress sink, the steering inbox and the approval
  function), so the history, the usage ledger, the hooks and the token fitting all run.

Prints the median time per round trip of each over R repeats, and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openai import AsyncOpenAI

from bench.settings import bench_settings
from bot.access.budgets import RunBudget
from bot.app import Baton, build_baton
from bot.config import Settings
from bot.engine import ApprovalDecision, ApprovalRequest, Done
from bot.sessions.main_agent import Turn
from bot.store import SessionKey
from tests.fakes.openai_api import FakeOpenAI, RecordedRequest, Reply, ToolCallSpec

FILE = "notes.txt"
CONTENT = "".join(f"line {n}: the quick brown fox jumps over the lazy dog\n" for n in range(20))
PROMPT = "[Ann <@U1>] Read notes.txt a few times, then answer."


def settings_for(root: Path, url: str) -> Settings:
    return bench_settings(root, url, max_turns=1000, max_background_tasks=4)


def script(fake: FakeOpenAI, trips: int) -> None:
    """Every conversation: `trips - 1` calls of read_file, then an answer."""

    def respond(request: RecordedRequest) -> Reply:
        calls = sum(1 for m in request.messages if m.get("role") == "assistant")
        if calls + 1 < trips:
            return Reply(tool_calls=[ToolCallSpec("read_file", {"path": FILE})])
        return Reply(text="All read.")

    fake.responder = respond


async def bare_loop(
    client: AsyncOpenAI, system: str, tools: list[dict[str, Any]], output: str, workspace: Path
) -> int:
    """The round trips with the openai client alone; returns the calls made.

    Each call's result is `output`, what Baton's read_file gives (numbered lines), after
    reading the file as read_file does, so both loops send the same requests.
    """
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": PROMPT},
    ]
    made = 0
    while True:
        stream = await client.chat.completions.create(
            model="fake-model",
            messages=messages,  # type: ignore[arg-type]
            tools=tools,  # type: ignore[arg-type]
            parallel_tool_calls=True,
            stream=True,
            stream_options={"include_usage": True},
        )
        made += 1
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        async for chunk in stream:
            for choice in chunk.choices:
                delta = choice.delta
                if delta.content:
                    text.append(delta.content)
                for piece in delta.tool_calls or ():
                    call = calls.setdefault(piece.index, {"id": "", "name": "", "arguments": ""})
                    call["id"] = piece.id or call["id"]
                    if piece.function is not None:
                        call["name"] += piece.function.name or ""
                        call["arguments"] += piece.function.arguments or ""
        if not calls:
            return made
        messages.append(
            {
                "role": "assistant",
                "content": "".join(text) or None,
                "tool_calls": [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["name"], "arguments": c["arguments"]},
                    }
                    for c in calls.values()
                ],
            }
        )
        for call in calls.values():
            path = json.loads(call["arguments"])["path"]
            await asyncio.to_thread((workspace / path).read_text)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})


async def approve(request: ApprovalRequest) -> ApprovalDecision:
    return ApprovalDecision(approved=True, message="approved")


async def baton_turn(baton: Baton, n: int) -> int:
    """One main-agent turn as a Slack run drives it; returns the LLM calls made."""
    key = SessionKey.slack_thread(team_id="T1", channel_id="C1", thread_ts=f"{n}.0")
    meter = RunBudget(usage=baton.usage, limit=0, run_id=f"run{n}", user_id="U1", channel_id="C1")
    done: Done | None = None
    async for event in baton.conversations.run_turn(
        key,
        PROMPT,
        meter=meter,
        user_id="U1",
        approval=approve,
        progress=lambda update: None,
        inbox=list,
    ):
        if isinstance(event, Done):
            done = event
    assert done is not None and done.stop_reason == "completed", done
    return done.turns


@dataclass(frozen=True, slots=True)
class Timing:
    """Seconds per round trip: wall time, and CPU time of the whole process (every thread,
    the fake model's server included), which other work on the machine disturbs less."""

    wall: float
    cpu: float

    @staticmethod
    def median(timings: list[Timing]) -> Timing:
        return Timing(
            wall=statistics.median(t.wall for t in timings),
            cpu=statistics.median(t.cpu for t in timings),
        )


@contextmanager
def timed(into: list[Timing]) -> Iterator[list[int]]:
    """Time the block; it appends the LLM calls it made to the list it is given."""
    calls: list[int] = []
    wall, cpu = time.perf_counter(), time.process_time()
    yield calls
    made = calls[0]
    into.append(Timing((time.perf_counter() - wall) / made, (time.process_time() - cpu) / made))


async def measure(trips: int, repeats: int, profile: str | None) -> tuple[Timing, Timing]:
    async with FakeOpenAI() as fake:
        script(fake, trips)
        with tempfile.TemporaryDirectory() as directory:
            root = Path(directory)
            (root / "ws").mkdir()
            (root / "ws" / FILE).write_text(CONTENT)
            baton = await build_baton(settings_for(root, fake.url))
            client = AsyncOpenAI(api_key="sk-bench", base_url=fake.url, max_retries=0)
            # The bare loop sends what Baton's main agent sends: its prompt and tools.
            agent = baton.conversations.main_agent
            session = await baton.conversations.store.get_or_create(SessionKey.terminal("x"))
            engine = agent.build_engine(Turn(session=session))
            system, tools = engine.system_prompt, engine.tools.schemas()
            read_file = engine.tools.get("read_file")
            assert read_file is not None
            output = await read_file.run(read_file.parse_arguments(json.dumps({"path": FILE})))
            try:
                # Warm up: connections, imports, the database's first writes.
                await bare_loop(client, system, tools, output, root / "ws")
                await baton_turn(baton, -1)
                bare: list[Timing] = []
                ours: list[Timing] = []
                for n in range(repeats):
                    with timed(bare) as calls:
                        calls.append(await bare_loop(client, system, tools, output, root / "ws"))
                    profiler = cProfile.Profile() if profile and n == repeats - 1 else None
                    with timed(ours) as calls:
                        if profiler is not None:
                            profiler.enable()
                        calls.append(await baton_turn(baton, n))
                        if profiler is not None:
                            profiler.disable()
                            profiler.dump_stats(profile)
                    if calls[0] != trips:
                        raise SystemExit(f"expected {trips} LLM calls, Baton made {calls[0]}")
            finally:
                await client.close()
                await baton.close()
    return Timing.median(bare), Timing.median(ours)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trips", type=int, default=30, help="LLM calls per turn")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--profile", help="write a cProfile of the last Baton turn here")
    args = parser.parse_args()
    bare, ours = asyncio.run(measure(args.trips, args.repeats, args.profile))
    print(f"{args.trips} LLM round trips a turn, zero-latency fake model, median of {args.repeats}")
    print("per round trip       wall time    CPU time")
    for name, timing in (("bare openai loop", bare), ("Baton main agent", ours)):
        print(f"{name:18} {timing.wall * 1000:8.1f} ms {timing.cpu * 1000:8.1f} ms")
    print(
        f"ratio              {ours.wall / bare.wall:8.2f}x {ours.cpu / bare.cpu:9.2f}x   "
        f"(overhead {(ours.wall - bare.wall) * 1000:+.1f} ms wall, "
        f"{(ours.cpu - bare.cpu) * 1000:+.1f} ms CPU)"
    )
    if args.profile:
        pstats.Stats(args.profile).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
