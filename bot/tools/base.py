"""The tool contract, the registry of tools, and the output cap shared by all tools."""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from bot.errors import ToolArgumentsError

ArgumentKind = Literal["path", "command", "pattern"]

DEFAULT_OUTPUT_LIMIT = 30_000

# True while a tool runs a call that a person approved. The engine sets it; a tool that
# finds, on the object it actually opened, a reason to ask (a file with several hard
# links) refuses unless a person already said yes to this very call.
person_approved: ContextVar[bool] = ContextVar("person_approved", default=False)


# Tool names a rule or an agent file may cover with a trailing `*`: every tool of one
# MCP server (`mcp__tracker__*`), or every MCP tool (`mcp__*`). Other names are exact.
MCP_PREFIX = "mcp__"
MCP_WILDCARD = re.compile(r"^mcp__(?:[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*__)?\*$")


def name_matches(pattern: str, name: str) -> bool:
    """Whether a tool name in a rule or an agent file covers the tool `name`:
    `mcp__tracker__*` covers `mcp__tracker__search` (not `mcp__tracker-admin__drop`)."""
    if MCP_WILDCARD.fullmatch(pattern):
        return name.startswith(pattern[:-1])
    return pattern == name


# The image types models take (Chat Completions' image parts).
IMAGE_MEDIA_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


@dataclass(frozen=True, slots=True)
class ToolImage:
    """An image a tool returns, for the model to see: media type and base64 bytes."""

    name: str
    media_type: str
    data: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a tool returns when text alone does not carry it: the text, and images."""

    text: str
    images: tuple[ToolImage, ...] = ()


class ToolArguments(BaseModel):
    """Base of every tool's argument model: unknown fields are a mistake worth reporting."""

    model_config = ConfigDict(extra="forbid")


class Tool(ABC):
    """A capability the model can call: a name, a JSON schema, and an async `run`.

    Subclasses set `name`, `description` and `arguments`, and say whether they only
    read (`read_only`), which argument the permission rules match on
    (`main_argument`) and what kind of value it holds (`argument_kind`).
    """

    name: ClassVar[str]
    description: ClassVar[str]
    arguments: ClassVar[type[ToolArguments]]
    read_only: ClassVar[bool] = False
    main_argument: ClassVar[str | None] = None
    argument_kind: ClassVar[ArgumentKind] = "path"
    # Baton's own control tools (submit_result, remember, steer_task, ...): they touch
    # only what Baton keeps for the run, so they never ask a person and no rule or
    # agent tool list takes them away.
    control: ClassVar[bool] = False
    # A call that succeeds ends the run once the other calls of its response are done,
    # with no further model call (submit_result: the child's work is handed back).
    ends_run: ClassVar[bool] = False

    @abstractmethod
    async def run(self, args: Any) -> str | ToolOutput:
        """Do the work and return what the model sees (text, or text and images); raise
        `ToolError` to fail."""

    def unruled_reason(self) -> str:
        """Why a call of this tool asks a person when no rule names it (and it is not
        read-only)."""
        return f"{self.name} can change files or run programs, and no rule allows it"

    def schema(self) -> dict[str, Any]:
        """The Chat Completions `tools` entry for this tool."""
        parameters = self.arguments.model_json_schema()
        parameters.pop("title", None)
        for prop in parameters.get("properties", {}).values():
            prop.pop("title", None)
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": parameters,
            },
        }

    def parse_arguments(self, raw: str) -> ToolArguments:
        """Turn the model's JSON argument string into this tool's validated model."""
        try:
            data = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            raise ToolArgumentsError(
                f"the arguments for {self.name} are not valid JSON ({exc.msg} at position "
                f"{exc.pos}); send a JSON object matching the tool's schema"
            ) from exc
        if not isinstance(data, dict):
            raise ToolArgumentsError(
                f"the arguments for {self.name} must be a JSON object, not {type(data).__name__}"
            )
        try:
            return self.arguments.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
                for err in exc.errors()
            )
            raise ToolArgumentsError(f"invalid arguments for {self.name}: {problems}") from exc


class ToolRegistry:
    """An ordered, immutable set of tools addressed by name."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"two tools are named {tool.name!r}")
            self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        return [tool.schema() for tool in self._tools.values()]

    def only(self, names: Iterable[str]) -> ToolRegistry:
        """A registry holding just the named tools that this one has, in this one's order
        (`mcp__server__*` names all of a server's tools)."""
        wanted = tuple(names)
        return ToolRegistry(
            t for n, t in self._tools.items() if any(name_matches(w, n) for w in wanted)
        )

    def without(self, names: Iterable[str]) -> ToolRegistry:
        unwanted = tuple(names)
        return ToolRegistry(
            t for n, t in self._tools.items() if not any(name_matches(u, n) for u in unwanted)
        )

    def with_tools(self, tools: Iterable[Tool]) -> ToolRegistry:
        return ToolRegistry([*self._tools.values(), *tools])

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)


def cap_output(text: str, limit: int = DEFAULT_OUTPUT_LIMIT) -> str:
    """Cut `text` to about `limit` characters, keeping its head and tail.

    The note in the middle says how much was cut, so the model knows the output
    is partial and can ask for a narrower slice.
    """
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    cut = len(text) - head - tail
    return (
        f"{text[:head]}\n\n[… output truncated: {cut:,} of {len(text):,} characters cut …]\n\n"
        f"{text[len(text) - tail :]}"
    )
