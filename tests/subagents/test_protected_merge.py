"""Merge, as a person's click reaches it (`Baton.merge_task`), refuses a branch that
changes Baton's own config: the composition root hands its files down. Real git, the
real composition root; the child's branch is made with the worktree API directly."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bot.app import Baton
from bot.subagents import worktree
from tests.fakes.openai_api import FakeOpenAI
from tests.subagents.harness import THREAD, make_baton

TASK = "task-coder-1"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=Dev", "-c", "user.email=dev@example.com",
         *args],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip


def make_repo(workspace: Path) -> None:
    """The workspace as a repository tracking notes.txt and a baton.yaml."""
    git(workspace, "init", "-q", "-b", "main")
    (workspace / "notes.txt").write_text("line one\n")
    (workspace / "baton.yaml").write_text("self_approval: false\napprovers: [U1]\n")
    git(workspace, "add", "notes.txt", "baton.yaml")
    git(workspace, "commit", "-q", "-m", "first")


async def finished_task(baton: Baton, files: dict[str, str]) -> str:
    """A finished isolated task whose branch holds `files`; its branch."""
    session = await baton.conversations.store.get_or_create(THREAD)
    await baton.tracker.store.create(
        task_id=TASK, session_id=session.id, channel_id="C1", agent="coder",
        description="edit", prompt="p", background=True, started_by="U1",
    )  # fmt: skip
    tree = await worktree.create(baton.workspace.root, TASK, baton.settings.state_dir / "wt")
    for name, text in files.items():
        (tree.path / name).write_text(text)
    change = await worktree.finish(tree, message="work")
    assert change is not None
    await baton.tracker.finish(TASK, state="completed", result="done")
    await baton.tracker.store.record_branch(
        TASK, branch=change.branch, commit=change.commit, change=change.summary()
    )
    return change.branch


async def test_merge_refuses_a_branch_changing_the_config_the_bot_runs_with(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    make_repo(workspace)
    baton = await make_baton(tmp_path, fake_llm, config_path=(workspace / "baton.yaml").resolve())
    try:
        branch = await finished_task(
            baton, {"baton.yaml": "self_approval: true\n", "notes.txt": "more\n"}
        )
        reply = await baton.merge_task(TASK, by="<@U1>")
        detail = await baton.tracker.get(TASK)
    finally:
        await baton.close()
    assert reply == (
        f"✗ Not merged: {branch} changes baton.yaml (Baton's configuration), which no agent "
        "may change; it is not merged."
    )
    assert (workspace / "baton.yaml").read_text() == "self_approval: false\napprovers: [U1]\n"
    assert (workspace / "notes.txt").read_text() == "line one\n"
    assert detail is not None and detail.task.merge_state == "pending"
    assert any("not made" in line and "baton.yaml" in line for line in detail.log)


async def test_a_config_kept_outside_the_workspace_lets_the_same_branch_merge(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    make_repo(workspace)
    config = tmp_path / "baton.yaml"
    config.write_text("model: m\n")
    baton = await make_baton(tmp_path, fake_llm, config_path=config.resolve())
    try:
        await finished_task(baton, {"baton.yaml": "just a file here\n"})
        reply = await baton.merge_task(TASK, by="<@U1>")
    finally:
        await baton.close()
    assert reply.startswith("✓ Merged"), reply
    assert (workspace / "baton.yaml").read_text() == "just a file here\n"
