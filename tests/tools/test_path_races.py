"""Swapping a directory or a file for a symlink out, while the tools run, never leaks."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from bot.errors import ToolError
from bot.tools import Tool, Workspace, build_workspace_tools

SWAPS = 2_000
MAX_CALLS = 20_000


def swapper(swap: Callable[[], None]) -> tuple[threading.Thread, threading.Event]:
    done = threading.Event()

    def run() -> None:
        try:
            for _ in range(SWAPS):
                swap()
        finally:
            done.set()

    return threading.Thread(target=run), done


def move_onto(source: Path, target: Path) -> None:
    """Rename, first removing a directory write_file made in the gap (it creates parents)."""
    while True:
        try:
            os.rename(source, target)
            return
        except OSError:
            shutil.rmtree(target, ignore_errors=True)


async def hammer(
    workspace: Workspace, done: threading.Event, calls: list[tuple[str, str]]
) -> list[str]:
    """Call the tools until the swapping stops; every answer (or error text) is returned."""
    tools = build_workspace_tools(workspace)
    answers: list[str] = []
    for count in range(MAX_CALLS):
        if done.is_set():
            break
        name, arguments = calls[count % len(calls)]
        tool = tools.get(name)
        assert isinstance(tool, Tool)
        try:
            answers.append(await tool.run(tool.parse_arguments(arguments)))
        except ToolError as exc:
            answers.append(f"error: {exc}")
    return answers


async def test_a_directory_swapped_for_a_link_out_never_leaks(
    workspace: Workspace, tmp_path: Path
) -> None:
    root = workspace.root
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("s3cr3t-value outside\n")
    (root / "d").mkdir()
    (root / "d" / "f.txt").write_text("inside\n")

    def swap() -> None:
        os.rename(root / "d", root / "d.saved")
        os.symlink(outside, root / "d.link")
        move_onto(root / "d.link", root / "d")
        os.unlink(root / "d")
        move_onto(root / "d.saved", root / "d")

    thread, done = swapper(swap)
    thread.start()
    try:
        answers = await hammer(
            workspace,
            done,
            [
                ("read_file", '{"path": "d/f.txt"}'),
                ("write_file", '{"path": "d/new.txt", "content": "written"}'),
                ("grep", '{"pattern": "s3cr3t|inside", "path": "d"}'),
                ("list_dir", '{"path": "d"}'),
            ],
        )
    finally:
        thread.join()
    assert not any("s3cr3t-value" in answer for answer in answers)
    assert sorted(os.listdir(outside)) == ["f.txt"]


async def test_a_file_swapped_for_a_link_out_never_leaks(
    workspace: Workspace, tmp_path: Path
) -> None:
    root = workspace.root
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cr3t-value outside\n")
    (root / "f.txt").write_text("inside\n")

    def swap() -> None:
        os.symlink(secret, root / "tmp-link")
        os.rename(root / "tmp-link", root / "f.txt")
        (root / "tmp-file").write_text("inside\n")
        os.rename(root / "tmp-file", root / "f.txt")

    thread, done = swapper(swap)
    thread.start()
    try:
        answers = await hammer(
            workspace,
            done,
            [
                ("read_file", '{"path": "f.txt"}'),
                ("edit_file", '{"path": "f.txt", "old_text": "inside", "new_text": "edited"}'),
                ("write_file", '{"path": "f.txt", "content": "inside\\n"}'),
                ("grep", '{"pattern": "s3cr3t"}'),
            ],
        )
    finally:
        thread.join()
    assert not any("s3cr3t-value" in answer for answer in answers)
    assert secret.read_text() == "s3cr3t-value outside\n"
