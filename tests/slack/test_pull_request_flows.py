"""Pull requests from Slack threads, end to end, including the ways they go wrong.

The real Bolt app works on a channel whose workspace has a git remote: a real git server
(git's http-backend, checking the token) and a fake GitHub REST API. Each thread works
in its own worktree on `baton/<id>`; these tests drive it the way people and models do
(and the way an attacker would): two threads on one file, follow-ups that update a PR,
Show diff, Discard, secrets kept out of reach, the `open_pull_request` tool, who may
click what, failures (revoked token, GitHub down, someone else's push, a protected
branch) and an isolated sub-agent working on the thread's branch.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from bot.config import AccessConfig, PermissionsConfig
from bot.slack.forge_views import DISCARD_BRANCH, OPEN_PULL, SHOW_DIFF
from bot.store.branches import ThreadBranch
from tests.fakes.openai_api import RecordedRequest, Reply, ToolCallSpec
from tests.slack.forge_harness import (
    CHANNEL,
    FILES,
    REPO,
    TOKEN,
    ForgeHarness,
    ask,
    branch_of,
    forge_harness,
    until_said,
    writes,
)
from tests.slack.harness import ALICE, BOB, MAIN_MARK, until

APPROVE = "baton_approve"
DENY = "baton_deny"
MERGE_TASK = "baton_merge_task"
OTHER_CHANNEL = "C2"  # mapped to the default workspace: no remote
# Every form the token could take on disk or in an environment.
SECRETS = (
    TOKEN.encode(),
    base64.b64encode(f"x-access-token:{TOKEN}".encode()),
    base64.b64encode(TOKEN.encode()),
)


# --- small helpers ------------------------------------------------------------------------


def git(repo: Path, *args: str, check: bool = True) -> str:
    """git in a local repository (the checkout, a worktree); its stdout."""
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=check
    ).stdout


def local_head(forge: ForgeHarness, branch: str) -> str | None:
    """The commit of `branch` in the shared checkout, or None when it has no such branch."""
    out = git(
        forge.checkout, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", check=False
    )
    return out.strip() or None


def tree(row: ThreadBranch) -> Path:
    """The directory of a thread's worktree."""
    return Path(row.worktree)


def is_ancestor(repo: Path, older: str, newer: str) -> bool:
    """Whether commit `older` is in `newer`'s history."""
    found = subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", older, newer])
    return found.returncode == 0


def button_value(forge: ForgeHarness, thread: str, action: str) -> str:
    found = forge.slack.find_button(CHANNEL, thread, action)
    assert found is not None, f"no {action} button in the thread"
    return str(found["button"]["value"])


async def press(
    forge: ForgeHarness, action: str, value: str, *, user: str = ALICE, channel: str = CHANNEL
) -> None:
    """Click a button and wait until whatever it started has finished."""
    assert await forge.slack.click(action, value, user=user, channel=channel) == 200
    await forge.slack.settle()


async def press_expecting_ephemeral(
    forge: ForgeHarness, action: str, value: str, *, user: str, channel: str = CHANNEL
) -> dict[str, Any]:
    """Click a button that should only answer the clicker privately; that answer."""
    before = len(forge.slack.slack.ephemerals)
    assert await forge.slack.click(action, value, user=user, channel=channel) == 200
    await until(lambda: len(forge.slack.slack.ephemerals) > before)
    await forge.slack.settle()
    answer = forge.slack.slack.ephemerals[before]
    assert answer["user"] == user and answer["channel"] == channel
    return answer


async def open_pull(forge: ForgeHarness, thread: str, *, user: str = ALICE) -> str:
    """Click the thread's Open pull request; the PR's branch once it is opened."""
    await press(forge, OPEN_PULL, button_value(forge, thread, OPEN_PULL), user=user)
    await until_said(forge, thread, "Opened draft pull request")
    row = await branch_of(forge, thread)
    assert row is not None and row.pr_number is not None
    return row.branch


async def approval(forge: ForgeHarness, thread: str) -> dict[str, Any]:
    """The approval request the run posted in the thread (its Approve button)."""
    await until(lambda: forge.slack.find_button(CHANNEL, thread, APPROVE) is not None)
    found = forge.slack.find_button(CHANNEL, thread, APPROVE)
    assert found is not None
    return found


async def decide(forge: ForgeHarness, found: dict[str, Any], action: str) -> None:
    """ALICE (who asked) clicks Approve or Deny on an approval request; the run ends."""
    value, ts = found["button"]["value"], found["message"]["ts"]
    assert await forge.slack.click(action, value, user=ALICE, message_ts=ts) == 200
    await forge.slack.settle()


