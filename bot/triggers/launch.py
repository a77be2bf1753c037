"""How a trigger starts a run: through the turn machine, as a mention would.

A schedule's or webhook's run answers in a thread of its own: a new top-level message
names the trigger, and is the run's question. A watched channel's run answers in the
thread of the message that started it. Either way the message is stored first (storing
is the claim: the same message never starts two runs) and the run is its owner's: their
access, limits and daily budget apply, and it counts toward `limits`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from bot.sessions.turns import TurnMachine
from bot.store import SessionKey
from bot.store.thread_inbox import Inbound, ThreadMessage

logger = logging.getLogger(__name__)

KINDS = ("schedule", "webhook", "watch")


def trigger_key(kind: str, name: str) -> str:
    """How runs and messages name the trigger that started them: `schedule:<name>`,
    `webhook:<name>`, `watch:<channel>`."""
    if kind not in KINDS:
        raise ValueError(f"no trigger kind {kind!r}")
    return f"{kind}:{name}"


def trigger_of(author_id: str) -> str | None:
    """How the model is told who wrote a trigger's message (`author_id` is its trigger
    key); None when a person (or the forge) wrote it."""
    kind, colon, name = author_id.partition(":")
    if not colon or kind not in KINDS:
        return None
    if kind == "watch":
        return f"Baton's watch of channel <#{name}>"
    return f"Baton's {kind} {name}"


def describe_trigger(trigger: str) -> str:
    """A trigger key in words, for people: "schedule deps-report"."""
    kind, _, name = trigger.partition(":")
    return f"watched channel <#{name}>" if kind == "watch" else f"{kind} {name}"


class Announcer(Protocol):
    """What a trigger needs of the surface: a new top-level message in a channel."""

    async def announce(self, channel_id: str, text: str) -> str:
        """Post `text` (naming the trigger); the message's ts. Raises when it cannot."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Launch:
    """A run a trigger starts.

    Attributes:
        trigger: Its key (`trigger_key`).
        channel_id: Where it answers.
        owner: Whom it runs for: their access, limits and budget apply.
        prompt: What the model is given (data from outside already marked as data).
        agent: A sub-agent to run directly (`@agent`), or "" for the main agent.
        announcement: The top-level message that names the trigger (its thread is the
            run's); None when `ts` is given.
        ts: The message that started it and whose thread it answers in (a watched
            channel's); None to post `announcement`.
        files: Files attached to that message.
        team_id: The workspace of the thread's conversation, when the event that
            started it says (a watched channel's); else the workspace of Baton's token.
    """

    trigger: str
    channel_id: str
    owner: str
    prompt: str
    agent: str = ""
    announcement: str | None = None
    ts: str | None = None
    files: Sequence[dict[str, Any]] = field(default_factory=tuple)
    team_id: str | None = None


@dataclass(frozen=True, slots=True)
class Stored:
    """A trigger's message, stored: `message` is None when it was stored already (the
    same message came again), and nothing starts."""

    ts: str
    message: ThreadMessage | None


class Launcher:
    """Starts the runs of every trigger through the one turn machine."""

    def __init__(
        self,
        turns: TurnMachine,
        announcer: Announcer,
        *,
        team_id: Callable[[], Awaitable[str | None]],
    ) -> None:
        """`team_id`: the workspace's id (a thread's session is named by it, so that the
        replies people write in the thread join the same conversation)."""
        self.turns = turns
        self.announcer = announcer
        self.team_id = team_id

    async def store(self, launch: Launch) -> Stored:
        """Post the announcement (unless the run answers an existing message) and store
        the run's question. Slack's and the database's errors propagate: nothing runs."""
        if launch.ts is None:
            if launch.announcement is None:
                raise ValueError("a launch needs an announcement or the ts of its message")
            ts = await self.announcer.announce(launch.channel_id, launch.announcement)
        else:
            ts = launch.ts
        team = launch.team_id or await self.team_id() or "-"
        key = SessionKey.slack_thread(team_id=team, channel_id=launch.channel_id, thread_ts=ts)
        text = f"@{launch.agent} {launch.prompt}" if launch.agent else launch.prompt
        message = Inbound(
            session_key=key.key,
            channel_id=launch.channel_id,
            thread_ts=ts,
            ts=ts,
            user_id=launch.owner,
            author_id=launch.trigger,
            text=text,
            team_id=team,
            # The owner is of the workspace (access checks it): their answer streams there.
            user_team=team,
            files=tuple(launch.files),
            addressed=True,
            trigger=launch.trigger,
        )
        return Stored(ts, await self.turns.intake(message))

    def start(self, stored: ThreadMessage) -> None:
        """Dispatch a stored question in a task of the turn machine (its owner's access
        and budget are checked there; a refusal is said in the thread)."""
        self.turns.spawn(self.turns.dispatch(stored), f"trigger-{stored.id}", run=True)

    async def launch(self, launch: Launch) -> Stored:
        """Store and start; what was stored."""
        stored = await self.store(launch)
        if stored.message is not None:
            self.start(stored.message)
        return stored
