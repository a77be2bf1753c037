"""The typed events `Engine.run_stream` yields while a run goes on."""

from __future__ import annotations

from dataclasses import dataclass

from bot.engine.messages import Usage

# One vocabulary of why the loop ended, for the engine and every surface
# (bot/outcomes.py): "budget", the meter said no further LLM call may be made (the work
# so far is kept); "length", the model's answer was cut at its output limit (after
# continuing it); "content_filter", the provider's content filter stopped the answer.
from bot.outcomes import StopReason


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta:
    """A piece of the model's answer as it streams in."""

    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolStart:
    """The model called a tool; `arguments` is the raw JSON it sent."""

    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResult:
    """A tool call ended (ran, failed, or was refused); `output` is what the model sees."""

    call_id: str
    name: str
    output: str
    is_error: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRequired:
    """A tool call waits for a person's decision (or is refused when nobody can be asked)."""

    call_id: str
    name: str
    arguments: str
    reason: str
    risk: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorEvent:
    """The run failed; `message` is readable by the person who started it."""

    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelWaiting:
    """A model call failed for now and is retried after `wait_s` seconds.

    Also what `LLMClient.stream` yields before a retry. `reason` is short and
    readable ("rate limited", "server error 503", "no answer for 60 s", "connection
    dropped"); `attempt` counts retries from 1. `discard_text` says that text already
    streamed in this call is void: the retried call starts its answer again.
    """

    reason: str
    attempt: int
    wait_s: float
    discard_text: bool = False

    def describe(self) -> str:
        """ "waiting for the model (rate limited, retry 2; next try in 4.0 s)"."""
        return (
            f"waiting for the model ({self.reason}, retry {self.attempt}; "
            f"next try in {self.wait_s:.1f} s)"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Compacted:
    """Earlier messages were folded into a summary to fit the model's context window.

    `folded` is how many messages the summary replaces; `dropped` how many had to be
    left out without one (a last resort), `trimmed` how many tool outputs were cut.
    """

    folded: int = 0
    dropped: int = 0
    trimmed: int = 0

    @property
    def newsworthy(self) -> bool:
        """Folded or left out history; trimmed tool outputs alone are routine."""
        return bool(self.folded or self.dropped)

    def describe(self) -> str:
        """ "compacted 40 earlier messages into a summary" (and/or what was left out)."""
        parts = []
        if self.folded:
            parts.append(f"compacted {_earlier(self.folded)} into a summary")
        if self.dropped:
            parts.append(f"left out {_earlier(self.dropped)}")
        if not parts:
            parts.append(f"shortened {self.trimmed:,} old tool output{'s' * (self.trimmed != 1)}")
        return " and ".join(parts)


def _earlier(count: int) -> str:
    return f"{count:,} earlier message{'s' if count != 1 else ''}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Done:
    """The run is over; always the last event."""

    final_text: str
    usage: Usage
    turns: int
    stop_reason: StopReason


RunEvent = (
    TextDelta
    | ToolStart
    | ToolResult
    | ApprovalRequired
    | ErrorEvent
    | ModelWaiting
    | Compacted
    | Done
)
