"""git calls that write files as a file tool would: an allow rule for git must not cover them.

``bash(git *)`` is meant for looking at a repository and for ordinary history work.
Some subcommands are file writers in disguise: ``git apply`` writes whatever a patch
says, and with ``--directory=.git --unsafe-paths`` it writes ``.git/config`` (after
which any git call runs a program); ``git merge-file A B C`` overwrites ``A`` with
any text; ``git worktree add ../x``, ``git init ../x`` and ``git clone . ../x`` write
outside the workspace. The realistic configuration asks before ``write_file``, so
these ask too. Their read-only forms (``apply --check``, ``merge-file -p``) stay
allowed.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

from bot.permissions.git_options import OptionSpec, parse_options

__all__ = ["git_write_problem"]

_APPLY = OptionSpec(
    flags={
        "R": "reverse",
        "N": "intent-to-add",
        "3": "3way",
        "z": "z",
        "v": "verbose",
        "q": "quiet",
    },
    short_values={"p": "p", "C": "C"},
    longs=frozenset(
        """
        stat numstat summary check index cached intent-to-add 3way apply no-add reverse reject
        allow-binary-replacement binary ignore-space-change ignore-whitespace inaccurate-eof verbose
        quiet recount unsafe-paths allow-empty unidiff-zero allow-overlap
        """.split()
    ),
    long_values=frozenset({"build-fake-ancestor", "exclude", "include", "whitespace", "directory"}),
)
_MERGE_FILE = OptionSpec(
    flags={"p": "stdout", "q": "quiet"},
    short_values={"L": "L"},
    longs=frozenset({"stdout", "quiet", "diff3", "zdiff3", "ours", "theirs", "union", "object-id"}),
    long_values=frozenset({"marker-size", "diff-algorithm"}),
)
_INIT = OptionSpec(
    flags={"q": "quiet"},
    short_values={"b": "initial-branch"},
    longs=frozenset({"quiet", "bare"}),
    long_values=frozenset(
        {"object-format", "ref-format", "template", "separate-git-dir", "initial-branch"}
    ),
    long_optional=frozenset({"shared"}),
)
_CLONE = OptionSpec(
    flags={"l": "local", "s": "shared", "q": "quiet", "v": "verbose", "n": "no-checkout"},
    short_values={"o": "origin", "b": "branch", "u": "upload-pack", "c": "config", "j": "jobs"},
    longs=frozenset(
        """
        local no-hardlinks shared dissociate quiet verbose progress no-checkout reject-shallow bare
        sparse also-filter-submodules mirror single-branch no-tags shallow-submodules
        remote-submodules
        """.split()
    ),
    long_values=frozenset(
        """
        reference reference-if-able server-option filter origin branch revision upload-pack template
        config depth shallow-since shallow-exclude separate-git-dir ref-format jobs bundle-uri
        """.split()
    ),
    long_optional=frozenset({"recurse-submodules"}),
)
_APPLY_READS = ("stat", "numstat", "summary", "check")
_UPDATE_INDEX_READS = frozenset(
    {"--refresh", "--really-refresh", "-q", "--ignore-missing", "--unmerged"}
)


def git_write_problem(sub: str, args: Sequence[str]) -> str | None:
    """Why ``git SUB ARGS`` writes files no allow rule for git should vouch for, or None.

    Args:
        sub: The subcommand.
        args: Its arguments.

    Returns:
        A sentence for the approver, or None.
    """
    if sub == "apply":
        parsed = parse_options(args, _APPLY)
        reads = parsed.given(*_APPLY_READS) and not parsed.final("apply")
        if not reads or parsed.unknown or parsed.values("build-fake-ancestor"):
            return (
                "git apply writes every file the patch names (with --directory or "
                "--unsafe-paths even inside .git, where git would run it); only --check/--stat "
                "look without writing"
            )
    if sub == "am" and not (len(args) == 1 and args[0].startswith("--show-current-patch")):
        return "git am applies patches: it writes the files they name and commits them"
    if sub == "merge-file":
        parsed = parse_options(args, _MERGE_FILE)
        if not parsed.final("stdout") or parsed.unknown:
            return "git merge-file overwrites its first file with the merged text (any text)"
    if sub == "worktree" and list(args[:1]) != ["list"]:
        return (
            "git worktree add/move/remove writes or deletes a directory, often outside "
            "the workspace"
        )
    if sub == "interpret-trailers" and any(
        arg == "-i" or (arg.startswith("--in") and "--in-place".startswith(arg.split("=")[0]))
        for arg in args
    ):
        # Its trailer values may hold new lines: any text, into any file it names.
        return "git interpret-trailers --in-place rewrites the files it names (any text)"
    if sub in ("init", "clone"):
        return _new_repository_problem(sub, args)
    if sub == "update-index" and not set(args) <= _UPDATE_INDEX_READS:
        return "git update-index rewrites index entries directly: staged changes can be lost"
    return None


def _new_repository_problem(sub: str, args: Sequence[str]) -> str | None:
    parsed = parse_options(args, _INIT if sub == "init" else _CLONE)
    if parsed.unknown:
        return f"git {sub} has an option this rule does not know"
    operands = list(parsed.operands)
    targets = operands[:1] if sub == "init" else operands[1:2]
    targets += parsed.values("separate-git-dir")
    for target in targets:
        if _outside(target):
            return f"git {sub} writes a repository outside the workspace ({target})"
    return None


def _outside(path: str) -> bool:
    """Whether a path, relative to the workspace, leads out of it."""
    if path.startswith(("/", "~")):
        return True
    return posixpath.normpath(path).split("/")[0] == ".."
