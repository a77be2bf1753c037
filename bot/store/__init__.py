"""Persistence: SQLModel tables behind a few narrow async stores."""

from bot.store.database import Database
from bot.store.events import EventLedger
from bot.store.sessions import SessionKey, SessionRecord, SessionStore
from bot.store.usage import ModelUsage, UsageStore, UsageTotals

__all__ = [
    "Database",
    "EventLedger",
    "ModelUsage",
    "SessionKey",
    "SessionRecord",
    "SessionStore",
    "UsageStore",
    "UsageTotals",
]
