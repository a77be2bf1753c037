"""git read as git reads it: option parsing, the danger table, and what allow rules cover."""

from __future__ import annotations

import pytest

from bot.permissions.git_args import git_allow_problem
from bot.permissions.git_danger import git_danger
from bot.permissions.git_options import OptionSpec, parse_options

CLEAN = OptionSpec(
    flags={"n": "dry-run", "f": "force", "d": "d"},
    short_values={"e": "exclude"},
    longs=frozenset({"dry-run", "force", "quiet"}),
    long_values=frozenset({"exclude"}),
)


@pytest.mark.parametrize(
    ("args", "dry_run"),
    [
        (["-n"], True),
        (["-dn"], True),
        (["-n", "--no-dry-run"], False),
        (["-n", "--no-dry"], False),
        (["--no-d", "-n"], True),
        (["-en"], False),  # --exclude=n
        (["-e", "-n"], False),  # -e takes the next word
        (["--dry"], True),
        (["--", "-n"], False),  # after --, an operand
        (["x", "-n"], True),  # options after operands still count
        (["--end-of-options", "-n"], False),
    ],
)
def test_options_are_read_as_git_reads_them(args: list[str], dry_run: bool) -> None:
    assert parse_options(args, CLEAN).final("dry-run") is dry_run


def test_an_option_outside_the_table_is_unknown() -> None:
    assert parse_options(["--bogus"], CLEAN).unknown
    assert parse_options(["-z"], CLEAN).unknown
    assert parse_options(["--force=1"], CLEAN).unknown  # git refuses a value there
    assert not parse_options(["--exclude", "x", "-fd"], CLEAN).unknown


def exists(path: str) -> bool:
    return path in {"src", "src/app.py", "README.md", "sub/a.txt"}


@pytest.mark.parametrize(
    ("command", "pattern"),
    [
        ("checkout src", "git-discard"),
        ("checkout README.md", "git-discard"),
        ("checkout ':^nothing'", "git-discard"),
        ("checkout :/", "git-discard"),
        ("checkout HEAD src/app.py", "git-discard"),
        ("checkout -- x", "git-discard"),
        ("checkout -f", "git-discard"),
        ("checkout -p", "git-discard"),
        ("checkout --ours x", "git-discard"),
        ("checkout --pathspec-from-file=list", "git-discard"),
        ("checkout -B main", "git-ref-delete"),
        ("-C sub checkout a.txt", "git-discard"),
        ("restore src", "git-discard"),
        ("restore --staged --worktree src", "git-discard"),
        ("restore -SW src", "git-discard"),
        ("restore --pathspec-from-file=list", "git-discard"),
        ("switch -f main", "git-discard"),
        ("switch --discard-changes main", "git-discard"),
        ("switch -C main", "git-ref-delete"),
        ("rm --force a", "git-discard"),
        ("rm -f -q *", "git-discard"),
        ("mv -f a b", "git-discard"),
        ("branch --delete --force x", "git-ref-delete"),
        ("branch -d -f x", "git-ref-delete"),
        ("branch -df x", "git-ref-delete"),
        ("branch -f main HEAD~3", "git-ref-delete"),
        ("branch -M a b", "git-ref-delete"),
        ("branch -C a b", "git-ref-delete"),
        ("branch --forc main x", "git-ref-delete"),
        ("tag -f v1", "git-ref-delete"),
        ("tag -n -d v1", "git-ref-delete"),
        ("tag -m 'x' --delete v1", "git-ref-delete"),
        ("update-ref refs/heads/main HEAD~5", "git-ref-delete"),
        ("symbolic-ref HEAD refs/heads/other", "git-ref-delete"),
        ("symbolic-ref -d HEAD", "git-ref-delete"),
        ("replace A B", "git-ref-delete"),
        ("notes --ref x remove HEAD", "git-ref-delete"),
        ("notes add -f -m x", "git-ref-delete"),
        ("reflog delete HEAD@{1}", "git-prune"),
        ("gc --prune", "git-prune"),
        ("repack -a -d", "git-prune"),
        ("filter-repo --path x --invert-paths", "git-prune"),
        ("update-index --force-remove a", "git-discard"),
        ("checkout-index -a -f", "git-discard"),
        ("read-tree -u --reset HEAD", "git-discard"),
        ("worktree remove --force ../wt", "git-discard"),
        ("merge --abort", "git-discard"),
        ("clean -i", "git-clean"),
        ("stash -q drop", "git-stash-drop"),
    ],
)
def test_work_destroying_git_calls(command: str, pattern: str) -> None:
    import shlex

    found = git_danger(shlex.split(command), exists)
    assert found is not None, command
    assert found.pattern == pattern, (command, found)


