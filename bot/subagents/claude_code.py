"""Claude Code's agent-file conventions: its tool names, its key spellings, its lenient
frontmatter reading, and how each maps onto Baton."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bot.subagents.definition import TASK_TOOL_NAME

# Model names Claude Code resolves itself (compared lower-cased); Baton's configuration
# maps them (not done here), and never sends one to the provider as written.
CLAUDE_MODEL_ALIASES = frozenset(
    {"sonnet", "opus", "haiku", "inherit", "default", "opusplan", "sonnet[1m]", "opus[1m]"}
)

# A full Claude model id (`claude-sonnet-4-20250514`, `claude-3-5-haiku-20241022`,
# `claude-opus-4-1`): its family is the alias an operator maps.
CLAUDE_MODEL_ID = re.compile(
    r"claude-(?:[\w.]+-)*?(sonnet|opus|haiku)(?:[-@][\w.]+)*", re.IGNORECASE
)


def claude_family(model: str) -> str | None:
    """`sonnet`, `opus` or `haiku` for a full Claude model id; None for any other name."""
    match = CLAUDE_MODEL_ID.fullmatch(model.strip())
    return match.group(1).lower() if match else None


# Claude Code's tools that Baton has, under Baton's name.
CLAUDE_TOOLS: Mapping[str, str] = {
    "Read": "read_file",
    "Write": "write_file",
    "Edit": "edit_file",
    "MultiEdit": "edit_file",
    "Glob": "glob",
    "Grep": "grep",
    "LS": "list_dir",
    "Bash": "bash",
    "Task": TASK_TOOL_NAME,
    "Agent": TASK_TOOL_NAME,
    "Skill": "skill",  # Baton's skill tool
}

# Claude Code's tools that Baton lacks; an operator can map them with `tool_aliases`.
CLAUDE_TOOLS_MISSING = frozenset(
    {
        "AskUserQuestion",
        "BashOutput",
        "EnterPlanMode",
        "ExitPlanMode",
        "KillBash",
        "KillShell",
        "LSP",
        "ListMcpResourcesTool",
        "MCPSearch",
        "NotebookEdit",
        "NotebookRead",
        "ReadMcpResourceTool",
        "SendMessage",
        "SlashCommand",
        "TaskCreate",
        "TaskGet",
        "TaskList",
        "TaskOutput",
        "TaskStop",
        "TaskUpdate",
        "TodoRead",
        "TodoWrite",
        "ToolSearch",
        "WebFetch",
        "WebSearch",
    }
)

_LOWER_TOOLS = {name.lower(): target for name, target in CLAUDE_TOOLS.items()}
_LOWER_MISSING = {name.lower(): name for name in CLAUDE_TOOLS_MISSING}

# Claude Code's camelCase keys and the Baton key each one means.
KEY_SPELLINGS: Mapping[str, str] = {
    "maxTurns": "max_turns",
    "disallowedTools": "disallowed_tools",
}

# Claude Code keys Baton keeps but does not act on, and why.
UNUSED_KEY_REASONS: Mapping[str, str] = {
    "permissionMode": "Baton's permission rules decide what needs approval",
    "hooks": "Baton does not run an agent file's hooks",
    "mcpServers": "the MCP servers come from Baton's configuration",
}

_SCOPED = re.compile(r"([^()\s]+)\((.*)\)", re.DOTALL)
# How many names one note lists before it counts the rest (a file may list thousands).
NAMES_IN_A_NOTE = 12


class FrontmatterProblem(ValueError):
    """A frontmatter value Baton cannot use; the message says why."""


def tool_entries(value: Any, key: str) -> list[str]:
    """A tools value as a list of entries: a YAML list, or names separated by commas or
    spaces (not inside parentheses, so `Bash(git diff:*)` is one entry)."""
    if value is None:
        return []
    if isinstance(value, str):
        return _split_tools(value)
    if isinstance(value, list | tuple):
        entries: list[str] = []
        for item in value:
            if not isinstance(item, str):
                raise FrontmatterProblem(f"{key}: expected tool names (strings), got {item!r}")
            entries += _split_tools(item)
        return entries
    kind = {dict: "a mapping", bool: "true/false", int: "a number", float: "a number"}
    raise FrontmatterProblem(
        f"{key}: expected a list or a comma-separated string of tool names, got "
        f"{kind.get(type(value), type(value).__name__)}"
    )


def _split_tools(text: str) -> list[str]:
    entries: list[str] = []
    current = ""
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(0, depth - 1)
        elif depth == 0 and (char == "," or char.isspace()):
            if current.strip():
                entries.append(current.strip())
            current = ""
            continue
        current += char
    if current.strip():
        entries.append(current.strip())
    return entries


def map_tools(
    entries: Iterable[str], key: str, aliases: Mapping[str, str], *, denying: bool = False
) -> tuple[tuple[str, ...], list[str]]:
    """Map tool entries as written to Baton's or MCP names, with a note for each change.

    `aliases` (an operator's, name as written -> tool name) come first, matched as
    written, else in any case (`webfetch` maps `WebFetch`); then Claude Code's table
    (exact, or all lower-case); other names are kept as written (the registry reports
    those it does not know). Tools Baton lacks are left out. Duplicates are collapsed.
    `key` names the field in the notes; `denying`: the entries are a denylist. Notes
    list a bounded number of names, however many the file gives.
    """
    any_case: dict[str, str] = {}
    for name, target in aliases.items():
        any_case.setdefault(name.lower(), target)
    # Dicts as ordered sets: a file may list thousands of entries.
    names: dict[str, None] = {}
    renamed: dict[str, None] = {}
    missing: dict[str, None] = {}
    found: dict[str, None] = {}
    for entry in entries:
        scoped = _SCOPED.fullmatch(entry)
        base, scope = (scoped.group(1), scoped.group(2).strip()) if scoped else (entry, "")
        alias = _alias(entry, aliases, any_case)
        by_base = alias is None and scoped is not None
        if by_base:
            alias = _alias(base, aliases, any_case)
        if alias is not None:
            target = alias
            renamed[f"{entry} → {target} (tool_aliases)"] = None
            if by_base and scope not in ("", "*"):
                found[_scope_note(entry, target, scope, denying)] = None
        elif base in CLAUDE_TOOLS or base in _LOWER_TOOLS:
            target = CLAUDE_TOOLS.get(base) or _LOWER_TOOLS[base]
            if target == TASK_TOOL_NAME and not denying:
                found[
                    f"tool {entry}: in Baton, delegation comes from allowed_subagents, not tools"
                ] = None
            elif scope not in ("", "*"):
                found[_scope_note(entry, target, scope, denying)] = None
            elif target != entry:
                renamed[f"{entry} → {target}"] = None
        elif base in CLAUDE_TOOLS_MISSING or base in _LOWER_MISSING:
            missing[entry] = None
            continue
        else:
            target = entry
        names[target] = None
    notes = _bounded(list(found), "more notes on single entries")
    if renamed:
        notes.insert(0, f"{key}: {listed(list(renamed))}")
    if missing:
        notes.append(_missing_note(list(missing), denying))
    return tuple(names), notes


def _alias(name: str, aliases: Mapping[str, str], any_case: Mapping[str, str]) -> str | None:
    return aliases.get(name) or any_case.get(name.lower())


def _bounded(notes: list[str], more: str) -> list[str]:
    if len(notes) <= NAMES_IN_A_NOTE:
        return notes
    return [*notes[:NAMES_IN_A_NOTE], f"… and {len(notes) - NAMES_IN_A_NOTE:,} {more}"]


def listed(names: Sequence[str], limit: int = NAMES_IN_A_NOTE) -> str:
    """`a, b, c`, or the first `limit` of them and how many more."""
    if len(names) <= limit:
        return ", ".join(names)
    return f"{', '.join(names[:limit])} and {len(names) - limit:,} more"


def _scope_note(entry: str, target: str, scope: str, denying: bool) -> str:
    if denying:
        return (
            f"disallowed tool {entry}: all of {target} is denied; the file cannot deny "
            f"only ({scope})"
        )
    return (
        f"tool {entry}: read as {target}; the scope ({scope}) is not enforced by the file: "
        "Baton's permission rules decide"
    )


def _missing_note(missing: list[str], denying: bool) -> str:
    names = listed(missing)
    one = len(missing) == 1
    if denying:
        return (
            f"disallowed {'tool' if one else 'tools'} {names}: Baton has no such "
            f"{'tool' if one else 'tools'}; nothing to deny"
        )
    return (
        f"{'tool' if one else 'tools'} {names}: Baton has no such {'tool' if one else 'tools'} "
        f"(an operator can map {'it' if one else 'them'} with tool_aliases); left out"
    )


def count_values(value: Any, limit: int) -> int:
    """How many values `value` holds, nested ones included; stops counting past `limit`
    (YAML aliases can make a small text hold a huge number of them)."""
    count = 0
    stack = [value]
    while stack and count <= limit:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return count
