"""Agent files: Markdown with YAML frontmatter, parsed with PyYAML, validated with pydantic.

Claude Code's agent files load as written; `claude_code` says how they map onto Baton.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from bot.errors import AgentDefinitionError
from bot.frontmatter import YAML_FAILURES, read_leniently, split_frontmatter, yaml_problem
from bot.subagents.claude_code import (
    KEY_SPELLINGS,
    UNUSED_KEY_REASONS,
    FrontmatterProblem,
    count_values,
    listed,
    map_tools,
    tool_entries,
)
from bot.subagents.definition import MAX_TURNS_CAP, TASK_TOOL_NAME, AgentDefinition
from bot.tools.base import MCP_PREFIX
from bot.tools.skills import SKILL_TOOL_NAME

logger = logging.getLogger(__name__)

FRONTMATTER_KEYS = frozenset(
    {
        "name",
        "description",
        "tools",
        "disallowed_tools",
        "model",
        "max_turns",
        "skills",
        "isolation",
        "allowed_subagents",
        "memory",
        "project_instructions",
    }
)

# Bounds on what one file's frontmatter may hold (YAML aliases can multiply values).
MAX_FRONTMATTER_CHARS = 64 * 1024
MAX_FRONTMATTER_VALUES = 5_000
# Bounds on what loading says about one file (however many entries it has).
MAX_NOTES = 24
MAX_NOTE_CHARS = 600


@dataclass(frozen=True, slots=True, kw_only=True)
class KnownTools:
    """The tool names an agent file can use here: Baton's own tools (a site's) and the
    tools of the configured MCP servers (known by server: a server lists its tools only
    once it is up).

    Attributes:
        names: Baton's tool names (`read_file`, `bash`, `skill`, …).
        mcp_servers: The server names of `mcp_servers` in baton.yaml.
    """

    names: frozenset[str]
    mcp_servers: frozenset[str] = frozenset()

    @classmethod
    def of(cls, names: Collection[str], mcp_servers: Collection[str] = ()) -> KnownTools:
        return cls(names=frozenset(names), mcp_servers=frozenset(mcp_servers))

    def knows(self, name: str) -> bool:
        """Whether `name` (as a tools entry, after mapping) can give an agent a tool."""
        if name in self.names or name == TASK_TOOL_NAME:
            return True  # `task` is said about where it is mapped
        if not name.startswith(MCP_PREFIX):
            return False
        if name == f"{MCP_PREFIX}*":
            return bool(self.mcp_servers)
        return name.removeprefix(MCP_PREFIX).split("__")[0] in self.mcp_servers


def parse_agent_text(
    text: str,
    source: str,
    default_name: str,
    tool_aliases: Mapping[str, str] | None = None,
    known_tools: KnownTools | None = None,
) -> AgentDefinition:
    """Build a definition from a file's text; raise `AgentDefinitionError` saying why not.

    `tool_aliases` (tool name as written -> Baton or MCP tool name) are applied before
    Claude Code's names are mapped. With `known_tools`, a tool name that gives no tool
    here (after mapping) is kept as written and said in a note: nothing is left out
    silently.
    """
    parts = split_frontmatter(text)
    if parts is None:
        raise AgentDefinitionError(
            source,
            "no YAML frontmatter: the file must start with a '---' line, then "
            "'description: …', then a closing '---' line, then the system prompt",
        )
    header, body = parts
    if len(header) > MAX_FRONTMATTER_CHARS:
        raise AgentDefinitionError(
            source,
            f"the frontmatter is {len(header):,} characters long; at most "
            f"{MAX_FRONTMATTER_CHARS:,} are read",
        )
    data, notes = _read_frontmatter(header, source)
    try:
        aliases = {
            str(name): target.strip()
            for name, target in (tool_aliases or {}).items()
            if isinstance(target, str) and target.strip()
        }
        fields = _fields(data, default_name, aliases, notes)
    except FrontmatterProblem as exc:
        raise AgentDefinitionError(source, str(exc)) from exc
    if known_tools is not None:
        notes += unknown_tool_notes(fields, known_tools)
    fields.update(system_prompt=body, source=source, notes=_bounded_notes(notes))
    try:
        return AgentDefinition.model_validate(fields)
    except ValidationError as exc:
        raise AgentDefinitionError(source, _problems(exc)) from exc


def parse_agent_file(
    path: Path,
    tool_aliases: Mapping[str, str] | None = None,
    known_tools: KnownTools | None = None,
) -> AgentDefinition:
    """Read and parse one agent file; the file name supplies a missing name."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AgentDefinitionError(str(path), f"cannot be read ({exc})") from exc
    return parse_agent_text(
        text, str(path), default_name=path.stem, tool_aliases=tool_aliases, known_tools=known_tools
    )


