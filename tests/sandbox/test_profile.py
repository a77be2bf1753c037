"""The bwrap profile a policy becomes, read as arguments (no bwrap needed)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bot.errors import WorkspaceError
from bot.sandbox import Sandbox, SandboxPolicy, build_profile, sqlite_companions
from bot.sandbox.profile import SANDBOX_HOME, etc_entries


def pairs(arguments: tuple[str, ...], option: str) -> list[str]:
    """The destinations of every `option SRC DEST` (or `option DEST`) in `arguments`."""
    return [arguments[i + 1] for i, value in enumerate(arguments) if value == option]


def profile_for(tmp_path: Path, **policy: object) -> tuple[Path, tuple[str, ...], tuple[Path, ...]]:
    root = tmp_path / "ws"
    root.mkdir(exist_ok=True)
    made = build_profile(
        SandboxPolicy.for_workspace(root, **policy),  # type: ignore[arg-type]
        empty_file=tmp_path / "empty",
        etc=etc_entries(tmp_path / "etc", False),
    )
    return root, made.arguments, made.placeholders


def test_namespaces_and_no_network_by_default(tmp_path: Path) -> None:
    _, arguments, _ = profile_for(tmp_path)
    for option in (
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--unshare-net",
        "--die-with-parent",
        "--new-session",
    ):
        assert option in arguments
    assert arguments[arguments.index("--cap-drop") + 1] == "ALL"
    _, shared, _ = profile_for(tmp_path, network=True)
    assert "--unshare-net" not in shared
    root = tmp_path / "ws"
    without = build_profile(
        SandboxPolicy.for_workspace(root),
        empty_file=tmp_path / "empty",
        etc=etc_entries(tmp_path / "etc", False),
        user_namespace=False,
    )
    assert "--unshare-user" not in without.arguments


def test_only_the_system_and_the_workspace_are_mounted(tmp_path: Path) -> None:
    root, arguments, _ = profile_for(tmp_path)
    sources = pairs(arguments, "--ro-bind") + pairs(arguments, "--bind")
    allowed = ("/usr", "/bin", "/sbin", "/lib", "/etc", "/opt", str(root), str(tmp_path / "empty"))
    allowed += (str(tmp_path / "etc"),)
    allowed += ("/proc/sys",)
    assert all(source.startswith(allowed) for source in sources), sources
    assert pairs(arguments, "--bind") == [str(root)]
    assert {"/tmp", "/var/tmp", str(SANDBOX_HOME)} <= set(pairs(arguments, "--tmpfs"))
    assert arguments[-2:] == ("--chdir", str(root))


def test_the_kernel_s_knobs_are_read_only_over_the_fresh_proc(tmp_path: Path) -> None:
    _, arguments, _ = profile_for(tmp_path)
    proc = arguments.index("--proc")
    sys = arguments.index("/proc/sys")
    assert arguments[sys - 1 : sys + 2] == ("--ro-bind", "/proc/sys", "/proc/sys")
    assert proc < sys
    for knob in ("/proc/sysrq-trigger", "/proc/fs", "/proc/mtrr", "/proc/acpi", "/proc/scsi"):
        at = arguments.index(knob)
        assert arguments[at - 1 : at + 2] == ("--ro-bind-try", knob, knob)
        assert proc < at


def test_existing_protected_paths_are_read_only_and_pinned(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / ".git" / "hooks").mkdir(parents=True)
    (root / ".git" / "hooks" / "pre-commit.sample").write_text("#!/bin/sh\n")
    (root / ".git" / "config").write_text("[core]\n")
    (root / ".baton").mkdir()
    (root / ".baton" / "baton.yaml").write_text("model: m\n")
    (root / "baton.db").write_text("")
    _, arguments, placeholders = profile_for(tmp_path, databases=[root / "baton.db"])
    assert pairs(arguments, "--bind") == [str(root), str(root / ".git")]
    read_only = pairs(arguments, "--ro-bind")
    for name in (".baton", ".git/hooks", ".git/config"):
        assert str(root / name) in read_only
    # The database is covered by the empty file, and its missing companions held open.
    masked = {
        Path(arguments[i + 2])
        for i, value in enumerate(arguments)
        if value == "--ro-bind" and arguments[i + 1] == str(tmp_path / "empty")
    }
    assert set(sqlite_companions(root / "baton.db")) <= masked
    # The migrations' start-up lock too: an agent holding it would stall the next start.
    assert root / "baton.db.migrate.lock" in masked
    git_placeholders = {
        root / ".git" / name for name in ("config.worktree", "modules", "worktrees")
    }
    # No .claude/ in this workspace: its first missing part holds the place of Claude
    # Code's agent files and skills, which no command may plant.
    claude = {root / ".claude"}
    assert set(placeholders) == (
        set(sqlite_companions(root / "baton.db")[1:]) | git_placeholders | claude
    )


def test_an_empty_protected_path_is_held_as_a_placeholder(tmp_path: Path) -> None:
    """An empty `.baton/` or `.git/config.worktree` may be another call's placeholder
    (of this process, or of a replica sharing the workspace): this call holds it as
    its own, so neither removes it while the other's sandbox stands on it."""
    root = tmp_path / "ws"
    (root / ".git" / "hooks").mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\n")
    (root / ".baton").mkdir()
    (root / ".git" / "config.worktree").write_text("")
    made = build_profile(
        SandboxPolicy.for_workspace(root, read_only=[root / ".git" / "config.worktree"]),
        empty_file=tmp_path / "empty",
        etc=etc_entries(tmp_path / "etc", False),
    )
    assert {root / ".baton", root / ".git" / "config.worktree"} <= set(made.placeholders)
    assert root / ".git" / "config.worktree" in made.file_placeholders
    assert root / ".baton" not in made.file_placeholders
    # git's in-progress state never: an empty one is the operator's rebase.
    (root / ".git" / "rebase-merge").mkdir()
    again = build_profile(
        SandboxPolicy.for_workspace(root),
        empty_file=tmp_path / "empty",
        etc=etc_entries(tmp_path / "etc", False),
    )
    assert root / ".git" / "rebase-merge" not in again.placeholders


