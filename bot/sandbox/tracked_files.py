"""Which secret-named files git already holds, unchanged: those the sandbox need not hide.

A repository may track files named like secrets: a Helm chart's
``templates/secrets.yaml``, a test's ``fixtures/server.key``, a small project's
committed ``.env``. Hiding them makes them read as empty in the sandbox, so tests
fail, builds break, and ``git commit -a`` there would record them emptied. Their
content is readable anyway (``git show HEAD:.env``), so a file whose content is
exactly what git's index holds for it is left visible; one changed since (real
secrets written over a committed template) stays hidden.

The index is read with ``git ls-files --stage`` (run outside the sandbox with hooks,
fsmonitor and every inherited ``GIT_*`` setting off, and cached until the index
changes), and each candidate file's blob id is computed here, cached by the file's
identity and times. A model cannot use this to see a secret: for the file to count as
unchanged, its content must be in git already.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import threading
from collections.abc import Iterable
from pathlib import Path

__all__ = ["TrackedFiles"]

logger = logging.getLogger(__name__)

# Larger files are hidden whatever git holds: hashing them each time costs too much.
MAX_HASHED_BYTES = 4 * 1024 * 1024
_GIT_TIMEOUT_S = 10.0
_GIT_ENVIRONMENT_KEPT = ("PATH", "HOME", "LANG", "TZ")
_SAFE_CONFIG = ("core.fsmonitor=false", "core.hooksPath=/dev/null", "core.untrackedCache=false")

_FileStamp = tuple[int, int, int, int, int]


class TrackedFiles:
    """The workspace's tracked files whose content equals the index's. Thread-safe."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._index: tuple[_FileStamp, dict[str, str]] | None = None
        self._blobs: dict[str, tuple[_FileStamp, str]] = {}

    def unchanged(self, relatives: Iterable[str]) -> set[str]:
        """Those of ``relatives`` (workspace-relative files) git holds exactly as they are."""
        wanted = list(relatives)
        if not wanted:
            return set()
        with self._lock:
            staged = self._staged()
            found = set()
            for relative in wanted:
                blob = staged.get(relative)
                if blob is not None and self._blob(relative, len(blob)) == blob:
                    found.add(relative)
            return found

    def _staged(self) -> dict[str, str]:
        """Path -> blob id of every entry of the index, read again when the index changes."""
        index = self._index_path()
        stamp = _stamp(index) if index is not None else None
        if stamp is None:
            return {}
        if self._index is not None and self._index[0] == stamp:
            return self._index[1]
        entries = self._ls_files()
        self._index = (stamp, entries)
        return entries

    def _index_path(self) -> Path | None:
        git = self.root / ".git"
        if git.is_dir() and not git.is_symlink():
            return git / "index"
        if git.is_file() and not git.is_symlink():  # a linked worktree's `gitdir: ...`
            try:
                line = git.read_text(errors="replace").strip()
            except OSError:
                return None
            if line.startswith("gitdir: "):
                return (self.root / line.removeprefix("gitdir: ")).resolve() / "index"
        return None

    def _ls_files(self) -> dict[str, str]:
        environment = {k: os.environ[k] for k in _GIT_ENVIRONMENT_KEPT if k in os.environ}
        environment["GIT_CONFIG_NOSYSTEM"] = "1"
        command = ["git"]
        for setting in _SAFE_CONFIG:
            command += ["-c", setting]
        command += ["ls-files", "--stage", "-z"]
        try:
            result = subprocess.run(
                command,
                cwd=self.root,
                env=environment,
                capture_output=True,
                timeout=_GIT_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            logger.warning("could not read git's index in %s: %s", self.root, exc)
            return {}
        if result.returncode != 0:
            return {}
        entries: dict[str, str] = {}
        for record in result.stdout.split(b"\0"):
            meta, _, name = record.partition(b"\t")
            fields = meta.split()
            if len(fields) == 3 and fields[0] in (b"100644", b"100755") and fields[2] == b"0":
                entries[os.fsdecode(name)] = fields[1].decode("ascii")
        return entries

    def _blob(self, relative: str, id_length: int) -> str | None:
        """The git blob id of the file as it is now (SHA-1 or SHA-256 as the index's)."""
        path = self.root / relative
        stamp = _stamp(path)
        if stamp is None or stamp[2] > MAX_HASHED_BYTES:
            return None
        cached = self._blobs.get(relative)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            content = os.read(fd, MAX_HASHED_BYTES + 1)
        finally:
            os.close(fd)
        digest = hashlib.sha256 if id_length == 64 else hashlib.sha1
        blob = digest(b"blob %d\0" % len(content) + content).hexdigest()
        self._blobs[relative] = (stamp, blob)
        return blob


def _stamp(path: Path) -> _FileStamp | None:
    """A regular file's device, inode, size, mtime and ctime, or None."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if not (info.st_mode & 0o170000 == 0o100000):
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
