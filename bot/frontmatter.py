"""Markdown files that start with `---`-fenced YAML frontmatter: agent files, skills.

Claude Code reads a frontmatter that strict YAML refuses (a description holding `: `,
`<example>` blocks) line by line; so does Baton, for both (`read_leniently`).
"""

from __future__ import annotations

import re
import textwrap
from collections import Counter
from typing import Any

import yaml


def split_frontmatter(text: str) -> tuple[str, str] | None:
    """Split `---`-fenced frontmatter from the body; None if the text has none."""
    lines = text.lstrip("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        return None
    for index in range(1, len(lines)):
        if lines[index].strip() == "---":
            return "".join(lines[1:index]), "".join(lines[index + 1 :])
    return None


_KEY_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*):(?:[ \t]+(.*))?")
_OPEN_TAG = re.compile(r"<([A-Za-z][\w-]*)(?:\s[^<>]*)?>")
_CLOSE_TAG = re.compile(r"</([A-Za-z][\w-]*)\s*>")
# What makes Claude Code quote a one-line value before its second YAML pass.
_YAML_SPECIAL = re.compile(r"[{}\[\]*&#!|>%@`]|: ")
_BLOCK_SCALAR = re.compile(r"[|>][+-]?[0-9]?\s*")
_UNREAD = object()


# What PyYAML raises on text it cannot read (an impossible date is a ValueError).
YAML_FAILURES = (yaml.YAMLError, RecursionError, ValueError)


def yaml_problem(exc: BaseException) -> str:
    """A short form of a YAML error, with its line in the file (line 1 is the `---`)."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem:
        mark = exc.problem_mark
        return f"{exc.problem} at line {mark.line + 2}" if mark else exc.problem
    if isinstance(exc, RecursionError):
        return "it nests too deeply"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def read_leniently(header: str) -> tuple[dict[str, Any], list[str], list[str]] | None:
    """Read the frontmatter as top-level `key: value` lines, as Claude Code does when
    YAML refuses it: other lines, and every line inside an `<example>…</example>` (or
    any other tag closed later), continue the previous key's value.

    Returns:
        (the mapping, the keys whose value was kept as raw text, the keys given twice),
        or None when no `key: value` line starts the frontmatter.
    """
    entries: list[tuple[str, str, list[str]]] = []
    # Only tags closed somewhere count (`<example>` does; a `<name>` placeholder does not).
    closed = set(_CLOSE_TAG.findall(header))
    open_tags: Counter[str] = Counter()
    for line in header.splitlines():
        match = _KEY_LINE.fullmatch(line.rstrip())
        inside_tag = any(count > 0 for count in open_tags.values())
        if match and not inside_tag:
            entries.append((match.group(1), (match.group(2) or "").strip(), []))
            open_tags = Counter()
            _count_tags(match.group(2) or "", open_tags, closed)
        elif line.startswith("#") and not inside_tag:
            continue
        elif entries:
            entries[-1][2].append(line)
            _count_tags(line, open_tags, closed)
        elif line.strip():
            return None
    if not entries:
        return None
    data: dict[str, Any] = {}
    raw_keys: list[str] = []
    repeated: list[str] = []
    for key, inline, more in entries:
        if key in data and key not in repeated:
            repeated.append(key)
        data[key], raw = _value(inline, more)
        if raw and key not in raw_keys:
            raw_keys.append(key)
    return data, raw_keys, repeated


def _count_tags(text: str, open_tags: Counter[str], closed: set[str]) -> None:
    for tag in _OPEN_TAG.findall(text):
        if tag in closed:
            open_tags[tag] += 1
    for tag in _CLOSE_TAG.findall(text):
        open_tags[tag] -= 1


def _value(inline: str, more: list[str]) -> tuple[Any, bool]:
    """One key's value: YAML where that reads it as written, else the raw text."""
    while more and not more[-1].strip():
        more = more[:-1]
    if not inline and not more:
        return None, False
    try:
        parsed = yaml.safe_load(f"v: {inline}\n" + "\n".join(more))
    except YAML_FAILURES:
        parsed = None
    read = parsed["v"] if isinstance(parsed, dict) and list(parsed) == ["v"] else _UNREAD
    if read is not _UNREAD and not (inline and _needs_raw(inline)):
        return read, False
    raw = _raw(inline, more)
    # Raw only when YAML would not have read the same text.
    return raw, read != raw


def _needs_raw(inline: str) -> bool:
    """Whether Claude Code would quote this one-line value (so it is text as written)."""
    if _is_quoted(inline) or inline.startswith(("[", "{")) or _BLOCK_SCALAR.fullmatch(inline):
        return False
    return _YAML_SPECIAL.search(inline) is not None


def _is_quoted(text: str) -> bool:
    return len(text) >= 2 and text[0] in "'\"" and text[-1] == text[0]


def _raw(inline: str, more: list[str]) -> str:
    text = "\n".join([inline, textwrap.dedent("\n".join(more))] if more else [inline]).strip()
    return text[1:-1] if _is_quoted(text) else text
