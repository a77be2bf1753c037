"""File tools: read_file, write_file, edit_file and list_dir, all inside the workspace.

Each opens its file once through `Workspace.open_file` and reads or writes that
descriptor, so what was checked is what is used.
"""

from __future__ import annotations

import asyncio
import os
import stat

from pydantic import Field

from bot.errors import ToolError
from bot.tools.base import Tool, ToolArguments, person_approved
from bot.tools.safe_open import identity
from bot.tools.workspace import Opened, Workspace

MAX_READ_BYTES = 5_000_000
DEFAULT_READ_LINES = 2_000
MAX_LINE_CHARS = 2_000
MAX_DIR_ENTRIES = 1_000


def _read_opened(opened: Opened) -> str:
    """The text of a file already opened and checked, read from its descriptor."""
    size = opened.stat.st_size
    if size > MAX_READ_BYTES:
        raise ToolError(
            f"{opened.shown} is {size:,} bytes, over the {MAX_READ_BYTES:,}-byte limit; "
            "use grep or bash (head, sed -n) to read part of it"
        )
    chunks: list[bytes] = []
    offset = 0
    # Read to the end (the file may have grown since fstat), but never past the limit.
    while offset <= MAX_READ_BYTES:
        chunk = os.pread(opened.fd, 1 << 20, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    data = b"".join(chunks)[: MAX_READ_BYTES + 1]
    if b"\x00" in data[:8192]:
        raise ToolError(
            f"{opened.shown} looks like a binary file ({size:,} bytes); it cannot be shown"
        )
    return data.decode("utf-8", errors="replace")


def _read_text(workspace: Workspace, path: str, approved: bool) -> tuple[str, str]:
    """How to show `path`, and its text."""
    opened = workspace.open_file(path, approved=approved)
    try:
        return opened.shown, _read_opened(opened)
    finally:
        opened.close()


def _replace_content(opened: Opened, data: bytes) -> None:
    """Write `data` as the whole content, in place, so the file keeps its inode and mode."""
    os.ftruncate(opened.fd, 0)
    view = memoryview(data)
    offset = 0
    while offset < len(view):
        offset += os.pwrite(opened.fd, view[offset:], offset)


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
        shown, text = await asyncio.to_thread(
            _read_text, self.workspace, args.path, person_approved.get()
        )
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


def _write_text(workspace: Workspace, path: str, content: str, approved: bool) -> Opened:
    """Create or replace `path`'s content; returns what was written to, closed."""
    opened = workspace.open_file(path, write=True, create=True, approved=approved)
    try:
        data = content.encode("utf-8")
        _replace_content(opened, data)
        opened.stat = os.fstat(opened.fd)
        return opened
    finally:
        opened.close()


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
        # Refused early (and the lock keyed) by the resolved path; the write itself
        # walks again and checks the object it opens.
        path = self.workspace.resolve_for_write(args.path)
        async with self.workspace.lock_for(path):
            written = await asyncio.to_thread(
                _write_text, self.workspace, args.path, args.content, person_approved.get()
            )
        verb = "Created" if written.created else "Overwrote"
        return f"{verb} {written.shown} ({written.stat.st_size:,} bytes)"


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
        if not args.old_text:
            raise ToolError("old_text is empty; use write_file to create or replace a whole file")
        if args.old_text == args.new_text:
            raise ToolError("old_text and new_text are the same; nothing would change")
        async with self.workspace.lock_for(path):
            return await asyncio.to_thread(_edit_text, self.workspace, args, person_approved.get())


def _edit_text(workspace: Workspace, args: EditFileArgs, approved: bool) -> str:
    """Read and rewrite one opened file, so the text replaced is the text that was read."""
    opened = workspace.open_file(args.path, write=True, approved=approved)
    try:
        shown = opened.shown
        text = _read_opened(opened)
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
        _replace_content(opened, text.replace(args.old_text, args.new_text, 1).encode("utf-8"))
        return f"Edited {shown} at line {line}"
    finally:
        opened.close()


class ListDirArgs(ToolArguments):
    path: str = Field(default=".", description="Directory, relative to the workspace.")


def _list_dir(workspace: Workspace, path: str) -> tuple[str, list[str]]:
    """How to show the directory, and its entries; Baton's private files are left out."""
    opened = workspace.open_dir(path)
    guard = workspace.guard()
    entries = []
    try:
        with os.scandir(opened.fd) as it:
            for entry in it:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if identity(st) in guard.private_ids:
                    continue
                if stat.S_ISLNK(st.st_mode):
                    entries.append(f"{entry.name}@")
                elif stat.S_ISDIR(st.st_mode):
                    entries.append(f"{entry.name}/")
                else:
                    entries.append(entry.name)
    finally:
        opened.close()
    return opened.shown, sorted(entries, key=str.lower)


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
        shown, entries = await asyncio.to_thread(_list_dir, self.workspace, args.path)
        if not entries:
            return f"{shown} is empty"
        more = len(entries) - MAX_DIR_ENTRIES
        lines = entries[:MAX_DIR_ENTRIES]
        if more > 0:
            lines.append(f"[… {more} more entries not shown; use glob to narrow down …]")
        return "\n".join(lines)
