"""The Slack harness on a workspace with a git remote: a real smart-HTTP git server
(git's own http-backend, checking the token) and a fake GitHub REST API."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.config import PermissionsConfig, Repository
from bot.slack.server import GITHUB_EVENTS_PATH
from bot.store import SessionKey
from bot.store.branches import ThreadBranch
from tests.fakes.git_server import FakeGitServer
from tests.fakes.github_api import FakeGitHub, github_delivery
from tests.fakes.openai_api import Reply, ToolCallSpec
from tests.slack.harness import ALICE, TEAM, SlackHarness, start_harness, until

TOKEN = "ghp_forgeTestToken1234567890abcdef"
WEBHOOK_SECRET = "whsec-forge-test"
REPO = "acme/api"
INSTALLATION = 42
CHANNEL = "C1"
FILES = {"app.py": "print('hello')\n", "README.md": "# api\n"}


@dataclass(slots=True)
class ForgeHarness:
    """The bot (`slack`), the git server (`git`) and GitHub's API (`github`)."""

    slack: SlackHarness
    git: FakeGitServer
    github: FakeGitHub
    checkout: Path

    async def deliver(
        self, event: str, payload: dict[str, Any], *, secret: str = WEBHOOK_SECRET, **kwargs: Any
    ) -> tuple[int, str]:
        """POST a webhook delivery to /github/events, signed as GitHub signs it."""
        headers, body = github_delivery(secret, event, payload, **kwargs)
        url = f"{self.slack.url}{GITHUB_EVENTS_PATH}"
        async with self.slack.http.post(url, data=body, headers=headers) as response:
            return response.status, await response.text()

    def commit(self, ref: str) -> str:
        """The full text of `ref`'s commit on the forge: author, then the message."""
        return subprocess.run(
            ["git", "log", "-1", "--format=%an <%ae>%n%B", ref],
            cwd=self.git.bare_path(REPO), capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip

    async def post_raw(self, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
        url = f"{self.slack.url}{GITHUB_EVENTS_PATH}"
        async with self.slack.http.post(url, data=body, headers=headers) as response:
            return response.status, await response.text()


async def start_forge_harness(tmp_path: Path, **overrides: Any) -> AsyncIterator[ForgeHarness]:
    """The bot with channel C1 working on acme/api, cloned into an empty directory."""
    async with FakeGitServer(tmp_path / "forge") as git, FakeGitHub() as github:
        remote = git.create_repo(REPO, files=FILES)
        git.add_token(TOKEN)
        github.add_repo(REPO, installation_id=INSTALLATION)
        github.add_token(TOKEN)
        github.branch_sha = lambda repo, branch: git.head(repo, branch)
        checkout = tmp_path / "checkout"
        checkout.mkdir()
        values: dict[str, Any] = {
            "workspaces": {CHANNEL: checkout.resolve()},
            "repositories": {
                checkout.resolve(): Repository(path=checkout.resolve(), remote=remote, base="main")
            },
            "github_token": TOKEN,
            "github_api_url": github.url,
            "github_webhook_secret": WEBHOOK_SECRET,
            "permissions": PermissionsConfig(allow=("write_file", "edit_file")),
        }
        values.update(overrides)
        async for slack in start_harness(tmp_path, **values):
            slack.slack.add_user(
                ALICE, "alice", real_name="Alice Liddell", display_name="Alice",
                email="alice@example.com",
            )  # fmt: skip
            # Her email was added after Baton read the directory: Slack says so.
            changed = {"type": "user_change", "user": slack.slack.users[ALICE]}
            assert (await slack.send_event(changed)).status == 200
            yield ForgeHarness(slack=slack, git=git, github=github, checkout=checkout.resolve())


@contextlib.asynccontextmanager
async def forge_harness(tmp_path: Path, **overrides: Any) -> AsyncIterator[ForgeHarness]:
    """`start_forge_harness` as `async with`: everything is stopped when the body ends,
    also when it fails or skips. The generator is run to its end rather than closed (a
    closed generator leaves the harness's own generators to garbage collection)."""
    started = start_forge_harness(tmp_path, **overrides)
    forge = await anext(started)
    try:
        yield forge
    finally:
        with contextlib.suppress(StopAsyncIteration):
            await anext(started)


def writes(path: str, content: str, *, text: str = "Done.", call_id: str = "w1") -> list[Reply]:
    """The model writes one file, then answers."""
    return [
        Reply(
            tool_calls=[ToolCallSpec("write_file", {"path": path, "content": content}, id=call_id)]
        ),
        Reply(text=text),
    ]


async def ask(forge: ForgeHarness, text: str, replies: list[Reply], **kwargs: Any) -> str:
    """Mention the bot with `text`; the model answers with `replies`; the thread's ts
    once the run ended."""
    forge.slack.llm.script(*replies)
    ts = await forge.slack.mention(text, channel=CHANNEL, **kwargs)
    thread = kwargs.get("thread_ts") or ts
    await forge.slack.settle()
    return thread


async def until_said(forge: ForgeHarness, thread: str, needle: str) -> dict[str, Any]:
    """The first message in the thread whose text or blocks hold `needle`."""
    found: list[dict[str, Any]] = []

    def look() -> bool:
        for message in forge.slack.thread(CHANNEL, thread):
            if needle in json.dumps(message):
                found.append(message)
                return True
        return False

    await until(look)
    return found[0]


async def branch_of(forge: ForgeHarness, thread: str) -> ThreadBranch | None:
    """The thread's branch record (None before its first turn made one)."""
    assert forge.slack.baton.forge is not None
    key = SessionKey.slack_thread(team_id=TEAM, channel_id=CHANNEL, thread_ts=thread)
    return await forge.slack.baton.forge.store.of_thread(key.key)
