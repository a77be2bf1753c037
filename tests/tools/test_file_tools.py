"""read_file, write_file, edit_file, list_dir, glob and grep, called as the engine calls them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bot.errors import ToolArgumentsError, ToolError, WorkspaceError
from bot.tools import Tool, Workspace, build_workspace_tools


async def call(workspace: Workspace, name: str, arguments: str) -> str:
    tool = build_workspace_tools(workspace).get(name)
    assert isinstance(tool, Tool)
    return await tool.run(tool.parse_arguments(arguments))


async def test_read_file_numbers_lines_and_pages(workspace: Workspace) -> None:
    (workspace.root / "a.txt").write_text("".join(f"line {n}\n" for n in range(1, 11)))
    text = await call(workspace, "read_file", '{"path": "a.txt", "offset": 3, "limit": 2}')
    assert text.splitlines()[:2] == ["     3\tline 3", "     4\tline 4"]
    assert "6 more lines; read again with offset=5" in text
    assert "line 10" in await call(workspace, "read_file", '{"path": "a.txt"}')


async def test_read_file_errors_are_clear(workspace: Workspace) -> None:
    (workspace.root / "bin").write_bytes(b"\x00\x01\x02")
    (workspace.root / "d").mkdir()
    (workspace.root / "short.txt").write_text("one\n")
    cases = {
        '{"path": "missing.txt"}': "does not exist",
        '{"path": "bin"}': "binary file",
        '{"path": "d"}': "is a directory",
        '{"path": "short.txt", "offset": 5}': "past the end",
    }
    for arguments, message in cases.items():
        with pytest.raises(ToolError, match=message):
            await call(workspace, "read_file", arguments)


async def test_read_file_refuses_huge_files(workspace: Workspace) -> None:
    with (workspace.root / "huge.log").open("wb") as handle:
        handle.truncate(6_000_000)
    with pytest.raises(ToolError, match="over the 5,000,000-byte limit"):
        await call(workspace, "read_file", '{"path": "huge.log"}')


async def test_read_file_cuts_very_long_lines(workspace: Workspace) -> None:
    (workspace.root / "min.js").write_text("x" * 5000)
    text = await call(workspace, "read_file", '{"path": "min.js"}')
    assert "line cut at 2000 characters" in text and len(text) < 2100


async def test_write_file_creates_parents_and_reports(workspace: Workspace) -> None:
    out = await call(workspace, "write_file", '{"path": "a/b/c.txt", "content": "héllo"}')
    assert out == "Created a/b/c.txt (6 bytes)"
    assert (workspace.root / "a/b/c.txt").read_text() == "héllo"
    out = await call(workspace, "write_file", '{"path": "a/b/c.txt", "content": "bye"}')
    assert out.startswith("Overwrote")


async def test_write_and_edit_refuse_protected_and_outside_paths(
    workspace: Workspace, tmp_path: Path
) -> None:
    (workspace.root / ".baton").mkdir()
    for name, extra in (
        ("write_file", '"content": "x"'),
        ("edit_file", '"old_text": "a", "new_text": "b"'),
    ):
        for path, message in (
            (".baton/agents/x.md", "protected"),
            (str(tmp_path / "baton.yaml"), "outside the workspace"),
            ("../escape.txt", "escapes"),
        ):
            with pytest.raises(WorkspaceError, match=message):
                await call(workspace, name, f'{{"path": "{path}", {extra}}}')
    assert not (tmp_path / "escape.txt").exists()


async def test_edit_file_replaces_exactly_one_match(workspace: Workspace) -> None:
    target = workspace.root / "m.py"
    target.write_text("a = 1\nb = 2\nc = 1\n")
    out = await call(
        workspace, "edit_file", '{"path": "m.py", "old_text": "b = 2", "new_text": "b = 3"}'
    )
    assert out == "Edited m.py at line 2"
    assert target.read_text() == "a = 1\nb = 3\nc = 1\n"
    with pytest.raises(ToolError, match="occurs 2 times"):
        await call(workspace, "edit_file", '{"path": "m.py", "old_text": "= 1", "new_text": "= 9"}')
    with pytest.raises(ToolError, match="not found"):
        await call(workspace, "edit_file", '{"path": "m.py", "old_text": "zzz", "new_text": "y"}')
    with pytest.raises(ToolError, match="old_text is empty"):
        await call(workspace, "edit_file", '{"path": "m.py", "old_text": "", "new_text": "y"}')
    assert target.read_text() == "a = 1\nb = 3\nc = 1\n"


async def test_list_dir_marks_directories_and_links(workspace: Workspace) -> None:
    (workspace.root / "src").mkdir()
    (workspace.root / "README.md").write_text("x")
    os.symlink(workspace.root / "README.md", workspace.root / "link")
    assert await call(workspace, "list_dir", "{}") == "link@\nREADME.md\nsrc/"
    assert await call(workspace, "list_dir", '{"path": "src"}') == "src is empty"
    with pytest.raises(ToolError, match="is a file"):
        await call(workspace, "list_dir", '{"path": "README.md"}')


async def test_glob_finds_files_and_stays_inside(workspace: Workspace, tmp_path: Path) -> None:
    (workspace.root / "pkg/sub").mkdir(parents=True)
    (workspace.root / "pkg/a.py").write_text("")
    (workspace.root / "pkg/sub/b.py").write_text("")
    (workspace.root / "pkg/c.txt").write_text("")
    (workspace.root / ".git").mkdir()
    (workspace.root / ".git/hook.py").write_text("")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "evil.py").write_text("")
    os.symlink(outside / "evil.py", workspace.root / "pkg/evil.py")
    found = (await call(workspace, "glob", '{"pattern": "**/*.py"}')).splitlines()
    assert sorted(found) == ["pkg/a.py", "pkg/sub/b.py"]
    assert await call(workspace, "glob", '{"pattern": "*.rs"}') == "no files match '*.rs'"
    with pytest.raises(ToolError, match="stay inside"):
        await call(workspace, "glob", '{"pattern": "../**/*.py"}')


async def test_grep_searches_with_filters_and_caps(workspace: Workspace) -> None:
    (workspace.root / "a.py").write_text("def alpha():\n    return 1\n")
    (workspace.root / "b.txt").write_text("alpha beta\nALPHA\n")
    (workspace.root / "blob.bin").write_bytes(b"alpha\x00")
    out = await call(workspace, "grep", '{"pattern": "alpha"}')
    assert out.splitlines() == ["a.py:1: def alpha():", "b.txt:1: alpha beta"]
    out = await call(
        workspace, "grep", '{"pattern": "alpha", "include": "*.txt", "ignore_case": true}'
    )
    assert out.splitlines() == ["b.txt:1: alpha beta", "b.txt:2: ALPHA"]
    out = await call(workspace, "grep", '{"pattern": "a", "max_results": 1}')
    assert out.splitlines()[0] == "a.py:1: def alpha():"
    assert "more matching lines" in out
    with pytest.raises(ToolError, match="invalid regular expression"):
        await call(workspace, "grep", '{"pattern": "("}')


async def test_grep_never_reads_through_links_that_leave(
    workspace: Workspace, tmp_path: Path
) -> None:
    (tmp_path / "secret.txt").write_text("password=hunter2\n")
    os.symlink(tmp_path / "secret.txt", workspace.root / "inside.txt")
    assert await call(workspace, "grep", '{"pattern": "hunter2"}') == "no lines match 'hunter2'"
    with pytest.raises(WorkspaceError):
        await call(workspace, "grep", '{"pattern": "hunter2", "path": "inside.txt"}')


async def test_unknown_argument_fields_are_rejected(workspace: Workspace) -> None:
    with pytest.raises(ToolArgumentsError, match="Extra inputs"):
        await call(workspace, "read_file", '{"path": "a", "mode": "rb"}')


async def test_grep_skips_secret_files_as_the_app_builds_it(baton: object) -> None:
    from bot.app import Baton

    assert isinstance(baton, Baton)
    root = baton.workspace.root
    (root / ".env").write_text("OPENAI_API_KEY=sk-live-123\n")
    (root / "app.py").write_text("KEY = load('OPENAI_API_KEY')\n")
    grep = baton.tools.get("grep")
    assert grep is not None
    out = await grep.run(grep.parse_arguments('{"pattern": "KEY"}'))
    assert "sk-live-123" not in out
    assert "app.py:1:" in out
    assert "skipped 1 file(s) that may hold secrets (.env)" in out


async def test_parallel_edits_of_one_file_keep_both_changes(workspace: Workspace) -> None:
    import asyncio

    target = workspace.root / "m.txt"
    target.write_text("alpha\nbeta\n")
    edit = build_workspace_tools(workspace).get("edit_file")
    assert edit is not None
    await asyncio.gather(
        edit.run(edit.parse_arguments('{"path": "m.txt", "old_text": "alpha", "new_text": "A"}')),
        edit.run(edit.parse_arguments('{"path": "m.txt", "old_text": "beta", "new_text": "B"}')),
    )
    assert target.read_text() == "A\nB\n"
