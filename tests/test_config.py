"""Settings from the environment and baton.yaml; bad configuration names key and file."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import DEFAULT_AGENTS_DIR, load_settings
from bot.errors import ConfigError


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_defaults_without_a_config_file(tmp_path: Path) -> None:
    settings = load_settings(cwd=tmp_path)
    assert settings.config_path is None
    assert settings.workspace == tmp_path.resolve()
    assert settings.database_url == "sqlite:///baton.db"
    assert settings.slack_api_url == "https://slack.com/api/"
    assert settings.port == 3000
    assert (settings.max_turns, settings.max_background_tasks) == (50, 16)
    assert settings.approval_timeout_s == 600
    assert settings.agent_dirs == (DEFAULT_AGENTS_DIR,)
    assert (
        DEFAULT_AGENTS_DIR.name == "agents" and DEFAULT_AGENTS_DIR.parent.joinpath("bot").is_dir()
    )
    assert settings.model is None
    assert not settings.socket_mode


def test_environment_and_yaml_are_merged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(
        tmp_path / "baton.yaml",
        """
model: gpt-4.1-mini
max_turns: 12
max_background_tasks: 4
approval_timeout_s: 30
approvers: [U012ABCDEF]
agent_dirs: [team-agents, /srv/baton/agents]
permissions:
  allow: [read_file, list_dir, glob, grep, "bash(git status*)"]
  ask: [bash, write_file, edit_file]
  deny: ["read_file(**/.env)"]
""",
    )
    workspace = tmp_path / "ws"
    workspace.mkdir()
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-1")
    monkeypatch.setenv("SLACK_APP_TOKEN", "xapp-1")
    monkeypatch.setenv("SLACK_API_URL", "http://127.0.0.1:9/api/")
    monkeypatch.setenv("PORT", "8080")
    monkeypatch.setenv("DATABASE_URL", "sqlite:////tmp/x.db")
    monkeypatch.setenv("BATON_WORKSPACE", str(workspace))
    settings = load_settings(cwd=tmp_path)
    assert settings.config_path == (tmp_path / "baton.yaml").resolve()
    assert settings.model == "gpt-4.1-mini"
    assert settings.max_turns == 12 and settings.max_background_tasks == 4
    assert settings.approval_timeout_s == 30
    assert settings.approvers == ("U012ABCDEF",)
    assert settings.agent_dirs == (tmp_path.resolve() / "team-agents", Path("/srv/baton/agents"))
    assert settings.permissions.deny == ("read_file(**/.env)",)
    assert settings.slack_bot_token == "xoxb-1" and settings.socket_mode
    assert settings.slack_api_url == "http://127.0.0.1:9/api/"
    assert settings.port == 8080
    assert settings.database_url == "sqlite:////tmp/x.db"
    assert settings.workspace == workspace.resolve()
    monkeypatch.setenv("BATON_MODEL", "other-model")
    assert load_settings(cwd=tmp_path).model == "other-model"


def test_baton_config_points_at_another_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write(tmp_path / "elsewhere.yml", "model: m1\n")
    monkeypatch.setenv("BATON_CONFIG", str(config))
    assert load_settings(cwd=tmp_path).model == "m1"
    monkeypatch.setenv("BATON_CONFIG", str(tmp_path / "missing.yml"))
    with pytest.raises(ConfigError, match=r"BATON_CONFIG: .*missing.yml does not exist"):
        load_settings(cwd=tmp_path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("modle: gpt-4\n", "unknown key 'modle'"),
        ("permissions:\n  allwo: [bash]\n", "unknown key 'permissions.allwo'"),
        ("max_turns: lots\n", "'max_turns': Input should be a valid integer"),
        ("max_turns: 0\n", "'max_turns': Input should be greater than 0"),
        ("approval_timeout_s: -1\n", "'approval_timeout_s'"),
        ("approvers: U1\n", "'approvers'"),
        ("permissions:\n  deny: ['bash(']\n", "'permissions.deny': 'bash(' is not a rule"),
        ("permissions:\n  ask: ['bash()']\n", "empty pattern"),
        ("- just\n- a list\n", "must be a mapping"),
        ("model: [unclosed\n", "is not valid YAML"),
    ],
)
def test_bad_config_names_the_key_and_the_file(tmp_path: Path, text: str, message: str) -> None:
    write(tmp_path / "baton.yaml", text)
    with pytest.raises(ConfigError) as caught:
        load_settings(cwd=tmp_path)
    assert str(tmp_path / "baton.yaml") in str(caught.value)
    assert message in str(caught.value)


def test_bad_environment_values_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PORT", "eighty")
    with pytest.raises(ConfigError, match=r"(?s)the environment: .*'PORT'"):
        load_settings(cwd=tmp_path)


def test_missing_workspace_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATON_WORKSPACE", str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match=r"BATON_WORKSPACE: .* is not a directory"):
        load_settings(cwd=tmp_path)


def test_empty_config_file_means_defaults(tmp_path: Path) -> None:
    write(tmp_path / "baton.yaml", "# nothing yet\n")
    assert load_settings(cwd=tmp_path).max_turns == 50


def test_slack_api_url_gets_its_trailing_slash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACK_API_URL", "http://127.0.0.1:9/api")
    assert load_settings(cwd=tmp_path).slack_api_url == "http://127.0.0.1:9/api/"
