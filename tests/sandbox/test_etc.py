"""The sandbox's /etc: Baton's users and host names, a few harmless host files, no more."""

from __future__ import annotations

import glob
import hashlib
import itertools
import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from bot.sandbox import Sandbox, SandboxPolicy
from bot.sandbox.profile import (
    ETC_FROM_HOST,
    ETC_SYNTHETIC,
    ETC_WITH_NETWORK,
    SANDBOX_HOSTNAME,
    build_profile,
    build_server_profile,
    etc_entries,
    etc_files,
    host_etc,
)
from bot.tools.shell import Bash, BashArgs
from tests.sandbox.conftest import Site

HOST_NAME = socket.gethostname()


async def run(bash: Bash, command: str) -> str:
    return await bash.run(BashArgs(command=command, timeout_s=60))


def allowed_entries(*, network: bool) -> set[str]:
    """The names `ls -A /etc` may show: Baton's files and the host's listed ones present."""
    names = [*ETC_FROM_HOST, *(ETC_WITH_NETWORK if network else ())]
    found = {Path(p).relative_to("/etc").parts[0] for n in names for p in glob.glob(f"/etc/{n}")}
    return {*ETC_SYNTHETIC, *found}


def lines(out: str) -> list[str]:
    """The output lines of a call that succeeded."""
    if out == "exit code 0 (no output)":
        return []
    assert out.startswith("exit code 0\n"), out
    return out.splitlines()[1:]


def host_file(path: str) -> str:
    """The host's own file, to compare with what the sandbox shows."""
    return Path(path).read_text()


def on_host(path: str) -> bool:
    return os.path.lexists(path)


def host_time_zone() -> str:
    """The zone `date` names on the host: the sandbox reads the same /etc/localtime."""
    return subprocess.run(
        ["date", "+%Z"], capture_output=True, text=True, check=True
    ).stdout.strip()


async def test_passwd_and_group_hold_only_the_synthetic_entries(
    site: Site, sandbox: Sandbox
) -> None:
    bash = site.bash(sandbox)
    out = await run(bash, "cut -d: -f1 /etc/passwd; echo --; cut -d: -f1 /etc/group; id; whoami")
    users, rest = lines(out)[: lines(out).index("--")], lines(out)[lines(out).index("--") + 1 :]
    assert users == ["root", "nobody"]
    assert rest == ["root", "nogroup", "uid=0(root) gid=0(root) groups=0(root)", "root"]
    assert host_file("/etc/passwd") not in out


async def test_etc_lists_only_allowed_entries(site: Site, sandbox: Sandbox) -> None:
    for network in (False, True):
        listed = set(lines(await run(site.bash(sandbox, network=network), "ls -A /etc")))
        assert set(ETC_SYNTHETIC) <= listed
        assert listed <= allowed_entries(network=network), listed - allowed_entries(network=network)
        for secret in ("shadow", "gshadow", "ssh", "sudoers", "machine-id", "fstab", "pip.conf"):
            assert secret not in listed
        # The DNS servers only with the network (and only where the host has them).
        assert ("resolv.conf" in listed) == (network and on_host("/etc/resolv.conf"))


async def test_the_host_s_names_do_not_show(site: Site, sandbox: Sandbox) -> None:
    if HOST_NAME in ("localhost", SANDBOX_HOSTNAME):
        pytest.skip(f"the host's own name is {HOST_NAME!r}: nothing to tell apart")
    bash = site.bash(sandbox)
    out = await run(bash, "cat /etc/hostname /etc/hosts; hostname; uname -n")
    assert HOST_NAME not in out
    assert host_file("/etc/hosts") not in out
    assert lines(out)[0] == SANDBOX_HOSTNAME
    assert lines(out)[-2:] == [SANDBOX_HOSTNAME, SANDBOX_HOSTNAME]
    # Only loopback addresses are named.
    addresses = {line.split()[0] for line in lines(out)[1:-2]}
    assert addresses == {"127.0.0.1", "127.0.1.1", "::1"}


async def test_nothing_under_etc_is_writable(site: Site, sandbox: Sandbox) -> None:
    bash = site.bash(sandbox)
    assert lines(await run(bash, "find /etc -writable")) == []
    for command in (
        "touch /etc/ld.so.preload",
        "echo 'mallory:x:0:0::/:/bin/sh' >> /etc/passwd",
        "rm -f /etc/hosts",
        "mkdir /etc/new",
        "ln -s /tmp /etc/link",
        "touch /etc/ssl/x",
        "touch /etc/default/x",
        "mount -t tmpfs none /etc",
    ):
        out = await run(bash, command)
        assert not out.startswith("exit code 0"), (command, out)
    assert lines(await run(bash, "cut -d: -f1 /etc/passwd")) == ["root", "nobody"]


