"""Settings: the environment (names in DESIGN.md) plus an optional baton.yaml.

Nothing else in Baton reads the environment; `app.py` loads settings once and
hands them down.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import unquote

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveInt,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from bot.errors import ConfigError
from bot.forge.remote import RemoteError, parse_remote
from bot.ids import USER_OR_GROUP_PATTERN, ChannelId, UserOrGroupId
from bot.permissions.rules import Rule
from bot.redaction import url_password
from bot.triggers.definitions import (
    ScheduleConfig,
    TriggersConfig,
    WatchConfig,
    WebhookConfig,
    check_unique,
)

logger = logging.getLogger(__name__)


def _shipped_agents_dir() -> Path:
    """Baton's own agents/: beside the package in a checkout, else where a wheel put it."""
    beside = Path(__file__).resolve().parent.parent / "agents"
    installed = Path(sys.prefix) / "share" / "baton" / "agents"
    return beside if beside.is_dir() or not installed.is_dir() else installed


DEFAULT_AGENTS_DIR = _shipped_agents_dir()
DEFAULT_CONFIG_NAME = "baton.yaml"
DATABASE_FILE_NAME = "baton.db"
# On SIGTERM, how long runs and background tasks may finish: within the 30 s most
# platforms allow before SIGKILL, with room to mark what is left as interrupted.
DEFAULT_SHUTDOWN_GRACE_S = 25.0

# Where the database URL came from: the operator (DATABASE_URL), the state
# directory (the default), or a baton.db left in the start directory by an
# install from before the state directory existed.
DatabaseOrigin = Literal["explicit", "state_dir", "legacy"]

_USER_OR_GROUP = re.compile(USER_OR_GROUP_PATTERN)

# A name as an agent file writes it (a model, a tool), and a model's name at the provider.
AliasName = Annotated[str, StringConstraints(pattern=r"^\S{1,200}$")]
ModelName = Annotated[str, StringConstraints(pattern=r"^\S{1,200}$")]
# A tool Baton has: built in (read_file) or an MCP server's (mcp__<server>__<tool>).
ToolName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")]


class AskRuleConfig(BaseModel):
    """An `ask` rule that names who may decide it: `{rule: "bash(git push*)", approvers: [S…]}`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rule: str
    approvers: tuple[UserOrGroupId, ...] = Field(min_length=1)

    @field_validator("rule")
    @classmethod
    def _rule_parses(cls, rule: str) -> str:
        Rule.parse(rule)
        return rule


class PermissionsConfig(BaseModel):
    """The `permissions` section: rule strings, checked for syntax at load time.

    An `ask` entry may also be a mapping naming its own approvers.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    allow: tuple[str, ...] = ()
    ask: tuple[str | AskRuleConfig, ...] = ()
    deny: tuple[str, ...] = ()

    @field_validator("allow", "deny")
    @classmethod
    def _rules_parse(cls, rules: tuple[str, ...]) -> tuple[str, ...]:
        for rule in rules:
            Rule.parse(rule)
        return rules

    @field_validator("ask")
    @classmethod
    def _ask_rules_parse(
        cls, rules: tuple[str | AskRuleConfig, ...]
    ) -> tuple[str | AskRuleConfig, ...]:
        for rule in rules:
            if isinstance(rule, str):
                Rule.parse(rule)
        return rules

    def ask_rules(self) -> tuple[Rule, ...]:
        """The `ask` list as rules, each with the approvers it names (if any)."""
        return tuple(
            Rule.parse(entry)
            if isinstance(entry, str)
            else Rule.parse(entry.rule).with_approvers(entry.approvers)
            for entry in self.ask
        )


