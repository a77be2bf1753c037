"""Baton as root, the workspace another user's: commands run as that owner, not as root.

These need root (to give the workspace away and start bwrap as its owner) and a
kernel that lets that owner make a user namespace; elsewhere they skip (or fail
where CI requires a sandbox).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.app import build_baton
from bot.sandbox import Sandbox, SandboxPolicy, run_as
from bot.sandbox.identity import process_limit, tasks_of
from bot.sandbox.profile import ETC_SYNTHETIC
from bot.tools.shell import Bash, BashArgs
from tests.conftest import make_settings
from tests.fakes.openai_api import FakeOpenAI
from tests.sandbox.conftest import REQUIRE, Site, make_site, require

OWNER = 1000

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root, as Baton in a container")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def give(path: Path, uid: int, gid: int) -> None:
    """chown -R, without following links."""
    os.chown(path, uid, gid, follow_symlinks=False)
    for directory, names, files in os.walk(path):
        for name in [*names, *files]:
            os.chown(os.path.join(directory, name), uid, gid, follow_symlinks=False)


@pytest.fixture
def owned() -> Iterator[Site]:
    """A site whose workspace belongs to `OWNER`, except Baton's root-only database.

    Not under pytest's tmp_path: that sits in a directory only root may enter, and
    the owner's bwrap must reach the workspace.
    """
    directory = tempfile.mkdtemp(prefix="baton-owner-")
    try:
        os.chmod(directory, 0o755)
        site = make_site(Path(directory))
        root = site.workspace.root
        (root / "notes.txt").write_text("one\n")
        (root / "notes.txt").chmod(0o644)
        give(root, OWNER, OWNER)
        # Baton, as root, made its database in the workspace: root's, 0600.
        os.chown(site.database, 0, 0)
        site.database.chmod(0o600)
        yield site
    finally:
        shutil.rmtree(directory, ignore_errors=True)


async def probe(site: Site, **options: object) -> Sandbox:
    found = await Sandbox.probe(policy(site), **options)  # type: ignore[arg-type]
    return require(found)


def as_owner(found: Sandbox) -> Sandbox:
    """`found` if it runs commands as the owner; else skip (or fail) saying why not."""
    if found.run_as is None:
        message = f"the sandbox cannot run commands as the workspace's owner: {found.reason}"
        if os.environ.get(REQUIRE):
            pytest.fail(message)
        pytest.skip(message)
    return found


def policy(site: Site) -> SandboxPolicy:
    return SandboxPolicy.for_workspace(
        site.workspace.root,
        read_only=[site.config],
        databases=site.workspace.private_files,
    )


async def run(bash: Bash, command: str, timeout_s: int = 30) -> str:
    return await bash.run(BashArgs(command=command, timeout_s=timeout_s))


def test_run_as_names_the_owner_of_a_workspace_not_roots(tmp_path: Path) -> None:
    mine = tmp_path / "root-owned"
    mine.mkdir()
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, OWNER, OWNER + 1)
    assert run_as(mine) is None
    assert run_as(theirs) == (OWNER, OWNER + 1)
    assert run_as(tmp_path / "missing") is None
    # Root's group is not handed on: the owner's own group instead (or one like its uid).
    os.chown(theirs, 54321, 0)
    assert run_as(theirs) == (54321, 54321)


def test_run_as_is_none_when_baton_is_not_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.chown(tmp_path, OWNER, OWNER)
    monkeypatch.setattr(os, "geteuid", lambda: OWNER)
    assert run_as(tmp_path) is None


async def test_a_root_owned_workspace_runs_as_today(site: Site, sandbox: Sandbox) -> None:
    assert sandbox.run_as is None
    assert sandbox.credentials() == {}
    bash = site.bash(sandbox)
    assert bash.run_as is None
    assert await run(bash, "id -u; ulimit -u") == f"exit code 0\n0\n{ulimit_u()}\n"


def ulimit_u() -> str:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    return "unlimited" if soft == resource.RLIM_INFINITY else str(soft)


async def test_commands_run_as_the_workspace_owner(owned: Site) -> None:
    sandbox = as_owner(await probe(owned))
    assert sandbox.run_as == (OWNER, OWNER)
    assert f"as the workspace's owner (uid {OWNER}, gid {OWNER})" in sandbox.reason
    bash = owned.bash(sandbox)
    assert bash.run_as == (OWNER, OWNER)
    out = await run(bash, "id -u; id -g; id -G; stat -c %u .")
    assert out == f"exit code 0\n{OWNER}\n{OWNER}\n{OWNER}\n{OWNER}\n"
    # What bwrap reads as the owner holds nothing secret, and nobody else may change it.
    private = sandbox.private_files()
    assert private.stat().st_mode & 0o777 == 0o755
    modes = {str(p.relative_to(private)): p.stat().st_mode & 0o777 for p in private.rglob("*")}
    assert modes == {
        "empty": 0o444,
        "gitconfig": 0o444,
        "etc": 0o755,
        **{f"etc/{name}": 0o444 for name in ETC_SYNTHETIC},
        **({"seccomp.bpf": 0o444} if sandbox.seccomp_filter is not None else {}),
    }


async def test_the_owner_writes_its_files_and_owns_what_it_makes(owned: Site) -> None:
    bash = owned.bash(as_owner(await probe(owned)))
    root = owned.workspace.root
    out = await run(bash, "echo two >> notes.txt && touch new && mkdir -p src && echo x > src/a")
    assert out == "exit code 0 (no output)"
    assert (root / "notes.txt").read_text() == "one\ntwo\n"
    for made in (root / "new", root / "src", root / "src" / "a"):
        info = made.stat()
        assert (info.st_uid, info.st_gid) == (OWNER, OWNER), made


async def test_git_sees_its_own_repository(owned: Site) -> None:
    bash = owned.bash(as_owner(await probe(owned)))
    out = await run(bash, "git status --short")
    assert "dubious ownership" not in out
    assert out.startswith("exit code 0\n"), out
    out = await run(
        bash, "git add notes.txt && git commit -qm first && git log --format='%s by %an'"
    )
    assert out == "exit code 0\nfirst by Baton\n"
    objects = owned.workspace.root / ".git" / "objects"
    assert {p.stat().st_uid for p in objects.rglob("*")} == {OWNER}


async def test_the_owner_is_named_by_the_sandbox_s_own_etc(owned: Site) -> None:
    bash = owned.bash(as_owner(await probe(owned)))
    out = await run(
        bash,
        "id; whoami; cut -d: -f1,3,4,6 /etc/passwd; cut -d: -f1,3 /etc/group; "
        "stat -c '%U %G' notes.txt; ls -ld ~ | cut -d' ' -f3; find /etc -writable",
    )
    assert out.splitlines() == [
        "exit code 0",
        f"uid={OWNER}(sandbox) gid={OWNER}(sandbox) groups={OWNER}(sandbox)",
        "sandbox",
        "root:0:0:/root",
        "nobody:65534:65534:/nonexistent",
        f"sandbox:{OWNER}:{OWNER}:/home/sandbox",
        "root:0",
        "nogroup:65534",
        f"sandbox:{OWNER}",
        "sandbox sandbox",
        "sandbox",
    ], out
    for command in ("touch /etc/x", "echo x >> /etc/passwd", "mkdir /etc/default/x"):
        out = await run(bash, command)
        assert not out.startswith("exit code 0"), (command, out)


async def test_programs_that_read_etc_work_for_the_owner(owned: Site) -> None:
    bash = owned.bash(as_owner(await probe(owned)))
    command = (
        "echo '1 2' | awk '{print $2}'; getent hosts localhost | awk '{print $2}' | head -1; "
        "perl -e 'print 3, qq(\\n)'; printf 'b\\na\\n' | sort | xargs; "
        "ls -l notes.txt | cut -d' ' -f3"
    )
    if os.access("/usr/bin/python3", os.X_OK):
        command += "; /usr/bin/python3 -c 'import ssl; ssl.create_default_context(); print(4)'"
    out = await run(bash, command)
    expected = ["exit code 0", "2", "localhost", "3", "a b", "sandbox"]
    expected += ["4"] if os.access("/usr/bin/python3", os.X_OK) else []
    assert out.splitlines() == expected, out


async def test_protected_paths_stay_read_only_for_the_owner(owned: Site) -> None:
    bash = owned.bash(as_owner(await probe(owned)))
    root = owned.workspace.root
    protected = (root / ".baton" / "agents" / "x.md", root / ".git" / "hooks" / "pre-commit")
    before = {path: digest(path) for path in (*protected, root / ".git" / "config", owned.config)}
    for command in (
        "echo evil > .baton/agents/x.md",
        "rm -rf .baton",
        "mv .baton .b",
        "echo evil > .git/hooks/pre-commit",
        "echo evil > .git/hooks/post-checkout",
        "git config core.hooksPath /tmp",
        "git config alias.x '!touch pwned'",
        "mv .git .g",
        "echo evil > baton.yaml",
    ):
        out = await run(bash, command)
        assert not out.startswith("exit code 0"), (command, out)
    assert {path: digest(path) for path in before} == before
    assert not (root / ".git" / "hooks" / "post-checkout").exists()
    assert not (root / ".b").exists()
    assert not (root / ".g").exists()


async def test_the_database_stays_masked_for_the_owner(owned: Site) -> None:
    bash = owned.bash(as_owner(await probe(owned)))
    before = digest(owned.database)
    assert await run(bash, "wc -c < baton.db") == "exit code 0\n0\n"
    for command in ("echo x > baton.db", "rm -f baton.db", "echo planted > baton.db-wal"):
        out = await run(bash, command)
        assert not out.startswith("exit code 0"), (command, out)
    assert digest(owned.database) == before
    assert await run(bash, "test -e /etc/shadow || echo absent") == "exit code 0\nabsent\n"
    root = owned.workspace.root
    assert sorted(p.name for p in root.iterdir() if p.name.startswith("baton.db")) == ["baton.db"]


@pytest.fixture
def root_only_file() -> Iterator[Path]:
    """A root-owned 0600 file in a system directory the sandbox shows (/opt), removed after."""
    opt = Path("/opt")
    if not opt.is_dir() or opt.is_symlink():
        pytest.skip("no /opt directory to put a root-only file in")
    secret = opt / f"baton-test-{uuid.uuid4().hex}"
    try:
        secret.write_text("root-only\n")
        secret.chmod(0o600)
        yield secret
    finally:
        secret.unlink(missing_ok=True)


async def test_roots_own_files_in_the_system_dirs_are_unreadable(
    owned: Site, root_only_file: Path
) -> None:
    bash = owned.bash(as_owner(await probe(owned)))
    out = await run(bash, f"cat {root_only_file}")
    assert "root-only" not in out
    assert "Permission denied" in out, out


async def test_each_call_has_a_process_limit(owned: Site) -> None:
    sandbox = as_owner(await probe(owned))
    if sandbox.limiter is None:
        pytest.skip(f"no process limit here: {sandbox.reason}")
    assert sandbox.process_headroom is not None and sandbox.process_headroom >= 4096
    out = await run(owned.bash(sandbox), "ulimit -u; ulimit -Hu")
    soft, hard = map(int, out.splitlines()[1:])
    assert soft == hard
    assert sandbox.process_headroom <= soft <= tasks_of(OWNER) + sandbox.process_headroom + 64


async def test_the_process_limit_holds_a_flood_back(owned: Site) -> None:
    sandbox = as_owner(await probe(owned, process_headroom=24))
    if sandbox.limiter is None:
        pytest.skip(f"no process limit here: {sandbox.reason}")
    assert process_limit(OWNER, 24) >= 24
    # More children than the limit lets in: bash's fork fails ("retry") until some exit.
    command = "n=$(ulimit -u); for i in $(seq $((n + 20))); do sleep 1 & done; wait; echo done"
    bash = owned.bash(sandbox)
    out = await run(bash, command, 60)
    assert "Resource temporarily unavailable" in out, out
    # The cap is the call's own: the next call starts as usual. (Whether bash gets its
    # fork through after retrying depends on the machine's load, so it is not asserted.)
    assert await run(bash, "echo next") == "exit code 0\nnext\n"


async def test_without_namespaces_for_the_owner_commands_run_as_root(
    owned: Site, caplog: pytest.LogCaptureFixture
) -> None:
    real = shutil.which("bwrap")
    if real is None:
        pytest.skip("no system bwrap")
    # A bwrap that, like a kernel without unprivileged user namespaces, works for root only.
    fake = owned.root / "bwrap"
    fake.write_text(
        "#!/bin/sh\n"
        '[ "$(id -u)" = 0 ] || { echo "bwrap: No permissions to create new namespace" >&2; '
        "exit 1; }\n"
        f'exec {real} "$@"\n'
    )
    fake.chmod(0o755)
    with caplog.at_level(logging.WARNING, logger="bot.sandbox.runner"):
        sandbox = await probe(owned, binary=fake)
    assert sandbox.run_as is None
    assert f"as root: not as the workspace's owner (uid {OWNER})" in sandbox.reason
    assert "No permissions to create new namespace" in sandbox.reason
    assert any("not as the workspace's owner" in r.getMessage() for r in caplog.records)
    out = await run(owned.bash(sandbox), "id -u")
    assert out == "exit code 0\n0\n"


async def test_concurrent_calls_as_the_owner_clean_up(owned: Site) -> None:
    bash = owned.bash(as_owner(await probe(owned)))
    outs = await asyncio.gather(*(run(bash, f"echo {i} > f{i}; id -u") for i in range(4)))
    assert outs == [f"exit code 0\n{OWNER}\n"] * 4
    root = owned.workspace.root
    # The placeholders bwrap made (as the owner) for missing protected paths are gone.
    assert not (root / ".git" / "modules").exists()
    assert not (root / ".git" / "worktrees").exists()
    assert not (root / "baton.db-wal").exists()


async def test_a_workspace_its_owner_cannot_reach_runs_as_root(tmp_path: Path) -> None:
    # pytest's tmp_path lies under a directory only root may enter.
    site = make_site(tmp_path)
    give(site.workspace.root, OWNER, OWNER)
    sandbox = await probe(site)
    assert sandbox.run_as is None
    assert f"as root: not as the workspace's owner (uid {OWNER})" in sandbox.reason
    assert "the owner needs unprivileged user namespaces, and to reach" in sandbox.reason
    assert await run(site.bash(sandbox), "id -u") == "exit code 0\n0\n"


async def test_files_the_tools_create_belong_to_the_owner_the_commands_run_as(
    owned: Site, fake_llm: FakeOpenAI
) -> None:
    """write_file runs in Baton (root); what it makes must stay the owner's to change."""
    root = owned.workspace.root
    state = owned.root / "baton-state"
    state.mkdir()
    settings = make_settings(
        owned.root, fake_llm.url, workspace=root,
        database_url=f"sqlite:///{state / 'baton.db'}", state_dir=state,
    )  # fmt: skip
    baton = await build_baton(settings)
    try:
        as_owner(baton.sandbox)
        write = baton.tools.get("write_file")
        bash = baton.tools.get("bash")
        assert write is not None and bash is not None
        await write.run(write.parse_arguments('{"path": "new/dir/made.txt", "content": "a\\n"}'))
        for path in (root / "new", root / "new" / "dir", root / "new" / "dir" / "made.txt"):
            info = path.stat()
            assert (info.st_uid, info.st_gid) == (OWNER, OWNER), path
        command = "echo b >> new/dir/made.txt && touch new/dir/more && cat new/dir/made.txt"
        out = await bash.run(bash.parse_arguments(json.dumps({"command": command})))
        assert out == "exit code 0\na\nb\n"
    finally:
        await baton.close()
