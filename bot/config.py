"""Settings: the environment (names in DESIGN.md) plus an optional baton.yaml.

Nothing else in Baton reads the environment; `app.py` loads settings once and
hands them down.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from bot.errors import ConfigError
from bot.permissions.rules import Rule


def _shipped_agents_dir() -> Path:
    """Baton's own agents/: beside the package in a checkout, else where a wheel put it."""
    beside = Path(__file__).resolve().parent.parent / "agents"
    installed = Path(sys.prefix) / "share" / "baton" / "agents"
    return beside if beside.is_dir() or not installed.is_dir() else installed


DEFAULT_AGENTS_DIR = _shipped_agents_dir()
DEFAULT_CONFIG_NAME = "baton.yaml"


class PermissionsConfig(BaseModel):
    """The `permissions` section: rule strings, checked for syntax at load time."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    allow: tuple[str, ...] = ()
    ask: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()

    @field_validator("allow", "ask", "deny")
    @classmethod
    def _rules_parse(cls, rules: tuple[str, ...]) -> tuple[str, ...]:
        for rule in rules:
            Rule.parse(rule)
        return rules


class FileConfig(BaseModel):
    """What baton.yaml may hold; every key optional, unknown keys refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str | None = None
    max_turns: PositiveInt = 50
    max_background_tasks: PositiveInt = 16
    approval_timeout_s: float = Field(default=600, gt=0)
    approvers: tuple[str, ...] = ()
    agent_dirs: tuple[Path, ...] | None = None
    permissions: PermissionsConfig = PermissionsConfig()


class EnvironmentSettings(BaseSettings):
    """The operator's environment variables."""

    model_config = SettingsConfigDict(extra="ignore", case_sensitive=True, frozen=True)

    slack_bot_token: str | None = Field(default=None, validation_alias="SLACK_BOT_TOKEN")
    slack_signing_secret: str | None = Field(default=None, validation_alias="SLACK_SIGNING_SECRET")
    slack_app_token: str | None = Field(default=None, validation_alias="SLACK_APP_TOKEN")
    slack_api_url: str = Field(default="https://slack.com/api/", validation_alias="SLACK_API_URL")
    port: int = Field(default=3000, ge=1, le=65535, validation_alias="PORT")
    openai_api_key: str | None = Field(default=None, validation_alias="OPENAI_API_KEY")
    openai_base_url: str | None = Field(default=None, validation_alias="OPENAI_BASE_URL")
    baton_model: str | None = Field(default=None, validation_alias="BATON_MODEL")
    database_url: str = Field(default="sqlite:///baton.db", validation_alias="DATABASE_URL")
    baton_workspace: Path | None = Field(default=None, validation_alias="BATON_WORKSPACE")
    baton_config: Path | None = Field(default=None, validation_alias="BATON_CONFIG")


class Settings(BaseModel):
    """Everything Baton is configured with, merged and checked."""

    model_config = ConfigDict(frozen=True)

    slack_bot_token: str | None
    slack_signing_secret: str | None
    slack_app_token: str | None
    slack_api_url: str
    port: int
    openai_api_key: str | None
    openai_base_url: str | None
    model: str | None
    database_url: str
    workspace: Path
    config_path: Path | None
    max_turns: int
    max_background_tasks: int
    approval_timeout_s: float
    approvers: tuple[str, ...]
    agent_dirs: tuple[Path, ...]
    permissions: PermissionsConfig

    @field_validator("slack_api_url")
    @classmethod
    def _api_url_ends_with_slash(cls, url: str) -> str:
        # slack_sdk joins method names onto the base URL: without the slash,
        # https://host/api + chat.postMessage would become https://host/chat.postMessage.
        return url if url.endswith("/") else url + "/"

    @property
    def socket_mode(self) -> bool:
        return bool(self.slack_app_token)


def load_settings(cwd: Path | None = None) -> Settings:
    """Read the environment and baton.yaml; raise `ConfigError` naming what is wrong."""
    base = (cwd or Path.cwd()).resolve()
    try:
        env = EnvironmentSettings()
    except ValidationError as exc:
        raise ConfigError(_describe(exc, "the environment", by_alias=True)) from exc
    config_path = _find_config(env.baton_config, base)
    file_config = load_file_config(config_path) if config_path else FileConfig()
    workspace = (env.baton_workspace or base).expanduser()
    if not workspace.is_absolute():
        workspace = base / workspace
    if not workspace.is_dir():
        raise ConfigError(f"BATON_WORKSPACE: {workspace} is not a directory")
    if file_config.agent_dirs is None:
        agent_dirs: tuple[Path, ...] = (DEFAULT_AGENTS_DIR,)
    else:
        # Relative agent directories are read from where the config file lives.
        anchor = config_path.parent if config_path else base
        agent_dirs = tuple(
            d.expanduser() if d.expanduser().is_absolute() else anchor / d
            for d in file_config.agent_dirs
        )
    return Settings(
        slack_bot_token=env.slack_bot_token or None,
        slack_signing_secret=env.slack_signing_secret or None,
        slack_app_token=env.slack_app_token or None,
        slack_api_url=env.slack_api_url,
        port=env.port,
        openai_api_key=env.openai_api_key,
        openai_base_url=env.openai_base_url or None,
        model=env.baton_model or file_config.model,
        database_url=env.database_url,
        workspace=workspace.resolve(),
        config_path=config_path,
        max_turns=file_config.max_turns,
        max_background_tasks=file_config.max_background_tasks,
        approval_timeout_s=file_config.approval_timeout_s,
        approvers=file_config.approvers,
        agent_dirs=agent_dirs,
        permissions=file_config.permissions,
    )


def _find_config(explicit: Path | None, base: Path) -> Path | None:
    if explicit is not None:
        path = explicit.expanduser()
        path = path if path.is_absolute() else base / path
        if not path.is_file():
            raise ConfigError(f"BATON_CONFIG: {path} does not exist or is not a file")
        return path.resolve()
    default = base / DEFAULT_CONFIG_NAME
    return default.resolve() if default.is_file() else None


def load_file_config(path: Path) -> FileConfig:
    """Parse and validate one baton.yaml."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror})") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: is not valid YAML ({exc})") from exc
    if data is None:
        return FileConfig()
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: must be a mapping of keys to values, not {type(data).__name__}")
    try:
        return FileConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, str(path))) from exc


def _describe(exc: ValidationError, where: str, *, by_alias: bool = False) -> str:
    problems = []
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"]) or "(top level)"
        if error["type"] == "extra_forbidden":
            problems.append(f"unknown key '{key}'")
        else:
            message = error["msg"]
            if error["type"] == "value_error":
                message = message.removeprefix("Value error, ")
            problems.append(f"'{key}': {message} (got {_short(error.get('input'))})")
    lines = "\n  ".join(problems)
    return f"{where}: invalid configuration:\n  {lines}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
