"""Markdown files that start with `---`-fenced YAML frontmatter: agent files, skills."""

from __future__ import annotations


def split_frontmatter(text: str) -> tuple[str, str] | None:
    """Split `---`-fenced frontmatter from the body; None if the text has none."""
    lines = text.lstrip("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        return None
    for index in range(1, len(lines)):
        if lines[index].strip() == "---":
            return "".join(lines[1:index]), "".join(lines[index + 1 :])
    return None
