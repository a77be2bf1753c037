"""Helpers for sub-agent tests: route fake-model replies to the main agent or to children."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.app import Baton, build_baton
from bot.engine import RunEvent
from bot.store import SessionKey
from bot.store.tasks import TaskRecord
from tests.conftest import make_settings
from tests.fakes.openai_api import FakeOpenAI, RecordedRequest, Reply, ScriptedReply

MAIN_MARK = "You are Baton"
THREAD = SessionKey.slack_thread(team_id="T1", channel_id="C1", thread_ts="100.1")
OTHER_THREAD = SessionKey.slack_thread(team_id="T1", channel_id="C2", thread_ts="200.2")

Handler = Callable[[RecordedRequest], ScriptedReply | Awaitable[ScriptedReply]]


def is_main(request: RecordedRequest) -> bool:
    return str(request.messages[0].get("content", "")).startswith(MAIN_MARK)


def agent_of(request: RecordedRequest) -> str:
    """Which agent made a request: 'main', or the first line of a child's system prompt."""
    return "main" if is_main(request) else str(request.messages[0]["content"]).splitlines()[0]


@dataclass
class Router:
    """Scripted replies per agent: `main` for the main agent, else keyed by the child's prompt."""

    fake: FakeOpenAI
    main: list[ScriptedReply | Handler] = field(default_factory=list)
    children: dict[str, list[ScriptedReply | Handler]] = field(default_factory=dict)
    default_child: Handler | None = None

    def __post_init__(self) -> None:
        self.fake.responder = self.respond

    async def respond(self, request: RecordedRequest) -> ScriptedReply:
        if is_main(request):
            queue = self.main
        else:
            system = str(request.messages[0]["content"])
            queue = next((q for mark, q in self.children.items() if mark in system), [])
            if not queue and self.default_child is not None:
                return await _resolve(self.default_child, request)
        if not queue:
            raise AssertionError(f"no reply scripted for {agent_of(request)!r}")
        item = queue.pop(0)
        return await _resolve(item, request)

    def main_requests(self) -> list[RecordedRequest]:
        return [r for r in self.fake.requests if is_main(r)]

    def child_requests(self) -> list[RecordedRequest]:
        return [r for r in self.fake.requests if not is_main(r)]


async def _resolve(item: Any, request: RecordedRequest) -> ScriptedReply:
    if callable(item):
        result = item(request)
        if asyncio.iscoroutine(result):
            result = await result
        return result
    return item


async def make_baton(tmp_path: Path, fake: FakeOpenAI, **overrides: Any) -> Baton:
    return await build_baton(make_settings(tmp_path, fake.url, **overrides))


async def run_turn(
    baton: Baton, text: str, key: SessionKey = THREAD, **kwargs: Any
) -> list[RunEvent]:
    return [e async for e in baton.conversations.run_turn(key, text, **kwargs)]


async def wait_finished(baton: Baton, task_id: str) -> TaskRecord:
    async def poll() -> TaskRecord:
        while True:
            detail = await baton.tracker.get(task_id)
            if detail is not None and detail.task.state != "running":
                await baton.tracker.wait_for_children()
                return detail.task
            await asyncio.sleep(0.02)

    return await asyncio.wait_for(poll(), 10)


def reply(text: str = "", **kwargs: Any) -> Reply:
    return Reply(text=text, **kwargs)


def numbered_lines(size: int) -> str:
    """`size` characters of distinct numbered lines, so a cut anywhere shows; every tenth
    line holds markup to escape (`<b>&amp;</b>`), so escaping cannot shift what is read."""
    lines = []
    total = number = 0
    while total < size:
        number += 1
        extra = " <b>&amp;</b>" if number % 10 == 0 else ""
        line = f"line {number:05d} of the long answer{extra} ..........................."
        lines.append(line)
        total += len(line) + 1
    text = "\n".join(lines)[:size]
    return text[:-1] + "!" if text[-1].isspace() else text
