"""GitHub (and GitHub Enterprise) behind the `Forge` interface, over gidgethub."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp
import gidgethub
from gidgethub.abc import GitHubAPI
from gidgethub.aiohttp import GitHubAPI as AiohttpGitHubAPI
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr
from pydantic import ValidationError as PydanticValidationError

from bot.errors import ConfigError
from bot.forge.credentials import GitHubCredentials, credentials_from_env
from bot.forge.forge import ForgeError, ForgeFailure, PullRequest
from bot.forge.remote import RepoRef

DEFAULT_API_URL = "https://api.github.com"
# After GitHub could not say who Baton is, how long before asking again.
LOGINS_RETRY_S = 300.0
REQUEST_TIMEOUT_S = 30.0
_REQUESTER = "baton"
_ALREADY_EXISTS = "a pull request already exists"
_NO_DRAFTS = "draft pull requests are not supported"

_T = TypeVar("_T")


logger = logging.getLogger(__name__)


class _Ref(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    ref: StrictStr
    sha: StrictStr = ""


class _Pull(BaseModel):
    """A pull request as GitHub's REST API returns it (the list form lacks `merged`)."""

    model_config = ConfigDict(extra="ignore", strict=True)
    number: StrictInt = Field(gt=0)
    html_url: StrictStr
    state: StrictStr
    draft: StrictBool = False
    merged: StrictBool | None = None
    merged_at: StrictStr | None = None
    title: StrictStr
    head: _Ref
    base: _Ref

    def value(self) -> PullRequest:
        merged = self.merged if self.merged is not None else self.merged_at is not None
        return PullRequest(
            number=self.number,
            url=self.html_url,
            state=self.state,
            draft=self.draft,
            merged=merged,
            head_branch=self.head.ref,
            head_sha=self.head.sha,
            base_branch=self.base.ref,
            title=self.title,
        )


