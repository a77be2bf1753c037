"""Search tools: glob finds files by name, grep finds lines by regular expression."""

from __future__ import annotations

import asyncio
import fnmatch
import os
import re
from collections.abc import Callable
from pathlib import Path, PurePath

from pydantic import Field

from bot.errors import ToolError
from bot.tools.base import Tool, ToolArguments
from bot.tools.workspace import Workspace

SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", ".venv", "__pycache__"})
MAX_GLOB_RESULTS = 500
MAX_GREP_FILE_BYTES = 5_000_000
MAX_GREP_LINE_CHARS = 500


class GlobArgs(ToolArguments):
    pattern: str = Field(description="Glob such as '**/*.py' or 'src/*.ts'.")
    path: str = Field(default=".", description="Directory to search from.")


def _glob(workspace: Workspace, base: Path, pattern: str) -> list[Path]:
    found: list[tuple[float, Path]] = []
    for match in base.glob(pattern):
        if any(part in SKIPPED_DIRS for part in match.relative_to(base).parts):
            continue
        real = Path(os.path.realpath(match))
        # A symlink inside the workspace may point anywhere; never report what lies outside.
        if not real.is_relative_to(workspace.root):
            continue
        try:
            mtime = match.stat().st_mtime
        except OSError:
            continue
        found.append((mtime, match))
    found.sort(key=lambda item: (-item[0], str(item[1])))
    return [path for _, path in found]


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

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    async def run(self, args: GlobArgs) -> str:
        pure = PurePath(args.pattern)
        if pure.is_absolute() or ".." in pure.parts:
            raise ToolError("the pattern must be relative and stay inside the workspace; use path")
        base = self.workspace.resolve(args.path)
        if not base.is_dir():
            raise ToolError(f"{self.workspace.relative(base)} is not a directory")
        try:
            matches = await asyncio.to_thread(_glob, self.workspace, base, args.pattern)
        except ValueError as exc:
            raise ToolError(f"invalid glob pattern {args.pattern!r}: {exc}") from exc
        if not matches:
            return f"no files match {args.pattern!r}"
        lines = [self.workspace.relative(m) for m in matches[:MAX_GLOB_RESULTS]]
        if len(matches) > MAX_GLOB_RESULTS:
            lines.append(
                f"[… {len(matches) - MAX_GLOB_RESULTS} more matches; narrow the pattern …]"
            )
        return "\n".join(lines)


class GrepArgs(ToolArguments):
    pattern: str = Field(description="Regular expression (Python syntax) to look for.")
    path: str = Field(default=".", description="File or directory to search.")
    include: str | None = Field(
        default=None, description="Only files whose name or path matches this glob, e.g. '*.py'."
    )
    ignore_case: bool = Field(default=False, description="Match without regard to case.")
    max_results: int = Field(default=200, ge=1, le=2_000, description="Most lines to return.")


def _iter_files(base: Path) -> list[Path]:
    if base.is_file():
        return [base]
    files = []
    for directory, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
        files.extend(Path(directory) / name for name in sorted(filenames))
    return files


SecretCheck = Callable[[str], bool]


def _grep(
    workspace: Workspace,
    base: Path,
    regex: re.Pattern[str],
    include: str | None,
    limit: int,
    is_secret: SecretCheck | None,
) -> tuple[list[str], int, list[str]]:
    results: list[str] = []
    total = 0
    skipped: list[str] = []
    for path in _iter_files(base):
        shown = workspace.relative(path)
        if include and not (fnmatch.fnmatch(path.name, include) or fnmatch.fnmatch(shown, include)):
            continue
        if is_secret is not None and is_secret(shown):
            # Secrets (.env, keys) are read only through read_file, which asks a person.
            skipped.append(shown)
            continue
        real = Path(os.path.realpath(path))
        if not real.is_relative_to(workspace.root) or real in workspace.private_files:
            continue
        try:
            if real.stat().st_size > MAX_GREP_FILE_BYTES:
                continue
            data = real.read_bytes()
        except OSError:
            continue
        if b"\x00" in data[:8192]:
            continue
        for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
            if regex.search(line):
                total += 1
                if len(results) < limit:
                    if len(line) > MAX_GREP_LINE_CHARS:
                        line = line[:MAX_GREP_LINE_CHARS] + "…"
                    results.append(f"{shown}:{number}: {line}")
    return results, total, skipped


class Grep(Tool):
    name = "grep"
    description = (
        "Search workspace files for lines matching a regular expression; prints "
        "'path:line: text'. Skips binary files and .git, node_modules, .venv."
    )
    arguments = GrepArgs
    read_only = True
    main_argument = "path"

    def __init__(self, workspace: Workspace, *, is_secret: SecretCheck | None = None) -> None:
        self.workspace = workspace
        self.is_secret = is_secret

    async def run(self, args: GrepArgs) -> str:
        try:
            regex = re.compile(args.pattern, re.IGNORECASE if args.ignore_case else 0)
        except re.error as exc:
            raise ToolError(f"invalid regular expression {args.pattern!r}: {exc}") from exc
        base = self.workspace.resolve(args.path)
        if not base.exists():
            raise ToolError(f"{self.workspace.relative(base)} does not exist")
        results, total, skipped = await asyncio.to_thread(
            _grep, self.workspace, base, regex, args.include, args.max_results, self.is_secret
        )
        if total > len(results):
            results.append(
                f"[… {total - len(results)} more matching lines; narrow the search or raise "
                "max_results …]"
            )
        if skipped:
            names = ", ".join(skipped[:10]) + (" …" if len(skipped) > 10 else "")
            results.append(
                f"[skipped {len(skipped)} file(s) that may hold secrets ({names}); read one "
                "with read_file, which asks a person first]"
            )
        return "\n".join(results) if results else f"no lines match {args.pattern!r}"
