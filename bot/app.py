"""The composition root: builds every part of Baton once, from the settings."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import openai
from sqlalchemy.engine import URL

from bot.access.budgets import DailyBudgets, format_cost
from bot.config import Settings
from bot.describe import plural
from bot.engine import Hook, LLMClient
from bot.engine.llm import model_http_client
from bot.engine.tokens import TokenCounter
from bot.errors import ConfigError
from bot.forge.build import ForgeParts, build_forge
from bot.forge.workbench import ThreadWorkbench
from bot.mcp import McpServers, build_servers
from bot.permissions.hook import PermissionHook
from bot.project_instructions import read_project_instructions
from bot.project_instructions import summary as instructions_summary
from bot.redaction import Redactor
from bot.sandbox import Sandbox, sqlite_companions
from bot.sessions import Conversations
from bot.sessions.turns import TurnParts
from bot.sites import SharedParts, Site, agent_registry, build_site, site_directories
from bot.store import Database, EventLedger, SessionKey, SessionStore
from bot.store.instances import HEARTBEAT_EVERY_S, STALE_AFTER_S, Instances
from bot.store.signals import Signals
from bot.store.tasks import TaskRecord, TaskStore
from bot.store.usage import UsageStore
from bot.subagents import AgentRegistry, SubAgentRunner, TaskTracker
from bot.subagents.branches import discard_branch, merge_branch
from bot.subagents.overview import AgentOverview, overview
from bot.subagents.worktree import ProtectedFile, Worktree
from bot.tools import ToolRegistry, Workspace
from bot.tracing import DISABLED, Tracing, build_tracing

logger = logging.getLogger(__name__)

LLM_TIMEOUT_S = 300.0
# How long after start-up a replica waits for its MCP servers before it is ready
# regardless (a server that never answers must not keep the replica out of service).
READY_WITHIN_S = 15.0
PULLS_SHOWN = 5
# A pull request's body names the agents of a thread's latest this many tasks.
TASKS_NAMED = 200
# How the main agent is named where agents are listed (a task's agent otherwise).
MAIN_AGENT = "main"
# App Home's line of one agent, at most (whatever its file holds).
AGENT_LINE_CHARS = 540
# What a note says when loading lost something (App Home shows these notes first).
_LOSSES = ("left out", "gets no tools", "nothing to deny", "parent's model")
CLIPPED = "… (`baton agents` has the rest)"
# A thread branch's state, as a pull request's is said.
PULL_STATES = {"active": "open", "discarded": "branch discarded"}


@dataclass(slots=True, kw_only=True)
class Baton:
    """Everything a surface (Slack, terminal) needs, built once.

    The parts that work in a directory (tools, sandbox, agents, runs) come in sites:
    `site_for(channel)` is the one a channel works in. `workspace`, `tools`,
    `conversations` and their kin are the default site's, for the surfaces that have
    no channel (the terminal chat, `baton agents`).
    """

    settings: Settings
    model: str
    database: Database
    openai_client: openai.AsyncOpenAI
    llm: LLMClient
    default_site: Site
    # Channel id -> the site of the directory `workspaces:` maps it to.
    channel_sites: dict[str, Site]
    # Every error text a surface shows a person passes through it (credentials out).
    redact: Redactor
    tracker: TaskTracker
    events: EventLedger
    instances: Instances
    # Wake-ups between replicas (cancels, approvals, tasks, steering, run slots).
    signals: Signals
    # Tokens spent per call, and the daily budgets read from them.
    usage: UsageStore
    budgets: DailyBudgets
    # The MCP servers of `mcp_servers`, connecting in the background from the start.
    mcp: McpServers
    # Baton's config and database files: no branch that changes one is merged.
    protected_files: tuple[ProtectedFile, ...]
    # Workspaces with a git remote: a branch per thread, pull requests (None: none).
    forge: ForgeParts | None = None
    # OpenTelemetry traces of runs (off unless OTEL_EXPORTER_OTLP_ENDPOINT is set).
    tracing: Tracing = DISABLED
    # Directory -> the threads' worktrees of a workspace with a remote.
    workbenches: dict[Path, ThreadWorkbench] = field(default_factory=dict)
    heartbeat: asyncio.Task[None] | None = None
    # Until when (time.monotonic) runs and /readyz wait for the MCP servers' first
    # connection attempts: a replica ready to take work offers every tool it will have.
    ready_by: float = field(default_factory=lambda: time.monotonic() + READY_WITHIN_S)

    def tools_settled(self) -> bool:
        """Whether every MCP server has connected or failed once, or the wait is over."""
        return self.mcp.settled() or time.monotonic() >= self.ready_by

    async def wait_tools(self) -> None:
        """Wait, at most until `ready_by`, for every MCP server's first attempt: a
        mention right after start-up is answered with the tools of servers still
        starting (a stdio server takes about 0.7 s)."""
        left = self.ready_by - time.monotonic()
        if left <= 0 or self.mcp.settled():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(left):
                await asyncio.shield(self.mcp.settle())

    def site_for(self, channel_id: str | None) -> Site:
        """The site a channel works in: its mapped directory's, else the default one."""
        if channel_id is None:
            return self.default_site
        return self.channel_sites.get(channel_id, self.default_site)

    async def recover_tasks(self) -> list[TaskRecord]:
        """Fail the tasks of processes that are gone, keeping an isolated child's work
        on its branch (its worktree is committed, then removed)."""
        failed = await self.tracker.recover()
        for record in failed:
            try:
                await self.site_for(record.channel_id).runner.recover_worktree(record)
            except Exception:
                logger.exception("could not keep the worktree of task %s", record.id)
        return failed

    async def recover_worktrees(self) -> None:
        """At start-up: keep the work of isolated children this process left behind."""
        for site in self.sites:
            try:
                kept = await site.runner.recover_leftover_worktrees()
            except Exception:
                logger.exception("could not look for worktrees left in %s", site.root)
                continue
            for task_id in kept:
                logger.warning("kept the work of %s, left by a stop, on its branch", task_id)

    def workbench_for(self, channel_id: str | None) -> ThreadWorkbench | None:
        """The threads' worktrees of the channel's workspace, when it has a remote."""
        return self.workbenches.get(self.site_for(channel_id).root)

    async def merge_task(self, task_id: str, *, by: str) -> str:
        """Merge an isolated task's branch into its thread's branch (on a workspace with
        a remote) or its site's checkout; what happened."""
        task = await self.tracker.store.get(task_id)
        if task is None:
            return f"There is no task `{task_id}`."
        root = self.site_for(task.channel_id).root
        thread = await self._thread_tree(task)
        return await merge_branch(
            self.tracker, task, root=root, by=by, protected=self.protected_files, thread=thread
        )

    async def _thread_tree(self, task: TaskRecord) -> Worktree | None:
        """The worktree of the thread a task was started in, when it has one."""
        workbench = self.workbench_for(task.channel_id)
        if workbench is None:
            return None
        session = await self.default_site.conversations.store.get(task.session_id)
        if session is None:
            return None
        row = await workbench.repository.store.of_thread(session.key)
        if row is None or not row.active:
            return None
        return await workbench.repository.tree_of(row)

    async def pulls_line(
        self, *, channel_id: str | None = None, requester: str | None = None
    ) -> str | None:
        """The pull requests of a channel's threads (`/tasks`) or of a person's (App
        Home), newest first, as one line of Slack links; None when there are none."""
        if self.forge is None:
            return None
        rows = await self.forge.store.with_pulls(
            channel_id=channel_id, requester=requester, limit=PULLS_SHOWN
        )
        if not rows:
            return None
        shown = ", ".join(
            f"<{row.pr_url}|{row.repo}#{row.pr_number}> ({PULL_STATES.get(row.state, row.state)})"
            for row in rows
        )
        return f"Pull requests: {shown}"

    async def thread_work(self, session_key: str) -> tuple[tuple[str, ...], str | None]:
        """The agents that worked in a conversation, the main agent first, and what its
        runs spent, in words (a pull request's body says them).

        The main agent worked when the conversation spent more than its tasks did (an
        `@agent` run is a task and no call of the main agent's)."""
        store = self.default_site.conversations.store
        session = await store.find(SessionKey.parse(session_key))
        if session is None:
            return (), None
        tasks = await self.tracker.store.list(session_id=session.id, limit=TASKS_NAMED)
        agents = tuple(dict.fromkeys(task.agent for task in reversed(tasks)))
        totals = await self.usage.session_total(session.id)
        by_tasks = sum(task.prompt_tokens + task.completion_tokens for task in tasks)
        if totals.total_tokens > by_tasks or not tasks:
            agents = (MAIN_AGENT, *agents)
        if not totals.total_tokens:
            return agents, None
        spent = f"{totals.total_tokens:,} tokens"
        cost, unpriced = self.budgets.cost(totals)
        if cost is not None and not unpriced:
            spent += f" ({format_cost(cost)})"
        return agents, spent

    async def discard_task(self, task_id: str, *, by: str) -> str:
        """Delete an isolated task's branch and its work; what happened."""
        task = await self.tracker.store.get(task_id)
        if task is None:
            return f"There is no task `{task_id}`."
        root = self.site_for(task.channel_id).root
        return await discard_branch(self.tracker, task, root=root, by=by)

    def turn_parts(self) -> TurnParts:
        """What the turn machine of a surface works with."""
        return TurnParts(
            database=self.database,
            instances=self.instances,
            signals=self.signals,
            tracker=self.tracker,
            sessions=self.default_site.conversations.store,
            usage=self.usage,
            budgets=self.budgets,
            limits=self.settings.limits,
            redact=self.redact,
            conversations_for=lambda channel: self.site_for(channel).conversations,
            agents_for=lambda channel: self.site_for(channel).agents,
            workbench_for=self.workbench_for,
            tools_ready=self.wait_tools,
            tracing=self.tracing,
        )

    @property
    def sites(self) -> tuple[Site, ...]:
        """Every site once, the default first."""
        by_root = {self.default_site.root: self.default_site}
        for site in self.channel_sites.values():
            by_root.setdefault(site.root, site)
        return tuple(by_root.values())

    @property
    def workspace(self) -> Workspace:
        return self.default_site.workspace

    @property
    def tools(self) -> ToolRegistry:
        return self.default_site.tools

    @property
    def permissions(self) -> PermissionHook:
        return self.default_site.permissions

    @property
    def hooks(self) -> tuple[Hook, ...]:
        return self.default_site.hooks

    @property
    def sandbox(self) -> Sandbox:
        return self.default_site.sandbox

    @property
    def agents(self) -> AgentRegistry:
        return self.default_site.agents

    @property
    def runner(self) -> SubAgentRunner:
        return self.default_site.runner

    @property
    def conversations(self) -> Conversations:
        return self.default_site.conversations

    @property
    def sandboxed(self) -> bool:
        """Whether every `bash` call, in every site, runs inside the OS sandbox."""
        return all(site.sandbox.available for site in self.sites)

    def instructions_line(self, channel_id: str | None) -> str | None:
        """What the runs of `channel_id`'s workspace read as project instructions now."""
        instructions = read_project_instructions(self.site_for(channel_id).root)
        if instructions is None:
            return None
        return f"Project instructions: each run here reads {instructions_summary(instructions)}"

    @property
    def agents_summary(self) -> str:
        """App Home's agents, as lines of plain text: per workspace, a line saying how
        many agents it has and what its runs read, then a `•` line per agent (its
        source, effective tools, model, and what loading mapped, left out or kept
        unused, and what it shadows) and a `⚠` line per agent file refused there and
        why. Each line is bounded; App Home lists as many as fit and points to
        `baton agents` for the rest (`bot.slack.blocks.home_view`)."""
        lines = []
        for site in self.sites:
            found = overview(
                site.agents,
                site.tools,
                mcp_servers=self.settings.mcp_servers,
                main_model=self.model,
                max_turns=self.settings.max_turns,
            )
            heading = f"Agents in {site.root}: {len(found.agents)}"
            if found.invalid:
                heading += f" · {plural(len(found.invalid), 'agent file')} refused"
            if (instructions := read_project_instructions(site.root)) is not None:
                heading += f" · runs read {instructions_summary(instructions)}"
            lines.append(heading)
            lines += [_agent_line(agent, site.root) for agent in found.agents]
            lines += [
                _clipped(f"⚠ refused {_shown_path(item.path, site.root)}: {item.reason}")
                for item in found.invalid
            ]
        return "\n".join(lines)

    @property
    def sandbox_notice(self) -> str | None:
        """What people must know when commands cannot be contained; None when they can."""
        unsandboxed = [site for site in self.sites if not site.sandbox.available]
        if not unsandboxed:
            return None
        if len(self.sites) == 1:
            return self.default_site.sandbox_notice
        where = ", ".join(str(site.root) for site in unsandboxed)
        reasons = "; ".join(dict.fromkeys(str(site.sandbox.reason) for site in unsandboxed))
        return (
            f"Commands run unsandboxed in {where}: {reasons}. Every bash call there asks a "
            "person first, whatever the rules allow."
        )

    def start_heartbeat(self) -> None:
        """Keep telling other processes sharing the database that this one is alive."""
        if self.heartbeat is None:
            self.heartbeat = asyncio.create_task(self._beat(), name="heartbeat")

    async def _beat(self) -> None:
        # A beat that finds this process was declared dead while it stalled registers
        # it again and tells `instances.on_lost` (see bot/store/instances.py).
        while True:
            await asyncio.sleep(HEARTBEAT_EVERY_S)
            try:
                # A beat stuck on a dead connection must not hold up the next ones.
                async with asyncio.timeout(STALE_AFTER_S):
                    await self.instances.beat()
            except Exception:
                logger.exception("heartbeat failed")

    async def close(self) -> None:
        try:
            if self.heartbeat is not None:
                self.heartbeat.cancel()
                await asyncio.gather(self.heartbeat, return_exceptions=True)
            await self.tracker.shutdown()
            await self.mcp.close()
            if self.forge is not None:
                await self.forge.close()
            await self.signals.close()
            try:
                await self.instances.unregister()
            except Exception as exc:  # the database may be what is going away
                logger.warning("could not unregister this process: %s", self.redact(str(exc)))
            await self.openai_client.close()
            await self.database.close()
        finally:
            # Last, whatever failed above: the spans of the runs and tasks that ended
            # while the parts above closed go out too.
            await self.tracing.close()


