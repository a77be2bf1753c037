"""A fake GitHub REST API server for tests, and webhook deliveries signed as GitHub signs them.

The fake speaks enough of GitHub's REST API (JSON field names, status codes and error
bodies as GitHub sends them) that gidgethub's real client can talk to it. It keeps
repositories, pull requests and their comments in memory, checks tokens (personal
access tokens added by the test, and installation tokens it issued to a GitHub App whose
RS256 JWT it verified), records every request, and can fail on demand.

Example:
    async with FakeGitHub() as gh:
        gh.add_repo("acme/api", installation_id=42)
        gh.add_token("ghp_test")
        forge = GitHubForge(TokenCredentials("ghp_test"), api_url=gh.url)
        ...
        assert gh.requests_to("POST", "/repos/acme/api/pulls")[0].json["draft"] is True

Endpoints: `GET /repos/{o}/{r}`, `GET /repos/{o}/{r}/installation` (JWT),
`POST /app/installations/{id}/access_tokens` (JWT), `GET|POST /repos/{o}/{r}/pulls`,
`GET|PATCH /repos/{o}/{r}/pulls/{n}`, `GET|POST /repos/{o}/{r}/issues/{n}/comments`.
`FakeGitHub(path_prefix="/api/v3")` serves them under a prefix, as GitHub Enterprise does.

Webhooks: `github_delivery(secret, event, payload)` gives the headers and body GitHub
would send; `review_payload`, `review_comment_payload`, `issue_comment_payload`,
`check_run_payload` and `pull_closed_payload` build payloads in GitHub's shapes.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import secrets
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import jwt
from aiohttp import web

from tests.fakes.serving import AppServer

__all__ = [
    "ZERO_SHA",
    "FakeGitHub",
    "FakePull",
    "FakeRepo",
    "IssuedToken",
    "RecordedRequest",
    "check_run_payload",
    "github_delivery",
    "issue_comment_payload",
    "pull_closed_payload",
    "review_comment_payload",
    "review_payload",
]

ZERO_SHA = "0" * 40
MAX_BODY_CHARS = 65_536  # GitHub's limit for pull request and comment bodies
_WEB = "https://github.com"
_DOCS = "https://docs.github.com/rest"
_BAD_CREDENTIALS = "Bad credentials"
_JWT_UNDECODABLE = "A JSON web token could not be decoded"
_JWT_EXPIRED = (
    "'Expiration time' claim ('exp') must be a numeric value representing the future time "
    "at which the assertion expires"
)
_JWT_TOO_LONG = "'Expiration time' claim ('exp') is too far in the future"
_APP_JWT_MAX = timedelta(minutes=10)
_BODY = web.RequestKey("github_body", dict)  # the request's JSON object, {} without a body

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class RecordedRequest:
    """One request the fake received.

    Attributes:
        method: `GET`, `POST`, …
        path: The path without the fake's prefix, e.g. `/repos/acme/api/pulls`.
        query: The query string's parameters.
        headers: Every header, names lower-cased.
        json: The decoded JSON body, or None without one.
    """

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    json: Any

    @property
    def credential(self) -> str | None:
        """The token or JWT in `Authorization`, without its scheme."""
        scheme, _, value = self.headers.get("authorization", "").partition(" ")
        return value.strip() if scheme.lower() in ("token", "bearer") and value else None


@dataclass
class FakePull:
    """A pull request the fake holds; tests may read and change it."""

    number: int
    title: str
    body: str | None
    head_ref: str
    head_sha: str
    base_ref: str
    draft: bool
    author: str
    author_type: str = "User"
    state: str = "open"
    merged: bool = False
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    updated_at: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass
class FakeRepo:
    """A repository the fake holds."""

    id: int
    owner: str
    name: str
    default_branch: str
    installation_id: int | None
    private: bool
    drafts: bool
    pulls: dict[int, FakePull] = field(default_factory=dict)
    comments: dict[int, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def full_name(self) -> str:
        """`owner/name`."""
        return f"{self.owner}/{self.name}"

    def next_number(self) -> int:
        """Pull requests and issues share one sequence."""
        return max(self.pulls, default=0) + 1


@dataclass
class IssuedToken:
    """An installation token the fake issued; tests may expire or revoke it."""

    token: str
    installation_id: int
    expires_at: datetime
    revoked: bool = False


@dataclass
class _Failure:
    status: int
    times: int
    message: str
    headers: dict[str, str]


@dataclass(frozen=True)
class _Caller:
    login: str
    type: str
    installation_id: int | None  # None: a personal access token, sees every repository


class _Refusal(Exception):
    """An error answer in GitHub's shape."""

    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"message": message, **extra, "documentation_url": _DOCS}


# --------------------------------------------------------------------------- server


