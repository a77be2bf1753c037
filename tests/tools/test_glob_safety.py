"""glob cannot freeze the bot: polynomial matching, a deadline, and a stop on cancel."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

from bot.errors import ToolError
from bot.tools import Workspace, glob_walk, search
from bot.tools.cutoff import Cutoff
from bot.tools.glob_walk import MAX_GLOB_PARTS, GlobResult
from bot.tools.search import Glob

# Short enough that a test which would otherwise hang ends soon; the fixed walk is far
# quicker than this, but a slow machine may see the note instead of the full answer.
DEADLINE_S = 2.0
STOPPED = f"[glob stopped after {DEADLINE_S:g} s; these results are partial"


async def glob(tool: Glob, arguments: str) -> str:
    return await tool.run(tool.parse_arguments(arguments))


async def test_links_back_to_the_root_do_not_make_glob_exponential(workspace: Workspace) -> None:
    # Before, each `*` level doubled the work through the two links: 2**40 paths.
    root = workspace.root
    (root / "x").write_text("")
    os.symlink(".", root / "l1")
    os.symlink(".", root / "l2")
    pattern = "*/" * 40 + "x"
    out = await glob(Glob(workspace, deadline_s=DEADLINE_S), f'{{"pattern": "{pattern}"}}')
    # Every alias names the same file; the first path to reach it is shown, once.
    assert out == "l1/" * 40 + "x" or out.startswith(STOPPED), out


async def test_alternating_double_stars_stay_polynomial(workspace: Workspace) -> None:
    # Before, each `**/*` pair multiplied the ways to split a path: 18 s for 6 pairs.
    for a in range(10):
        for b in range(10):
            for c in range(10):
                leaf = workspace.root / f"a{a}" / f"b{b}" / f"c{c}"
                for d in range(10):
                    (leaf / f"d{d}").mkdir(parents=True)
                (leaf / "f.txt").write_text("")
    tool = Glob(workspace, deadline_s=DEADLINE_S)
    # Three directories deep: two pairs find every file, six pairs (six or more) none.
    out = await glob(tool, '{"pattern": "' + "**/*/" * 2 + 'f.txt"}')
    if STOPPED not in out:
        found = out.splitlines()
        assert len(found) == 500 + 1  # the result cap, then the note of what is left
        assert found[-1] == "[… 500 more matches; narrow the pattern …]"
        assert all(line.endswith("/f.txt") and line.count("/") == 3 for line in found[:-1])
    out = await glob(tool, '{"pattern": "' + "**/*/" * 6 + 'f.txt"}')
    assert out == "no files match '" + "**/*/" * 6 + "f.txt'" or out.startswith(STOPPED), out


async def test_a_directory_reached_through_a_link_is_listed_once(workspace: Workspace) -> None:
    root = workspace.root
    (root / "pkg").mkdir()
    (root / "pkg" / "a.py").write_text("")
    os.symlink("pkg", root / "alias")  # sorts first, but the real path is preferred
    assert await glob(Glob(workspace), '{"pattern": "*/a.py"}') == "pkg/a.py"
    assert await glob(Glob(workspace), '{"pattern": "alias/a.py"}') == "alias/a.py"


async def test_a_deadline_stops_glob_with_a_note(workspace: Workspace) -> None:
    (workspace.root / "a.py").write_text("")
    out = await glob(Glob(workspace, deadline_s=0), '{"pattern": "**/*.py"}')
    assert out == "[glob stopped after 0 s; these results are partial — narrow the path or pattern]"


async def test_too_many_components_are_refused(workspace: Workspace) -> None:
    pattern = "/".join(["*"] * (MAX_GLOB_PARTS + 1))
    with pytest.raises(ToolError, match=f"more than {MAX_GLOB_PARTS} components"):
        await glob(Glob(workspace), f'{{"pattern": "{pattern}"}}')
    # Repeated `**` collapse into one component and `.` adds none.
    pattern = "/".join(["**"] * 200 + ["."] * 200 + ["*"] * (MAX_GLOB_PARTS - 1))
    assert len(glob_walk.pattern_parts(pattern)) == MAX_GLOB_PARTS


async def test_cancelling_glob_stops_its_thread(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(400):
        (workspace.root / f"d{n:03}").mkdir()
    started = threading.Event()
    listed: list[int] = []
    finished: list[GlobResult] = []
    done = threading.Event()
    real_entries = glob_walk._Glob._entries
    real_glob_paths = search.glob_paths

    def slow_entries(self: glob_walk._Glob, dir_fd: int) -> list[tuple[str, os.stat_result]]:
        # A slow disk: the whole walk would take 400 dirs at 50 ms = 20 s.
        listed.append(dir_fd)
        started.set()
        time.sleep(0.05)
        return real_entries(self, dir_fd)

    def watched_glob_paths(*args: object, **kwargs: object) -> GlobResult:
        try:
            result = real_glob_paths(*args, **kwargs)  # type: ignore[arg-type]
            finished.append(result)
            return result
        finally:
            done.set()

    monkeypatch.setattr(glob_walk._Glob, "_entries", slow_entries)
    monkeypatch.setattr(search, "glob_paths", watched_glob_paths)
    call = asyncio.create_task(glob(Glob(workspace, deadline_s=60), '{"pattern": "**/x"}'))
    assert await asyncio.to_thread(started.wait, 10)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    # The worker thread sees the stop flag and returns, long before its walk would end.
    assert await asyncio.to_thread(done.wait, 5)
    assert finished and finished[0].stopped
    assert len(listed) < 100


def test_the_stop_flag_is_observed_by_glob_paths(workspace: Workspace) -> None:
    (workspace.root / "a.py").write_text("")
    cutoff = Cutoff.after(60)
    assert glob_walk.glob_paths(workspace, ".", "*.py", cutoff=cutoff) == GlobResult(["a.py"])
    cutoff.stop.set()
    assert glob_walk.glob_paths(workspace, ".", "*.py", cutoff=cutoff) == GlobResult(
        [], stopped=True
    )


def test_glob_paths_keeps_newest_first(workspace: Workspace) -> None:
    for n, name in enumerate(["old.py", "new.py", "mid.py"]):
        path = workspace.root / name
        path.write_text("")
        os.utime(path, (1_000 + n, {0: 1_000, 1: 3_000, 2: 2_000}[n]))
    result = glob_walk.glob_paths(workspace, ".", "*.py", cutoff=Cutoff.after(60))
    assert result.paths == ["new.py", "mid.py", "old.py"]
