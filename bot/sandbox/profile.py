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
- the system, read-only: /usr, /bin, /sbin, /lib* and /opt (symlinked /bin and /lib
  stay symlinks);
- a synthetic /etc: a tmpfs, read-only once filled (see below), holding only what
  programs need.
  Baton's own `passwd` and `group` (root, nobody and, when commands run as another
  uid, `sandbox`), `hosts` naming only loopback addresses, `hostname` and
  `nsswitch.conf`, written by the runner (`etc_files`); and from the host, read-only,
  the entries of `ETC_FROM_HOST` that exist (certificates, the loader's cache,
  alternatives, locale and time zone, and data that packages ship for their programs),
  `resolv.conf` only with the network; links stay links. The runner has small files
  that all may read copied in for each call (`--file`, which costs bwrap far less than
  a mount); directories and the rest are bound. So the host's users, host names,
  password hashes, SSH keys and other configuration are not there at all; private key
  directories inside the certificates (`/etc/ssl/private`) are masked. The UTS
  namespace's host name is `SANDBOX_HOSTNAME`;
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
  (`.git/commondir`, which no placeholder can hold) are the runner's job, after the
  call, and so are its missing `set_aside_if_created` ones (git's rebase and sequencer
  state: git reads the mere existence of a placeholder as a rebase in progress); when
  those exist, they are read-only like the rest;
- /etc, then the sandbox's own root, made read-only last;
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

import fnmatch
import glob
import os
import stat
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from bot.errors import WorkspaceError
from bot.sandbox.policy import SandboxPolicy

