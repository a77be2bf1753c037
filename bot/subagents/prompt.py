"""A child's system prompt: its definition, where it works, the project's instructions,
its memory and its preloaded skills."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bot.frontmatter import split_frontmatter
from bot.project_instructions import ProjectInstructions, read_project_instructions, section
from bot.subagents.definition import AgentDefinition
from bot.subagents.memory import memory_prompt, read_memory

logger = logging.getLogger(__name__)

_SKILL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildPrompt:
    text: str
    missing_skills: tuple[str, ...]
    # The workspace's AGENTS.md (or CLAUDE.md) given to the child; None when none was.
    instructions: ProjectInstructions | None = None


def load_skill(skills_dir: Path, name: str) -> str | None:
    """The body of `<skills_dir>/<name>.md` (frontmatter removed), or None if unusable."""
    if not _SKILL_NAME.match(name) or name.endswith(".."):
        return None
    path = skills_dir / f"{name}.md"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    parts = split_frontmatter(text)
    body = parts[1] if parts else text
    return body.strip() or None


HANDOFF_INSTRUCTIONS = (
    "When you are done, call submit_result exactly once with your result: status "
    "(complete, blocked or uncertain), answer, evidence (file:line references, command "
    "output excerpts, URLs), limitations, and claims ({topic, position}) for the points "
    "another agent might see differently. It ends your run: call it last."
)
ISOLATION_NOTE = (
    "This directory is a git worktree of the project made for you alone, on a branch of "
    "its own: change files freely. Baton commits your changes on that branch when you "
    "finish, and a person decides whether to merge them; do not run git commands that "
    "need the repository (they are not available here)."
)


def build_child_prompt(
    definition: AgentDefinition,
    *,
    workspace: Path,
    skills_dir: Path,
    memory_root: Path | None = None,
    isolated: bool = False,
    preload: Callable[[str], str | None] | None = None,
) -> ChildPrompt:
    """Compose the child's system prompt; a missing skill is reported, not fatal.

    `memory_root`: the project whose `.baton/memory/<agent>.md` the agent reads (None:
    no memory). `isolated`: the child works in a worktree of its own. The workspace's
    `AGENTS.md` (or `CLAUDE.md`) is read now, unless the definition opts out.

    A skill folder (`<name>/SKILL.md`) the definition names is left to the child's
    `skill` tool; with `preload` (the child has no `skill` tool), its instructions are
    put in the prompt instead, as Claude Code does, and one `preload` cannot give is
    reported missing.
    """
    sections = [
        definition.system_prompt,
        f"You work in this directory (the workspace): {workspace}\n"
        "Relative paths are resolved from it; you cannot use paths outside it.",
    ]
    if isolated:
        sections.append(ISOLATION_NOTE)
    instructions = None
    if definition.project_instructions:
        instructions = read_project_instructions(workspace)
    if instructions is not None:
        sections.append(section(instructions))
    if memory_root is not None:
        sections.append(memory_prompt(definition.name, read_memory(memory_root, definition.name)))
    missing = []
    for name in definition.skills:
        body = load_skill(skills_dir, name)
        if body is None and preload is not None:
            body = preload(name)
        elif body is None and _skill_folder_exists(workspace, skills_dir, name):
            continue  # a skill folder: offered by the `skill` tool, loaded on demand
        if body is None:
            missing.append(name)
            logger.warning(
                "agent %s: skill %r not found in %s; running without it",
                definition.name,
                name,
                skills_dir,
            )
            continue
        sections.append(f'<skill name="{name}">\n{body}\n</skill>')
    sections.append(HANDOFF_INSTRUCTIONS)
    return ChildPrompt(
        text="\n\n".join(sections), missing_skills=tuple(missing), instructions=instructions
    )


def _skill_folder_exists(workspace: Path, skills_dir: Path, name: str) -> bool:
    """Whether `name` is an Agent Skills folder (`<name>/SKILL.md`) Baton looks in."""
    if not _SKILL_NAME.match(name) or ".." in name:
        return False
    roots = (skills_dir, workspace / ".claude" / "skills")
    return any((root / name / "SKILL.md").is_file() for root in roots)