@pytest.mark.parametrize(
    "command",
    [
        "checkout main",
        "checkout -",
        "checkout @{-1}",
        "checkout -b feature",
        "checkout -b feature origin/main",
        "checkout --track origin/x",
        "checkout -t origin/x",
        "checkout --detach HEAD~1",
        "checkout src --",  # a branch called src, said explicitly
        "checkout --orphan fresh",
        "switch main",
        "switch -c feature",
        "switch --detach HEAD~1",
        "restore --staged src/app.py",
        "restore -S src/app.py",
        "rm a.txt",
        "rm --cached a.txt",
        "rm -r --cached src",
        "mv a b",
        "branch -a",
        "branch -d merged",
        "branch feature",
        "branch -m old new",
        "branch --list 'f*'",
        "tag -l",
        "tag v1",
        "tag -a v1 -m 'release -d'",
        "symbolic-ref HEAD",
        "symbolic-ref --short HEAD",
        "replace",
        "replace -l",
        "notes show HEAD",
        "notes add -m hello",
        "reflog",
        "reflog show main",
        "gc",
        "gc --no-prune",
        "prune --dry-run",
        "stash",
        "stash list",
        "stash show",
        "stash pop",
        "stash push -m 'drop later'",
        "reset HEAD~1",
        "reset --soft HEAD~1",
        "reset -- src/app.py",
        "clean -n",
        "clean -dxn",
        "clean --dry-run -f",
        "merge feature",
        "update-index --refresh",
        "diff",
        "log -p",
    ],
)
def test_ordinary_git_calls_are_not_dangerous(command: str) -> None:
    import shlex

    assert git_danger(shlex.split(command), exists) is None, command


def test_without_the_workspace_only_pathspec_syntax_counts_as_a_path() -> None:
    assert git_danger(["checkout", "src"]) is None
    assert git_danger(["checkout", "."]) is not None


@pytest.mark.parametrize(
    ("command", "words"),
    [
        ("apply --unsafe-paths --directory=.git README.md", "inside .git"),
        ("apply patch.diff", "git apply"),
        ("apply --stat --apply p.diff", "git apply"),
        ("apply --check --build-fake-ancestor=../x p.diff", "git apply"),
        ("am mbox", "git am"),
        ("am --abort", "git am"),
        ("merge-file Makefile Makefile docs/payload.txt", "overwrites"),
        ("merge-file -p --no-stdout a b c", "overwrites"),
        ("merge-file -L 'x\necho INJECTED' a b c", "overwrites"),
        ("worktree add ../x", "worktree"),
        ("worktree add wt", "worktree"),
        ("init ../x", "outside"),
        ("init --separate-git-dir=/tmp/g", "outside"),
        ("clone . ../x", "outside"),
        ("clone --depth 1 . /tmp/x", "outside"),
        ("update-index --cacheinfo 100644,abc,a", "index"),
        ("help -w log", "not a git built-in"),
        ("web--browse http://x", "not a git built-in"),
        ("send-email x.patch", "not a git built-in"),
        ("credential fill", "not a git built-in"),
        ("upload-pack .", "not a git built-in"),
        ("receive-pack .", "not a git built-in"),
        ("upload-archive .", "not a git built-in"),
        ("instaweb", "runs other programs"),
        ("grep --open-files-in-pager=x y", "pager"),
        ("bundle create ../x.bundle HEAD", "wherever"),
    ],
)
def test_git_calls_no_allow_rule_covers(command: str, words: str) -> None:
    import shlex

    problem = git_allow_problem(shlex.split(command))
    assert problem is not None and words in problem, (command, problem)


@pytest.mark.parametrize(
    "command",
    [
        "apply --check p.diff",
        "apply --stat p.diff",
        "apply --numstat --summary p.diff",
        "am --show-current-patch",
        "merge-file -p a b c",
        "merge-file --stdout a b c",
        "worktree list",
        "init",
        "init sub",
        "clone https://example.invalid/x.git",
        "clone ../x vendor/x",  # reading a sibling: the sandbox hides what is outside
        "fetch",
        "fetch ../x",
        "pull",
        "submodule update --init",  # update commands come only from .git/config
        "archive --format=tar HEAD",
        "archive --remote=../x HEAD",  # like fetch: the sandbox hides what is outside
        "-p log",  # a pager starts only on a terminal, never for a tool call
        "--paginate log",
        "commit -m x",  # hooks are read-only in the sandbox
        "notes add -m x",
    ],
)
def test_harmless_git_calls_stay_allowed(command: str) -> None:
    import shlex

    assert git_allow_problem(shlex.split(command)) is None, command
