"""Schedules, webhooks and watched channels in the Slack surface: built once, started and
stopped with it, and reloaded with baton.yaml (SIGHUP, or the file changing)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from slack_sdk.errors import SlackApiError

from bot.sessions.turns import TriggerEnd, TurnMachine
from bot.slack.answers import post_text
from bot.slack.parts import SlackParts
from bot.slack.thread_surface import SlackThreadSurface
from bot.store.thread_inbox import ThreadMessage
from bot.triggers.book import Reloaded, TriggerBook
from bot.triggers.clock import SYSTEM_CLOCK, Clock
from bot.triggers.launch import Launcher
from bot.triggers.scheduler import Scheduler
from bot.triggers.watch import ChannelWatch
from bot.triggers.webhooks import HookReceiver

logger = logging.getLogger(__name__)

# How often baton.yaml is looked at for changes (a file watcher that also sees a
# Kubernetes ConfigMap's symlink swap).
CONFIG_WATCH_S = 2.0


class SlackTriggers:
    """The three triggers, on one launcher into the turn machine."""

    def __init__(
        self,
        parts: SlackParts,
        *,
        turns: TurnMachine,
        threads: SlackThreadSurface,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        settings = parts.settings
        self.threads = threads
        self.clock = clock
        self.book = TriggerBook(
            settings.triggers, settings.webhook_secrets, config_path=settings.config_path
        )
        self.launcher = Launcher(turns, threads, team_id=self._team_id)
        self.store = parts.schedules
        self.windows = parts.windows
        self.scheduler = Scheduler(
            book=self.book,
            store=self.store,
            launcher=self.launcher,
            instance_id=parts.instances.id,
            tell_owner=self.tell,
            clock=clock,
        )
        self.hooks = HookReceiver(
            book=self.book, ledger=parts.events, launcher=self.launcher, clock=clock
        )
        self.watch = ChannelWatch(
            book=self.book, windows=self.windows, launcher=self.launcher, clock=clock
        )
        self._tasks: list[asyncio.Task[None]] = []

    async def _team_id(self) -> str | None:
        await self.threads.identify()
        return self.threads.team_id

    async def ended(self, end: TriggerEnd) -> None:
        """A run a trigger started ended: schedules count their failures."""
        if end.trigger.startswith("schedule:"):
            await self.scheduler.ended(end)

    async def watched(self, event: dict[str, Any], *, team_id: str | None) -> ThreadMessage | None:
        """A message event of a watched channel, stored as its run's question (or None)."""
        if not self.book.triggers.watch:
            return None
        await self.threads.identify()
        return await self.watch.intake(
            event,
            team_id=team_id,
            bot_user_id=self.threads.bot_user_id,
            bot_id=self.threads.bot_id,
        )

    async def tell(self, user_id: str, text: str) -> None:
        """A direct message from Baton to a person (a schedule's owner)."""
        try:
            await post_text(self.threads.client, channel=user_id, thread_ts=None, text=text)
        except SlackApiError as exc:
            logger.warning("could not tell %s: %s", user_id, exc.response.get("error"))

    def reload(self) -> Reloaded:
        """Read baton.yaml's triggers again (SIGHUP)."""
        return self.book.reload()

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self.scheduler.run(), name="scheduler"),
            asyncio.create_task(self._watch_config(), name="config-watch"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def _watch_config(self) -> None:
        while True:
            await asyncio.sleep(CONFIG_WATCH_S)
            try:
                if self.book.changed_on_disk():
                    self.book.reload()
            except Exception:
                logger.exception("could not look at baton.yaml")
