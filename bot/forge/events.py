"""GitHub webhook deliveries (`POST /github/events`): checked, then read into events.

`verify_delivery` refuses anything it does not fully understand with an HTTP status for
the answer: 413 for a body over 1 MiB (checked before anything else), 401 for a missing
or wrong signature, 415 for a content type other than JSON, 400 for missing headers,
unreadable JSON, or a payload of a kind Baton reads whose fields have the wrong shape.
Deliveries of events Baton does not act on are accepted with `change=None`.

A pull request's `branch` is set only when its head is in the repository itself: a fork
can name a branch `baton/…` too, and must not be taken for Baton's.

Replays are the caller's concern: it remembers `Delivery.id`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from email.message import Message
from typing import Annotated, Any, Literal, TypeVar, cast

import gidgethub
from gidgethub.sansio import Event
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    field_validator,
)
from pydantic import ValidationError as PydanticValidationError

from bot.errors import BatonError

MAX_DELIVERY_BYTES = 1024 * 1024
"""The largest body read; GitHub caps payloads at 25 MB, but Baton's events are small."""

FAILED_CONCLUSIONS = frozenset(
    {"failure", "timed_out", "cancelled", "action_required", "startup_failure"}
)
"""Check run conclusions that count as a failed check."""

_EVENT_NAME = re.compile(r"[a-z_]{1,64}")
_DELIVERY_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_GHOST = "ghost"  # GitHub's name for a deleted account, whose `user` is null
_REVIEW_STATES = ("approved", "changes_requested", "commented")
ReviewState = Literal["approved", "changes_requested", "commented"]


class DeliveryRefused(BatonError):
    """A webhook delivery Baton will not act on; `status` is the HTTP answer to give."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True, kw_only=True)
class ReviewSubmitted:
    """A review was submitted on a pull request (`pull_request_review` / `submitted`)."""

    pr_number: int
    branch: str | None
    author: str
    body: str
    state: ReviewState
    url: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ReviewComment:
    """A comment on a line or file of a pull request's diff
    (`pull_request_review_comment` / `created`); `line` is None for a whole-file one."""

    pr_number: int
    branch: str | None
    author: str
    body: str
    url: str
    path: str
    line: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class PullComment:
    """A comment on a pull request's conversation (`issue_comment` / `created`).

    GitHub's payload names the pull request but not its branch, so `branch` is None.
    """

    pr_number: int
    author: str
    body: str
    url: str
    branch: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckFailed:
    """A check run completed without success (`check_run` / `completed`).

    Attributes:
        url: The check's page on GitHub, else the CI's own page; None if neither.
        pr_numbers: The repository's own pull requests at that commit.
        branch: The branch checked, None when it is a fork's.
    """

    name: str
    url: str | None
    head_sha: str
    conclusion: str
    pr_numbers: tuple[int, ...]
    branch: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class PullClosed:
    """A pull request was closed, merged or not (`pull_request` / `closed`)."""

    pr_number: int
    branch: str | None
    merged: bool
    url: str


ForgeEvent = ReviewSubmitted | ReviewComment | PullComment | CheckFailed | PullClosed


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    """One checked webhook delivery.

    Attributes:
        id: GitHub's delivery id (`X-GitHub-Delivery`); a redelivery keeps it.
        event: `X-GitHub-Event`, e.g. `pull_request_review`.
        action: The payload's `action`, if it has one.
        repo_full_name: `owner/name` of the repository, if the event has one.
        installation_id: The GitHub App installation that received it, if any.
        sender_login: Who caused the event.
        sender_type: `User`, `Bot` or `Organization`, so that bots can be ignored.
        change: What Baton acts on, or None for events it ignores.
        digest: SHA-256 of the body: GitHub signs the body, not the delivery id, so
            the same body under another id is a replay of the same delivery.
    """

    id: str
    event: str
    action: str | None
    repo_full_name: str | None
    installation_id: int | None
    sender_login: str | None
    sender_type: str | None
    change: ForgeEvent | None
    digest: str


# --------------------------------------------------------------------------- wire format

_Id = Annotated[StrictInt, Field(ge=0, le=2**63 - 1)]
_Number = Annotated[StrictInt, Field(gt=0, le=2**31 - 1)]
_Line = Annotated[StrictInt, Field(gt=0, le=2**31 - 1)]
_Name = Annotated[StrictStr, Field(min_length=1, max_length=255)]
_Url = Annotated[StrictStr, Field(max_length=2048)]
_Sha = Annotated[StrictStr, Field(pattern=r"^[0-9a-f]{40}([0-9a-f]{24})?$")]


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


class _User(_Wire):
    login: _Name
    type: _Name | None = None


class _Repository(_Wire):
    full_name: _Name


class _Installation(_Wire):
    id: _Id


class _Envelope(_Wire):
    """What every delivery may carry."""

    action: _Name | None = None
    repository: _Repository | None = None
    installation: _Installation | None = None
    sender: _User | None = None


class _Head(_Wire):
    ref: _Name
    sha: _Sha
    repo: _Repository | None  # null once a fork is deleted


class _Pull(_Wire):
    number: _Number
    html_url: _Url
    head: _Head


class _ClosedPull(_Pull):
    merged: StrictBool


class _Review(_Wire):
    user: _User | None
    body: StrictStr | None
    state: _Name
    html_url: _Url

    @field_validator("state")
    @classmethod
    def _known_state(cls, state: str) -> str:
        # Webhooks send lower case; the REST API's upper case is accepted too.
        if state.lower() not in _REVIEW_STATES:
            raise ValueError(f"expected one of {', '.join(_REVIEW_STATES)}")
        return state.lower()


class _ReviewCommentBody(_Wire):
    user: _User | None
    body: StrictStr
    html_url: _Url
    path: StrictStr
    line: _Line | None = None


class _IssueCommentBody(_Wire):
    user: _User | None
    body: StrictStr
    html_url: _Url


class _IssuePullLink(_Wire):
    url: _Url | None = None


class _Issue(_Wire):
    number: _Number
    pull_request: _IssuePullLink | None = None


class _CheckSuite(_Wire):
    head_branch: _Name | None = None


class _CheckPull(_Wire):
    number: _Number


class _CheckRun(_Wire):
    name: StrictStr
    head_sha: _Sha
    status: _Name
    conclusion: _Name | None
    html_url: _Url | None = None
    details_url: _Url | None = None
    pull_requests: list[_CheckPull] = Field(max_length=1000)
    check_suite: _CheckSuite | None = None


_M = TypeVar("_M", bound=_Wire)


class _ReviewDelivery(_Envelope):
    repository: _Repository
    review: _Review
    pull_request: _Pull


class _ReviewCommentDelivery(_Envelope):
    repository: _Repository
    comment: _ReviewCommentBody
    pull_request: _Pull


class _IssueCommentDelivery(_Envelope):
    repository: _Repository
    issue: _Issue
    comment: _IssueCommentBody


class _CheckRunDelivery(_Envelope):
    repository: _Repository
    check_run: _CheckRun


class _PullDelivery(_Envelope):
    repository: _Repository
    pull_request: _ClosedPull


# --------------------------------------------------------------------------- reading


def verify_delivery(headers: Mapping[str, str], body: bytes, secret: str) -> Delivery:
    """Check a delivery's size, signature and shape, and read what Baton acts on.

    Args:
        headers: The request's headers (any case).
        body: The exact bytes received; the signature covers them.
        secret: The webhook's secret (`GITHUB_WEBHOOK_SECRET`); must not be empty.

    Raises:
        DeliveryRefused: With the HTTP status to answer (413, 401, 415 or 400).
        ValueError: `secret` is empty (a configuration mistake, not the sender's).
    """
    if not secret:
        raise ValueError("a webhook secret is required")
    if len(body) > MAX_DELIVERY_BYTES:
        raise DeliveryRefused(
            f"delivery of {len(body)} bytes is over the {MAX_DELIVERY_BYTES} byte limit",
            status=413,
        )
    lowered = {name.lower(): value for name, value in headers.items()}
    event_name = lowered.get("x-github-event", "")
    delivery_id = lowered.get("x-github-delivery", "")
    if not _EVENT_NAME.fullmatch(event_name):
        raise DeliveryRefused("X-GitHub-Event is missing or malformed", status=400)
    if not _DELIVERY_ID.fullmatch(delivery_id):
        raise DeliveryRefused("X-GitHub-Delivery is missing or malformed", status=400)
    signature = lowered.get("x-hub-signature-256", lowered.get("x-hub-signature"))
    if signature is None:
        raise DeliveryRefused(f"delivery {delivery_id} is not signed", status=401)
    if not signature.isascii():
        raise DeliveryRefused(f"delivery {delivery_id}: malformed signature", status=401)
    if _media_type(lowered.get("content-type", "")) != "application/json":
        raise DeliveryRefused(
            f"delivery {delivery_id}: content type is not application/json (set the "
            "webhook's content type to application/json)",
            status=415,
        )
    try:
        event = Event.from_http(lowered, body, secret=secret)
    except gidgethub.ValidationFailure:
        raise DeliveryRefused(
            f"delivery {delivery_id}: the signature does not match (check GITHUB_WEBHOOK_SECRET)",
            status=401,
        ) from None
    except (gidgethub.BadRequest, ValueError, LookupError, RecursionError):
        # gidgethub reports undecodable JSON as a BadRequest; an unknown charset is a
        # LookupError and deeply nested JSON a RecursionError.
        raise DeliveryRefused(f"delivery {delivery_id}: the body is not JSON", status=400) from None
    if not isinstance(event.data, dict):
        raise DeliveryRefused(f"delivery {delivery_id}: the payload is not an object", status=400)
    return _read(event_name, delivery_id, event.data, digest=hashlib.sha256(body).hexdigest())


def _media_type(content_type: str) -> str:
    message = Message()
    message["content-type"] = content_type
    return message.get_content_type()


def _read(event_name: str, delivery_id: str, data: dict[str, Any], *, digest: str) -> Delivery:
    """The delivery's envelope, and its change if it is one Baton acts on."""
    envelope = _validate(_Envelope, data, event_name, delivery_id)
    action = envelope.action
    change: ForgeEvent | None = None
    if event_name == "pull_request_review" and action == "submitted":
        review = _validate(_ReviewDelivery, data, event_name, delivery_id)
        change = ReviewSubmitted(
            pr_number=review.pull_request.number,
            branch=_own_branch(review.pull_request, review.repository),
            author=_login(review.review.user),
            body=review.review.body or "",
            state=cast(ReviewState, review.review.state),
            url=review.review.html_url,
        )
    elif event_name == "pull_request_review_comment" and action == "created":
        comment = _validate(_ReviewCommentDelivery, data, event_name, delivery_id)
        change = ReviewComment(
            pr_number=comment.pull_request.number,
            branch=_own_branch(comment.pull_request, comment.repository),
            author=_login(comment.comment.user),
            body=comment.comment.body,
            url=comment.comment.html_url,
            path=comment.comment.path,
            line=comment.comment.line,
        )
    elif event_name == "issue_comment" and action == "created":
        issue_comment = _validate(_IssueCommentDelivery, data, event_name, delivery_id)
        if issue_comment.issue.pull_request is not None:
            change = PullComment(
                pr_number=issue_comment.issue.number,
                author=_login(issue_comment.comment.user),
                body=issue_comment.comment.body,
                url=issue_comment.comment.html_url,
            )
    elif event_name == "check_run" and action == "completed":
        check = _validate(_CheckRunDelivery, data, event_name, delivery_id).check_run
        if check.conclusion in FAILED_CONCLUSIONS:
            change = CheckFailed(
                name=check.name,
                url=check.html_url or check.details_url,
                head_sha=check.head_sha,
                conclusion=check.conclusion,
                pr_numbers=tuple(pull.number for pull in check.pull_requests),
                # GitHub leaves head_branch null when the branch is a fork's.
                branch=check.check_suite.head_branch if check.check_suite else None,
            )
    elif event_name == "pull_request" and action == "closed":
        closed = _validate(_PullDelivery, data, event_name, delivery_id)
        change = PullClosed(
            pr_number=closed.pull_request.number,
            branch=_own_branch(closed.pull_request, closed.repository),
            merged=closed.pull_request.merged,
            url=closed.pull_request.html_url,
        )
    return Delivery(
        id=delivery_id,
        event=event_name,
        action=action,
        repo_full_name=envelope.repository.full_name if envelope.repository else None,
        installation_id=envelope.installation.id if envelope.installation else None,
        sender_login=envelope.sender.login if envelope.sender else None,
        sender_type=envelope.sender.type if envelope.sender else None,
        change=change,
        digest=digest,
    )


def _validate(model: type[_M], data: dict[str, Any], event: str, delivery: str) -> _M:
    """`data` read as `model`, or DeliveryRefused 400 naming the first bad field."""
    try:
        return model.model_validate(data)
    except PydanticValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "payload"
        raise DeliveryRefused(
            f"{event} delivery {delivery}: {where}: {first['msg'].lower()}", status=400
        ) from None


def _own_branch(pull: _Pull, repository: _Repository) -> str | None:
    """The head branch, if it lives in the repository itself rather than a fork."""
    head_repo = pull.head.repo
    if head_repo is None or head_repo.full_name.lower() != repository.full_name.lower():
        return None
    return pull.head.ref


def _login(user: _User | None) -> str:
    return user.login if user is not None else _GHOST