class GitHubForge:
    """Pull requests and push tokens on GitHub, with the given credentials.

    It owns one `aiohttp.ClientSession`, made at the first call and closed by `close()`.
    Every request is bounded by `timeout_s`; every failure becomes a `ForgeError`.
    """

    def __init__(
        self,
        credentials: GitHubCredentials,
        *,
        api_url: str = DEFAULT_API_URL,
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        """Args:
        credentials: Where tokens come from.
        api_url: GitHub's REST API: `https://api.github.com`, or GitHub Enterprise's
            `https://ghe.example.com/api/v3`.
        timeout_s: The most one request may take, connecting included.
        """
        self.credentials = credentials
        self.api_url = api_url.rstrip("/")
        self._timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None
        self._gh: GitHubAPI | None = None
        self._logins: tuple[str, ...] | None = None
        self._logins_failed_at: float | None = None

    def __repr__(self) -> str:
        return f"GitHubForge(api_url={self.api_url!r}, credentials={self.credentials!r})"

    async def find_pull(self, repo: RepoRef, branch: str) -> PullRequest | None:
        """The open pull request from `repo`'s own `branch` (not a fork's), if any."""

        async def call(gh: GitHubAPI, token: str) -> Any:
            return await gh.getitem(
                "/repos/{owner}/{repo}/pulls{?state,head,per_page}",
                {
                    "owner": repo.owner,
                    "repo": repo.name,
                    "state": "open",
                    "head": f"{repo.owner}:{branch}",
                    "per_page": 100,
                },
                oauth_token=token,
            )

        answer = await self._call(
            repo, call, doing=f"look for the pull request from {branch}", missing="repository"
        )
        if not isinstance(answer, list):
            raise self._unreadable(repo, "a list of pull requests")
        for item in answer:
            pull = self._pull(repo, item)
            if pull.head_branch == branch and pull.state == "open":
                return pull
        return None

    async def open_pull(
        self,
        repo: RepoRef,
        *,
        branch: str,
        base: str,
        title: str,
        body: str,
        draft: bool = True,
    ) -> PullRequest:
        """Open a (draft) pull request; if one is open for `branch`, update that one.

        A repository whose plan has no draft pull requests gets a ready one instead.
        """
        data: dict[str, Any] = {
            "title": title,
            "head": branch,
            "base": base,
            "body": body,
            "draft": draft,
        }

        async def call(gh: GitHubAPI, token: str) -> Any:
            return await gh.post(
                "/repos/{owner}/{repo}/pulls",
                {"owner": repo.owner, "repo": repo.name},
                data=data,
                oauth_token=token,
            )

        doing = f"open a pull request from {branch} into {base}"
        try:
            answer = await self._call(repo, call, doing=doing, missing="repository")
        except _Refused as refused:
            if _ALREADY_EXISTS in refused.github_said:
                existing = await self.find_pull(repo, branch)
                if existing is None:
                    raise
                return await self.update_pull(repo, existing.number, title=title, body=body)
            if draft and _NO_DRAFTS in refused.github_said:
                return await self.open_pull(
                    repo, branch=branch, base=base, title=title, body=body, draft=False
                )
            raise
        return self._pull(repo, answer)

    async def update_pull(
        self,
        repo: RepoRef,
        number: int,
        *,
        title: str | None = None,
        body: str | None = None,
    ) -> PullRequest:
        """Change the title and/or body of pull request `number`; return it as it is now."""
        data = {
            key: value for key, value in (("title", title), ("body", body)) if value is not None
        }
        where = {"owner": repo.owner, "repo": repo.name, "number": number}

        async def call(gh: GitHubAPI, token: str) -> Any:
            if not data:
                return await gh.getitem(
                    "/repos/{owner}/{repo}/pulls/{number}", where, oauth_token=token
                )
            return await gh.patch(
                "/repos/{owner}/{repo}/pulls/{number}", where, data=data, oauth_token=token
            )

        answer = await self._call(
            repo,
            call,
            doing=f"update pull request #{number}",
            missing=f"pull request #{number} on",
        )
        return self._pull(repo, answer)

    async def comment(self, repo: RepoRef, number: int, body: str) -> None:
        """Post `body` on pull request `number`'s conversation."""

        async def call(gh: GitHubAPI, token: str) -> Any:
            return await gh.post(
                "/repos/{owner}/{repo}/issues/{number}/comments",
                {"owner": repo.owner, "repo": repo.name, "number": number},
                data={"body": body},
                oauth_token=token,
            )

        await self._call(
            repo,
            call,
            doing=f"comment on pull request #{number}",
            missing=f"pull request #{number} on",
        )

    async def logins(self) -> tuple[str, ...]:
        """The names people mention Baton by on GitHub: a token's user login, or a
        GitHub App's slug and its bot's login (`slug[bot]`); () when GitHub cannot say.
        Asked once; after a failure, not again for `LOGINS_RETRY_S` (a webhook waiting
        on an unreachable GitHub each time would outlast GitHub's own timeout)."""
        if self._logins is not None:
            return self._logins
        now = time.monotonic()
        if self._logins_failed_at is not None and now - self._logins_failed_at < LOGINS_RETRY_S:
            return ()
        try:
            self._logins = await self.credentials.logins(self._api())
        except (ForgeError, *_FAILURES) as exc:
            logger.warning("could not learn Baton's login on GitHub: %s", exc)
            self._logins_failed_at = now
            return ()
        return self._logins

    async def token(self, repo: RepoRef) -> str:
        """A token git can push to `repo` with (HTTP Basic, user `x-access-token`)."""
        try:
            return await self.credentials.token(self._api(), repo)
        except ForgeError:
            raise  # the credentials said what went wrong
        except _FAILURES as exc:
            raise self._translate(exc, repo, doing="get a token", missing="repository") from exc

    def forget_token(self, repo: RepoRef, token: str) -> bool:
        """git was refused `token`: the credentials drop it if it is cached; whether a
        fresh one may work."""
        return self.credentials.forget(repo, token)

    @property
    def hint(self) -> str:
        """What to check when GitHub refuses Baton (`check GITHUB_TOKEN`, …)."""
        return self.credentials.hint

    async def close(self) -> None:
        """Close the HTTP session (a later call opens a new one)."""
        session, self._session, self._gh = self._session, None, None
        if session is not None:
            await session.close()

    def _api(self) -> GitHubAPI:
        """gidgethub's client over this forge's session, made on first use."""
        if self._gh is None or self._session is None or self._session.closed:
            timeout = aiohttp.ClientTimeout(total=self._timeout_s)
            self._session = aiohttp.ClientSession(timeout=timeout)
            self._gh = AiohttpGitHubAPI(self._session, _REQUESTER, base_url=self.api_url)
        return self._gh

    async def _call(
        self,
        repo: RepoRef,
        call: Callable[[GitHubAPI, str], Awaitable[_T]],
        *,
        doing: str,
        missing: str,
    ) -> _T:
        """Run `call` with a token for `repo`, translating failures into ForgeError.

        An installation token GitHub refuses (revoked, expired early) is replaced once.
        """
        gh = self._api()
        attempts = 2
        while True:
            attempts -= 1
            token = await self.token(repo)
            try:
                return await call(gh, token)
            except _FAILURES as exc:
                error = self._translate(exc, repo, doing=doing, missing=missing, token=token)
                if not (attempts and error.status == 401 and self.credentials.forget(repo, token)):
                    raise error from exc

    def _translate(
        self,
        exc: BaseException,
        repo: RepoRef,
        *,
        doing: str,
        missing: str,
        token: str | None = None,
    ) -> ForgeError:
        """One sentence for people, and a kind, for a failed request."""
        who, hint = self.credentials.who, self.credentials.hint
        where = repo.full_name
        text = ""
        if isinstance(exc, gidgethub.HTTPException):
            status = int(exc.status_code)
            said = _said(exc)
            text = said.lower()
            shown = f"{status} {said}" if said else str(status)
            if (
                isinstance(exc, gidgethub.RateLimitExceeded)
                or status == 429
                or (status == 403 and "rate limit" in text)
            ):
                reset = _rate_limit_reset(exc)
                error = ForgeError(
                    f"GitHub is rate-limiting {who}, so Baton could not {doing} on {where} "
                    f"({shown}); {reset}",
                    kind=ForgeFailure.UNREACHABLE,
                    status=status,
                )
            elif status == 401:
                error = ForgeError(
                    f"GitHub refused {who} for {where} ({shown}): {hint}",
                    kind=ForgeFailure.AUTH,
                    status=status,
                )
            elif status == 403:
                error = ForgeError(
                    f"GitHub did not let {who} {doing} on {where} ({shown}): give it "
                    f"access to {where}'s contents and pull requests, {hint}",
                    kind=ForgeFailure.AUTH,
                    status=status,
                )
            elif status in (404, 410):
                error = ForgeError(
                    f"GitHub found no {missing} {where} ({shown}): check the workspace's "
                    f"remote, and that {who} can see the repository",
                    kind=ForgeFailure.NOT_FOUND,
                    status=status,
                )
            elif status >= 500:
                error = ForgeError(
                    f"GitHub failed while Baton tried to {doing} on {where} ({shown}); "
                    "try again later",
                    kind=ForgeFailure.UNREACHABLE,
                    status=status,
                )
            else:
                error = _Refused(
                    f"GitHub refused to {doing} on {where} ({shown})",
                    status=status,
                    github_said=text,
                )
        elif isinstance(exc, TimeoutError):
            error = ForgeError(
                f"GitHub at {self.api_url} did not answer within {self._timeout_s:g} s when "
                f"Baton tried to {doing} on {where}; try again later",
                kind=ForgeFailure.UNREACHABLE,
            )
        elif isinstance(exc, aiohttp.ClientError):
            detail = str(exc) or type(exc).__name__
            error = ForgeError(
                f"Baton could not reach GitHub at {self.api_url} to {doing} on {where} "
                f"({detail}); check GITHUB_API_URL and the network",
                kind=ForgeFailure.UNREACHABLE,
            )
        else:  # an answer gidgethub could not decode (ValueError, LookupError)
            error = ForgeError(
                f"GitHub at {self.api_url} sent an unreadable answer when Baton tried to "
                f"{doing} on {where}; check GITHUB_API_URL",
                kind=ForgeFailure.UNREACHABLE,
            )
        if token and token in str(error):  # GitHub does not echo tokens; be sure anyway
            error.args = (str(error).replace(token, "[token]"),)
        return error

    def _pull(self, repo: RepoRef, answer: Any) -> PullRequest:
        try:
            return _Pull.model_validate(answer).value()
        except PydanticValidationError:
            raise self._unreadable(repo, "a pull request") from None

    def _unreadable(self, repo: RepoRef, expected: str) -> ForgeError:
        return ForgeError(
            f"GitHub at {self.api_url} answered with something other than {expected} for "
            f"{repo.full_name}; check GITHUB_API_URL",
            kind=ForgeFailure.UNREACHABLE,
        )


class _Refused(ForgeError):
    """GitHub refused a request (422 and the like); `github_said` is its reasons, lower-cased,
    for `open_pull` to tell "already exists" from other refusals."""

    def __init__(self, message: str, *, status: int, github_said: str) -> None:
        super().__init__(message, kind=ForgeFailure.REJECTED, status=status)
        self.github_said = github_said


# What a request may raise besides a ForgeError: an HTTP status, no answer, or an answer
# gidgethub cannot decode (bad JSON, an unknown charset).
_FAILURES = (
    gidgethub.HTTPException,
    aiohttp.ClientError,
    TimeoutError,
    ValueError,
    LookupError,
)


def _said(exc: gidgethub.HTTPException) -> str:
    """GitHub's message (else the status's phrase), with a 422's reasons."""
    message = str(exc)
    errors = getattr(exc, "errors", None)
    if isinstance(errors, list):
        reasons = [
            str(item.get("message") or item.get("code") or "")
            for item in errors
            if isinstance(item, dict)
        ]
        reasons = [reason for reason in reasons if reason and reason not in message]
        if reasons:
            message = f"{message}: {'; '.join(reasons)}" if message else "; ".join(reasons)
    return " ".join(message.split())[:300]


def _rate_limit_reset(exc: gidgethub.HTTPException) -> str:
    """When to try again, from the rate limit or `retry-after`."""
    rate_limit = getattr(exc, "rate_limit", None)
    if rate_limit is not None:
        return f"it resets at {rate_limit.reset_datetime.astimezone(UTC):%H:%M} UTC"
    retry_after = exc.headers.get("retry-after") if exc.headers else None
    if retry_after and retry_after.isdigit():
        return f"try again in {retry_after} s"
    return "try again later"


def from_env(environ: Mapping[str, str]) -> GitHubForge | None:
    """A GitHubForge from `GITHUB_API_URL` and the credentials, or None without any.

    Raises:
        ConfigError: Bad credentials settings, or a `GITHUB_API_URL` that is not an
            http(s) URL without credentials, query or fragment.
    """
    credentials = credentials_from_env(environ)
    if credentials is None:
        return None
    api_url = environ.get("GITHUB_API_URL", "").strip() or DEFAULT_API_URL
    parts = urlsplit(api_url)
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.username is not None
        or parts.password is not None
        or parts.query
        or parts.fragment
    ):
        raise ConfigError(
            "GITHUB_API_URL: expected GitHub's API URL, like https://api.github.com or "
            "https://ghe.example.com/api/v3"
        )
    return GitHubForge(credentials, api_url=api_url)


__all__ = ["DEFAULT_API_URL", "GitHubForge", "from_env"]
