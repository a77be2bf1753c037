"""The one place that turns a `SandboxPolicy` into bubblewrap's command line.

The profile, in the order bwrap applies it:

- namespaces: a new user namespace (when the kernel allows one; the command keeps the
  uid and gid bwrap was started with, so what it writes in the workspace is owned as
  if that user had written it, but whatever capabilities it had belong to that
  namespace, not the host; the runner starts bwrap as the workspace's owner when
  Baton is root and the workspace is not, see `bot.sandbox.identity`), new PID, IPC,
  UTS and (when possible) cgroup namespaces, a new network namespace unless the
  policy allows the network; `--die-with-parent`, `--new-session` and every
  capability dropped;
- the system, read-only: /usr, /bin, /sbin, /lib*, /etc and /opt (symlinked /bin and
  /lib stay symlinks); the host's password hashes, SSH host keys and TLS private
  keys are masked, since Baton may run as root;
- a fresh /proc for the new PID namespace with the kernel's knobs read-only: all of
  /proc/sys (a root command could otherwise set the host's sysctls, core_pattern
  among them, or register a binfmt_misc interpreter), /proc/sysrq-trigger and the
  other writable corners (/proc/fs, /proc/mtrr, /proc/acpi, /proc/scsi, /proc/driver;
  bwrap itself covers /proc/irq and /proc/bus). A user namespace alone is not enough:
  the caller's uid maps to itself, and the kernel lets uid 0 write sysctls by mode bits;
- a minimal /dev, and empty private /tmp, /var/tmp and home (`SANDBOX_HOME`), all tmpfs;
- the workspace, read-write, at its own path (also the working directory);
- inside it, the policy's read-only and masked paths. Each existing directory on the
  way to one is bound onto itself, so it cannot be renamed or removed to swap the
  protected path out (`mv .git old && git init` would otherwise bring fresh hooks).
  Masked files are covered by an empty read-only file (`/dev/null` cannot serve: bwrap
  mounts binds `nodev`). A read-only path that does not exist yet gets an empty
  read-only directory (an empty file for the policy's `files`), a masked one the empty
  file: the command cannot create it. bwrap creates these mount points on the host;
  the caller removes them after the call. The policy's `removed_if_created` paths
  (`.git/commondir`, which no placeholder can hold) are the runner's job, after the call;
- the sandbox's own root made read-only last;
- a seccomp filter (`--seccomp`, built by `bot.sandbox.seccomp`, passed by the
  runner), installed by bwrap just before the command: no call may set a setuid or
  setgid bit (chmod and its kin, or the mode of a file it creates), nor an extended
  attribute (file capabilities), and openat2 and io_uring are refused. The mounts are
  `nosuid`, but a mode bit set in the workspace stays on the host's file, where anyone
  could run it as whoever the command ran as. Calls through a foreign ABI (i386's
  `int 0x80`) kill the process. Where libseccomp is missing there is no filter, and
  the sandbox's `reason` says so;

No other host directory is mounted: not /root, /home, /srv, /var, /run, the
workspace's siblings nor Baton's state directory.

Not promised: limits on CPU or memory beyond the timeout (no cgroup), nor on the
number of processes of a command that runs as root (the runner limits them for one
that runs as the workspace's owner); nested repositories the command creates in the
workspace are its own files, hooks and config included (like a Makefile someone
later runs).
"""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

from bot.errors import WorkspaceError
from bot.sandbox.policy import SandboxPolicy

SANDBOX_HOME = Path("/home/sandbox")
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
# Secrets of the host system that a process running as root could read.
SYSTEM_SECRETS = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/ssh/ssh_host_*_key",
    "/etc/ssl/private",
)
# Where systemd-resolved keeps resolv.conf; /etc/resolv.conf often links there.
RESOLVER_DIR = "/run/systemd/resolve"
# Kernel knobs under /proc, bound read-only over the fresh /proc (the host's view of
# them: sysctls resolve their namespaces by the process that opens them). /proc/sys
# always exists; the others depend on the kernel's configuration.
PROC_READ_ONLY = ("/proc/sys",)
PROC_READ_ONLY_IF_PRESENT = (
    "/proc/sysrq-trigger",
    "/proc/fs",
    "/proc/mtrr",
    "/proc/acpi",
    "/proc/scsi",
    "/proc/driver",
)
SCRATCH_DIRS = ("/tmp", "/var/tmp")


