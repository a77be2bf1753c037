"""Fan-out: 16 background sub-agents whose model takes 1 s each.

Run: `make bench` or `.venv/bin/python -m bench.fanout [--children N] [--latency S]`.
Prints the wall time from the main agent's `task` calls to the last child's
finish, against the ideal (one latency) and the sequential time (N latencies).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from bot.app import build_baton
from bot.config import PermissionsConfig, SandboxConfig, Settings
from bot.store import SessionKey
from tests.fakes.openai_api import FakeOpenAI, RecordedRequest, Reply, ToolCallSpec

MAIN_MARK = "You are Baton"


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
            settings = Settings(
                slack_bot_token=None,
                slack_signing_secret=None,
                slack_app_token=None,
                slack_api_url="http://127.0.0.1:9/api/",
                port=3000,
                openai_api_key="sk-bench",
                openai_base_url=fake.url,
                model="fake-model",
                database_url=f"sqlite:///{root / 'bench.db'}",
                database_origin="explicit",
                state_dir=root / "state",
                workspace=root / "ws",
                config_path=None,
                max_turns=50,
                max_background_tasks=children,
                approval_timeout_s=600,
                approvers=(),
                agent_dirs=(),
                permissions=PermissionsConfig(),
                sandbox=SandboxConfig(),
            )
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--children", type=int, default=16)
    parser.add_argument("--latency", type=float, default=1.0)
    args = parser.parse_args()
    wall = asyncio.run(measure(args.children, args.latency))
    ideal = args.latency
    sequential = args.children * args.latency
    print(f"{args.children} background children, model latency {args.latency:.1f} s each")
    print(f"wall time                {wall:6.2f} s")
    print(f"ideal (all in parallel)  {ideal:6.2f} s   overhead {wall - ideal:+.2f} s")
    print(f"sequential               {sequential:6.2f} s   speed-up {sequential / wall:.1f}x")


if __name__ == "__main__":
    main()