def said(forge: ForgeHarness, thread: str) -> str:
    return json.dumps(forge.slack.thread(CHANNEL, thread), ensure_ascii=False)


def nothing_pushed(forge: ForgeHarness) -> bool:
    """No pull request was asked of GitHub and no push reached the git server."""
    pushes = [r for r in forge.git.requests if r.path.endswith("/git-receive-pack")]
    return not forge.github.pulls(REPO) and not pushes


def server_branches(forge: ForgeHarness) -> list[str]:
    out = git(forge.git.bare_path(REPO), "for-each-ref", "--format=%(refname)", "refs/heads")
    return out.split()


# --- 1. two threads, one file -------------------------------------------------------------


async def test_two_threads_change_one_file_and_each_pull_request_holds_only_its_own(
    tmp_path: Path,
) -> None:
    async with forge_harness(tmp_path) as forge:
        first = await ask(forge, "say A", writes("app.py", "print('A')\n"))
        second = await ask(forge, "say B", writes("app.py", "print('B')\n"))
        branch_a = await open_pull(forge, first)
        branch_b = await open_pull(forge, second)
        assert branch_a != branch_b

        pulls = {pull.head_ref: pull for pull in forge.github.pulls(REPO)}
        assert set(pulls) == {branch_a, branch_b}
        assert forge.git.show(REPO, branch_a, "app.py") == "print('A')\n"
        assert forge.git.show(REPO, branch_b, "app.py") == "print('B')\n"
        # Each branch is one commit on main: nothing of the other thread's.
        for branch, subject in ((branch_a, "say A"), (branch_b, "say B")):
            assert forge.git.log(REPO, f"main..{branch}") == [subject]
            changed = git(forge.git.bare_path(REPO), "diff", "--name-only", f"main...{branch}")
            assert changed.split() == ["app.py"]
        # Each PR links its own thread's branch in the thread it came from.
        assert f"/pull/{pulls[branch_a].number}" in said(forge, first)
        assert f"/pull/{pulls[branch_b].number}" in said(forge, second)
        assert f"/pull/{pulls[branch_b].number}" not in said(forge, first)
        # The shared checkout is untouched, and main on the forge too.
        assert (forge.checkout / "app.py").read_text() == FILES["app.py"]
        assert git(forge.checkout, "status", "--porcelain") == ""
        assert forge.git.show(REPO, "main", "app.py") == FILES["app.py"]


# --- 2. a follow-up updates the pull request ----------------------------------------------


async def test_a_follow_up_in_a_thread_with_a_pull_request_pushes_to_it(tmp_path: Path) -> None:
    async with forge_harness(tmp_path) as forge:
        thread = await ask(forge, "add a greeting", writes("greet.py", "print('hi')\n"))
        branch = await open_pull(forge, thread)
        opened = forge.git.head(REPO, branch)

        await ask(
            forge,
            "also say bye",
            writes("bye.py", "print('bye')\n", call_id="w2"),
            thread_ts=thread,
        )
        update = await until_said(forge, thread, "Pushed: pull request")
        assert "bye.py" in json.dumps(update)
        pushed = forge.git.head(REPO, branch)
        assert pushed != opened and pushed == local_head(forge, branch)
        assert forge.git.log(REPO, branch)[:2] == ["also say bye", "add a greeting"]
        assert forge.git.show(REPO, branch, "bye.py") == "print('bye')\n"
        # Still one pull request: the same one now shows the new commit.
        pulls = forge.github.pulls(REPO)
        assert len(pulls) == 1 and pulls[0].head_ref == branch
        # The update's message offers Update (not Open) for that PR.
        found = forge.slack.find_button(CHANNEL, thread, OPEN_PULL)
        assert found is not None and found["button"]["text"]["text"] == "Update pull request"


# --- 2b. a thread's branch, pushed at -----------------------------------------------------


async def test_two_quick_clicks_open_one_pull_request(tmp_path: Path) -> None:
    async with forge_harness(tmp_path) as forge:
        thread = await ask(forge, "add a greeting", writes("greet.py", "print('hi')\n"))
        value = button_value(forge, thread, OPEN_PULL)
        for _ in range(3):
            assert await forge.slack.click(OPEN_PULL, value, user=ALICE) == 200
        await forge.slack.settle()
        assert len(forge.github.pulls(REPO)) == 1
        assert len(forge.github.requests_to("POST", f"/repos/{REPO}/pulls")) == 1
        assert "Opened draft pull request" in said(forge, thread)


