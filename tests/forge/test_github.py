"""GitHubForge over real HTTP (gidgethub's aiohttp client) against the fake GitHub API."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from bot.errors import ConfigError
from bot.forge.credentials import TokenCredentials
from bot.forge.forge import Forge, ForgeError, ForgeFailure, PullRequest
from bot.forge.github import DEFAULT_API_URL, GitHubForge, from_env
from bot.forge.remote import RepoRef, parse_remote
from tests.fakes.github_api import ZERO_SHA, FakeGitHub
from tests.ports import free_port

TOKEN = "ghp_testtoken0123456789"
REPO = parse_remote("https://github.com/acme/api.git")
BRANCH = "baton/fix-login"


@pytest.fixture
async def gh() -> AsyncIterator[FakeGitHub]:
    async with FakeGitHub() as fake:
        fake.add_repo("acme/api", default_branch="main", installation_id=42)
        fake.add_token(TOKEN)
        yield fake


@pytest.fixture
async def forge(gh: FakeGitHub) -> AsyncIterator[GitHubForge]:
    forge = GitHubForge(TokenCredentials(TOKEN), api_url=gh.url)
    yield forge
    await forge.close()


def test_github_forge_is_a_forge() -> None:
    forge: Forge = GitHubForge(TokenCredentials(TOKEN))
    assert isinstance(forge, GitHubForge)


async def test_open_pull_asks_for_a_draft_with_the_token(
    gh: FakeGitHub, forge: GitHubForge
) -> None:
    gh.branch_sha = lambda repo, branch: "ab" * 20 if branch == BRANCH else ZERO_SHA

    pull = await forge.open_pull(
        REPO, branch=BRANCH, base="main", title="Fix login", body="What changed"
    )

    assert pull == PullRequest(
        number=1,
        url="https://github.com/acme/api/pull/1",
        state="open",
        draft=True,
        merged=False,
        head_branch=BRANCH,
        head_sha="ab" * 20,
        base_branch="main",
        title="Fix login",
    )
    [request] = gh.requests_to("POST", "/repos/acme/api/pulls")
    assert request.json == {
        "title": "Fix login",
        "head": BRANCH,
        "base": "main",
        "body": "What changed",
        "draft": True,
    }
    assert request.headers["authorization"] == f"token {TOKEN}"
    assert request.headers["user-agent"] == "baton"
    assert gh.pull("acme/api", 1).body == "What changed"


async def test_open_pull_can_open_a_ready_one(gh: FakeGitHub, forge: GitHubForge) -> None:
    pull = await forge.open_pull(REPO, branch=BRANCH, base="main", title="t", body="", draft=False)
    assert pull.draft is False


async def test_open_pull_updates_the_open_one_instead_of_a_duplicate(
    gh: FakeGitHub, forge: GitHubForge
) -> None:
    existing = gh.add_pull("acme/api", BRANCH, title="Old", body="old body", draft=True)

    pull = await forge.open_pull(REPO, branch=BRANCH, base="main", title="New", body="new body")

    assert pull.number == existing.number
    assert pull.title == "New"
    assert len(gh.pulls("acme/api")) == 1
    assert gh.pull("acme/api", existing.number).body == "new body"
    [patch] = gh.requests_to("PATCH", f"/repos/acme/api/pulls/{existing.number}")
    assert patch.json == {"title": "New", "body": "new body"}


async def test_open_pull_ignores_a_closed_pull_of_the_branch(
    gh: FakeGitHub, forge: GitHubForge
) -> None:
    gh.add_pull("acme/api", BRANCH, state="closed")
    pull = await forge.open_pull(REPO, branch=BRANCH, base="main", title="Again", body="")
    assert pull.number == 2
    assert pull.state == "open"


async def test_open_pull_without_draft_support_opens_a_ready_one(
    gh: FakeGitHub, forge: GitHubForge
) -> None:
    gh.add_repo("acme/free", drafts=False)
    repo = parse_remote("https://github.com/acme/free")

    pull = await forge.open_pull(repo, branch=BRANCH, base="main", title="t", body="b")

    assert pull.draft is False
    drafts = [r.json["draft"] for r in gh.requests_to("POST", "/repos/acme/free/pulls")]
    assert drafts == [True, False]


async def test_find_pull_by_branch(gh: FakeGitHub, forge: GitHubForge) -> None:
    assert await forge.find_pull(REPO, BRANCH) is None
    gh.add_pull("acme/api", BRANCH, state="closed")
    gh.add_pull("acme/api", "baton/other")
    wanted = gh.add_pull("acme/api", BRANCH, title="Mine", draft=True)

    found = await forge.find_pull(REPO, BRANCH)

    assert found is not None
    assert (found.number, found.title, found.draft, found.merged) == (
        wanted.number,
        "Mine",
        True,
        False,
    )
    last = gh.requests_to("GET", "/repos/acme/api/pulls")[-1]
    assert last.query["head"] == f"acme:{BRANCH}"
    assert last.query["state"] == "open"


async def test_update_pull_and_comment(gh: FakeGitHub, forge: GitHubForge) -> None:
    pull = gh.add_pull("acme/api", BRANCH, title="Old", body="keep")

    updated = await forge.update_pull(REPO, pull.number, title="New title")
    await forge.comment(REPO, pull.number, "Pushed a fix for the review.")

    assert updated.title == "New title"
    assert gh.pull("acme/api", pull.number).body == "keep"
    assert gh.comments("acme/api", pull.number) == ["Pushed a fix for the review."]
    unchanged = await forge.update_pull(REPO, pull.number)
    assert unchanged.title == "New title"
    assert gh.requests_to("GET", f"/repos/acme/api/pulls/{pull.number}")


async def test_merged_pull_reads_as_merged(gh: FakeGitHub, forge: GitHubForge) -> None:
    pull = gh.add_pull("acme/api", BRANCH)
    pull.state, pull.merged = "closed", True
    assert (await forge.update_pull(REPO, pull.number)).merged is True


async def test_token_is_the_configured_one(forge: GitHubForge) -> None:
    assert await forge.token(REPO) == TOKEN


async def test_a_bad_token_is_an_auth_error_that_names_the_fix(gh: FakeGitHub) -> None:
    secret = "ghp_wrongwrongwrong"
    forge = GitHubForge(TokenCredentials(secret), api_url=gh.url)
    try:
        with pytest.raises(ForgeError) as caught:
            await forge.open_pull(REPO, branch=BRANCH, base="main", title="t", body="b")
    finally:
        await forge.close()
    error = caught.value
    assert error.kind is ForgeFailure.AUTH
    assert error.status == 401
    assert str(error) == (
        "GitHub refused Baton's token for acme/api (401 Bad credentials): check GITHUB_TOKEN"
    )
    assert secret not in str(error)
    assert not gh.pulls("acme/api")


async def test_a_forbidden_request_is_an_auth_error(gh: FakeGitHub, forge: GitHubForge) -> None:
    gh.fail_next(403, message="Resource not accessible by personal access token")
    with pytest.raises(ForgeError) as caught:
        await forge.comment(REPO, 1, "hi")
    assert caught.value.kind is ForgeFailure.AUTH
    assert "Resource not accessible" in str(caught.value)
    assert TOKEN not in str(caught.value)


async def test_a_rate_limit_is_not_an_auth_error(gh: FakeGitHub, forge: GitHubForge) -> None:
    gh.fail_next(
        403,
        message="API rate limit exceeded for user ID 1.",
        headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1700000000"},
    )
    with pytest.raises(ForgeError) as caught:
        await forge.find_pull(REPO, BRANCH)
    assert caught.value.kind is ForgeFailure.UNREACHABLE
    assert "rate-limiting" in str(caught.value)


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_a_server_error_is_unreachable(
    gh: FakeGitHub, forge: GitHubForge, status: int
) -> None:
    gh.fail_next(status)
    with pytest.raises(ForgeError) as caught:
        await forge.open_pull(REPO, branch=BRANCH, base="main", title="t", body="b")
    assert caught.value.kind is ForgeFailure.UNREACHABLE
    assert caught.value.status == status
    assert "try again later" in str(caught.value)


async def test_a_closed_port_is_unreachable() -> None:
    forge = GitHubForge(TokenCredentials(TOKEN), api_url=f"http://127.0.0.1:{free_port()}")
    try:
        with pytest.raises(ForgeError) as caught:
            await forge.find_pull(REPO, BRANCH)
    finally:
        await forge.close()
    assert caught.value.kind is ForgeFailure.UNREACHABLE
    assert caught.value.status is None
    assert "could not reach GitHub" in str(caught.value)
    assert TOKEN not in str(caught.value)


async def test_a_stopped_server_is_unreachable(gh: FakeGitHub, forge: GitHubForge) -> None:
    assert await forge.find_pull(REPO, BRANCH) is None
    await gh.stop()
    with pytest.raises(ForgeError) as caught:
        await forge.find_pull(REPO, BRANCH)
    assert caught.value.kind is ForgeFailure.UNREACHABLE


async def test_a_server_that_never_answers_times_out() -> None:
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # read nothing, answer nothing

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    forge = GitHubForge(TokenCredentials(TOKEN), api_url=f"http://127.0.0.1:{port}", timeout_s=0.2)
    try:
        with pytest.raises(ForgeError) as caught:
            await forge.find_pull(REPO, BRANCH)
    finally:
        await forge.close()
        for writer in held:
            writer.close()
            await writer.wait_closed()
        server.close()
        await server.wait_closed()
    assert caught.value.kind is ForgeFailure.UNREACHABLE
    assert "did not answer within 0.2 s" in str(caught.value)


async def test_an_unknown_repository_is_not_found(forge: GitHubForge) -> None:
    ghost = RepoRef(url="https://github.com/acme/ghost.git", owner="acme", name="ghost")
    with pytest.raises(ForgeError) as caught:
        await forge.open_pull(ghost, branch=BRANCH, base="main", title="t", body="b")
    assert caught.value.kind is ForgeFailure.NOT_FOUND
    assert "acme/ghost" in str(caught.value)


async def test_an_unknown_pull_is_not_found(forge: GitHubForge) -> None:
    with pytest.raises(ForgeError) as caught:
        await forge.update_pull(REPO, 99, title="x")
    assert caught.value.kind is ForgeFailure.NOT_FOUND
    assert "pull request #99 on acme/api" in str(caught.value)


async def test_a_validation_failure_is_rejected_with_githubs_reason(
    gh: FakeGitHub, forge: GitHubForge
) -> None:
    gh.branch_sha = lambda repo, branch: None  # the branch was never pushed
    with pytest.raises(ForgeError) as caught:
        await forge.open_pull(REPO, branch=BRANCH, base="main", title="t", body="b")
    assert caught.value.kind is ForgeFailure.REJECTED
    assert caught.value.status == 422
    assert "Validation Failed" in str(caught.value)


async def test_a_body_too_long_is_rejected(gh: FakeGitHub, forge: GitHubForge) -> None:
    pull = gh.add_pull("acme/api", BRANCH)
    with pytest.raises(ForgeError) as caught:
        await forge.comment(REPO, pull.number, "x" * 70_000)
    assert caught.value.kind is ForgeFailure.REJECTED
    assert "body is too long" in str(caught.value)


async def test_github_enterprise_path_prefix() -> None:
    async with FakeGitHub(path_prefix="/api/v3") as gh:
        gh.add_repo("acme/api")
        gh.add_token(TOKEN)
        forge = GitHubForge(TokenCredentials(TOKEN), api_url=gh.url + "/")
        try:
            pull = await forge.open_pull(REPO, branch=BRANCH, base="main", title="t", body="b")
        finally:
            await forge.close()
    assert gh.url.endswith("/api/v3")
    assert pull.number == 1
    assert gh.requests_to("POST", "/repos/acme/api/pulls")


async def test_close_is_idempotent_and_the_forge_reopens(
    gh: FakeGitHub, forge: GitHubForge
) -> None:
    await forge.find_pull(REPO, BRANCH)
    await forge.close()
    await forge.close()
    assert await forge.find_pull(REPO, BRANCH) is None


def test_from_env_without_credentials_is_none() -> None:
    assert from_env({}) is None
    assert from_env({"GITHUB_API_URL": "https://ghe.example.com/api/v3"}) is None


def test_from_env_reads_the_token_and_api_url() -> None:
    forge = from_env({"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": "https://ghe.corp/api/v3/"})
    assert forge is not None
    assert forge.api_url == "https://ghe.corp/api/v3"
    assert isinstance(forge.credentials, TokenCredentials)
    assert TOKEN not in repr(forge)
    default = from_env({"GITHUB_TOKEN": TOKEN})
    assert default is not None and default.api_url == DEFAULT_API_URL


@pytest.mark.parametrize(
    "url", ["ftp://ghe.corp", "https://user:pw@ghe.corp/api/v3", "https://x/api?q=1", "ghe"]
)
def test_from_env_refuses_a_bad_api_url(url: str) -> None:
    with pytest.raises(ConfigError, match="GITHUB_API_URL"):
        from_env({"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": url})


async def test_logins_are_the_tokens_user(gh: FakeGitHub, forge: GitHubForge) -> None:
    gh.add_token(TOKEN, login="acme-bot")
    assert await forge.logins() == ("acme-bot",)
    assert await forge.logins() == ("acme-bot",)
    assert len(gh.requests_to("GET", "/user")) == 1  # asked once


async def test_logins_are_empty_when_github_cannot_say(gh: FakeGitHub) -> None:
    forge = GitHubForge(TokenCredentials("ghp_unknownToken"), api_url=gh.url)
    try:
        assert await forge.logins() == ()
    finally:
        await forge.close()


async def test_after_a_failure_logins_are_not_asked_again_at_once(gh: FakeGitHub) -> None:
    """A webhook must not wait on an unreachable GitHub at every delivery."""
    forge = GitHubForge(TokenCredentials("ghp_unknownToken"), api_url=gh.url)
    try:
        assert await forge.logins() == ()
        assert await forge.logins() == ()
        assert len(gh.requests_to("GET", "/user")) == 1
    finally:
        await forge.close()
