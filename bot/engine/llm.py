"""The one boundary to the model provider: OpenAI Chat Completions, streamed.

Everything the loop needs comes out as typed items; every provider failure comes
out as `LLMError` with a message a person can read.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai

from bot.engine.messages import ChatMessage, ToolCall, Usage
from bot.errors import LLMError


@dataclass(frozen=True, slots=True, kw_only=True)
class TextChunk:
    """A piece of streamed answer text."""

    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMResponse:
    """One complete model response: its text, its tool calls, and what it cost."""

    text: str
    tool_calls: tuple[ToolCall, ...]
    usage: Usage
    finish_reason: str | None


@dataclass(slots=True)
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class LLMClient:
    """Streams Chat Completions through an `openai.AsyncOpenAI` client."""

    def __init__(self, client: openai.AsyncOpenAI) -> None:
        self.client = client

    async def stream(
        self,
        *,
        model: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[dict[str, Any]],
    ) -> AsyncIterator[TextChunk | LLMResponse]:
        """Yield text chunks as they arrive, then exactly one `LLMResponse`."""
        request: dict[str, Any] = {
            "model": model,
            "messages": [m.to_openai() for m in messages],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            request["tools"] = list(tools)
            request["parallel_tool_calls"] = True
        text: list[str] = []
        calls: dict[int, _PartialCall] = {}
        usage = Usage(requests=1)
        finish_reason: str | None = None
        try:
            stream = await self.client.chat.completions.create(**request)
            async with stream:
                async for chunk in stream:
                    if chunk.usage is not None:
                        usage = Usage(
                            prompt_tokens=chunk.usage.prompt_tokens or 0,
                            completion_tokens=chunk.usage.completion_tokens or 0,
                            requests=1,
                        )
                    for choice in chunk.choices:
                        delta = choice.delta
                        if choice.finish_reason:
                            finish_reason = choice.finish_reason
                        if delta is None:
                            continue
                        if delta.content:
                            text.append(delta.content)
                            yield TextChunk(text=delta.content)
                        for piece in delta.tool_calls or ():
                            partial = calls.setdefault(piece.index, _PartialCall())
                            if piece.id:
                                partial.id = piece.id
                            if piece.function is not None:
                                if piece.function.name:
                                    partial.name += piece.function.name
                                if piece.function.arguments:
                                    partial.arguments.append(piece.function.arguments)
        except openai.APITimeoutError as exc:
            raise LLMError(f"the model provider did not answer in time ({exc})") from exc
        except openai.APIConnectionError as exc:
            raise LLMError(
                f"could not reach the model provider at {self.client.base_url} ({exc})"
            ) from exc
        except openai.APIStatusError as exc:
            raise LLMError(
                f"the model provider answered HTTP {exc.status_code}: {_error_message(exc)}"
            ) from exc
        except openai.OpenAIError as exc:
            raise LLMError(f"the model provider's answer could not be read ({exc})") from exc
        tool_calls = tuple(
            ToolCall(
                id=partial.id or f"call_{index}",
                name=partial.name,
                arguments="".join(partial.arguments),
            )
            for index, partial in sorted(calls.items())
        )
        yield LLMResponse(
            text="".join(text), tool_calls=tool_calls, usage=usage, finish_reason=finish_reason
        )


def _error_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"]
    return exc.message
