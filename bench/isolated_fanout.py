"""Isolated fan-out: 16 background children, each in its own git worktree, editing the
same file, whose model takes 2 s per answer.

Run: `make bench` or `.venv/bin/python -m bench.isolated_fanout [--children N] [--latency S]
[--database-url postgresql://…]`.
Prints the wall time from the start of the main agent's turn to the last child's
result (worktree made, file edited, handoff submitted, work committed on its branch),
against the ideal (one latency): the target is within 1.2x.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from bench.settings import bench_settings
from bot.app import build_baton
from bot.config import PermissionsConfig
from bot.store import SessionKey
from tests.fakes.openai_api import FakeOpenAI, RecordedRequest, Reply, ToolCallSpec

MAIN_MARK = "You are Baton"
CODER = "---\nname: coder\ndescription: Edits files.\nisolation: worktree\n---\nBENCH-CODER\n"


def _repo(workspace: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(workspace), *args], check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    (workspace / "shared.txt").write_text("base\n")
    git("add", "shared.txt")
    git("-c", "user.name=Bench", "-c", "user.email=bench@localhost", "commit", "-q", "-m", "base")


async def measure(
    children: int, latency: float, database_url: str | None = None
) -> tuple[float, int]:
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
                            {"subagent_type": "coder", "prompt": f"job {n}", "background": True},
                        )
                        for n in range(children)
                    ]
                    return Reply(tool_calls=calls)
                return Reply(text="started")
            if any(m.get("role") == "tool" for m in request.messages):
                return Reply(text="edited")
            job = str(request.messages[1]["content"])
            # One model answer of `latency` per child: it writes its edit and submits its
            # handoff in the same response, then ends with a short line.
            handoff = {"status": "complete", "answer": f"wrote {job}", "evidence": ["shared.txt"]}
            return Reply(
                tool_calls=[
                    ToolCallSpec("write_file", {"path": "shared.txt", "content": f"{job}\n"}),
                    ToolCallSpec("submit_result", handoff),
                ],
                delay=latency,
            )

        fake.responder = respond
        with tempfile.TemporaryDirectory() as directory:
            root = Path(directory)
            (root / "ws").mkdir()
            (root / "agents").mkdir()
            (root / "agents" / "coder.md").write_text(CODER)
            _repo(root / "ws")
            settings = bench_settings(
                root,
                fake.url,
                max_background_tasks=children,
                agent_dirs=(root / "agents",),
                permissions=PermissionsConfig(allow=("write_file",)),
                **({"database_url": database_url} if database_url else {}),
            )
            baton = await build_baton(settings)
            try:
                key = SessionKey.terminal("bench")
                started = datetime.now(UTC)
                async for _ in baton.conversations.run_turn(key, "fan out"):
                    pass
                await baton.tracker.wait_for_children()
                # Every child's result recorded (its work committed on its branch, its
                # ending written): the children's tasks return only then.
                finished = datetime.now(UTC)
                session = await baton.conversations.store.get_or_create(key)
                tasks = await baton.tracker.list(session_id=session.id, limit=children + 1)
            finally:
                await baton.close()
            listed = await asyncio.to_thread(
                subprocess.run,
                ["git", "-C", str(root / "ws"), "branch", "--list", "baton/*"],
                check=True,
                capture_output=True,
                text=True,
            )
            branches = listed.stdout.split()
        states = {t.state for t in tasks}
        if len(tasks) != children or states != {"completed"}:
            raise SystemExit(f"expected {children} completed tasks, got {len(tasks)}: {states}")
        first = min(t.created_at for t in tasks)
        last_created = max(t.created_at for t in tasks)
        spans = sorted((t.finished_at - t.created_at).total_seconds() for t in tasks)  # type: ignore[operator]
        print(
            f"tasks recorded {(first - started).total_seconds():.2f} to "
            f"{(last_created - started).total_seconds():.2f} s after the start; "
            f"each ran {spans[0]:.2f} to {spans[-1]:.2f} s"
        )
        return (finished - started).total_seconds(), len(branches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--children", type=int, default=16)
    parser.add_argument("--latency", type=float, default=2.0)
    parser.add_argument(
        "--database-url",
        help="an empty database to use instead of a fresh SQLite file (postgresql://…)",
    )
    args = parser.parse_args()
    wall, branches = asyncio.run(measure(args.children, args.latency, args.database_url))
    ideal = args.latency
    print(f"{args.children} isolated background children, model latency {ideal:.1f} s each")
    print(f"branches with their own change {branches}")
    print(f"wall time                {wall:6.2f} s")
    print(f"ideal (all in parallel)  {ideal:6.2f} s   ratio {wall / ideal:.2f}x (target 1.20x)")


if __name__ == "__main__":
    main()
