"""Rule syntax and glob matching, table-driven."""

from __future__ import annotations

import pytest

from bot.permissions.rules import Rule

MATCHES = [
    ("bash", "bash", "anything at all", "command", True),
    ("bash", "read_file", "x", "path", False),
    ("bash(git status*)", "bash", "git status", "command", True),
    ("bash(git status*)", "bash", "git status --short", "command", True),
    ("bash(git status*)", "bash", "git stash", "command", False),
    ("bash(npm run *)", "bash", "npm run test", "command", True),
    ("bash(ls ?)", "bash", "ls a", "command", True),
    ("read_file(**/.env)", "read_file", ".env", "path", True),
    ("read_file(**/.env)", "read_file", "app/config/.env", "path", True),
    ("read_file(**/.env)", "read_file", "app/.env.example", "path", False),
    ("read_file(src/*.py)", "read_file", "src/a.py", "path", True),
    ("read_file(src/*.py)", "read_file", "src/deep/a.py", "path", False),
    ("read_file(src/**)", "read_file", "src/deep/a.py", "path", True),
    ("write_file(docs/**/*.md)", "write_file", "docs/a.md", "path", True),
    ("write_file(docs/**/*.md)", "write_file", "docs/x/y/a.md", "path", True),
    ("write_file(docs/**/*.md)", "write_file", "src/a.md", "path", False),
    ("glob(**/*.key)", "glob", "**/*.key", "pattern", True),
]


@pytest.mark.parametrize(("rule", "tool", "value", "kind", "expected"), MATCHES)
def test_rule_matching(rule: str, tool: str, value: str, kind: str, expected: bool) -> None:
    assert Rule.parse(rule).matches(tool, [value], kind) is expected  # type: ignore[arg-type]


def test_a_rule_with_a_pattern_never_matches_a_call_without_the_argument() -> None:
    assert not Rule.parse("list_dir(secret/**)").matches("list_dir", [], "path")


@pytest.mark.parametrize(
    ("text", "tool", "pattern"),
    [
        ("bash", "bash", None),
        (" bash(git *) ", "bash", "git *"),
        ("edit_file(a(b).py)", "edit_file", "a(b).py"),
    ],
)
def test_parse(text: str, tool: str, pattern: str | None) -> None:
    rule = Rule.parse(text)
    assert (rule.tool, rule.pattern) == (tool, pattern)


@pytest.mark.parametrize("text", ["", "bash(", "bash()", "ba sh", "(x)", "bash(x) y"])
def test_malformed_rules_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        Rule.parse(text)
