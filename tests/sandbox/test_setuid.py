"""No command leaves a setuid or setgid file (nor file capabilities) on the host.

The sandbox's mounts are `nosuid`, but a mode bit set in the workspace stays on the
host's file: `cp /bin/bash tool && chmod 4755 tool` would hand anyone on the host a
shell as whoever the command ran as. The seccomp filter (`bot.sandbox.seccomp`)
refuses it; these check the host's own view of the files, as root and as the owner.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.sandbox import Sandbox, SandboxPolicy
from bot.sandbox import seccomp as seccomp_module
from bot.tools.shell import Bash, BashArgs
from tests.sandbox.conftest import Site, make_site, require
from tests.sandbox.test_owner import OWNER, as_owner, give

SPECIAL = stat.S_ISUID | stat.S_ISGID

ATTACKS = {
    "cp and chmod 4755": "cp /bin/bash tool && chmod 4755 tool",
    "chmod u+s": "cp /bin/bash tool && chmod u+s tool",
    "chmod g+s on a file": "cp /bin/bash tool && chmod g+s tool",
    "chmod g+s on a directory": "mkdir -p dir && chmod g+s dir",
    "python os.chmod": "cp /bin/bash tool && python3 -c \"import os; os.chmod('tool', 0o4755)\"",
    "python fchmod": 'cp /bin/bash tool && python3 -c "import os; '
    "f = os.open('tool', os.O_RDONLY); "
    'os.fchmod(f, 0o6755)"',
    "python open O_CREAT": 'python3 -c "import os; '
    "os.open('made', os.O_CREAT | os.O_WRONLY, 0o4755)\"",
    "python mknod": "python3 -c \"import os, stat; os.mknod('node', stat.S_IFREG | 0o4755)\"",
    # The kernel drops S_ISGID from mkdir's mode anyway; the filter refuses it too.
    "python mkdir 2755": "python3 -c \"import os; os.mkdir('gdir', 0o2755)\"",
    "install -m 4755": "install -m 4755 /bin/bash installed",
    "install -m 2755": "install -m 2755 /bin/bash installed2",
    "cp -p of a setuid binary": "for f in /usr/bin/su /usr/bin/passwd /bin/mount; do "
    '[ -u "$f" ] && cp -p "$f" ./copied && break; done',
    "tar x of a setuid member": "tar xf suid.tar",
}


@pytest.fixture(params=["root", "owner"])
def armed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Site, Bash]]:
    """A workspace and a Bash tool: run as Baton does, or (as root) as the owner."""
    if request.param == "root":
        site = make_site(tmp_path)
        found = require(asyncio.run(Sandbox.probe(policy(site))))
        yield site, site.bash(found)
        return
    if os.geteuid() != 0:
        pytest.skip("needs root, as Baton in a container")
    directory = tempfile.mkdtemp(prefix="baton-setuid-")
    try:
        os.chmod(directory, 0o755)
        site = make_site(Path(directory))
        give(site.workspace.root, OWNER, OWNER)
        found = as_owner(require(asyncio.run(Sandbox.probe(policy(site)))))
        yield site, site.bash(found)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def policy(site: Site) -> SandboxPolicy:
    return SandboxPolicy.for_workspace(
        site.workspace.root,
        read_only=[site.config],
        databases=site.workspace.private_files,
    )


async def run(bash: Bash, command: str) -> str:
    return await bash.run(BashArgs(command=command, timeout_s=30))


def special_files(root: Path) -> list[str]:
    """Files under `root` with a setuid or setgid bit or file capabilities, on the host."""
    found = []
    for directory, names, files in os.walk(root):
        for name in [*names, *files]:
            path = os.path.join(directory, name)
            info = os.lstat(path)
            if info.st_mode & SPECIAL and not stat.S_ISLNK(info.st_mode):
                found.append(f"{path} {stat.filemode(info.st_mode)}")
            try:
                os.getxattr(path, "security.capability", follow_symlinks=False)
            except OSError:
                continue
            found.append(f"{path} has file capabilities")
    return found


def setuid_tar(root: Path) -> None:
    """`suid.tar` in the workspace: one member, a shell with mode 4755 and 2755."""
    with tempfile.TemporaryDirectory() as staging:
        member = Path(staging) / "shell"
        shutil.copy("/bin/bash", member)
        member.chmod(0o6755)
        subprocess.run(["tar", "cf", str(root / "suid.tar"), "-C", staging, "shell"], check=True)
    os.chmod(root / "suid.tar", 0o644)
    os.chown(root / "suid.tar", root.stat().st_uid, root.stat().st_gid)


def compile_int80(root: Path) -> str:
    """Build `int80` in `root`: chmod("tool", 04755) through i386's `int 0x80`."""
    source = root / "int80.c"
    source.write_text(
        'static const char path[] = "tool";\n'
        "int main(void) {\n"
        "  long r;\n"
        '  __asm__ volatile ("int $0x80" : "=a"(r) : "a"(15), "b"(path), "c"(04755)'
        ' : "memory");\n'
        "  return r == 0 ? 0 : 1;\n"
        "}\n"
    )
    compiled = subprocess.run(
        ["gcc", "-O0", "-no-pie", "-o", str(root / "int80"), str(source)], capture_output=True
    )
    return compiled.stderr.decode() if compiled.returncode != 0 else ""


def test_the_filter_is_built() -> None:
    assert seccomp_module.filter_bytes(), seccomp_module.unavailable_reason


@pytest.mark.parametrize("attack", ATTACKS)
async def test_no_setuid_or_setgid_file_reaches_the_host(
    armed: tuple[Site, Bash], attack: str
) -> None:
    site, bash = armed
    root = site.workspace.root
    setuid_tar(root)
    out = await run(bash, ATTACKS[attack] + "; ls -l")
    assert special_files(root) == [], out