@dataclass(frozen=True)
class Profile:
    """bwrap's options for one call, and the host paths its mount points will create.

    Attributes:
        arguments: Everything between the bwrap binary and `--`.
        placeholders: Paths in the workspace that do not exist on the host; bwrap
            creates an empty file or directory at each (a mount point), which the
            caller removes once the call is over.
    """

    arguments: tuple[str, ...]
    placeholders: tuple[Path, ...]


def build_profile(
    policy: SandboxPolicy,
    *,
    empty_file: Path,
    held: Collection[Path] = (),
    git_config: Path | None = None,
    user_namespace: bool = True,
) -> Profile:
    """bwrap's options for running one command under `policy`.

    Args:
        policy: What the command may see and change.
        empty_file: An empty host file nobody else writes, bound over masked files.
        git_config: A host file shown read-only as the home's `.gitconfig` (the
            identity commits made in the sandbox carry, unless the repository names one).
        held: Placeholders another running call created; they count as missing, so
            this call masks them too instead of treating them as the user's files.
        user_namespace: Whether to give the command a user namespace; False only
            where the probe found the kernel or container refusing one.

    Raises:
        WorkspaceError: A protected path, or a directory on the way to one, is a
            symbolic link. A link cannot be made read-only (mounts follow it, and the
            command could replace it), so the call is refused rather than run open.
    """
    workspace = _WorkspaceMounts(policy, frozenset(held), empty_file)
    arguments = [
        *_namespaces(policy.network, user_namespace),
        *_system(empty_file),
        *_scratch(git_config),
        *(_resolver() if policy.network else []),
        *_bind("--bind", policy.workspace),
        *workspace.arguments(),
        "--remount-ro",
        "/",
        "--chdir",
        str(policy.workspace),
    ]
    return Profile(tuple(arguments), tuple(workspace.placeholders))


def _namespaces(network: bool, user_namespace: bool) -> list[str]:
    # bwrap's default mapping keeps the caller's uid and gid inside the namespace.
    options = ["--unshare-user"] if user_namespace else []
    options += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    options += [] if network else ["--unshare-net"]
    return [*options, "--die-with-parent", "--new-session", "--cap-drop", "ALL"]


def _system(empty_file: Path) -> list[str]:
    options: list[str] = []
    for directory in SYSTEM_DIRS:
        if os.path.islink(directory):
            options += ["--symlink", os.readlink(directory), directory]
        elif os.path.isdir(directory):
            options += _bind("--ro-bind", Path(directory))
    for pattern in SYSTEM_SECRETS:
        for secret in sorted(glob.glob(pattern)):
            options += _mask(Path(secret), empty_file)
    return options


def _scratch(git_config: Path | None) -> list[str]:
    options = ["--proc", "/proc"]
    for knob in PROC_READ_ONLY:
        options += ["--ro-bind", knob, knob]
    for knob in PROC_READ_ONLY_IF_PRESENT:
        options += ["--ro-bind-try", knob, knob]
    options += ["--dev", "/dev"]
    for directory in (*SCRATCH_DIRS, str(SANDBOX_HOME)):
        options += ["--tmpfs", directory]
    if git_config is not None:
        options += ["--ro-bind", str(git_config), str(SANDBOX_HOME / ".gitconfig")]
    return options


def _resolver() -> list[str]:
    return ["--ro-bind-try", RESOLVER_DIR, RESOLVER_DIR]


def _bind(option: str, path: Path) -> list[str]:
    return [option, str(path), str(path)]


def _mask(path: Path, empty_file: Path) -> list[str]:
    """Hide an existing path behind an empty one of the same kind."""
    if path.is_dir() and not path.is_symlink():
        return _empty_directory(path)
    return ["--ro-bind", str(empty_file), str(path)]


def _empty_directory(path: Path) -> list[str]:
    return ["--tmpfs", str(path), "--remount-ro", str(path)]


