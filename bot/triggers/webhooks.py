"""`POST /hooks/<name>` (SKELETON: being built)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from bot.store import EventLedger
from bot.triggers.book import TriggerBook
from bot.triggers.clock import SYSTEM_CLOCK, Clock
from bot.triggers.launch import Launcher


@dataclass(frozen=True, slots=True)
class HookAnswer:
    status: int
    text: str


class HookReceiver:
    """Verifies, deduplicates and starts the runs of webhook deliveries."""

    def __init__(
        self,
        *,
        book: TriggerBook,
        ledger: EventLedger,
        launcher: Launcher,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.book = book
        self.ledger = ledger
        self.launcher = launcher
        self.clock = clock

    async def handle(self, name: str, headers: Mapping[str, str], body: bytes) -> HookAnswer:
        raise NotImplementedError
