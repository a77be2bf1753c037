"""The forge interface: what Baton asks of GitHub (or another forge), forge-neutral."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from bot.errors import BatonError
from bot.forge.remote import RepoRef


class ForgeFailure(StrEnum):
    """Why a forge call failed, which says who has to act on it."""

    AUTH = "auth"
    """The forge refused the credentials: invalid, expired, or lacking permission."""
    UNREACHABLE = "unreachable"
    """No usable answer: connection refused, timeout, 5xx, rate limit. Retry later."""
    NOT_FOUND = "not_found"
    """The repository, pull request or app installation does not exist (for us)."""
    REJECTED = "rejected"
    """The forge understood the request and refused it (422 validation and the like)."""


class ForgeError(BatonError):
    """A forge call failed; the message is one sentence a person can act on.

    Messages never contain a token.

    Attributes:
        kind: Why it failed.
        status: The forge's HTTP status, or None when no answer came.
    """

    def __init__(self, message: str, *, kind: ForgeFailure, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


@dataclass(frozen=True, slots=True, kw_only=True)
class PullRequest:
    """A pull request as the forge reports it.

    Attributes:
        number: Its number in the repository.
        url: The page people open (GitHub's `html_url`).
        state: `open` or `closed`.
        draft: Whether it is a draft.
        merged: Whether it was merged.
        head_branch: The branch it proposes.
        head_sha: The commit at the head of that branch.
        base_branch: The branch it would merge into.
        title: Its title.
    """

    number: int
    url: str
    state: str
    draft: bool
    merged: bool
    head_branch: str
    head_sha: str
    base_branch: str
    title: str


class Forge(Protocol):
    """What Baton does on a forge: pull requests on its own branches, and push tokens."""

    async def find_pull(self, repo: RepoRef, branch: str) -> PullRequest | None:
        """The open pull request whose head is `branch` of `repo` itself, if any."""
        ...

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
        """Open a pull request from `branch` into `base`; if one is already open for
        `branch`, update its title and body instead and return it."""
        ...

    async def update_pull(
        self,
        repo: RepoRef,
        number: int,
        *,
        title: str | None = None,
        body: str | None = None,
    ) -> PullRequest:
        """Change a pull request's title and/or body (None leaves it as it is)."""
        ...

    async def comment(self, repo: RepoRef, number: int, body: str) -> None:
        """Post a comment on a pull request's conversation."""
        ...

    async def logins(self) -> tuple[str, ...]:
        """The names people mention Baton by on the forge; () when it cannot say."""
        ...

    async def token(self, repo: RepoRef) -> str:
        """A token git can push to `repo` with (HTTP Basic, user `x-access-token`)."""
        ...

    def forget_token(self, repo: RepoRef, token: str) -> bool:
        """git was refused `token` for `repo`: drop it if it is cached, and say whether
        a fresh one may work (an installation token may; a fixed token never)."""
        ...

    @property
    def hint(self) -> str:
        """What an operator checks when the forge refuses Baton's credentials, naming
        the variables (`check GITHUB_TOKEN`)."""
        ...

    async def close(self) -> None:
        """Release the forge's connections."""
        ...