SANDBOX_HOME = Path("/home/sandbox")
# What `hostname` says in the sandbox, and the name `passwd` gives a uid other than root.
SANDBOX_HOSTNAME = "sandbox"
SANDBOX_USER = "sandbox"
# The overflow uid and gid: who owns what a user namespace does not map.
NOBODY = 65534
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
ETC = Path("/etc")
# Written by Baton (`etc_files`), never the host's: they name the host's users, groups
# and machines.
ETC_SYNTHETIC = ("passwd", "group", "hosts", "hostname", "nsswitch.conf")
# From the host, read-only, where present (a name may be a glob): nothing in them names
# the host's users or machines, and common programs fail or misbehave without them.
ETC_FROM_HOST = (
    # Certificates and the TLS libraries' settings (RHEL's crypto-policies too).
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "crypto-policies",
    # The dynamic loader's cache and search path.
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    # Debian's /usr/bin/awk, java, editor ... resolve through these links.
    "alternatives",
    # Locale and time zone.
    "localtime",
    "timezone",
    "locale.alias",
    "locale.conf",
    "default/locale",
    # Name service data that names no host: protocol and port numbers, resolver order.
    "protocols",
    "services",
    "rpc",
    "gai.conf",
    "host.conf",
    # Which distribution this is (pip, package managers and build scripts ask).
    "os-release",
    "lsb-release",
    "debian_version",
    "redhat-release",
    "system-release",
    "alpine-release",
    # What packages ship for their programs: MIME types (Python's mimetypes), Perl's
    # and Python's site settings (Debian's sitecustomize links here), the JDK's
    # configuration (its `conf` links here), fontconfig, ImageMagick's security
    # policy, XML catalogues; and the link to the mount table (`df`).
    "mime.types",
    "perl",
    "python3",
    "python3.*",
    "java-*",
    "fonts",
    "ImageMagick-*",
    "xml",
    "mtab",
)
# Only with the network: where the DNS servers are.
ETC_WITH_NETWORK = ("resolv.conf",)
# Private keys kept beside the certificates (RHEL's subscription keys too), hidden even
# though the directory holding them is shown.
SYSTEM_SECRETS = (
    "/etc/ssl/private",
    "/etc/pki/*/private",
    "/etc/pki/consumer",
    "/etc/pki/entitlement",
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
        placeholders: Paths in the workspace that do not exist on the host, or are
            only another call's placeholder (empty); each needs an empty directory (or
            file, for those in `file_placeholders`) as its mount point, which the
            caller makes, holds while the call runs and removes once nobody holds it.
        file_placeholders: The placeholders that are files, not directories.
    """

    arguments: tuple[str, ...]
    placeholders: tuple[Path, ...]
    file_placeholders: frozenset[Path] = frozenset()


def build_profile(
    policy: SandboxPolicy,
    *,
    empty_file: Path,
    etc: Sequence[EtcEntry],
    held: Collection[Path] = (),
    git_config: Path | None = None,
    user_namespace: bool = True,
) -> Profile:
    """bwrap's options for running one command under `policy`.

    Args:
        policy: What the command may see and change.
        empty_file: An empty host file nobody else writes, bound over masked files.
        etc: What the sandbox's /etc holds (`etc_entries`: Baton's synthetic files
            and the host's entries for the policy's network).
        git_config: A host file shown read-only as the home's `.gitconfig` (the
            identity commits made in the sandbox carry, unless the repository names one).
        held: Paths another running call made or may still make (placeholders, git's
            in-progress state it started without); they count as missing, so this
            call treats them as that call does instead of as the user's files.
        user_namespace: Whether to give the command a user namespace; False only
            where the probe found the kernel or container refusing one.

    Raises:
        WorkspaceError: A protected path, or a directory on the way to one, is a
            symbolic link. A link cannot be made read-only (mounts follow it, and the
            command could replace it), so the call is refused rather than run open.
    """
    workspace = _WorkspaceMounts(policy, frozenset(held), empty_file, etc)
    arguments = [
        *_namespaces(policy.network, user_namespace),
        *_system(etc, empty_file),
        *_scratch(git_config),
        *(_resolver() if policy.network else []),
        *_bind("--bind", policy.workspace),
        *workspace.arguments(),
        # Not the workspace's own mount, if it is /etc (etckeeper's checkout).
        *(_read_only_etc() if policy.workspace != ETC else []),
        "--remount-ro",
        "/",
        "--chdir",
        str(policy.workspace),
    ]
    return Profile(
        tuple(arguments), tuple(workspace.placeholders), frozenset(workspace.placeholder_files)
    )


def _namespaces(network: bool, user_namespace: bool) -> list[str]:
    # bwrap's default mapping keeps the caller's uid and gid inside the namespace.
    options = ["--unshare-user"] if user_namespace else []
    options += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    options += ["--hostname", SANDBOX_HOSTNAME]
    options += [] if network else ["--unshare-net"]
    return [*options, "--die-with-parent", "--new-session", "--cap-drop", "ALL"]


def _system(etc: Sequence[EtcEntry], empty_file: Path) -> list[str]:
    options: list[str] = []
    for directory in SYSTEM_DIRS:
        if os.path.islink(directory):
            options += ["--symlink", os.readlink(directory), directory]
        elif os.path.isdir(directory):
            options += _bind("--ro-bind", Path(directory))
    return [*options, *_etc(etc, empty_file)]


def _etc(entries: Sequence[EtcEntry], empty_file: Path) -> list[str]:
    """A tmpfs at /etc holding `entries`.

    The caller makes it read-only (`_read_only_etc`) once every mount point in it is
    made: a workspace or a server's path may lie under /etc.
    """
    options = ["--tmpfs", str(ETC)]
    for entry in entries:
        if entry.at.parent != ETC:
            # bwrap would make it 0700, unreadable where the command is not its owner.
            options += ["--dir", str(entry.at.parent)]
        if entry.link is not None:
            options += ["--symlink", entry.link, str(entry.at)]
        elif entry.fd is not None:
            options += ["--perms", "0444", "--file", str(entry.fd), str(entry.at)]
        else:
            options += ["--ro-bind", str(entry.source), str(entry.at)]
    for pattern in SYSTEM_SECRETS:
        for secret in sorted(glob.glob(pattern)):
            # Where it really is: /etc/ssl may be a link into /usr, shown as it is.
            at = _system_location(Path(os.path.realpath(secret)), entries)
            if at is not None:
                options += _mask(at, empty_file)
    return options


def _read_only_etc() -> list[str]:
    # A tmpfs left writable would let a command plant files (an `ld.so.preload`)
    # that its own programs then read.
    return ["--remount-ro", str(ETC)]


@dataclass(frozen=True)
class EtcEntry:
    """One entry of the sandbox's /etc: `source` bound read-only at `at`; or, when
    `link` is set, a symbolic link (to `source`); or, when `fd` is set, a read-only
    copy of what that open descriptor of `source` holds, which bwrap writes into the
    tmpfs (`--file`): cheaper than a mount, for the runner's small files."""

    at: Path
    source: Path
    link: str | None = None
    fd: int | None = None