class AccessConfig(BaseModel):
    """The `access` section: who may start runs. Empty lists restrict nothing."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    users: tuple[UserOrGroupId, ...] = ()
    user_groups: tuple[UserOrGroupId, ...] = ()
    channels: tuple[ChannelId, ...] = ()
    guests: bool = False
    external: bool = False
    # Who may open pull requests from a thread's change (user or group ids); empty:
    # whoever may cancel the run (who asked, and the approvers).
    pull_requests: tuple[UserOrGroupId, ...] = ()
    # Who may make, pause, resume and delete schedules from Slack (user or group ids);
    # empty: the approvers.
    schedulers: tuple[UserOrGroupId, ...] = ()


class LimitsConfig(BaseModel):
    """The `limits` section: concurrent runs and token budgets; 0 means no limit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    runs_per_user: NonNegativeInt = 3
    runs: NonNegativeInt = 32
    tokens_per_run: NonNegativeInt = 0
    tokens_per_user_per_day: NonNegativeInt = 0
    tokens_per_channel_per_day: NonNegativeInt = 0


class PriceConfig(BaseModel):
    """What a model costs, per million tokens, in the operator's currency."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: NonNegativeFloat
    output: NonNegativeFloat


class SandboxConfig(BaseModel):
    """The `sandbox` section: what commands in the sandbox may reach.

    Attributes:
        network: Whether commands share the host's network; by default they have
            only a loopback of their own.
        show_secrets: Secret files commands may see after all. Every other file of
            the workspace on the secret-path list (`.env` files, private keys and
            keystores, credentials, Terraform variables and state: see
            `bot.permissions.secret_paths`) is hidden from every command, whatever
            rule allowed it: it reads as an empty read-only file, a directory of
            secrets such as `.ssh/` as an empty one. Each entry is a path relative to
            the workspace (`config/.env.test`) or a glob as permission rules write
            them (`*` within a directory, `**` across, `**/` also at the top:
            `**/*.tfvars`); a directory shows what lies under it. They apply in each
            workspace directory and in sub-agents' worktrees. `read_file` still asks
            a person before reading a secret file, listed or not.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    network: bool = False
    show_secrets: tuple[str, ...] = ()

    @field_validator("show_secrets")
    @classmethod
    def _workspace_relative(cls, paths: tuple[str, ...]) -> tuple[str, ...]:
        # Only paths inside the workspace are hidden, so only those can be shown: an
        # absolute path or one climbing out with `..` would show nothing, silently.
        normalized = []
        for path in paths:
            cleaned = path.strip().removeprefix("./").rstrip("/")
            parts = cleaned.split("/")
            if not cleaned or cleaned == ".":
                raise ValueError(
                    f"{path!r} names no file: list paths or globs inside the workspace "
                    "(`**` shows every secret file)"
                )
            if cleaned.startswith(("/", "~")) or ".." in parts:
                raise ValueError(
                    f"{path!r} is not inside the workspace: give a path relative to the "
                    "workspace, like `config/.env.test` or `**/*.tfvars`"
                )
            normalized.append("/".join(part for part in parts if part not in ("", ".")))
        return tuple(normalized)


