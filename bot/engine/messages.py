"""Conversation values the engine keeps: messages, tool calls and token usage."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]

INTERRUPTED_TOOL_RESULT = "[not run: the run was interrupted before this tool call finished]"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """One function call the model asked for; `arguments` is the raw JSON text it sent."""

    id: str
    name: str
    arguments: str

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatMessage:
    """A Chat Completions message; `name` is the tool's name on tool results."""

    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    def to_openai(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        if self.role == "tool":
            message["tool_call_id"] = self.tool_call_id
        elif self.name and self.role == "user":
            message["name"] = self.name
        return message


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """Tokens a run spent, summed over its LLM calls."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    requests: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            requests=self.requests + other.requests,
        )


def repair_history(messages: Iterable[ChatMessage]) -> list[ChatMessage]:
    """Make a stored history acceptable to Chat Completions again.

    A run cut short (cancel, crash) can leave an assistant message whose tool calls
    have no results; providers reject such a history, so each missing result is
    filled with a note, and tool results that answer no call are dropped.
    """
    repaired: list[ChatMessage] = []
    pending: dict[str, ToolCall] = {}

    def close_pending() -> None:
        for call in pending.values():
            repaired.append(
                ChatMessage(
                    role="tool",
                    content=INTERRUPTED_TOOL_RESULT,
                    tool_call_id=call.id,
                    name=call.name,
                )
            )
        pending.clear()

    for message in messages:
        if message.role == "tool":
            if message.tool_call_id in pending:
                pending.pop(message.tool_call_id)
                repaired.append(message)
            continue
        close_pending()
        repaired.append(message)
        if message.role == "assistant":
            pending = {call.id: call for call in message.tool_calls}
    close_pending()
    return repaired


HISTORY_CUT_NOTE = "[Earlier messages of this conversation were left out to fit the context.]"


def fit_history(messages: list[ChatMessage], max_chars: int) -> list[ChatMessage]:
    """The most recent part of a history that fits in `max_chars`, cut before a user message.

    Cutting only at user messages keeps every tool call with its result. A note says
    that earlier messages were left out, so the model does not take the rest for all.
    """

    def size(message: ChatMessage) -> int:
        return len(message.content or "") + sum(
            len(c.arguments) + len(c.name) for c in message.tool_calls
        )

    total = sum(size(m) for m in messages)
    if total <= max_chars:
        return messages
    start = 0
    for index, message in enumerate(messages):
        if total <= max_chars and message.role == "user":
            start = index
            break
        total -= size(message)
    else:
        return [ChatMessage(role="user", content=HISTORY_CUT_NOTE)]
    return [ChatMessage(role="user", content=HISTORY_CUT_NOTE), *messages[start:]]
