"""The main agent: its engine for one turn, and what its sub-agents inherit from it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bot.engine import ApprovalFunc, Engine, Hook, LLMClient, Meter
from bot.engine.context import Compactor
from bot.engine.tokens import TokenCounter
from bot.project_instructions import (
    ProjectInstructions,
    read_project_instructions,
    with_instructions,
)
from bot.sessions.compaction import Summarizer
from bot.sessions.prompt import place_system_prompt
from bot.store import SessionRecord
from bot.subagents import (
    AgentRegistry,
    ParentContext,
    ProgressSink,
    SubAgentRunner,
    TaskTool,
)
from bot.subagents.control import control_tools
from bot.tools import ToolRegistry
from bot.tools.base import Tool
from bot.tools.pull_request import OpenPull, OpenPullRequest


@dataclass(frozen=True, slots=True, kw_only=True)
class Place:
    """Where a turn works when not in its site's directory: a thread's own worktree.

    Attributes:
        root: The directory.
        tools: The site's built-in tools, rebuilt to work there.
        hooks: The hook chain made for that directory (permissions first).
        branch: The thread's branch: isolated sub-agents start from it, and their
            Merge goes into it.
        open_pull: What `open_pull_request` calls; the main agent's own tool (children
            never hold it).
    """

    root: Path
    tools: ToolRegistry
    hooks: tuple[Hook, ...]
    branch: str | None = None
    # Pushes the branch and opens its pull request (the `open_pull_request` tool).
    open_pull: OpenPull | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Turn:
    """Who and what one turn is for."""

    session: SessionRecord
    approval: ApprovalFunc | None = None
    user_id: str | None = None
    progress: ProgressSink | None = None
    # The run's token meter, shared with every sub-agent the turn starts.
    meter: Meter | None = None
    # Folds the session's older history into a summary when a request would not fit.
    compactor: Compactor | None = None
    # The thread's worktree on a workspace with a git remote (None: the site's directory).
    place: Place | None = None


class MainAgent:
    """Builds the main agent's engine per turn, with a `task` tool bound to that turn."""

    def __init__(
        self,
        *,
        llm: LLMClient,
        model: str,
        tools: ToolRegistry,
        hooks: Sequence[Hook],
        system_prompt: str,
        max_turns: int,
        registry: AgentRegistry,
        runner: SubAgentRunner,
        context_window: int | None = None,
        counter: TokenCounter | None = None,
        extra_tools: Callable[[], Sequence[Tool]] | None = None,
    ) -> None:
        """`context_window` bounds every request in tokens; `counter` (by default the
        runner's, so one calibration serves a model) counts them. `extra_tools` gives,
        at the start of each turn, the tools of the MCP servers that are up then.
        `system_prompt` is Baton's part: each turn adds the workspace's `AGENTS.md` (or
        `CLAUDE.md`) as it is then.
        """
        self.llm = llm
        self.model = model
        self.tools = tools
        self.extra_tools = extra_tools
        self.hooks = tuple(hooks)
        self.system_prompt = system_prompt
        # What the latest turn read, for display; None before any turn or without a file.
        self.instructions: ProjectInstructions | None = None
        self.max_turns = max_turns
        self.registry = registry
        self.runner = runner
        self.context_window = context_window
        self.counter = counter if counter is not None else runner.counter
        self.summarizer = Summarizer(
            llm=llm, model=model, counter=self.counter, context_window=context_window
        )

    def turn_tools(self) -> ToolRegistry:
        """The tools of a turn starting now: the site's, and those of every MCP server
        that is up (its sub-agents inherit from these)."""
        if self.extra_tools is None:
            return self.tools
        return self.tools.with_tools(self.extra_tools())

    def read_instructions(self, root: Path | None = None) -> ProjectInstructions | None:
        """The workspace's instructions as they are now (None: no usable file)."""
        return read_project_instructions(root or self.runner.workspace)

    def place_tools(self, place: Place | None) -> ToolRegistry:
        """The tools of a turn starting now, in `place` when it has one."""
        tools = self.turn_tools()
        if place is None:
            return tools
        return ToolRegistry(place.tools.get(tool.name) or tool for tool in tools)

    def parent_context(self, turn: Turn, tools: ToolRegistry | None = None) -> ParentContext:
        place = turn.place
        return ParentContext(
            tools=self.place_tools(place) if tools is None else tools,
            model=self.model,
            approval=turn.approval,
            session_id=turn.session.id,
            channel_id=turn.session.channel_id,
            user_id=turn.user_id,
            progress=turn.progress,
            meter=turn.meter,
            depth=0,
            root=self.runner.workspace if place is None else place.root,
            hooks=None if place is None else place.hooks,
            branch=None if place is None else place.branch,
        )

    def build_engine(self, turn: Turn) -> Engine:
        """The engine of a turn starting now, with the instructions file as it is now."""
        place = turn.place
        self.instructions = self.read_instructions(None if place is None else place.root)
        tools = self.place_tools(place)
        task_tool = TaskTool(
            registry=self.registry, runner=self.runner, parent=self.parent_context(turn, tools)
        )
        return Engine(
            llm=self.llm,
            model=self.model,
            tools=tools.with_tools(
                [
                    task_tool,
                    *control_tools(self.runner.tracker, session_id=turn.session.id, parent_id=None),
                    *(
                        [OpenPullRequest(place.open_pull)]
                        if place is not None and place.open_pull is not None
                        else []
                    ),
                ]
            ),
            system_prompt=with_instructions(
                self.system_prompt
                if place is None
                else place_system_prompt(place.root, place.branch),
                self.instructions,
            ),
            hooks=self.hooks if place is None else place.hooks,
            approval=turn.approval,
            max_turns=self.max_turns,
            meter=turn.meter,
            context_window=self.context_window,
            compactor=turn.compactor,
            counter=self.counter,
        )
