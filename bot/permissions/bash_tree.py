"""Parse bash with the real grammar (tree-sitter-bash), within fixed bounds.

Every rule and danger check reads commands through this module, so that they all
see the same parse, and it is the parse bash itself would make: ``$'\\''`` is one
ANSI-C string, not a quote that hides the ``;`` after it. A tree holding ERROR or
MISSING nodes, a command too large or nested too deeply, raises
:class:`CommandParseError`: the caller treats it as "a person must read this".
"""

from __future__ import annotations

import threading

import tree_sitter
import tree_sitter_bash

__all__ = [
    "MAX_COMMAND_BYTES",
    "MAX_TREE_DEPTH",
    "CommandParseError",
    "ansi_c_text",
    "parse_tree",
    "unescape_double_quoted",
    "unescape_unquoted",
]

MAX_COMMAND_BYTES = 256 * 1024
"""Longer commands are not analysed (they ask); tree-sitter itself is linear in this."""

MAX_TREE_DEPTH = 120
"""Deeper syntax trees are not walked (they ask); keeps the Python walkers' recursion small."""

_LANGUAGE = tree_sitter.Language(tree_sitter_bash.language())
_local = threading.local()


class CommandParseError(ValueError):
    """Raised when a command line cannot be read as bash within the bounds."""


def _parser() -> tree_sitter.Parser:
    # A Parser is not safe to share between threads; making one is cheap but not free.
    parser: tree_sitter.Parser | None = getattr(_local, "parser", None)
    if parser is None:
        parser = tree_sitter.Parser(_LANGUAGE)
        _local.parser = parser
    return parser


def parse_tree(command: str) -> tuple[tree_sitter.Node, bytes]:
    """Parse a command line and return the root node with the bytes it indexes.

    Args:
        command: The command line, as given to ``bash -c``.

    Returns:
        The ``program`` node and the UTF-8 source its byte offsets refer to.

    Raises:
        CommandParseError: The text is not valid UTF-8, is too large, or bash's
            grammar does not accept it (the tree has ERROR or MISSING nodes).
    """
    try:
        source = command.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CommandParseError("the command is not valid text") from exc
    if len(source) > MAX_COMMAND_BYTES:
        raise CommandParseError("the command is too large to check")
    if b"\0" in source:
        raise CommandParseError("the command contains a NUL character")
    tree = _parser().parse(source)
    root = tree.root_node
    if root.has_error:
        raise CommandParseError(f"bash's grammar does not accept it ({_first_error(root)})")
    return root, source


def _first_error(root: tree_sitter.Node) -> str:
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_missing:
            return f"missing {node.type!r} at offset {node.start_byte}"
        if node.is_error:
            return f"unexpected text at offset {node.start_byte}"
        stack.extend(reversed([child for child in node.children if child.has_error]))
    return "syntax error"


def unescape_unquoted(text: str) -> str:
    r"""Quote removal for an unquoted word: ``\X`` is ``X``, backslash-newline vanishes."""
    return _remove_backslashes(text, escapable=None)


def unescape_double_quoted(text: str) -> str:
    r"""Quote removal inside ``"..."``: only ``\$ \` \" \\`` and backslash-newline are escapes."""
    return _remove_backslashes(text, escapable='$`"\\\n')


def _remove_backslashes(text: str, *, escapable: str | None) -> str:
    """Drop the backslash of each escape (any character when `escapable` is None)."""
    if "\\" not in text:
        return text
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        escapes = escapable is None or (index + 1 < len(text) and text[index + 1] in escapable)
        if char == "\\" and index + 1 < len(text) and escapes:
            if text[index + 1] != "\n":
                out.append(text[index + 1])
            index += 2
            continue
        out.append(char)
        index += 1
    return "".join(out)


_ANSI_SIMPLE = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}
_HEX = "0123456789abcdefABCDEF"


def ansi_c_text(body: str) -> str:
    r"""The value of ``$'...'`` given what is between the quotes (``\x72m`` is ``rm``)."""
    out: list[str] = []
    index = 0
    while index < len(body):
        char = body[index]
        index += 1
        if char != "\\" or index >= len(body):
            out.append(char)
            continue
        code = body[index]
        index += 1
        if code in _ANSI_SIMPLE:
            out.append(_ANSI_SIMPLE[code])
        elif code in "xuU":
            limit = {"x": 2, "u": 4, "U": 8}[code]
            digits = ""
            while index < len(body) and len(digits) < limit and body[index] in _HEX:
                digits += body[index]
                index += 1
            out.append(chr(min(int(digits, 16), 0x10FFFF)) if digits else "\\" + code)
        elif code in "01234567":
            digits = code
            while index < len(body) and len(digits) < 3 and body[index] in "01234567":
                digits += body[index]
                index += 1
            out.append(chr(int(digits, 8) & 0xFF))
        elif code == "c" and index < len(body):
            out.append(chr(ord(body[index]) & 0x1F))
            index += 1
        else:
            out.append("\\" + code)
    return "".join(out)
