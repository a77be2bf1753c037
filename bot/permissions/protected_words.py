"""Commands that name Baton's own files: its database, its configuration, ``.baton/``.

The file tools refuse those files by identity; a command is refused by its words, so
plain attempts stop before they run (``rm -r .baton``, ``echo x > baton.yaml``, ``cat
baton.db``), and the sandbox masks or protects the files whatever a command does. A
literal name is refused; a glob that may match one of those files (``ls *``) only
asks: a person can see what it expands to.
"""

from __future__ import annotations

import fnmatch
import itertools
import os
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from bot.permissions.argv import redirect_targets
from bot.permissions.danger_context import CommandContext
from bot.permissions.danger_patterns import DangerMatch
from bot.permissions.deadline import check_deadline
from bot.sandbox.policy import CLAUDE_DIRS
from bot.tools.workspace import PROTECTED_DIR, PROTECTED_MESSAGE, Workspace

__all__ = ["MAX_GLOB_CHARS", "READ_ONLY_PROGRAMS", "protected_words"]

MAX_GLOB_CHARS = 256
"""Longer words with glob characters are not matched against Baton's files: they ask."""

READ_ONLY_PROGRAMS = frozenset(
    """
    cat ls head tail less more grep rg wc stat file diff tree du md5sum sha256sum shasum echo printf
    test [
    """.split()
)
"""Programs that only read: naming a protected (not private) path in them is harmless."""


def protected_words(
    contexts: Sequence[CommandContext], workspace: Workspace
) -> tuple[str | None, DangerMatch | None]:
    """Why a command naming Baton's files is refused, or why a person should look.

    Args:
        contexts: Every simple command of the call.
        workspace: The workspace, which knows Baton's private and protected files.

    Returns:
        Why the command is refused (or None), and else why a person should look.
    """
    concern: DangerMatch | None = None
    names = {path.name for path in (*workspace.private_files, *workspace.protected_files)}
    for context in contexts:
        targets = redirect_targets(context.command.words)
        writes = context.program not in READ_ONLY_PROGRAMS
        for word in (*context.words, *targets):
            check_deadline()
            if not _may_name(word, names):
                continue
            if _globs(word) and len(word) > MAX_GLOB_CHARS:
                # Matching a glob costs time that grows faster than its length (Python's
                # fnmatch), and no deadline reaches inside it: a person reads this one.
                concern = concern or DangerMatch(
                    pattern="baton-file-glob",
                    reason=f"a {len(word):,}-character glob may match Baton's files: a "
                    "person should check what it expands to.",
                )
                continue
            named = _named_files(word, workspace.private_files, workspace.root)
            if writes or word in targets:
                named += _named_files(word, workspace.protected_files, workspace.root)
                if _names_protected_dir(word):
                    return f"{word!r} {PROTECTED_MESSAGE}", None
            exact = [path for path, glob in named if not glob]
            if exact:
                path = exact[0]
                if path in workspace.private_files:
                    label = _label(path, workspace)
                    return f"{word!r} is Baton's {label}; no tool may use it", None
                return f"{word!r} {PROTECTED_MESSAGE}", None
            if named and concern is None:
                labels = " and ".join(
                    dict.fromkeys(f"{_label(p, workspace)} ({p.name})" for p, _ in named)
                )
                concern = DangerMatch(
                    pattern="baton-file-glob",
                    reason=f"{word!r} may match Baton's {labels}: a person should check "
                    "what it expands to.",
                )
    return None, concern


def _names_protected_dir(word: str) -> bool:
    """Whether `word` is a path into `.baton/`, `.claude/agents/` or `.claude/skills/`."""
    parts = PurePosixPath(word).parts
    if PROTECTED_DIR in parts:
        return True
    pairs = set(itertools.pairwise(parts))
    return any(tuple(name.split("/")) in pairs for name in CLAUDE_DIRS)


def _may_name(word: str, names: set[str]) -> bool:
    """A cheap first look: whether the word could name one of the files at all."""
    if PROTECTED_DIR in word or ".claude" in word or any(char in word for char in "*?["):
        return True
    return os.path.basename(word) in names


def _label(path: Path, workspace: Workspace) -> str:
    """What a private or protected file is to Baton, as the approver should read it."""
    return "configuration" if path in workspace.protected_files else "database"


def _named_files(word: str, files: frozenset[Path], root: Path) -> list[tuple[Path, bool]]:
    """The files ``word`` names, each with True when only a glob in it matches."""
    found: list[tuple[Path, bool]] = []
    for path in sorted(files):
        if word == str(path):
            found.append((path, False))
            continue
        if PurePosixPath(word).name == path.name:
            candidate = Path(word) if os.path.isabs(word) else root / word
            if os.path.realpath(candidate) == str(path):
                found.append((path, False))
                continue
        if _globs(word) and fnmatch.fnmatchcase(path.name, PurePosixPath(word).name):
            # `cat baton.d?`: bash would expand the glob to the file
            parent = str(PurePosixPath(word).parent)
            folder = Path(parent) if os.path.isabs(parent) else root / parent
            if os.path.realpath(folder) == str(path.parent):
                found.append((path, True))
    return found


def _globs(word: str) -> bool:
    return any(char in word for char in "*?[")