async def test_a_thread_cannot_write_into_the_shared_checkout(tmp_path: Path) -> None:
    async with forge_harness(tmp_path) as forge:
        target = forge.checkout / "app.py"
        calls = [
            ToolCallSpec("write_file", {"path": str(target), "content": "pwned\n"}, id="abs"),
            ToolCallSpec("write_file", {"path": "../../checkout/app.py", "content": "pwned\n"},
                         id="up"),
            ToolCallSpec("write_file", {"path": ".git", "content": "gitdir: /tmp\n"}, id="dot"),
        ]  # fmt: skip
        thread = await ask(forge, "escape", [Reply(tool_calls=calls), Reply(text="Done.")])
        assert target.read_text() == FILES["app.py"]
        assert git(forge.checkout, "status", "--porcelain") == ""
        row = await branch_of(forge, thread)
        assert row is not None
        # The thread's worktree is still a worktree of the checkout, on its branch.
        assert git(tree(row), "symbolic-ref", "HEAD").strip() == f"refs/heads/{row.branch}"
        assert nothing_pushed(forge)


# --- 3. Show diff -------------------------------------------------------------------------


async def test_show_diff_uploads_the_change_as_a_file_in_the_thread(tmp_path: Path) -> None:
    async with forge_harness(tmp_path) as forge:
        await ask(forge, "other work", writes("other.py", "print('other')\n"))
        thread = await ask(forge, "add a greeting", writes("greet.py", "print('hi')\n"))
        await press(forge, SHOW_DIFF, button_value(forge, thread, SHOW_DIFF))
        await until(lambda: bool(forge.slack.slack.files))
        [upload] = forge.slack.slack.files
        assert upload.channel == CHANNEL and upload.thread_ts == thread
        assert upload.filename.endswith(".diff")
        assert "+++ b/greet.py" in upload.text and "+print('hi')" in upload.text
        # Only this thread's change: not the other thread's, not the base's files.
        assert "other.py" not in upload.text and "README.md" not in upload.text


# --- 4. Discard ---------------------------------------------------------------------------


async def test_discard_removes_branch_and_worktree_and_the_thread_starts_anew(
    tmp_path: Path,
) -> None:
    async with forge_harness(tmp_path) as forge:
        thread = await ask(forge, "add a greeting", writes("greet.py", "print('hi')\n"))
        row = await branch_of(forge, thread)
        assert row is not None and tree(row).is_dir()
        old_value = button_value(forge, thread, DISCARD_BRANCH)
        assert row.branch in git(forge.checkout, "branch", "--list", "baton/*")

        await press(forge, DISCARD_BRANCH, old_value)
        await until_said(forge, thread, "Discarded")
        assert git(forge.checkout, "branch", "--list", "baton/*").strip() == ""
        assert not tree(row).exists()
        assert row.worktree not in git(forge.checkout, "worktree", "list")

        # The old message's Open pull request pushes nothing now, and says why.
        await press(forge, OPEN_PULL, button_value(forge, thread, OPEN_PULL))
        await until_said(forge, thread, "was discarded")
        assert nothing_pushed(forge)

        await ask(
            forge, "add a farewell", writes("bye.py", "print('bye')\n", call_id="w2"),
            thread_ts=thread,
        )  # fmt: skip
        fresh = await branch_of(forge, thread)
        assert fresh is not None and fresh.active
        tip = local_head(forge, fresh.branch)
        assert tip is not None
        base = git(forge.checkout, "rev-parse", "refs/remotes/origin/main").strip()
        assert git(forge.checkout, "rev-parse", f"{tip}~1").strip() == base
        files = git(forge.checkout, "ls-tree", "-r", "--name-only", tip).split()
        assert "bye.py" in files and "greet.py" not in files
        assert not (tree(fresh) / "greet.py").exists()


async def test_a_new_threads_branch_forks_from_the_base_fetched_at_its_first_turn(
    tmp_path: Path,
) -> None:
    """The checkout was cloned at start-up; someone then pushes to main. A thread that
    starts afterwards works on top of their commit, not on the clone's old main."""
    async with forge_harness(tmp_path) as forge:
        first = await ask(forge, "add a greeting", writes("greet.py", "print('hi')\n"))
        before = await branch_of(forge, first)
        assert before is not None
        cloned = git(forge.checkout, "rev-parse", "refs/heads/main").strip()
        theirs = forge.git.commit_on(REPO, "main", {"news.py": "news = 1\n"}, "Their change")

        second = await ask(
            forge, "add a farewell", writes("bye.py", "print('bye')\n", call_id="w2")
        )
        row = await branch_of(forge, second)
        assert row is not None and row.branch != before.branch
        tip = local_head(forge, row.branch)
        assert tip is not None
        assert git(forge.checkout, "rev-parse", f"{tip}~1").strip() == theirs != cloned
        assert (tree(row) / "news.py").read_text() == "news = 1\n"
        # The first thread keeps the base it started from.
        first_tip = local_head(forge, before.branch)
        assert first_tip is not None
        assert git(forge.checkout, "rev-parse", f"{first_tip}~1").strip() == cloned


