"""The secret files of a workspace, found before each command so the sandbox hides them.

A command allowed for one purpose can print any file (`find . -type f -exec cat {} +`,
`rg -uu KEY`, `tar c .`), so rules that read the command's words cannot keep secrets
from it. Instead every file of the workspace whose path is on the secret-path list
(`bot.permissions.secret_paths`: `.env`, private keys, credentials, Terraform state
...) is masked in the sandbox, whatever the command: it reads as an empty read-only
file, and a directory of secrets (`.ssh/`, `.aws/`) as an empty read-only directory.
They are mount points there, so they cannot be renamed, removed or hard-linked to
get at the host's file either. The operator shows some of them again with
`sandbox.show_secrets`.

The workspace is walked before every call, so a secret made since the last one is
hidden too. To keep that cheap (`bench.sandbox`'s budget is 50 ms a call), each
directory's listing is kept with the directory's identity and times: adding,
removing or renaming an entry changes its mtime and ctime, and nobody can set a
ctime back, so an unchanged directory is only `lstat`ed again, and only changed ones
are listed. A listing taken within `SETTLE_NS` of the directory's last change is
taken again next time: timestamps are coarse (a clock tick), and a second change in
the same tick would leave them as they were. `.git` directories and dependency trees
(`node_modules`, `.venv`) are not walked (see `UNWALKED_NAMES`). A directory Baton
cannot list is hidden whole, since a command might make it readable and read it.

A file git already holds exactly as it is (a tracked Helm ``secrets.yaml``, a test's
key) is left visible: its content is in the repository for anyone to read, and hiding
it would make it look emptied (`bot.sandbox.tracked_files`).

Symbolic links are never followed by the walk, and a link is never masked itself:
bwrap would mount over wherever it points (outside the workspace, or creating the
target there), which is why the profile refuses protected paths that are links. A
link named like a secret that leads to a file or directory inside the workspace has
that target hidden instead (so `cat .env` reads nothing through it); one that leads
outside is left alone, since the sandbox shows nothing outside the workspace but the
system's directories, whose secrets it masks already. So one planted link cannot
make every command fail.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Iterable, Sequence, Set
from dataclasses import dataclass
from pathlib import Path

from bot.errors import WorkspaceError
from bot.permissions.rule_globs import glob_to_regex
from bot.permissions.secret_paths import secret_category, secret_directory_category
from bot.sandbox.policy import SandboxPolicy
from bot.sandbox.tracked_files import TrackedFiles

# A listing this close to the directory's last change (or a change dated in the future:
# another machine's clock on a network file system) is not trusted on the next call.
SETTLE_NS = 1_000_000_000
# Directories never walked, at any depth: git's own (git needs it whole, and it holds
# no secrets by name), and the dependency trees package managers fill. Those hold
# third-party files, whose secret-looking names are test fixtures (a package's
# `test/server.key`), not the operator's secrets; they are most of a project's
# directories (walking them would cost more than the whole per-call budget), and
# each fixture masked would pin its directories, so `rm -rf node_modules` would fail.
UNWALKED_NAMES = frozenset({".git", "node_modules", ".venv"})
# How many hidden files a note names before it only counts the rest.
NOTE_NAMES = 5
# Past this many, each call is noticeably slower (bwrap makes a mount for each, and its
# directories): the operator is told once, and may show test fixtures instead.
MANY_SECRETS = 50

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Listing:
    """What one directory held when it was last listed.

    Attributes:
        stamp: Device, inode, mtime and ctime of the directory when it was listed.
        settled: Whether its last change was older than `SETTLE_NS` then: only a
            settled listing is reused.
        files: Workspace-relative paths of its entries to hide that are no directories.
        directories: Its directories of secrets, hidden whole.
        links: Its entries that are symbolic links named like secrets.
        subdirectories: Its entries to walk next.
    """

    stamp: tuple[int, int, int, int]
    settled: bool
    files: tuple[str, ...]
    directories: tuple[str, ...]
    links: tuple[str, ...]
    subdirectories: tuple[str, ...]


class SecretFiles:
    """The secret files in one workspace, for the sandbox to mask on each call.

    Thread-safe: calls running at once share the cache, one walk at a time (a
    second caller then finds everything listed already).
    """

    def __init__(
        self,
        policy: SandboxPolicy,
        *,
        shown: Sequence[str] = (),
        denied: Sequence[str] = (),
        settle_ns: int = SETTLE_NS,
    ) -> None:
        """Set up the walk of `policy.workspace`.

        Args:
            policy: The call's policy without secrets. What it masks inside the
                workspace is not walked (already hidden); a directory of secrets
                holding one of its protected paths is not hidden whole (the profile
                could not mount that path inside an empty read-only directory), its
                entries are, one by one.
            shown: `sandbox.show_secrets`: workspace-relative paths and globs never
                hidden, nor anything under them.
            denied: Globs of the permission rules that deny reading files
                (`read_file(**/appsettings*)`): the files they match are hidden like
                secrets, whatever `shown` says, so a command that reads without naming
                them (`grep -r`, `tar c .`) gets nothing either.
            settle_ns: How long after a directory's last change its listing may be
                reused (`SETTLE_NS`).
        """
        self.root = policy.workspace
        self._root = str(policy.workspace)
        self._masked = frozenset(self._relative_inside(policy.masked))
        self._kept = frozenset(
            self._relative_inside(
                [
                    *policy.read_only,
                    *policy.masked,
                    *policy.files,
                    *policy.pinned,
                    *policy.removed_if_created,
                    *policy.heads,
                ]
            )
        )
        self._shown = tuple(_ShownPattern(pattern) for pattern in shown)
        self._denied = tuple(glob_to_regex(pattern, "path") for pattern in denied)
        self._settle_ns = settle_ns
        self._listings: dict[str, _Listing] = {}
        self._lock = threading.Lock()
        self._warned = False
        # Secret-named files git holds exactly as they are stay visible (see TrackedFiles).
        self._tracked = TrackedFiles(self.root)

    def find(self) -> tuple[Path, ...]:
        """Every path to mask for a call starting now, absolute, sorted.

        Blocking (it reads the file system): call it off the event loop.
        """
        with self._lock:
            relative = self._walk()
            if committed := self._tracked.unchanged(relative):
                relative = [path for path in relative if path not in committed]
            if len(relative) > MANY_SECRETS and not self._warned:
                self._warned = True
                logger.warning(
                    "%d secret files are hidden from every command in %s, which makes each "
                    "call slower; list test fixtures in sandbox.show_secrets (first: %s)",
                    len(relative),
                    self.root,
                    ", ".join(relative[:5]),
                )
        return tuple(self.root / path for path in relative)

    def relative(self, path: Path) -> str:
        """How a hidden path is named to the model: relative to the workspace."""
        return path.relative_to(self.root).as_posix()

    def _walk(self) -> list[str]:
        now = time.time_ns()
        listings: dict[str, _Listing] = {}
        files: list[str] = []
        directories: set[str] = set()
        links: list[str] = []
        pending = [""]
        while pending:
            relative = pending.pop()
            try:
                info = os.lstat(self._absolute(relative))
            except OSError:
                continue  # removed since its parent was listed
            if not stat.S_ISDIR(info.st_mode):
                continue  # replaced by a file or a link since its parent was listed
            listing = self._listings.get(relative)
            if listing is None or not listing.settled or listing.stamp != _stamp(info):
                try:
                    listing = self._list(relative, info, now)
                except OSError as exc:
                    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                        continue  # gone since its parent was listed
                    # What Baton cannot list, a command may still make readable
                    # (`chmod` by its owner) and read: hidden whole, unseen.
                    directories.add(self._unlistable(relative, exc))
                    continue
            listings[relative] = listing
            files += listing.files
            directories.update(listing.directories)
            links += listing.links
            pending += listing.subdirectories
        # Directories that are gone drop out of the cache with their listings.
        self._listings = listings
        for link in links:
            target = self._link_target(link)
            if target is not None and target[1]:
                directories.add(target[0])
            elif target is not None:
                files.append(target[0])
        # Inside a hidden directory there is nothing to mount over (nor room to: it is
        # an empty read-only one); a link may lead into one, or hide one that holds a
        # secret found by its name.
        return sorted(p for p in {*files, *directories} if not _under_any(p, directories))

    def _list(self, relative: str, info: os.stat_result, now: int) -> _Listing:
        files: list[str] = []
        directories: list[str] = []
        links: list[str] = []
        subdirectories: list[str] = []
        with os.scandir(self._absolute(relative)) as entries:
            for entry in entries:
                path = f"{relative}/{entry.name}" if relative else entry.name
                if path in self._masked:
                    continue
                try:
                    is_link = entry.is_symlink()
                    is_directory = not is_link and entry.is_dir(follow_symlinks=False)
                except OSError:
                    continue  # gone since the directory was read
                if is_link:
                    if self._is_denied(path) or (_named_secret(path) and not self._is_shown(path)):
                        links.append(path)
                elif is_directory:
                    if entry.name in UNWALKED_NAMES:
                        continue
                    if (
                        secret_directory_category(path) is None
                        or path in self._kept
                        or self._may_show_inside(path)
                    ):
                        subdirectories.append(path)
                    elif not self._is_shown(path):
                        directories.append(path)
                elif path not in self._kept and (
                    self._is_denied(path)
                    or (secret_category(path) is not None and not self._is_shown(path))
                ):
                    files.append(path)
        changed = max(info.st_mtime_ns, info.st_ctime_ns)
        return _Listing(
            stamp=_stamp(info),
            settled=changed < now - self._settle_ns,
            files=tuple(files),
            directories=tuple(directories),
            links=tuple(links),
            subdirectories=tuple(subdirectories),
        )

    def _unlistable(self, relative: str, exc: OSError) -> str:
        """The directory Baton cannot list, to hide whole; or why the call cannot run."""
        if not relative or any(k.startswith(relative + "/") for k in self._kept):
            where = self._absolute(relative)
            raise WorkspaceError(
                f"Baton cannot look for secret files in {where} ({exc.strerror}), so no "
                "command may run until it is readable again"
            )
        return relative

    def _may_show_inside(self, directory: str) -> bool:
        """Whether a directory of secrets must be walked rather than hidden whole.

        So when a shown pattern may name something in it (but not the directory
        itself: then nothing in it is hidden), or a protected path lies in it.
        """
        if any(kept.startswith(directory + "/") for kept in self._kept):
            return True
        return not self._is_shown(directory) and any(
            pattern.may_match_below(directory) for pattern in self._shown
        )

    def _link_target(self, link: str) -> tuple[str, bool] | None:
        """What a secret-named link leads to, when it must be hidden: its path, and
        whether it is a directory. Resolved on every call: links and the directories
        on their way change without the link's own directory changing."""
        target = os.path.realpath(self._absolute(link))
        if not target.startswith(self._root + "/"):
            return None  # outside: nothing there is shown but the system's directories
        relative = target[len(self._root) + 1 :]
        parts = relative.split("/")
        if UNWALKED_NAMES.intersection(parts) or _under_any(relative, self._masked):
            return None
        if relative in self._kept or self._is_shown(relative):
            return None
        try:
            info = os.stat(target)
        except OSError:
            return None  # dangling: nothing to read through it
        directory = stat.S_ISDIR(info.st_mode)
        if directory and any(k == relative or k.startswith(relative + "/") for k in self._kept):
            return None  # `.ssh -> .baton`: what it leads to is protected already
        return relative, directory

    def _is_denied(self, path: str) -> bool:
        return any(pattern.fullmatch(path) for pattern in self._denied)

    def _is_shown(self, path: str) -> bool:
        if not self._shown:
            return False
        parts = path.split("/")
        prefixes = ["/".join(parts[:end]) for end in range(1, len(parts) + 1)]
        return any(pattern.matches(prefix) for pattern in self._shown for prefix in prefixes)

    def _absolute(self, relative: str) -> str:
        return f"{self._root}/{relative}" if relative else self._root

    def _relative_inside(self, paths: Iterable[Path]) -> list[str]:
        return [
            path.relative_to(self.root).as_posix()
            for path in paths
            if path != self.root and path.is_relative_to(self.root)
        ]


