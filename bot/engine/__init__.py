"""The agent loop: an LLM with tools, streaming typed events. Knows nothing of Slack."""

from bot.engine.events import (
    ApprovalRequired,
    Compacted,
    Done,
    ErrorEvent,
    ModelWaiting,
    RunEvent,
    StopReason,
    TextDelta,
    ToolResult,
    ToolStart,
)
from bot.engine.hooks import (
    ApprovalDecision,
    ApprovalFunc,
    ApprovalRequest,
    Hook,
    HookDecision,
    ToolInvocation,
)
from bot.engine.llm import LLMClient
from bot.engine.loop import DEFAULT_MAX_TURNS, Engine
from bot.engine.messages import ChatMessage, ToolCall, Usage
from bot.engine.meter import Meter

__all__ = [
    "DEFAULT_MAX_TURNS",
    "ApprovalDecision",
    "ApprovalFunc",
    "ApprovalRequest",
    "ApprovalRequired",
    "ChatMessage",
    "Compacted",
    "Done",
    "Engine",
    "ErrorEvent",
    "Hook",
    "HookDecision",
    "LLMClient",
    "Meter",
    "ModelWaiting",
    "RunEvent",
    "StopReason",
    "TextDelta",
    "ToolCall",
    "ToolInvocation",
    "ToolResult",
    "ToolStart",
    "Usage",
]