class FakeGitHub(AppServer):
    """An in-memory GitHub REST API on 127.0.0.1 (see the module's docstring)."""

    def __init__(self, *, path_prefix: str = "") -> None:
        self.path_prefix = path_prefix.rstrip("/")
        self.repos: dict[str, FakeRepo] = {}
        self.tokens: dict[str, str] = {}
        self.issued_tokens: list[IssuedToken] = []
        self.requests: list[RecordedRequest] = []
        self.token_lifetime = timedelta(hours=1)
        """How long installation tokens it issues from now on are valid."""
        self.branch_sha: Callable[[str, str], str | None] = lambda repo, branch: ZERO_SHA
        """`(repo full name, branch) -> head sha`, or None for a branch that does not exist."""
        self.app_id: str | None = None
        # The App's slug: its bot is `<slug>[bot]` (GET /app).
        self.app_slug = "baton"
        self._public_key: str | bytes | None = None
        self._failures: list[_Failure] = []
        self._ids = itertools.count(1001)
        super().__init__()

    # ------------------------------------------------------------------- lifecycle

    @property
    def url_suffix(self) -> str:  # type: ignore[override]
        # The API's base URL has the prefix, for `GitHubForge(api_url=…)`.
        return self.path_prefix

    def runner(self) -> web.AppRunner:
        app = web.Application(middlewares=[self._middleware])
        prefix = self.path_prefix
        routes: list[tuple[str, str, Handler]] = [
            ("GET", "/user", self._get_user),
            ("GET", "/app", self._get_app),
            ("GET", "/repos/{owner}/{repo}", self._get_repo),
            ("GET", "/repos/{owner}/{repo}/installation", self._get_installation),
            ("POST", "/app/installations/{installation_id}/access_tokens", self._issue_token),
            ("GET", "/repos/{owner}/{repo}/pulls", self._list_pulls),
            ("POST", "/repos/{owner}/{repo}/pulls", self._create_pull),
            ("GET", "/repos/{owner}/{repo}/pulls/{number}", self._get_pull),
            ("PATCH", "/repos/{owner}/{repo}/pulls/{number}", self._update_pull),
            ("GET", "/repos/{owner}/{repo}/issues/{number}/comments", self._list_comments),
            ("POST", "/repos/{owner}/{repo}/issues/{number}/comments", self._add_comment),
        ]
        for method, path, handler in routes:
            app.router.add_route(method, prefix + path, handler)
        return web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0)

    # ------------------------------------------------------------------- state

    def add_repo(
        self,
        full_name: str,
        *,
        default_branch: str = "main",
        installation_id: int | None = None,
        private: bool = True,
        drafts: bool = True,
    ) -> FakeRepo:
        """Add a repository; `installation_id` is the app installation that covers it,
        `drafts=False` refuses draft pull requests as GitHub's free plan does for
        private repositories."""
        owner, _, name = full_name.partition("/")
        repo = FakeRepo(
            id=next(self._ids),
            owner=owner,
            name=name,
            default_branch=default_branch,
            installation_id=installation_id,
            private=private,
            drafts=drafts,
        )
        self.repos[full_name.lower()] = repo
        return repo

    def add_token(self, token: str, *, login: str = "baton-user") -> None:
        """Accept `token` (as `token …` or `Bearer …`) for every repository."""
        self.tokens[token] = login

    def set_app(self, app_id: str | int, public_key_pem: str | bytes) -> None:
        """Accept JWTs for app `app_id` signed with the key whose public half is given."""
        self.app_id = str(app_id)
        self._public_key = public_key_pem

    def revoke(self, token: str) -> None:
        """Refuse `token` from now on (an added or an issued one)."""
        self.tokens.pop(token, None)
        for issued in self.issued_tokens:
            if issued.token == token:
                issued.revoked = True

    def add_pull(
        self,
        repo: str,
        branch: str,
        *,
        base: str | None = None,
        title: str = "A pull request",
        body: str | None = None,
        draft: bool = False,
        state: str = "open",
        author: str = "someone",
    ) -> FakePull:
        """Seed a pull request, as if someone had opened it."""
        fake = self._repo(repo)
        pull = FakePull(
            number=fake.next_number(),
            title=title,
            body=body,
            head_ref=branch,
            head_sha=self.branch_sha(fake.full_name, branch) or ZERO_SHA,
            base_ref=base or fake.default_branch,
            draft=draft,
            author=author,
            state=state,
        )
        fake.pulls[pull.number] = pull
        return pull

    def pull(self, repo: str, number: int) -> FakePull:
        """Pull request `number` of `repo`."""
        return self._repo(repo).pulls[number]

    def pulls(self, repo: str) -> list[FakePull]:
        """Every pull request of `repo`, in order."""
        return list(self._repo(repo).pulls.values())

    def comments(self, repo: str, number: int) -> list[str]:
        """The bodies of the comments on `number`'s conversation, in order."""
        return [item["body"] for item in self._repo(repo).comments.get(number, [])]

    def fail_next(
        self,
        status: int,
        times: int = 1,
        *,
        message: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer the next `times` requests with `status` and `{"message": …}`."""
        phrase = message or {
            401: _BAD_CREDENTIALS,
            403: "Resource not accessible by integration",
            404: "Not Found",
            422: "Validation Failed",
            500: "Server Error",
            502: "Server Error",
            503: "Service Unavailable",
        }.get(status, "Error")
        self._failures.append(_Failure(status, times, phrase, dict(headers or {})))

    def requests_to(self, method: str, path: str) -> list[RecordedRequest]:
        """The recorded requests with this method and path (no query, no prefix)."""
        return [r for r in self.requests if r.method == method and r.path == path]

    def _repo(self, full_name: str) -> FakeRepo:
        return self.repos[full_name.lower()]

    # ------------------------------------------------------------------- plumbing

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        path = request.path.removeprefix(self.path_prefix) or "/"
        self.requests.append(
            RecordedRequest(
                method=request.method,
                path=path,
                query=dict(request.query),
                headers={name.lower(): value for name, value in request.headers.items()},
                json=body,
            )
        )
        if self._failures:
            failure = self._failures[0]
            failure.times -= 1
            if failure.times <= 0:
                self._failures.pop(0)
            return _answer(
                failure.status,
                {"message": failure.message, "documentation_url": _DOCS},
                headers=failure.headers,
            )
        if raw and not isinstance(body, dict):
            return _answer(400, {"message": "Problems parsing JSON", "documentation_url": _DOCS})
        request[_BODY] = body or {}
        try:
            return await handler(request)
        except _Refusal as refusal:
            return _answer(refusal.status, refusal.body)

    def _caller(self, request: web.Request) -> _Caller:
        """Who the token belongs to; 401 for none, an unknown, expired or revoked one."""
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        token = value.strip()
        if scheme.lower() not in ("token", "bearer") or not token:
            raise _Refusal(401, "Requires authentication")
        if token in self.tokens:
            return _Caller(self.tokens[token], "User", None)
        now = datetime.now(UTC)
        for issued in self.issued_tokens:
            if issued.token == token and not issued.revoked and issued.expires_at > now:
                return _Caller("baton[bot]", "Bot", issued.installation_id)
        raise _Refusal(401, _BAD_CREDENTIALS)

    def _check_jwt(self, request: web.Request) -> None:
        """A valid app JWT in `Authorization: Bearer …`, else 401 as GitHub answers."""
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or self._public_key is None:
            raise _Refusal(401, _JWT_UNDECODABLE)
        try:
            claims = jwt.decode(
                value.strip(),
                self._public_key,
                algorithms=["RS256"],
                options={"require": ["exp", "iat", "iss"]},
            )
        except jwt.ExpiredSignatureError:
            raise _Refusal(401, _JWT_EXPIRED) from None
        except jwt.PyJWTError:
            raise _Refusal(401, _JWT_UNDECODABLE) from None
        if str(claims["iss"]) != self.app_id:
            raise _Refusal(401, _JWT_UNDECODABLE)
        if claims["exp"] - claims["iat"] > _APP_JWT_MAX.total_seconds():
            raise _Refusal(401, _JWT_TOO_LONG)

    def _visible_repo(self, request: web.Request, caller: _Caller | None) -> FakeRepo:
        """The repository in the path, if it exists and the caller may see it; else 404."""
        key = f"{request.match_info['owner']}/{request.match_info['repo']}".lower()
        repo = self.repos.get(key)
        if repo is None or (
            caller is not None
            and caller.installation_id is not None
            and caller.installation_id != repo.installation_id
        ):
            raise _Refusal(404, "Not Found")
        return repo

    def _pull_in_path(self, repo: FakeRepo, request: web.Request) -> FakePull:
        number = request.match_info["number"]
        if not number.isdigit() or int(number) not in repo.pulls:
            raise _Refusal(404, "Not Found")
        return repo.pulls[int(number)]

    # ------------------------------------------------------------------- endpoints

    async def _get_user(self, request: web.Request) -> web.Response:
        """`GET /user`: the token's own account."""
        caller = self._caller(request)
        return _answer(200, _user_json(caller.login, caller.type))

    async def _get_app(self, request: web.Request) -> web.Response:
        """`GET /app`: the App the JWT is signed for."""
        self._check_jwt(request)
        app = {"id": int(self.app_id or 0), "slug": self.app_slug, "name": self.app_slug.title()}
        return _answer(200, {**app, "owner": _user_json("acme", "Organization")})

    async def _get_repo(self, request: web.Request) -> web.Response:
        caller = self._caller(request)
        return _answer(200, self._repo_json(self._visible_repo(request, caller)))

    async def _get_installation(self, request: web.Request) -> web.Response:
        self._check_jwt(request)
        repo = self._visible_repo(request, None)
        if repo.installation_id is None:
            raise _Refusal(404, "Not Found")
        return _answer(200, self._installation_json(repo.installation_id, repo.owner))

    async def _issue_token(self, request: web.Request) -> web.Response:
        self._check_jwt(request)
        raw_id = request.match_info["installation_id"]
        owners = [
            repo.owner
            for repo in self.repos.values()
            if raw_id.isdigit() and repo.installation_id == int(raw_id)
        ]
        if not owners:
            raise _Refusal(404, "Not Found")
        issued = IssuedToken(
            token=f"ghs_{secrets.token_hex(18)}",
            installation_id=int(raw_id),
            expires_at=(datetime.now(UTC) + self.token_lifetime).replace(microsecond=0),
        )
        self.issued_tokens.append(issued)
        return _answer(
            201,
            {
                "token": issued.token,
                "expires_at": _iso(issued.expires_at),
                "permissions": {"contents": "write", "pull_requests": "write"},
                "repository_selection": "selected",
            },
        )

    async def _list_pulls(self, request: web.Request) -> web.Response:
        caller = self._caller(request)
        repo = self._visible_repo(request, caller)
        state = request.query.get("state", "open")
        if state not in ("open", "closed", "all"):
            raise _Refusal(
                422,
                "Validation Failed",
                errors=[{"resource": "PullRequest", "field": "state", "code": "invalid"}],
            )
        head = request.query.get("head")
        base = request.query.get("base")
        pulls = [
            pull
            for pull in repo.pulls.values()
            if (state == "all" or pull.state == state)
            and (head is None or head == f"{repo.owner}:{pull.head_ref}")
            and (base is None or base == pull.base_ref)
        ]
        pulls.sort(key=lambda pull: pull.number, reverse=True)  # GitHub: newest first
        per_page = min(max(_int(request.query.get("per_page"), 30), 1), 100)
        page = max(_int(request.query.get("page"), 1), 1)
        shown = pulls[(page - 1) * per_page : page * per_page]
        headers = {}
        if page * per_page < len(pulls):
            query = {**request.query, "page": str(page + 1)}
            headers["Link"] = f'<{request.url.with_query(None)}?{urlencode(query)}>; rel="next"'
        return _answer(
            200, [self._pull_json(repo, pull, simple=True) for pull in shown], headers=headers
        )

    async def _create_pull(self, request: web.Request) -> web.Response:
        caller = self._caller(request)
        repo = self._visible_repo(request, caller)
        data: dict[str, Any] = request[_BODY]
        for name in ("title", "head", "base"):
            if not isinstance(data.get(name), str) or not data[name]:
                raise _Refusal(
                    422,
                    "Validation Failed",
                    errors=[{"resource": "PullRequest", "field": name, "code": "missing_field"}],
                )
        body = data.get("body")
        draft = data.get("draft", False)
        if (body is not None and not isinstance(body, str)) or not isinstance(draft, bool):
            raise _Refusal(422, "Invalid request.\n\nFor 'properties/body', is not a string.")
        if body is not None and len(body) > MAX_BODY_CHARS:
            raise _Refusal(422, "Validation Failed", errors=[_too_long("PullRequest")])
        owner, _, branch = data["head"].rpartition(":")
        if owner and owner.lower() != repo.owner.lower():
            raise _Refusal(
                422,
                "Validation Failed",
                errors=[{"resource": "PullRequest", "field": "head", "code": "invalid"}],
            )
        sha = self.branch_sha(repo.full_name, branch)
        if sha is None:
            raise _Refusal(
                422,
                "Validation Failed",
                errors=[{"resource": "PullRequest", "field": "head", "code": "invalid"}],
            )
        if any(p.state == "open" and p.head_ref == branch for p in repo.pulls.values()):
            raise _Refusal(
                422,
                "Validation Failed",
                errors=[
                    {
                        "resource": "PullRequest",
                        "code": "custom",
                        "message": f"A pull request already exists for {repo.owner}:{branch}.",
                    }
                ],
            )
        if draft and not repo.drafts:
            raise _Refusal(
                422,
                "Validation Failed",
                errors=[
                    {
                        "resource": "PullRequest",
                        "code": "custom",
                        "message": "Draft pull requests are not supported in this repository.",
                    }
                ],
            )
        pull = FakePull(
            number=repo.next_number(),
            title=data["title"],
            body=body,
            head_ref=branch,
            head_sha=sha,
            base_ref=data["base"],
            draft=draft,
            author=caller.login,
            author_type=caller.type,
        )
        repo.pulls[pull.number] = pull
        return _answer(201, self._pull_json(repo, pull))

    async def _get_pull(self, request: web.Request) -> web.Response:
        caller = self._caller(request)
        repo = self._visible_repo(request, caller)
        return _answer(200, self._pull_json(repo, self._pull_in_path(repo, request)))

    async def _update_pull(self, request: web.Request) -> web.Response:
        caller = self._caller(request)
        repo = self._visible_repo(request, caller)
        pull = self._pull_in_path(repo, request)
        data: dict[str, Any] = request[_BODY]
        for name in ("title", "body", "state", "base"):
            if name in data and not isinstance(data[name], str):
                raise _Refusal(
                    422, f"Invalid request.\n\nFor 'properties/{name}', is not a string."
                )
        if len(data.get("body") or "") > MAX_BODY_CHARS:
            raise _Refusal(422, "Validation Failed", errors=[_too_long("PullRequest")])
        if data.get("state") not in (None, "open", "closed"):
            raise _Refusal(
                422,
                "Validation Failed",
                errors=[{"resource": "PullRequest", "field": "state", "code": "invalid"}],
            )
        pull.title = data.get("title", pull.title)
        pull.body = data.get("body", pull.body)
        pull.base_ref = data.get("base", pull.base_ref)
        if not pull.merged:
            pull.state = data.get("state", pull.state)
        pull.updated_at = datetime.now(UTC)
        return _answer(200, self._pull_json(repo, pull))

    async def _list_comments(self, request: web.Request) -> web.Response:
        caller = self._caller(request)
        repo = self._visible_repo(request, caller)
        pull = self._pull_in_path(repo, request)
        return _answer(200, list(repo.comments.get(pull.number, [])))

    async def _add_comment(self, request: web.Request) -> web.Response:
        caller = self._caller(request)
        repo = self._visible_repo(request, caller)
        pull = self._pull_in_path(repo, request)
        body = request[_BODY].get("body")
        if not isinstance(body, str) or not body:
            raise _Refusal(
                422,
                "Validation Failed",
                errors=[{"resource": "IssueComment", "field": "body", "code": "missing_field"}],
            )
        if len(body) > MAX_BODY_CHARS:
            raise _Refusal(422, "Validation Failed", errors=[_too_long("IssueComment")])
        comment_id = next(self._ids)
        now = _iso(datetime.now(UTC))
        comment = {
            "id": comment_id,
            "node_id": f"IC_{comment_id}",
            "url": f"{self.url}/repos/{repo.full_name}/issues/comments/{comment_id}",
            "html_url": f"{_WEB}/{repo.full_name}/pull/{pull.number}#issuecomment-{comment_id}",
            "issue_url": f"{self.url}/repos/{repo.full_name}/issues/{pull.number}",
            "body": body,
            "user": _user_json(caller.login, caller.type),
            "created_at": now,
            "updated_at": now,
            "author_association": "NONE",
        }
        repo.comments.setdefault(pull.number, []).append(comment)
        return _answer(201, comment)

    # ------------------------------------------------------------------- shapes

    def _repo_json(self, repo: FakeRepo) -> dict[str, Any]:
        return {
            "id": repo.id,
            "node_id": f"R_{repo.id}",
            "name": repo.name,
            "full_name": repo.full_name,
            "private": repo.private,
            "owner": _user_json(repo.owner, "Organization"),
            "html_url": f"{_WEB}/{repo.full_name}",
            "url": f"{self.url}/repos/{repo.full_name}",
            "clone_url": f"{_WEB}/{repo.full_name}.git",
            "default_branch": repo.default_branch,
            "visibility": "private" if repo.private else "public",
        }

    def _installation_json(self, installation_id: int, owner: str) -> dict[str, Any]:
        return {
            "id": installation_id,
            "app_id": int(self.app_id) if self.app_id and self.app_id.isdigit() else self.app_id,
            "account": _user_json(owner, "Organization"),
            "target_type": "Organization",
            "repository_selection": "selected",
            "access_tokens_url": f"{self.url}/app/installations/{installation_id}/access_tokens",
            "permissions": {"contents": "write", "pull_requests": "write"},
            "events": ["pull_request", "pull_request_review", "check_run"],
        }

    def _pull_json(self, repo: FakeRepo, pull: FakePull, *, simple: bool = False) -> dict[str, Any]:
        """A pull request as GitHub returns it; the list form (`simple`) lacks `merged`."""
        repo_json = self._repo_json(repo)
        api = f"{self.url}/repos/{repo.full_name}"
        merged_at = _iso(pull.updated_at) if pull.merged else None
        closed_at = _iso(pull.updated_at) if pull.state == "closed" else None
        data: dict[str, Any] = {
            "url": f"{api}/pulls/{pull.number}",
            "id": 50_000 + pull.number,
            "node_id": f"PR_{repo.id}_{pull.number}",
            "html_url": f"{_WEB}/{repo.full_name}/pull/{pull.number}",
            "diff_url": f"{_WEB}/{repo.full_name}/pull/{pull.number}.diff",
            "issue_url": f"{api}/issues/{pull.number}",
            "number": pull.number,
            "state": pull.state,
            "locked": False,
            "title": pull.title,
            "user": _user_json(pull.author, pull.author_type),
            "body": pull.body,
            "created_at": _iso(pull.created_at),
            "updated_at": _iso(pull.updated_at),
            "closed_at": closed_at,
            "merged_at": merged_at,
            "draft": pull.draft,
            "head": {
                "label": f"{repo.owner}:{pull.head_ref}",
                "ref": pull.head_ref,
                "sha": pull.head_sha,
                "user": _user_json(repo.owner, "Organization"),
                "repo": repo_json,
            },
            "base": {
                "label": f"{repo.owner}:{pull.base_ref}",
                "ref": pull.base_ref,
                "sha": self.branch_sha(repo.full_name, pull.base_ref) or ZERO_SHA,
                "user": _user_json(repo.owner, "Organization"),
                "repo": repo_json,
            },
            "author_association": "CONTRIBUTOR",
        }
        if not simple:
            data |= {
                "merged": pull.merged,
                "mergeable": None,
                "mergeable_state": "unknown",
                "merged_by": None,
                "comments": len(repo.comments.get(pull.number, [])),
                "commits": 1,
                "additions": 0,
                "deletions": 0,
                "changed_files": 0,
            }
        return data


def _answer(status: int, body: Any, *, headers: dict[str, str] | None = None) -> web.Response:
    """A JSON answer with the headers GitHub sends on every response."""
    reset = int(datetime.now(UTC).timestamp()) + 3600
    all_headers = {
        "X-GitHub-Media-Type": "github.v3; format=json",
        "X-GitHub-Request-Id": uuid.uuid4().hex[:16].upper(),
        "X-RateLimit-Limit": "5000",
        "X-RateLimit-Remaining": "4999",
        "X-RateLimit-Reset": str(reset),
        **(headers or {}),
    }
    return web.json_response(body, status=status, headers=all_headers)


def _too_long(resource: str) -> dict[str, str]:
    return {
        "resource": resource,
        "code": "custom",
        "field": "body",
        "message": f"body is too long (maximum is {MAX_BODY_CHARS} characters)",
    }


def _int(value: str | None, default: int) -> int:
    return int(value) if value is not None and value.isdigit() else default


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _user_json(login: str, kind: str = "User") -> dict[str, Any]:
    user_id = int.from_bytes(hashlib.sha256(login.encode()).digest()[:3], "big")
    return {
        "login": login,
        "id": user_id,
        "node_id": f"U_{user_id}",
        "html_url": f"{_WEB}/{login.removesuffix('[bot]')}",
        "type": kind,
        "site_admin": False,
    }


# --------------------------------------------------------------------------- webhooks


def github_delivery(
    secret: str, event: str, payload: dict[str, Any], delivery_id: str | None = None
) -> tuple[dict[str, str], bytes]:
    """The headers and body GitHub sends for `payload`, signed with `secret`."""
    body = json.dumps(payload, separators=(",", ":")).encode()
    key = secret.encode()
    installation = payload.get("installation")
    headers = {
        "Accept": "*/*",
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/5c0f8a2",
        "X-GitHub-Delivery": delivery_id or str(uuid.uuid4()),
        "X-GitHub-Event": event,
        "X-GitHub-Hook-ID": "482317002",
        "X-GitHub-Hook-Installation-Target-ID": str(
            installation["id"] if isinstance(installation, dict) else 70_001
        ),
        "X-GitHub-Hook-Installation-Target-Type": (
            "integration" if isinstance(installation, dict) else "repository"
        ),
        "X-Hub-Signature": "sha1=" + hmac.new(key, body, hashlib.sha1).hexdigest(),
        "X-Hub-Signature-256": "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest(),
    }
    return headers, body


def _repository_json(full_name: str) -> dict[str, Any]:
    owner, _, name = full_name.partition("/")
    return {
        "id": 70_001,
        "node_id": "R_kgDOexample",
        "name": name,
        "full_name": full_name,
        "private": True,
        "owner": _user_json(owner, "Organization"),
        "html_url": f"{_WEB}/{full_name}",
        "default_branch": "main",
    }


def _envelope(
    action: str, repo: str, sender: str, sender_type: str, installation_id: int | None
) -> dict[str, Any]:
    envelope: dict[str, Any] = {
        "action": action,
        "repository": _repository_json(repo),
        "organization": {"login": repo.partition("/")[0], "id": 9_001},
        "sender": _user_json(sender, sender_type),
    }
    if installation_id is not None:
        envelope["installation"] = {"id": installation_id, "node_id": "MDIz"}
    return envelope


def _pull_request_json(
    repo: str,
    number: int,
    branch: str,
    *,
    head_repo: str | None,
    head_sha: str,
    base: str = "main",
    state: str = "open",
    merged: bool = False,
    author: str = "baton[bot]",
) -> dict[str, Any]:
    api = f"https://api.github.com/repos/{repo}"
    owner = repo.partition("/")[0]
    head_owner = (head_repo or repo).partition("/")[0]
    return {
        "url": f"{api}/pulls/{number}",
        "id": 50_000 + number,
        "node_id": f"PR_{number}",
        "html_url": f"{_WEB}/{repo}/pull/{number}",
        "number": number,
        "state": state,
        "locked": False,
        "title": "Baton's work",
        "user": _user_json(author, "Bot" if author.endswith("[bot]") else "User"),
        "body": None,
        "draft": True,
        "merged": merged,
        "merged_at": "2024-05-01T12:00:00Z" if merged else None,
        "closed_at": "2024-05-01T12:00:00Z" if state == "closed" else None,
        "head": {
            "label": f"{head_owner}:{branch}",
            "ref": branch,
            "sha": head_sha,
            "user": _user_json(head_owner, "Organization"),
            "repo": _repository_json(head_repo) if head_repo else None,
        },
        "base": {
            "label": f"{owner}:{base}",
            "ref": base,
            "sha": "1" * 40,
            "user": _user_json(owner, "Organization"),
            "repo": _repository_json(repo),
        },
        "author_association": "CONTRIBUTOR",
    }


def review_payload(
    *,
    repo: str = "acme/api",
    number: int = 1,
    branch: str = "baton/fix-login",
    author: str = "alice",
    body: str | None = "Please rename this.",
    state: str = "changes_requested",
    head_repo: str | bool | None = True,
    head_sha: str = ZERO_SHA,
    sender_type: str = "User",
    installation_id: int | None = 42,
) -> dict[str, Any]:
    """`pull_request_review` / `submitted`. `head_repo`: True for `repo` itself, a fork's
    full name, or None for a deleted fork."""
    review_id = 80_000 + number
    return {
        **_envelope("submitted", repo, author, sender_type, installation_id),
        "review": {
            "id": review_id,
            "node_id": f"PRR_{review_id}",
            "user": _user_json(author, sender_type),
            "body": body,
            "commit_id": head_sha,
            "submitted_at": "2024-05-01T12:00:00Z",
            "state": state,
            "html_url": f"{_WEB}/{repo}/pull/{number}#pullrequestreview-{review_id}",
            "pull_request_url": f"https://api.github.com/repos/{repo}/pulls/{number}",
            "author_association": "MEMBER",
        },
        "pull_request": _pull_request_json(
            repo, number, branch, head_repo=_head(repo, head_repo), head_sha=head_sha
        ),
    }


def review_comment_payload(
    *,
    repo: str = "acme/api",
    number: int = 1,
    branch: str = "baton/fix-login",
    author: str = "alice",
    body: str = "Off by one here.",
    path: str = "src/app.py",
    line: int | None = 12,
    head_repo: str | bool | None = True,
    head_sha: str = ZERO_SHA,
    sender_type: str = "User",
    installation_id: int | None = 42,
) -> dict[str, Any]:
    """`pull_request_review_comment` / `created`; `line=None` for a comment on a file."""
    comment_id = 90_000 + number
    return {
        **_envelope("created", repo, author, sender_type, installation_id),
        "comment": {
            "url": f"https://api.github.com/repos/{repo}/pulls/comments/{comment_id}",
            "pull_request_review_id": 80_000 + number,
            "id": comment_id,
            "node_id": f"PRRC_{comment_id}",
            "diff_hunk": "@@ -10,3 +10,4 @@ def login():",
            "path": path,
            "position": None if line is None else 4,
            "original_position": None if line is None else 4,
            "commit_id": head_sha,
            "original_commit_id": head_sha,
            "user": _user_json(author, sender_type),
            "body": body,
            "created_at": "2024-05-01T12:00:00Z",
            "updated_at": "2024-05-01T12:00:00Z",
            "html_url": f"{_WEB}/{repo}/pull/{number}#discussion_r{comment_id}",
            "pull_request_url": f"https://api.github.com/repos/{repo}/pulls/{number}",
            "author_association": "MEMBER",
            "start_line": None,
            "original_start_line": None,
            "start_side": None,
            "line": line,
            "original_line": line,
            "side": "RIGHT",
            "subject_type": "file" if line is None else "line",
        },
        "pull_request": _pull_request_json(
            repo, number, branch, head_repo=_head(repo, head_repo), head_sha=head_sha
        ),
    }


def issue_comment_payload(
    *,
    repo: str = "acme/api",
    number: int = 1,
    author: str = "alice",
    body: str = "Can you also update the docs?",
    on_pull: bool = True,
    sender_type: str = "User",
    installation_id: int | None = 42,
) -> dict[str, Any]:
    """`issue_comment` / `created`, on a pull request's conversation unless `on_pull=False`."""
    comment_id = 70_000 + number
    kind = "pull" if on_pull else "issues"
    issue: dict[str, Any] = {
        "url": f"https://api.github.com/repos/{repo}/issues/{number}",
        "html_url": f"{_WEB}/{repo}/{kind}/{number}",
        "id": 60_000 + number,
        "number": number,
        "title": "Baton's work",
        "user": _user_json("baton[bot]", "Bot"),
        "state": "open",
        "comments": 1,
        "body": None,
    }
    if on_pull:
        issue["pull_request"] = {
            "url": f"https://api.github.com/repos/{repo}/pulls/{number}",
            "html_url": f"{_WEB}/{repo}/pull/{number}",
            "diff_url": f"{_WEB}/{repo}/pull/{number}.diff",
            "patch_url": f"{_WEB}/{repo}/pull/{number}.patch",
            "merged_at": None,
        }
    return {
        **_envelope("created", repo, author, sender_type, installation_id),
        "issue": issue,
        "comment": {
            "url": f"https://api.github.com/repos/{repo}/issues/comments/{comment_id}",
            "html_url": f"{_WEB}/{repo}/{kind}/{number}#issuecomment-{comment_id}",
            "issue_url": f"https://api.github.com/repos/{repo}/issues/{number}",
            "id": comment_id,
            "node_id": f"IC_{comment_id}",
            "user": _user_json(author, sender_type),
            "created_at": "2024-05-01T12:00:00Z",
            "updated_at": "2024-05-01T12:00:00Z",
            "author_association": "MEMBER",
            "body": body,
        },
    }


def check_run_payload(
    *,
    repo: str = "acme/api",
    name: str = "tests",
    conclusion: str | None = "failure",
    head_sha: str = ZERO_SHA,
    branch: str | None = "baton/fix-login",
    pr_numbers: tuple[int, ...] = (1,),
    html_url: str | None = "default",
    details_url: str | None = "https://ci.example.com/runs/7",
    sender_type: str = "Bot",
    installation_id: int | None = 42,
    run_id: int = 30_000,
) -> dict[str, Any]:
    """`check_run` / `completed`. `branch=None` is what GitHub sends for a fork's branch
    (with no pull requests); a check run again has another `run_id`."""
    api = f"https://api.github.com/repos/{repo}"
    pulls = [
        {
            "url": f"{api}/pulls/{number}",
            "id": 50_000 + number,
            "number": number,
            "head": {"ref": branch, "sha": head_sha, "repo": {"id": 70_001, "name": repo}},
            "base": {"ref": "main", "sha": "1" * 40, "repo": {"id": 70_001, "name": repo}},
        }
        for number in pr_numbers
    ]
    return {
        **_envelope("completed", repo, "github-actions[bot]", sender_type, installation_id),
        "check_run": {
            "id": run_id,
            "node_id": f"CR_{run_id}",
            "head_sha": head_sha,
            "external_id": "",
            "url": f"{api}/check-runs/{run_id}",
            "html_url": (f"{_WEB}/{repo}/runs/{run_id}" if html_url == "default" else html_url),
            "details_url": details_url,
            "status": "completed",
            "conclusion": conclusion,
            "started_at": "2024-05-01T12:00:00Z",
            "completed_at": "2024-05-01T12:05:00Z",
            "output": {"title": None, "summary": None, "text": None, "annotations_count": 0},
            "name": name,
            "check_suite": {
                "id": 20_000,
                "node_id": "CS_20000",
                "head_branch": branch,
                "head_sha": head_sha,
                "status": "completed",
                "conclusion": conclusion,
                "url": f"{api}/check-suites/20000",
                "before": "1" * 40,
                "after": head_sha,
                "pull_requests": pulls,
                "app": {"id": 15368, "slug": "github-actions", "name": "GitHub Actions"},
                "created_at": "2024-05-01T12:00:00Z",
                "updated_at": "2024-05-01T12:05:00Z",
            },
            "app": {"id": 15368, "slug": "github-actions", "name": "GitHub Actions"},
            "pull_requests": pulls,
        },
    }


def pull_closed_payload(
    *,
    repo: str = "acme/api",
    number: int = 1,
    branch: str = "baton/fix-login",
    merged: bool = True,
    head_repo: str | bool | None = True,
    head_sha: str = ZERO_SHA,
    sender: str = "alice",
    sender_type: str = "User",
    installation_id: int | None = 42,
) -> dict[str, Any]:
    """`pull_request` / `closed`, merged or not."""
    return {
        **_envelope("closed", repo, sender, sender_type, installation_id),
        "number": number,
        "pull_request": _pull_request_json(
            repo,
            number,
            branch,
            head_repo=_head(repo, head_repo),
            head_sha=head_sha,
            state="closed",
            merged=merged,
        ),
    }


def _head(repo: str, head_repo: str | bool | None) -> str | None:
    if head_repo is True:
        return repo
    if head_repo is False:
        return None
    return head_repo
