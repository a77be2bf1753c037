"""Find the code a command runs from its arguments: ``sh -c``, ``xargs``, ``find -exec``.

These read one program's argument list, already split into words, and find the code
hidden in it: the script of ``sh -c SCRIPT``, the command of
``xargs CMD`` and of each ``find -exec CMD ;``. :mod:`bot.permissions.shell_words`
parses what they find, so the checks see those commands as well.
"""

from __future__ import annotations

from collections.abc import Sequence

from bot.permissions.options import skip_options

__all__ = ["find_exec_commands", "shell_script_argument", "xargs_command"]


def shell_script_argument(args: Sequence[str]) -> str | None:
    """The script of ``sh -c SCRIPT``, or None when the shell reads a file or stdin."""
    has_c = False
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg in ("--", "-"):
            break
        if arg in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            index += 1
        elif arg.startswith("--"):
            continue
        elif arg.startswith(("-", "+")) and len(arg) > 1:
            has_c = has_c or (arg[0] == "-" and "c" in arg[1:])
        else:
            return arg if has_c else None
    if has_c and index < len(args):
        return args[index]
    return None


# xargs' long options that take a value.
_XARGS_VALUES = frozenset(
    """
    --arg-file --delimiter --eof --replace --max-lines --max-args --max-procs --max-chars
    --process-slot-var
    """.split()
)


def xargs_command(args: Sequence[str]) -> tuple[str, ...]:
    """The command ``xargs ARGS`` runs: ``echo`` when none is given."""
    start = skip_options(args, short="aEdILnPs", long=_XARGS_VALUES)
    return tuple(args[start:]) or ("echo",)


def find_exec_commands(args: Sequence[str]) -> list[tuple[str, ...]]:
    """The commands ``find ARGS`` runs by ``-exec``, ``-execdir``, ``-ok``, ``-okdir``."""
    commands: list[tuple[str, ...]] = []
    index = 0
    while index < len(args):
        if args[index] in ("-exec", "-execdir", "-ok", "-okdir"):
            end = index + 1
            while end < len(args) and args[end] not in (";", "+"):
                end += 1
            commands.append(tuple(args[index + 1 : end]))
            index = end
        index += 1
    return commands
