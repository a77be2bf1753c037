"""``awk`` (POSIX awk, gawk, mawk): its options, and what its program text may do.

An awk program can run commands (``system(...)``, ``print | "cmd"``, ``"cmd" |
getline``, gawk's ``|&``), write files (``print > "f"``, ``printf >> "f"``) and load
code (gawk's ``@load``, ``@include``, ``-f``, ``-i``, ``-l``). :func:`awk_problem`
reads the options, and looks for those constructs in the program's raw text, erring
towards asking (see :func:`_program_problem`).
"""

from __future__ import annotations

import re

from bot.permissions.options import parse_args, table

__all__ = ["awk_problem"]

_AWK = table(
    flags="bcCghkLMnNOPrsSVtD",
    values="FvfeiElW",
    optional="dpo",
    longs="characters-as-bytes traditional copyright gen-pot help csv lint bignum "
    "non-decimal-data use-lc-numeric optimize posix re-interval no-optimize sandbox version "
    "debug",
    long_values="field-separator assign file source include exec load",
    long_optional="dump-variables profile pretty-print",
    names={
        "F": "field-separator",
        "v": "assign",
        "f": "file",
        "e": "source",
        "i": "include",
        "E": "exec",
        "l": "load",
        "d": "dump-variables",
        "p": "profile",
        "o": "pretty-print",
        "D": "debug",
        "W": "mawk",
    },
    permute=False,
)
_UNSAFE_OPTIONS = {
    "file": "-f/--file reads the program from a file this check cannot see",
    "exec": "-E/--exec reads the program from a file this check cannot see",
    "include": "-i/--include loads awk source files",
    "load": "-l/--load loads a shared library",
    "dump-variables": "-d/--dump-variables writes a file",
    "profile": "-p/--profile writes a file",
    "pretty-print": "-o/--pretty-print writes a file",
    "debug": "-D/--debug starts gawk's debugger, which runs commands",
}
# mawk's -W options that only change how it reads or reports.
_MAWK_HARMLESS = re.compile(
    r"(?:version|usage|help|dump|posix_space|posix|interactive|"
    r"sprintf=\d+|random=\d+|v)"
)


def awk_problem(args: tuple[str, ...], *, open_ended: bool = False) -> str | None:
    """Why ``awk ARGS`` is more than a read, or None when its program only reads and prints.

    Args:
        args: The words after ``awk``.
        open_ended: More words will be appended (``xargs awk ...``); awk reads those as
            files or assignments, which only read, so this changes nothing.

    Returns:
        A sentence naming what writes, runs or loads code, or None.
    """
    del open_ended  # appended words come after the program: files and assignments
    parsed = parse_args(args, _AWK)
    if (unknown := parsed.unknown()) is not None:
        return f"awk {unknown.word}: an option this check does not know"
    for option in parsed.options:
        if option.name in _UNSAFE_OPTIONS:
            return f"awk {_UNSAFE_OPTIONS[option.name]}"
        if option.name == "mawk" and not _MAWK_HARMLESS.fullmatch(option.value or ""):
            return f"awk -W {option.value}: a mawk option this check does not vouch for"
    programs = parsed.values("source")
    if not programs:
        if not parsed.operands:
            return "awk without a program"
        programs = [parsed.operands[0]]
    for program in programs:
        if problem := _program_problem(program):
            return problem
    return None


_SYSTEM_CALL = re.compile(r"\bsystem\b")  # called with any spacing, even across lines
_PIPE = re.compile(r"(?<!\|)\|(?!\|)")  # `|` and `|&`, not `||`
_PRINT = re.compile(r"\bprintf?\b")
_REDIRECT = re.compile(r">(?!=)")


def _program_problem(program: str) -> str | None:
    """The first construct of an awk program that runs a command, writes or loads code.

    Read on the raw text, strings and regular expressions included, rather than through a
    tokeniser: awk's grammar tells a regular expression from a division, and where a
    statement ends, by its parser's state (gawk and mawk differ), and a reader that
    guessed wrong once hid a pipe behind a `#` it took for a comment. So any single `|`
    is taken for a pipe to or from a command, and any `>` after a `print` or `printf`
    for a redirection: `/a|b/` and `print (x > y)` ask a person, needlessly but safely.
    """
    if _SYSTEM_CALL.search(program):
        return "awk system() runs a command"
    if "@" in program:
        return "awk @-directives (@load, @include, indirect calls) load or run code"
    if _PIPE.search(program):
        return "awk pipes to or from a command with | (any single `|` is taken for one)"
    if (found := _PRINT.search(program)) and _REDIRECT.search(program, found.end()):
        return "awk print/printf with > or >> writes a file (any `>` after a print counts)"
    return None