async def test_a_stale_discard_button_does_not_reach_the_threads_new_branch(
    tmp_path: Path,
) -> None:
    async with forge_harness(tmp_path) as forge:
        thread = await ask(forge, "add a greeting", writes("greet.py", "print('hi')\n"))
        old = forge.slack.find_button(CHANNEL, thread, DISCARD_BRANCH)
        assert old is not None
        await press(forge, DISCARD_BRANCH, old["button"]["value"])
        await until_said(forge, thread, "Discarded")
        await ask(
            forge, "add a farewell", writes("bye.py", "print('bye')\n", call_id="w2"),
            thread_ts=thread,
        )  # fmt: skip
        fresh = await branch_of(forge, thread)
        assert fresh is not None and fresh.active
        # A click on the first message's Discard (its work is gone already).
        assert await forge.slack.click(
            DISCARD_BRANCH, old["button"]["value"], user=ALICE, message_ts=old["message"]["ts"]
        ) == 200  # fmt: skip
        await forge.slack.settle()
        now = await branch_of(forge, thread)
        assert now is not None and now.active
        assert local_head(forge, fresh.branch) == fresh.head


# --- 5. secrets ---------------------------------------------------------------------------


def files_holding_a_secret(root: Path) -> list[Path]:
    """Every file under `root` whose bytes hold the token in any form."""
    found = []
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory, name)
            if path.is_symlink() or not path.is_file():
                continue
            data = path.read_bytes()
            if any(secret in data for secret in SECRETS):
                found.append(path)
    return found


async def test_the_token_is_in_no_file_of_the_worktree_the_checkout_or_baton(
    tmp_path: Path,
) -> None:
    async with forge_harness(tmp_path) as forge:
        thread = await ask(forge, "add a greeting", writes("greet.py", "print('hi')\n"))
        branch = await open_pull(forge, thread)
        # A follow-up pushes again (and may fetch), with the token in git's environment.
        await ask(forge, "and more", writes("more.py", "x = 1\n", call_id="w2"), thread_ts=thread)
        await until_said(forge, thread, "Pushed: pull request")
        assert forge.git.head(REPO, branch) == local_head(forge, branch)
        # Every request to the git server carried the token: git had it, and used it.
        assert forge.git.requests and all(r.authorization for r in forge.git.requests)

        row = await branch_of(forge, thread)
        assert row is not None
        assert files_holding_a_secret(tree(row)) == []
        assert files_holding_a_secret(forge.checkout) == []  # .git (and worktrees/) included
        config = (forge.checkout / ".git" / "config").read_text()
        assert TOKEN not in config and "extraheader" not in config.lower()
        assert "helper" not in config and "@127.0.0.1" not in config
        assert f"url = {forge.git.repo_url(REPO)}\n" in config
        # Nor anything else Baton keeps: its state directory and its database.
        assert files_holding_a_secret(tmp_path / "state") == []
        assert files_holding_a_secret(tmp_path / "ws") == []
        database = tmp_path / "baton.db"  # SQLite's (PostgreSQL's is elsewhere)
        assert not database.exists() or not any(s in database.read_bytes() for s in SECRETS)


async def test_a_sandboxed_command_never_sees_the_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As deployed: the token in Baton's own environment too.
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    permissions = PermissionsConfig(allow=("write_file", "edit_file", "bash"))
    async with forge_harness(tmp_path, permissions=permissions) as forge:
        if not forge.slack.baton.sandboxed:
            pytest.skip("no OS sandbox here: commands run unsandboxed, each asked for")
        thread = await ask(forge, "add a greeting", writes("greet.py", "print('hi')\n"))
        await open_pull(forge, thread)  # the token has been used in this thread
        command = (
            "env; tr '\\0' '\\n' < /proc/1/environ; tr '\\0' '\\n' < /proc/self/environ; "
            "git config --list --show-origin; cat .git"
        )
        forge.slack.llm.script(
            Reply(tool_calls=[ToolCallSpec("bash", {"command": command}, id="env")]),
            Reply(text="Done."),
        )
        await forge.slack.mention("show me the environment", channel=CHANNEL, thread_ts=thread)
        # Dumping the environment is asked for; a person allows it.
        await decide(forge, await approval(forge, thread), APPROVE)
        shown = tool_result(forge, "env")
        assert "PATH=" in shown  # the command did run
        assert not any(secret.decode() in shown for secret in SECRETS)
        assert "GITHUB_TOKEN" not in shown and "GIT_CONFIG" not in shown
        assert "extraheader" not in shown.lower()


