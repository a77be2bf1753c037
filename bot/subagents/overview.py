"""Each agent of a workspace in words: where it comes from, the tools and model it gets,
and what loading changed. `baton agents` and App Home say the same from here."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from bot.subagents.claude_code import listed
from bot.subagents.definition import TASK_TOOL_NAME, AgentDefinition
from bot.subagents.registry import AgentRegistry, InvalidAgentFile
from bot.tools.base import MCP_PREFIX, ToolRegistry


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentOverview:
    """One agent as people are told about it.

    Attributes:
        name: Its name.
        source: `builtin`, or its file.
        tools: Its effective tools in words (`read_file, grep`, `none`, `… (inherits all)`),
            with the MCP tools it names and tools it names that are not here.
        unknown: Tool names its file gives that give it nothing here.
        model: The model it runs on (`inherits: gpt-4.1` when it names none).
        max_turns: Its turn limit.
        options: Its worktree, memory and delegation, or `-`.
        notes: What loading mapped, left out or kept unused, and the definitions of its
            name it shadows.
    """

    name: str
    source: str
    tools: str
    unknown: tuple[str, ...]
    model: str
    max_turns: int
    options: str
    notes: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkspaceAgents:
    """The agents of one workspace, and the agent files refused there."""

    agents: tuple[AgentOverview, ...]
    invalid: tuple[InvalidAgentFile, ...]


def overview(
    registry: AgentRegistry,
    tools: ToolRegistry,
    *,
    mcp_servers: Collection[str],
    main_model: str | None,
    max_turns: int,
) -> WorkspaceAgents:
    """The agents of `registry` as they would run with the site's `tools`."""
    described = []
    for definition in registry.definitions():
        shadows = tuple(
            f"shadows {item.source}"
            for item in registry.shadowed
            if item.name == definition.name and item.shadowed_by == definition.source
        )
        shown, unknown = _tools(definition, tools, mcp_servers)
        described.append(
            AgentOverview(
                name=definition.name,
                source=definition.source,
                tools=shown,
                unknown=unknown,
                model=definition.model or f"inherits: {main_model or 'unset'}",
                max_turns=definition.max_turns or max_turns,
                options=_options(definition),
                notes=(*definition.notes, *shadows),
            )
        )
    return WorkspaceAgents(agents=tuple(described), invalid=registry.invalid)


def _tools(
    definition: AgentDefinition, tools: ToolRegistry, mcp_servers: Collection[str]
) -> tuple[str, tuple[str, ...]]:
    listed_tools = definition.tools or ()
    shown = ", ".join(definition.resolve_tools(tools).names()) or "none"
    if definition.tools is None and not definition.disallowed_tools:
        shown += " (inherits all)"
    if mcp := [name for name in listed_tools if name.startswith(MCP_PREFIX)]:
        shown += f" + {listed(mcp)} (while its MCP server is up)"
    named = {*listed_tools, *definition.disallowed_tools} - {TASK_TOOL_NAME}
    unknown = tuple(
        sorted(name for name in named if name not in tools and not _mcp(name, mcp_servers))
    )
    return shown, unknown


def _mcp(name: str, servers: Collection[str]) -> bool:
    """Whether `name` names tools of a configured MCP server (or every MCP tool)."""
    if not name.startswith(MCP_PREFIX):
        return False
    server = name.removeprefix(MCP_PREFIX).split("__")[0]
    return name == f"{MCP_PREFIX}*" or server in servers


def _options(definition: AgentDefinition) -> str:
    """What an agent file turns on beyond its tools: its worktree, memory, delegation."""
    options = []
    if definition.isolation == "worktree":
        options.append("worktree")
    if definition.memory == "project":
        options.append("memory")
    if definition.allowed_subagents:
        options.append(f"delegates to {', '.join(definition.allowed_subagents)}")
    return "; ".join(options) or "-"