class _WorkspaceMounts:
    """The mounts that keep a policy's paths inside the workspace as the policy says."""

    def __init__(self, policy: SandboxPolicy, held: frozenset[Path], empty_file: Path) -> None:
        self.root = policy.workspace
        self.held = held
        self.empty_file = empty_file
        self.masked = [p for p in policy.masked if self._inside(p)]
        # A path no placeholder may hold (git dies on an empty `.git/commondir`) is
        # protected only when it exists; when it does not, the runner removes it after
        # the call if the command made it.
        self.read_only = [
            p
            for p in policy.read_only
            if self._inside(p) and not (p in policy.removed_if_created and self._missing(p))
        ]
        self.files = frozenset(policy.files)
        self.pinned = [p for p in policy.pinned if self._inside(p)]
        self.outside_masked = [p for p in policy.masked if not self._inside(p)]
        self.placeholders: list[Path] = []

    def arguments(self) -> list[str]:
        mounts: dict[Path, list[str]] = {}
        for path in [*self.read_only, *self.masked]:
            for at, action in self._walk(path):
                if action == "pin":
                    mounts.setdefault(at, _bind("--bind", at))
                elif at not in mounts or mounts[at][0] == "--bind":
                    mounts[at] = self._mount(at, path, action)
        for path in self.pinned:
            if self._missing(path) or path.is_symlink() or not path.is_dir():
                continue
            for at, action in self._walk(path):
                if action in ("pin", "read-only") and (action == "pin" or at == path):
                    mounts.setdefault(at, _bind("--bind", at))
        options: list[str] = []
        for path in sorted(mounts, key=_depth):
            options += mounts[path]
        for path in self.outside_masked:
            if _visible_system_path(path):
                options += _mask(path, self.empty_file)
        return options

    def _walk(self, path: Path) -> Iterator[tuple[Path, str]]:
        """Each directory to pin on the way to `path`, then what to do at the end."""
        current = self.root
        for part in path.relative_to(self.root).parts:
            current = current / part
            if current not in self.held and current.is_symlink():
                raise WorkspaceError(
                    f"{current} is a symbolic link, so the sandbox cannot keep {path} "
                    "protected; replace the link with the real file or directory"
                )
            if self._missing(current):
                if not self._covered(current):
                    yield current, "placeholder"
                return
            if current == path:
                yield current, "mask" if path in self.masked else "read-only"
                return
            if not current.is_dir():
                # A file where a directory should be (a worktree's `.git` file): keep it.
                yield current, "read-only"
                return
            yield current, "pin"

    def _mount(self, at: Path, target: Path, action: str) -> list[str]:
        if action == "placeholder":
            if at not in self.placeholders:
                self.placeholders.append(at)
            if at == target and (target in self.masked or target in self.files):
                return ["--ro-bind", str(self.empty_file), str(at)]
            return _empty_directory(at)
        if action == "mask":
            return _mask(at, self.empty_file)
        return _bind("--ro-bind", at)

    def _covered(self, path: Path) -> bool:
        """True when an existing read-only path above `path` already keeps it from being made."""
        return any(
            path != protected and path.is_relative_to(protected) and not self._missing(protected)
            for protected in self.read_only
        )

    def _missing(self, path: Path) -> bool:
        return path in self.held or not os.path.lexists(path)

    def _inside(self, path: Path) -> bool:
        return path != self.root and path.is_relative_to(self.root)


def _visible_system_path(path: Path) -> bool:
    """Whether `path` exists under a system directory every sandbox shows."""
    if not os.path.lexists(path):
        return False
    mounted = [Path(d) for d in SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d)]
    return any(path.is_relative_to(d) for d in mounted)


def _depth(path: Path) -> int:
    return len(path.parts)


def is_placeholder(path: Path) -> bool:
    """True when `path` still looks like a mount point bwrap created: empty, nothing else."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(info.st_mode):
        return not any(os.scandir(path))
    return stat.S_ISREG(info.st_mode) and info.st_size == 0


def build_server_profile(
    *,
    paths: Collection[Path],
    masked: Collection[Path],
    network: bool,
    empty_file: Path,
    user_namespace: bool = True,
) -> tuple[str, ...]:
    """bwrap's options for a long-running MCP server (see `bot.mcp.launch`).

    The same namespaces, system directories and empty scratch as a command's, but no
    workspace: the server sees only `paths`, read-only (its interpreter and files), and
    works in the empty home. Any of `masked` (Baton's state directory, config and
    database) that it would see, in one of them or in a system directory, is hidden.
    Nothing of the host is writable, so no file it makes outlives it.
    """
    arguments = [
        *_namespaces(network, user_namespace),
        *_system(empty_file),
        *_scratch(None),
        *(_resolver() if network else []),
    ]
    for path in paths:
        arguments += _bind("--ro-bind", path)
    for path in masked:
        inside = any(path.is_relative_to(p) for p in paths) and os.path.lexists(path)
        if inside or _visible_system_path(path):
            arguments += _mask(path, empty_file)
    return (*arguments, "--remount-ro", "/", "--chdir", str(SANDBOX_HOME))
