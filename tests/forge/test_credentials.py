"""Tokens from GITHUB_TOKEN or a GitHub App, against the fake GitHub API over real HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from bot.errors import ConfigError
from bot.forge.credentials import AppCredentials, TokenCredentials, credentials_from_env
from bot.forge.forge import ForgeError, ForgeFailure
from bot.forge.github import GitHubForge, from_env
from bot.forge.remote import parse_remote
from tests.fakes.github_api import FakeGitHub

APP_ID = "123456"
REPO = parse_remote("https://github.com/acme/api.git")
OTHER = parse_remote("https://github.com/acme/web.git")
BRANCH = "baton/fix-login"
INSTALLATIONS = "/repos/acme/api/installation"
ACCESS_TOKENS = "/app/installations/42/access_tokens"


@dataclass(frozen=True)
class KeyPair:
    key: rsa.RSAPrivateKey
    private_pem: bytes
    public_pem: bytes


def _key_pair() -> KeyPair:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return KeyPair(
        key=key,
        private_pem=key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
        public_pem=key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )


@pytest.fixture(scope="module")
def keys() -> KeyPair:
    return _key_pair()


@pytest.fixture
async def gh(keys: KeyPair) -> AsyncIterator[FakeGitHub]:
    async with FakeGitHub() as fake:
        fake.add_repo("acme/api", installation_id=42)
        fake.add_repo("acme/web", installation_id=42)
        fake.add_repo("acme/lonely")  # the app is not installed here
        fake.set_app(APP_ID, keys.public_pem)
        yield fake


@pytest.fixture
def key_file(tmp_path: Path, keys: KeyPair) -> Path:
    path = tmp_path / "app.pem"
    path.write_bytes(keys.private_pem)
    return path


@pytest.fixture
async def forge(gh: FakeGitHub, keys: KeyPair) -> AsyncIterator[GitHubForge]:
    forge = GitHubForge(AppCredentials(APP_ID, keys.key), api_url=gh.url)
    yield forge
    await forge.close()


# --------------------------------------------------------------------------- GitHub App


async def test_app_from_the_environment_opens_a_pull_with_an_installation_token(
    gh: FakeGitHub, key_file: Path, keys: KeyPair
) -> None:
    forge = from_env(
        {
            "GITHUB_APP_ID": APP_ID,
            "GITHUB_APP_PRIVATE_KEY": str(key_file),
            "GITHUB_API_URL": gh.url,
        }
    )
    assert forge is not None and isinstance(forge.credentials, AppCredentials)
    try:
        pull = await forge.open_pull(REPO, branch=BRANCH, base="main", title="t", body="b")
        token = await forge.token(REPO)
    finally:
        await forge.close()

    assert pull.number == 1
    [lookup] = gh.requests_to("GET", INSTALLATIONS)
    [exchange] = gh.requests_to("POST", ACCESS_TOKENS)
    for request in (lookup, exchange):
        assert request.headers["authorization"].lower().startswith("bearer ")
        claims = jwt.decode(request.credential or "", keys.public_pem, algorithms=["RS256"])
        assert claims["iss"] == APP_ID
        assert 0 < claims["exp"] - claims["iat"] <= 600
    [issued] = gh.issued_tokens
    [create] = gh.requests_to("POST", "/repos/acme/api/pulls")
    assert create.headers["authorization"] == f"token {issued.token}"
    assert gh.pull("acme/api", 1).author == "baton[bot]"
    assert token == issued.token


async def test_installation_token_is_cached_and_reused(gh: FakeGitHub, forge: GitHubForge) -> None:
    first = await forge.token(REPO)
    await forge.find_pull(REPO, BRANCH)
    await forge.comment(REPO, gh.add_pull("acme/api", BRANCH).number, "hi")
    # Another repository of the same installation: its own lookup, the same token.
    assert await forge.token(OTHER) == first

    assert await forge.token(REPO) == first
    assert len(gh.requests_to("POST", ACCESS_TOKENS)) == 1
    assert len(gh.requests_to("GET", INSTALLATIONS)) == 1
    assert len(gh.requests_to("GET", "/repos/acme/web/installation")) == 1


async def test_a_token_close_to_expiry_is_replaced(gh: FakeGitHub, forge: GitHubForge) -> None:
    gh.token_lifetime = timedelta(minutes=4)  # inside the five-minute margin at once

    first = await forge.token(REPO)
    second = await forge.token(REPO)

    assert first != second
    assert [t.token for t in gh.issued_tokens] == [first, second]
    assert len(gh.requests_to("GET", INSTALLATIONS)) == 1


async def test_the_cache_follows_expires_at(gh: FakeGitHub, keys: KeyPair) -> None:
    now = datetime.now(UTC)
    credentials = AppCredentials(APP_ID, keys.key, clock=lambda: now)
    forge = GitHubForge(credentials, api_url=gh.url)
    try:
        first = await forge.token(REPO)
        expires_at = gh.issued_tokens[0].expires_at
        now = expires_at - timedelta(minutes=5, seconds=1)
        assert await forge.token(REPO) == first
        now = expires_at - timedelta(minutes=5)
        second = await forge.token(REPO)
    finally:
        await forge.close()
    assert second != first
    assert len(gh.issued_tokens) == 2


async def test_concurrent_callers_share_one_request(gh: FakeGitHub, forge: GitHubForge) -> None:
    tokens = await asyncio.gather(*(forge.token(REPO) for _ in range(20)))

    assert len(set(tokens)) == 1
    assert len(gh.requests_to("GET", INSTALLATIONS)) == 1
    assert len(gh.requests_to("POST", ACCESS_TOKENS)) == 1


async def test_a_revoked_installation_token_is_replaced_once(
    gh: FakeGitHub, forge: GitHubForge
) -> None:
    revoked = await forge.token(REPO)
    gh.revoke(revoked)

    pull = await forge.open_pull(REPO, branch=BRANCH, base="main", title="t", body="b")

    assert pull.number == 1
    assert len(gh.issued_tokens) == 2
    assert await forge.token(REPO) == gh.issued_tokens[1].token


async def test_a_fresh_token_refused_again_is_an_auth_error(
    gh: FakeGitHub, forge: GitHubForge
) -> None:
    gh.token_lifetime = timedelta(minutes=-1)  # every token it issues is refused
    with pytest.raises(ForgeError) as caught:
        await forge.find_pull(REPO, BRANCH)
    assert caught.value.kind is ForgeFailure.AUTH
    assert caught.value.status == 401
    assert str(caught.value).startswith("GitHub refused GitHub App 123456 for acme/api")
    assert len(gh.issued_tokens) == 2  # one retry with a new token, no more
    for issued in gh.issued_tokens:
        assert issued.token not in str(caught.value)


async def test_an_app_not_installed_on_the_repository_is_not_found(forge: GitHubForge) -> None:
    lonely = parse_remote("https://github.com/acme/lonely")
    with pytest.raises(ForgeError) as caught:
        await forge.open_pull(lonely, branch=BRANCH, base="main", title="t", body="b")
    assert caught.value.kind is ForgeFailure.NOT_FOUND
    assert "GitHub App 123456 is not installed on acme/lonely" in str(caught.value)


async def test_a_jwt_signed_with_another_key_is_an_auth_error(gh: FakeGitHub) -> None:
    credentials = AppCredentials(APP_ID, _key_pair().key)
    forge = GitHubForge(credentials, api_url=gh.url)
    try:
        with pytest.raises(ForgeError) as caught:
            await forge.token(REPO)
    finally:
        await forge.close()
    assert caught.value.kind is ForgeFailure.AUTH
    assert caught.value.status == 401
    assert "GITHUB_APP_PRIVATE_KEY" in str(caught.value)


async def test_a_jwt_for_another_app_is_an_auth_error(gh: FakeGitHub, keys: KeyPair) -> None:
    forge = GitHubForge(AppCredentials("999", keys.key), api_url=gh.url)
    try:
        with pytest.raises(ForgeError) as caught:
            await forge.token(REPO)
    finally:
        await forge.close()
    assert caught.value.kind is ForgeFailure.AUTH


async def test_github_down_while_getting_a_token_is_unreachable(
    gh: FakeGitHub, forge: GitHubForge
) -> None:
    gh.fail_next(502)
    with pytest.raises(ForgeError) as caught:
        await forge.token(REPO)
    assert caught.value.kind is ForgeFailure.UNREACHABLE
    assert await forge.token(REPO)  # the next call tries again


async def test_each_installation_gets_its_own_token(gh: FakeGitHub, keys: KeyPair) -> None:
    gh.add_repo("other/repo", installation_id=7)
    forge = GitHubForge(AppCredentials(APP_ID, keys.key), api_url=gh.url)
    try:
        await forge.token(REPO)
        await forge.token(parse_remote("https://github.com/other/repo"))
    finally:
        await forge.close()
    assert {t.installation_id for t in gh.issued_tokens} == {42, 7}


async def test_the_app_jwt_is_reused_across_token_requests(
    gh: FakeGitHub, forge: GitHubForge
) -> None:
    gh.token_lifetime = timedelta(minutes=4)
    await forge.token(REPO)
    await forge.token(REPO)
    jwts = {r.credential for r in gh.requests_to("POST", ACCESS_TOKENS)}
    assert len(gh.issued_tokens) == 2
    assert len(jwts) == 1


def test_app_credentials_need_an_rsa_key_and_never_show_it(keys: KeyPair) -> None:
    credentials = AppCredentials(APP_ID, keys.private_pem.decode())
    assert "PRIVATE" not in repr(credentials)
    assert "PRIVATE" not in repr(GitHubForge(credentials))
    bogus = b"-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n"
    with pytest.raises(ValueError):
        AppCredentials(APP_ID, bogus)
    with pytest.raises(ValueError, match="RSA"):
        AppCredentials(APP_ID, ec.generate_private_key(ec.SECP256R1()))  # type: ignore[arg-type]


async def test_token_credentials_never_ask_github() -> None:
    credentials = TokenCredentials("ghp_x")
    async with FakeGitHub() as gh:
        forge = GitHubForge(credentials, api_url=gh.url)
        try:
            assert await forge.token(REPO) == "ghp_x"
        finally:
            await forge.close()
        assert gh.requests == []
    assert credentials.forget(REPO, "ghp_x") is False
    assert "ghp_x" not in repr(credentials)


# --------------------------------------------------------------------------- environment


def test_no_github_settings_is_none() -> None:
    assert credentials_from_env({}) is None
    assert credentials_from_env({"GITHUB_TOKEN": "  ", "GITHUB_APP_ID": ""}) is None


def test_github_token_wins(key_file: Path) -> None:
    credentials = credentials_from_env(
        {
            "GITHUB_TOKEN": "ghp_abc\n",
            "GITHUB_APP_ID": APP_ID,
            "GITHUB_APP_PRIVATE_KEY": str(key_file),
        }
    )
    assert isinstance(credentials, TokenCredentials)


def test_a_token_with_spaces_inside_is_refused() -> None:
    with pytest.raises(ConfigError, match="GITHUB_TOKEN") as caught:
        credentials_from_env({"GITHUB_TOKEN": "ghp_abc def"})
    assert "ghp_abc" not in str(caught.value)


def test_app_settings_make_app_credentials(key_file: Path) -> None:
    credentials = credentials_from_env(
        {"GITHUB_APP_ID": APP_ID, "GITHUB_APP_PRIVATE_KEY": str(key_file)}
    )
    assert isinstance(credentials, AppCredentials)
    assert credentials.app_id == APP_ID
    assert credentials.who == "GitHub App 123456"


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"GITHUB_APP_ID": APP_ID}, "GITHUB_APP_PRIVATE_KEY is not"),
        ({"GITHUB_APP_PRIVATE_KEY": "/etc/app.pem"}, "GITHUB_APP_ID is not"),
    ],
)
def test_half_an_app_is_an_error(environ: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        credentials_from_env(environ)


def test_a_malformed_app_id_is_an_error(key_file: Path) -> None:
    with pytest.raises(ConfigError, match="GITHUB_APP_ID"):
        credentials_from_env({"GITHUB_APP_ID": "12 34", "GITHUB_APP_PRIVATE_KEY": str(key_file)})


def test_a_missing_key_file_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    with pytest.raises(ConfigError) as caught:
        credentials_from_env({"GITHUB_APP_ID": APP_ID, "GITHUB_APP_PRIVATE_KEY": str(missing)})
    assert "GITHUB_APP_PRIVATE_KEY" in str(caught.value)
    assert str(missing) in str(caught.value)


def test_an_unreadable_key_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        credentials_from_env({"GITHUB_APP_ID": APP_ID, "GITHUB_APP_PRIVATE_KEY": str(tmp_path)})


def test_a_key_file_that_is_not_a_key_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "app.pem"
    path.write_text(
        "-----BEGIN RSA PRIVATE KEY-----\nc2VjcmV0LXN0dWZm\n-----END RSA PRIVATE KEY-----\n"
    )
    with pytest.raises(ConfigError) as caught:
        credentials_from_env({"GITHUB_APP_ID": APP_ID, "GITHUB_APP_PRIVATE_KEY": str(path)})
    assert "is not a PEM private key" in str(caught.value)
    assert str(path) in str(caught.value)
    assert "c2VjcmV0" not in str(caught.value)


def test_an_encrypted_key_is_an_error(tmp_path: Path) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path = tmp_path / "app.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"pw"),
        )
    )
    with pytest.raises(ConfigError, match="encrypted"):
        credentials_from_env({"GITHUB_APP_ID": APP_ID, "GITHUB_APP_PRIVATE_KEY": str(path)})


def test_a_key_that_is_not_rsa_is_an_error(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    path = tmp_path / "app.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(ConfigError, match="not an RSA key"):
        credentials_from_env({"GITHUB_APP_ID": APP_ID, "GITHUB_APP_PRIVATE_KEY": str(path)})


def test_the_key_itself_in_the_variable_is_refused_without_echoing_it(keys: KeyPair) -> None:
    pem = keys.private_pem.decode()
    with pytest.raises(ConfigError, match="path of the key file") as caught:
        credentials_from_env({"GITHUB_APP_ID": APP_ID, "GITHUB_APP_PRIVATE_KEY": pem})
    assert pem.splitlines()[1] not in str(caught.value)


async def test_an_apps_logins_are_its_slug_and_its_bot(keys: KeyPair) -> None:
    async with FakeGitHub() as gh:
        gh.set_app(APP_ID, keys.public_pem)
        gh.app_slug = "acme-baton"
        forge = GitHubForge(AppCredentials(APP_ID, keys.key), api_url=gh.url)
        try:
            assert await forge.logins() == ("acme-baton", "acme-baton[bot]")
        finally:
            await forge.close()