# --- 6. the open_pull_request tool --------------------------------------------------------


def pull_tool(title: str = "Add a greeting", call_id: str = "pr") -> ToolCallSpec:
    return ToolCallSpec("open_pull_request", {"title": title, "body": "Says hello."}, id=call_id)


async def start_pull_by_tool(forge: ForgeHarness) -> tuple[str, dict[str, Any]]:
    """The model writes a file and asks to open a pull request; the thread and the
    approval's Approve button."""
    forge.slack.llm.script(
        Reply(tool_calls=[
            ToolCallSpec("write_file", {"path": "greet.py", "content": "hi\n"}, id="w"),
        ]),
        Reply(tool_calls=[pull_tool()]),
        Reply(text="Done."),
    )  # fmt: skip
    thread = await forge.slack.mention("add a greeting and open a PR", channel=CHANNEL)
    found = await approval(forge, thread)
    assert "open_pull_request" in json.dumps(found["message"])
    assert nothing_pushed(forge)  # nothing happens before a person decides
    return thread, found


def tool_result(forge: ForgeHarness, call_id: str) -> str:
    for request in reversed(forge.slack.main_requests()):
        for message in request.messages:
            if message.get("role") == "tool" and message.get("tool_call_id") == call_id:
                return str(message.get("content"))
    raise AssertionError(f"no result for {call_id}")


async def test_open_pull_request_tool_approved_opens_it_and_links_it(tmp_path: Path) -> None:
    async with forge_harness(tmp_path) as forge:
        thread, found = await start_pull_by_tool(forge)
        await decide(forge, found, APPROVE)
        [pull] = forge.github.pulls(REPO)
        assert pull.title == "Add a greeting" and pull.draft
        assert "Says hello." in (pull.body or "")
        assert forge.git.show(REPO, pull.head_ref, "greet.py") == "hi\n"
        assert f"/pull/{pull.number}" in said(forge, thread)
        assert f"/pull/{pull.number}" in tool_result(forge, "pr")


async def test_open_pull_request_tool_denied_opens_nothing(tmp_path: Path) -> None:
    async with forge_harness(tmp_path) as forge:
        thread, found = await start_pull_by_tool(forge)
        await decide(forge, found, DENY)
        assert nothing_pushed(forge)
        assert not forge.github.requests_to("POST", f"/repos/{REPO}/pulls")
        assert server_branches(forge) == ["refs/heads/main"]
        assert "denied" in tool_result(forge, "pr")
        assert "Opened draft pull request" not in said(forge, thread)


async def test_open_pull_request_is_not_offered_where_there_is_no_remote(tmp_path: Path) -> None:
    async with forge_harness(tmp_path) as forge:
        # Offered in the channel with a remote...
        await ask(forge, "hello", [Reply(text="hi")])
        assert "open_pull_request" in forge.slack.main_requests()[-1].tools
        # ...not in a channel without one, however the model insists.
        forge.slack.llm.script(Reply(tool_calls=[pull_tool()]), Reply(text="tried"))
        before = len(forge.slack.main_requests())
        await forge.slack.mention("open a PR", channel=OTHER_CHANNEL)
        await forge.slack.settle()
        requests = forge.slack.main_requests()[before:]
        assert requests and all("open_pull_request" not in r.tools for r in requests)
        assert nothing_pushed(forge)
        assert server_branches(forge) == ["refs/heads/main"]


# --- 7. who may click what ----------------------------------------------------------------


async def test_someone_else_may_not_open_or_discard(tmp_path: Path) -> None:
    async with forge_harness(tmp_path) as forge:
        thread = await ask(forge, "add a greeting", writes("greet.py", "print('hi')\n"))
        value = button_value(forge, thread, OPEN_PULL)
        row = await branch_of(forge, thread)
        assert row is not None

        refusal = await press_expecting_ephemeral(forge, OPEN_PULL, value, user=BOB)
        assert "Only the person who asked" in refusal["text"]
        refusal = await press_expecting_ephemeral(forge, DISCARD_BRANCH, value, user=BOB)
        assert "Only the person who asked" in refusal["text"]

        assert nothing_pushed(forge)
        assert local_head(forge, row.branch) == row.head
        assert tree(row).is_dir()
        fresh = await branch_of(forge, thread)
        assert fresh is not None and fresh.active
        assert "Discarded" not in said(forge, thread)