class ModelCallsConfig(BaseModel):
    """The `model_calls` section: how Baton talks to the provider on bad days."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_concurrent: PositiveInt = 32  # LLM calls in flight at once, for the whole process
    retry_deadline_s: float = Field(default=120, gt=0)  # retries of one call stop after it
    stall_timeout_s: float = Field(default=60, gt=0)  # no chunk for this long: retried
    answer_timeout_s: float = Field(default=900, gt=0)  # one answer, however it trickles


class TracingConfig(BaseModel):
    """OpenTelemetry traces (OTEL_* variables): where spans go, and whether message text
    goes with them (see `bot.tracing`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # The OTLP/HTTP traces URL; None: no traces, and nothing of the SDK is loaded.
    endpoint: str | None = None
    # Prompts, messages, tool arguments and outputs on spans, redacted (OTEL_CAPTURE_CONTENT).
    capture_content: bool = False
    # The values of the exporter's headers (a collector's API key, often): secrets.
    header_values: tuple[str, ...] = ()


# The environment variables holding Baton's own secrets: never handed to an MCP server,
# by name (`${OPENAI_API_KEY}` in a header or env) or by value.
SECRET_VARIABLES = (
    "SLACK_BOT_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_APP_TOKEN",
    "OPENAI_API_KEY",
    "DATABASE_URL",
    "GITHUB_TOKEN",
    "GITHUB_WEBHOOK_SECRET",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
)
# `${NAME}` in an MCP server's headers and env: the value of that environment variable.
ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# A server's name is the middle of its tools' names, `mcp__<server>__<tool>`: no `__`.
McpServerName = Annotated[
    str, StringConstraints(pattern=r"^[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*$", max_length=32)
]


class McpServerConfig(BaseModel):
    """One entry of `mcp_servers`: a stdio server (`command`) or a Streamable HTTP one
    (`url`).

    stdio: `command` (a list: the program and its arguments) runs in the OS sandbox
    with the server's own `env` plus PATH, HOME and LANG, read-only access to `paths`
    (the interpreter's prefix, the server's files) and the network only if `network`.
    HTTP: Baton calls `url`, sending `headers`. In `env` and `headers` values,
    `${NAME}` stands for that environment variable (tokens stay out of the file), except
    Baton's own secrets. `timeout_s` bounds each tool call.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: tuple[str, ...] | None = Field(default=None, min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    paths: tuple[Path, ...] = ()
    network: bool = False
    url: str | None = Field(default=None, pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_s: float = Field(default=60, gt=0, le=3600)

    @field_validator("command", mode="before")
    @classmethod
    def _command_is_a_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            raise ValueError(
                "must be a list: the program, then each argument (e.g. [my-server, --stdio])"
            )
        return value

    @field_validator("env", "headers")
    @classmethod
    def _no_baton_secrets(cls, values: dict[str, str]) -> dict[str, str]:
        for key, value in values.items():
            for name in ENV_REFERENCE.findall(value):
                if name in SECRET_VARIABLES:
                    raise ValueError(
                        f"{key} uses ${{{name}}}, one of Baton's own secrets: an MCP server "
                        "never gets them; give it a token of its own"
                    )
        return values

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command else "http"

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either `command` (a stdio server) or `url` (an HTTP one)")
        if self.command is not None and self.headers:
            raise ValueError("`headers` are for HTTP servers (`url`), not stdio ones")
        if self.url is not None and (self.env or self.paths or self.network):
            raise ValueError(
                "`env`, `paths` and `network` are for stdio servers (`command`); an HTTP "
                "server runs elsewhere"
            )
        return self


# A branch name git and the forge both accept, as an operator writes the base branch.
_BRANCH_NAME = re.compile(r"[A-Za-z0-9._/-]{1,200}")


class WorkspaceConfig(BaseModel):
    """A channel's workspace with a git remote: a branch per thread, pull requests.

    `path` is the checkout (cloned from `remote` when it is missing or empty); `base` is
    the branch each thread's branch starts from and its pull request targets.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: Path
    remote: str | None = None
    base: str = "main"

    @field_validator("remote")
    @classmethod
    def _remote_url(cls, remote: str | None) -> str | None:
        if remote is None:
            return None
        try:
            return parse_remote(remote).url
        except RemoteError as error:
            raise ValueError(str(error)) from None

    @field_validator("base")
    @classmethod
    def _base_branch(cls, base: str) -> str:
        if (
            not _BRANCH_NAME.fullmatch(base)
            or base.startswith(("-", "/", "baton/"))
            or base.endswith(("/", ".lock"))
            or ".." in base
            or "//" in base
        ):
            raise ValueError(f"{base!r} is not a branch name Baton can work from")
        return base


@dataclass(frozen=True, slots=True, kw_only=True)
class Repository:
    """A workspace directory's git remote, checked: where threads' branches go."""

    path: Path
    remote: str
    base: str


class FileConfig(BaseModel):
    """What baton.yaml may hold; every key optional, unknown keys refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str | None = None
    context_window: int = Field(default=128_000, ge=4_096)
    max_turns: PositiveInt = 50
    max_background_tasks: PositiveInt = 16
    # How deep sub-agents may nest (the main agent is depth 0), for agents whose file
    # lists `allowed_subagents`; 1 lets only the main agent delegate.
    max_task_depth: PositiveInt = 2
    approval_timeout_s: float = Field(default=600, gt=0)
    # On SIGTERM, how long runs and background tasks may go on finishing.
    shutdown_grace_s: float = Field(default=DEFAULT_SHUTDOWN_GRACE_S, gt=0)
    approvers: tuple[str, ...] = ()
    # Roots of agent files after the workspace's .baton/agents and .claude/agents; the
    # agents shipped with Baton come after them unless `shipped_agents` is false.
    agent_dirs: tuple[Path, ...] = ()
    shipped_agents: bool = True
    # Model names in agent files (Claude Code's sonnet, opus, haiku; any other) -> the
    # provider's model names.
    model_aliases: dict[AliasName, ModelName] = Field(default_factory=dict)
    # Tool names in agent files that Baton lacks (WebFetch, …) -> a tool it has (often
    # an MCP server's, mcp__<server>__<tool>).
    tool_aliases: dict[AliasName, ToolName] = Field(default_factory=dict)
    permissions: PermissionsConfig = PermissionsConfig()
    sandbox: SandboxConfig = SandboxConfig()
    self_approval: bool = True
    access: AccessConfig = AccessConfig()
    # Channel id -> its directory, or {path, remote, base} for a repository on a forge.
    workspaces: dict[ChannelId, Path | WorkspaceConfig] = Field(default_factory=dict)
    limits: LimitsConfig = LimitsConfig()
    prices: dict[str, PriceConfig] = Field(default_factory=dict)
    model_calls: ModelCallsConfig = ModelCallsConfig()
    mcp_servers: dict[McpServerName, McpServerConfig] = Field(default_factory=dict)
    # Work that starts itself (bot/triggers): cron schedules, POST /hooks/<name>, and
    # channels whose every new top-level message starts a run.
    schedules: tuple[ScheduleConfig, ...] = ()
    webhooks: tuple[WebhookConfig, ...] = ()
    watch: tuple[WatchConfig, ...] = ()

    @property
    def triggers(self) -> TriggersConfig:
        return TriggersConfig(schedules=self.schedules, webhooks=self.webhooks, watch=self.watch)

    @model_validator(mode="after")
    def _triggers(self) -> FileConfig:
        check_unique(self.schedules, self.webhooks, self.watch)
        # A webhook's secret is Baton's own: no MCP server may be handed it.
        hook_secrets = {hook.secret_env for hook in self.webhooks}
        for name, server in self.mcp_servers.items():
            for value in (*server.env.values(), *server.headers.values()):
                for used in ENV_REFERENCE.findall(value):
                    if used in hook_secrets:
                        raise ValueError(
                            f"mcp_servers.{name} uses ${{{used}}}, a webhook's secret: an MCP "
                            "server never gets it"
                        )
        return self

    @field_validator("approvers")
    @classmethod
    def _approver_ids(cls, approvers: tuple[str, ...]) -> tuple[str, ...]:
        for approver in approvers:
            if not _USER_OR_GROUP.fullmatch(approver):
                raise ValueError(
                    f"{approver!r} is not a Slack user id (U…, W…) or user group id (S…)"
                )
        return approvers


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
    database_url: str | None = Field(default=None, validation_alias="DATABASE_URL")
    # Strings, not paths: an empty variable means "unset", where Path("") would be ".".
    baton_state_dir: str | None = Field(default=None, validation_alias="BATON_STATE_DIR")
    xdg_state_home: str | None = Field(default=None, validation_alias="XDG_STATE_HOME")
    baton_workspace: Path | None = Field(default=None, validation_alias="BATON_WORKSPACE")
    baton_config: Path | None = Field(default=None, validation_alias="BATON_CONFIG")
    baton_shutdown_grace_s: float | None = Field(
        default=None, gt=0, validation_alias="BATON_SHUTDOWN_GRACE_S"
    )
    github_token: str | None = Field(default=None, validation_alias="GITHUB_TOKEN")
    github_app_id: str | None = Field(default=None, validation_alias="GITHUB_APP_ID")
    github_app_private_key: str | None = Field(
        default=None, validation_alias="GITHUB_APP_PRIVATE_KEY"
    )
    github_api_url: str = Field(default="https://api.github.com", validation_alias="GITHUB_API_URL")
    github_webhook_secret: str | None = Field(
        default=None, validation_alias="GITHUB_WEBHOOK_SECRET"
    )
    # The OTLP exporter's own variables: traces go where these say (the traces one wins).
    otel_exporter_otlp_endpoint: str | None = Field(
        default=None, validation_alias="OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    otel_exporter_otlp_traces_endpoint: str | None = Field(
        default=None, validation_alias="OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    )
    otel_capture_content: bool = Field(default=False, validation_alias="OTEL_CAPTURE_CONTENT")
    # Read by the exporter itself; Baton reads them only to keep their values secret.
    otel_exporter_otlp_headers: str | None = Field(
        default=None, validation_alias="OTEL_EXPORTER_OTLP_HEADERS"
    )
    otel_exporter_otlp_traces_headers: str | None = Field(
        default=None, validation_alias="OTEL_EXPORTER_OTLP_TRACES_HEADERS"
    )


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
    database_origin: DatabaseOrigin
    state_dir: Path
    workspace: Path
    config_path: Path | None
    max_turns: int
    max_background_tasks: int
    max_task_depth: int = 2
    approval_timeout_s: float
    approvers: tuple[str, ...]
    # Every root of agent files after the workspace's own (.baton/agents, .claude/agents):
    # `agent_dirs` as configured, then the shipped agents unless `shipped_agents: false`.
    agent_dirs: tuple[Path, ...]
    model_aliases: dict[str, str] = Field(default_factory=dict)
    tool_aliases: dict[str, str] = Field(default_factory=dict)
    permissions: PermissionsConfig
    sandbox: SandboxConfig
    self_approval: bool = True
    access: AccessConfig = AccessConfig()
    # Channel id -> its own workspace directory (resolved, checked); others use `workspace`.
    workspaces: dict[str, Path] = Field(default_factory=dict)
    # Workspace directory (resolved) -> its git remote, for those that name one.
    repositories: dict[Path, Repository] = Field(default_factory=dict)
    # The forge: GITHUB_TOKEN, or a GitHub App (its id and the path of its key file),
    # its API, and the secret its webhooks are signed with.
    github_token: str | None = None
    github_app_id: str | None = None
    github_app_private_key: Path | None = None
    github_api_url: str = "https://api.github.com"
    github_webhook_secret: str | None = None
    limits: LimitsConfig = LimitsConfig()
    prices: dict[str, PriceConfig] = Field(default_factory=dict)
    context_window: int = 128_000
    model_calls: ModelCallsConfig = ModelCallsConfig()
    shutdown_grace_s: float = Field(default=DEFAULT_SHUTDOWN_GRACE_S, gt=0)
    # Server name -> its entry, `paths` made absolute (relative ones from the config's
    # directory).
    mcp_servers: dict[str, McpServerConfig] = Field(default_factory=dict)
    tracing: TracingConfig = TracingConfig()
    # Schedules, webhooks and watched channels as baton.yaml said at start (a reload
    # reads them again: bot/triggers/book.py), and each webhook's secret by its name.
    triggers: TriggersConfig = TriggersConfig()
    webhook_secrets: dict[str, str] = Field(default_factory=dict)

    @field_validator("slack_api_url")
    @classmethod
    def _api_url_ends_with_slash(cls, url: str) -> str:
        # slack_sdk joins method names onto the base URL: without the slash,
        # https://host/api + chat.postMessage would become https://host/chat.postMessage.
        return url if url.endswith("/") else url + "/"

    @property
    def socket_mode(self) -> bool:
        return bool(self.slack_app_token)

    @property
    def secret_values(self) -> tuple[str, ...]:
        """The values no text shown to a person may contain (see `bot.redaction`)."""
        candidates = (
            self.slack_bot_token,
            self.slack_signing_secret,
            self.slack_app_token,
            self.openai_api_key,
            url_password(self.database_url),
            self.github_token,
            self.github_webhook_secret,
            *self.tracing.header_values,
            *self.webhook_secrets.values(),
        )
        return tuple(value for value in candidates if value)


def load_settings(cwd: Path | None = None) -> Settings:
    """Read the environment and baton.yaml; raise `ConfigError` naming what is wrong."""
    base = (cwd or Path.cwd()).resolve()
    try:
        env = EnvironmentSettings()
    except ValidationError as exc:
        raise ConfigError(_describe(exc, "the environment", by_alias=True)) from exc
    config_path = _find_config(env.baton_config, base)
    file_config = load_file_config(config_path) if config_path else FileConfig()
    if not file_config.self_approval and not file_config.approvers:
        raise ConfigError(
            f"{config_path}: self_approval is false and approvers is empty, so nobody could "
            "approve anything; list approvers or set self_approval: true"
        )
    workspace = (env.baton_workspace or base).expanduser()
    if not workspace.is_absolute():
        workspace = base / workspace
    if not workspace.is_dir():
        raise ConfigError(f"BATON_WORKSPACE: {workspace} is not a directory")
    workspace = workspace.resolve()
    state_dir = _state_dir(env, base)
    # Checked before the state directory is made, so a refused start leaves
    # nothing behind inside the workspace.
    check_workspace(workspace, state_dir, named=env.baton_workspace is not None)
    anchor = config_path.parent if config_path else base
    workspaces, repositories = _channel_workspaces(
        file_config.workspaces, default=workspace, state_dir=state_dir, anchor=anchor
    )
    _make_state_dir(state_dir)
    database_url, database_origin = _database_url(env.database_url, state_dir, base)
    # Relative agent directories are read from where the config file lives.
    agent_dirs = tuple(
        dict.fromkeys(
            [
                *(
                    d.expanduser() if d.expanduser().is_absolute() else anchor / d
                    for d in file_config.agent_dirs
                ),
                *((DEFAULT_AGENTS_DIR,) if file_config.shipped_agents else ()),
            ]
        )
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
        database_url=database_url,
        database_origin=database_origin,
        state_dir=state_dir,
        workspace=workspace,
        config_path=config_path,
        max_turns=file_config.max_turns,
        max_background_tasks=file_config.max_background_tasks,
        max_task_depth=file_config.max_task_depth,
        approval_timeout_s=file_config.approval_timeout_s,
        approvers=file_config.approvers,
        agent_dirs=agent_dirs,
        model_aliases=file_config.model_aliases,
        tool_aliases=file_config.tool_aliases,
        permissions=file_config.permissions,
        sandbox=file_config.sandbox,
        self_approval=file_config.self_approval,
        access=file_config.access,
        workspaces=workspaces,
        repositories=repositories,
        github_token=env.github_token or None,
        github_app_id=env.github_app_id or None,
        github_app_private_key=_key_path(env.github_app_private_key, base),
        github_api_url=env.github_api_url,
        github_webhook_secret=env.github_webhook_secret or None,
        limits=file_config.limits,
        prices=file_config.prices,
        context_window=file_config.context_window,
        model_calls=file_config.model_calls,
        shutdown_grace_s=env.baton_shutdown_grace_s or file_config.shutdown_grace_s,
        mcp_servers={
            name: _anchored(server, config_path.parent if config_path else base)
            for name, server in file_config.mcp_servers.items()
        },
        triggers=file_config.triggers,
        webhook_secrets=webhook_secrets(file_config.triggers, config_path),
        tracing=TracingConfig(
            endpoint=_traces_endpoint(env),
            capture_content=env.otel_capture_content,
            header_values=_header_values(
                env.otel_exporter_otlp_headers, env.otel_exporter_otlp_traces_headers
            ),
        ),
    )


def webhook_secrets(triggers: TriggersConfig, config_path: Path | None) -> dict[str, str]:
    """Each webhook's secret, read from the variable its `secret_env` names; a webhook
    whose variable is unset or empty is refused (it could never be verified)."""
    secrets: dict[str, str] = {}
    for hook in triggers.webhooks:
        value = os.environ.get(hook.secret_env, "")
        if not value:
            raise ConfigError(
                f"{config_path}: webhooks.{hook.name}: secret_env {hook.secret_env} is not set "
                "in the environment; set it to the secret the sender signs with"
            )
        if hook.secret_env in SECRET_VARIABLES:
            raise ConfigError(
                f"{config_path}: webhooks.{hook.name}: secret_env {hook.secret_env} is one of "
                "Baton's own secrets; give the webhook a secret of its own"
            )
        secrets[hook.name] = value
    return secrets


def _traces_endpoint(env: EnvironmentSettings) -> str | None:
    """Where spans go, as the OTLP exporter reads its variables: the traces endpoint as
    it is, else the base endpoint with `/v1/traces`; None (no traces) when neither."""
    if env.otel_exporter_otlp_traces_endpoint:
        return env.otel_exporter_otlp_traces_endpoint
    if base := env.otel_exporter_otlp_endpoint:
        return f"{base.removesuffix('/')}/v1/traces"
    return None


def _header_values(*lists: str | None) -> tuple[str, ...]:
    """The values of OTLP header lists (`key=value,key2=value2`, values URL-encoded as
    the exporter reads them), both as written and decoded."""
    values: list[str] = []
    for listed in lists:
        for pair in (listed or "").split(","):
            _, equals, value = pair.partition("=")
            if equals and (value := value.strip()):
                values += [value, unquote(value)]
    return tuple(dict.fromkeys(values))


def _anchored(server: McpServerConfig, anchor: Path) -> McpServerConfig:
    """`server` with its relative `paths` read from `anchor` (the config's directory)."""
    paths = tuple(
        p.expanduser() if p.expanduser().is_absolute() else anchor / p for p in server.paths
    )
    return server.model_copy(update={"paths": paths})


def _key_path(value: str | None, base: Path) -> Path | None:
    """GITHUB_APP_PRIVATE_KEY: the path of the App's key file (relative: from `base`)."""
    if not value:
        return None
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def _channel_workspaces(
    mapped: Mapping[str, Path | WorkspaceConfig],
    *,
    default: Path,
    state_dir: Path,
    anchor: Path,
) -> tuple[dict[str, Path], dict[Path, Repository]]:
    """Resolve and check each channel's directory, as BATON_WORKSPACE is checked, and
    the git remotes some of them name.

    Two workspaces may not nest (one's tools would reach into the other), nor may a
    mapped one nest in or contain the default workspace. Two channels may share one
    directory: they then share its files on purpose, and name the same remote. A
    directory with a remote may be missing or empty: Baton clones the remote there.
    """
    resolved: dict[str, Path] = {}
    repositories: dict[Path, Repository] = {}
    for channel, entry in mapped.items():
        spec = entry if isinstance(entry, WorkspaceConfig) else WorkspaceConfig(path=entry)
        path = spec.path.expanduser()
        path = path if path.is_absolute() else anchor / path
        if spec.remote is not None and not path.exists() and path.parent.is_dir():
            try:
                path.mkdir()
            except OSError as error:
                raise ConfigError(
                    f"workspaces.{channel}: could not make {path} to clone {spec.remote} "
                    f"into: {error.strerror}"
                ) from error
        if not path.is_dir():
            raise ConfigError(f"workspaces.{channel}: {path} is not a directory")
        path = path.resolve()
        if spec.remote is not None:
            repository = Repository(path=path, remote=spec.remote, base=spec.base)
            known = repositories.setdefault(path, repository)
            if known != repository:
                raise ConfigError(
                    f"workspaces.{channel}: {path} is already mapped with remote "
                    f"{known.remote} (base {known.base}); channels sharing a directory "
                    "share its remote and base"
                )
        try:
            check_workspace(path, state_dir)
        except ConfigError as exc:
            raise ConfigError(
                str(exc).replace("BATON_WORKSPACE:", f"workspaces.{channel}:", 1).split(". Set ")[0]
                + f". Map {channel} to a project directory of its own."
            ) from exc
        resolved[channel] = path
    others = [("BATON_WORKSPACE", default), *((f"workspaces.{c}", p) for c, p in resolved.items())]
    for channel, path in resolved.items():
        for name, other in others:
            if other == path or name == f"workspaces.{channel}":
                continue
            if path.is_relative_to(other) or other.is_relative_to(path):
                inside = "lies inside" if path.is_relative_to(other) else "contains"
                raise ConfigError(
                    f"workspaces.{channel}: {path} {inside} {name} ({other}): the agents of one "
                    "could read and change the other's files. Give each a separate directory."
                )
    return resolved, repositories


def default_state_dir(xdg_state_home: str | None = None) -> Path:
    """`$XDG_STATE_HOME/baton` when that is an absolute path, else `~/.local/state/baton`."""
    # The XDG spec says a relative XDG_STATE_HOME is invalid and must be ignored.
    if xdg_state_home and Path(xdg_state_home).is_absolute():
        return Path(xdg_state_home) / "baton"
    return Path.home() / ".local" / "state" / "baton"


def _state_dir(env: EnvironmentSettings, base: Path) -> Path:
    if not env.baton_state_dir:
        return default_state_dir(env.xdg_state_home).resolve()
    path = Path(env.baton_state_dir).expanduser()
    return (path if path.is_absolute() else base / path).resolve()


def check_workspace(workspace: Path, state_dir: Path, *, named: bool = True) -> None:
    """Refuse a workspace from which the agents' tools would reach what they must not.

    The tools may read and write everything in the workspace, so it can be neither
    the whole machine, nor the operator's home (keys, credentials, other projects),
    nor a directory holding Baton's own database and files.

    Args:
        workspace: The resolved workspace directory.
        state_dir: The resolved state directory (it need not exist yet).
        named: Whether BATON_WORKSPACE was set; if not, the workspace is the
            directory Baton started from, and the message says so.

    Raises:
        ConfigError: Naming BATON_WORKSPACE, what is wrong and what to do.
    """
    where = "" if named else " (the current directory, as BATON_WORKSPACE is not set)"
    if workspace == Path(workspace.anchor):
        problem = "is the root directory: the agents could read and change every file"
    elif workspace == (home := Path.home().resolve()):
        problem = "is your home directory: the agents could read your keys and credentials"
    elif workspace in home.parents:
        problem = (
            f"contains your home directory {home}: the agents could read your keys and credentials"
        )
    elif workspace == state_dir:
        problem = (
            "is Baton's state directory (BATON_STATE_DIR): the agents could change its database"
        )
    elif workspace in state_dir.parents:
        problem = (
            f"contains Baton's state directory {state_dir} (BATON_STATE_DIR): "
            "the agents could read and change Baton's database"
        )
    else:
        return
    raise ConfigError(
        f"BATON_WORKSPACE: {workspace}{where} {problem}. Set BATON_WORKSPACE to the project "
        "directory the agents should work in, with BATON_STATE_DIR outside it."
    )


def _make_state_dir(state_dir: Path) -> None:
    if state_dir.is_dir():
        mode = stat.S_IMODE(state_dir.stat().st_mode)
        if mode & 0o077:
            logger.warning(
                "BATON_STATE_DIR %s is open to other users (mode %o); "
                "Baton's database is there: chmod 700 %s",
                state_dir,
                mode,
                state_dir,
            )
        return
    try:
        state_dir.mkdir(mode=0o700, parents=True)
        # mkdir's mode passes through the umask; the state is the owner's alone.
        os.chmod(state_dir, 0o700)
    except OSError as exc:
        raise ConfigError(
            f"BATON_STATE_DIR: cannot create {state_dir} ({exc.strerror}); "
            "set BATON_STATE_DIR to a directory Baton may write"
        ) from exc


def _database_url(explicit: str | None, state_dir: Path, base: Path) -> tuple[str, DatabaseOrigin]:
    if explicit:
        return explicit, "explicit"
    legacy = base / DATABASE_FILE_NAME
    if legacy.is_file():
        # An install from before the state directory: its history must not vanish.
        logger.warning(
            "DATABASE_URL is not set and %s exists (the old default); Baton keeps using it. "
            "It lies where Baton starts, often inside the workspace: to move it, stop Baton "
            "and run  mv %s* %s/  (the -wal and -shm files go with it), or set "
            "DATABASE_URL=sqlite:///%s to keep it where it is.",
            legacy,
            legacy,
            state_dir,
            legacy,
        )
        return f"sqlite:///{legacy}", "legacy"
    return f"sqlite:///{state_dir / DATABASE_FILE_NAME}", "state_dir"


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


_URL_CREDENTIALS = re.compile(r"(//)[^/@\s'\"]+@")


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
    # Credentials in a URL (a remote, a database) are never repeated back.
    text = _URL_CREDENTIALS.sub(r"\1…@", repr(value))
    return text if len(text) <= 60 else text[:57] + "..."