async def test_file_capabilities_cannot_be_set(armed: tuple[Site, Bash]) -> None:
    site, bash = armed
    command = (
        "cp /bin/bash tool; "
        "python3 -c \"import os; os.setxattr('tool', 'security.capability', "
        "bytes.fromhex('0100000200000080000000000000000000000000'))\"; "
        "setcap cap_setuid+ep tool; unshare -U --map-root-user setcap cap_setuid+ep tool; "
        "unshare -U --map-user=0 --map-group=0 setcap cap_setuid+ep tool; true"
    )
    out = await run(bash, command)
    assert special_files(site.workspace.root) == [], out


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
async def test_i386_system_calls_kill_the_process(armed: tuple[Site, Bash]) -> None:
    """chmod through `int 0x80` (i386's ABI), which the x86_64 rules do not cover."""
    if os.uname().machine != "x86_64":
        pytest.skip("x86_64 only")
    site, bash = armed
    root = site.workspace.root
    error = compile_int80(root)
    if error:
        pytest.skip(f"gcc cannot build the probe: {error}")
    shutil.copy("/bin/bash", root / "tool")
    for path in (root / "int80", root / "tool", root / "int80.c"):
        os.chown(path, root.stat().st_uid, root.stat().st_gid)
    out = await run(bash, "./int80; echo status $?")
    assert "status 159" in out  # 128 + SIGSYS: killed for a foreign architecture
    assert special_files(root) == [], out


async def test_ordinary_modes_and_tools_still_work(armed: tuple[Site, Bash]) -> None:
    site, bash = armed
    root = site.workspace.root
    command = "\n".join(
        [
            "set -e",
            "printf '#!/bin/sh\\necho ran\\n' > run.sh && chmod +x run.sh && ./run.sh",
            "touch plain && chmod 644 plain && chmod 1777 plain && chmod 600 plain",
            "mkdir -p a/b/c && mkdir -m 700 private",
            "cp -p run.sh copy.sh && cp -a a a2 && install -m 755 run.sh installed.sh",
            "tar cf t.tar run.sh a && mkdir out && tar xf t.tar -C out && ./out/run.sh",
            "git init -q repo && cd repo && cp ../run.sh tool.sh",
            "git add tool.sh && git commit -qm one && rm tool.sh",
            "git checkout -q -- tool.sh && ./tool.sh",
            "echo done",
        ]
    )
    out = await run(bash, command)
    assert out.startswith("exit code 0\n"), out
    assert out.count("ran\n") == 3 and out.endswith("done\n"), out
    assert os.stat(root / "run.sh").st_mode & 0o777 == 0o755
    assert os.stat(root / "copy.sh").st_mode & 0o777 == 0o755
    assert os.stat(root / "private").st_mode & 0o777 == 0o700
    assert os.stat(root / "repo" / "tool.sh").st_mode & 0o111
    assert special_files(root) == []


async def test_concurrent_calls_each_get_their_filter_and_leak_no_file(
    armed: tuple[Site, Bash],
) -> None:
    site, bash = armed
    before = len(os.listdir("/proc/self/fd"))
    outs = await asyncio.gather(
        *(run(bash, f"cp /bin/bash t{i} && chmod 4755 t{i}; echo $?") for i in range(8))
    )
    assert all(out.endswith("Operation not permitted\n1\n") for out in outs), outs
    assert len(os.listdir("/proc/self/fd")) == before
    assert special_files(site.workspace.root) == []


def test_without_libseccomp_the_sandbox_runs_unfiltered_and_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pyseccomp", None)
    monkeypatch.setattr(seccomp_module, "unavailable_reason", "")
    assert seccomp_module.filter_bytes.__wrapped__() is None
    assert "no seccomp filter" in seccomp_module.unavailable_reason
    monkeypatch.setattr("bot.sandbox.runner.filter_bytes", lambda: None)
    found = Sandbox(Path("/usr/bin/bwrap"), available=True, reason="bubblewrap")
    assert found.seccomp_filter is None
    assert found.reason.startswith("bubblewrap; no seccomp filter")
    with found.command(SandboxPolicy.for_workspace(tmp_path), ["true"]) as argv:
        assert "--seccomp" not in argv
        # Only the small files of /etc are handed on.
        assert found.credentials()["pass_fds"] == file_fds(argv)


def file_fds(argv: list[str]) -> tuple[int, ...]:
    """The descriptors of the files bwrap copies into /etc (`--file FD DEST`)."""
    return tuple(int(argv[i + 1]) for i, value in enumerate(argv) if value == "--file")


def test_each_call_gets_its_own_filter_file_at_its_start(tmp_path: Path) -> None:
    program = seccomp_module.filter_bytes()
    if program is None:
        pytest.skip(seccomp_module.unavailable_reason)
    found = Sandbox(Path("/usr/bin/bwrap"), available=True, reason="bubblewrap")
    policy = SandboxPolicy.for_workspace(tmp_path)
    assert "pass_fds" not in found.credentials()
    with found.command(policy, ["true"]) as first, found.command(policy, ["true"]) as second:
        fds = [int(argv[argv.index("--seccomp") + 1]) for argv in (first, second)]
        assert fds[0] != fds[1]
        assert found.credentials()["pass_fds"] == (*file_fds(second), fds[1])
        assert [os.pread(fd, len(program) + 1, 0) for fd in fds] == [program, program]
        assert [os.lseek(fd, 0, os.SEEK_CUR) for fd in fds] == [0, 0]
    assert "pass_fds" not in found.credentials()
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)
