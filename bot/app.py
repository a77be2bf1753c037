"""The composition root: builds every part of Baton once, from the settings."""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import openai
from sqlalchemy.engine import URL

from bot.config import Settings
from bot.engine import Hook, LLMClient
from bot.errors import ConfigError
from bot.permissions.danger import find_path_danger
from bot.permissions.hook import PermissionHook
from bot.permissions.rules import PermissionRules
from bot.redaction import Redactor
from bot.sandbox import Sandbox, SandboxPolicy, sqlite_companions
from bot.sessions import Conversations, MainAgent, main_system_prompt
from bot.store import Database, EventLedger, SessionStore
from bot.store.instances import HEARTBEAT_EVERY_S, Instances
from bot.store.tasks import TaskStore
from bot.subagents import BUILTIN_AGENTS, AgentRegistry, SubAgentRunner, TaskTracker
from bot.tools import ToolRegistry, Workspace, build_workspace_tools
from bot.tools.workspace import PROTECTED_DIR

logger = logging.getLogger(__name__)

LLM_TIMEOUT_S = 300.0


@dataclass(slots=True, kw_only=True)
class Baton:
    """Everything a surface (Slack, terminal) needs, built once."""

    settings: Settings
    model: str
    database: Database
    openai_client: openai.AsyncOpenAI
    llm: LLMClient
    workspace: Workspace
    tools: ToolRegistry
    permissions: PermissionHook
    hooks: list[Hook]
    sandbox: Sandbox
    # Every error text a surface shows a person passes through it (credentials out).
    redact: Redactor
    agents: AgentRegistry
    tracker: TaskTracker
    runner: SubAgentRunner
    conversations: Conversations
    events: EventLedger
    instances: Instances
    heartbeat: asyncio.Task[None] | None = None

    @property
    def sandboxed(self) -> bool:
        """Whether every `bash` call runs inside the OS sandbox."""
        return self.sandbox.available

    @property
    def sandbox_notice(self) -> str | None:
        """What people must know when commands cannot be contained; None when they can."""
        if self.sandbox.available:
            return None
        return (
            f"Commands run unsandboxed: {self.sandbox.reason}. Every bash call asks a "
            "person first, whatever the rules allow."
        )

    def start_heartbeat(self) -> None:
        """Keep telling other processes sharing the database that this one is alive."""
        if self.heartbeat is None:
            self.heartbeat = asyncio.create_task(self._beat(), name="heartbeat")

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_EVERY_S)
            try:
                await self.instances.beat()
            except Exception:
                logger.exception("heartbeat failed")

    async def close(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.cancel()
            await asyncio.gather(self.heartbeat, return_exceptions=True)
        await self.tracker.shutdown()
        await self.openai_client.close()
        await self.database.close()


def sqlite_files(url: URL) -> list[Path]:
    """The files of a SQLite database (with its journal, WAL and shared-memory files)."""
    if not url.drivername.startswith("sqlite") or not url.database or url.database == ":memory:":
        return []
    return list(sqlite_companions(Path(url.database).expanduser().resolve()))


def build_agent_registry(settings: Settings) -> AgentRegistry:
    """Agent files from `<workspace>/.baton/agents`, then `agent_dirs`, then built-ins."""
    roots = [settings.workspace / PROTECTED_DIR / "agents", *settings.agent_dirs]
    return AgentRegistry(roots, BUILTIN_AGENTS)


async def build_baton(settings: Settings) -> Baton:
    """Build and start Baton's parts; the database schema is created if missing."""
    model = settings.model
    if not model:
        raise ConfigError(
            "no model is configured: set BATON_MODEL or `model:` in baton.yaml "
            "(any model name your OpenAI-compatible server knows)"
        )
    database = Database(settings.database_url)
    database_files = sqlite_files(database.engine.url)
    config = [settings.config_path] if settings.config_path else []
    # Baton's database and configuration are out of every tool's reach: the file tools
    # refuse them by identity, the sandbox hides them.
    policy = SandboxPolicy.for_workspace(
        settings.workspace,
        masked=config,
        databases=database_files[:1],
        network=settings.sandbox.network,
    )
    sandbox = await Sandbox.probe(policy)
    if not sandbox.available:
        logger.warning(
            "no OS sandbox for commands (%s): every bash call will ask a person", sandbox.reason
        )
    workspace = Workspace(
        settings.workspace,
        protected_files=config,
        private_files=[*database_files, *config],
        # What the file tools create belongs to whom the commands run as.
        owner=sandbox.run_as,
    )
    openai_client = openai.AsyncOpenAI(
        # A local OpenAI-compatible server often needs no key; the client insists on one.
        api_key=settings.openai_api_key or "not-needed",
        base_url=settings.openai_base_url,
        timeout=LLM_TIMEOUT_S,
    )
    await database.create_schema()
    instances = Instances(database)
    await instances.register()
    tools = build_workspace_tools(
        workspace,
        environment=os.environ,
        is_secret=lambda path: find_path_danger(path) is not None,
        sandbox=sandbox,
        policy=policy,
    )
    permissions = PermissionHook(
        PermissionRules.parse(
            allow=settings.permissions.allow,
            ask=settings.permissions.ask,
            deny=settings.permissions.deny,
        ),
        workspace,
        sandboxed=sandbox.available,
    )
    hooks: list[Hook] = [permissions]
    llm = LLMClient(openai_client)
    agents = build_agent_registry(settings)
    tracker = TaskTracker(TaskStore(database), instances)
    runner = SubAgentRunner(
        llm=llm,
        tracker=tracker,
        hooks=hooks,
        workspace=workspace.root,
        skills_dir=workspace.protected_dir / "skills",
        default_max_turns=settings.max_turns,
        max_background_tasks=settings.max_background_tasks,
    )
    main_agent = MainAgent(
        llm=llm,
        model=model,
        tools=tools,
        hooks=hooks,
        system_prompt=main_system_prompt(workspace.root),
        max_turns=settings.max_turns,
        registry=agents,
        runner=runner,
    )
    return Baton(
        settings=settings,
        model=model,
        database=database,
        openai_client=openai_client,
        llm=llm,
        workspace=workspace,
        tools=tools,
        permissions=permissions,
        hooks=hooks,
        sandbox=sandbox,
        redact=Redactor(settings.secret_values),
        agents=agents,
        tracker=tracker,
        runner=runner,
        conversations=Conversations(
            store=SessionStore(database), main_agent=main_agent, tracker=tracker
        ),
        events=EventLedger(database),
        instances=instances,
    )
