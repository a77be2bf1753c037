"""The seccomp filter bwrap installs before the command: no setuid or setgid files.

The sandbox's mounts are `nosuid`, but a mode bit set in the workspace stays on the
host's file: a command running as root (or as the workspace's owner) could copy a
shell into the workspace and `chmod 4755` it, and anyone on the host running it would
get that uid. So every call that could set S_ISUID or S_ISGID fails with EPERM:

- chmod, fchmod, fchmodat and fchmodat2 with either bit in the mode;
- open, openat, creat, mknod and mknodat (which makes regular files too) with either
  bit in the mode of a file they create, mkdir and mkdirat likewise;
- openat2, whose mode sits in a struct seccomp cannot read: refused with ENOSYS, so
  the C library falls back to openat;
- io_uring (setup, enter, register), whose operations seccomp never sees: ENOSYS;
- setxattr, lsetxattr, fsetxattr and setxattrat, since a nested user namespace would
  let root in the sandbox write `security.capability` (file capabilities valid on the
  host) and seccomp cannot compare the attribute's name: EOPNOTSUPP, as on a
  filesystem without extended attributes (`cp -a` carries on without them).

Only the native architecture's calls are allowed: a call made through another ABI
(i386's `int 0x80`, x32) kills the process (libseccomp's default for a foreign
architecture), so 32-bit programs do not run in the sandbox.

Built with libseccomp through `pyseccomp`. Where either is missing, `filter_bytes`
returns None and says why in `unavailable_reason`: commands then run without the
filter, and the runner names that in the sandbox's `reason`.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import stat
import tempfile

logger = logging.getLogger(__name__)

SPECIAL_BITS = stat.S_ISUID | stat.S_ISGID
# (syscall, index of its mode argument). fchmodat2 is new in Linux 6.6, after
# libseccomp 2.5.4's tables: by number, where the architecture is x86_64.
MODE_ARGUMENT = (
    ("chmod", 1),
    ("fchmod", 1),
    ("fchmodat", 2),
    ("open", 2),
    ("openat", 3),
    ("creat", 1),
    ("mknod", 1),
    ("mknodat", 2),
    ("mkdir", 1),
    ("mkdirat", 2),
)
FCHMODAT2_X86_64 = 452
SETXATTRAT_X86_64 = 463
NOT_IMPLEMENTED = ("openat2", "io_uring_setup", "io_uring_enter", "io_uring_register")
SET_XATTR = ("setxattr", "lsetxattr", "fsetxattr")

unavailable_reason = ""


@functools.cache
def filter_bytes() -> bytes | None:
    """The filter as BPF, built once; None (and `unavailable_reason`) where it cannot be."""
    global unavailable_reason
    try:
        program = _build()
    except Exception as exc:  # ImportError, or libseccomp missing or refusing a rule
        unavailable_reason = f"no seccomp filter against setuid files ({exc})"
        logger.warning("sandboxed commands may create setuid files: %s", unavailable_reason)
        return None
    return program


def _build() -> bytes:
    import pyseccomp as seccomp

    filter = seccomp.SyscallFilter(seccomp.ALLOW)
    deny = seccomp.ERRNO(errno.EPERM)
    calls: list[tuple[str | int, int]] = list(MODE_ARGUMENT)
    native = seccomp.system_arch()
    if native == seccomp.Arch.X86_64:
        calls.append((FCHMODAT2_X86_64, 2))
    for call, index in calls:
        for bit in (stat.S_ISUID, stat.S_ISGID):
            filter.add_rule(deny, call, seccomp.Arg(index, seccomp.MASKED_EQ, bit, bit))
    for call in NOT_IMPLEMENTED:
        filter.add_rule(seccomp.ERRNO(errno.ENOSYS), call)
    xattrs: list[str | int] = list(SET_XATTR)
    if native == seccomp.Arch.X86_64:
        xattrs.append(SETXATTRAT_X86_64)
    for call in xattrs:
        filter.add_rule(seccomp.ERRNO(errno.EOPNOTSUPP), call)
    with tempfile.TemporaryFile() as file:
        filter.export_bpf(file)
        file.seek(0)
        return file.read()


def filter_fd(program: bytes) -> int:
    """A new file holding `program`, at its start, for bwrap (close-on-exec: use `pass_fds`)."""
    fd = os.memfd_create("baton-seccomp")
    try:
        view = memoryview(program)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd
