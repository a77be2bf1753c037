"""A workspace's git remote: its URL, and the repository on the forge it names."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from bot.errors import BatonError

# GitHub's rules for owners (letters, digits, dashes) and repositories (also `.` and
# `_`); a forge on loopback in the tests follows them too.
_OWNER = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})")
_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")


class RemoteError(BatonError):
    """A remote URL Baton cannot work with; the message says why."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RepoRef:
    """A repository on a forge: the URL git fetches and pushes, and its owner/name.

    Attributes:
        url: The remote as configured (http or https, no credentials in it).
        owner: The account or organisation that holds the repository.
        name: The repository's name, without `.git`.
    """

    url: str
    owner: str
    name: str

    @property
    def full_name(self) -> str:
        """`owner/name`, as the forge's API and its webhooks name the repository."""
        return f"{self.owner}/{self.name}"


def parse_remote(url: str) -> RepoRef:
    """Read a remote URL: `http(s)://host[:port][/prefix]/owner/repo[.git]`.

    Raises:
        RemoteError: Not http(s), credentials in the URL (they belong in the
            environment), a query or fragment, or no owner and repository in its path.
    """
    text = url.strip()
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RemoteError(
            f"remote {url!r}: give the repository's http(s) URL, like "
            "https://github.com/acme/api.git"
        )
    if parts.username is not None or parts.password is not None:
        raise RemoteError(
            f"remote {parts.scheme}://…@{parts.hostname}: credentials do not belong in the "
            "URL; set GITHUB_TOKEN or a GitHub App in the environment"
        )
    if parts.query or parts.fragment:
        raise RemoteError(f"remote {url!r}: a repository URL has no query or fragment")
    segments = [segment for segment in parts.path.split("/") if segment]
    if len(segments) < 2:
        raise RemoteError(f"remote {url!r}: the path must end with owner/repository")
    owner, name = segments[-2], segments[-1].removesuffix(".git")
    if not _OWNER.fullmatch(owner) or not _NAME.fullmatch(name) or name in (".", ".."):
        raise RemoteError(f"remote {url!r}: {owner}/{name} is not an owner/repository name")
    return RepoRef(url=text, owner=owner, name=name)


# A link Slack shows as is: http(s), nothing that would end the link or start another.
_SAFE_URL = re.compile(r"https?://[^\s<>|`\"']{1,2000}")


def safe_url(url: str | None) -> str | None:
    """`url` when it can go inside a Slack link (`<url|label>`) unchanged; else None."""
    if url is None or not _SAFE_URL.fullmatch(url):
        return None
    return url
