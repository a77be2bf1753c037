"""Recognise commands made only of plain, literal words: the only ones allow rules approve.

An allow rule such as ``bash(git status*)`` compares words, so it can only vouch for
a command whose words are exactly what the program receives. Anything bash would
still transform (expansions, substitutions, globs, braces, ``~``, ANSI-C quoting),
anything that writes or reads a file through a redirection, and any control
structure makes the command "not plain": an allow rule cannot auto-approve it, and a
person is asked. The bar is deliberately low-tech, in the manner of Codex's
``is_known_safe_command``: accept only what is fully understood.
"""

from __future__ import annotations

import re

import tree_sitter

from bot.permissions.bash_tree import (
    CommandParseError,
    parse_tree,
    unescape_double_quoted,
)

__all__ = ["plain_commands"]

_SEPARATORS = frozenset({";", "&&", "||", "|", "\n", ";;"})
# Globs, expansions, escapes; `~` where bash expands it (word start, after `=` or `:`).
_UNQUOTED_SPECIAL = re.compile(r"[*?\[\]$`\\!]|(?:^|[=:])~")
_BRACE_EXPANSION = re.compile(r"\{[^{}]*(?:,|\.\.)[^{}]*\}")
_HARMLESS_FILES = frozenset({"/dev/null"})
_MAX_COMMANDS = 64


def plain_commands(command: str) -> list[tuple[str, ...]] | None:
    """The argv of each command, when the whole line is plain literal commands.

    Plain means: simple commands joined by ``;``, ``&&``, ``||``, ``|`` or newlines,
    whose words are unquoted text without special characters, single-quoted text, or
    double-quoted text without expansions; no assignments, no ``&``, no subshells or
    control structures, no here-documents or here-strings, and no redirection but to
    ``/dev/null`` or a descriptor duplication (``2>&1``).

    Args:
        command: The command line.

    Returns:
        One argv tuple per command, in order; None when anything is not plain.

    Example:
        >>> plain_commands("git status && ls 'a b' 2>/dev/null")
        [('git', 'status'), ('ls', 'a b')]
        >>> plain_commands("ls *.py") is None
        True
    """
    try:
        root, source = parse_tree(command)
    except CommandParseError:
        return None
    found: list[tuple[str, ...]] = []
    if not _statements(root, source, found) or not found or len(found) > _MAX_COMMANDS:
        return None
    return found


def _statements(root: tree_sitter.Node, source: bytes, found: list[tuple[str, ...]]) -> bool:
    pending = list(reversed(root.children))
    while pending:
        child = pending.pop()
        kind = child.type
        if kind == "comment":
            continue
        if not child.is_named:
            if kind not in _SEPARATORS:
                return False  # `&`, `|&`, `!`...
            continue
        if kind in ("list", "pipeline"):
            pending.extend(reversed(child.children))
        elif kind == "redirected_statement":
            body = _redirected_body(child, source)
            if body is None:
                return False
            pending.append(body)
        elif kind == "command":
            argv = _command(child, source)
            if argv is None:
                return False
            found.append(argv)
        else:
            return False
    return True


def _redirected_body(node: tree_sitter.Node, source: bytes) -> tree_sitter.Node | None:
    """The statement a harmless redirection applies to, or None if it is not harmless."""
    body = node.child_by_field_name("body")
    if body is None or body.type not in ("command", "list", "pipeline"):
        return None
    for child in node.children:
        if child.id == body.id:
            continue
        if child.type != "file_redirect" or not _harmless_redirect(child, source):
            return None
    return body


def _command(node: tree_sitter.Node, source: bytes) -> tuple[str, ...] | None:
    argv: list[str] = []
    for child in node.children:
        kind = child.type
        if kind == "command_name":
            names = child.named_children
            word = _literal(names[0], source) if len(names) == 1 else None
        elif kind == "file_redirect":
            if not _harmless_redirect(child, source):
                return None
            continue
        elif child.is_named:
            word = _literal(child, source)
        else:
            return None  # `$` of `$"..."`, or anything unexpected
        if word is None or _BRACE_EXPANSION.search(_unquoted(child, source)):
            return None
        argv.append(word)
    return tuple(argv) if argv else None


def _unquoted(node: tree_sitter.Node, source: bytes) -> str:
    """The parts of a word bash would brace-expand: its unquoted text (quotes keep
    `'{print $1, $2}'` as it is), with quoted parts standing as one neutral character."""
    if node.type in ("raw_string", "string", "ansi_c_string"):
        return "_"
    if node.type == "concatenation":
        return "".join(_unquoted(child, source) for child in node.children)
    return source[node.start_byte : node.end_byte].decode("utf-8")


def _harmless_redirect(node: tree_sitter.Node, source: bytes) -> bool:
    """``>/dev/null``, ``2>/dev/null``, ``</dev/null``, ``2>&1``, ``>&-``; nothing else."""
    operator = ""
    targets: list[tree_sitter.Node] = []
    for child in node.children:
        if child.type == "file_descriptor":
            continue
        if not child.is_named and not operator:
            operator = child.type
        elif child.is_named:
            targets.append(child)
        elif child.type != "-":
            return False
    if operator in (">&", "<&"):
        if not targets:  # `>&-` closes the descriptor
            return True
        text = source[targets[0].start_byte : targets[0].end_byte].decode("utf-8")
        return len(targets) == 1 and (text.isdigit() or text in _HARMLESS_FILES)
    if operator not in (">", ">>", "<", "&>", "&>>", ">|") or len(targets) != 1:
        return False
    return _literal(targets[0], source) in _HARMLESS_FILES


def _literal(node: tree_sitter.Node, source: bytes) -> str | None:
    """The text of a word bash passes on unchanged, or None."""
    kind = node.type
    text = source[node.start_byte : node.end_byte].decode("utf-8")
    if kind in ("word", "number"):
        return None if _UNQUOTED_SPECIAL.search(text) else text
    if kind == "raw_string":
        return text[1:-1]
    if kind == "string":
        if any(child.type != "string_content" for child in node.named_children):
            return None
        inner = text[1:-1]
        if "$" in inner.replace("\\$", "") or "`" in inner.replace("\\`", ""):
            return None
        return unescape_double_quoted(inner)
    if kind == "concatenation":
        parts = [_literal(child, source) for child in node.children]
        if any(part is None for part in parts):
            return None
        return "".join(part for part in parts if part is not None)
    return None
