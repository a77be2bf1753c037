"""From a thread to a pull request: a branch per thread, pushed by Baton, a draft PR."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from bot.config import PriceConfig
from bot.slack.forge_views import OPEN_PULL
from bot.store import SessionKey
from tests.fakes.github_api import FakeGitHub, issue_comment_payload
from tests.fakes.openai_api import RecordedRequest, Reply, ToolCallSpec, Usage
from tests.slack.forge_harness import (
    CHANNEL,
    FILES,
    INSTALLATION,
    REPO,
    TOKEN,
    ForgeHarness,
    ask,
    branch_of,
    start_forge_harness,
    until_said,
    writes,
)
from tests.slack.harness import ALICE, BOB, MAIN_MARK, TEAM, until


async def test_a_threads_change_becomes_a_draft_pull_request(tmp_path: Path) -> None:
    async for forge in start_forge_harness(tmp_path):
        thread = await ask(forge, "add a greeting", writes("greet.py", "print('hi')\n"))
        offer = await until_said(forge, thread, OPEN_PULL)
        assert "greet.py" in str(offer)
        button = forge.slack.find_button(CHANNEL, thread, OPEN_PULL)
        assert button is not None
        await forge.slack.click(OPEN_PULL, button["button"]["value"], user=ALICE)
        await until_said(forge, thread, "Opened draft pull request")
        pulls = forge.github.pulls(REPO)
        assert len(pulls) == 1
        pull = pulls[0]
        assert pull.draft and pull.base_ref == "main" and pull.head_ref.startswith("baton/")
        assert forge.git.show(REPO, pull.head_ref, "greet.py") == "print('hi')\n"
        # The body links the thread and names who asked; the commit is Baton's, with the
        # person who asked as co-author.
        assert "Alice" in (pull.body or "") and "slack.com" in (pull.body or "")
        # The main agent worked alone; what it spent, without a price for its model.
        assert "Agents: `main`." in (pull.body or "")
        assert re.search(r"Spent: [\d,]+ tokens\.", pull.body or "")
        commit = forge.commit(pull.head_ref)
        assert commit.startswith("Baton <")
        assert "Co-authored-by: Alice <alice@example.com>" in commit
        assert "add a greeting" in commit
        link = await until_said(forge, thread, "Opened draft pull request")
        assert f"/pull/{pull.number}" in str(link)
        await pull_requests_are_listed(forge, f"{REPO}#{pull.number}")
        # The checkout, cloned at start-up, is untouched: the work lives on the thread's
        # branch.
        assert (forge.checkout / "app.py").read_text() == FILES["app.py"]
        assert not (forge.checkout / "greet.py").exists()


async def pull_requests_are_listed(forge: ForgeHarness, name: str) -> None:
    """`/tasks` in the channel, and the requester's App Home, link the pull request."""
    slack = forge.slack
    assert await slack.command(channel=CHANNEL) == 200
    await until(lambda: bool(slack.slack.ephemerals))
    panel = json.dumps(slack.slack.ephemerals[-1]["blocks"])
    assert "Pull requests:" in panel and name in panel and "(open)" in panel
    # Another channel's /tasks shows none of them.
    assert await slack.command(channel="C2") == 200
    await until(lambda: len(slack.slack.ephemerals) == 2)
    assert name not in json.dumps(slack.slack.ephemerals[-1]["blocks"])
    event = {"type": "app_home_opened", "user": ALICE, "channel": "D1", "tab": "home",
             "event_ts": "1.1"}  # fmt: skip
    assert (await slack.send_event(event)).status == 200
    await until(lambda: bool(slack.slack.calls_to("views.publish")))
    home = json.dumps(slack.slack.calls_to("views.publish")[-1].params["view"])
    assert name in home


def installation_token_of(github: FakeGitHub) -> Callable[[str], bool]:
    """Whether a token is one of `github`'s live installation tokens (the git server
    then takes it, as GitHub's git does)."""

    def accepts(token: str) -> bool:
        return any(i.token == token and not i.revoked for i in github.issued_tokens)

    return accepts


