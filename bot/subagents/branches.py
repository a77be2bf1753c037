"""What a person does with an isolated child's branch: merge it, or discard it.

The task's `merge_state` is the claim: a branch moves from pending to merging (so two
clicks, on one replica or two, cannot merge it twice), then to merged, or back to
pending when the merge could not be made (a conflict, local changes in the way).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from bot.store.tasks import TaskRecord
from bot.subagents import worktree as worktrees
from bot.subagents.tracker import TaskTracker

logger = logging.getLogger(__name__)


def branch_problem(task: TaskRecord) -> str | None:
    """Why `task` has no branch waiting for a decision; None when it has one."""
    if not task.branch:
        return f"`{task.id}` has no branch: it did not work in a worktree, or changed nothing."
    if task.state == "running":
        return f"`{task.id}` is still running: its branch is not final yet."
    if task.merge_state == "merged":
        return f"`{task.branch}` was merged already."
    if task.merge_state == "discarded":
        return f"`{task.branch}` was discarded already."
    if task.merge_state == "merging":
        return f"`{task.branch}` is being merged now."
    return None


async def merge_branch(
    tracker: TaskTracker,
    task: TaskRecord,
    *,
    root: Path,
    by: str,
    protected: Sequence[worktrees.ProtectedFile],
    thread: worktrees.Worktree | None = None,
) -> str:
    """Merge the task's branch into `root`'s current branch, or into the thread's
    branch in its worktree `thread` (a workspace with a remote); what happened.

    `protected`: Baton's own files (configuration, database); a branch that changes
    any of them is refused, as one that changes `.baton/` is.
    """
    if problem := branch_problem(task):
        return problem
    assert task.branch is not None
    claimed = await tracker.store.move_merge_state(task.id, old="pending", new="merging")
    if claimed is None:
        return f"`{task.branch}` was merged or discarded meanwhile."
    try:
        message = f"Merge {task.branch}: {task.description} ({task.agent})"
        if thread is not None:
            outcome = await worktrees.merge_into_thread(
                thread,
                task.branch,
                message=message,
                expected=task.branch_commit,
                protected=protected,
            )
        else:
            outcome = await worktrees.merge(
                root, task.branch, message=message, expected=task.branch_commit, protected=protected
            )
    except Exception as exc:
        logger.exception("merging %s failed", task.branch)
        await tracker.store.move_merge_state(task.id, old="merging", new="pending")
        return f"Could not merge `{task.branch}`: {exc}"
    if outcome.merged:
        await tracker.store.move_merge_state(task.id, old="merging", new="merged")
        await tracker.append_log(task.id, f"⇢ merged by {by}: {outcome.message}")
        return f"✓ Merged `{task.branch}`: {outcome.message}"
    await tracker.store.move_merge_state(task.id, old="merging", new="pending")
    await tracker.append_log(task.id, f"✗ merge asked by {by} not made: {outcome.message}")
    if outcome.conflicts:
        files = ", ".join(f"`{name}`" for name in outcome.conflicts[:20])
        return (
            f"✗ `{task.branch}` conflicts with the workspace in {files}. The merge was aborted: "
            "the checkout is as it was and the branch keeps its work."
        )
    return f"✗ Not merged: {outcome.message}"


async def discard_branch(tracker: TaskTracker, task: TaskRecord, *, root: Path, by: str) -> str:
    """Delete the task's branch (and its worktree, if one is left); what happened."""
    if problem := branch_problem(task):
        return problem
    assert task.branch is not None
    claimed = await tracker.store.move_merge_state(task.id, old="pending", new="discarded")
    if claimed is None:
        return f"`{task.branch}` was merged or discarded meanwhile."
    try:
        existed = await worktrees.discard(root, task.branch)
    except worktrees.WorktreeError as exc:
        await tracker.store.move_merge_state(task.id, old="discarded", new="pending")
        return f"Could not discard `{task.branch}`: {exc}"
    await tracker.append_log(task.id, f"⊘ branch {task.branch} discarded by {by}")
    if not existed:
        return f"`{task.branch}` was already gone; it is marked discarded."
    return f"⊘ Discarded `{task.branch}` and its work."
