"""Where GitHub tokens come from: `GITHUB_TOKEN`, or a GitHub App's installation tokens.

A GitHub App signs a short-lived JWT with its private key, finds the installation that
covers a repository, and exchanges the JWT for an installation token (valid an hour).
Tokens are cached per installation until five minutes before they expire; callers that
need one at the same moment share a single request.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

import gidgethub
from gidgethub.abc import GitHubAPI
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from bot.errors import ConfigError
from bot.forge.forge import ForgeError, ForgeFailure
from bot.forge.remote import RepoRef

REFRESH_MARGIN = timedelta(minutes=5)
"""An installation token is replaced this long before GitHub says it expires."""

# GitHub accepts app JWTs valid for at most 10 minutes. Backdate `iat` for clock drift
# (as gidgethub.apps.get_jwt does) and reuse one JWT for a few minutes: signing with RSA
# is the costly part of asking for a token.
_JWT_BACKDATE_S = 60
_JWT_LIFETIME_S = 9 * 60
_JWT_REUSE_S = 5 * 60

_MAX_KEY_BYTES = 64 * 1024  # a 4096-bit RSA PEM is about 3 KiB
# App IDs are numbers; GitHub also accepts an app's client ID (Iv1.…, Iv23…) as issuer.
_APP_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_TOKEN = re.compile(r"^[\x21-\x7e]{1,1024}$")  # printable ASCII, no whitespace


# A GitHub login or App slug as GitHub allows them.
_LOGIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})")


class GitHubCredentials(Protocol):
    """Something that hands out tokens for GitHub's REST API and for git."""

    @property
    def who(self) -> str:
        """Whose credentials these are, for messages: `Baton's token`, `GitHub App 123`."""
        ...

    @property
    def hint(self) -> str:
        """What an operator checks when GitHub refuses them."""
        ...

    async def token(self, gh: GitHubAPI, repo: RepoRef) -> str:
        """A token for `repo`, fetched with `gh` if need be.

        Raises:
            ForgeError: GitHub refused the app or it is not installed on `repo`.
            gidgethub.GitHubException, aiohttp.ClientError, TimeoutError: the request
                failed otherwise; the forge turns these into a `ForgeError`.
        """
        ...

    async def logins(self, gh: GitHubAPI) -> tuple[str, ...]:
        """The names Baton goes by on GitHub (what people @-mention)."""
        ...

    def forget(self, repo: RepoRef, token: str) -> bool:
        """GitHub refused `token`: drop it, and say whether a fresh one may work."""
        ...


class TokenCredentials:
    """One fixed token (`GITHUB_TOKEN`): a personal access token or an app's token."""

    who = "Baton's token"
    hint = "check GITHUB_TOKEN"

    def __init__(self, token: str) -> None:
        self._token = token

    def __repr__(self) -> str:
        return "TokenCredentials(token=…)"

    async def token(self, gh: GitHubAPI, repo: RepoRef) -> str:
        """The configured token, whatever the repository."""
        return self._token

    async def logins(self, gh: GitHubAPI) -> tuple[str, ...]:
        """The token's user (`GET /user`)."""
        answer = await gh.getitem("/user", oauth_token=self._token)
        login = answer.get("login") if isinstance(answer, dict) else None
        return (login,) if isinstance(login, str) and _LOGIN.fullmatch(login) else ()

    def forget(self, repo: RepoRef, token: str) -> bool:
        """A fixed token cannot be replaced."""
        return False


