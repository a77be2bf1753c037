"""A streamed Chat Completions chunk, as Baton reads it.

Only the fields the loop uses, all optional: compatible servers leave out or null what
OpenAI sends (`usage`, `index`, `delta`), and a chunk's other fields are ignored.
Validated by pydantic-core in microseconds; the openai SDK's own chunk models are built
by a recursive Python walk costing about 0.1 ms a chunk, and a provider sends one chunk
per token.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Chunked(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class FunctionDelta(_Chunked):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(_Chunked):
    index: int | None = None
    id: str | None = None
    function: FunctionDelta | None = None


class Delta(_Chunked):
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class Choice(_Chunked):
    delta: Delta | None = None
    finish_reason: str | None = None


class ChunkUsage(_Chunked):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class Chunk(_Chunked):
    choices: list[Choice] | None = None
    usage: ChunkUsage | None = None
    model: str | None = None  # the model that answered, as the provider names it
