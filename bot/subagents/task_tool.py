"""The `task` tool: how the main agent delegates to a sub-agent."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from bot.errors import TaskLimitReached, ToolError
from bot.subagents.definition import TASK_TOOL_NAME
from bot.subagents.registry import AgentRegistry
from bot.subagents.runner import ParentContext, SubAgentRunner, TaskOutcome
from bot.tools.base import Tool, ToolArguments

TASK_DESCRIPTION = """\
Delegate a well-bounded task to a sub-agent. The sub-agent works on its own with an \
isolated context: it sees NOTHING of this conversation (not the history, not your \
instructions, not what people said), only the prompt you write. So the prompt must carry \
everything it needs: the goal, the relevant file paths and facts, constraints, and what to \
return.
background=false (default) waits for the sub-agent and returns its result now. \
background=true returns a task id at once; the result is added to a later turn of this \
conversation, so use it for independent work you do not need right away, and start several \
in parallel when the pieces are independent.

Available sub-agents:
{agents}"""


def escape_result(text: str) -> str:
    """Make text safe inside the result wrapper: it can never close or open a tag."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def format_outcome(outcome: TaskOutcome) -> str:
    """The tool result for a foreground run, in the forms DESIGN.md gives."""
    if outcome.state == "completed":
        return (
            f'<task state="completed"><task_result>{escape_result(outcome.text)}'
            "</task_result></task>"
        )
    reason = outcome.error or outcome.state
    body = f"{outcome.agent} ({outcome.task_id}) did not finish: {reason}."
    if outcome.text:
        body += f" Its partial work, kept as it was:\n{outcome.text}"
    return f'<task state="error">{escape_result(body)}</task>'


class TaskArgs(ToolArguments):
    subagent_type: str = Field(description="Name of the sub-agent to run.")
    prompt: str = Field(
        description="The complete task. The sub-agent sees nothing else, so include every "
        "fact, path and constraint it needs and say what to return."
    )
    description: str = Field(
        default="", max_length=120, description="A short title (3-6 words) for display."
    )
    background: bool = Field(
        default=False,
        description="Run in the background and return at once; the result comes in a later turn.",
    )


class TaskTool(Tool):
    name = TASK_TOOL_NAME
    description = "Delegate a task to a sub-agent."
    arguments = TaskArgs
    # Delegating changes nothing by itself: every call the child makes passes the same
    # permission checks as the parent's own calls. So no rule means allowed.
    read_only = True
    main_argument = "subagent_type"
    argument_kind = "pattern"

    def __init__(
        self, *, registry: AgentRegistry, runner: SubAgentRunner, parent: ParentContext
    ) -> None:
        self.registry = registry
        self.runner = runner
        self.parent = parent

    def schema(self) -> dict[str, Any]:
        # Rebuilt on every call, so agent files added or fixed since start-up appear.
        definitions = self.registry.definitions()
        agents = "\n".join(f"- {d.name}: {d.description}" for d in definitions)
        schema = super().schema()
        function = schema["function"]
        function["description"] = TASK_DESCRIPTION.format(agents=agents or "(none)")
        function["parameters"]["properties"]["subagent_type"]["enum"] = [
            d.name for d in definitions
        ]
        return schema

    async def run(self, args: TaskArgs) -> str:
        definition = self.registry.get(args.subagent_type)
        if definition is None:
            available = ", ".join(self.registry.names()) or "none"
            raise ToolError(
                f"there is no sub-agent named {args.subagent_type!r}; available: {available}"
            )
        prompt = args.prompt.strip()
        if not prompt:
            raise ToolError(
                "the prompt is empty: write the whole task; the sub-agent sees nothing else"
            )
        description = args.description.strip() or _title(prompt)
        if args.background:
            try:
                record = await self.runner.start_background(
                    definition, prompt, description=description, parent=self.parent
                )
            except TaskLimitReached as exc:
                raise ToolError(
                    f"{exc}; {exc.limit} are running now. Wait for some to finish (their "
                    "results arrive in later turns) or run this one in the foreground."
                ) from exc
            return f'<task id="{record.id}" state="running"/>'
        outcome = await self.runner.run_foreground(
            definition, prompt, description=description, parent=self.parent
        )
        return format_outcome(outcome)


def _title(prompt: str, words: int = 6, limit: int = 120) -> str:
    parts = prompt.split()
    title = " ".join(parts[:words])
    if len(title) > limit:
        return title[: limit - 1] + "…"
    return title + ("…" if len(parts) > words else "")