class _Installation(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: StrictInt = Field(gt=0)


class _AccessToken(BaseModel):
    model_config = ConfigDict(extra="ignore")
    token: StrictStr = Field(pattern=_TOKEN.pattern)
    expires_at: datetime


class AppCredentials:
    """A GitHub App's installation tokens, found from the repository and cached."""

    def __init__(
        self,
        app_id: str,
        private_key: str | bytes | object,
        *,
        refresh_margin: timedelta = REFRESH_MARGIN,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        """Args:
        app_id: The app's ID (or client ID), the JWT's issuer.
        private_key: The app's RSA private key: unencrypted PEM, or loaded (a
            `cryptography` RSAPrivateKey).
        refresh_margin: How long before expiry a cached token is replaced.
        clock: Now, timezone-aware (tests move it).

        Raises:
            ValueError: The key is not an unencrypted RSA private key in PEM.
        """
        # PyJWT and cryptography are imported only for a GitHub App: together they cost
        # a replica about 10 MB, which one without the App need not hold.
        from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
        from cryptography.hazmat.primitives.serialization import load_pem_private_key

        self.app_id = app_id
        key = private_key
        if isinstance(key, str):
            key = key.encode()
        if isinstance(key, bytes):
            key = load_pem_private_key(key, password=None)
        if not isinstance(key, RSAPrivateKey):
            raise ValueError("a GitHub App's private key is an RSA key")
        self._key = key
        self._jwt: tuple[str, float] | None = None  # (JWT, monotonic time it was made)
        self._margin = refresh_margin
        self._clock = clock
        self._installations: dict[str, int] = {}
        self._tokens: dict[int, tuple[str, datetime]] = {}
        self._repo_locks: dict[str, asyncio.Lock] = {}
        self._token_locks: dict[int, asyncio.Lock] = {}

    def __repr__(self) -> str:
        return f"AppCredentials(app_id={self.app_id!r})"

    @property
    def who(self) -> str:
        """`GitHub App <id>`."""
        return f"GitHub App {self.app_id}"

    @property
    def hint(self) -> str:
        """Where the app is configured."""
        return "check GITHUB_APP_ID, GITHUB_APP_PRIVATE_KEY and the app's installation"

    async def logins(self, gh: GitHubAPI) -> tuple[str, ...]:
        """The App's slug and its bot's login (`GET /app` with the App's JWT)."""
        answer = await gh.getitem("/app", jwt=self.jwt())
        slug = answer.get("slug") if isinstance(answer, dict) else None
        if not isinstance(slug, str) or not _LOGIN.fullmatch(slug):
            return ()
        return slug, f"{slug}[bot]"

    def jwt(self) -> str:
        """The app's JWT (RS256, issued 60 s in the past, expiring 8 minutes from now),
        made again after 5 minutes."""
        import jwt as pyjwt  # imported with the App's first token (see __init__)

        now = time.monotonic()
        if self._jwt is None or now - self._jwt[1] >= _JWT_REUSE_S:
            issued_at = int(time.time()) - _JWT_BACKDATE_S
            claims = {"iat": issued_at, "exp": issued_at + _JWT_LIFETIME_S, "iss": self.app_id}
            self._jwt = (pyjwt.encode(claims, self._key, algorithm="RS256"), now)
        return self._jwt[0]

    async def token(self, gh: GitHubAPI, repo: RepoRef) -> str:
        """The installation token for `repo`, from the cache when it is fresh enough."""
        installation = await self.installation_id(gh, repo)
        cached = self._fresh(installation)
        if cached is not None:
            return cached
        lock = self._token_locks.setdefault(installation, asyncio.Lock())
        async with lock:
            # Whoever held the lock before us may have fetched one already.
            cached = self._fresh(installation)
            if cached is not None:
                return cached
            try:
                answer = await gh.post(
                    "/app/installations/{installation_id}/access_tokens",
                    {"installation_id": installation},
                    data=b"",
                    jwt=self.jwt(),
                )
            except gidgethub.BadRequest as exc:
                if exc.status_code == 404:
                    # The app was reinstalled (a new id) or removed: look it up again next time.
                    self._installations.pop(repo.full_name.lower(), None)
                raise self._refused(exc, repo) from exc
            try:
                issued = _AccessToken.model_validate(answer)
            except ValidationError as exc:
                raise ForgeError(
                    f"GitHub answered {self.who}'s request for an installation token for "
                    f"{repo.full_name} with something that is not a token",
                    kind=ForgeFailure.UNREACHABLE,
                ) from exc
            expires_at = issued.expires_at
            if expires_at.tzinfo is None:
                expires_at = expires_at.replace(tzinfo=UTC)
            self._tokens[installation] = (issued.token, expires_at)
            return issued.token

    async def installation_id(self, gh: GitHubAPI, repo: RepoRef) -> int:
        """The id of the app's installation on `repo` (asked once per repository)."""
        key = repo.full_name.lower()
        known = self._installations.get(key)
        if known is not None:
            return known
        async with self._repo_locks.setdefault(key, asyncio.Lock()):
            known = self._installations.get(key)
            if known is not None:
                return known
            try:
                answer = await gh.getitem(
                    "/repos/{owner}/{repo}/installation",
                    {"owner": repo.owner, "repo": repo.name},
                    jwt=self.jwt(),
                )
            except gidgethub.BadRequest as exc:
                raise self._refused(exc, repo) from exc
            try:
                installation = _Installation.model_validate(answer).id
            except ValidationError as exc:
                raise ForgeError(
                    f"GitHub answered {self.who}'s question about its installation on "
                    f"{repo.full_name} with something that is not an installation",
                    kind=ForgeFailure.UNREACHABLE,
                ) from exc
            self._installations[key] = installation
            return installation

    def forget(self, repo: RepoRef, token: str) -> bool:
        """Drop `token` if it is still cached; the next call fetches a new one."""
        installation = self._installations.get(repo.full_name.lower())
        cached = self._tokens.get(installation) if installation is not None else None
        if installation is not None and cached is not None and cached[0] == token:
            del self._tokens[installation]
        return True

    def _fresh(self, installation: int) -> str | None:
        cached = self._tokens.get(installation)
        if cached is None or cached[1] - self._margin <= self._clock():
            return None
        return cached[0]

    def _refused(self, exc: gidgethub.BadRequest, repo: RepoRef) -> ForgeError:
        """Say what a 4xx from the app endpoints means for the operator."""
        status = int(exc.status_code)
        said = f"{status} {exc}".strip()
        rate_limited = (
            isinstance(exc, gidgethub.RateLimitExceeded)
            or status == 429
            or (status == 403 and "rate limit" in str(exc).lower())
        )
        if rate_limited:
            return ForgeError(
                f"GitHub is rate-limiting {self.who} ({said}); try again later",
                kind=ForgeFailure.UNREACHABLE,
                status=status,
            )
        if status == 404:
            return ForgeError(
                f"{self.who} is not installed on {repo.full_name} ({said}): install the "
                "app on the repository, or check GITHUB_APP_ID",
                kind=ForgeFailure.NOT_FOUND,
                status=status,
            )
        if status in (401, 403):
            return ForgeError(
                f"GitHub refused {self.who}'s JWT for {repo.full_name} ({said}): check "
                "GITHUB_APP_ID, GITHUB_APP_PRIVATE_KEY and this machine's clock",
                kind=ForgeFailure.AUTH,
                status=status,
            )
        return ForgeError(
            f"GitHub refused to give {self.who} a token for {repo.full_name} ({said})",
            kind=ForgeFailure.REJECTED,
            status=status,
        )


def credentials_from_env(
    environ: Mapping[str, str],
) -> TokenCredentials | AppCredentials | None:
    """Read `GITHUB_TOKEN`, else `GITHUB_APP_ID` + `GITHUB_APP_PRIVATE_KEY` (a PEM file).

    Returns None when neither is set.

    Raises:
        ConfigError: A malformed token or app id, only one of the app's two variables,
            or a key file that is missing, unreadable or not an RSA private key. The
            message names the variable and the file, never the secret.
    """
    token = environ.get("GITHUB_TOKEN", "").strip()
    if token:
        if not _TOKEN.fullmatch(token):
            raise ConfigError(
                "GITHUB_TOKEN: not a token (it must be one word of printable characters)"
            )
        return TokenCredentials(token)
    app_id = environ.get("GITHUB_APP_ID", "").strip()
    key_path = environ.get("GITHUB_APP_PRIVATE_KEY", "").strip()
    if not app_id and not key_path:
        return None
    if not key_path:
        raise ConfigError(
            "GITHUB_APP_ID is set but GITHUB_APP_PRIVATE_KEY is not: set it to the path of "
            "the app's private key (.pem), or unset GITHUB_APP_ID"
        )
    if not app_id:
        raise ConfigError(
            "GITHUB_APP_PRIVATE_KEY is set but GITHUB_APP_ID is not: set it to the app's "
            "ID, or unset GITHUB_APP_PRIVATE_KEY"
        )
    if not _APP_ID.fullmatch(app_id):
        raise ConfigError(f"GITHUB_APP_ID: {app_id[:64]!r} is not a GitHub App ID")
    return AppCredentials(app_id, _read_private_key(key_path))


def _read_private_key(value: str) -> object:
    """The RSA private key in PEM file `value` (a `cryptography` RSAPrivateKey), checked;
    ConfigError otherwise."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    if value.startswith("-----BEGIN") or "\n" in value:
        raise ConfigError(
            "GITHUB_APP_PRIVATE_KEY: give the path of the key file, not the key itself"
        )
    path = Path(value).expanduser()
    try:
        with path.open("rb") as handle:
            data = handle.read(_MAX_KEY_BYTES + 1)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(f"GITHUB_APP_PRIVATE_KEY: cannot read {path} ({reason})") from None
    if len(data) > _MAX_KEY_BYTES:
        raise ConfigError(f"GITHUB_APP_PRIVATE_KEY: {path} is too large to be a private key")
    try:
        key = load_pem_private_key(data, password=None)
    except TypeError:
        raise ConfigError(
            f"GITHUB_APP_PRIVATE_KEY: {path} is encrypted; use the unencrypted key GitHub "
            "generated for the app"
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        # The parser's message may quote the file; say only what is wrong.
        raise ConfigError(
            f"GITHUB_APP_PRIVATE_KEY: {path} is not a PEM private key (download the app's "
            "key from its settings page)"
        ) from None
    if not isinstance(key, RSAPrivateKey):
        raise ConfigError(
            f"GITHUB_APP_PRIVATE_KEY: {path} is not an RSA key; GitHub Apps sign with RSA"
        )
    return key
