"""Read git's command line as git does: global options, subcommand, abbreviated long options.

``bash(git *)`` looks harmless, but git can run any program (``-c alias.x='!cmd'``,
``--upload-pack``, ``ext::`` URLs, ``difftool -x``), work on another repository
(``-C``, ``--git-dir``) and write files anywhere (``log --output``). And git accepts
any unambiguous prefix of a long option, so ``--forc`` is ``--force``. This module
splits git's command line (:func:`split_git`) and answers, with that reading,
:func:`git_allow_problem`: why an allow rule must not auto-approve this git call.
Which git calls destroy work, whatever the rules say, is :mod:`git_danger`'s question;
which write files like a file tool, :mod:`git_writes`'.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from bot.permissions.git_writes import git_write_problem

__all__ = [
    "GIT_SUBCOMMANDS",
    "GitCall",
    "git_allow_problem",
    "long_option",
    "split_git",
    "work_tree_problem",
]

# Global options that take the next word as their value (unless written `--x=value`).
_GLOBAL_WITH_VALUE = frozenset(
    """
    -C -c --git-dir --work-tree --namespace --config-env --super-prefix --list-cmds --attr-source
    """.split()
)
# Global options an allow rule may still approve: none of them runs a program or
# points git at another repository. `-p`/`--paginate` starts the pager only when the
# output is a terminal (never for a tool call), and the pager comes from configuration
# the sandbox keeps read-only.
_SAFE_GLOBALS = frozenset(
    """
    --no-pager -P -p --paginate --no-optional-locks --no-advice --literal-pathspecs --glob-pathspecs
    --noglob-pathspecs --icase-pathspecs --no-replace-objects --no-lazy-fetch --version -v --help -h
    """.split()
)

# Built-ins an allow rule may approve, subject to the option checks below. Anything
# else (an alias, `credential`, `hook`, `daemon`, `maintenance`, `send-email`, ...) asks.
_KNOWN = frozenset(
    """
    add am annotate apply archive bisect blame branch bundle cat-file check-attr check-ignore
    check-mailmap check-ref-format checkout cherry cherry-pick clean clone column commit config
    count-objects describe diff diff-files diff-index diff-tree fetch for-each-ref format-patch fsck
    gc grep hash-object init interpret-trailers log ls-files ls-remote ls-tree merge merge-base
    merge-file mktree mv name-rev notes pack-refs patch-id prune pull push range-diff rebase reflog
    remote repack reset restore rev-list rev-parse revert rm shortlog show show-branch show-ref
    sparse-checkout stash status stripspace submodule switch symbolic-ref tag update-index
    update-ref verify-commit verify-tag version whatchanged worktree write-tree
    """.split()
)
_RUN_TOOLS = frozenset({"difftool", "mergetool", "filter-branch", "daemon", "instaweb"})
GIT_SUBCOMMANDS = _KNOWN | _RUN_TOOLS | {"help", "send-pack", "http-push", "subtree"}
"""git's own subcommands (a name outside them and git's exec path is an alias)."""
_OUTPUT_COMMANDS = frozenset(
    """
    log show diff diff-files diff-index diff-tree whatchanged range-diff format-patch archive
    shortlog stash cherry rev-list
    """.split()
)
_REMOTE_PROGRAM_OPTIONS = ("--upload-pack", "--receive-pack", "--exec")
_CONFIG_READS = ("--get", "--get-all", "--get-regexp", "--get-urlmatch", "--list")
_CONFIG_WRITES = tuple(
    """
    --add --unset --unset-all --replace-all --rename-section --remove-section --edit --file --blob
    """.split()
)


@dataclass(frozen=True, slots=True)
class GitCall:
    """``git GLOBALS SUBCOMMAND ARGS``, split as git splits it."""

    globals: tuple[str, ...]
    subcommand: str
    args: tuple[str, ...]

    def configures(self) -> bool:
        """Whether a global ``-c``/``--config-env`` sets configuration for this call."""
        return any(word == "-c" or long_option(word, "--config-env") for word in self.globals)


def split_git(args: Sequence[str]) -> GitCall:
    """Split the arguments after ``git`` into global options, subcommand and its arguments.

    Args:
        args: The words after the program name.

    Returns:
        The call; ``subcommand`` is "" when there is none (``git --version``).
    """
    index = 0
    while index < len(args):
        arg = args[index]
        if not arg.startswith("-"):
            return GitCall(tuple(args[:index]), arg, tuple(args[index + 1 :]))
        index += 2 if arg in _GLOBAL_WITH_VALUE else 1
    return GitCall(tuple(args), "", ())


def long_option(arg: str, name: str) -> bool:
    """Whether ``arg`` is the long option ``name``, abbreviated or not, with or without ``=``.

    git accepts any unambiguous prefix (``--forc`` for ``--force``). Ambiguous prefixes
    are refused by git, so counting them as a match only ever asks more.
    """
    if not arg.startswith("--") or arg == "--":
        return False
    written = arg.split("=", 1)[0]
    return len(written) > 2 and name.startswith(written)


def _options(args: Sequence[str]) -> list[str]:
    """The options before ``--`` (operands and what follows ``--`` are left out)."""
    found: list[str] = []
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("-") and arg != "-":
            found.append(arg)
    return found


def _has_long(args: Sequence[str], *names: str) -> bool:
    return any(long_option(arg, name) for arg in _options(args) for name in names)


def _short_letters(args: Sequence[str]) -> str:
    return "".join(arg[1:] for arg in _options(args) if not arg.startswith("--"))


def _operands(args: Sequence[str]) -> list[str]:
    found: list[str] = []
    for index, arg in enumerate(args):
        if arg == "--":
            return found + list(args[index + 1 :])
        if not arg.startswith("-") or arg == "-":
            found.append(arg)
    return found


def _any_in(words: Iterable[str], *needles: str) -> bool:
    return any(needle in word for word in words for needle in needles)


def git_allow_problem(args: Sequence[str], *, may_write_files: bool = True) -> str | None:
    """Why an allow rule must not auto-approve ``git ARGS``, or None when it may.

    Args:
        args: The words after ``git``.
        may_write_files: Whether the rules let ``write_file`` through without a
            person. When they do not, git calls that write the work tree (merge, mv,
            stash, checkout of another branch, ...) ask too: an allow rule for bash
            must not give more power over the files than the file tools have.

    Returns:
        A sentence for the approver, or None.
    """
    call = split_git(args)
    for option in call.globals:
        if option not in _SAFE_GLOBALS:
            return (
                f"git {option} can run other programs or point git at another repository, "
                "so no allow rule approves it"
            )
    if _any_in(args, "ext::", "fd::"):
        return "an ext:: or fd:: URL makes git run a program"
    sub, rest = call.subcommand, call.args
    if not sub:
        return None
    if sub in _RUN_TOOLS:
        return f"git {sub} runs other programs or servers"
    if sub not in _KNOWN:
        return f"git {sub} is not a git built-in this rule understands (it may be an alias)"
    if problem := _subcommand_problem(sub, rest):
        return problem
    if not may_write_files:
        return work_tree_problem(sub, rest)
    return None


def _subcommand_problem(sub: str, args: tuple[str, ...]) -> str | None:
    letters = _short_letters(args)
    if sub in _OUTPUT_COMMANDS and (
        _has_long(args, "--output", "--output-directory")
        or (sub in ("format-patch", "archive") and "o" in letters)
    ):
        return f"git {sub} --output writes a file wherever it is told"
    if _has_long(args, *_REMOTE_PROGRAM_OPTIONS) or (
        sub in ("ls-remote", "clone") and "u" in letters
    ):
        return f"git {sub} --upload-pack/--receive-pack/--exec runs a program"
    if sub in ("clone", "init") and (
        _has_long(args, "--config", "--template") or (sub == "clone" and "c" in letters)
    ):
        return f"git {sub} --config/--template can install hooks or commands that git runs"
    if program := _configured_program(sub, args):
        return program
    if sub == "config" and not _config_reads_only(args):
        return "git config that changes settings can make git run any program"
    if sub == "grep" and ("O" in letters or _has_long(args, "--open-files-in-pager")):
        return "git grep -O runs a pager program"
    if sub == "rebase" and (
        "x" in letters or "i" in letters or _has_long(args, "--exec", "--interactive")
    ):
        return "git rebase --exec runs a program for each commit"
    if sub == "bisect" and _operands(args)[:1] == ["run"]:
        return "git bisect run runs a program"
    if sub == "submodule" and "foreach" in _operands(args):
        return "git submodule foreach runs a command in every submodule"
    if sub == "bundle" and _operands(args)[:1] == ["create"]:
        return "git bundle create writes a file wherever it is told"
    if secret := _secret_read_problem(sub, args):
        return secret
    return git_write_problem(sub, args)


def _configured_program(sub: str, args: Sequence[str]) -> str | None:
    """Why ``git SUB ARGS`` runs a program the configuration names, or None.

    ``--ext-diff`` runs the external diff driver, ``--textconv`` (and ``cat-file
    --filters``) the conversion filters: programs that ``.gitattributes``, which any
    command may write, assigns to files. Abbreviations count as git reads them
    (``--ext``, ``--textc``), while ``--text`` stays ``--text``.
    """
    for word in _options(args):
        written = word.split("=", 1)[0]
        if written.startswith("--ext") and "--ext-diff".startswith(written):
            return f"git {sub} --ext-diff runs the external diff program git is configured with"
        if written.startswith("--textc") and "--textconv".startswith(written):
            return f"git {sub} --textconv runs the text conversion programs git is configured with"
    if sub == "cat-file" and _has_long(args, "--filters"):
        return "git cat-file --filters runs the filter programs git is configured with"
    return None


def _config_reads_only(args: Sequence[str]) -> bool:
    if _has_long(args, *_CONFIG_WRITES) or "e" in _short_letters(args):
        return False
    operands = _operands(args)
    if operands[:1] in (["get"], ["list"]):
        return True
    return _has_long(args, *_CONFIG_READS) or "l" in _short_letters(args)


def _secret_read_problem(sub: str, args: tuple[str, ...]) -> str | None:
    """Why ``git SUB ARGS`` may show files no one named, such as ignored ``.env``, or None."""
    if sub in ("grep", "diff") and _has_long(args, "--no-index"):
        return (
            f"git {sub} --no-index reads any file, ignored ones such as .env included, "
            "without naming it"
        )
    if sub == "grep" and _has_long(args, "--untracked"):
        return "git grep --untracked reads untracked and ignored files, such as .env"
    if sub == "diff" and any(_outside(path) for path in _operands(args)):
        return "git diff with a path outside the work tree compares files as --no-index does"
    if sub == "add" and ("f" in _short_letters(args) or _has_long(args, "--force")):
        return "git add --force stages ignored files, such as .env, where git shows them"
    return None


def _outside(path: str) -> bool:
    if path.startswith(("/", "~")):
        return True
    return posixpath.normpath(path).split("/")[0] == ".."


# Subcommands that always write (or may write) files in the work tree. (apply, am,
# merge-file and worktree ask in every configuration, see git_writes, but for their
# read-only forms.)
_WORK_TREE_WRITERS = frozenset(
    """
    merge mv cherry-pick revert rebase pull read-tree checkout-index clone init
    """.split()
)
# Subcommands whose first operand names a read-only form; anything else writes.
_READ_FORMS: dict[str, tuple[str, ...]] = {
    "stash": ("list", "show"),
    "notes": ("", "list", "show", "get-ref"),
    "bisect": ("", "log"),
    "submodule": ("", "status", "summary"),
    "sparse-checkout": ("list",),
}
_RESET_READS = frozenset({"--soft", "--mixed", "-q", "--quiet", "--no-refresh", "-N"})
_QUIET = frozenset({"-q", "--quiet"})


def work_tree_problem(sub: str, args: Sequence[str]) -> str | None:
    """Why ``git SUB ARGS`` writes the work tree, which needs a person when file writes do.

    Args:
        sub: The subcommand.
        args: Its arguments.

    Returns:
        A sentence for the approver, or None.
    """
    reason = f"git {sub} writes files in the work tree, and writing files needs a person here"
    if sub in _WORK_TREE_WRITERS:
        return reason
    if sub == "format-patch" and not _has_long(args, "--stdout"):
        return "git format-patch writes its patches as files, and writing files needs a person here"
    if sub in _READ_FORMS:
        verb = (_operands(args)[:1] or [""])[0]
        return None if verb in _READ_FORMS[sub] else reason
    if sub == "rm" and not _has_long(args, "--cached"):
        return reason
    if sub == "add" and _has_long(args, "--chmod"):
        return "git add --chmod makes files executable, and changing files needs a person here"
    if sub == "reset":
        options = [arg for arg in args if arg.startswith("-")]
        return None if set(options) <= _RESET_READS and "--" not in args else reason
    if sub == "restore":
        staged = "S" in _short_letters(args) or _has_long(args, "--staged")
        worktree = "W" in _short_letters(args) or _has_long(args, "--worktree")
        return None if staged and not worktree else reason
    if sub in ("checkout", "switch") and not _only_creates_branch(sub, args):
        return (
            f"git {sub} to another branch or commit rewrites files in the work tree, "
            "and writing files needs a person here"
        )
    return None


def _only_creates_branch(sub: str, args: Sequence[str]) -> bool:
    """``checkout -b NAME`` / ``switch -c NAME``, no start point: the files stay as they are."""
    words = [arg for arg in args if arg not in _QUIET]
    if sub == "checkout" and not words:
        return True  # shows where HEAD is
    flag = "-b" if sub == "checkout" else "-c"
    if len(words) == 2 and (words[0] == flag or (sub == "switch" and words[0] == "--create")):
        return not words[1].startswith("-")
    if len(words) == 1:
        word = words[0]
        name = word[2:] if word.startswith(flag) else ""
        if sub == "switch" and word.startswith("--create="):
            name = word.removeprefix("--create=")
        return bool(name) and not name.startswith("-")
    return False
