"""Schedules: each fire time fires once across every replica (SKELETON: being built)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from bot.sessions.turns import TriggerEnd
from bot.store.schedules import ScheduleStore
from bot.triggers.book import TriggerBook
from bot.triggers.clock import SYSTEM_CLOCK, Clock
from bot.triggers.launch import Launcher

# Tell a person something in a direct message from Baton (its owner, of a paused schedule).
TellOwner = Callable[[str, str], Awaitable[None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleInfo:
    """A schedule as people see it listed."""

    name: str
    cron: str
    timezone: str
    channel_id: str
    prompt: str
    agent: str
    owner: str
    source: Literal["baton.yaml", "slack"]
    created_by: str | None
    paused: bool
    paused_by: str | None  # a user id, or "failures"
    failures: int
    next_fire: datetime | None
    last_fire: datetime | None
    shadowed: bool = False  # a Slack-made schedule whose name baton.yaml now uses


class Scheduler:
    """Fires the schedules of baton.yaml and Slack."""

    def __init__(
        self,
        *,
        book: TriggerBook,
        store: ScheduleStore,
        launcher: Launcher,
        instance_id: str,
        tell_owner: TellOwner,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.book = book
        self.store = store
        self.launcher = launcher
        self.instance_id = instance_id
        self.tell_owner = tell_owner
        self.clock = clock

    async def tick(self) -> None:
        raise NotImplementedError

    async def run(self) -> None:
        raise NotImplementedError

    async def ended(self, end: TriggerEnd) -> None:
        raise NotImplementedError

    async def listing(
        self, *, channel_id: str | None = None, owner: str | None = None
    ) -> list[ScheduleInfo]:
        raise NotImplementedError

    async def create(
        self,
        *,
        name: str,
        cron: str,
        timezone: str,
        channel_id: str,
        prompt: str,
        agent: str,
        owner: str,
        by: str,
    ) -> str | None:
        raise NotImplementedError

    async def pause(self, name: str, *, by: str) -> str:
        raise NotImplementedError

    async def resume(self, name: str, *, by: str) -> str:
        raise NotImplementedError

    async def delete(self, name: str, *, by: str) -> str:
        raise NotImplementedError