def etc_entries(synthetic: Path, network: bool) -> list[EtcEntry]:
    """Everything the sandbox's /etc holds: Baton's `ETC_SYNTHETIC` files, written in
    the host directory `synthetic` (see `etc_files`), then the host's (`host_etc`)."""
    files = [EtcEntry(at=ETC / name, source=synthetic / name) for name in ETC_SYNTHETIC]
    return [*files, *host_etc(network)]


def host_etc(network: bool, *, host: Path = ETC) -> list[EtcEntry]:
    """The entries of `ETC_FROM_HOST` (and `ETC_WITH_NETWORK`) present in `host`'s /etc.

    A link stays a link when what it points to is shown in the sandbox (a system
    directory, /proc, another entry, systemd-resolved's directory with the network);
    else what it points to is bound in its place (a `resolv.conf` that links into
    /run/resolvconf), or nothing when it dangles. `host` is another directory laid
    out like /etc only in tests.
    """
    names = [*ETC_FROM_HOST, *(ETC_WITH_NETWORK if network else ())]
    found = _present(host, names)
    bound = [host / name for name, link in found if not link]
    entries = [EtcEntry(at=ETC / name, source=host / name) for name, link in found if not link]
    # Where the sandbox shows the host's files at their own paths.
    shown = [Path(d) for d in SYSTEM_DIRS if os.path.isdir(d)]
    shown += [Path("/proc"), *bound, *([Path(RESOLVER_DIR)] if network else [])]
    for name, link in found:
        if not link:
            continue
        real = Path(os.path.realpath(host / name))
        if any(real.is_relative_to(place) for place in shown):
            entries.append(EtcEntry(at=ETC / name, source=real, link=os.readlink(host / name)))
        elif real.exists():
            entries.append(EtcEntry(at=ETC / name, source=real))
    return entries


def _present(host: Path, names: Sequence[str]) -> list[tuple[str, bool]]:
    """Each of `names` (globs too) present in `host`, with whether it is a link.

    One listing of the directory, which also tells links apart, rather than a lookup
    per name: this runs for every call.
    """
    with os.scandir(host) as listing:
        links = {entry.name: entry.is_symlink() for entry in listing}
    found: list[tuple[str, bool]] = []
    for name in names:
        if glob.has_magic(name):
            found += [(match, links[match]) for match in sorted(fnmatch.filter(links, name))]
        elif "/" not in name:
            found += [(name, links[name])] if name in links else []
        elif name.partition("/")[0] in links and os.path.lexists(host / name):
            found.append((name, os.path.islink(host / name)))
    return found


def _where_shown(path: Path, shown: Sequence[EtcEntry]) -> Path | None:
    """Where the sandbox shows the host's `path` under /etc, or None where it does not."""
    for entry in shown:
        if entry.link is None and path.is_relative_to(entry.source):
            return entry.at / path.relative_to(entry.source)
    return None


