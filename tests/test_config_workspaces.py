"""`workspaces:` in baton.yaml: channel directories, resolved and checked like BATON_WORKSPACE."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.app import build_baton
from bot.config import Settings, load_settings
from bot.errors import ConfigError
from tests.fakes.openai_api import FakeOpenAI
from tests.test_config import home, write  # noqa: F401  (the fixture isolates HOME)


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path.resolve()


@pytest.fixture
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Baton's state directory, beside (never inside) the test's directories and home."""
    state = tmp_path_factory.mktemp("state").resolve() / "baton"
    state.mkdir(mode=0o700)
    return state


@pytest.fixture(autouse=True)
def environment(tmp: Path, state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A default workspace `<tmp>/ws` and a config file in `<tmp>/conf`."""
    (tmp / "ws").mkdir()
    (tmp / "conf").mkdir()
    (tmp / "repos" / "api").mkdir(parents=True)
    (tmp / "repos" / "web").mkdir(parents=True)
    monkeypatch.setenv("BATON_WORKSPACE", str(tmp / "ws"))
    monkeypatch.setenv("BATON_STATE_DIR", str(state_dir))
    monkeypatch.setenv("BATON_CONFIG", str(tmp / "conf" / "baton.yaml"))


def load(tmp: Path, mapping: dict[str, str | Path]) -> Settings:
    lines = "".join(f"  {channel}: {path}\n" for channel, path in mapping.items())
    write(tmp / "conf" / "baton.yaml", f"workspaces:\n{lines}")
    return load_settings(cwd=tmp)


def refused(tmp: Path, mapping: dict[str, str | Path]) -> str:
    with pytest.raises(ConfigError) as caught:
        load(tmp, mapping)
    return str(caught.value)


def test_channels_get_resolved_directories(tmp: Path) -> None:
    settings = load(tmp, {"C0API": tmp / "repos" / "api", "C0WEB": tmp / "repos" / "web"})
    assert settings.workspaces == {"C0API": tmp / "repos" / "api", "C0WEB": tmp / "repos" / "web"}
    assert settings.workspace == tmp / "ws"


def test_a_relative_directory_is_read_from_the_config_files_directory(tmp: Path) -> None:
    settings = load(tmp, {"C0API": "../repos/api", "G0PRIVATE": "../repos/./web/"})
    assert settings.workspaces == {
        "C0API": tmp / "repos" / "api",
        "G0PRIVATE": tmp / "repos" / "web",
    }


def test_a_symlinked_directory_is_resolved(tmp: Path) -> None:
    (tmp / "link").symlink_to(tmp / "repos" / "api")
    assert load(tmp, {"C0API": tmp / "link"}).workspaces == {"C0API": tmp / "repos" / "api"}


def test_two_channels_may_share_a_directory(tmp: Path) -> None:
    settings = load(tmp, {"C0ONE": tmp / "repos" / "api", "C0TWO": "../repos/api"})
    assert settings.workspaces == {"C0ONE": tmp / "repos" / "api", "C0TWO": tmp / "repos" / "api"}


def test_a_channel_may_name_the_default_workspace(tmp: Path) -> None:
    assert load(tmp, {"C0API": tmp / "ws"}).workspaces == {"C0API": tmp / "ws"}


@pytest.mark.parametrize("given", ["missing", "file"])
def test_what_is_not_a_directory_is_refused(tmp: Path, given: str) -> None:
    path = tmp / "repos" / given
    if given == "file":
        path.write_text("not a directory\n")
    message = refused(tmp, {"C0API": tmp / "repos" / "web", "C0BAD": path})
    assert message == f"workspaces.C0BAD: {path} is not a directory"


def test_a_directory_inside_another_channels_is_refused(tmp: Path) -> None:
    (tmp / "repos" / "api" / "sub").mkdir()
    message = refused(tmp, {"C0SUB": tmp / "repos" / "api" / "sub", "C0API": tmp / "repos" / "api"})
    assert message.startswith(
        f"workspaces.C0SUB: {tmp}/repos/api/sub lies inside workspaces.C0API ({tmp}/repos/api):"
    )
    assert "could read and change the other's files" in message


def test_a_directory_containing_another_channels_is_refused(tmp: Path) -> None:
    (tmp / "repos" / "api" / "sub").mkdir()
    message = refused(tmp, {"C0API": tmp / "repos" / "api", "C0SUB": tmp / "repos" / "api" / "sub"})
    assert message.startswith(
        f"workspaces.C0API: {tmp}/repos/api contains workspaces.C0SUB ({tmp}/repos/api/sub):"
    )


def test_a_directory_inside_the_default_workspace_is_refused(tmp: Path) -> None:
    (tmp / "ws" / "api").mkdir()
    message = refused(tmp, {"C0API": tmp / "ws" / "api"})
    assert message.startswith(
        f"workspaces.C0API: {tmp}/ws/api lies inside BATON_WORKSPACE ({tmp}/ws):"
    )


def test_a_directory_containing_the_default_workspace_is_refused(tmp: Path) -> None:
    message = refused(tmp, {"C0ALL": tmp})
    assert message.startswith(f"workspaces.C0ALL: {tmp} contains BATON_WORKSPACE ({tmp}/ws):")


@pytest.mark.parametrize(
    ("where", "problem"),
    [
        ("home", "is your home directory: the agents could read your keys and credentials"),
        ("home_parent", "contains your home directory {home}"),
        ("root", "is the root directory: the agents could read and change every file"),
        ("state", "is Baton's state directory (BATON_STATE_DIR)"),
        ("state_parent", "contains Baton's state directory {state}"),
    ],
)
def test_unsafe_directories_are_refused_naming_the_channel(
    tmp: Path, state_dir: Path, where: str, problem: str
) -> None:
    home_dir = Path.home().resolve()  # the isolated home of `tests.test_config.home`
    path = {
        "home": home_dir,
        "home_parent": home_dir.parent,
        "root": Path("/"),
        "state": state_dir,
        "state_parent": state_dir.parent,
    }[where]
    message = refused(tmp, {"C0API": tmp / "repos" / "api", "C0BAD": path})
    assert message.startswith(
        f"workspaces.C0BAD: {path} " + problem.format(home=home_dir, state=state_dir)
    )
    assert message.endswith("Map C0BAD to a project directory of its own.")
    assert "BATON_WORKSPACE" not in message


def test_the_state_directory_inside_a_channel_directory_is_refused(
    tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BATON_STATE_DIR", str(tmp / "repos" / "api" / ".state"))
    message = refused(tmp, {"C0API": tmp / "repos" / "api"})
    assert message.startswith(
        f"workspaces.C0API: {tmp}/repos/api contains Baton's state directory {tmp}/repos/api/.state"
    )
    # Refused before anything is made: no state directory is left inside the workspace.
    assert not (tmp / "repos" / "api" / ".state").exists()


def test_a_bad_channel_id_is_refused(tmp: Path) -> None:
    message = refused(tmp, {"general": tmp / "repos" / "api"})
    assert "workspaces.general" in message


async def test_the_loaded_workspaces_become_sites(
    tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with FakeOpenAI() as fake:
        monkeypatch.setenv("BATON_MODEL", "fake-model")
        monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
        settings = load(
            tmp,
            {"C0API": "../repos/api", "C0API2": tmp / "repos" / "api", "C0WEB": "../repos/web"},
        )
        baton = await build_baton(settings)
        try:
            assert baton.site_for("C0API").root == tmp / "repos" / "api"
            assert baton.site_for("C0API2") is baton.site_for("C0API")
            assert baton.site_for("C0WEB").root == tmp / "repos" / "web"
            assert baton.site_for("C0OTHER") is baton.default_site
            assert [site.root for site in baton.sites] == [
                tmp / "ws",
                tmp / "repos" / "api",
                tmp / "repos" / "web",
            ]
            # The config file is protected in every site, not only the default one.
            config = tmp / "conf" / "baton.yaml"
            assert all(config in site.workspace.private_files for site in baton.sites)
            assert all(config in site.policy.masked for site in baton.sites)
        finally:
            await baton.close()


# --- workspaces with a git remote --------------------------------------------------------


def load_yaml(tmp: Path, text: str) -> Settings:
    write(tmp / "conf" / "baton.yaml", text)
    return load_settings(cwd=tmp)


def refused_yaml(tmp: Path, text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_yaml(tmp, text)
    return str(caught.value)


def test_a_workspace_may_name_a_remote_and_a_base(tmp: Path) -> None:
    settings = load_yaml(
        tmp,
        "workspaces:\n"
        f"  C0API: {{path: {tmp / 'repos' / 'api'}, remote: 'https://github.com/acme/api.git',"
        " base: develop}\n"
        f"  C0WEB: {tmp / 'repos' / 'web'}\n",
    )
    api = tmp / "repos" / "api"
    assert settings.workspaces == {"C0API": api, "C0WEB": tmp / "repos" / "web"}
    repository = settings.repositories[api]
    assert (repository.remote, repository.base) == ("https://github.com/acme/api.git", "develop")
    assert list(settings.repositories) == [api]  # the plain form names no remote


def test_a_missing_directory_with_a_remote_is_made_to_clone_into(tmp: Path) -> None:
    target = tmp / "repos" / "new"
    settings = load_yaml(
        tmp,
        f"workspaces:\n  C0NEW: {{path: {target}, remote: 'http://127.0.0.1:9/acme/new.git'}}\n",
    )
    assert target.is_dir() and settings.repositories[target].base == "main"


@pytest.mark.parametrize(
    ("remote", "why"),
    [
        ("git@github.com:acme/api.git", "http(s) URL"),
        ("ssh://github.com/acme/api.git", "http(s) URL"),
        ("file:///srv/repos/api.git", "http(s) URL"),
        ("https://x-access-token:ghp_secret@github.com/acme/api.git", "credentials"),
        ("https://github.com/acme", "owner/repository"),
        ("https://github.com/acme/api.git?ref=main", "query"),
        ("https://github.com/-acme/api.git", "owner/repository"),
    ],
)
def test_a_remote_baton_cannot_use_is_refused(tmp: Path, remote: str, why: str) -> None:
    message = refused_yaml(
        tmp, f"workspaces:\n  C0API: {{path: {tmp / 'repos' / 'api'}, remote: '{remote}'}}\n"
    )
    assert why in message
    assert "ghp_secret" not in message


@pytest.mark.parametrize("base", ["-main", "baton/x", "main..dev", "refs/../x", "a b", "x.lock"])
def test_a_base_that_is_no_branch_name_is_refused(tmp: Path, base: str) -> None:
    message = refused_yaml(
        tmp,
        f"workspaces:\n  C0API: {{path: {tmp / 'repos' / 'api'}, "
        f"remote: 'https://github.com/acme/api.git', base: '{base}'}}\n",
    )
    assert "branch name" in message


def test_channels_sharing_a_directory_must_agree_on_its_remote(tmp: Path) -> None:
    api = tmp / "repos" / "api"
    message = refused_yaml(
        tmp,
        "workspaces:\n"
        f"  C0API: {{path: {api}, remote: 'https://github.com/acme/api.git'}}\n"
        f"  C0OPS: {{path: {api}, remote: 'https://github.com/acme/other.git'}}\n",
    )
    assert "share its remote" in message


def test_forge_secrets_are_redacted_like_slacks(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_redactMe123456")
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", "whsec_redactMe")
    settings = load_yaml(tmp, "model: m\n")
    assert {"ghp_redactMe123456", "whsec_redactMe"} <= set(settings.secret_values)
