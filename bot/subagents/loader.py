"""Agent files: Markdown with YAML frontmatter, parsed with PyYAML, validated with pydantic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from bot.errors import AgentDefinitionError
from bot.subagents.definition import AgentDefinition

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
    }
)


def split_frontmatter(text: str) -> tuple[str, str] | None:
    """Split `---`-fenced frontmatter from the body; None if the text has none."""
    lines = text.lstrip("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        return None
    for index in range(1, len(lines)):
        if lines[index].strip() == "---":
            return "".join(lines[1:index]), "".join(lines[index + 1 :])
    return None


def parse_agent_text(text: str, source: str, default_name: str) -> AgentDefinition:
    """Build a definition from a file's text; raise `AgentDefinitionError` saying why not."""
    parts = split_frontmatter(text)
    if parts is None:
        raise AgentDefinitionError(
            source,
            "no YAML frontmatter: the file must start with a '---' line, then "
            "'description: …', then a closing '---' line, then the system prompt",
        )
    header, body = parts
    try:
        data: Any = yaml.safe_load(header) if header.strip() else {}
    except yaml.YAMLError as exc:
        raise AgentDefinitionError(source, f"the frontmatter is not valid YAML ({exc})") from exc
    if not isinstance(data, dict):
        raise AgentDefinitionError(source, "the frontmatter must be a mapping of keys to values")
    unknown = sorted(str(key) for key in data if key not in FRONTMATTER_KEYS)
    if unknown:
        raise AgentDefinitionError(
            source,
            f"unknown frontmatter key(s) {', '.join(unknown)}; allowed: "
            f"{', '.join(sorted(FRONTMATTER_KEYS))}",
        )
    fields = {**data, "system_prompt": body, "source": source}
    fields.setdefault("name", default_name)
    if fields.get("max_turns") is None:
        fields.pop("max_turns", None)
    try:
        return AgentDefinition.model_validate(fields)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            key = ".".join(str(p) for p in error["loc"]) or "frontmatter"
            if key == "system_prompt":
                key = "body (the system prompt)"
            message = error["msg"].removeprefix("Value error, ")
            if error["type"] == "string_pattern_mismatch" and key == "name":
                message = (
                    "must be lowercase letters, digits and hyphens, starting with a letter or digit"
                )
            problems.append(f"{key}: {message}")
        raise AgentDefinitionError(source, "; ".join(problems)) from exc


def parse_agent_file(path: Path) -> AgentDefinition:
    """Read and parse one agent file; the file name supplies a missing name."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AgentDefinitionError(str(path), f"cannot be read ({exc})") from exc
    return parse_agent_text(text, str(path), default_name=path.stem)