def _agent_line(agent: AgentOverview, root: Path) -> str:
    """One agent on one bounded line (`baton agents` has every note in full): what it
    shadows and what it lost come before the other notes, which a long line cuts."""
    line = (
        f"• `{agent.name}` · {_shown_path(agent.source, root)} · tools: {agent.tools} · "
        f"model: {agent.model}"
    )
    if agent.notes:
        line += " · " + "; ".join(sorted(agent.notes, key=_note_rank))
    return _clipped(line)


def _note_rank(note: str) -> int:
    """Shadowing, then what was left out or changed about tools and model, then the rest."""
    if note.startswith("shadows "):
        return 0
    if note.startswith(("model ", "tools", "tool ")) or any(sign in note for sign in _LOSSES):
        return 1
    return 2


def _clipped(line: str) -> str:
    if len(line) <= AGENT_LINE_CHARS:
        return line
    return line[: AGENT_LINE_CHARS - len(CLIPPED)] + CLIPPED


def _shown_path(source: str, root: Path) -> str:
    """A file of the workspace relative to it (`.claude/agents/x.md`); others as given."""
    path = Path(source)
    return str(path.relative_to(root)) if path.is_relative_to(root) else source


def sqlite_files(url: URL) -> list[Path]:
    """The files of a SQLite database (with its journal, WAL and shared-memory files)."""
    if not url.drivername.startswith("sqlite") or not url.database or url.database == ":memory:":
        return []
    return list(sqlite_companions(Path(url.database).expanduser().resolve()))


