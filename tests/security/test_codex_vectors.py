"""Codex CLI's command-safety vectors (tests/security/codex_vectors.py) against Baton's rules.

Each vector is judged by the real permission hook under the allow rules a team would
write for its programs: one ``bash(PROGRAM*)`` for each program the command names.
What Codex calls unsafe or dangerous must not be auto-approved by such a rule, but for
the few departures below, each with its reason; what Codex calls safe must be approved.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.engine import HookDecision
from bot.permissions.argv import program_name
from bot.permissions.plain import plain_commands
from bot.permissions.rules import PermissionRules
from bot.tools import Workspace
from tests.permissions.judge import judge_command
from tests.security.codex_vectors import DANGEROUS, SAFE, UNSAFE, CodexVector

# Codex never vouches for git: "repository configuration can make even read-only Git
# commands execute helpers". Baton's git model (bot/permissions/git_args.py) vouches for
# git that cannot run programs or write elsewhere, because in Baton's sandbox the
# repository's config, hooks, modules, worktrees and in-progress state are read-only to
# every command: a helper can only be one the operator configured.
GIT = "Baton's git model vouches for read-only git; the sandbox keeps git's config read-only"
# Codex knows no program beyond its list. Baton vouches for a program it has no model of
# in its plain form, because the operator's rule names that very program.
UNMODELLED = "no model: an operator's rule naming the program approves its plain form"
# Codex reads a line for zsh as well; Baton's bash tool runs bash, where these words are
# literal (`~` only expands at a word's start, `=cmd` and `^` are zsh's, `#` mid-word is
# text, escapes in double quotes are resolved by the parser).
BASH_LITERAL = "literal in bash, which is the only shell Baton's tool runs"

APPROVED_ALTHOUGH_CODEX_SAYS_UNSAFE = {
    "git status --short": GIT,
    "git log -p -1": GIT,
    "git diff": GIT,
    "git show HEAD": GIT,
    "git branch": GIT,
    "git branch --show-current": GIT,
    "git --version": GIT,
    "git status": GIT,
    "cd nested && git status": GIT,
    "git diff | head -20": GIT,
    "git fetch": GIT,
    "cargo check": UNMODELLED,
    "foo": UNMODELLED,
    "echo HEAD~1": BASH_LITERAL,
    "echo HEAD^": BASH_LITERAL,
    "echo file~": BASH_LITERAL,
    "echo =sh": BASH_LITERAL,
    "echo foo^bar": BASH_LITERAL,
    "echo foo#bar": BASH_LITERAL,
    'echo "\\$HOME\\`\\"\\\\\\n"': BASH_LITERAL,
    'echo "\\\\"': BASH_LITERAL,
}

# Codex's dangerous check flags every forced rm; Baton's danger patterns flag recursive
# deletes. A forced delete of named files stays inside the sandbox (the workspace, or the
# sandbox's own /tmp): under a bare `allow: [bash]` it runs; a rule for rm never
# vouches for -f (the rm model), which is what the battery below asserts.
FORCED_BUT_NOT_RECURSIVE = {
    "rm -f /",
    "rm --force /tmp/example",
    "rm /tmp/example -f",
    "if test -d /tmp/example; then rm --force /tmp/example; fi",
}


@pytest.fixture
def repo(tmp_path: Path) -> Workspace:
    root = tmp_path / "repo"
    root.mkdir()
    return Workspace(root)


def rules_for(command: str) -> PermissionRules:
    """One allow rule per program the command names, as a team would write them."""
    programs = sorted({program_name(argv[0]) for argv in plain_commands(command) or []})
    return PermissionRules.parse(allow=[f"bash({program}*)" for program in programs])


def judge(workspace: Workspace, command: str, rules: PermissionRules) -> HookDecision:
    return judge_command(workspace, command, rules)


def label(vector: CodexVector) -> str:
    return f"{vector.test}:{vector.command[:40]}"


def test_the_vectors_are_all_here() -> None:
    assert (len(SAFE), len(UNSAFE), len(DANGEROUS)) == (20, 59, 18)
    assert set(APPROVED_ALTHOUGH_CODEX_SAYS_UNSAFE) <= {v.command for v in UNSAFE}
    assert FORCED_BUT_NOT_RECURSIVE <= {v.command for v in DANGEROUS}


@pytest.mark.parametrize("vector", SAFE, ids=label)
def test_what_codex_knows_is_safe_is_approved_by_the_program_s_rule(
    repo: Workspace, vector: CodexVector
) -> None:
    decision = judge(repo, vector.command, rules_for(vector.command))
    assert decision.action == "allow", (vector.command, decision.reason)


@pytest.mark.parametrize("vector", UNSAFE, ids=label)
def test_what_codex_calls_unsafe_is_not_auto_approved(repo: Workspace, vector: CodexVector) -> None:
    decision = judge(repo, vector.command, rules_for(vector.command))
    if vector.command in APPROVED_ALTHOUGH_CODEX_SAYS_UNSAFE:
        assert decision.action == "allow", (vector.command, decision.reason)
    else:
        assert decision.action in ("ask", "deny"), (vector.command, decision.reason)


@pytest.mark.parametrize("vector", DANGEROUS, ids=label)
def test_what_codex_calls_dangerous_is_never_auto_approved_by_a_pattern(
    repo: Workspace, vector: CodexVector
) -> None:
    decision = judge(repo, vector.command, rules_for(vector.command))
    assert decision.action in ("ask", "deny"), (vector.command, decision.reason)


@pytest.mark.parametrize("vector", DANGEROUS, ids=label)
def test_and_under_a_bare_allow_a_danger_pattern_asks_for_the_recursive_ones(
    repo: Workspace, vector: CodexVector
) -> None:
    decision = judge(repo, vector.command, PermissionRules.parse(allow=["bash"]))
    if vector.command in FORCED_BUT_NOT_RECURSIVE:
        assert decision.action == "allow", (vector.command, decision.reason)
    else:
        assert (decision.action, decision.risk) == ("ask", "recursive-delete"), vector.command


def test_a_program_named_by_its_path_is_not_the_rule_s_program(repo: Workspace) -> None:
    decision = judge(repo, "/usr/bin/git status", PermissionRules.parse(allow=["bash(git*)"]))
    assert decision.action == "ask"
