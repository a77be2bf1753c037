"""The kernel's knobs stay out of reach even for a command that Baton runs as root.

Every write attempted here writes back the value just read, so a sandbox that failed
to stop it would still leave the host as it was; the host's values are compared
before and after all the same.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bot.sandbox import Sandbox
from bot.tools.shell import BashArgs
from tests.sandbox.conftest import Site

SYSCTLS = (
    "/proc/sys/vm/swappiness",
    "/proc/sys/kernel/core_pattern",
    "/proc/sys/kernel/hostname",
    "/proc/sys/kernel/modprobe",
    "/proc/sys/fs/suid_dumpable",
    "/proc/sys/net/ipv4/ip_forward",
)
# Writing anything to these acts at once (sysrq-trigger can reboot the machine), so
# only whether they could be opened for writing is asked, never a write.
DANGEROUS = ("/proc/sysrq-trigger", "/proc/sys/fs/binfmt_misc/register")


def host_values() -> dict[str, str]:
    return {path: Path(path).read_text() for path in SYSCTLS if os.path.exists(path)}


async def run(site: Site, sandbox: Sandbox, command: str) -> str:
    return await site.bash(sandbox).run(BashArgs(command=command, timeout_s=30))


async def test_sysctls_cannot_be_written(site: Site, sandbox: Sandbox) -> None:
    before = host_values()
    assert "/proc/sys/vm/swappiness" in before
    for path in before:
        out = await run(site, sandbox, f"v=$(cat {path}) && printf '%s\\n' \"$v\" > {path}")
        assert not out.startswith("exit code 0"), (path, out)
        assert "Read-only file system" in out, (path, out)
    out = await run(site, sandbox, "grep -E ' /proc/sys(/| )' /proc/mounts")
    assert out.startswith("exit code 0\n"), out
    assert all(" ro," in line for line in out.splitlines()[1:]), out
    assert host_values() == before


async def test_remounting_proc_sys_from_a_nested_namespace_fails(
    site: Site, sandbox: Sandbox
) -> None:
    before = host_values()
    path = "/proc/sys/vm/swappiness"
    out = await run(
        site,
        sandbox,
        "unshare -Urm sh -c 'mount -o remount,bind,rw /proc/sys; mount -o remount,rw /proc/sys; "
        f'v=$(cat {path}) && echo "$v" > {path} && echo WROTE\'; '
        "unshare -Urmpf --mount-proc sh -c "
        f"'v=$(cat {path}) && echo \"$v\" > {path} && echo WROTE'",
    )
    assert "WROTE" not in out, out
    assert host_values() == before


async def test_the_kernel_s_triggers_cannot_be_opened_for_writing(
    site: Site, sandbox: Sandbox
) -> None:
    checks = " ; ".join(f"test -w {path} && echo WRITABLE {path}" for path in DANGEROUS)
    out = await run(site, sandbox, f"{checks}; echo checked")
    assert "WRITABLE" not in out, out
    assert out.splitlines()[-1] == "checked"
    # Nothing else outside the command's own processes is writable by mode either.
    out = await run(
        site,
        sandbox,
        "find /proc -xdev \\( -path '/proc/[0-9]*' -o -path /proc/self -o -path /proc/thread-self "
        "-o -path /proc/net -o -path /proc/pressure \\) -prune -o -type f -perm -u+w -print "
        '2>/dev/null | while read -r f; do test -w "$f" && echo "$f"; done; echo done',
    )
    assert out.splitlines()[1:] == ["done"], out


async def test_the_command_has_its_own_user_namespace_with_the_caller_s_ids(
    site: Site, sandbox: Sandbox
) -> None:
    if not sandbox.user_namespace:
        pytest.skip(f"this machine refuses a user namespace: {sandbox.reason}")
    out = await run(site, sandbox, "cat /proc/self/uid_map /proc/self/gid_map; id -u; id -g")
    lines = out.splitlines()
    assert lines[0] == "exit code 0"
    uid, gid = os.getuid(), os.getgid()
    assert lines[1].split() == [str(uid), str(uid), "1"]
    assert lines[2].split() == [str(gid), str(gid), "1"]
    assert lines[3:] == [str(uid), str(gid)]
    # Not the host's user namespace, and no capability left in any set.
    host_ns = os.readlink("/proc/self/ns/user")
    out = await run(site, sandbox, "readlink /proc/self/ns/user; grep ^Cap /proc/self/status")
    assert out.splitlines()[1] != host_ns
    assert all(line.endswith("0000000000000000") for line in out.splitlines()[2:]), out


async def test_workspace_writes_are_owned_by_the_caller(site: Site, sandbox: Sandbox) -> None:
    out = await run(
        site, sandbox, "mkdir -p made && echo x > made/file && stat -c '%u:%g' made/file"
    )
    assert out == f"exit code 0\n{os.getuid()}:{os.getgid()}\n"
    made = site.workspace.root / "made" / "file"
    assert (made.stat().st_uid, made.stat().st_gid) == (os.getuid(), os.getgid())


async def test_var_tmp_is_private_scratch(site: Site, sandbox: Sandbox) -> None:
    out = await run(site, sandbox, "f=$(mktemp -p /var/tmp) && echo hi > $f && cat $f && echo $f")
    lines = out.splitlines()
    assert lines[:2] == ["exit code 0", "hi"], out
    assert os.path.basename(lines[2]) not in os.listdir("/var/tmp")
    assert await run(site, sandbox, f"ls {lines[2]} 2>&1 | wc -l; ls -A /var/tmp | wc -l") == (
        "exit code 0\n1\n0\n"
    )
