"""Walk a path from the workspace root one component at a time, holding descriptors.

The file tools never check a path and then open it again by name: a symlink swapped
in between would take them anywhere. Instead each component is opened with
`O_PATH | O_NOFOLLOW` relative to the directory descriptor already held; a symlink
is read and its target resolved lexically from the right place, and a target that
leaves the root (an absolute path elsewhere, a `..` above the root) is refused. What
the caller finally opens is opened relative to the parent descriptor with
`O_NOFOLLOW`, and checked with `fstat` on that very descriptor.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field

from bot.errors import WorkspaceError

MAX_SYMLINK_HOPS = 40
MAX_PATH_CHARS = 4_096
# How often a walk is redone when the final component turned into a symlink between
# the walk and the open (another process racing us); each retry is a full, safe walk.
MAX_REOPEN_ATTEMPTS = 5

_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
Identity = tuple[int, int]


def identity(st: os.stat_result) -> Identity:
    """What makes a file the same file, whatever name or link reached it."""
    return (st.st_dev, st.st_ino)


@dataclass(slots=True)
class Walk:
    """Where a path led: the real components and descriptors for them, not names.

    Attributes:
        parts: Root-relative components of the real location, symlinks resolved;
            the trailing `missing` ones do not exist yet.
        missing: How many trailing components of `parts` do not exist.
        dir_fd: `O_PATH` descriptor of the deepest existing directory that holds the
            final component (the root itself for the root or a top-level name).
        fd: `O_PATH` descriptor of the final object, None when it does not exist.
        stat: `fstat` of `fd`, None when it does not exist.
        dir_ids: Identities of the directories passed through below the root.
    """

    parts: tuple[str, ...]
    missing: int
    dir_fd: int
    fd: int | None
    stat: os.stat_result | None
    dir_ids: tuple[Identity, ...]
    _owned: list[int] = field(default_factory=list)

    @property
    def exists(self) -> bool:
        return self.fd is not None

    @property
    def name(self) -> str:
        """The final component, "." for the root itself."""
        return self.parts[-1] if self.parts else "."

    def close(self) -> None:
        for fd in self._owned:
            os.close(fd)
        self._owned.clear()

    def __enter__(self) -> Walk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def split_inside(path: str, roots: Sequence[str]) -> list[str] | None:
    """The components of absolute `path` below one of `roots`, None when it lies elsewhere.

    Lexical on purpose: `..` is left in place for the walk, which refuses to climb
    above the root however the components are arranged.
    """
    for root in roots:
        if root == "/":
            return path.split("/")
        if path == root or path.startswith(root + "/"):
            return path[len(root) :].split("/")
    return None


def check_path_text(path: str) -> None:
    """Refuse paths no file system lookup should ever see."""
    if not path or not path.strip():
        raise WorkspaceError("the path is empty")
    if "\x00" in path:
        raise WorkspaceError("the path contains a NUL byte")
    if len(path) > MAX_PATH_CHARS:
        raise WorkspaceError(
            f"the path is {len(path):,} characters long; at most {MAX_PATH_CHARS:,}"
        )


def _outside(path: str, roots: Sequence[str], reason: str) -> WorkspaceError:
    return WorkspaceError(f"{path!r} {reason} ({roots[0]}); only paths inside it may be used")


def walk(root_fd: int, roots: Sequence[str], path: str) -> Walk:
    """Resolve `path` (relative to the root, or absolute inside it) without leaving the root.

    Args:
        root_fd: A directory descriptor of the workspace root, held by the caller.
        roots: Absolute spellings of the root, the real one first; absolute paths and
            absolute symlink targets must start with one of them.
        path: What the model asked for.

    Raises:
        WorkspaceError: The path, or a symlink on the way, leads out of the root; a
            component that must be a directory is not; too many symlinks.
    """
    check_path_text(path)
    if path.startswith("/"):
        inside = split_inside(path, roots)
        if inside is None:
            raise _outside(path, roots, "is an absolute path outside the workspace")
        first = inside
    else:
        first = path.split("/")
    # A stack of (component, came_from_a_link), next component last.
    todo: list[tuple[str, bool]] = [(name, False) for name in reversed(first)]
    fds: list[int] = []
    names: list[str] = []
    ids: list[Identity] = []
    missing: list[str] = []
    hops = 0
    try:
        while todo:
            name, from_link = todo.pop()
            if name in ("", "."):
                continue
            if name == "..":
                if missing:
                    missing.pop()
                elif names:
                    os.close(fds.pop())
                    names.pop()
                    ids.pop()
                elif from_link:
                    raise _outside(
                        path, roots, "leads outside the workspace through a symbolic link"
                    )
                else:
                    raise _outside(path, roots, "escapes the workspace through '..'")
                continue
            if missing:
                missing.append(name)
                continue
            current = fds[-1] if fds else root_fd
            try:
                fd = os.open(name, _PATH_FLAGS, dir_fd=current)
            except FileNotFoundError:
                missing.append(name)
                continue
            except OSError as exc:
                raise _lookup_error(path, exc) from exc
            st = os.fstat(fd)
            if stat.S_ISLNK(st.st_mode):
                try:
                    target = os.readlink("", dir_fd=fd)
                finally:
                    os.close(fd)
                hops += 1
                if hops > MAX_SYMLINK_HOPS:
                    raise WorkspaceError(f"{path!r} goes through too many symbolic links")
                if target.startswith("/"):
                    inside = split_inside(target, roots)
                    if inside is None:
                        raise _outside(
                            path, roots, "leads outside the workspace through a symbolic link"
                        )
                    while fds:
                        os.close(fds.pop())
                    names.clear()
                    ids.clear()
                    target_parts = inside
                else:
                    target_parts = target.split("/")
                todo.extend((part, True) for part in reversed(target_parts))
                continue
            if stat.S_ISDIR(st.st_mode) and todo:
                fds.append(fd)
                names.append(name)
                ids.append(identity(st))
                continue
            if any(rest not in ("", ".") for rest, _ in todo):
                os.close(fd)
                shown = "/".join([*names, name])
                raise WorkspaceError(f"{path!r}: {shown} is not a directory")
            # The final object: its parent stays `current`.
            return Walk(
                parts=(*names, name),
                missing=0,
                dir_fd=current,
                fd=fd,
                stat=st,
                dir_ids=tuple(ids),
                _owned=[*fds, fd],
            )
        if missing:
            return Walk(
                parts=(*names, *missing),
                missing=len(missing),
                dir_fd=fds[-1] if fds else root_fd,
                fd=None,
                stat=None,
                dir_ids=tuple(ids),
                _owned=fds,
            )
        # The path named a directory (possibly the root): hand it over as the final object.
        final = fds.pop() if fds else root_fd
        final_ids = tuple(ids)
        return Walk(
            parts=tuple(names),
            missing=0,
            dir_fd=fds[-1] if fds else root_fd,
            fd=final,
            stat=os.fstat(final),
            dir_ids=final_ids[:-1],
            _owned=[*fds, final] if final != root_fd else fds,
        )
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def _lookup_error(path: str, exc: OSError) -> WorkspaceError:
    if exc.errno == errno.ENAMETOOLONG:
        return WorkspaceError(f"{path!r} has a component too long for the file system")
    if exc.errno == errno.ENOTDIR:
        return WorkspaceError(f"{path!r} goes through something that is not a directory")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return WorkspaceError(f"{path!r} cannot be opened: permission denied")
    return WorkspaceError(f"{path!r} cannot be opened: {exc.strerror}")


def reopen(found: Walk, flags: int) -> int:
    """Open the object `found` names, for real, without following a link.

    Directories are reopened through their own descriptor ("." relative to it), so no
    name is looked up again; other objects by name relative to the held parent with
    `O_NOFOLLOW`, so at worst another file *in the same directory* is opened, and the
    caller checks that one with `fstat`. Raises `OSError` (`ELOOP` when the name
    became a symlink meanwhile).
    """
    assert found.fd is not None and found.stat is not None
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY
    if stat.S_ISDIR(found.stat.st_mode):
        return os.open(".", flags | os.O_DIRECTORY, dir_fd=found.fd)
    return os.open(found.name, flags, dir_fd=found.dir_fd)


def make_dirs(found: Walk, owner: tuple[int, int] | None = None) -> Walk:
    """Create the missing parent directories of `found`, each relative to the last.

    Returns a walk whose `dir_fd` is the directory that will hold the final name
    (and which owns the new descriptors). `mkdir` never follows a symlink, and each
    new directory is opened with `O_NOFOLLOW | O_DIRECTORY`, so a link planted in
    between is refused rather than followed. With `owner` (uid, gid), each new
    directory is given to it, through the descriptor just opened.
    """
    if found.missing <= 1:
        return found
    current = found.dir_fd
    ids = list(found.dir_ids)
    start = len(found.parts) - found.missing
    for name in found.parts[start:-1]:
        try:
            os.mkdir(name, 0o755, dir_fd=current)
        except FileExistsError:
            pass
        try:
            current = os.open(name, _PATH_FLAGS | os.O_DIRECTORY, dir_fd=current)
        except OSError as exc:
            raise WorkspaceError(
                f"{'/'.join(found.parts)!r}: {name} could not be made a directory ({exc.strerror})"
            ) from exc
        found._owned.append(current)
        if owner is not None:
            give(current, owner)
        ids.append(identity(os.fstat(current)))
    found.dir_fd = current
    found.dir_ids = tuple(ids)
    found.missing = 1
    return found


def give(fd: int, owner: tuple[int, int]) -> None:
    """Make `owner` own what `fd` refers to (an `O_PATH` descriptor works too).

    When Baton runs as root in a workspace that belongs to someone else, what its
    tools create must be that person's, or the commands (which run as them) could not
    change it later.
    """
    uid, gid = owner
    try:
        os.chown(fd, uid, gid)
    except (OSError, NotImplementedError):
        # O_PATH descriptors refuse fchown on some kernels; chown through /proc instead.
        os.chown(f"/proc/self/fd/{fd}", uid, gid)
