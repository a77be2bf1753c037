"""Sessions: one conversation per Slack thread or terminal chat, turn by turn."""

from bot.sessions.conversations import Conversations, EngineFactory
from bot.sessions.prompt import main_system_prompt

__all__ = ["Conversations", "EngineFactory", "main_system_prompt"]
