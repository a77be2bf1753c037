"""Which git calls destroy work, read the way git reads them: the danger half of git's checks.

A git call here always needs a person, whatever the allow rules say, because what it
throws away cannot be got back: uncommitted changes (``reset --hard``, ``checkout --
PATH``, ``rm -f``), untracked files (``clean``), stashes (``stash drop``), or the
commits only a branch, tag or reflog still reached (``branch -D``, ``reflog expire``,
``gc --prune=now``). Options are read with git's own rules (:mod:`git_options`), so
``clean -n --no-dry-run -f`` and ``clean -en -f`` are seen as the deletions they are.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bot.permissions.git_args import long_option, split_git
from bot.permissions.git_options import OptionSpec, parse_options

__all__ = ["GitDanger", "PathExists", "git_danger"]

PathExists = Callable[[str], bool]
"""Whether a path (relative to the workspace root) exists: tells ``checkout NAME`` apart
from ``checkout PATH``."""


@dataclass(frozen=True, slots=True)
class GitDanger:
    """A danger pattern id, and the title naming exactly what matched."""

    pattern: str
    title: str


def _spec(
    flags: str = "",
    values: str = "",
    longs: str = "",
    long_values: str = "",
    optional: str = "",
    short_optional: str = "",
) -> OptionSpec:
    """An option table from ``"n=dry-run f=force x"``-style lists (short=long or just short)."""

    def pairs(text: str) -> dict[str, str]:
        found: dict[str, str] = {}
        for item in text.split():
            short, _, name = item.partition("=")
            found[short] = name or short
        return found

    return OptionSpec(
        flags=pairs(flags),
        short_values=pairs(values),
        short_optional=pairs(short_optional),
        longs=frozenset(longs.split()),
        long_values=frozenset(long_values.split()),
        long_optional=frozenset(optional.split()),
    )


# The tables list every option of git 2.4x for these subcommands, so that an
# abbreviation resolves as git resolves it; an option they miss counts as unknown.
_CLEAN = _spec(
    "d f=force i=interactive n=dry-run q=quiet x X",
    "e=exclude",
    "force interactive dry-run quiet",
    "exclude",
)
_RM = _spec(
    "f=force n=dry-run r q=quiet",
    "",
    "force dry-run cached ignore-unmatch quiet sparse pathspec-file-nul",
    "pathspec-from-file",
)
_MV = _spec("f=force k n=dry-run v=verbose", "", "force dry-run verbose sparse")
_CHECKOUT = _spec(
    "q=quiet f=force m=merge l t=track p=patch 2=ours 3=theirs",
    "b B",
    "quiet progress force merge detach guess overlay ours theirs patch "
    "ignore-skip-worktree-bits ignore-other-worktrees overwrite-ignore pathspec-file-nul",
    "orphan conflict pathspec-from-file",
    "track recurse-submodules",
)
_SWITCH = _spec(
    "d=detach f=force m=merge q=quiet t=track",
    "c=create C=force-create",
    "detach guess force discard-changes merge quiet progress ignore-other-worktrees "
    "overwrite-ignore",
    "create force-create orphan conflict",
    "track recurse-submodules",
)
_RESTORE = _spec(
    "p=patch W=worktree S=staged q=quiet 2=ours 3=theirs m=merge",
    "s=source U",
    "patch worktree staged quiet progress ours theirs merge ignore-unmerged "
    "ignore-skip-worktree-bits overlay pathspec-file-nul",
    "source conflict pathspec-from-file unified inter-hunk-context",
    "recurse-submodules",
)
_BRANCH = _spec(
    "d=delete D f=force m=move M c=copy C i=ignore-case r=remotes a=all l=list v=verbose "
    "q=quiet t=track",
    "u=set-upstream-to",
    "delete create-reflog force move copy ignore-case omit-empty remotes all list "
    "show-current verbose quiet unset-upstream edit-description",
    "set-upstream-to sort points-at format",
    "color column abbrev track recurse-submodules contains no-contains merged no-merged",
)
_TAG = _spec(
    "a=annotate s=sign f=force d=delete v=verify l=list i=ignore-case e=edit",
    "u=local-user m=message F=file",
    "annotate sign force delete verify list ignore-case omit-empty edit create-reflog",
    "local-user message file trailer cleanup sort points-at format",
    "color column contains no-contains merged no-merged",
    short_optional="n",
)
_SYMBOLIC_REF = _spec("q=quiet d=delete", "m", "quiet delete short recurse")


def git_danger(args: Sequence[str], path_exists: PathExists | None = None) -> GitDanger | None:
    """The danger pattern ``git ARGS`` matches, or None.

    Args:
        args: The words after ``git``.
        path_exists: Tells whether a path exists in the workspace; without it only
            pathspec magic, globs and ``.`` make ``git checkout X`` a path checkout.

    Returns:
        The pattern (``git-force-push``, ``git-push-delete``, ``git-reset-hard``,
        ``git-clean``, ``git-rm-recursive``, ``git-discard``, ``git-stash-drop``,
        ``git-ref-delete``, ``git-prune``, ``git-daemon``) and its precise title.
    """
    call = split_git(args)
    sub, rest = call.subcommand, call.args
    if sub == "push":
        force, delete = _push_effects(rest)
        if force or call.configures():  # `-c remote.origin.mirror=true push`
            return GitDanger("git-force-push", "Git force push")
        if delete:
            return GitDanger("git-push-delete", "Git remote branch deletion")
    if sub in ("daemon", "instaweb"):
        return GitDanger("git-daemon", "Git server")
    check = _CHECKS.get(sub)
    if check is None:
        return None
    exists = _under(_directory(call.globals), path_exists)
    found = check(rest, exists)
    return GitDanger(*found) if found else None


def _push_effects(args: Sequence[str]) -> tuple[bool, bool]:
    """Whether ``git push ARGS`` forces, and whether it deletes remote refs."""
    force = delete = False
    operands: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg == "--":
            operands.extend(args[index:])
            break
        if arg.startswith("--"):
            force = force or any(
                long_option(arg, name)
                for name in ("--force", "--force-with-lease", "--force-if-includes", "--mirror")
            )
            delete = delete or long_option(arg, "--delete") or long_option(arg, "--prune")
            if "=" not in arg and any(
                long_option(arg, name) for name in ("--repo", "--receive-pack", "--exec")
            ):
                index += 1
            if arg == "--push-option":
                index += 1
        elif arg.startswith("-") and len(arg) > 1:
            letters = arg[1:]
            if "o" in letters:  # -o takes a value: the rest of the word or the next one
                if letters.endswith("o"):
                    index += 1
                letters = letters[: letters.index("o")]
            force = force or "f" in letters
            delete = delete or "d" in letters
        else:
            operands.append(arg)
    force = force or any(refspec.startswith("+") for refspec in operands)
    delete = delete or any(refspec.startswith(":") for refspec in operands[1:])
    return force, delete


_Found = tuple[str, str] | None


def _directory(globals_: Sequence[str]) -> str:
    """Where ``-C DIR`` (repeatable, each relative to the last) leaves git."""
    directory = ""
    for index, option in enumerate(globals_):
        if option == "-C" and index + 1 < len(globals_):
            directory = posixpath.join(directory, globals_[index + 1])
    return directory


def _under(directory: str, path_exists: PathExists | None) -> PathExists | None:
    if path_exists is None or not directory:
        return path_exists
    return lambda path: path_exists(posixpath.join(directory, path))


def _reset(args: Sequence[str], _: PathExists | None) -> _Found:
    # --hard, --merge and --keep all rewrite the work tree; any of them asks, even if
    # a later --soft would win (asking more is the safe side).
    for mode in ("--hard", "--merge", "--keep"):
        if any(long_option(arg, mode) for arg in _before_dashes(args)):
            return "git-reset-hard", f"git reset {mode}"
    return None


def _clean(args: Sequence[str], _: PathExists | None) -> _Found:
    parsed = parse_options(args, _CLEAN)
    if parsed.final("dry-run") and not parsed.given("interactive") and not parsed.unknown:
        return None
    return "git-clean", "git clean"


def _rm(args: Sequence[str], _: PathExists | None) -> _Found:
    parsed = parse_options(args, _RM)
    if parsed.final("dry-run"):
        return None
    if parsed.given("r") and not parsed.final("cached"):
        return "git-rm-recursive", "Recursive git rm"
    if parsed.given("force"):
        return "git-discard", "Forced git rm (deletes files with uncommitted changes)"
    return None


def _mv(args: Sequence[str], _: PathExists | None) -> _Found:
    parsed = parse_options(args, _MV)
    if parsed.given("force") and not parsed.final("dry-run"):
        return "git-discard", "Forced git mv (overwrites its destination)"
    return None


def _checkout(args: Sequence[str], exists: PathExists | None) -> _Found:
    parsed = parse_options(args, _CHECKOUT)
    if parsed.given("B"):
        return "git-ref-delete", "git checkout -B (resets an existing branch)"
    if parsed.final("force"):
        return "git-discard", "Forced git checkout"
    if parsed.unknown:
        return "git-discard", "git checkout with an option this check does not know"
    if parsed.given("patch", "ours", "theirs", "pathspec-from-file"):
        return "git-discard", "git checkout of paths"
    if parsed.after_dashes:
        return "git-discard", "git checkout of paths"
    operands = parsed.operands
    if parsed.given("b", "orphan"):
        return ("git-discard", "git checkout of paths") if len(operands) > 1 else None
    if len(operands) > 1 or (operands and _pathlike(operands[0], exists)):
        if "--" in args and len(operands) == 1:
            return None  # `git checkout NAME --`: NAME is a branch or commit, not a path
        return "git-discard", "git checkout of paths"
    return None


def _pathlike(operand: str, exists: PathExists | None) -> bool:
    """Whether ``git checkout OPERAND`` may name paths rather than a branch."""
    if operand in ("-",) or operand.startswith("@{-"):
        return False
    if operand.startswith(":") or operand in (".", "./") or any(c in operand for c in "*?["):
        return True  # pathspec magic (`:^x`, `:/`), the whole tree, a glob
    return exists is not None and exists(operand)


def _switch(args: Sequence[str], _: PathExists | None) -> _Found:
    parsed = parse_options(args, _SWITCH)
    if parsed.given("force-create"):
        return "git-ref-delete", "git switch -C (resets an existing branch)"
    if parsed.final("force") or parsed.given("discard-changes"):
        return "git-discard", "Forced git switch"
    if parsed.given("orphan"):
        return "git-discard", "git switch --orphan (removes the tracked files)"
    if parsed.unknown:
        return "git-discard", "git switch with an option this check does not know"
    return None


def _restore(args: Sequence[str], _: PathExists | None) -> _Found:
    parsed = parse_options(args, _RESTORE)
    if parsed.final("staged") and not parsed.final("worktree") and not parsed.unknown:
        return None  # only the index: the files keep their changes
    return "git-discard", "git restore of work-tree files"


def _stash(args: Sequence[str], _: PathExists | None) -> _Found:
    verb = next((arg for arg in args if not arg.startswith("-")), "")
    if verb in ("drop", "clear"):
        return "git-stash-drop", f"git stash {verb}"
    return None


def _branch(args: Sequence[str], _: PathExists | None) -> _Found:
    parsed = parse_options(args, _BRANCH)
    if parsed.given("D") or (parsed.final("delete") and parsed.given("force")):
        return "git-ref-delete", "Forced git branch deletion"
    if parsed.given("force", "M", "C"):
        return "git-ref-delete", "Forced git branch change (moves or overwrites a branch)"
    return None


def _tag(args: Sequence[str], _: PathExists | None) -> _Found:
    parsed = parse_options(args, _TAG)
    if parsed.given("delete", "force"):
        return "git-ref-delete", "git tag -d/-f (deletes or moves a tag)"
    return None


def _symbolic_ref(args: Sequence[str], _: PathExists | None) -> _Found:
    parsed = parse_options(args, _SYMBOLIC_REF)
    if parsed.given("delete") or len(parsed.operands) > 1:
        return "git-ref-delete", "git symbolic-ref (changes what a ref points to)"
    return None


def _always(pattern: str, title: str) -> Callable[[Sequence[str], PathExists | None], _Found]:
    return lambda args, exists: (pattern, title)


def _replace(args: Sequence[str], _: PathExists | None) -> _Found:
    """Read-only only as ``git replace [-l [PATTERN]] [--format=F]``."""
    words = _before_dashes(args)
    lists = any(a == "-l" or long_option(a, "--list") for a in words)
    options_read = all(
        a == "-l" or long_option(a, "--list") or a.startswith("--format=")
        for a in words
        if a.startswith("-")
    )
    operands = [a for a in words if not a.startswith("-")]
    if options_read and len(words) == len(args) and (lists or not operands):
        return None
    return "git-ref-delete", "git replace (changes which commits git shows)"


def _notes(args: Sequence[str], _: PathExists | None) -> _Found:
    words = [arg for arg in args if not arg.startswith("-")]
    verb = next((w for w in words if w in ("remove", "prune", "merge")), None)
    if verb is not None or _short_has(args, "f") or _has(args, "--force"):
        return "git-ref-delete", f"git notes {verb or '-f'} (deletes or overwrites notes)"
    return None


def _reflog(args: Sequence[str], _: PathExists | None) -> _Found:
    if list(args[:1]) in (["expire"], ["delete"]):
        return "git-prune", f"git reflog {args[0]}"
    return None


def _gc(args: Sequence[str], _: PathExists | None) -> _Found:
    if any(long_option(arg, "--prune") for arg in _before_dashes(args)):
        return "git-prune", "git gc --prune"
    return None


def _prune(args: Sequence[str], _: PathExists | None) -> _Found:
    if any(arg == "-n" or long_option(arg, "--dry-run") for arg in _before_dashes(args)):
        return None
    return "git-prune", "git prune"


def _repack(args: Sequence[str], _: PathExists | None) -> _Found:
    if _short_has(args, "d") or _has(args, "--cruft-expiration"):
        return "git-prune", "git repack -d (drops unreachable objects)"
    return None


def _update_index(args: Sequence[str], _: PathExists | None) -> _Found:
    if any(long_option(arg, "--force-remove") for arg in _before_dashes(args)):
        return "git-discard", "git update-index --force-remove"
    return None


def _checkout_index(args: Sequence[str], _: PathExists | None) -> _Found:
    if _short_has(args, "f") or _has(args, "--force"):
        return "git-discard", "git checkout-index -f"
    return None


def _read_tree(args: Sequence[str], _: PathExists | None) -> _Found:
    if "-u" in _before_dashes(args) or any(long_option(a, "--reset") for a in args):
        return "git-discard", "git read-tree -u/--reset (rewrites the work tree)"
    return None


def _worktree(args: Sequence[str], _: PathExists | None) -> _Found:
    if list(args[:1]) == ["remove"] and (_short_has(args, "f") or _has(args, "--force")):
        return "git-discard", "git worktree remove --force"
    return None


def _merge(args: Sequence[str], _: PathExists | None) -> _Found:
    if any(long_option(arg, "--abort") for arg in _before_dashes(args)):
        return "git-discard", "git merge --abort (resets like git reset --merge)"
    return None


def _short_has(args: Sequence[str], letter: str) -> bool:
    """Whether a short cluster before ``--`` holds ``letter`` (may over-count values: asks more)."""
    return any(a[:1] == "-" and a[1:2] != "-" and letter in a for a in _before_dashes(args))


def _has(args: Sequence[str], name: str) -> bool:
    """Whether ``name`` or an abbreviation of it comes before ``--``."""
    return any(long_option(arg, name) for arg in _before_dashes(args))


def _before_dashes(args: Sequence[str]) -> list[str]:
    words: list[str] = []
    for arg in args:
        if arg in ("--", "--end-of-options"):
            break
        words.append(arg)
    return words


_CHECKS: dict[str, Callable[[Sequence[str], PathExists | None], _Found]] = {
    "reset": _reset,
    "clean": _clean,
    "rm": _rm,
    "mv": _mv,
    "checkout": _checkout,
    "switch": _switch,
    "restore": _restore,
    "stash": _stash,
    "branch": _branch,
    "tag": _tag,
    "update-ref": _always("git-ref-delete", "git update-ref (moves or deletes any ref)"),
    "symbolic-ref": _symbolic_ref,
    "replace": _replace,
    "notes": _notes,
    "reflog": _reflog,
    "gc": _gc,
    "prune": _prune,
    "repack": _repack,
    "filter-repo": _always("git-prune", "History rewrite (git filter-repo)"),
    "filter-branch": _always("git-prune", "History rewrite (git filter-branch)"),
    "update-index": _update_index,
    "checkout-index": _checkout_index,
    "read-tree": _read_tree,
    "worktree": _worktree,
    "merge": _merge,
}
