"""Search tools: glob finds files by name, grep finds lines by regular expression (RE2)."""

from __future__ import annotations

from pathlib import PurePath

from pydantic import Field

from bot.errors import ToolError
from bot.tools.base import Tool, ToolArguments
from bot.tools.cutoff import run_with_cutoff
from bot.tools.glob_walk import glob_paths, pattern_parts
from bot.tools.grep_scan import (
    MAX_GREP_FILE_BYTES,
    MAX_GREP_LINE_CHARS,
    SKIPPED_DIRS,
    GrepResult,
    SecretCheck,
    compile_pattern,
    search,
)
from bot.tools.workspace import Workspace

MAX_GLOB_RESULTS = 500
DEFAULT_GLOB_DEADLINE_S = 30.0
DEFAULT_GREP_DEADLINE_S = 30.0

__all__ = [
    "DEFAULT_GLOB_DEADLINE_S",
    "DEFAULT_GREP_DEADLINE_S",
    "MAX_GLOB_RESULTS",
    "MAX_GREP_FILE_BYTES",
    "MAX_GREP_LINE_CHARS",
    "SKIPPED_DIRS",
    "Glob",
    "Grep",
    "SecretCheck",
]


class GlobArgs(ToolArguments):
    pattern: str = Field(description="Glob such as '**/*.py' or 'src/*.ts'.")
    path: str = Field(default=".", description="Directory to search from.")


class Glob(Tool):
    name = "glob"
    description = (
        "Find files in the workspace whose path matches a glob ('**' crosses directories); "
        "newest first."
    )
    arguments = GlobArgs
    read_only = True
    main_argument = "pattern"
    argument_kind = "pattern"

    def __init__(
        self, workspace: Workspace, *, deadline_s: float = DEFAULT_GLOB_DEADLINE_S
    ) -> None:
        self.workspace = workspace
        self.deadline_s = deadline_s

    async def run(self, args: GlobArgs) -> str:
        pure = PurePath(args.pattern)
        if pure.is_absolute() or ".." in pure.parts:
            raise ToolError("the pattern must be relative and stay inside the workspace; use path")
        if "\x00" in args.pattern:
            raise ToolError("the pattern contains a NUL byte")
        pattern_parts(args.pattern)  # a pattern too long is refused before any walk
        result = await run_with_cutoff(
            glob_paths, self.workspace, args.path, args.pattern, seconds=self.deadline_s
        )
        matches = result.paths
        lines = matches[:MAX_GLOB_RESULTS]
        if len(matches) > MAX_GLOB_RESULTS:
            lines.append(
                f"[… {len(matches) - MAX_GLOB_RESULTS} more matches; narrow the pattern …]"
            )
        if result.stopped:
            lines.append(
                f"[glob stopped after {self.deadline_s:g} s; these results are partial — "
                "narrow the path or pattern]"
            )
        return "\n".join(lines) if lines else f"no files match {args.pattern!r}"


class GrepArgs(ToolArguments):
    pattern: str = Field(description="Regular expression (RE2 syntax) to look for.")
    path: str = Field(default=".", description="File or directory to search.")
    include: str | None = Field(
        default=None, description="Only files whose name or path matches this glob, e.g. '*.py'."
    )
    ignore_case: bool = Field(default=False, description="Match without regard to case.")
    max_results: int = Field(default=200, ge=1, le=2_000, description="Most lines to return.")


class Grep(Tool):
    name = "grep"
    description = (
        "Search workspace files for lines matching a regular expression in RE2 syntax (no "
        "backreferences or lookaround); prints 'path:line: text'. Skips binary files and "
        ".git, node_modules, .venv."
    )
    arguments = GrepArgs
    read_only = True
    main_argument = "path"

    def __init__(
        self,
        workspace: Workspace,
        *,
        is_secret: SecretCheck | None = None,
        deadline_s: float = DEFAULT_GREP_DEADLINE_S,
    ) -> None:
        self.workspace = workspace
        self.is_secret = is_secret
        self.deadline_s = deadline_s

    async def run(self, args: GrepArgs) -> str:
        regex = compile_pattern(args.pattern, ignore_case=args.ignore_case)
        # Off the event loop: Slack acks and other runs carry on while it searches.
        result = await run_with_cutoff(
            search,
            self.workspace,
            args.path,
            regex,
            include=args.include,
            limit=args.max_results,
            is_secret=self.is_secret,
            seconds=self.deadline_s,
        )
        return self._report(args, result)

    def _report(self, args: GrepArgs, result: GrepResult) -> str:
        lines = list(result.lines)
        if result.total > len(lines):
            lines.append(
                f"[… {result.total - len(lines)} more matching lines; narrow the search or "
                "raise max_results …]"
            )
        if result.secret:
            lines.append(
                f"[skipped {len(result.secret)} file(s) that may hold secrets "
                f"({_names(result.secret)}); read one with read_file, which asks a person first]"
            )
        if result.hard_linked:
            lines.append(
                f"[skipped {len(result.hard_linked)} file(s) with several hard links, which may "
                f"be files from outside the workspace ({_names(result.hard_linked)}); read one "
                "with read_file, which asks a person first]"
            )
        if result.stopped:
            lines.append(
                f"[search stopped after {self.deadline_s:g} s; these results are partial — "
                "narrow the path, include or pattern]"
            )
        return "\n".join(lines) if lines else f"no lines match {args.pattern!r}"


def _names(paths: list[str]) -> str:
    return ", ".join(paths[:10]) + (" …" if len(paths) > 10 else "")