def etc_files(uid: int, gid: int) -> dict[str, str]:
    """The synthetic `ETC_SYNTHETIC` files for commands running as `uid` and `gid`.

    Users root and nobody, groups root and nogroup, and when the command runs as
    another uid (the workspace's owner, or Baton's own uid when Baton is not root),
    `SANDBOX_USER` with that uid, its group, and the sandbox's home: `id`, `whoami`,
    `ls -l` and git then name users without reading the host's password database.
    """
    users = ["root:x:0:0:root:/root:/bin/sh", "nobody:x:65534:65534:nobody:/nonexistent:/bin/false"]
    groups = ["root:x:0:", "nogroup:x:65534:"]
    if uid not in (0, NOBODY):
        users.append(f"{SANDBOX_USER}:x:{uid}:{gid}:Baton sandbox:{SANDBOX_HOME}:/bin/sh")
    if gid not in (0, NOBODY):
        groups.append(f"{SANDBOX_USER}:x:{gid}:")
    return {
        "passwd": "".join(f"{line}\n" for line in users),
        "group": "".join(f"{line}\n" for line in groups),
        "hosts": (
            f"127.0.0.1\tlocalhost\n127.0.1.1\t{SANDBOX_HOSTNAME}\n"
            "::1\tlocalhost ip6-localhost ip6-loopback\n"
        ),
        "hostname": f"{SANDBOX_HOSTNAME}\n",
        "nsswitch.conf": (
            "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"
            "networks: files\nprotocols: files\nservices: files\nrpc: files\n"
            "ethers: files\nnetgroup: files\n"
        ),
    }


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

    def __init__(
        self,
        policy: SandboxPolicy,
        held: frozenset[Path],
        empty_file: Path,
        etc: Sequence[EtcEntry],
    ) -> None:
        self.root = policy.workspace
        self.held = held
        self.empty_file = empty_file
        self.etc = etc
        self.masked = [p for p in policy.masked if self._inside(p)]
        # A path no placeholder may hold (git dies on an empty `.git/commondir`, and
        # takes an empty `.git/rebase-merge` for a rebase in progress) is protected only
        # when it exists; when it does not, the runner deals with what the call made.
        unheld = {*policy.removed_if_created, *policy.set_aside_if_created}
        self.unheld = frozenset(unheld)
        self.read_only = [
            p
            for p in policy.read_only
            if self._inside(p) and not (p in unheld and self._missing(p))
        ]
        self.files = frozenset(policy.files)
        self.pinned = [p for p in policy.pinned if self._inside(p)]
        self.outside_masked = [p for p in policy.masked if not self._inside(p)]
        self.placeholders: list[Path] = []
        self.placeholder_files: set[Path] = set()

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
            if (at := _system_location(path, self.etc)) is not None:
                options += _mask(at, self.empty_file)
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
            # Another call's placeholder (of this process, or of a replica sharing the
            # workspace) is one for this call too: held, it stays while this call runs.
            if self._missing(current) or (path not in self.masked and self._stand_in(current)):
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
                self.placeholder_files.add(at)
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

    def _stand_in(self, path: Path) -> bool:
        """True for an empty file or directory where a placeholder may stand: perhaps
        another call's, so held like one. Not on the way to a masked path (an empty
        database is Baton's own), nor git's in-progress state, which no placeholder may
        hold (an empty one is the operator's)."""
        return path not in self.unheld and is_placeholder(path)

    def _inside(self, path: Path) -> bool:
        return path != self.root and path.is_relative_to(self.root)


def _system_location(path: Path, etc: Sequence[EtcEntry]) -> Path | None:
    """Where the sandbox shows the host's existing `path`, in a system directory or
    one of /etc's entries; None when it does not show it."""
    if not os.path.lexists(path):
        return None
    mounted = [Path(d) for d in SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d)]
    if any(path.is_relative_to(d) for d in mounted):
        return path
    return _where_shown(path, etc)


def _depth(path: Path) -> int:
    return len(path.parts)


def is_placeholder(path: Path) -> bool:
    """True when `path` still looks like a mount point bwrap created: empty, nothing else."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(info.st_mode):
        try:
            with os.scandir(path) as entries:
                return not any(entries)
        except OSError:
            return False
    return stat.S_ISREG(info.st_mode) and info.st_size == 0


def build_server_profile(
    *,
    paths: Collection[Path],
    masked: Collection[Path],
    network: bool,
    empty_file: Path,
    etc: Sequence[EtcEntry],
    user_namespace: bool = True,
) -> tuple[str, ...]:
    """bwrap's options for a long-running MCP server (see `bot.mcp.launch`).

    The same namespaces, system directories, minimal /etc (`etc`, as for
    `build_profile`) and empty scratch as a command's, but no workspace: the server
    sees only `paths`, read-only (its interpreter and files), and works in the empty
    home. Any of `masked` (Baton's state directory, config and database) that it would
    see, in one of them or in a system directory, is hidden. Nothing of the host is
    writable, so no file it makes outlives it.
    """
    arguments = [
        *_namespaces(network, user_namespace),
        *_system(etc, empty_file),
        *_scratch(None),
        *(_resolver() if network else []),
    ]
    for path in paths:
        arguments += _bind("--ro-bind", path)
    for path in masked:
        if any(path.is_relative_to(p) for p in paths) and os.path.lexists(path):
            arguments += _mask(path, empty_file)
        elif (at := _system_location(path, etc)) is not None:
            arguments += _mask(at, empty_file)
    return (*arguments, *_read_only_etc(), "--remount-ro", "/", "--chdir", str(SANDBOX_HOME))
