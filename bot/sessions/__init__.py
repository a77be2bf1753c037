"""Sessions: one conversation per Slack thread or terminal chat, turn by turn."""

from bot.sessions.conversations import Conversations, UnknownAgentError
from bot.sessions.main_agent import MainAgent, Turn
from bot.sessions.prompt import main_system_prompt

__all__ = ["Conversations", "MainAgent", "Turn", "UnknownAgentError", "main_system_prompt"]
