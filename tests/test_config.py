"""Settings from the environment and baton.yaml; bad configuration names key and file."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest

from bot.config import DEFAULT_AGENTS_DIR, SandboxConfig, load_settings
from bot.errors import ConfigError
from bot.redaction import Redactor


@pytest.fixture(autouse=True)
def home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home of the test's own, beside (never inside) tmp_path, so the default
    state directory is made there and not in the real home."""
    home = tmp_path_factory.mktemp("home").resolve()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    return home


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_defaults_without_a_config_file(tmp_path: Path, home: Path) -> None:
    settings = load_settings(cwd=tmp_path)
    assert settings.config_path is None
    assert settings.workspace == tmp_path.resolve()
    assert settings.state_dir == home / ".local" / "state" / "baton"
    assert settings.database_url == f"sqlite:///{home}/.local/state/baton/baton.db"
    assert settings.database_origin == "state_dir"
    assert settings.sandbox == SandboxConfig(network=False)
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
    # The shipped agents stay, after the configured directories.
    assert settings.agent_dirs == (
        tmp_path.resolve() / "team-agents",
        Path("/srv/baton/agents"),
        DEFAULT_AGENTS_DIR,
    )
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


# ------------------------------------------------------------ state directory


def test_the_default_state_dir_is_made_private(tmp_path: Path, home: Path) -> None:
    settings = load_settings(cwd=tmp_path)
    assert settings.state_dir.is_dir()
    assert stat.S_IMODE(settings.state_dir.stat().st_mode) == 0o700
    assert not (tmp_path / "baton.db").exists()


def test_xdg_state_home_is_honoured_when_absolute(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "xdg"))
    assert load_settings(cwd=tmp_path).state_dir == home / "xdg" / "baton"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/xdg")  # invalid per the spec: ignored
    assert load_settings(cwd=tmp_path).state_dir == home / ".local" / "state" / "baton"


def test_an_explicit_state_dir_holds_the_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    monkeypatch.setenv("BATON_WORKSPACE", str(workspace))
    monkeypatch.setenv("BATON_STATE_DIR", "var/baton")  # relative: from the start directory
    settings = load_settings(cwd=tmp_path)
    state = tmp_path.resolve() / "var" / "baton"
    assert settings.state_dir == state and state.is_dir()
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert settings.database_url == f"sqlite:///{state}/baton.db"
    assert settings.database_origin == "state_dir"


def test_an_empty_state_dir_variable_means_the_default(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BATON_STATE_DIR", "")
    assert load_settings(cwd=tmp_path).state_dir == home / ".local" / "state" / "baton"


def test_a_state_dir_open_to_others_is_warned_about(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    workspace, state = tmp_path / "ws", tmp_path / "state"
    workspace.mkdir()
    state.mkdir(mode=0o755)
    state.chmod(0o755)
    monkeypatch.setenv("BATON_WORKSPACE", str(workspace))
    monkeypatch.setenv("BATON_STATE_DIR", str(state))
    with caplog.at_level(logging.WARNING, logger="bot.config"):
        load_settings(cwd=tmp_path)
    assert f"chmod 700 {state.resolve()}" in caplog.text


def test_an_uncreatable_state_dir_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file").write_text("")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    monkeypatch.setenv("BATON_WORKSPACE", str(workspace))
    monkeypatch.setenv("BATON_STATE_DIR", str(tmp_path / "file" / "state"))
    with pytest.raises(ConfigError, match=r"BATON_STATE_DIR: cannot create .*file/state"):
        load_settings(cwd=tmp_path)


def test_a_legacy_database_in_the_start_directory_is_kept_and_warned_about(
    tmp_path: Path, home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    legacy = write(tmp_path / "baton.db", "")
    with caplog.at_level(logging.WARNING, logger="bot.config"):
        settings = load_settings(cwd=tmp_path)
    assert settings.database_url == f"sqlite:///{legacy.resolve()}"
    assert settings.database_origin == "legacy"
    [record] = [r for r in caplog.records if r.name == "bot.config"]
    message = record.getMessage()
    assert str(legacy.resolve()) in message
    assert f"mv {legacy.resolve()}* {settings.state_dir}/" in message
    assert "DATABASE_URL" in message


def test_an_explicit_database_url_wins_over_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path / "baton.db", "")
    monkeypatch.setenv("DATABASE_URL", "postgresql://baton:pw@db.internal/baton")
    with caplog.at_level(logging.WARNING, logger="bot.config"):
        settings = load_settings(cwd=tmp_path)
    assert settings.database_url == "postgresql://baton:pw@db.internal/baton"
    assert settings.database_origin == "explicit"
    assert "baton.db" not in caplog.text


def test_secret_values_are_the_configured_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-bot")
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "signing")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-key")
    monkeypatch.setenv("DATABASE_URL", "postgresql://baton:p%40ss@db/baton")
    settings = load_settings(cwd=tmp_path)
    assert settings.secret_values == ("xoxb-bot", "signing", "sk-key", "p@ss")


# ------------------------------------------------------------ refused workspaces


@pytest.mark.parametrize(
    ("workspace", "state", "problem"),
    [
        ("/", None, "is the root directory"),
        ("{home}", "{tmp}/state", "is your home directory"),
        ("{home_parent}", "{tmp}/state", "contains your home directory {home}"),
        ("{tmp}/ws", "{tmp}/ws", "is Baton's state directory"),
        ("{tmp}/ws", "{tmp}/ws/.state", "contains Baton's state directory {tmp}/ws/.state"),
        ("{tmp}", "{tmp}/a/b/state", "contains Baton's state directory {tmp}/a/b/state"),
    ],
)
def test_unsafe_workspaces_are_refused(
    tmp_path: Path,
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    workspace: str,
    state: str | None,
    problem: str,
) -> None:
    tmp = tmp_path.resolve()

    def fill(text: str) -> str:
        return text.format(home=home, home_parent=home.parent, tmp=tmp)

    (tmp / "ws").mkdir()
    monkeypatch.setenv("BATON_WORKSPACE", fill(workspace))
    if state is not None:
        monkeypatch.setenv("BATON_STATE_DIR", fill(state))
    with pytest.raises(ConfigError) as caught:
        load_settings(cwd=tmp_path)
    message = str(caught.value)
    assert message.startswith(f"BATON_WORKSPACE: {fill(workspace)} {fill(problem)}")
    assert "BATON_STATE_DIR outside it" in message
    # Refused before anything was made inside the workspace.
    assert not (tmp / "ws" / ".state").exists() and not (tmp / "a").exists()


def test_the_start_directory_as_workspace_is_named_as_such(tmp_path: Path, home: Path) -> None:
    with pytest.raises(ConfigError, match=r"the current directory, as BATON_WORKSPACE is not set"):
        load_settings(cwd=home)


def test_the_default_state_dir_inside_the_workspace_is_refused(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A workspace of ~/.local holds the default state directory ~/.local/state/baton.
    (home / ".local").mkdir()
    monkeypatch.setenv("BATON_WORKSPACE", str(home / ".local"))
    with pytest.raises(ConfigError, match="contains Baton's state directory"):
        load_settings(cwd=tmp_path)


# ------------------------------------------------------------ sandbox section


def test_sandbox_network_is_read_from_the_file(tmp_path: Path) -> None:
    write(tmp_path / "baton.yaml", "sandbox:\n  network: true\n")
    assert load_settings(cwd=tmp_path).sandbox.network is True
    write(tmp_path / "baton.yaml", "sandbox: {}\n")
    assert load_settings(cwd=tmp_path).sandbox.network is False


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sandbox:\n  netwrok: true\n", "unknown key 'sandbox.netwrok'"),
        ("sandbox:\n  network: maybe\n", "'sandbox.network': Input should be a valid boolean"),
        ("sandbox: true\n", "'sandbox'"),
    ],
)
def test_bad_sandbox_section_is_refused(tmp_path: Path, text: str, message: str) -> None:
    write(tmp_path / "baton.yaml", text)
    with pytest.raises(ConfigError) as caught:
        load_settings(cwd=tmp_path)
    assert message in str(caught.value)


