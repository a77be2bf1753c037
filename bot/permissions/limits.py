"""How large a command Baton judges automatically, measured before any parsing.

Judging reads a command with bash's grammar and checks every simple command in it, in
time that grows with the command: an 80 KB pipeline of 40,000 parts took seconds. Real
commands are far smaller, so a command longer than :data:`MAX_COMMAND_BYTES` or with
more than :data:`MAX_COMMAND_PARTS` pipeline and list parts asks a person straight
away. The parts are counted by a single pass over the text that knows quotes,
escapes and here-documents (whose bodies are data, however many lines they have), so
the count costs what reading the text once costs.
"""

from __future__ import annotations

import re

__all__ = ["MAX_COMMAND_BYTES", "MAX_COMMAND_PARTS", "count_parts", "size_problem"]

MAX_COMMAND_BYTES = 64 * 1024
"""Longer commands ask: a person reads them. Real commands (16 KB and more) pass."""

MAX_COMMAND_PARTS = 256
"""Commands joined by ``|``, ``;``, ``&``, ``&&``, ``||`` or newlines; more ask.

Judging costs about 0.1 ms of the interpreter per part, held from the event loop's
thread: 256 parts (tens of milliseconds) is more than a real command line has.
"""

_HEREDOC = re.compile(r"<<(-?)[ \t]*(?:'([^'\n]*)'|\"([^\"\n]*)\"|\\?([^\s;&|<>()]+))")
_INTERESTING = re.compile(r"[\\'\"|;&\n<$`#]")


def size_problem(command: str) -> str | None:
    """Why ``command`` is too large to judge automatically, or None.

    Returns:
        A sentence for the approver naming the limit exceeded.
    """
    size = len(command.encode("utf-8", "surrogatepass"))
    if size > MAX_COMMAND_BYTES:
        return (
            f"the command is {size:,} bytes long, over the {MAX_COMMAND_BYTES:,} Baton judges "
            "automatically"
        )
    parts = count_parts(command, stop_after=MAX_COMMAND_PARTS)
    if parts > MAX_COMMAND_PARTS:
        return (
            f"the command has more than {MAX_COMMAND_PARTS} commands joined by pipes, "
            "separators or newlines, more than Baton judges automatically"
        )
    return None


def count_parts(command: str, *, stop_after: int | None = None) -> int:
    """How many commands ``command`` joins, counted lexically (an upper bound for odd text).

    Separators inside quotes, after a backslash, in comments and in here-document
    bodies do not count. ``>&``, ``&>`` and ``2>&1`` are redirections, not separators.

    Args:
        command: The command line.
        stop_after: Stop counting once the count passes this (it is then the answer).
    """
    parts = 1
    index = 0
    pending: list[tuple[str, bool]] = []  # here-documents whose bodies start next line
    length = len(command)
    while index < length:
        match = _INTERESTING.search(command, index)
        if match is None:
            break
        index = match.start()
        char = command[index]
        if char == "\\":
            index += 2
        elif char == "'":
            index = _closing(command, index + 1, "'")
        elif char == '"':
            index = _quoted_end(command, index + 1, '"')
        elif char == "$" and command.startswith("$'", index):
            index = _quoted_end(command, index + 2, "'")
        elif char == "#" and (index == 0 or command[index - 1] in " \t\n;&|()"):
            end = command.find("\n", index)
            index = length if end < 0 else end
        elif char == "<":
            heredoc = _HEREDOC.match(command, index)
            if heredoc is not None and not command.startswith("<<<", index):
                delimiter = next(g for g in heredoc.groups()[1:] if g is not None)
                pending.append((delimiter, heredoc.group(1) == "-"))
                index = heredoc.end()
            else:
                index += 1
        elif char == "\n":
            parts += 1
            index += 1
            if pending:
                index = _after_bodies(command, index, pending)
                pending = []
        elif char in "|;&":
            if _is_separator(command, index):
                parts += 1
            doubled = command.startswith(char * 2, index) or command.startswith("|&", index)
            index += 2 if doubled else 1
        else:  # `$` or a backquote: nothing to count
            index += 1
        if stop_after is not None and parts > stop_after:
            return parts
    return parts


def _is_separator(command: str, index: int) -> bool:
    char = command[index]
    if char != "&":
        return True
    before = command[index - 1] if index else ""
    after = command[index + 1] if index + 1 < len(command) else ""
    return before not in "<>" and after != ">"  # `2>&1`, `>&2`, `&>file` redirect


def _closing(command: str, start: int, quote: str) -> int:
    end = command.find(quote, start)
    return len(command) if end < 0 else end + 1


def _quoted_end(command: str, start: int, quote: str) -> int:
    """The index after a quote that a backslash escapes (`"..."` and `$'...'`)."""
    index = start
    while index < len(command):
        char = command[index]
        if char == "\\":
            index += 2
        elif char == quote:
            return index + 1
        else:
            index += 1
    return len(command)


def _after_bodies(command: str, index: int, pending: list[tuple[str, bool]]) -> int:
    """The index after the here-document bodies that start at ``index``, one per delimiter."""
    for delimiter, strip_tabs in pending:
        while index < len(command):
            end = command.find("\n", index)
            line = command[index : len(command) if end < 0 else end]
            index = len(command) if end < 0 else end + 1
            if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                break
    return index
