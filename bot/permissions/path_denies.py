"""Deny rules on files hold for commands too: ``read_file(**/appsettings*)`` stops ``cat``.

An operator who writes ``deny: ["read_file(**/appsettings*)"]`` means the file, not
the tool: ``cat appsettings.json`` under ``bash(cat *)`` must not read it either. A
deny rule for a file tool (``read_file``, ``write_file``, ``edit_file``, ``list_dir``,
``grep``) with a pattern is matched against every word of a command that may name a
path: operands, redirection targets and ``--option=VALUE`` values, each as written,
normalised, and as the workspace file it leads to; a word with glob characters is
expanded against the workspace, as bash would. A word that names an existing file, a
path with a directory in it, or a redirection target is denied; a bare word that only
matches the pattern's text (``grep -r appsettings .`` searches for the word) asks.
"""

from __future__ import annotations

import glob
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from bot.permissions.argv import is_redirect_operator
from bot.permissions.danger_context import CommandContext
from bot.permissions.deadline import check_deadline
from bot.permissions.protected_words import MAX_GLOB_CHARS
from bot.permissions.rules import Rule

__all__ = ["FILE_TOOLS", "PathDenial", "path_denial"]

FILE_TOOLS = frozenset({"read_file", "write_file", "edit_file", "list_dir", "grep"})
"""Tools whose deny rules name files, and so also hold for commands naming them."""

_GLOB_CHARS = frozenset("*?[")
_SED_FILES = re.compile(r"[rRwW]\s*([^\s;}]+)")
_AWK_STRINGS = re.compile(r'"((?:[^"\\]|\\.)*)"')
_MAX_EXPANSION = 2_000


@dataclass(frozen=True, slots=True)
class PathDenial:
    """A deny rule a command's word matches, and whether the word surely names a file."""

    rule: Rule
    word: str
    certain: bool


def path_denial(
    contexts: Sequence[CommandContext],
    rules: Sequence[Rule],
    *,
    root: str,
    spellings: Callable[[str], list[str]],
    exists: Callable[[str], bool],
) -> PathDenial | None:
    """The first file-tool deny rule a word of the command matches, certain ones first.

    Args:
        contexts: Every simple command of the call.
        rules: The deny rules (those for other tools, or without a pattern, are skipped).
        root: The workspace root, where relative words and globs are read.
        spellings: The spellings of a path word (as written, normalised, and the
            workspace path it really leads to).
        exists: Whether a path (relative to the workspace root) names something.

    Returns:
        The denial, or None.
    """
    denying = [r for r in rules if r.pattern is not None and r.tool in FILE_TOOLS]
    if not denying:
        return None
    doubtful: PathDenial | None = None
    for context in contexts:
        for word, target in _path_words(context.command.words, context.program):
            check_deadline()
            names = [word]
            if any(char in _GLOB_CHARS for char in word):
                if len(word) > MAX_GLOB_CHARS:
                    # Too long to expand within bounds (glob's matching is superlinear,
                    # and it recurses per component): a person reads it.
                    matched = any(r.pattern is not None for r in denying)
                    if matched and doubtful is None:
                        doubtful = PathDenial(rule=denying[0], word=word[:60], certain=False)
                    continue
                names += _expanded(word, root)
            for name in names:
                forms = spellings(name)
                rule = next((r for r in denying if r.matches(r.tool, forms, "path")), None)
                if rule is None:
                    continue
                certain = target or name != word or "/" in name or exists(name)
                if certain:
                    return PathDenial(rule=rule, word=name, certain=True)
                doubtful = doubtful or PathDenial(rule=rule, word=name, certain=False)
    return doubtful


def _path_words(words: Sequence[str], program: str) -> Iterator[tuple[str, bool]]:
    """Each word that may name a path, with True when it is a redirection's target.

    Operands and ``--option=VALUE`` values; the value attached to a short option
    (``-fFILE``); the path of ``REV:PATH`` (``git show HEAD:secrets.json``); and the files
    a sed or awk program reads or writes by name (``sed '1r FILE'``, ``getline < "FILE"``).
    """
    after_operator = False
    for word in words:
        if is_redirect_operator(word):
            after_operator = True
            continue
        if after_operator:
            after_operator = False
            yield word, True
            continue
        if "\0" in word:
            continue
        if word.startswith("--"):
            value = word.partition("=")[2]
        elif word.startswith("-") and len(word) > 2:
            value = word[2:]
        else:
            value = word
        if value and not value.startswith("-"):
            yield value, False
            if ":" in value:
                yield value.split(":", 1)[1], False
        if program in ("sed",):
            yield from ((name, False) for name in _SED_FILES.findall(word))
        elif program in ("awk", "gawk", "mawk", "nawk"):
            yield from ((name, False) for name in _AWK_STRINGS.findall(word))


def _expanded(word: str, root: str) -> list[str]:
    """What bash would make of a glob in the workspace (bounded; hidden files as bash does)."""
    found: list[str] = []
    try:
        for match in glob.iglob(word, root_dir=root):
            check_deadline()
            found.append(match)
            if len(found) >= _MAX_EXPANSION:
                break
    except (OSError, ValueError, RecursionError):
        return []
    return found
