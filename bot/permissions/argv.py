"""Helpers on one simple command's words: redirections, wrappers, the program that runs.

A simple command is kept as a tuple of words in source order, redirections included
(``("ls", "2>", "/dev/null")``). These helpers take such a tuple apart: which words
are redirections, which are the command, and, through wrappers like ``sudo``,
``env`` or ``nice``, which program really runs. Both the deny rules and the danger
patterns use them, so ``/bin/rm``, ``env rm`` and ``\\rm`` are all ``rm`` to both.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from bot.permissions.options import skip_options
from bot.permissions.wrappers import WRAPPERS

__all__ = [
    "SHELL_PROGRAMS",
    "LiteralWord",
    "command_levels",
    "command_words",
    "effective_command",
    "is_redirect_operator",
    "program_name",
    "redirect_targets",
    "redirections",
    "skip_options",
    "unwrap_command",
]

REDIRECT_RE = re.compile(r"(\d*)(&>>|&>|>>|>\||>&|<<<|<<-|<<|<>|<&|>|<)")
_HEREDOC_OPERATORS = frozenset({"<<", "<<-"})
_FD_DUPLICATIONS = frozenset({">&", "<&"})
_RESERVED_WORDS = frozenset({"!", "if", "then", "elif", "else", "do", "while", "until"})
SHELL_PROGRAMS = frozenset(
    """
    sh bash zsh dash ksh mksh ash fish csh tcsh yash posh rbash
    """.split()
)
"""Programs that run shell code: ``-c`` strings and here-documents given to them are parsed."""
ASSIGNMENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")


class LiteralWord(str):
    """A word that looks like an operator but is data (``'>'``, ``\\>``), not a redirection."""

    __slots__ = ()


def is_redirect_operator(word: str) -> bool:
    """Whether a word of a segment is a redirection operator (``>``, ``2>&``, ``<<<``...)."""
    return _redirect_operator(word) is not None


def redirections(segment: Sequence[str]) -> list[tuple[str, str]]:
    """The redirections in a segment, as (operator, target) pairs.

    The operator is given without its file-descriptor number (``2>`` becomes ``>``).
    For here-documents (``<<``, ``<<-``) the target is the delimiter word; for ``<<<``
    it is the string; for ``>&``/``<&`` it may be a descriptor number.

    Args:
        segment: Words of one segment, as returned by :func:`split_segments`.

    Returns:
        The redirections in order; a trailing operator with no target gets "".
    """
    found: list[tuple[str, str]] = []
    index = 0
    while index < len(segment):
        operator = _redirect_operator(segment[index])
        if operator is None:
            index += 1
            continue
        target = segment[index + 1] if index + 1 < len(segment) else ""
        found.append((operator, target))
        index += 2
    return found


def redirect_targets(segment: Sequence[str]) -> list[str]:
    """The files a segment redirects from or to.

    Here-document delimiters, here-strings and descriptor duplications (``2>&1``)
    are not files and are left out.

    Args:
        segment: Words of one segment, as returned by :func:`split_segments`.

    Returns:
        The file words after redirection operators, in order.

    Example:
        >>> redirect_targets(("sort", "<", "in.txt", "2>", "/dev/null", "2>&", "1"))
        ['in.txt', '/dev/null']
    """
    targets: list[str] = []
    for operator, target in redirections(segment):
        if operator in _HEREDOC_OPERATORS or operator == "<<<" or not target:
            continue
        if operator in _FD_DUPLICATIONS and (target.rstrip("-").isdigit() or target == "-"):
            continue
        targets.append(target)
    return targets


def command_words(segment: Sequence[str]) -> tuple[str, ...]:
    """A segment without its redirections (operators, descriptor numbers and targets).

    Args:
        segment: Words of one segment, as returned by :func:`split_segments`.

    Returns:
        The remaining words: variable assignments, the program and its arguments.

    Example:
        >>> command_words(("ls", "-l", "2>", "/dev/null", ">", "out"))
        ('ls', '-l')
    """
    words: list[str] = []
    index = 0
    while index < len(segment):
        if _redirect_operator(segment[index]) is not None:
            index += 2
            continue
        words.append(segment[index])
        index += 1
    return tuple(words)


def program_name(word: str) -> str:
    """How a command word names its program: basename, without a leading backslash.

    Args:
        word: The first word of a command.

    Returns:
        ``rm`` for ``/usr/bin/rm`` or ``\\rm``; words holding a substitution are left
        as they are.
    """
    name = word.lstrip("\\")
    if "$(" in name or "`" in name:
        return word
    base = name.rsplit("/", 1)[-1]
    return base or name or word


def unwrap_command(words: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Separate the wrappers of a command from the program they run.

    Leading variable assignments (``FOO=1``), reserved words (``if``, ``then``, ``do``,
    ``!`` ...) and wrappers with their options are skipped: every program of
    :data:`bot.permissions.wrappers.WRAPPERS` (``env``, ``sudo``, ``nice``, ``timeout``,
    ``taskset``, ``flock``, ``chrt``, ``setsid``, ``strace``, ...). A wrapper with
    nothing to run (bare ``env``, ``sudo -v``, ``taskset -p PID``; ``command -v``,
    which only looks a name up) is itself the program.

    Args:
        words: A segment or its :func:`command_words`; redirections are dropped.

    Returns:
        The wrapper names (normalised with :func:`program_name`) and the effective
        command, whose first word is normalised the same way.
    """
    levels = command_levels(words)
    wrappers = tuple(level[0] for level in levels[:-1])
    return wrappers, levels[-1] if levels[-1] else ()


def command_levels(words: Sequence[str]) -> list[tuple[str, ...]]:
    """Each program a command line starts, outermost first: the wrappers, then the command.

    ``nice -n 5 watch 'rm -rf x'`` gives ``[('nice', '-n', '5', 'watch', 'rm -rf x'),
    ('watch', 'rm -rf x'), ('rm -rf x',)]``; the first word of each is normalised with
    :func:`program_name`. The last one is the effective command (empty when there is
    none); a checker that looks for shell code given as a word (`watch`'s) looks at
    every level.
    """
    remaining = command_words(words)
    levels: list[tuple[str, ...]] = []
    # Each round drops at least the wrapper's own word, so this always ends.
    while True:
        while remaining and (ASSIGNMENT_RE.match(remaining[0]) or remaining[0] in _RESERVED_WORDS):
            remaining = remaining[1:]
        if not remaining:
            break
        name = program_name(remaining[0])
        handler = WRAPPERS.get(name)
        wrapped = handler(remaining[1:]) if handler is not None else None
        if not wrapped:
            break
        levels.append((name, *remaining[1:]))
        remaining = wrapped
    levels.append((program_name(remaining[0]), *remaining[1:]) if remaining else ())
    return levels


def effective_command(words: Sequence[str]) -> tuple[str, ...]:
    """The command that really runs, with wrappers and assignments stripped.

    ``FOO=1 sudo -u me nice -n 5 /usr/bin/rm -rf x`` gives ``('rm', '-rf', 'x')``.
    See :func:`unwrap_command` for the wrappers recognised.

    Args:
        words: A segment or its :func:`command_words`.

    Returns:
        The program (basename, no leading backslash) and its arguments; empty when
        the segment holds only assignments or reserved words.
    """
    return unwrap_command(words)[1]


def _redirect_operator(word: str) -> str | None:
    if isinstance(word, LiteralWord):
        return None
    match = REDIRECT_RE.fullmatch(word)
    return match.group(2) if match else None
