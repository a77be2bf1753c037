"""What a sub-agent is: its name, when to use it, its prompt, tools, model and limits."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from bot.tools.base import ToolRegistry

# Lowercase letters, digits, '.', '_' and '-', never `..` (a dot is followed by another
# character or ends the name); no lookahead, as pydantic's regex engine has none.
NAME_PATTERN = r"^[a-z0-9](?:[a-z0-9_-]|\.[a-z0-9_-])*\.?$"
TASK_TOOL_NAME = "task"
# The most turns an agent file may give its agent (`max_turns`, Claude Code's `maxTurns`).
MAX_TURNS_CAP = 1000


def _as_names(value: Any) -> Any:
    """Accept a YAML list or a comma-separated string for a list of names."""
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    if isinstance(value, list | tuple):
        names = []
        for item in value:
            if not isinstance(item, str) or not item.strip():
                raise ValueError(f"expected names (strings), got {item!r}")
            names.append(item.strip())
        return tuple(names)
    raise ValueError(f"expected a list or a comma-separated string, got {type(value).__name__}")


class AgentDefinition(BaseModel):
    """A sub-agent role, from a Markdown file or built in."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME_PATTERN, max_length=64)
    description: str = Field(min_length=1)
    system_prompt: str = Field(min_length=1)
    # None: all the parent's tools; a tuple (even empty): only those (never more).
    tools: tuple[str, ...] | None = None
    disallowed_tools: tuple[str, ...] = ()
    model: str | None = None
    max_turns: int = Field(default=0, ge=0, le=MAX_TURNS_CAP)
    # The model's context window in tokens; 0: the one of baton.yaml (`context_window`).
    context_window: int = Field(default=0, ge=0)
    skills: tuple[str, ...] = ()
    # worktree: the agent works in a git worktree of its own, on a new branch.
    isolation: Literal["none", "worktree"] = "none"
    # The agents this one may delegate to (nesting is opt-in; depth is capped).
    allowed_subagents: tuple[str, ...] = ()
    # project: the agent reads and appends to `.baton/memory/<name>.md`.
    memory: Literal["none", "project"] = "none"
    # Whether the prompt carries the workspace's AGENTS.md (or CLAUDE.md).
    project_instructions: bool = True
    # Frontmatter keys Baton does not use, with their values as written.
    extra: dict[str, Any] = Field(default_factory=dict)
    # One line per thing the loader mapped, left out, kept unused or read leniently.
    notes: tuple[str, ...] = ()
    source: str = "builtin"

    @field_validator("disallowed_tools", "skills", "allowed_subagents", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        return _as_names(value)

    @field_validator("tools", mode="before")
    @classmethod
    def _tool_names(cls, value: Any) -> Any:
        return None if value is None else _as_names(value)

    @field_validator("description", "system_prompt", mode="after")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value.strip()

    @field_validator("model", mode="before")
    @classmethod
    def _empty_model_inherits(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("isolation", "memory", mode="before")
    @classmethod
    def _none_word(cls, value: Any) -> Any:
        return "none" if value is None or value is False or value == "" else value

    def resolve_tools(self, parent: ToolRegistry) -> ToolRegistry:
        """The child's tools: (allowlist ∩ parent's, or all the parent's when `tools` is
        None) - denylist - task. An empty allowlist gives no tools.

        Built from the parent's registry, so a child can never hold a tool its
        parent does not; `task` and Baton's control tools (those of the parent's run)
        are always removed: the runner gives the child its own, and `task` only as its
        file's `allowed_subagents` and the depth cap allow.
        """
        chosen = parent if self.tools is None else parent.only(self.tools)
        control = {tool.name for tool in parent if tool.control}
        return chosen.without({*self.disallowed_tools, TASK_TOOL_NAME, *control})