def app_key(tmp_path: Path) -> tuple[Path, bytes]:
    """A GitHub App's new RSA key: its private key in a file (GITHUB_APP_PRIVATE_KEY)
    and its public key in PEM, for the fake GitHub to check the App's JWTs."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    key_file = tmp_path / "app.pem"
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return key_file, public


async def app_forge_harness(tmp_path: Path) -> AsyncIterator[ForgeHarness]:
    """The forge harness with a GitHub App instead of a token: only the App's
    installation tokens push."""
    key_file, public = app_key(tmp_path)
    async for forge in start_forge_harness(
        tmp_path, github_token=None, github_app_id="4242", github_app_private_key=key_file
    ):
        forge.github.set_app(4242, public)
        forge.git.accepts = installation_token_of(forge.github)
        forge.git.revoke(TOKEN)
        yield forge


async def test_a_github_app_pushes_and_opens_with_installation_tokens(tmp_path: Path) -> None:
    """GITHUB_APP_ID and the key file instead of a token: the installation is found from
    the repository, and its token serves both the push and the pull request."""
    async for forge in app_forge_harness(tmp_path):
        thread = await ask(forge, "add a greeting", writes("greet.py", "print('hi')\n"))
        await until_said(forge, thread, OPEN_PULL)
        button = forge.slack.find_button(CHANNEL, thread, OPEN_PULL)
        assert button is not None
        await forge.slack.click(OPEN_PULL, button["button"]["value"], user=ALICE)
        await until_said(forge, thread, "Opened draft pull request")
        (pull,) = forge.github.pulls(REPO)
        assert forge.git.show(REPO, pull.head_ref, "greet.py") == "print('hi')\n"
        assert forge.github.issued_tokens, "the push and the PR used an installation token"
        assert {i.installation_id for i in forge.github.issued_tokens} == {INSTALLATION}


async def test_an_app_token_github_cannot_give_is_said_with_try_again(tmp_path: Path) -> None:
    """git's token comes from GitHub each time the cached one is refused: GitHub down
    then (or the App's key or installation refused) is said in the thread like any
    failure to push, with Try again; the work stays on its branch."""
    async for forge in app_forge_harness(tmp_path):
        thread = await ask(forge, "add a greeting", writes("greet.py", "print('hi')\n"))
        await until_said(forge, thread, OPEN_PULL)
        branch = await branch_of(forge, thread)
        assert branch is not None
        # The cached installation token stops working, and GitHub cannot give another.
        forge.git.accepts = None
        await forge.github.stop()
        button = forge.slack.find_button(CHANNEL, thread, OPEN_PULL)
        assert button is not None
        await forge.slack.click(OPEN_PULL, button["button"]["value"], user=ALICE)
        failure = json.dumps(await until_said(forge, thread, "Could not open the pull request"))
        assert "Could not get a token for acme/api" in failure, failure
        assert "stays on its branch" in failure
        retry = forge.slack.find_button(CHANNEL, thread, OPEN_PULL)
        assert retry is not None and retry["button"]["text"]["text"] == "Try again"
        assert forge.git.head(REPO, branch.branch) is None  # nothing was pushed


async def test_a_change_to_ci_workflows_is_pushed_only_by_an_approver(tmp_path: Path) -> None:
    """A workflow pushed to the forge runs with the repository's secrets: a model talked
    into writing one must not get it there on the requester's click (or its own tool)."""
    workflow = "on: pull_request\njobs: {leak: {runs-on: x, steps: [{run: env}]}}\n"
    async for forge in start_forge_harness(tmp_path, approvers=(BOB,)):
        thread = await ask(forge, "speed up CI", writes(".github/workflows/ci.yml", workflow))
        button = forge.slack.find_button(CHANNEL, thread, OPEN_PULL)
        assert button is not None
        value = button["button"]["value"]
        await forge.slack.click(OPEN_PULL, value, user=ALICE)
        await until_said(forge, thread, "edits CI workflows")
        assert forge.github.pulls(REPO) == []
        branch = await branch_of(forge, thread)
        assert branch is not None and forge.git.head(REPO, branch.branch) is None
        # An approver may: they read the workflow before it runs anywhere.
        await forge.slack.click(OPEN_PULL, value, user=BOB)
        await until_said(forge, thread, "Opened draft pull request")
        assert forge.git.show(REPO, branch.branch, ".github/workflows/ci.yml") == workflow
        # Once the PR exists, later runs push by themselves, but not a workflow change.
        pushed = forge.git.head(REPO, branch.branch)
        more = writes(".github/workflows/more.yml", workflow, call_id="w2")
        await ask(forge, "and another", more, thread_ts=thread)
        await until_said(forge, thread, "Not pushed")
        assert forge.git.head(REPO, branch.branch) == pushed


async def test_a_comment_mentioning_the_apps_own_name_asks_baton(tmp_path: Path) -> None:
    """An App called acme-baton: people mention `@acme-baton`, and that is a request."""
    async for forge in start_forge_harness(tmp_path):
        forge.github.add_token(TOKEN, login="acme-baton")
        thread = await ask(forge, "add a greeting", writes("greet.py", "print('hi')\n"))
        button = forge.slack.find_button(CHANNEL, thread, OPEN_PULL)
        assert button is not None
        await forge.slack.click(OPEN_PULL, button["button"]["value"], user=ALICE)
        await until_said(forge, thread, "Opened draft pull request")
        (pull,) = forge.github.pulls(REPO)
        forge.slack.llm.script(Reply(text="Renamed."))
        payload = issue_comment_payload(
            repo=REPO, number=pull.number, body="@acme-baton rename greet.py"
        )
        status, _ = await forge.deliver("issue_comment", payload)
        assert status == 202
        await until_said(forge, thread, "Renamed.")
        prompt = json.dumps(forge.slack.llm.requests[-1].messages[-1])
        assert "rename greet.py" in prompt and "github_review" in prompt


async def test_the_body_names_every_agent_that_worked_and_what_it_cost(tmp_path: Path) -> None:
    """The main agent asks `explore` to look, then writes: both are named, and with a
    price for the model the body says the tokens and cost of every call of the thread."""
    prices = {"fake-model": PriceConfig(input=1_000.0, output=2_000.0)}
    async for forge in start_forge_harness(tmp_path, prices=prices):
        thread = await delegate_then_write(forge)
        button = forge.slack.find_button(CHANNEL, thread, OPEN_PULL)
        assert button is not None
        await forge.slack.click(OPEN_PULL, button["button"]["value"], user=ALICE)
        await until_said(forge, thread, "Opened draft pull request")
        (pull,) = forge.github.pulls(REPO)
        body = pull.body or ""
        assert "Agents: `main`, `explore`." in body
        # Every call of the thread, the child's included, as the usage store has them.
        baton = forge.slack.baton
        key = SessionKey.slack_thread(team_id=TEAM, channel_id=CHANNEL, thread_ts=thread)
        session = await baton.default_site.conversations.store.find(key)
        assert session is not None
        totals = await baton.usage.session_total(session.id)
        assert totals.prompt_tokens >= 3 * 1_000 + 400 and totals.completion_tokens >= 350
        cost = totals.prompt_tokens / 1e6 * 1_000.0 + totals.completion_tokens / 1e6 * 2_000.0
        assert f"Spent: {totals.total_tokens:,} tokens (${cost:,.2f})." in body, body


async def delegate_then_write(forge: ForgeHarness) -> str:
    """The main agent has `explore` look, then writes greet.py; the thread's ts."""
    look = {"subagent_type": "explore", "prompt": "find the entry point", "description": "look"}
    write = {"path": "greet.py", "content": "print('hi')\n"}
    used = Usage(prompt_tokens=1_000, completion_tokens=100)
    main = [
        Reply(tool_calls=[ToolCallSpec("task", look, id="t1")], usage=used),
        Reply(tool_calls=[ToolCallSpec("write_file", write, id="w1")], usage=used),
        Reply(text="Done.", usage=used),
    ]

    def respond(request: RecordedRequest) -> Reply:
        if MAIN_MARK in json.dumps(request.messages[:1]):
            return main.pop(0)
        return Reply(
            text="The entry point is app.py.",
            usage=Usage(prompt_tokens=400, completion_tokens=50),
        )

    forge.slack.llm.responder = respond
    thread = await forge.slack.mention("add a greeting", channel=CHANNEL)
    await forge.slack.settle()
    assert not main
    return thread


async def test_a_push_refused_with_a_cached_installation_token_gets_a_fresh_one(
    tmp_path: Path,
) -> None:
    """GitHub revoked the App's installation token before it expired: the follow-up's
    push drops it and pushes with a new one, as the REST calls do."""
    async for forge in app_forge_harness(tmp_path):
        thread = await ask(forge, "add a greeting", writes("greet.py", "print('hi')\n"))
        button = forge.slack.find_button(CHANNEL, thread, OPEN_PULL)
        assert button is not None
        await forge.slack.click(OPEN_PULL, button["button"]["value"], user=ALICE)
        await until_said(forge, thread, "Opened draft pull request")
        (cached,) = forge.github.issued_tokens
        forge.github.revoke(cached.token)
        await ask(
            forge, "say bye too", writes("bye.py", "print('bye')\n", call_id="w2"),
            thread_ts=thread,
        )  # fmt: skip
        await until_said(forge, thread, "Pushed: pull request")
        (pull,) = forge.github.pulls(REPO)
        assert forge.git.show(REPO, pull.head_ref, "bye.py") == "print('bye')\n"
        assert len(forge.github.issued_tokens) == 2
