"""plain_commands: only fully literal command lists are understood."""

from __future__ import annotations

import pytest

from bot.permissions.plain import plain_commands


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("git status", [("git", "status")]),
        ("git status && git diff", [("git", "status"), ("git", "diff")]),
        ("a; b || c | d\ne", [("a",), ("b",), ("c",), ("d",), ("e",)]),
        ("ls 'a b' \"c d\"", [("ls", "a b", "c d")]),
        ('echo "a\\"b"', [("echo", 'a"b')]),
        ("ls 2>/dev/null", [("ls",)]),
        ("ls >/dev/null 2>&1", [("ls",)]),
        ("git status && git diff 2>/dev/null", [("git", "status"), ("git", "diff")]),
        ("git diff HEAD~1 -- src/a.py", [("git", "diff", "HEAD~1", "--", "src/a.py")]),
        ("git stash show stash@{0}", [("git", "stash", "show", "stash@{0}")]),
        ("ls/../../usr/bin/python3 -c x", [("ls/../../usr/bin/python3", "-c", "x")]),
        ("ls '*'", [("ls", "*")]),
        ("ls # comment", [("ls",)]),
    ],
)
def test_plain(command: str, expected: list[tuple[str, ...]]) -> None:
    assert plain_commands(command) == expected


@pytest.mark.parametrize(
    "command",
    [
        "", "# only a comment", "ls $'\\'' ;rm -rf ../outside #'", "ls $'x'", 'ls $"x"',
        "ls $HOME", "ls ${x}", 'ls "$x"', "ls $(id)", "ls `id`", 'ls "`id`"', "cat <(id)",
        "ls *.py", "ls a?", "ls [ab]", "ls {a,b}", "ls {1..3}", "ls ~", "ls ~/x", "ls a=~/x",
        "\\ls", "l\\s", "x=1 ls", "ls &", "ls |& cat", "(ls)", "{ ls; }", "! ls",
        "if a; then b; fi", "for x in a; do b; done", "f() { a; }", "ls > out", "ls >> out",
        "ls < in", "ls >& out", "ls &> out", "cat <<< x", "cat <<EOF\nx\nEOF", "echo $((1))",
        "[[ -f x ]]", "export A=1", "cat - <<EOF\nx\nEO\\\nF\n", "ls 'unbalanced",
        "ls " + "a " * 200_000,
    ],
)  # fmt: skip
def test_not_plain(command: str) -> None:
    assert plain_commands(command) is None
