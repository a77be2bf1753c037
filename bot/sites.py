"""Sites: everything Baton builds per workspace directory (tools, sandbox, agents, runs).

The default workspace is one site; each directory `workspaces:` maps channels to is
another (channels sharing a directory share its site). What does not depend on the
directory (database, sessions, task tracker, LLM client) is shared by all sites and
handed in by the composition root, `bot.app`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bot.config import Settings
from bot.engine import Hook, LLMClient
from bot.engine.tokens import TokenCounter
from bot.permissions.danger import find_path_danger
from bot.permissions.hook import PermissionHook
from bot.permissions.rules import PermissionRules
from bot.redaction import Redactor
from bot.sandbox import Sandbox, SandboxPolicy, sqlite_companions
from bot.sessions import Conversations, MainAgent, main_system_prompt
from bot.store import SessionStore
from bot.subagents import BUILTIN_AGENTS, AgentRegistry, SubAgentRunner, TaskTracker
from bot.subagents.loader import KnownTools
from bot.tools import ToolRegistry, Workspace, build_workspace_tools
from bot.tools.base import Tool
from bot.tools.workspace import PROTECTED_DIR

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Site:
    """One workspace directory and every part that works in it.

    Attributes:
        workspace: The directory the file tools are confined to.
        tools: The built-in tools working there (bash in `sandbox` under `policy`).
        permissions: The permission hook for this workspace's protected files.
        hooks: The hook chain every tool call of this site passes (permissions first).
        sandbox: The OS sandbox, probed for this directory (its owner decides `run_as`).
        policy: What a command may touch: this directory, with Baton's files and every
            other site's directory masked.
        agents: Agent files from `<dir>/.baton/agents`, then `agent_dirs`, then built-ins.
        runner: Runs this site's sub-agents in this directory.
        main_agent: The main agent, with this site's tools and agents.
        conversations: Turns of the sessions whose channel works here.
    """

    workspace: Workspace
    tools: ToolRegistry
    permissions: PermissionHook
    hooks: tuple[Hook, ...]
    sandbox: Sandbox
    policy: SandboxPolicy
    agents: AgentRegistry
    runner: SubAgentRunner
    main_agent: MainAgent
    conversations: Conversations
    # The site's tools and hooks rebuilt in another directory of its repository (an
    # isolated child's worktree, a thread's worktree).
    tree_parts: Callable[[Path], Awaitable[tuple[ToolRegistry, tuple[Hook, ...]]]]

    @property
    def root(self) -> Path:
        """The site's directory, resolved."""
        return self.workspace.root

    @property
    def sandbox_notice(self) -> str | None:
        """What people working here must know when commands cannot be contained."""
        if self.sandbox.available:
            return None
        return (
            f"Commands run unsandboxed: {self.sandbox.reason}. Every bash call asks a "
            "person first, whatever the rules allow."
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class SharedParts:
    """What every site uses alike, built once by the composition root."""

    settings: Settings
    model: str
    llm: LLMClient
    store: SessionStore
    tracker: TaskTracker
    # Token counts, calibration and windows learnt per model: one for the process.
    counter: TokenCounter
    # Baton's database files and config file: masked in the sandbox, refused by the tools.
    database_files: Sequence[Path]
    config_files: Sequence[Path]
    # The tools of the MCP servers that are up, asked at the start of every turn.
    mcp_tools: Callable[[], Sequence[Tool]] | None = None
    # What no stored text may hold (task logs are redacted before they are cut).
    redact: Redactor | None = None


def agent_roots(settings: Settings, directory: Path) -> list[Path]:
    """Where a site's agents come from, the first valid name winning: `<dir>/.baton/agents`,
    `<dir>/.claude/agents` (Claude Code's), then `agent_dirs` and the shipped agents."""
    roots = [directory / PROTECTED_DIR / "agents", directory / ".claude" / "agents"]
    # A directory named twice (agent_dirs naming the workspace's .claude/agents) is
    # read once, at its first place: its files would shadow themselves.
    seen: set[Path] = set()
    unique = []
    for root in [*roots, *settings.agent_dirs]:
        if (resolved := root.resolve()) not in seen:
            seen.add(resolved)
            unique.append(root)
    return unique


def agent_registry(
    settings: Settings, directory: Path, *, tool_names: Collection[str]
) -> AgentRegistry:
    """A site's agents (roots: `agent_roots`), then built-ins, with baton.yaml's aliases.

    `tool_names` are the site's own tools: with the configured MCP servers, what an
    agent file may name; a file naming anything else gets a note saying it is left out.
    """
    return AgentRegistry(
        agent_roots(settings, directory),
        BUILTIN_AGENTS,
        tool_aliases=settings.tool_aliases,
        model_aliases=settings.model_aliases,
        known_tools=KnownTools.of(tool_names, settings.mcp_servers),
    )


def site_directories(settings: Settings) -> list[Path]:
    """The default workspace, then each distinct directory a channel is mapped to (resolved)."""
    given = [settings.workspace, *settings.workspaces.values()]
    return list(dict.fromkeys(path.resolve() for path in given))


async def build_site(directory: Path, shared: SharedParts, *, others: Iterable[Path]) -> Site:
    """Build the parts working in `directory`; `others` are the other sites' directories."""
    settings = shared.settings
    others = list(others)
    files = _baton_files(shared)
    policy = _policy(directory, shared, masked=others, files=files)
    sandbox = await Sandbox.probe(policy)
    if not sandbox.available:
        logger.warning(
            "no OS sandbox for commands in %s (%s): every bash call there will ask a person",
            directory,
            sandbox.reason,
        )
    workspace, tools, permissions = _working_parts(directory, shared, sandbox, policy, files=files)
    hooks: tuple[Hook, ...] = (permissions,)

    async def isolated(tree: Path) -> tuple[ToolRegistry, tuple[Hook, ...]]:
        # An isolated child's worktree: the same sandbox and rules, confined to the
        # worktree, with this site's own directory hidden like every other site's, and
        # the worktree's copies of Baton's files guarded like the originals: a config
        # the child rewrote there would reach the workspace with a merge.
        tree_files = _baton_files(shared, directory, tree)
        tree_policy = _policy(tree, shared, masked=[*others, directory], files=tree_files)
        _, tree_tools, tree_permissions = _working_parts(
            tree, shared, sandbox, tree_policy, files=tree_files
        )
        return tree_tools, (tree_permissions,)

    agents = agent_registry(settings, workspace.root, tool_names=tools.names())
    runner = SubAgentRunner(
        llm=shared.llm,
        tracker=shared.tracker,
        hooks=hooks,
        workspace=workspace.root,
        skills_dir=workspace.protected_dir / "skills",
        default_max_turns=settings.max_turns,
        max_background_tasks=settings.max_background_tasks,
        context_window=settings.context_window,
        counter=shared.counter,
        registry=agents,
        max_task_depth=settings.max_task_depth,
        isolated=isolated,
        worktrees_dir=settings.state_dir / "worktrees",
        redact=shared.redact,
    )
    main_agent = MainAgent(
        llm=shared.llm,
        model=shared.model,
        tools=tools,
        hooks=hooks,
        system_prompt=main_system_prompt(workspace.root),
        max_turns=settings.max_turns,
        registry=agents,
        runner=runner,
        context_window=settings.context_window,
        extra_tools=shared.mcp_tools,
    )
    return Site(
        workspace=workspace,
        tools=tools,
        permissions=permissions,
        hooks=hooks,
        sandbox=sandbox,
        policy=policy,
        agents=agents,
        runner=runner,
        main_agent=main_agent,
        conversations=Conversations(
            store=shared.store, main_agent=main_agent, tracker=shared.tracker
        ),
        tree_parts=isolated,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _BatonFiles:
    """Baton's own files as the tools of one directory must guard them.

    Attributes:
        config: The config file: readable by no tool, writable by none, masked in the
            sandbox.
        databases: The SQLite database file: no tool may use it, nor the journal,
            WAL and shared-memory files beside it (`sqlite_companions`).
    """

    config: tuple[Path, ...]
    databases: tuple[Path, ...]

    @property
    def private(self) -> list[Path]:
        """Every file no tool may read or write."""
        return [*(f for d in self.databases for f in sqlite_companions(d)), *self.config]


def _baton_files(
    shared: SharedParts, directory: Path | None = None, tree: Path | None = None
) -> _BatonFiles:
    """Baton's config and database files, and for a worktree `tree` of `directory`,
    their copies there.

    A worktree holds the repository's tracked files at the same relative paths as the
    site's directory: a `baton.yaml` (or database) the workspace tracks has a copy in
    every child's worktree, which a merge of the child's branch brings back. So each
    of Baton's files inside `directory` is guarded at that path under `tree` too.
    """
    config = [Path(p) for p in shared.config_files]
    # `database_files` is the database with its companions, the database first.
    databases = [Path(p) for p in shared.database_files][:1]
    if directory is not None and tree is not None:
        config += _copies(config, directory, tree)
        databases += _copies(databases, directory, tree)
    return _BatonFiles(config=tuple(config), databases=tuple(databases))


def _copies(paths: Iterable[Path], directory: Path, tree: Path) -> list[Path]:
    """Where each of `paths` inside `directory` lies under `tree`.

    Both as named and as resolved: a `baton.yaml` in the workspace that links to the
    real config has its copy at the link's place.
    """
    root = directory.resolve()
    spellings = {spelling for path in paths for spelling in (path.absolute(), path.resolve())}
    return sorted(
        tree / spelling.relative_to(root)
        for spelling in spellings
        if spelling != root and spelling.is_relative_to(root)
    )


def _policy(
    directory: Path, shared: SharedParts, *, masked: Iterable[Path], files: _BatonFiles
) -> SandboxPolicy:
    """What commands in `directory` may touch.

    Baton's database and configuration, and every other site's files, are out of
    reach: the file tools are confined to `directory` and refuse Baton's files by
    identity; the sandbox hides them wherever they would be visible.
    """
    return SandboxPolicy.for_workspace(
        directory,
        masked=[*files.config, *masked],
        databases=files.databases,
        network=shared.settings.sandbox.network,
    )


_READING = frozenset({"read_file", "grep"})


def _working_parts(
    directory: Path,
    shared: SharedParts,
    sandbox: Sandbox,
    policy: SandboxPolicy,
    *,
    files: _BatonFiles,
) -> tuple[Workspace, ToolRegistry, PermissionHook]:
    """The workspace, the built-in tools working there, and the permission hook."""
    settings = shared.settings
    rules = PermissionRules.parse(
        allow=settings.permissions.allow,
        ask=settings.permissions.ask_rules(),
        deny=settings.permissions.deny,
    )
    workspace = Workspace(
        directory,
        protected_files=files.config,
        private_files=files.private,
        # What the file tools create belongs to whom the commands run as.
        owner=sandbox.run_as,
    )
    tools = build_workspace_tools(
        workspace,
        environment=os.environ,
        is_secret=lambda path: find_path_danger(path) is not None,
        sandbox=sandbox,
        policy=policy,
        show_secrets=settings.sandbox.show_secrets,
        # What a rule forbids reading, no command reads either, named or not.
        hide=[rule.pattern for rule in rules.deny if rule.tool in _READING and rule.pattern],
    )
    permissions = PermissionHook(
        rules,
        workspace,
        sandboxed=sandbox.available,
    )
    return workspace, tools, permissions
