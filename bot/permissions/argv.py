"""Helpers on one simple command's words: redirections, wrappers, the program that runs.

A simple command is kept as a tuple of words in source order, redirections included
(``("ls", "2>", "/dev/null")``). These helpers take such a tuple apart: which words
are redirections, which are the command, and, through wrappers like ``sudo``,
``env`` or ``nice``, which program really runs. Both the deny rules and the danger
patterns use them, so ``/bin/rm``, ``env rm`` and ``\\rm`` are all ``rm`` to both.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence

from bot.permissions.bash_tree import CommandParseError

__all__ = [
    "SHELL_PROGRAMS",
    "LiteralWord",
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
    {"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "yash",
     "posh", "rbash"}
)  # fmt: skip
"""Programs that run shell code: ``-c`` strings and here-documents given to them are parsed."""
ASSIGNMENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")


class LiteralWord(str):
    """A word that looks like an operator but is data (``'>'``, ``\\>``), not a redirection."""

    __slots__ = ()


def is_redirect_operator(word: str) -> bool:
    """Whether a word of a segment is a redirection operator (``>``, ``2>&``, ``<<<``...)."""
    return _redirect_operator(word) is not None


# --------------------------------------------------------------------------------------
# Wrappers: programs that run the rest of their arguments as a command

_WrapperHandler = Callable[[tuple[str, ...]], tuple[str, ...] | None]


def skip_options(
    args: Sequence[str], *, short: str = "", long: frozenset[str] = frozenset()
) -> int:
    """Index of the first operand, skipping options and the values they take.

    Args:
        args: The arguments after the program name.
        short: Short options that take a value (attached, ``-n5``, or the next word).
        long: Long options that take the next word as value unless written ``--x=v``.

    Returns:
        The index of the first word that is not an option (or ``len(args)``).
    """
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            return index + 1
        if arg.startswith("--"):
            index += 1
            if "=" not in arg and arg in long:
                index += 1
        elif arg.startswith("-") and len(arg) > 1:
            index += 1
            for position, letter in enumerate(arg[1:], start=2):
                if letter in short:
                    if position == len(arg):
                        index += 1
                    break
        else:
            return index
    return index


def _after_options(
    short: str = "", long: frozenset[str] = frozenset(), operands: int = 0
) -> _WrapperHandler:
    def handler(args: tuple[str, ...]) -> tuple[str, ...] | None:
        start = skip_options(args, short=short, long=long) + operands
        return args[start:] if start < len(args) else None

    return handler


def _env_command(args: tuple[str, ...]) -> tuple[str, ...] | None:
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in ("-S", "--split-string") or arg.startswith(("-S", "--split-string=")):
            if arg in ("-S", "--split-string"):
                value = args[index + 1] if index + 1 < len(args) else ""
                rest = args[index + 2 :]
            else:
                value = arg.split("=", 1)[1] if arg.startswith("--") else arg[2:]
                rest = args[index + 1 :]
            try:
                split = tuple(shlex.split(value))
            except ValueError as exc:
                raise CommandParseError(f"cannot split 'env -S' string: {exc}") from exc
            return (*split, *rest) or None
        if arg == "--":
            index += 1
            break
        if arg in ("-u", "-C", "--unset", "--chdir"):
            index += 2
        elif arg.startswith("-"):
            index += 1  # includes `-` alone, an old spelling of -i
        else:
            break
    while index < len(args) and ASSIGNMENT_RE.match(args[index]):
        index += 1
    # `env FOO=1` alone prints the environment: then env itself is the program.
    return args[index:] or None


def _command_builtin(args: tuple[str, ...]) -> tuple[str, ...] | None:
    start = skip_options(args)
    options = "".join(arg for arg in args[:start] if arg != "--")
    if "v" in options or "V" in options:
        return None  # `command -v rm` only looks the program up
    return args[start:] or None


_WRAPPERS: dict[str, _WrapperHandler] = {
    "sudo": _after_options(
        "ugpCDhrtTUR",
        frozenset(
            {"--user", "--group", "--prompt", "--close-from", "--chdir", "--role", "--type",
             "--command-timeout", "--other-user", "--host", "--chroot"}
        ),
    ),
    "doas": _after_options("uC"),
    "pkexec": _after_options("", frozenset({"--user"})),
    "run0": _after_options("uDg", frozenset({"--user", "--group", "--chdir"})),
    "env": _env_command,
    "nohup": _after_options(),
    "time": _after_options("fo", frozenset({"--format", "--output"})),
    "nice": _after_options("n", frozenset({"--adjustment"})),
    "ionice": _after_options("cnpPu", frozenset({"--class", "--classdata"})),
    "timeout": _after_options("sk", frozenset({"--signal", "--kill-after"}), operands=1),
    "command": _command_builtin,
    "exec": _after_options("a"),
    "builtin": _after_options(),
    "stdbuf": _after_options("ioe", frozenset({"--input", "--output", "--error"})),
    "setsid": _after_options(),
    "unbuffer": _after_options(),
    "chronic": _after_options(),
    "busybox": _after_options(),
}  # fmt: skip


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
    ``!`` ...) and wrappers with their options are skipped: ``env``, ``sudo``,
    ``doas``, ``pkexec``, ``nohup``, ``time``, ``nice``, ``ionice``, ``timeout``,
    ``command``, ``exec``, ``builtin``, ``stdbuf``, ``setsid``, ``unbuffer``,
    ``chronic`` and ``busybox``. A wrapper with nothing to run (bare ``env`` or
    ``sudo -v``; ``command -v``, which only looks a name up) is itself the program.

    Args:
        words: A segment or its :func:`command_words`; redirections are dropped.

    Returns:
        The wrapper names (normalised with :func:`program_name`) and the effective
        command, whose first word is normalised the same way.
    """
    remaining = command_words(words)
    wrappers: list[str] = []
    # Each round drops at least the wrapper's own word, so this always ends.
    while True:
        while remaining and (ASSIGNMENT_RE.match(remaining[0]) or remaining[0] in _RESERVED_WORDS):
            remaining = remaining[1:]
        if not remaining:
            break
        name = program_name(remaining[0])
        handler = _WRAPPERS.get(name)
        if handler is None:
            break
        wrapped = handler(remaining[1:])
        if not wrapped:
            break
        wrappers.append(name)
        remaining = wrapped
    if remaining:
        remaining = (program_name(remaining[0]), *remaining[1:])
    return tuple(wrappers), remaining


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
