"""Baton's exceptions: one base class, split by who has to act on the error."""

from __future__ import annotations


class BatonError(Exception):
    """Base class of every error Baton raises on purpose."""


class ConfigError(BatonError):
    """The operator's configuration is wrong; the message names the key and the file."""


class AgentDefinitionError(BatonError):
    """An agent definition file is invalid."""

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason


class ToolError(BatonError):
    """A tool could not do what was asked; the message goes back to the model."""


class WorkspaceError(ToolError):
    """A path points outside the workspace or at a protected location."""


class ToolArgumentsError(ToolError):
    """The model sent arguments a tool cannot accept (bad JSON, wrong fields)."""


class LLMError(BatonError):
    """The model provider failed: HTTP error, timeout, or an unreadable answer."""


class ContextLengthError(LLMError):
    """The request did not fit the model's context window; compacting may help.

    `limit` and `tokens` are the provider's own figures (its context window and what
    it counted for the request) when its message gives them, else None.
    """

    def __init__(self, message: str, *, limit: int | None = None, tokens: int | None = None):
        super().__init__(message)
        self.limit = limit
        self.tokens = tokens


class MaxTurnsReached(BatonError):
    """A run used all of its turns before reaching a final answer."""

    def __init__(self, max_turns: int) -> None:
        super().__init__(f"stopped after reaching the limit of {max_turns} turns")
        self.max_turns = max_turns


class TaskLimitReached(BatonError):
    """Too many background tasks are running in one session."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"at most {limit} background tasks may run at once in a session")
        self.limit = limit


class SteeringFull(BatonError):
    """A running task already has as many steering messages waiting as it may."""

    def __init__(self, task_id: str, limit: int) -> None:
        super().__init__(
            f"{task_id} already has {limit} messages waiting for its next step; send more "
            "once it has read them"
        )
        self.limit = limit