def protected_files(
    config_files: Sequence[Path], database_files: Sequence[Path]
) -> tuple[ProtectedFile, ...]:
    """Baton's own files as Merge names them when a branch would change one."""
    return (
        *(ProtectedFile(path=path, what="Baton's configuration") for path in config_files),
        *(ProtectedFile(path=path, what="Baton's database") for path in database_files),
    )


def build_agent_registry(
    settings: Settings, workspace: Path | None = None, *, tool_names: Collection[str]
) -> AgentRegistry:
    """A site's agents (roots: see `agent_roots`), then built-ins, with the aliases of
    baton.yaml; files naming tools other than `tool_names` (the site's) and the MCP
    servers' get a note saying so.

    `workspace` is a site's directory; the default workspace when not given.
    """
    return agent_registry(settings, workspace or settings.workspace, tool_names=tool_names)


async def build_baton(settings: Settings) -> Baton:
    """Build and start Baton's parts; the database schema is migrated to the newest revision."""
    model = settings.model
    if not model:
        raise ConfigError(
            "no model is configured: set BATON_MODEL or `model:` in baton.yaml "
            "(any model name your OpenAI-compatible server knows)"
        )
    database = Database(settings.database_url)
    openai_client = openai.AsyncOpenAI(
        # A local OpenAI-compatible server often needs no key; the client insists on one.
        api_key=settings.openai_api_key or "not-needed",
        base_url=settings.openai_base_url,
        timeout=LLM_TIMEOUT_S,
        http_client=model_http_client(),
        max_retries=0,  # LLMClient retries, announcing each wait to the run
    )
    await database.create_schema()
    instances = Instances(database)
    llm = LLMClient(
        openai_client,
        max_concurrent=settings.model_calls.max_concurrent,
        retry_deadline_s=settings.model_calls.retry_deadline_s,
        stall_timeout_s=settings.model_calls.stall_timeout_s,
        answer_timeout_s=settings.model_calls.answer_timeout_s,
    )
    signals = Signals(database)
    tracker = TaskTracker(TaskStore(database), instances, signals=signals)
    # Files no tool may read and no command may see: the config, and the GitHub App's
    # private key, which mints installation tokens (it may lie where the sandbox shows
    # the host read-only, /opt say, or in a workspace).
    config_files = [
        path for path in (settings.config_path, settings.github_app_private_key) if path
    ]
    database_files = sqlite_files(database.engine.url)
    mcp = build_servers(settings, masked=[*config_files, *database_files])
    redact = Redactor(settings.secret_values)
    shared = SharedParts(
        settings=settings,
        model=model,
        llm=llm,
        store=SessionStore(database),
        tracker=tracker,
        counter=TokenCounter(),
        database_files=database_files,
        config_files=config_files,
        mcp_tools=mcp.tools,
        redact=redact,
    )
    # Workspaces with a git remote: cloned where empty before their sites are built
    # (their agents and instructions come from the clone).
    forge_holder: list[Baton] = []

    async def thread_work(session_key: str) -> tuple[tuple[str, ...], str | None]:
        return await forge_holder[0].thread_work(session_key)

    try:
        forge = build_forge(settings, database, work_of=thread_work)
        if forge is not None:
            await forge.clone_missing()
    except BaseException:
        await openai_client.close()
        await database.close()
        raise
    directories = site_directories(settings)
    try:
        # Each site is probed on its own: whom commands run as depends on its owner.
        built = await asyncio.gather(
            *(build_site(d, shared, others=[o for o in directories if o != d]) for d in directories)
        )
    except BaseException:
        await openai_client.close()
        await database.close()
        raise
    by_directory = dict(zip(directories, built, strict=True))
    default_site = by_directory[settings.workspace.resolve()]
    # In the background: start-up is not held up, and runs offer each server's tools
    # once it is up. stdio servers run in the default site's sandbox binary.
    mcp.start(default_site.sandbox)
    # Never raises: a listener that cannot connect yet retries in the background.
    await signals.start()
    # Registered last, just before its surface starts beating: a start-up slowed down
    # (sandbox probes, a loaded machine) must not outlast STALE_AFTER_S between
    # registering and the first beat, or the other replicas would declare it dead.
    await instances.register()
    baton = Baton(
        settings=settings,
        model=model,
        database=database,
        openai_client=openai_client,
        llm=llm,
        default_site=default_site,
        channel_sites={
            channel: by_directory[directory.resolve()]
            for channel, directory in settings.workspaces.items()
        },
        redact=redact,
        tracker=tracker,
        events=EventLedger(database),
        instances=instances,
        signals=signals,
        usage=(usage := UsageStore(database)),
        budgets=DailyBudgets(usage, settings.limits, settings.prices),
        mcp=mcp,
        protected_files=protected_files(config_files, database_files),
        forge=forge,
        workbenches={
            path: ThreadWorkbench(
                repository, tree_parts=by_directory[path].tree_parts, desk=forge.desk
            )
            for path, repository in (forge.repositories.items() if forge else ())
        },
        tracing=build_tracing(
            endpoint=settings.tracing.endpoint,
            capture_content=settings.tracing.capture_content,
            redact=redact,
        ),
    )
    forge_holder.append(baton)
    return baton
