"""Watched channels (SKELETON: being built)."""

from __future__ import annotations

from typing import Any

from bot.store.thread_inbox import ThreadMessage
from bot.store.windows import TriggerWindows
from bot.triggers.book import TriggerBook
from bot.triggers.clock import SYSTEM_CLOCK, Clock
from bot.triggers.launch import Launcher


class ChannelWatch:
    """Starts a run in the thread of each new top-level message of a watched channel."""

    def __init__(
        self,
        *,
        book: TriggerBook,
        windows: TriggerWindows,
        launcher: Launcher,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.book = book
        self.windows = windows
        self.launcher = launcher
        self.clock = clock

    async def intake(
        self,
        event: dict[str, Any],
        *,
        team_id: str | None,
        bot_user_id: str | None,
        bot_id: str | None,
    ) -> ThreadMessage | None:
        raise NotImplementedError