def test_shipped_agents_can_be_left_out_and_aliases_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "baton.yaml").write_text(
        "agent_dirs: [team-agents]\n"
        "shipped_agents: false\n"
        "model_aliases: {sonnet: gpt-4.1, opus: o3}\n"
        "tool_aliases: {WebFetch: mcp__web__fetch}\n"
    )
    monkeypatch.setenv("BATON_WORKSPACE", str(tmp_path))
    settings = load_settings(cwd=tmp_path)
    assert settings.agent_dirs == (tmp_path.resolve() / "team-agents",)
    assert settings.model_aliases == {"sonnet": "gpt-4.1", "opus": "o3"}
    assert settings.tool_aliases == {"WebFetch": "mcp__web__fetch"}


@pytest.mark.parametrize(
    "entry",
    [
        "model_aliases: {sonnet: 'gpt 4'}",  # a space in a model name
        "model_aliases: {sonnet: ''}",
        "tool_aliases: {WebFetch: '../../bin/sh'}",  # not a tool name
        "tool_aliases: {WebFetch: [mcp__a__b]}",
        "shipped_agents: maybe",
    ],
)
def test_a_bad_alias_or_switch_stops_the_start_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str
) -> None:
    (tmp_path / "baton.yaml").write_text(entry + "\n")
    monkeypatch.setenv("BATON_WORKSPACE", str(tmp_path))
    key = entry.split(":", 1)[0]
    with pytest.raises(ConfigError, match=key):
        load_settings(cwd=tmp_path)


def test_the_environment_names_the_endpoint_and_content_capture(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert load_settings(cwd=tmp_path).tracing.endpoint is None
    assert not load_settings(cwd=tmp_path).tracing.capture_content

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    assert load_settings(cwd=tmp_path).tracing.endpoint == "http://collector:4318/v1/traces"
    # The traces endpoint is a whole URL, taken as it is, and wins.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://traces.example/otlp")
    assert load_settings(cwd=tmp_path).tracing.endpoint == "https://traces.example/otlp"

    monkeypatch.setenv("OTEL_CAPTURE_CONTENT", "true")
    assert load_settings(cwd=tmp_path).tracing.capture_content
    monkeypatch.setenv("OTEL_CAPTURE_CONTENT", "false")
    assert not load_settings(cwd=tmp_path).tracing.capture_content


def test_the_exporters_header_values_are_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A collector's API key travels in OTEL_EXPORTER_OTLP_HEADERS: no text shown to a
    person, no span, no log line may carry it, written or URL-decoded."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "api-key=collector%2Bkey-1, x-tenant = acme")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "authorization=Bearer%20tr4ces")
    secrets = load_settings(cwd=tmp_path).secret_values
    for value in ("collector%2Bkey-1", "collector+key-1", "acme", "Bearer tr4ces"):
        assert value in secrets, value
    assert Redactor(secrets)("the key is collector+key-1") == "the key is ***"
