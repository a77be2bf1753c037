"""The fake GitHub API answers as GitHub does, checked with gidgethub's real client."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator

import aiohttp
import gidgethub
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from gidgethub.aiohttp import GitHubAPI

from tests.fakes.github_api import FakeGitHub, github_delivery, review_payload

TOKEN = "ghp_fake"


@pytest.fixture
async def gh() -> AsyncIterator[FakeGitHub]:
    async with FakeGitHub() as fake:
        fake.add_repo("acme/api", installation_id=42)
        fake.add_token(TOKEN)
        yield fake


@pytest.fixture
async def client(gh: FakeGitHub) -> AsyncIterator[GitHubAPI]:
    async with aiohttp.ClientSession() as session:
        yield GitHubAPI(session, "test", oauth_token=TOKEN, base_url=gh.url)


async def test_repository(client: GitHubAPI) -> None:
    repo = await client.getitem("/repos/acme/api")
    assert (repo["full_name"], repo["default_branch"], repo["private"]) == (
        "acme/api",
        "main",
        True,
    )


async def test_unknown_repository_and_bad_token(gh: FakeGitHub, client: GitHubAPI) -> None:
    with pytest.raises(gidgethub.BadRequest) as missing:
        await client.getitem("/repos/acme/nope")
    assert missing.value.status_code == 404
    with pytest.raises(gidgethub.BadRequest) as bad:
        await client.getitem("/repos/acme/api", oauth_token="ghp_wrong")
    assert bad.value.status_code == 401
    assert str(bad.value) == "Bad credentials"


async def test_pulls_list_filters_and_pages(gh: FakeGitHub, client: GitHubAPI) -> None:
    for index in range(5):
        gh.add_pull("acme/api", f"feature/{index}")
    gh.add_pull("acme/api", "feature/closed", state="closed")

    numbers = [pull["number"] async for pull in client.getiter("/repos/acme/api/pulls?per_page=2")]
    head = await client.getitem("/repos/acme/api/pulls?head=acme:feature/3")

    assert numbers == [5, 4, 3, 2, 1]
    assert [pull["head"]["ref"] for pull in head] == ["feature/3"]
    assert "merged" not in head[0]  # the list form, as on GitHub
    assert "merged" in await client.getitem("/repos/acme/api/pulls/4")


async def test_duplicate_pull_is_githubs_422(client: GitHubAPI) -> None:
    data = {"title": "t", "head": "baton/x", "base": "main"}
    await client.post("/repos/acme/api/pulls", data=data)
    with pytest.raises(gidgethub.ValidationError) as caught:
        await client.post("/repos/acme/api/pulls", data=data)
    assert caught.value.errors == [
        {
            "resource": "PullRequest",
            "code": "custom",
            "message": "A pull request already exists for acme:baton/x.",
        }
    ]


async def test_fail_next_then_recover(gh: FakeGitHub, client: GitHubAPI) -> None:
    gh.fail_next(502, times=2)
    for _ in range(2):
        with pytest.raises(gidgethub.GitHubBroken):
            await client.getitem("/repos/acme/api")
    assert (await client.getitem("/repos/acme/api"))["name"] == "api"
    assert len(gh.requests_to("GET", "/repos/acme/api")) == 3


async def test_app_jwt_is_verified(gh: FakeGitHub, client: GitHubAPI) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    gh.set_app(7, public)
    now = int(time.time())

    def sign(**claims: int | str) -> str:
        return jwt.encode({"iat": now - 60, "exp": now + 540, "iss": "7", **claims}, key, "RS256")

    answer = await client.post("/app/installations/42/access_tokens", data=b"", jwt=sign())
    assert answer["token"].startswith("ghs_")
    assert answer["expires_at"].endswith("Z")
    assert gh.issued_tokens[0].token == answer["token"]
    other = await client.getitem("/repos/acme/api", oauth_token=answer["token"])
    assert other["full_name"] == "acme/api"

    for bad in (sign(exp=now - 10), sign(iss="8"), sign(exp=now + 3600)):
        with pytest.raises(gidgethub.BadRequest) as caught:
            await client.post("/app/installations/42/access_tokens", data=b"", jwt=bad)
        assert caught.value.status_code == 401
    with pytest.raises(gidgethub.BadRequest) as unknown:
        await client.post("/app/installations/9/access_tokens", data=b"", jwt=sign())
    assert unknown.value.status_code == 404

    gh.revoke(answer["token"])
    with pytest.raises(gidgethub.BadRequest):
        await client.getitem("/repos/acme/api", oauth_token=answer["token"])


def test_delivery_is_signed_over_the_exact_body() -> None:
    payload = review_payload()
    headers, body = github_delivery("s3cret", "pull_request_review", payload, "d-1")
    assert json.loads(body) == payload
    assert headers["X-GitHub-Delivery"] == "d-1"
    assert headers["X-GitHub-Event"] == "pull_request_review"
    assert headers["User-Agent"].startswith("GitHub-Hookshot/")
    digest = hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert headers["X-Hub-Signature-256"] == f"sha256={digest}"
    assert headers["X-Hub-Signature"].startswith("sha1=")
