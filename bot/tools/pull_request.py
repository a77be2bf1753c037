"""`open_pull_request`: the agent asks Baton to push the thread's branch and open a PR.

Baton does the pushing, outside the sandbox, with credentials no command can read;
the tool only names the title and the body. It is ruled like any other tool that
changes things: without a rule that allows it, a person approves each call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from pydantic import Field

from bot.errors import ToolError
from bot.tools.base import Tool, ToolArguments

# Title and body -> what happened, in words (the link, or why not).
OpenPull = Callable[[str, str], Awaitable[tuple[bool, str]]]


class OpenPullArgs(ToolArguments):
    title: str = Field(
        min_length=1, max_length=256, description="The pull request's title: one line."
    )
    body: str = Field(
        default="",
        max_length=20_000,
        description="What the change does and why, in Markdown; Baton adds where it came from.",
    )


class OpenPullRequest(Tool):
    name = "open_pull_request"
    description = (
        "Push this conversation's branch and open a draft pull request with it (or update "
        "the one it has). Baton commits the work first. Use it when the change is ready for "
        "review and opening a pull request was asked for or is clearly wanted."
    )
    arguments = OpenPullArgs
    read_only = False
    main_argument = None

    def __init__(self, open_pull: OpenPull) -> None:
        self.open_pull = open_pull

    def unruled_reason(self) -> str:
        return "open_pull_request pushes a branch and opens a pull request on the forge"

    async def run(self, args: OpenPullArgs) -> str:
        title = " ".join(args.title.split())
        if not title:
            raise ToolError("the title is empty")
        ok, text = await self.open_pull(title, args.body)
        if not ok:
            raise ToolError(text)
        return text