async def test_a_button_value_carried_to_another_channel_reaches_no_branch(
    tmp_path: Path,
) -> None:
    async with forge_harness(tmp_path) as forge:
        thread = await ask(forge, "add a greeting", writes("greet.py", "print('hi')\n"))
        value = button_value(forge, thread, OPEN_PULL)
        row = await branch_of(forge, thread)
        assert row is not None
        for action in (OPEN_PULL, SHOW_DIFF, DISCARD_BRANCH):
            answer = await press_expecting_ephemeral(
                forge, action, value, user=ALICE, channel=OTHER_CHANNEL
            )
            assert "no such branch" in answer["text"]
        assert nothing_pushed(forge) and not forge.slack.slack.files
        assert local_head(forge, row.branch) == row.head and tree(row).is_dir()
        assert forge.slack.thread(OTHER_CHANNEL, thread) == []


MADE_UP = (
    *("999", "abc", "-1", "0", "", " 1", "1.0", "1e3", "\u0661", "0x1"),
    *(str(2**31), "9" * 18, "9" * 40),  # beyond what the id column holds
)


async def test_made_up_button_values_do_nothing_and_crash_nothing(tmp_path: Path) -> None:
    async with forge_harness(tmp_path) as forge:
        thread = await ask(forge, "add a greeting", writes("greet.py", "print('hi')\n"))
        row = await branch_of(forge, thread)
        assert row is not None
        for value in MADE_UP:
            for action in (OPEN_PULL, SHOW_DIFF, DISCARD_BRANCH):
                answer = await press_expecting_ephemeral(forge, action, value, user=ALICE)
                assert "no such branch" in answer["text"], (action, value)
        assert nothing_pushed(forge) and not forge.slack.slack.files
        assert local_head(forge, row.branch) == row.head
        # The real button still works afterwards: nothing was broken on the way.
        await open_pull(forge, thread)
        assert len(forge.github.pulls(REPO)) == 1


async def test_access_pull_requests_names_who_may_open_them(tmp_path: Path) -> None:
    access = AccessConfig(pull_requests=(BOB,))
    async with forge_harness(tmp_path, access=access) as forge:
        thread = await ask(forge, "add a greeting", writes("greet.py", "print('hi')\n"))
        value = button_value(forge, thread, OPEN_PULL)
        refusal = await press_expecting_ephemeral(forge, OPEN_PULL, value, user=ALICE)
        assert "access.pull_requests" in refusal["text"]
        assert nothing_pushed(forge)

        await press(forge, OPEN_PULL, value, user=BOB)
        await until_said(forge, thread, "Opened draft pull request")
        assert len(forge.github.pulls(REPO)) == 1
        assert f"asked by <@{BOB}>" in said(forge, thread)


# --- 8. failures are said, nothing is lost ------------------------------------------------


async def test_a_revoked_token_is_said_and_the_work_stays_on_the_branch(tmp_path: Path) -> None:
    async with forge_harness(tmp_path) as forge:
        thread = await ask(forge, "add a greeting", writes("greet.py", "print('hi')\n"))
        row = await branch_of(forge, thread)
        assert row is not None and row.head is not None
        forge.git.revoke(TOKEN)
        forge.github.revoke(TOKEN)

        await press(forge, OPEN_PULL, button_value(forge, thread, OPEN_PULL))
        failure = await until_said(forge, thread, "Could not open the pull request")
        text = json.dumps(failure)
        assert "token" in text and "stays on its branch" in text
        assert "check GITHUB_TOKEN" in text  # git's refusal names what to check too
        assert TOKEN not in said(forge, thread)
        assert not forge.github.pulls(REPO)
        assert server_branches(forge) == ["refs/heads/main"]
        assert local_head(forge, row.branch) == row.head
        assert git(forge.checkout, "show", f"{row.branch}:greet.py") == "print('hi')\n"


