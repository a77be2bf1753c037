"""grep cannot freeze the bot, and cannot be led to a secret by a link's name."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from bot.errors import ToolError
from bot.tools import Workspace
from bot.tools.search import Grep

PATHOLOGICAL = r"^(a+)+$"


async def grep(tool: Grep, arguments: str) -> str:
    return await tool.run(tool.parse_arguments(arguments))


async def test_a_catastrophic_pattern_returns_at_once(workspace: Workspace) -> None:
    # Python's re takes longer than the age of the universe on this line; RE2 is linear.
    (workspace.root / "a.txt").write_text("a" * 100_000 + "b\n" + "aaaa\n")
    out = await grep(Grep(workspace), f'{{"pattern": "{PATHOLOGICAL}"}}')
    assert out == "a.txt:2: aaaa"


@pytest.mark.parametrize("pattern", [r"(a)\\1", "foo(?=bar)", "(?<!x)y"])
async def test_syntax_re2_lacks_is_a_clear_error(workspace: Workspace, pattern: str) -> None:
    with pytest.raises(ToolError, match=r"invalid regular expression .* RE2 syntax"):
        await grep(Grep(workspace), f'{{"pattern": "{pattern}"}}')


async def test_the_event_loop_keeps_serving_while_grep_runs(workspace: Workspace) -> None:
    for n in range(40):
        directory = workspace.root / f"d{n % 8}"
        directory.mkdir(exist_ok=True)
        (directory / f"f{n}.txt").write_text(("a" * 2_000 + "b\n") * 200)
    ticks = 0
    seen_by_grep: list[int] = []
    loop_served = threading.Event()

    def is_secret(path: str) -> bool:
        # grep is mid-scan here, in its worker thread. It goes on only once the loop
        # has served 100 ticks: were grep holding the loop, this would never happen.
        seen_by_grep.append(ticks)
        assert loop_served.wait(timeout=30), "the event loop was blocked while grep ran"
        return False

    tool = Grep(workspace, is_secret=is_secret)
    search = asyncio.create_task(grep(tool, f'{{"pattern": "{PATHOLOGICAL}"}}'))
    while not search.done():
        ticks += 1
        if ticks >= 100:
            loop_served.set()
        await asyncio.sleep(0)
    assert await search == "no lines match '^(a+)+$'"
    assert len(seen_by_grep) == 40
    assert ticks >= 100


async def test_a_deadline_stops_grep_with_partial_results(workspace: Workspace) -> None:
    (workspace.root / "a.txt").write_text("match\n")
    out = await grep(Grep(workspace, deadline_s=0), '{"pattern": "match"}')
    assert "search stopped after 0 s; these results are partial" in out


async def test_secrets_are_judged_on_the_real_target(workspace: Workspace, tmp_path: Path) -> None:
    root = workspace.root
    (root / ".env").write_text("OPENAI_API_KEY=sk-live-123\n")
    (root / "docs").mkdir()
    os.symlink("../.env", root / "docs" / "notes.txt")
    os.symlink(root / ".env", root / "docs" / "abs-notes.txt")
    (tmp_path / "home.env").write_text("TOKEN=sk-outside\n")
    os.symlink(tmp_path / "home.env", root / "docs" / "readme.md")
    (root / "app.py").write_text("KEY = 'sk-' + load()\n")
    judged: list[str] = []

    def is_secret(path: str) -> bool:
        judged.append(path)
        return path.endswith(".env")

    tool = Grep(workspace, is_secret=is_secret)
    out = await grep(tool, '{"pattern": "sk-"}')
    assert "sk-live-123" not in out and "sk-outside" not in out
    assert "app.py:1:" in out
    assert "skipped 3 file(s) that may hold secrets" in out
    # The check saw where each link really leads; the link out was never opened.
    assert sorted(set(judged)) == [".env", "app.py"]
    out = await grep(tool, '{"pattern": "sk-", "path": "docs/notes.txt"}')
    assert "sk-live-123" not in out
    assert "may hold secrets (.env)" in out


async def test_links_inside_are_searched_and_shown_by_their_name(workspace: Workspace) -> None:
    root = workspace.root
    (root / "src").mkdir()
    (root / "src" / "m.py").write_text("needle\n")
    os.symlink("src/m.py", root / "alias.py")
    os.symlink("src", root / "srclink")
    out = await grep(Grep(workspace), '{"pattern": "needle"}')
    # Linked directories are not descended (no loops, no duplicates); linked files are.
    assert out.splitlines() == ["alias.py:1: needle", "src/m.py:1: needle"]
