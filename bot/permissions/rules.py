"""Permission rules from baton.yaml: `tool` or `tool(glob on its main argument)`."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from bot.permissions.rule_globs import glob_to_regex
from bot.tools.base import MCP_PREFIX, MCP_WILDCARD, ArgumentKind, name_matches

__all__ = ["PermissionRules", "Rule", "glob_to_regex"]

_RULE = re.compile(r"^\s*(?P<tool>[A-Za-z_][A-Za-z0-9_-]*\*?)\s*(?:\((?P<pattern>.*)\))?\s*$")


def _glob_accepts_prefix(pattern: str, prefix: str) -> bool:
    """Whether some text starting with ``prefix`` matches the command glob ``pattern``.

    The glob's states are followed through ``prefix`` (``*`` any run, ``?`` one
    character, the rest literal); any state still alive can be completed.
    """
    states = _closure(pattern, {0})
    for char in prefix:
        following: set[int] = set()
        for state in states:
            if state >= len(pattern):
                continue
            token = pattern[state]
            if token == "*":
                following.add(state)
            elif token == "?" or token == char:
                following.add(state + 1)
        states = _closure(pattern, following)
        if not states:
            return False
    return True


def _closure(pattern: str, states: set[int]) -> set[int]:
    """``states`` plus the positions reached by letting a ``*`` match nothing."""
    found = set(states)
    pending = list(states)
    while pending:
        state = pending.pop()
        if state < len(pattern) and pattern[state] == "*" and state + 1 not in found:
            found.add(state + 1)
            pending.append(state + 1)
    return found


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """One rule: a tool name and, optionally, a glob its main argument must match."""

    tool: str
    pattern: str | None
    text: str
    # For an ask rule: who may decide what it matches (user and group ids); empty
    # means whoever may decide any request.
    approvers: tuple[str, ...] = ()

    def with_approvers(self, approvers: Sequence[str]) -> Rule:
        return replace(self, approvers=tuple(approvers))

    @classmethod
    def parse(cls, text: str) -> Rule:
        """Read `bash`, `bash(git status*)`, `read_file(**/.env)`; raise ValueError if malformed."""
        if not isinstance(text, str):
            raise ValueError(f"a rule must be a string, not {type(text).__name__}")
        match = _RULE.match(text)
        if match is None:
            raise ValueError(
                f"{text!r} is not a rule; write a tool name, optionally followed by a glob in "
                "parentheses, e.g. bash(git status*) or read_file(**/.env)"
            )
        pattern = match.group("pattern")
        tool = match.group("tool")
        if tool.endswith("*") and not MCP_WILDCARD.fullmatch(tool):
            raise ValueError(
                f"{text!r}: a `*` only ends mcp__<server>__* (every tool of that MCP server) "
                "or mcp__* (every MCP tool); name other tools exactly"
            )
        if tool.startswith(MCP_PREFIX) and pattern is not None:
            raise ValueError(
                f"{text!r}: a rule for an MCP tool takes no pattern in parentheses (its "
                "arguments are the server's); name the tool, or mcp__<server>__*"
            )
        if pattern is not None and not pattern.strip():
            raise ValueError(f"{text!r} has an empty pattern in its parentheses")
        return cls(tool=tool, pattern=pattern, text=text.strip())

    def matches(self, tool: str, values: Sequence[str], kind: ArgumentKind) -> bool:
        """Whether this rule covers a call of `tool` whose main argument is any of `values`."""
        if not name_matches(self.tool, tool):
            return False
        if self.pattern is None:
            return True
        regex = glob_to_regex(self.pattern, kind)
        return any(regex.fullmatch(value) for value in values)

    def matches_extended(self, tool: str, words: str) -> bool:
        """Whether this command rule covers ``words`` followed by any further arguments.

        For a command that gets arguments nobody has seen: ``xargs rm`` runs ``rm``
        with whatever it reads, so ``bash(rm *)`` and ``bash(rm -rf *)`` cover it (its
        input may start with ``-rf``), while ``bash(rmdir *)`` does not.
        """
        if not name_matches(self.tool, tool):
            return False
        if self.pattern is None:
            return True
        if glob_to_regex(self.pattern, "command").fullmatch(words):
            return True
        return _glob_accepts_prefix(self.pattern, words + " ")

    def matches_argv(self, tool: str, argv: Sequence[str]) -> bool:
        """Whether this command rule, which has a pattern, covers one plain command.

        The program must be exactly the rule's first word (a trailing ``*`` removed, as
        in ``ls*``): ``ls/../x``, ``/bin/ls``, ``lsblk`` are not ``ls``. The rest of the
        pattern is a glob on the other arguments joined by single spaces.

        Args:
            tool: The tool called.
            argv: The command's words, as :func:`plain_commands` gives them.

        Returns:
            Whether the rule allows this command.
        """
        if tool != self.tool or self.pattern is None or not argv:
            return False
        head, _, tail = self.pattern.strip().partition(" ")
        if not tail and head.endswith("*"):
            program, rest = head.rstrip("*"), "*"
        else:
            program, rest = head, tail.strip()
        if not program or argv[0] != program:
            return False
        return glob_to_regex(rest, "command").fullmatch(" ".join(argv[1:])) is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class PermissionRules:
    """The three rule lists.

    Deny beats everything; then an ask rule with a pattern, an allow rule with a
    pattern, a bare ask rule, a bare allow rule: `allow: ["bash(git status*)"]` with
    `ask: [bash]` lets `git status` run and asks for the rest.
    """

    allow: tuple[Rule, ...] = ()
    ask: tuple[Rule, ...] = ()
    deny: tuple[Rule, ...] = ()

    @classmethod
    def parse(
        cls,
        *,
        allow: Iterable[str] = (),
        ask: Iterable[str | Rule] = (),
        deny: Iterable[str] = (),
    ) -> PermissionRules:
        """Parse rule strings; `ask` may also hold rules already made (with approvers)."""
        return cls(
            allow=tuple(Rule.parse(r) for r in allow),
            ask=tuple(r if isinstance(r, Rule) else Rule.parse(r) for r in ask),
            deny=tuple(Rule.parse(r) for r in deny),
        )