async def test_a_token_revoked_after_the_pull_request_is_said_on_the_follow_up(
    tmp_path: Path,
) -> None:
    async with forge_harness(tmp_path) as forge:
        thread = await ask(forge, "add a greeting", writes("greet.py", "print('hi')\n"))
        branch = await open_pull(forge, thread)
        pushed = forge.git.head(REPO, branch)
        forge.git.revoke(TOKEN)
        await ask(
            forge, "also say bye", writes("bye.py", "print('bye')\n", call_id="w2"),
            thread_ts=thread,
        )  # fmt: skip
        note = json.dumps(await until_said(forge, thread, "Not pushed to pull request"))
        assert "token" in note and TOKEN not in said(forge, thread)
        assert "check GITHUB_TOKEN" in note
        assert forge.git.head(REPO, branch) == pushed
        assert git(forge.checkout, "show", f"{branch}:bye.py") == "print('bye')\n"


async def test_github_down_offers_try_again_which_opens_it_once_back(tmp_path: Path) -> None:
    async with forge_harness(tmp_path) as forge:
        thread = await ask(forge, "add a greeting", writes("greet.py", "print('hi')\n"))
        row = await branch_of(forge, thread)
        assert row is not None
        forge.github.fail_next(502)
        await press(forge, OPEN_PULL, button_value(forge, thread, OPEN_PULL))
        failure = await until_said(forge, thread, "Try again")
        assert "Could not open the pull request" in json.dumps(failure)
        assert not forge.github.pulls(REPO)
        # The push itself went through; the work is on the forge already.
        assert forge.git.head(REPO, row.branch) == row.head

        retry = forge.slack.find_button(CHANNEL, thread, OPEN_PULL)
        assert retry is not None and retry["button"]["text"]["text"] == "Try again"
        await press(forge, OPEN_PULL, retry["button"]["value"])
        await until_said(forge, thread, "Opened draft pull request")
        [pull] = forge.github.pulls(REPO)
        assert pull.head_ref == row.branch
        assert forge.git.head(REPO, row.branch) == row.head


async def test_github_unreachable_is_said_with_try_again(tmp_path: Path) -> None:
    async with forge_harness(tmp_path) as forge:
        thread = await ask(forge, "add a greeting", writes("greet.py", "print('hi')\n"))
        row = await branch_of(forge, thread)
        assert row is not None
        await forge.github.stop()
        await press(forge, OPEN_PULL, button_value(forge, thread, OPEN_PULL))
        failure = json.dumps(await until_said(forge, thread, "Try again"))
        assert "Could not open the pull request" in failure and "stays on its branch" in failure
        assert forge.git.head(REPO, row.branch) == row.head == local_head(forge, row.branch)


async def test_someone_elses_push_is_kept_and_baton_rebases_on_top(tmp_path: Path) -> None:
    async with forge_harness(tmp_path) as forge:
        thread = await ask(forge, "add a greeting", writes("greet.py", "print('hi')\n"))
        branch = await open_pull(forge, thread)
        theirs = forge.git.commit_on(REPO, branch, {"theirs.py": "x = 1\n"}, "Their fix")

        await ask(
            forge, "also say bye", writes("bye.py", "print('bye')\n", call_id="w2"),
            thread_ts=thread,
        )  # fmt: skip
        await until_said(forge, thread, "Pushed: pull request")
        log = forge.git.log(REPO, branch)
        assert log[:3] == ["also say bye", "Their fix", "add a greeting"]
        ancestors = git(forge.git.bare_path(REPO), "rev-list", branch).split()
        assert theirs in ancestors
        for path, text in (("theirs.py", "x = 1\n"), ("bye.py", "print('bye')\n"),
                           ("greet.py", "print('hi')\n")):  # fmt: skip
            assert forge.git.show(REPO, branch, path) == text
        assert local_head(forge, branch) == forge.git.head(REPO, branch)


async def test_a_protected_branch_is_reported_and_not_overwritten(tmp_path: Path) -> None:
    async with forge_harness(tmp_path) as forge:
        thread = await ask(forge, "add a greeting", writes("greet.py", "print('hi')\n"))
        branch = await open_pull(forge, thread)
        pushed = forge.git.head(REPO, branch)
        forge.git.protect(REPO, branch)

        await ask(
            forge, "also say bye", writes("bye.py", "print('bye')\n", call_id="w2"),
            thread_ts=thread,
        )  # fmt: skip
        note = await until_said(forge, thread, "Not pushed to pull request")
        assert "Protected branch" in json.dumps(note) or "declined" in json.dumps(note)
        assert forge.git.head(REPO, branch) == pushed
        local = local_head(forge, branch)
        assert local is not None and local != pushed
        assert git(forge.checkout, "show", f"{branch}:bye.py") == "print('bye')\n"


