"""``awk`` (POSIX awk, gawk, mawk): its options, and the program text read token by token.

An awk program can run commands (``system(...)``, ``print | "cmd"``, ``"cmd" |
getline``, gawk's ``|&``), write files (``print > "f"``, ``printf >> "f"``) and load
code (gawk's ``@load``, ``@include``, ``-f``, ``-i``, ``-l``). :func:`awk_problem`
reads the program with awk's lexical rules: strings, regular expressions (told from
division by what precedes the slash), comments; a single ``|`` is always a pipe to or
from a command in awk (there is no bitwise or), and ``>``/``>>`` are redirections
exactly when they stand in a ``print``/``printf`` statement outside parentheses. Text
it cannot tokenise is refused.
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
    names={"F": "field-separator", "v": "assign", "f": "file", "e": "source", "i": "include",
           "E": "exec", "l": "load", "d": "dump-variables", "p": "profile",
           "o": "pretty-print", "D": "debug", "W": "mawk"},
    permute=False,
)  # fmt: skip
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
_MAWK_HARMLESS = re.compile(r"(?:version|usage|help|dump|posix_space|posix|interactive|"
                            r"sprintf=\d+|random=\d+|v)")  # fmt: skip

_KEYWORD_PRINT = frozenset({"print", "printf"})
# Keywords after which a `/` starts a regular expression, though they end in a letter.
_KEYWORDS_BEFORE_OPERAND = frozenset({"print", "printf", "return", "do", "else", "in", "case"})
# After these a `/` divides (they end an operand); anywhere else it starts a regex.
_OPERAND_END = re.compile(r"[A-Za-z0-9_\)\]\$\"]")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Unreadable(ValueError):
    """The program holds something this reader does not tokenise."""


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
        try:
            problem = _program_problem(program)
        except _Unreadable as error:
            return f"awk program {program[:60]!r} could not be read ({error})"
        if problem is not None:
            return problem
    return None


_SYSTEM_CALL = re.compile(r"\bsystem\s*\(")


def _program_problem(program: str) -> str | None:
    """The first construct of an awk program that runs a command, writes or loads code.

    ``system(`` and ``@`` are looked for in the raw text too, strings included: a
    reading that took a regular expression for a division could otherwise hide them.
    """
    if _SYSTEM_CALL.search(program):
        return "awk system() runs a command"
    if "@" in program:
        return "awk @-directives (@load, @include, indirect calls) load or run code"
    in_print = False
    depth = 0  # parentheses and brackets opened since the print began
    previous = ""  # the last significant character, to tell a regex from division
    index = 0
    while index < len(program):
        char = program[index]
        if char in " \t":
            index += 1
            continue
        if char == "\\" and program[index + 1 : index + 2] == "\n":
            index += 2
            continue
        if char == "#":
            end = program.find("\n", index)
            index = len(program) if end < 0 else end
            continue
        if char == '"':
            index = _skip_quoted(program, index, '"')
            previous = '"'
            continue
        if char == "/" and not _OPERAND_END.match(previous or " "):
            index = _skip_quoted(program, index, "/")
            previous = ")"
            continue
        if char == "@":
            return "awk @-directives (@load, @include, indirect calls) load or run code"
        if char == "|":
            if program[index + 1 : index + 2] == "|":
                index += 2
                previous = "|"
                continue
            return "awk pipes to or from a command with |"
        if char.isalpha() or char == "_":
            match = _IDENTIFIER.match(program, index)
            assert match is not None
            word = match.group()
            index = match.end()
            if word == "system":
                return "awk system() runs a command"
            if word in _KEYWORD_PRINT:
                in_print, depth = True, 0
            previous = "(" if word in _KEYWORDS_BEFORE_OPERAND else word[-1]
            continue
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char in ";\n{}":
            in_print = False
        elif char == ">" and in_print and depth <= 0:
            return "awk print/printf with > or >> writes a file"
        previous = char
        index += 1
    return None


def _skip_quoted(program: str, start: int, quote: str) -> int:
    """The index after the string or regular expression that starts at ``start``."""
    index = start + 1
    in_brackets = False
    while index < len(program):
        char = program[index]
        if char == "\\":
            index += 2
            continue
        if char == "\n":
            break
        if quote == "/" and char == "[":
            in_brackets = True
        elif quote == "/" and char == "]":
            in_brackets = False
        elif char == quote and not in_brackets:
            return index + 1
        index += 1
    raise _Unreadable("a string or regular expression is not closed")