def test_missing_protected_paths_get_placeholders_at_their_first_missing_part(
    tmp_path: Path,
) -> None:
    root, arguments, placeholders = profile_for(tmp_path)
    assert set(placeholders) == {root / ".baton", root / ".git", root / ".claude"}
    assert str(root / ".git") in pairs(arguments, "--tmpfs")
    assert str(root / ".git") in pairs(arguments, "--remount-ro")


def test_git_s_other_control_paths_are_protected(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    git = root / ".git"
    (git / "hooks").mkdir(parents=True)
    (git / "hooks" / "pre-commit.sample").write_text("#!/bin/sh\n")
    (git / "config").write_text("[core]\n")
    (git / "modules" / "lib").mkdir(parents=True)
    # The file tools' protected names, passed on as the bash tool does.
    extra = [git / "commondir", git / "config.worktree"]
    _, arguments, placeholders = profile_for(tmp_path, read_only=extra)
    assert str(git / "modules") in pairs(arguments, "--ro-bind")
    # Missing: an empty read-only directory, and an empty file where git wants a file.
    assert git / "worktrees" in placeholders
    assert str(git / "worktrees") in pairs(arguments, "--remount-ro")
    at = arguments.index(str(git / "config.worktree"))
    assert arguments[at - 2 : at + 1] == (
        "--ro-bind",
        str(tmp_path / "empty"),
        str(git / "config.worktree"),
    )
    # No placeholder may stand for a missing commondir: git dies on an empty one.
    assert str(git / "commondir") not in arguments
    assert git / "commondir" not in placeholders
    # An existing one (the operator's) is read-only like the rest.
    (git / "commondir").write_text(".\n")
    (git / "config.worktree").write_text("[core]\n")
    _, arguments, placeholders = profile_for(tmp_path, read_only=extra)
    assert {str(git / "commondir"), str(git / "config.worktree")} <= set(
        pairs(arguments, "--ro-bind")
    )
    assert set(placeholders) == {git / "worktrees", root / ".baton", root / ".claude"}


def test_held_placeholders_count_as_missing(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / ".git").mkdir(parents=True)
    made = build_profile(
        SandboxPolicy.for_workspace(root),
        empty_file=tmp_path / "empty",
        etc=etc_entries(tmp_path / "etc", False),
        held={root / ".git"},
    )
    assert root / ".git" in made.placeholders
    assert str(root / ".git") not in pairs(made.arguments, "--bind")


def test_paths_under_a_read_only_directory_need_no_placeholder(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / ".baton").mkdir(parents=True)
    _, _, placeholders = profile_for(tmp_path, read_only=[root / ".baton" / "config.yaml"])
    assert root / ".baton" / "config.yaml" not in placeholders


def test_no_binary_means_unavailable_with_a_reason(tmp_path: Path) -> None:
    missing = tmp_path / "no-bwrap"
    sandbox = asyncio.run(Sandbox.probe(SandboxPolicy.for_workspace(tmp_path), binary=missing))
    assert not sandbox.available
    assert str(missing) in sandbox.reason


def test_a_failing_bwrap_reports_its_message(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    sandbox = asyncio.run(Sandbox.probe(SandboxPolicy.for_workspace(tmp_path), binary=fake))
    assert not sandbox.available
    assert "No permissions to create new namespace" in sandbox.reason


def test_a_protected_name_that_is_a_link_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (root / ".baton").symlink_to(tmp_path / "elsewhere")
    policy = SandboxPolicy.for_workspace(root)
    assert root / ".baton" in policy.read_only
    with pytest.raises(WorkspaceError, match="symbolic link"):
        build_profile(
            policy, empty_file=tmp_path / "empty", etc=etc_entries(tmp_path / "etc", False)
        )
    sandbox = asyncio.run(Sandbox.probe(policy, binary=Path("/bin/true")))
    assert not sandbox.available
    assert "symbolic link" in sandbox.reason


def test_without_a_user_namespace_the_probe_falls_back_and_says_so(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do [ "$a" = --unshare-user ] && '
        "{ echo 'bwrap: setting up uid map: Permission denied' >&2; exit 1; }; done\n"
        "exit 0\n"
    )
    fake.chmod(0o755)
    sandbox = asyncio.run(Sandbox.probe(SandboxPolicy.for_workspace(tmp_path), binary=fake))
    assert sandbox.available
    assert not sandbox.user_namespace
    assert "without a user namespace" in sandbox.reason
    assert "uid map: Permission denied" in sandbox.reason
    with sandbox.command(SandboxPolicy.for_workspace(tmp_path), ["true"]) as argv:
        assert "--unshare-user" not in argv


def test_as_the_owner_bwrap_starts_with_its_ids_and_the_command_under_a_limit(
    tmp_path: Path,
) -> None:
    policy = SandboxPolicy.for_workspace(tmp_path)
    limiter = Path("/usr/bin/prlimit")
    owner = Sandbox(
        Path("/usr/bin/bwrap"),
        available=True,
        reason="test",
        run_as=(1000, 1001),
        limiter=limiter,
        process_headroom=100,
    )
    assert owner.credentials() == {"user": 1000, "group": 1001, "extra_groups": []}
    with owner.command(policy, ["bash", "-c", "true"]) as argv:
        tail = argv[argv.index("--") + 1 :]
    assert tail[0] == str(limiter)
    assert tail[1].startswith("--nproc=")
    assert int(tail[1].removeprefix("--nproc=")) >= 100
    assert tail[2:] == ["--", "bash", "-c", "true"]
    # As Baton (root, or not root at all): no ids handed on, no limit (root is exempt).
    plain = Sandbox(Path("/usr/bin/bwrap"), available=True, reason="test", limiter=limiter)
    assert plain.credentials() == {}
    with plain.command(policy, ["bash", "-c", "true"]) as argv:
        assert argv[argv.index("--") + 1 :] == ["bash", "-c", "true"]


def test_the_process_headroom_grows_with_the_cpus() -> None:
    from bot.sandbox.identity import PROCESS_HEADROOM_MIN, process_headroom

    assert process_headroom(2) == PROCESS_HEADROOM_MIN
    assert process_headroom(128) > PROCESS_HEADROOM_MIN