async def test_a_conflicting_push_by_someone_else_is_reported_and_kept(tmp_path: Path) -> None:
    async with forge_harness(tmp_path) as forge:
        thread = await ask(forge, "add a greeting", writes("greet.py", "print('hi')\n"))
        branch = await open_pull(forge, thread)
        theirs = forge.git.commit_on(REPO, branch, {"greet.py": "print('theirs')\n"}, "Theirs")
        await ask(
            forge, "say hello instead", writes("greet.py", "print('hello')\n", call_id="w2"),
            thread_ts=thread,
        )  # fmt: skip
        note = json.dumps(await until_said(forge, thread, "Not pushed to pull request"))
        assert "greet.py" in note
        # Their commit stays on the forge; Baton's stays on its own branch, as it was.
        assert forge.git.head(REPO, branch) == theirs
        assert git(forge.checkout, "show", f"{branch}:greet.py") == "print('hello')\n"
        row = await branch_of(forge, thread)
        assert row is not None and local_head(forge, branch) == row.head
        assert git(tree(row), "status", "--porcelain") == ""


# --- 9. an isolated sub-agent on the thread's branch --------------------------------------

CODER = "CODER-PROMPT"
Responder = Callable[[RecordedRequest], Awaitable[Reply]]


def write_coder(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    agents.mkdir(exist_ok=True)
    (agents / "coder.md").write_text(
        f"---\nname: coder\ndescription: Edits files.\nisolation: worktree\n---\n{CODER}\n"
    )


def route(forge: ForgeHarness, main: list[Reply], coder: Responder) -> None:
    """Answer the main agent from `main` and the coder with `coder`."""

    async def respond(request: RecordedRequest) -> Reply:
        system = str(request.messages[0]["content"])
        if system.startswith(MAIN_MARK):
            return main.pop(0) if main else Reply(text="ok")
        if CODER in system:
            return await coder(request)
        return Reply(text="unexpected agent")

    forge.slack.llm.responder = respond


async def test_an_isolated_child_branches_from_the_thread_and_merges_into_it(
    tmp_path: Path,
) -> None:
    write_coder(tmp_path)
    async with forge_harness(tmp_path) as forge:
        thread = await ask(forge, "start notes", writes("notes.txt", "from the thread\n"))
        row = await branch_of(forge, thread)
        assert row is not None and row.head is not None
        seen: list[str] = []

        async def coder(request: RecordedRequest) -> Reply:
            results = [str(m.get("content")) for m in request.messages if m.get("role") == "tool"]
            if not results:
                return Reply(tool_calls=[ToolCallSpec("read_file", {"path": "notes.txt"}, id="r")])
            if len(results) == 1:
                seen.append(results[0])
                arguments = {"path": "child.txt", "content": "from the child\n"}
                return Reply(tool_calls=[ToolCallSpec("write_file", arguments, id="cw")])
            return Reply(text="wrote child.txt")

        task = {"subagent_type": "coder", "prompt": "add child.txt", "description": "Child"}
        route(forge, [Reply(tool_calls=[ToolCallSpec("task", task, id="t")]),
                      Reply(text="the coder is done")], coder)  # fmt: skip
        await forge.slack.mention("have the coder add a file", channel=CHANNEL, thread_ts=thread)
        await forge.slack.settle()
        assert seen and "from the thread" in seen[0]
        tasks = await forge.slack.baton.tracker.store.list(channel_id=CHANNEL, limit=10)
        [child] = [t for t in tasks if t.agent == "coder"]
        assert child.branch and child.branch.startswith("baton/task-")
        # The child's branch starts at the thread's branch, not at main.
        assert is_ancestor(forge.checkout, row.head, child.branch)

        checkout_head = git(forge.checkout, "rev-parse", "HEAD").strip()
        before = len(forge.slack.slack.ephemerals)
        assert await forge.slack.click(MERGE_TASK, child.id, user=ALICE) == 200
        await until(lambda: len(forge.slack.slack.ephemerals) > before)
        await forge.slack.settle()
        assert forge.slack.slack.ephemerals[-1]["text"].startswith("✓ Merged")
        assert git(forge.checkout, "show", f"{row.branch}:child.txt") == "from the child\n"
        assert git(forge.checkout, "show", f"{row.branch}:notes.txt") == "from the thread\n"
        assert (tree(row) / "child.txt").read_text() == "from the child\n"
        # Not into the checkout: its HEAD and files are as they were.
        assert git(forge.checkout, "rev-parse", "HEAD").strip() == checkout_head
        assert not (forge.checkout / "child.txt").exists()
        assert git(forge.checkout, "status", "--porcelain") == ""