class _ShownPattern:
    """One `sandbox.show_secrets` entry, a glob as permission rules write them."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.regex = _glob_regex(pattern)
        self.components = [_glob_regex(part) for part in pattern.split("/")]
        self.crosses = ["**" in part for part in pattern.split("/")]

    def matches(self, path: str) -> bool:
        return self.regex.fullmatch(path) is not None

    def may_match_below(self, directory: str) -> bool:
        """Whether some path under `directory` could match, judged component by component."""
        parts = directory.split("/")
        for index, part in enumerate(parts):
            if index >= len(self.components):
                return False
            if self.crosses[index]:
                return True
            if self.components[index].fullmatch(part) is None:
                return False
        return len(self.components) > len(parts)


def _glob_regex(pattern: str) -> re.Pattern[str]:
    # The rules' dialect, so the operator writes globs one way in baton.yaml.
    return glob_to_regex(pattern, "path")


def _named_secret(path: str) -> bool:
    return secret_category(path) is not None or secret_directory_category(path) is not None


def _stamp(info: os.stat_result) -> tuple[int, int, int, int]:
    return (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_ctime_ns)


def _under_any(path: str, directories: Set[str]) -> bool:
    """Whether `path` lies inside (not at) one of `directories`."""
    parts = path.split("/")
    return any("/".join(parts[:end]) in directories for end in range(1, len(parts)))


def hidden_note(names: Sequence[str], command: str, output: str) -> str | None:
    """A line telling the model which secret files a command could not see, or None.

    Said only when the command or its output names one of them (`cat .env`, `ls -a`,
    `git status`, `tar c .`): then an empty file would mislead the model. The tool is
    shared by every conversation of a workspace, so "only the first time" would tell
    one conversation and leave the others puzzled; and on every call it would repeat
    the same line in most outputs, where no hidden file plays a part.

    Args:
        names: The hidden paths, workspace-relative; a directory's ends with `/`.
        command: The command line.
        output: What the command printed.
    """
    mentioned = _mentioned(names, f"{command}\n{output}")
    if not mentioned:
        return None
    listed = ", ".join(mentioned[:NOTE_NAMES])
    rest = len(names) - min(len(mentioned), NOTE_NAMES)
    more = f" and {rest} more" if rest else ""
    count = f"{len(names)} secret file{'s' if len(names) != 1 else ''}"
    return (
        f"[Baton hid {count} from this command ({listed}{more}): each reads as empty and "
        "cannot be changed, whatever the command. The operator can show them with "
        "`sandbox.show_secrets` in baton.yaml.]"
    )


def _mentioned(names: Sequence[str], text: str) -> list[str]:
    """The names whose last component appears in `text` as a whole name.

    `.env` is not named by `.env.example`, nor by `tools/.env/bin` (a directory called
    `.env`, which is no secret); the directory `.ssh/` is named by `.ssh/config`.
    """
    if not names:
        return []
    by_base: dict[str, list[str]] = {}
    for name in names:
        by_base.setdefault(name.rstrip("/").rsplit("/", 1)[-1], []).append(name)
    alternatives = "|".join(map(re.escape, sorted(by_base, key=len, reverse=True)))
    found: dict[str, None] = {}
    for match in re.finditer(rf"(?<![\w.-])(?:{alternatives})(?![\w.-])", text):
        into_directory = text.startswith("/", match.end())
        for name in by_base[match.group()]:
            if not into_directory or name.endswith("/"):
                found.setdefault(name)
    return list(found)
