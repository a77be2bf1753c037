"""Isolated children (`isolation: worktree`) end to end: the real composition root, real
git, the real sandbox when the machine has one, the fake model over HTTP."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

from bot.config import PermissionsConfig
from bot.store.tasks import TaskRecord
from bot.subagents.worktree import _repo_lock
from tests.fakes.openai_api import FakeOpenAI, RecordedRequest, Reply, ToolCallSpec
from tests.subagents.harness import THREAD, Router, make_baton, run_turn, wait_finished

CODER = "CODER-PROMPT"
# Background children cannot ask anyone: the operator allows what they need.
WRITES = PermissionsConfig(allow=("write_file", "bash"))


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def make_repo(workspace: Path) -> None:
    git(workspace, "init", "-q", "-b", "main")
    git(workspace, "config", "user.email", "dev@example.com")
    git(workspace, "config", "user.name", "Dev")
    (workspace / "notes.txt").write_text("line one\n")
    git(workspace, "add", "notes.txt")
    git(workspace, "commit", "-q", "-m", "first")


def write_coder(tmp_path: Path, extra: str = "isolation: worktree") -> None:
    directory = tmp_path / "agents"
    directory.mkdir(exist_ok=True)
    (directory / "coder.md").write_text(
        f"---\nname: coder\ndescription: Edits files.\n{extra}\n---\n{CODER}\n"
    )


def task(prompt: str, *, id: str, background: bool = True, **more: object) -> ToolCallSpec:
    arguments: dict[str, object] = {"subagent_type": "coder", "prompt": prompt, **more}
    if background:
        arguments["background"] = True
    return ToolCallSpec("task", arguments, id=id)


def edit_then_finish(request: RecordedRequest) -> Reply:
    """A child that writes its prompt into notes.txt, then answers."""
    if any(m.get("role") == "tool" for m in request.messages):
        return Reply(text="edited")
    prompt = str(request.messages[1]["content"])
    return Reply(
        tool_calls=[
            ToolCallSpec("write_file", {"path": "notes.txt", "content": f"{prompt}\n"}, id="w")
        ]
    )


async def test_sixteen_isolated_children_on_one_file_each_keep_their_change(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    write_coder(tmp_path)
    baton = await make_baton(tmp_path, fake_llm, permissions=WRITES)
    make_repo(baton.workspace.root)
    router = Router(fake_llm)
    router.main += [
        Reply(tool_calls=[task(f"version {n}", id=f"c{n}") for n in range(16)]),
        Reply(text="started"),
    ]
    router.default_child = edit_then_finish
    try:
        await run_turn(baton, "sixteen edits")
        ids = [f"task-coder-{n}" for n in range(1, 17)]
        finished: list[TaskRecord] = [await wait_finished(baton, i) for i in ids]
    finally:
        await baton.close()
    root = baton.workspace.root
    # The main checkout is untouched: every child worked in its own worktree.
    assert (root / "notes.txt").read_text() == "line one\n"
    assert git(root, "status", "--porcelain") == ""
    contents = set()
    for record in finished:
        assert record.state == "completed", record.error
        assert record.branch == f"baton/{record.id}" and record.merge_state == "pending"
        assert "1 file changed" in (record.change or "")
        assert f"Changes: committed on branch {record.branch}" in (record.result or "")
        contents.add(git(root, "show", f"{record.branch}:notes.txt"))
    assert contents == {f"version {n}\n" for n in range(16)}
    # The worktrees themselves are gone; the branches hold the work.
    assert not any((baton.settings.state_dir / "worktrees").glob("task-*/notes.txt"))


async def test_an_unchanged_isolated_child_leaves_no_branch(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    write_coder(tmp_path)
    baton = await make_baton(tmp_path, fake_llm, permissions=WRITES)
    make_repo(baton.workspace.root)
    router = Router(fake_llm)
    router.main += [
        Reply(tool_calls=[task("only look", id="c", background=False)]),
        Reply(text="ok"),
    ]
    router.children[CODER] = [Reply(text="nothing to change")]
    try:
        await run_turn(baton, "look")
        [record] = await baton.tracker.list(session_id=1)
    finally:
        await baton.close()
    assert record.state == "completed" and record.branch is None
    assert "baton/" not in git(baton.workspace.root, "branch", "--list")
    result = next(
        m["content"] for m in router.main_requests()[-1].messages if m.get("tool_call_id") == "c"
    )
    assert "Changes: none (its worktree was removed)." in result


async def test_a_workspace_that_is_not_a_repository_refuses_before_starting(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    write_coder(tmp_path, extra="")
    baton = await make_baton(tmp_path, fake_llm, permissions=WRITES)
    router = Router(fake_llm)
    router.main += [
        # Asked through the task parameter, in the background and in the foreground.
        Reply(
            tool_calls=[
                task("a", id="bg", isolation="worktree"),
                task("b", id="fg", background=False, isolation="worktree"),
            ]
        ),
        Reply(text="ok"),
    ]
    try:
        await run_turn(baton, "isolate")
        records = await baton.tracker.list(session_id=1)
    finally:
        await baton.close()
    assert records == []  # no task was recorded, no child started
    assert router.child_requests() == []
    last = router.main_requests()[-1]
    for call in ("bg", "fg"):
        content = next(m["content"] for m in last.messages if m.get("tool_call_id") == call)
        assert "is not a git repository" in content and "was not started" in content


async def test_a_refused_repository_check_is_not_remembered(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """The check is shared by a fan-out and a passed one is kept a few seconds; a failed
    one is not: once the workspace is a repository, the next isolated child starts."""
    write_coder(tmp_path)
    baton = await make_baton(tmp_path, fake_llm, permissions=WRITES)
    router = Router(fake_llm)
    router.main += [
        Reply(tool_calls=[task(f"early {n}", id=f"e{n}", background=False) for n in range(3)]),
        Reply(text="not a repository yet"),
        Reply(tool_calls=[task("late", id="late", background=False)]),
        Reply(text="done"),
    ]
    router.default_child = edit_then_finish
    try:
        await run_turn(baton, "too early")
        assert await baton.tracker.list(session_id=1) == []
        make_repo(baton.workspace.root)
        await run_turn(baton, "now")
        [record] = await baton.tracker.list(session_id=1)
    finally:
        await baton.close()
    early = router.main_requests()[1]
    for n in range(3):
        content = next(m["content"] for m in early.messages if m.get("tool_call_id") == f"e{n}")
        assert "is not a git repository" in content and "was not started" in content
    assert record.state == "completed", record.error
    assert git(baton.workspace.root, "show", f"{record.branch}:notes.txt") == "late\n"


async def test_an_isolated_childs_tools_stay_in_its_worktree(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """A hostile child aims at the main checkout by absolute path, by `..` and with bash."""
    write_coder(tmp_path)
    baton = await make_baton(tmp_path, fake_llm, permissions=WRITES)
    root = baton.workspace.root
    make_repo(root)
    router = Router(fake_llm)
    router.main += [Reply(tool_calls=[task("attack", id="c", background=False)]), Reply(text="ok")]
    outputs: list[str] = []

    def hostile(request: RecordedRequest) -> Reply:
        tools = [m for m in request.messages if m.get("role") == "tool"]
        outputs.extend(str(m["content"]) for m in tools[len(outputs) :])
        step = len(tools)
        if step == 0:
            return Reply(
                tool_calls=[
                    ToolCallSpec(
                        "write_file", {"path": str(root / "notes.txt"), "content": "x"}, id="a"
                    )
                ]
            )
        if step == 1:
            return Reply(
                tool_calls=[
                    ToolCallSpec(
                        "write_file",
                        {"path": "../../../ws/notes.txt", "content": "y"},
                        id="b",
                    )
                ]
            )
        if step == 2:
            return Reply(tool_calls=[ToolCallSpec("bash", {"command": f"ls {root}; pwd"}, id="c")])
        return Reply(text="done")

    router.default_child = hostile
    try:
        await run_turn(baton, "go")
    finally:
        await baton.close()
    assert (root / "notes.txt").read_text() == "line one\n"
    assert git(root, "status", "--porcelain") == ""
    assert "outside" in outputs[0].lower() or "error" in outputs[0].lower()
    assert "error" in outputs[1].lower() or "outside" in outputs[1].lower()
    if baton.sandboxed:
        # In the sandbox the main checkout does not exist; the command runs in the worktree.
        assert f"cannot access '{root}': No such file or directory" in outputs[2]
        assert str(baton.settings.state_dir / "worktrees" / "task-coder-1") in outputs[2]


async def test_a_cancelled_isolated_child_keeps_its_work_on_its_branch(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    write_coder(tmp_path)
    baton = await make_baton(tmp_path, fake_llm, permissions=WRITES)
    make_repo(baton.workspace.root)
    router = Router(fake_llm)
    router.main += [Reply(tool_calls=[task("half", id="c")]), Reply(text="started")]
    wrote = asyncio.Event()
    hold = asyncio.Event()

    async def write_then_hang(request: RecordedRequest) -> Reply:
        if any(m.get("role") == "tool" for m in request.messages):
            wrote.set()
            await hold.wait()
            return Reply(text="never")
        return Reply(
            tool_calls=[ToolCallSpec("write_file", {"path": "half.txt", "content": "half\n"})]
        )

    router.default_child = write_then_hang
    try:
        await run_turn(baton, "go")
        await asyncio.wait_for(wrote.wait(), 10)
        await baton.tracker.cancel("task-coder-1", by="<@U1>")
        record = await wait_finished(baton, "task-coder-1")
        for _ in range(100):
            record = (await baton.tracker.get("task-coder-1")).task  # type: ignore[union-attr]
            if record.branch:
                break
            await asyncio.sleep(0.05)
    finally:
        hold.set()
        await baton.close()
    assert record.state == "cancelled"
    assert record.branch == "baton/task-coder-1" and record.merge_state == "pending"
    assert git(baton.workspace.root, "show", "baton/task-coder-1:half.txt") == "half\n"


async def test_a_killed_processs_isolated_child_keeps_its_work_after_a_restart(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """What a kill -9 leaves: a running task owned by a process that is gone, and its
    worktree with the child's edits. The next start commits them on the task's branch."""
    from bot.subagents import worktree

    baton = await make_baton(tmp_path, fake_llm, permissions=WRITES)
    root = baton.workspace.root
    make_repo(root)
    session = await baton.conversations.store.get_or_create(THREAD)
    try:
        record = await baton.tracker.store.create(
            task_id="task-coder-7", session_id=session.id, channel_id="C1", agent="coder",
            description="edit notes", prompt="p", background=True, started_by="U1",
            owner="a-process-that-died",
        )  # fmt: skip
        tree = await worktree.create(root, record.id, baton.settings.state_dir / "worktrees")
        (tree.path / "notes.txt").write_text("half done\n")
        failed = await baton.recover_tasks()
        task = (await baton.tracker.get(record.id)).task  # type: ignore[union-attr]
        # Nothing else to recover the second time round.
        assert await baton.recover_tasks() == []
    finally:
        await baton.close()
    assert [f.id for f in failed] == [record.id]
    assert task.state == "failed" and "restart" in (task.error or "")
    assert task.branch == "baton/task-coder-7" and task.merge_state == "pending"
    assert git(root, "show", "baton/task-coder-7:notes.txt") == "half done\n"
    assert not tree.path.exists()
    assert (root / "notes.txt").read_text() == "line one\n"


async def test_a_lead_in_a_worktree_cannot_redirect_its_childrens_git(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """An isolated lead points its worktree's `.git` at a repository of its own, whose
    config runs a program on checkout. Its tools refuse to write `.git`; and even with the
    file rewritten behind their back, its isolated child's worktree is made from the
    site's checkout, so Baton's git never reads that config."""
    directory = tmp_path / "agents"
    directory.mkdir()
    (directory / "lead.md").write_text(
        "---\nname: lead\ndescription: Leads.\nisolation: worktree\n"
        "allowed_subagents: coder\n---\nLEAD-PROMPT\n"
    )
    write_coder(tmp_path)
    baton = await make_baton(tmp_path, fake_llm, permissions=WRITES)
    root = baton.workspace.root
    make_repo(root)
    marker = tmp_path / "PWNED"
    evil = tmp_path / "evil"
    git(tmp_path, "init", "-q", str(evil))
    git(evil, "config", "filter.pwn.smudge", f"sh -c 'touch {marker}; cat'")
    git(evil, "config", "core.fsmonitor", f"touch {marker}")
    (evil / ".gitattributes").write_text("* filter=pwn\n")
    (evil / "notes.txt").write_text("evil\n")
    git(evil, "add", ".")
    git(evil, "-c", "user.name=e", "-c", "user.email=e@e", "commit", "-q", "-m", "evil")
    marker.unlink(missing_ok=True)  # our own git in that repository ran it just now
    router = Router(fake_llm)
    router.main += [Reply(tool_calls=[
        ToolCallSpec("task", {"subagent_type": "lead", "prompt": "lead it"}, id="l")
    ]), Reply(text="done")]  # fmt: skip
    refusals: list[str] = []

    def lead(request: RecordedRequest) -> Reply:
        results = [m for m in request.messages if m.get("role") == "tool"]
        if not results:
            return Reply(tool_calls=[ToolCallSpec(
                "write_file", {"path": ".git", "content": f"gitdir: {evil}/.git\n"}, id="w"
            )])  # fmt: skip
        if len(results) == 1:
            refusals.append(str(results[0]["content"]))
            # Behind the tools' back (as if a hole elsewhere let it): rewrite it anyway.
            (Path(baton.settings.state_dir) / "worktrees" / "task-lead-1" / ".git").write_text(
                f"gitdir: {evil}/.git\n"
            )
            return Reply(tool_calls=[ToolCallSpec(
                "task", {"subagent_type": "coder", "prompt": "edit", "isolation": "worktree"},
                id="c",
            )])  # fmt: skip
        return Reply(text="lead done")

    router.children["LEAD-PROMPT"] = [lead, lead, lead]
    router.children[CODER] = [
        Reply(tool_calls=[ToolCallSpec("write_file", {"path": "c.txt", "content": "c\n"})]),
        Reply(text="coded"),
    ]
    try:
        await run_turn(baton, "go")
        coder = (await baton.tracker.get("task-coder-1")).task  # type: ignore[union-attr]
    finally:
        await baton.close()
    assert "protected" in refusals[0]
    assert not marker.exists()
    assert coder.state == "completed" and coder.branch == "baton/task-coder-1"
    # The child's branch starts from the site's own history, not the lead's fake one.
    assert (
        git(root, "log", "--format=%s", "baton/task-coder-1")
        == "coder: edit (task-coder-1)\nfirst\n"
    )


async def test_worktrees_left_by_a_killed_replica_are_kept_when_it_starts_again(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """Another replica failed the task already (its owner's heartbeat stopped); the
    worktree is only in the killed replica's state directory: its next start keeps it."""
    from bot.subagents import worktree

    baton = await make_baton(tmp_path, fake_llm, permissions=WRITES)
    root = baton.workspace.root
    make_repo(root)
    session = await baton.conversations.store.get_or_create(THREAD)
    try:
        running = await baton.tracker.store.create(
            task_id="task-coder-8", session_id=session.id, channel_id="C1", agent="coder",
            description="still running elsewhere", prompt="p", background=True,
            started_by="U1", owner=baton.instances.id,
        )  # fmt: skip
        failed = await baton.tracker.store.create(
            task_id="task-coder-9", session_id=session.id, channel_id="C1", agent="coder",
            description="edit", prompt="p", background=True, started_by="U1",
            owner=baton.instances.id,
        )  # fmt: skip
        base = baton.settings.state_dir / "worktrees"
        kept_tree = await worktree.create(root, running.id, base)
        tree = await worktree.create(root, failed.id, base)
        (tree.path / "notes.txt").write_text("left behind\n")
        await baton.tracker.store.finish(
            failed.id, state="failed", result=None, error="interrupted by a restart"
        )
        # Killed between making a worktree's directory and checking it out.
        unstarted = await baton.tracker.store.create(
            task_id="task-coder-10", session_id=session.id, channel_id="C1", agent="coder",
            description="never checked out", prompt="p", background=True, started_by="U1",
            owner=baton.instances.id,
        )  # fmt: skip
        await asyncio.to_thread(worktree.make_place, base, unstarted.id, root)
        await baton.tracker.store.finish(
            unstarted.id, state="failed", result=None, error="interrupted by a restart"
        )
        await baton.recover_worktrees()
        task = (await baton.tracker.get(failed.id)).task  # type: ignore[union-attr]
    finally:
        await baton.close()
    assert task.branch == "baton/task-coder-9" and task.merge_state == "pending"
    assert git(root, "show", "baton/task-coder-9:notes.txt") == "left behind\n"
    assert not tree.path.exists()
    assert kept_tree.path.exists()  # a running task's worktree is left alone
    assert not (base / "task-coder-10").exists()  # the empty directory is tidied


async def test_an_isolated_child_whose_run_crashes_keeps_its_work(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """A bug mid-run (here logging the child's answer raises, once it has edited a file)
    ends the task failed; the edit stays on its branch, not in a stray worktree."""
    write_coder(tmp_path)
    baton = await make_baton(tmp_path, fake_llm, permissions=WRITES)
    make_repo(baton.workspace.root)
    router = Router(fake_llm)
    router.main += [Reply(tool_calls=[task("edit", id="c")]), Reply(text="started")]
    original = baton.tracker.append_log

    async def failing(task_id: str, *lines: str) -> None:
        if any(line.startswith("edited") for line in lines):
            raise RuntimeError("the disk is full")
        await original(task_id, *lines)

    baton.tracker.append_log = failing  # type: ignore[method-assign]
    router.default_child = edit_then_finish
    try:
        await run_turn(baton, "go")
        record = await wait_finished(baton, "task-coder-1")
        for _ in range(100):
            record = (await baton.tracker.get("task-coder-1")).task  # type: ignore[union-attr]
            if record.branch:
                break
            await asyncio.sleep(0.05)
    finally:
        await baton.close()
    assert record.state == "failed" and "the disk is full" in (record.error or "")
    assert record.branch == "baton/task-coder-1"
    assert git(baton.workspace.root, "show", "baton/task-coder-1:notes.txt") == "edit\n"
    assert not (baton.settings.state_dir / "worktrees" / "task-coder-1").exists()


async def test_an_isolated_childs_first_model_call_does_not_wait_for_its_checkout(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """The checkout runs while the child's first model call is in flight; its first
    tool call waits for it. Here the checkout is held up (the repository's lock is
    taken) until the child's model has answered."""
    write_coder(tmp_path)
    baton = await make_baton(tmp_path, fake_llm, permissions=WRITES)
    make_repo(baton.workspace.root)
    router = Router(fake_llm)
    router.main += [Reply(tool_calls=[task("early", id="c")]), Reply(text="started")]
    worktree = baton.settings.state_dir / "worktrees" / "task-coder-1"
    seen: list[list[str]] = []
    lock = _repo_lock(baton.workspace.root / ".git")
    await lock.acquire()

    def child(request: RecordedRequest) -> Reply:
        if not seen:
            seen.append(sorted(p.name for p in worktree.iterdir()))  # not checked out yet
            lock.release()
        return edit_then_finish(request)

    router.default_child = child
    try:
        await run_turn(baton, "go")
        record = await wait_finished(baton, "task-coder-1")
    finally:
        if lock.locked() and not seen:
            lock.release()
        await baton.close()
    assert seen == [[]]  # the model was asked while the directory was still empty
    assert record.state == "completed", record.error
    assert git(baton.workspace.root, "show", "baton/task-coder-1:notes.txt") == "early\n"


async def test_a_checkout_that_fails_mid_run_fails_the_task_and_runs_no_tool(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """A branch already named like the task's (planted, or left by another Baton) makes
    the checkout fail after the child's model was asked: the run stops, the task fails
    saying why, no tool ran, and the planted branch is left as it was."""
    write_coder(tmp_path)
    baton = await make_baton(tmp_path, fake_llm, permissions=WRITES)
    root = baton.workspace.root
    make_repo(root)
    git(root, "branch", "baton/task-coder-1")
    planted = git(root, "rev-parse", "baton/task-coder-1").strip()
    router = Router(fake_llm)
    router.main += [Reply(tool_calls=[task("blocked", id="c")]), Reply(text="started")]
    router.default_child = edit_then_finish
    try:
        await run_turn(baton, "go")
        record = await wait_finished(baton, "task-coder-1")
        detail = await baton.tracker.get("task-coder-1")
    finally:
        await baton.close()
    assert record.state == "failed"
    assert "could not make its worktree" in (record.error or "")
    assert "already exists" in (record.error or "")
    assert detail is not None and not any(line.startswith("→ write_file") for line in detail.log)
    assert git(root, "rev-parse", "baton/task-coder-1").strip() == planted
    assert (root / "notes.txt").read_text() == "line one\n"
    assert not (baton.settings.state_dir / "worktrees" / "task-coder-1").exists()


async def test_a_child_cancelled_before_its_checkout_leaves_nothing_behind(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    """Cancelled from /tasks while its first model call is in flight and its checkout is
    still held up: the task ends cancelled, and once the checkout is done its worktree
    and branch (nothing in them) are removed."""
    write_coder(tmp_path)
    baton = await make_baton(tmp_path, fake_llm, permissions=WRITES)
    root = baton.workspace.root
    make_repo(root)
    router = Router(fake_llm)
    router.main += [Reply(tool_calls=[task("late", id="c")]), Reply(text="started")]
    asked = asyncio.Event()
    hold = asyncio.Event()
    lock = _repo_lock(root / ".git")
    await lock.acquire()

    async def hang(request: RecordedRequest) -> Reply:
        asked.set()
        await hold.wait()
        return Reply(text="never")

    router.default_child = hang
    try:
        await run_turn(baton, "go")
        await asyncio.wait_for(asked.wait(), 10)
        cancelling = asyncio.create_task(baton.tracker.cancel("task-coder-1", by="<@U1>"))
        await asyncio.sleep(0.1)  # the cancel waits for the child, which waits for git
        lock.release()
        await cancelling
        record = await wait_finished(baton, "task-coder-1")
        worktree = baton.settings.state_dir / "worktrees" / "task-coder-1"
        for _ in range(100):
            if not worktree.exists():
                break
            await asyncio.sleep(0.05)
    finally:
        hold.set()
        if lock.locked():
            lock.release()
        await baton.close()
    assert record.state == "cancelled" and record.branch is None
    assert not worktree.exists()
    assert "baton/" not in git(root, "branch", "--list")