def unknown_tool_notes(fields: Mapping[str, Any], known: KnownTools) -> list[str]:
    """Notes for the tools and disallowed tools (mapped already) that name nothing here."""
    notes: list[str] = []
    tools = fields.get("tools")
    if isinstance(tools, tuple) and tools:
        unknown = [name for name in tools if not known.knows(name)]
        servers = [name for name in unknown if name.startswith(MCP_PREFIX)]
        others = [name for name in unknown if not name.startswith(MCP_PREFIX)]
        if others:
            one = len(others) == 1
            notes.append(
                f"{'tool' if one else 'tools'} {listed(others)}: Baton has no tool of "
                f"{'that name' if one else 'those names'} (an operator can map "
                f"{'it' if one else 'them'} with tool_aliases); left out"
            )
        if servers:
            notes.append(
                f"{'tool' if len(servers) == 1 else 'tools'} {listed(servers)}: no such MCP "
                "server is configured (mcp_servers in baton.yaml); left out"
            )
        if len(unknown) == len(tools):
            notes.append("tools: none of the tools listed is available here, so it gets no tools")
    denied = fields.get("disallowed_tools")
    if isinstance(denied, tuple):
        if unknown_denied := [name for name in denied if not known.knows(name)]:
            one = len(unknown_denied) == 1
            notes.append(
                f"disallowed {'tool' if one else 'tools'} {listed(unknown_denied)}: no such "
                f"{'tool' if one else 'tools'} here; nothing to deny"
            )
    return notes


def _bounded_notes(notes: list[str]) -> tuple[str, ...]:
    """The notes once each, each and all of them of a bounded size."""
    unique = [
        note if len(note) <= MAX_NOTE_CHARS else note[: MAX_NOTE_CHARS - 1] + "…"
        for note in dict.fromkeys(notes)
    ]
    if len(unique) > MAX_NOTES:
        unique = [*unique[: MAX_NOTES - 1], f"… and {len(unique) - MAX_NOTES + 1:,} more notes"]
    return tuple(unique)


def _read_frontmatter(header: str, source: str) -> tuple[dict[str, Any], list[str]]:
    """The frontmatter's mapping: strict YAML, else read as Claude Code reads it."""
    notes: list[str] = []
    try:
        data: Any = yaml.safe_load(header) if header.strip() else {}
    except YAML_FAILURES as exc:
        problem = yaml_problem(exc)
        lenient = read_leniently(header)
        if lenient is None:
            raise AgentDefinitionError(
                source,
                f"the frontmatter is not valid YAML ({problem}), and it does not start "
                "with a 'key: value' line either",
            ) from exc
        data, raw_keys, repeated = lenient
        what = ", ".join(raw_keys) if raw_keys else "the frontmatter"
        it = "them" if len(raw_keys) > 1 else "it"
        note = (
            f"{what} read as Claude Code reads {it} (the frontmatter is not strict YAML: {problem})"
        )
        logger.warning("agent file %s: %s", source, note)
        notes.append(note)
        notes += [f"{key} is given more than once; the last one is used" for key in repeated]
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise AgentDefinitionError(source, "the frontmatter must be a mapping of keys to values")
    if count_values(data, MAX_FRONTMATTER_VALUES) > MAX_FRONTMATTER_VALUES:
        raise AgentDefinitionError(
            source,
            f"the frontmatter holds more than {MAX_FRONTMATTER_VALUES:,} values "
            "(YAML aliases can multiply them)",
        )
    return {str(key): value for key, value in data.items()}, notes


def _fields(
    data: dict[str, Any], default_name: str, aliases: Mapping[str, str], notes: list[str]
) -> dict[str, Any]:
    """The definition's fields from the frontmatter, Claude Code's meaning mapped to
    Baton's; each change is added to `notes`."""
    data = dict(data)
    written = {key: key for key in FRONTMATTER_KEYS}
    for spelling, key in KEY_SPELLINGS.items():
        if spelling in data:
            if key in data:
                raise FrontmatterProblem(
                    f"{key} and {spelling} are both given (the same setting, spelt two "
                    "ways); keep one"
                )
            data[key] = data.pop(spelling)
            written[key] = spelling
    if "omitClaudeMd" in data:
        if "project_instructions" in data:
            raise FrontmatterProblem(
                "project_instructions and omitClaudeMd are both given (the same setting); keep one"
            )
        omit = data.pop("omitClaudeMd")
        if not isinstance(omit, bool):
            raise FrontmatterProblem(f"omitClaudeMd: must be true or false, not {omit!r}")
        data["project_instructions"] = not omit
        notes.append(
            f"omitClaudeMd {str(omit).lower()}: project_instructions {str(not omit).lower()}"
        )
    extra = {key: data.pop(key) for key in list(data) if key not in FRONTMATTER_KEYS}
    fields = dict(data)
    fields["name"] = _name(data.get("name"), default_name, notes)
    _model_and_memory(fields, notes)
    description = fields.get("description")
    if isinstance(description, str) and "\\n" in description:
        fields["description"] = description.replace("\\n", "\n")
        notes.append("description: its \\n sequences read as line breaks, as Claude Code does")
    turns = fields.get("max_turns")
    if turns is None:
        fields.pop("max_turns", None)
    elif isinstance(turns, int) and not isinstance(turns, bool) and turns > MAX_TURNS_CAP:
        fields["max_turns"] = MAX_TURNS_CAP
        notes.append(f"{written['max_turns']} {turns}: Baton's most is {MAX_TURNS_CAP}")
    _tools(fields, written, aliases, notes)
    _skills_without_the_skill_tool(fields, notes)
    if extra:
        fields["extra"] = extra
        notes.append(f"unused keys kept: {', '.join(extra)}")
        for key, why in UNUSED_KEY_REASONS.items():
            if key in extra:
                value = extra[key]
                shown = f" {value}" if isinstance(value, str) and len(value) <= 40 else ""
                notes.append(f"{key}{shown}: not used; {why}")
    return fields


