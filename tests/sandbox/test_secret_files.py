"""Secret files in the workspace are hidden from commands, whatever the command.

The walk that finds them (`bot.sandbox.secret_files`) is checked on real files; what
commands see, through the Bash tool and the real bwrap.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.errors import WorkspaceError
from bot.sandbox import Sandbox, SandboxPolicy
from bot.sandbox.secret_files import SecretFiles, hidden_note
from bot.tools.shell import Bash, BashArgs
from bot.tools.workspace import Workspace

# Each secret holds a canary no command may print; the name says where it lies.
SECRETS = (
    ".env",
    "deploy/prod.env",
    "infra/terraform.tfvars",
    "infra/x.tfstate",
    "credentials.json",
    "service-account-foo.json",
    "web/.htpasswd",
    ".cargo/credentials.toml",
    "charts/secrets.yml",
    "tls/server.key",
    ".ssh/id_ed25519",
)
# Files beside them that stay what they are.
ORDINARY = (
    ".env.example",
    "README.md",
    ".cargo/config.toml",
    "infra/main.tf",
    "tls/server.crt",
    "tools/.env/bin/activate",  # a virtualenv named .env: only the file itself is secret
)


def canary(name: str) -> str:
    return f"CANARY-{hashlib.sha256(name.encode()).hexdigest()[:12]}"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_workspace(root: Path, *, git: bool = True) -> Workspace:
    """A workspace holding every secret of `SECRETS` (TOKEN=<canary>) and `ORDINARY`."""
    root.mkdir(parents=True, exist_ok=True)
    if git:
        subprocess.run(["git", "init", "-q", str(root)], check=True)
    for name in SECRETS:
        write(root / name, f"TOKEN={canary(name)}\n")
    for name in ORDINARY:
        write(root / name, f"visible {name}\n")
    return Workspace(root)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def commit(repository: Path, *paths: str) -> None:
    git = ["git", "-C", str(repository), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "add", *paths], check=True)
    subprocess.run([*git, "commit", "-qm", "some"], check=True)


def add_worktree(repository: Path, tree: Path) -> None:
    """Commit everything in `repository` (its secrets too), then check it out at `tree`."""
    git = ["git", "-C", str(repository), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "all"], check=True)
    subprocess.run([*git, "worktree", "add", "-q", str(tree)], check=True)


def bash_in(workspace: Workspace, sandbox: Sandbox, *, show: tuple[str, ...] = ()) -> Bash:
    policy = SandboxPolicy.for_workspace(workspace.root)
    return Bash(workspace, sandbox=sandbox, policy=policy, show_secrets=show)


async def run(bash: Bash, command: str) -> str:
    return await bash.run(BashArgs(command=command, timeout_s=30))


def leaked(out: str) -> list[str]:
    return [name for name in SECRETS if canary(name) in out]


def found(root: Path, *, shown: tuple[str, ...] = ()) -> list[str]:
    files = SecretFiles(SandboxPolicy.for_workspace(root), shown=shown)
    return [files.relative(path) for path in files.find()]


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return make_workspace(tmp_path / "ws")


# ------------------------------------------------------------------- the walk


def test_the_walk_finds_every_secret_and_hides_secret_directories_whole(
    workspace: Workspace,
) -> None:
    write(workspace.root / ".git" / "deploy.key", "git's own files are not walked\n")
    expected = sorted([name for name in SECRETS if not name.startswith(".ssh/")] + [".ssh"])
    assert found(workspace.root) == expected


def test_shown_paths_and_globs_are_left_out(workspace: Workspace) -> None:
    shown = found(workspace.root, shown=("deploy/prod.env", "**/*.tfvars", "tls", ".ssh"))
    assert {"deploy/prod.env", "infra/terraform.tfvars", "tls/server.key", ".ssh"}.isdisjoint(shown)
    assert {".env", "infra/x.tfstate", "credentials.json"} <= set(shown)


def test_a_file_shown_inside_a_secret_directory_leaves_the_rest_hidden(
    workspace: Workspace,
) -> None:
    write(workspace.root / ".ssh" / "config", "Host example\n")
    shown = found(workspace.root, shown=(".ssh/config",))
    assert ".ssh" not in shown and ".ssh/config" not in shown
    assert ".ssh/id_ed25519" in shown


def test_what_the_policy_masks_already_is_not_walked(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    write(root / "other-site" / ".env", "another site's\n")
    write(root / ".aws" / "credentials", "[default]\n")
    write(root / ".aws" / "config", "[default]\n")
    policy = SandboxPolicy.for_workspace(
        root, masked=[root / "other-site"], read_only=[root / ".aws" / "config"]
    )
    files = SecretFiles(policy)
    # A directory of secrets holding a protected path is hidden file by file instead:
    # the profile cannot mount that path inside an empty read-only directory.
    assert [files.relative(p) for p in files.find()] == [".aws/credentials"]


def test_git_and_dependency_trees_are_not_walked(workspace: Workspace) -> None:
    for tree in (".git", "node_modules/tls-kit/test", "app/node_modules/x", ".venv/lib"):
        write(workspace.root / tree / "fixture.key", "a package's test key\n")
    assert not [name for name in found(workspace.root) if name.endswith("fixture.key")]


def test_a_directory_baton_cannot_list_is_hidden_whole(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.scandir
    unreadable = {str(workspace.root / "deploy")}

    def refusing(path: str) -> object:
        if str(path) in unreadable:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", refusing)
    assert "deploy" in found(workspace.root)
    unreadable.add(str(workspace.root))
    with pytest.raises(WorkspaceError, match="cannot look for secret files"):
        found(workspace.root)


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The directories `os.scandir` lists from now on."""
    listed: list[str] = []
    real = os.scandir

    def counting(path: str) -> object:
        listed.append(str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", counting)
    yield listed


def test_only_changed_directories_are_listed_again(
    workspace: Workspace, listings: list[str]
) -> None:
    files = SecretFiles(SandboxPolicy.for_workspace(workspace.root), settle_ns=0)
    files.find()
    directories = len(listings)
    assert directories >= 8
    listings.clear()
    assert len(files.find()) == len(SECRETS)  # .ssh/id_ed25519 as .ssh
    assert listings == []
    write(workspace.root / "deploy" / "staging.env", "TOKEN=new\n")
    assert workspace.root / "deploy" / "staging.env" in files.find()
    assert listings == [str(workspace.root / "deploy")]


def test_a_directory_whose_time_is_put_back_is_listed_again(workspace: Workspace) -> None:
    files = SecretFiles(SandboxPolicy.for_workspace(workspace.root), settle_ns=0)
    deploy = workspace.root / "deploy"
    before = deploy.stat()
    files.find()
    write(deploy / "later.env", "TOKEN=later\n")
    os.utime(deploy, ns=(before.st_atime_ns, before.st_mtime_ns))  # the ctime moves on
    assert deploy / "later.env" in files.find()


def test_a_listing_made_right_after_a_change_is_not_trusted(
    workspace: Workspace, listings: list[str]
) -> None:
    # Everything here changed within the hour: on a slow machine "within the second"
    # could be over before the walk starts.
    files = SecretFiles(SandboxPolicy.for_workspace(workspace.root), settle_ns=3600 * 10**9)
    files.find()
    listings.clear()
    files.find()
    # A second change in the same clock tick would leave the directory's times as they
    # were, so a listing this fresh is made again.
    assert str(workspace.root / "deploy") in listings


def test_the_note_names_hidden_files_only_when_the_command_meets_them() -> None:
    names = [".env", "tls/server.key", ".ssh/"]
    note = hidden_note(names, "cat .env", "")
    assert note is not None
    assert "(.env and 2 more)" in note and "3 secret files" in note
    assert "`sandbox.show_secrets`" in note
    assert "(tls/server.key, .ssh/ and 1 more)" in (
        hidden_note(names, "ls -R", "server.crt\nserver.key\n.ssh/config\n") or ""
    )
    for command, output in [
        ("pytest -q", "3 passed\n"),
        ("cat .env.example", "KEY=\n"),
        ("ls tools/.env/bin", "activate\n"),  # a virtualenv called .env
        ("cat my.ssh", ""),
    ]:
        assert hidden_note(names, command, output) is None, command


# ------------------------------------------------------------- in the sandbox


@pytest.mark.parametrize(
    "command",
    [
        "cat .env",
        "cat deploy/prod.env infra/terraform.tfvars infra/x.tfstate .ssh/id_ed25519",
        "find . -type f -exec cat {} +",
        "grep -r TOKEN .",
        "grep -r --include='*' -a CANARY . ; cat ./*/* .*/* 2>/dev/null",
        "tar c . | strings",
        "tar c --dereference . | strings",
        'for f in $(find . -type f); do base64 "$f"; done | base64 -d',
    ],
)
async def test_commands_print_no_secret(
    workspace: Workspace, sandbox: Sandbox, command: str
) -> None:
    out = await run(bash_in(workspace, sandbox), command)
    assert leaked(out) == [], out


async def test_ordinary_files_and_templates_stay_readable(
    workspace: Workspace, sandbox: Sandbox
) -> None:
    out = await run(bash_in(workspace, sandbox), f"cat {' '.join(ORDINARY)}")
    assert out == "exit code 0\n" + "".join(f"visible {name}\n" for name in ORDINARY)


async def test_a_hidden_file_reads_empty_and_the_output_says_why(
    workspace: Workspace, sandbox: Sandbox
) -> None:
    bash = bash_in(workspace, sandbox)
    out = await run(bash, "wc -c < .env && ls -A .ssh")
    assert out.startswith("exit code 0\n0\n\n[Baton hid 11 secret files from this command (.env")
    assert "`sandbox.show_secrets`" in out
    assert await run(bash, "echo hi") == "exit code 0\nhi\n"


async def test_shown_secrets_are_readable(workspace: Workspace, sandbox: Sandbox) -> None:
    bash = bash_in(workspace, sandbox, show=("deploy/prod.env", "**/*.tfvars", ".ssh"))
    out = await run(bash, "cat deploy/prod.env infra/terraform.tfvars .ssh/id_ed25519 .env")
    assert leaked(out) == ["deploy/prod.env", "infra/terraform.tfvars", ".ssh/id_ed25519"]


async def test_a_secret_made_after_the_cache_warmed_is_hidden(
    workspace: Workspace, sandbox: Sandbox
) -> None:
    bash = bash_in(workspace, sandbox)
    await run(bash, "true")
    made = write(workspace.root / "deploy" / "new" / "late.env", "TOKEN=LATE-CANARY\n")
    write(workspace.root / "id_rsa", "LATE-KEY\n")
    out = await run(bash, "cat deploy/new/late.env id_rsa")
    assert "LATE" not in out
    assert made.read_text() == "TOKEN=LATE-CANARY\n"


async def test_a_secret_settled_in_the_cache_and_made_later_is_hidden(
    workspace: Workspace, sandbox: Sandbox
) -> None:
    bash = bash_in(workspace, sandbox)
    await asyncio.sleep(1.2)  # every listing settles: only a change lists a directory again
    await run(bash, "true")
    await run(bash, "true")
    write(workspace.root / "deploy" / "late.env", "TOKEN=LATE-CANARY\n")
    assert "LATE" not in await run(bash, "cat deploy/late.env")


async def test_deleted_secrets_do_not_break_calls(workspace: Workspace, sandbox: Sandbox) -> None:
    bash = bash_in(workspace, sandbox)
    await run(bash, "true")
    (workspace.root / ".env").unlink()
    (workspace.root / "tls" / "server.key").unlink()
    (workspace.root / "tls" / "server.crt").unlink()
    (workspace.root / "tls").rmdir()
    out = await run(bash, "ls -A")
    assert out.startswith("exit code 0\n"), out
    assert ".env\n" not in out.split("\n[")[0]
    # The deleted secret is not made again on the host by a mount point.
    assert not (workspace.root / ".env").exists() and not (workspace.root / "tls").exists()
    # A command that deletes one itself cannot: it is a mount point in the sandbox.
    assert "Device or resource busy" in await run(bash, "rm deploy/prod.env")


async def test_a_hidden_file_cannot_be_moved_removed_linked_or_changed(
    workspace: Workspace, sandbox: Sandbox
) -> None:
    bash = bash_in(workspace, sandbox)
    root = workspace.root
    before = {name: digest(root / name) for name in SECRETS}
    attacks = [
        "mv .env moved",
        "rm -f .env",
        "ln .env hard",
        "ln deploy/prod.env deploy/hard",
        "mv deploy deploy2",
        "mv .ssh ssh2",
        "rm -rf .ssh tls",
        "umount .env",
        "umount -l .ssh",
        "echo evil > .env",
        "truncate -s 0 infra/x.tfstate",
        "chmod 666 .env",
        "python3 -c \"import os; os.rename('.env', 'moved2')\"",
    ]
    for command in attacks:
        out = await run(bash, command)
        assert not out.startswith("exit code 0"), (command, out)
    out = await run(bash, "cp .env copy && cat copy hard moved deploy2/prod.env 2>&1; ls -A")
    assert leaked(out) == []
    assert {name: digest(root / name) for name in SECRETS} == before
    assert (root / "copy").read_text() == ""


async def test_planted_links_never_break_calls_and_their_targets_are_hidden(
    workspace: Workspace, sandbox: Sandbox
) -> None:
    root = workspace.root
    write(root / "config" / "app.conf", "TOKEN=LINKED-CANARY\n")
    (root / "api.env").symlink_to("config/app.conf")
    write(root / "keys" / "deploy", "LINKED-KEY\n")
    (root / ".aws").symlink_to("keys")
    (root / "outside.env").symlink_to("/usr/bin/true")
    (root / "dangling.key").symlink_to("nowhere/at/all")
    (root / "git.key").symlink_to(".git/config")
    (root / "loop.env").symlink_to("loop.env")
    (root / "root.pem.key").symlink_to(".")
    bash = bash_in(workspace, sandbox)
    out = await run(bash, "cat api.env config/app.conf .aws/deploy keys/deploy; echo done")
    assert "LINKED" not in out and "done" in out
    assert (await run(bash, "cat outside.env git.key >/dev/null && echo fine")).startswith(
        "exit code 0\nfine"
    )
    assert (root / "config" / "app.conf").read_text() == "TOKEN=LINKED-CANARY\n"


async def test_masking_works_in_a_worktree(tmp_path: Path, sandbox: Sandbox) -> None:
    main = make_workspace(tmp_path / "main")
    tree_root = tmp_path / "trees" / "child"
    add_worktree(main.root, tree_root)
    # The committed values were templates; the worktree holds real ones now.
    for name in SECRETS:
        write(tree_root / name, f"TOKEN={canary(name)} REAL\n")
    write(tree_root / "later.env", f"TOKEN={canary('later')}\n")
    tree = Workspace(tree_root)
    assert (tree_root / ".git").is_file()
    bash = bash_in(tree, sandbox)
    out = await run(bash, "find . -type f -not -path './.git' -exec cat {} + ; cat later.env")
    assert leaked(out) == [] and canary("later") not in out
    assert "visible .env.example" in out


async def test_secrets_git_holds_unchanged_stay_visible_and_changed_ones_hide(
    tmp_path: Path, sandbox: Sandbox
) -> None:
    """A tracked Helm secrets.yaml or test key reads as committed, and git sees no change.

    Hiding it would only make it look emptied (tests fail, `git commit -a` records it
    empty); its content is in the repository already. Written over with real values,
    it is hidden again.
    """
    root = tmp_path / "chart"
    workspace = make_workspace(root)
    commit(root, "charts/secrets.yml", "tls/server.key", "README.md")
    bash = bash_in(workspace, sandbox)
    out = await run(bash, "cat charts/secrets.yml tls/server.key; git status --short charts tls")
    assert canary("charts/secrets.yml") in out and canary("tls/server.key") in out
    assert " M " not in out, out
    assert canary(".env") not in await run(bash, "cat .env")  # untracked: hidden
    write(root / "charts" / "secrets.yml", "password: hunter2-REAL\n")
    out = await run(bash, "cat charts/secrets.yml")
    assert "hunter2-REAL" not in out
    assert canary("tls/server.key") in await run(bash, "cat tls/server.key")