@pytest.fixture
def private_key() -> Iterator[Path]:
    """A key in the host's /etc/ssl/private (the sandbox shows /etc/ssl), removed after."""
    private = Path("/etc/ssl/private")
    if not private.is_dir() or not os.access(private, os.W_OK):
        pytest.skip("no writable /etc/ssl/private here")
    key = private / f"baton-test-{uuid.uuid4().hex}.key"
    try:
        key.write_text("-----BEGIN PRIVATE KEY-----\n")
        key.chmod(0o644)
        yield key
    finally:
        key.unlink(missing_ok=True)


async def test_private_keys_beside_the_certificates_stay_hidden(
    site: Site, sandbox: Sandbox, private_key: Path
) -> None:
    out = await run(
        site.bash(sandbox), f"ls -A /etc/ssl/private | wc -l; cat {private_key}; ls /etc/ssl"
    )
    assert "PRIVATE KEY" not in out
    assert out.splitlines()[1] == "0"
    assert "certs" in out.splitlines()  # the certificates beside them are there


async def test_real_programs_still_work(site: Site, sandbox: Sandbox) -> None:
    checks = {
        "git": "echo a > a.txt && git add a.txt && git commit -qm one && git status --short "
        "&& git log --format='%an <%ae> %s'",
        "ls": "ls -l a.txt | cut -d' ' -f3,4",
        "awk": "echo '1 2' | awk '{print $2}'",
        "date": "date +%Z",
        "getent": "getent hosts localhost | head -1 | awk '{print $2}'",
        "sort": "printf 'b\\na\\n' | sort | xargs",
        "perl": "perl -e 'print 1+1, qq(\\n)'",
    }
    if os.access("/usr/bin/python3", os.X_OK):
        checks["python3"] = (
            "/usr/bin/python3 -c 'import ssl, mimetypes; ssl.create_default_context(); "
            'print(mimetypes.guess_type("x.json")[0])\''
        )
    bash = site.bash(sandbox)
    missing = [name for name in checks if shutil.which(name) is None]
    outs = {name: await run(bash, command) for name, command in checks.items()}
    expected = {
        "git": "Baton <baton@localhost> one",
        "ls": "root root",
        "awk": "2",
        "date": host_time_zone(),
        "getent": "localhost",
        "sort": "a b",
        "perl": "2",
        "python3": "application/json",
    }
    for name, out in outs.items():
        if name in missing:
            continue
        assert lines(out)[-1:] == [expected[name]], (name, out)


def test_the_synthetic_files_name_the_uid_commands_run_as() -> None:
    as_root = etc_files(0, 0)
    assert as_root["passwd"].splitlines() == [
        "root:x:0:0:root:/root:/bin/sh",
        "nobody:x:65534:65534:nobody:/nonexistent:/bin/false",
    ]
    owner = etc_files(1000, 1001)
    assert (
        owner["passwd"].splitlines()[-1]
        == "sandbox:x:1000:1001:Baton sandbox:/home/sandbox:/bin/sh"
    )
    assert owner["group"].splitlines() == ["root:x:0:", "nogroup:x:65534:", "sandbox:x:1001:"]
    assert "hosts: files dns" in owner["nsswitch.conf"].splitlines()
    assert owner["hostname"] == f"{SANDBOX_HOSTNAME}\n"


def etc_sources(arguments: Sequence[str]) -> list[tuple[int, str, str, str]]:
    """Each (position, option, source, destination) that puts something under /etc.

    The source of a `--file` is its descriptor.
    """
    return [
        (i, value, arguments[i + 1], arguments[i + 2])
        for i, value in enumerate(arguments[:-2])
        if value in ("--ro-bind", "--bind", "--symlink", "--ro-bind-try", "--file")
        and arguments[i + 2].startswith("/etc/")
    ]