def _name(value: Any, default_name: str, notes: list[str]) -> Any:
    """The name as given (or the file's), lower-cased as Claude Code files may need."""
    from_file = value is None or value == ""
    name = default_name if from_file else value
    if not isinstance(name, str):
        return name
    lowered = name.strip().lower()
    if lowered != name.strip():
        where = " (from the file name)" if from_file else ""
        notes.append(f"name {name.strip()}{where} written as {lowered}")
    return lowered


def _model_and_memory(fields: dict[str, Any], notes: list[str]) -> None:
    model = fields.get("model")
    if isinstance(model, str) and model.strip().lower() == "inherit":
        fields["model"] = None
        notes.append("model inherit: runs on the parent's model")
    memory = fields.get("memory")
    if isinstance(memory, str) and memory.strip().lower() in ("user", "local"):
        fields["memory"] = "none"
        notes.append(
            f"memory {memory.strip()}: Baton has only project memory "
            "(.baton/memory/<name>.md); this agent keeps none"
        )


def _tools(
    fields: dict[str, Any], written: dict[str, str], aliases: Mapping[str, str], notes: list[str]
) -> None:
    """Map `tools` and `disallowed_tools`; None: all the parent's tools, (): none."""
    if "tools" in fields:
        entries = tool_entries(fields["tools"], "tools")
        if "*" in entries:
            fields["tools"] = None
            notes.append("tools *: all the parent's tools")
        elif not entries:
            # Baton's rule since its first agent files (DESIGN: empty = inherit), which
            # Claude Code reads as no tools: said, so nobody is surprised either way.
            fields["tools"] = None
            notes.append(
                "tools is empty: all the parent's tools (Claude Code would give none; "
                "write disallowed_tools: '*' for none)"
            )
        else:
            tools, more = map_tools(entries, "tools", aliases)
            notes += more
            if not tools:
                notes.append("tools: Baton has none of the tools listed, so it gets no tools")
            fields["tools"] = tools
    if "disallowed_tools" in fields:
        key = written["disallowed_tools"]
        entries = tool_entries(fields["disallowed_tools"], key)
        if "*" in entries:
            entries = [entry for entry in entries if entry != "*"]
            fields["tools"] = ()
            notes.append(f"{key} *: every tool is denied, so it gets no tools")
        denied, more = map_tools(entries, key, aliases, denying=True)
        notes += more
        fields["disallowed_tools"] = denied


def _skills_without_the_skill_tool(fields: Mapping[str, Any], notes: list[str]) -> None:
    """Say what becomes of `skills` when the file's tool list leaves out the skill tool.

    As Claude Code does with an agent file's `skills`, their instructions are put in
    the agent's prompt when it starts (the runner does it): the file does not have to
    list the skill tool, and nothing it names is dropped unsaid.
    """
    tools, skills = fields.get("tools"), fields.get("skills")
    if not isinstance(tools, tuple) or SKILL_TOOL_NAME in tools or not skills:
        return
    names = [skills] if isinstance(skills, str) else skills
    shown = listed([str(name) for name in names]) if isinstance(names, list | tuple) else ""
    notes.append(
        f"skills {shown}: its tools leave out the skill tool, so these skills' instructions "
        "are put in its prompt when it starts (as Claude Code preloads an agent's skills)"
    )


def _problems(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        key = ".".join(str(p) for p in error["loc"]) or "frontmatter"
        if key == "system_prompt":
            key = "body (the system prompt)"
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "string_pattern_mismatch" and key == "name":
            message = (
                "must be lowercase letters, digits, '.', '_' and '-', starting with a "
                "letter or digit, without '..'"
            )
        problems.append(f"{key}: {message}")
    return "; ".join(problems)
