"""File tools: read_file, write_file, edit_file and list_dir, all inside the workspace."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from pydantic import Field

from bot.errors import ToolError
from bot.tools.base import Tool, ToolArguments
from bot.tools.workspace import Workspace

MAX_READ_BYTES = 5_000_000
DEFAULT_READ_LINES = 2_000
MAX_LINE_CHARS = 2_000
MAX_DIR_ENTRIES = 1_000


def _read_text(path: Path, shown: str) -> str:
    if not path.exists():
        raise ToolError(f"{shown} does not exist")
    if path.is_dir():
        raise ToolError(f"{shown} is a directory; use list_dir to see what it holds")
    size = path.stat().st_size
    if size > MAX_READ_BYTES:
        raise ToolError(
            f"{shown} is {size:,} bytes, over the {MAX_READ_BYTES:,}-byte limit; "
            "use grep or bash (head, sed -n) to read part of it"
        )
    data = path.read_bytes()
    if b"\x00" in data[:8192]:
        raise ToolError(f"{shown} looks like a binary file ({size:,} bytes); it cannot be shown")
    return data.decode("utf-8", errors="replace")


class ReadFileArgs(ToolArguments):
    path: str = Field(description="File path, relative to the workspace or absolute inside it.")
    offset: int = Field(default=1, ge=1, description="First line to show (1-based).")
    limit: int = Field(
        default=DEFAULT_READ_LINES, ge=1, le=10_000, description="How many lines to show."
    )


class ReadFile(Tool):
    name = "read_file"
    description = (
        "Read a text file from the workspace. Lines come numbered (`   12\\tcode`); use "
        "offset and limit to page through long files."
    )
    arguments = ReadFileArgs
    read_only = True
    main_argument = "path"

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    async def run(self, args: ReadFileArgs) -> str:
        path = self.workspace.resolve(args.path)
        shown = self.workspace.relative(path)
        text = await asyncio.to_thread(_read_text, path, shown)
        lines = text.splitlines()
        if not lines:
            return f"{shown} is empty"
        start = args.offset - 1
        if start >= len(lines):
            raise ToolError(f"{shown} has {len(lines)} lines; offset {args.offset} is past the end")
        chosen = lines[start : start + args.limit]
        numbered = []
        for number, line in enumerate(chosen, start=args.offset):
            if len(line) > MAX_LINE_CHARS:
                line = f"{line[:MAX_LINE_CHARS]}… [line cut at {MAX_LINE_CHARS} characters]"
            numbered.append(f"{number:>6}\t{line}")
        end = start + len(chosen)
        if end < len(lines):
            numbered.append(
                f"[… {len(lines) - end} more lines; read again with offset={end + 1} …]"
            )
        return "\n".join(numbered)


class WriteFileArgs(ToolArguments):
    path: str = Field(description="File path, relative to the workspace or absolute inside it.")
    content: str = Field(description="The whole new content of the file.")


def _write_text(path: Path, content: str) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = content.encode("utf-8")
    path.write_bytes(data)
    return len(data)


class WriteFile(Tool):
    name = "write_file"
    description = (
        "Create or overwrite a file in the workspace with the given content; missing "
        "parent directories are created."
    )
    arguments = WriteFileArgs
    main_argument = "path"

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    async def run(self, args: WriteFileArgs) -> str:
        path = self.workspace.resolve_for_write(args.path)
        if path.is_dir():
            raise ToolError(f"{self.workspace.relative(path)} is a directory")
        async with self.workspace.lock_for(path):
            existed = path.exists()
            written = await asyncio.to_thread(_write_text, path, args.content)
        verb = "Overwrote" if existed else "Created"
        return f"{verb} {self.workspace.relative(path)} ({written:,} bytes)"


class EditFileArgs(ToolArguments):
    path: str = Field(description="File path, relative to the workspace or absolute inside it.")
    old_text: str = Field(description="Exact text to replace; it must occur exactly once.")
    new_text: str = Field(description="Text to put in its place.")


class EditFile(Tool):
    name = "edit_file"
    description = (
        "Replace one exact occurrence of old_text with new_text in a workspace file. "
        "old_text must match exactly once, whitespace included; add surrounding lines "
        "to make it unique."
    )
    arguments = EditFileArgs
    main_argument = "path"

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    async def run(self, args: EditFileArgs) -> str:
        path = self.workspace.resolve_for_write(args.path)
        shown = self.workspace.relative(path)
        if not args.old_text:
            raise ToolError("old_text is empty; use write_file to create or replace a whole file")
        if args.old_text == args.new_text:
            raise ToolError("old_text and new_text are the same; nothing would change")
        async with self.workspace.lock_for(path):
            return await self._edit(path, shown, args)

    async def _edit(self, path: Path, shown: str, args: EditFileArgs) -> str:
        text = await asyncio.to_thread(_read_text, path, shown)
        count = text.count(args.old_text)
        if count == 0:
            raise ToolError(
                f"old_text was not found in {shown}; read the file again and copy the text "
                "exactly, including whitespace"
            )
        if count > 1:
            raise ToolError(
                f"old_text occurs {count} times in {shown}; include more surrounding lines so "
                "it matches exactly once"
            )
        line = text[: text.index(args.old_text)].count("\n") + 1
        await asyncio.to_thread(_write_text, path, text.replace(args.old_text, args.new_text, 1))
        return f"Edited {shown} at line {line}"


class ListDirArgs(ToolArguments):
    path: str = Field(default=".", description="Directory, relative to the workspace.")


def _list_dir(path: Path, shown: str) -> list[str]:
    if not path.exists():
        raise ToolError(f"{shown} does not exist")
    if not path.is_dir():
        raise ToolError(f"{shown} is a file, not a directory; use read_file")
    entries = []
    with os.scandir(path) as it:
        for entry in it:
            if entry.is_symlink():
                entries.append(f"{entry.name}@")
            elif entry.is_dir():
                entries.append(f"{entry.name}/")
            else:
                entries.append(entry.name)
    return sorted(entries, key=str.lower)


class ListDir(Tool):
    name = "list_dir"
    description = (
        "List a workspace directory: sub-directories end with '/', symbolic links with '@'."
    )
    arguments = ListDirArgs
    read_only = True
    main_argument = "path"

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    async def run(self, args: ListDirArgs) -> str:
        path = self.workspace.resolve(args.path)
        shown = self.workspace.relative(path)
        entries = await asyncio.to_thread(_list_dir, path, shown)
        if not entries:
            return f"{shown} is empty"
        more = len(entries) - MAX_DIR_ENTRIES
        lines = entries[:MAX_DIR_ENTRIES]
        if more > 0:
            lines.append(f"[… {more} more entries not shown; use glob to narrow down …]")
        return "\n".join(lines)