def test_the_profile_shows_only_listed_host_entries(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    for network in (False, True):
        policy = SandboxPolicy.for_workspace(root, network=network)
        etc = etc_entries(tmp_path / "etc", network)
        arguments = build_profile(policy, empty_file=tmp_path / "empty", etc=etc).arguments
        assert arguments[arguments.index("/etc") - 1] == "--tmpfs"
        # Made read-only after every mount point in it is made, before the root.
        pairs = list(itertools.pairwise(arguments))
        read_only = pairs.index(("--remount-ro", "/etc"))
        assert pairs.count(("--remount-ro", "/etc")) == 1
        assert read_only < pairs.index(("--remount-ro", "/"))
        allowed = allowed_entries(network=network)
        for at, option, source, destination in etc_sources(arguments):
            assert at < read_only
            name = Path(destination).relative_to("/etc").parts[0]
            assert name in allowed, destination
            if name in ETC_SYNTHETIC:
                assert source == str(tmp_path / "etc" / name)
            elif option == "--symlink":
                assert source == os.readlink(destination)
            else:
                assert source in (destination, os.path.realpath(destination))
        assert arguments[arguments.index("--hostname") + 1] == SANDBOX_HOSTNAME


def test_the_server_profile_has_the_same_etc(tmp_path: Path) -> None:
    etc = etc_entries(tmp_path / "etc", False)
    server = build_server_profile(
        paths=[], masked=[], network=False, empty_file=tmp_path / "empty", etc=etc
    )
    root = tmp_path / "ws"
    root.mkdir()
    command = build_profile(
        SandboxPolicy.for_workspace(root), empty_file=tmp_path / "empty", etc=etc
    ).arguments
    assert [e[1:] for e in etc_sources(server)] == [e[1:] for e in etc_sources(command)]
    assert ("--remount-ro", "/etc") in itertools.pairwise(server)


def digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


async def test_small_files_are_copied_for_each_call_and_directories_bound(
    site: Site, sandbox: Sandbox
) -> None:
    """A copy costs bwrap less than a mount; it is taken afresh for every call."""
    policy = SandboxPolicy.for_workspace(site.workspace.root)
    with sandbox.command(policy, ["true"]) as argv:
        passed = sandbox.credentials()["pass_fds"]
        sources = {
            destination: (option, source) for _, option, source, destination in etc_sources(argv)
        }
    assert sources["/etc/passwd"][0] == "--file"
    assert argv[argv.index("/etc/passwd") - 4 : argv.index("/etc/passwd") - 2] == [
        "--perms",
        "0444",
    ]
    if on_host("/etc/services"):
        assert sources["/etc/services"][0] == "--file"
    if on_host("/etc/ssl"):
        assert sources["/etc/ssl"] == ("--ro-bind", "/etc/ssl")
    copied = [int(source) for option, source in sources.values() if option == "--file"]
    assert set(copied) <= set(passed)
    # Closed once the call is over.
    for fd in passed:
        with pytest.raises(OSError):
            os.fstat(fd)
    # What the command reads is the host's file as it is, read-only.
    names = [name for name in ("services", "protocols", "ld.so.cache") if on_host(f"/etc/{name}")]
    command = "; ".join(f"sha256sum /etc/{n} | cut -c1-64; stat -c %a /etc/{n}" for n in names)
    out = await run(site.bash(sandbox), command)
    assert lines(out) == [item for n in names for item in (digest(f"/etc/{n}"), "444")]


def test_host_entries_links_and_what_is_left_out(tmp_path: Path) -> None:
    """Read from a directory laid out like a host's /etc."""
    host = tmp_path / "etc"
    (host / "default").mkdir(parents=True)
    for name in ("protocols", "passwd", "shadow", "hostname", "fstab", "default/locale"):
        (host / name).write_text("x\n")
    (host / "default" / "useradd").write_text("x\n")
    (host / "python3.11").mkdir()
    # resolvconf's link into /run, which no sandbox shows: bound where it points.
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "resolv.conf").write_text("nameserver 10.0.0.1\n")
    (host / "resolv.conf").symlink_to(tmp_path / "run" / "resolv.conf")
    # A link into /usr, shown as it is: kept a link. One that dangles: left out.
    (host / "localtime").symlink_to("/usr/share/zoneinfo/Etc/UTC")
    (host / "os-release").symlink_to(tmp_path / "nowhere")
    # A link to another entry that is shown: kept a link.
    (host / "mime.types").symlink_to(host / "protocols")

    def shown(network: bool) -> dict[str, tuple[str, str | None]]:
        return {
            str(entry.at): (str(entry.source), entry.link) for entry in host_etc(network, host=host)
        }

    assert shown(False) == {
        "/etc/protocols": (str(host / "protocols"), None),
        "/etc/default/locale": (str(host / "default" / "locale"), None),
        "/etc/python3.11": (str(host / "python3.11"), None),
        "/etc/localtime": (
            os.path.realpath("/usr/share/zoneinfo/Etc/UTC"),
            "/usr/share/zoneinfo/Etc/UTC",
        ),
        "/etc/mime.types": (str(host / "protocols"), str(host / "protocols")),
    }
    with_network = shown(True)
    assert with_network["/etc/resolv.conf"] == (str(tmp_path / "run" / "resolv.conf"), None)
    assert set(with_network) - set(shown(False)) == {"/etc/resolv.conf"}
