"""Reading GitHub webhook deliveries: signatures, limits, and payloads in GitHub's shapes."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import pytest

from bot.forge.events import (
    MAX_DELIVERY_BYTES,
    CheckFailed,
    Delivery,
    DeliveryRefused,
    PullClosed,
    PullComment,
    ReviewComment,
    ReviewSubmitted,
    verify_delivery,
)
from tests.fakes.github_api import (
    check_run_payload,
    github_delivery,
    issue_comment_payload,
    pull_closed_payload,
    review_comment_payload,
    review_payload,
)

SECRET = "webhook-secret"
BRANCH = "baton/fix-login"


def deliver(event: str, payload: dict[str, Any], delivery_id: str | None = None) -> Delivery:
    headers, body = github_delivery(SECRET, event, payload, delivery_id)
    return verify_delivery(headers, body, SECRET)


def signed(body: bytes, event: str = "pull_request_review") -> dict[str, str]:
    """Headers for an arbitrary body, signed correctly."""
    headers, _ = github_delivery(SECRET, event, {})
    headers["X-Hub-Signature-256"] = (
        "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    )
    headers["X-Hub-Signature"] = "sha1=" + hmac.new(SECRET.encode(), body, hashlib.sha1).hexdigest()
    return headers


def refused(headers: dict[str, str], body: bytes, secret: str = SECRET) -> DeliveryRefused:
    with pytest.raises(DeliveryRefused) as caught:
        verify_delivery(headers, body, secret)
    return caught.value


# --------------------------------------------------------------------------- events


def test_review_submitted() -> None:
    delivery = deliver(
        "pull_request_review",
        review_payload(number=7, author="alice", body="Rename it.", state="changes_requested"),
        delivery_id="72d3162e-cc78-11e3-81ab-4c9367dc0958",
    )
    assert delivery.id == "72d3162e-cc78-11e3-81ab-4c9367dc0958"
    assert delivery.event == "pull_request_review"
    assert delivery.action == "submitted"
    assert delivery.repo_full_name == "acme/api"
    assert delivery.installation_id == 42
    assert (delivery.sender_login, delivery.sender_type) == ("alice", "User")
    assert delivery.change == ReviewSubmitted(
        pr_number=7,
        branch=BRANCH,
        author="alice",
        body="Rename it.",
        state="changes_requested",
        url="https://github.com/acme/api/pull/7#pullrequestreview-80007",
    )


@pytest.mark.parametrize("state", ["approved", "commented", "APPROVED"])
def test_review_states(state: str) -> None:
    change = deliver("pull_request_review", review_payload(state=state)).change
    assert isinstance(change, ReviewSubmitted)
    assert change.state == state.lower()


def test_a_review_without_a_body_reads_as_empty() -> None:
    change = deliver("pull_request_review", review_payload(body=None, state="approved")).change
    assert isinstance(change, ReviewSubmitted)
    assert change.body == ""


def test_a_reviewer_whose_account_was_deleted_is_ghost() -> None:
    payload = review_payload()
    payload["review"]["user"] = None
    change = deliver("pull_request_review", payload).change
    assert isinstance(change, ReviewSubmitted)
    assert change.author == "ghost"


@pytest.mark.parametrize("head_repo", ["mallory/api", None])
def test_a_forks_branch_is_never_taken_for_batons(head_repo: str | None) -> None:
    for event, payload in (
        ("pull_request_review", review_payload(head_repo=head_repo)),
        ("pull_request_review_comment", review_comment_payload(head_repo=head_repo)),
        ("pull_request", pull_closed_payload(head_repo=head_repo)),
    ):
        change = deliver(event, payload).change
        assert change is not None
        assert change.branch is None


def test_review_comment_created() -> None:
    delivery = deliver(
        "pull_request_review_comment",
        review_comment_payload(number=3, body="Off by one.", path="src/app.py", line=12),
    )
    assert delivery.change == ReviewComment(
        pr_number=3,
        branch=BRANCH,
        author="alice",
        body="Off by one.",
        url="https://github.com/acme/api/pull/3#discussion_r90003",
        path="src/app.py",
        line=12,
    )


def test_a_review_comment_on_a_whole_file_has_no_line() -> None:
    change = deliver("pull_request_review_comment", review_comment_payload(line=None)).change
    assert isinstance(change, ReviewComment)
    assert change.line is None


def test_pull_comment_created() -> None:
    delivery = deliver("issue_comment", issue_comment_payload(number=5, body="Docs too?"))
    assert delivery.change == PullComment(
        pr_number=5,
        author="alice",
        body="Docs too?",
        url="https://github.com/acme/api/pull/5#issuecomment-70005",
        branch=None,
    )


def test_a_comment_on_an_issue_is_ignored() -> None:
    delivery = deliver("issue_comment", issue_comment_payload(on_pull=False))
    assert delivery.change is None
    assert delivery.repo_full_name == "acme/api"


@pytest.mark.parametrize(
    "conclusion", ["failure", "timed_out", "cancelled", "action_required", "startup_failure"]
)
def test_check_failed(conclusion: str) -> None:
    sha = "c0ffee" + "0" * 34
    delivery = deliver(
        "check_run",
        check_run_payload(name="lint", conclusion=conclusion, head_sha=sha, pr_numbers=(4, 9)),
    )
    assert delivery.change == CheckFailed(
        name="lint",
        url="https://github.com/acme/api/runs/30000",
        head_sha=sha,
        conclusion=conclusion,
        pr_numbers=(4, 9),
        branch=BRANCH,
    )
    assert delivery.sender_type == "Bot"


@pytest.mark.parametrize("conclusion", ["success", "neutral", "skipped", "stale", None])
def test_a_check_that_did_not_fail_is_ignored(conclusion: str | None) -> None:
    assert deliver("check_run", check_run_payload(conclusion=conclusion)).change is None


def test_a_failed_check_without_a_github_page_links_to_the_ci() -> None:
    change = deliver("check_run", check_run_payload(html_url=None)).change
    assert isinstance(change, CheckFailed)
    assert change.url == "https://ci.example.com/runs/7"


def test_a_failed_check_on_a_forks_branch_has_no_branch() -> None:
    change = deliver("check_run", check_run_payload(branch=None, pr_numbers=())).change
    assert isinstance(change, CheckFailed)
    assert (change.branch, change.pr_numbers) == (None, ())


@pytest.mark.parametrize("merged", [True, False])
def test_pull_closed(merged: bool) -> None:
    delivery = deliver("pull_request", pull_closed_payload(number=8, merged=merged))
    assert delivery.change == PullClosed(
        pr_number=8, branch=BRANCH, merged=merged, url="https://github.com/acme/api/pull/8"
    )


@pytest.mark.parametrize(
    ("event", "payload"),
    [
        ("ping", {"zen": "Keep it logically awesome.", "hook_id": 1}),
        ("push", {"ref": "refs/heads/main", "repository": {"full_name": "acme/api"}}),
        ("pull_request", {**pull_closed_payload(), "action": "opened"}),
        ("pull_request_review", {**review_payload(), "action": "dismissed"}),
        ("issue_comment", {**issue_comment_payload(), "action": "deleted"}),
        ("check_run", {**check_run_payload(), "action": "created"}),
    ],
)
def test_events_baton_does_not_act_on_have_no_change(event: str, payload: dict[str, Any]) -> None:
    delivery = deliver(event, payload)
    assert delivery.event == event
    assert delivery.change is None


def test_header_names_are_read_in_any_case() -> None:
    headers, body = github_delivery(SECRET, "pull_request_review", review_payload())
    lowered = {name.lower(): value for name, value in headers.items()}
    upper = {name.upper(): value for name, value in headers.items()}
    assert verify_delivery(lowered, body, SECRET).change is not None
    assert verify_delivery(upper, body, SECRET).change is not None


def test_a_sha1_signature_alone_is_checked() -> None:
    headers, body = github_delivery(SECRET, "pull_request_review", review_payload())
    del headers["X-Hub-Signature-256"]
    assert verify_delivery(headers, body, SECRET).change is not None
    headers["X-Hub-Signature"] = "sha1=" + "0" * 40
    assert refused(headers, body).status == 401


# --------------------------------------------------------------------------- refusals


def test_a_wrong_secret_is_401() -> None:
    headers, body = github_delivery("other-secret", "pull_request_review", review_payload())
    error = refused(headers, body)
    assert error.status == 401
    assert "GITHUB_WEBHOOK_SECRET" in str(error)


def test_a_missing_signature_is_401() -> None:
    headers, body = github_delivery(SECRET, "pull_request_review", review_payload())
    del headers["X-Hub-Signature-256"], headers["X-Hub-Signature"]
    assert refused(headers, body).status == 401


def test_a_tampered_body_is_401() -> None:
    headers, body = github_delivery(SECRET, "pull_request_review", review_payload())
    tampered = body.replace(b"Please rename this.", b"Please delete prod.")
    assert tampered != body
    assert refused(headers, tampered).status == 401


@pytest.mark.parametrize("signature", ["sha512=abc", "", "sha256=", "sha256=ü" + "0" * 63])
def test_a_malformed_signature_is_401(signature: str) -> None:
    headers, body = github_delivery(SECRET, "pull_request_review", review_payload())
    headers["X-Hub-Signature-256"] = signature
    assert refused(headers, body).status == 401


def test_an_oversized_body_is_413_before_anything_else() -> None:
    body = b"{" + b" " * MAX_DELIVERY_BYTES + b"}"
    assert refused({}, body).status == 413
    headers = signed(body)
    assert refused(headers, body).status == 413


def test_a_body_of_exactly_the_limit_is_read() -> None:
    payload = review_payload()
    base = len(json.dumps(payload, separators=(",", ":")).encode())
    payload["review"]["body"] = "x" * (MAX_DELIVERY_BYTES - base + len("Please rename this."))
    headers, body = github_delivery(SECRET, "pull_request_review", payload)
    assert len(body) == MAX_DELIVERY_BYTES
    assert verify_delivery(headers, body, SECRET).change is not None


@pytest.mark.parametrize(
    "body", [b"{not json", b"", b"\xff\xfe", b'{"a": 1', b"[" * 100_000 + b"]" * 100_000]
)
def test_a_body_that_is_not_json_is_400(body: bytes) -> None:
    assert refused(signed(body), body).status == 400


@pytest.mark.parametrize("body", [b"[]", b'"text"', b"42", b"null"])
def test_a_payload_that_is_not_an_object_is_400(body: bytes) -> None:
    assert refused(signed(body), body).status == 400


@pytest.mark.parametrize("header", ["X-GitHub-Event", "X-GitHub-Delivery"])
def test_a_missing_github_header_is_400(header: str) -> None:
    headers, body = github_delivery(SECRET, "pull_request_review", review_payload())
    del headers[header]
    assert refused(headers, body).status == 400


@pytest.mark.parametrize(
    ("header", "value"),
    [("X-GitHub-Event", "Pull Request!"), ("X-GitHub-Delivery", "id with spaces")],
)
def test_a_malformed_github_header_is_400(header: str, value: str) -> None:
    headers, body = github_delivery(SECRET, "pull_request_review", review_payload())
    headers[header] = value
    assert refused(headers, body).status == 400


@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "text/plain", None])
def test_a_body_that_is_not_declared_json_is_415(content_type: str | None) -> None:
    headers, body = github_delivery(SECRET, "pull_request_review", review_payload())
    if content_type is None:
        del headers["Content-Type"]
    else:
        headers["Content-Type"] = content_type
    assert refused(headers, body).status == 415


def test_a_json_content_type_with_charset_is_read() -> None:
    headers, body = github_delivery(SECRET, "pull_request_review", review_payload())
    headers["Content-Type"] = "application/json; charset=utf-8"
    assert verify_delivery(headers, body, SECRET).change is not None
    headers["Content-Type"] = "application/json; charset=no-such-charset"
    assert refused(headers, body).status == 400


def test_an_empty_secret_is_a_programming_error() -> None:
    headers, body = github_delivery("", "pull_request_review", review_payload())
    with pytest.raises(ValueError, match="secret"):
        verify_delivery(headers, body, "")


def _set(payload: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    target = payload
    *parents, last = path.split(".")
    for key in parents:
        target = target[key]
    target[last] = value
    return payload


def _drop(payload: dict[str, Any], path: str) -> dict[str, Any]:
    target = payload
    *parents, last = path.split(".")
    for key in parents:
        target = target[key]
    del target[last]
    return payload


HOSTILE: list[tuple[str, dict[str, Any]]] = [
    ("pull_request_review", _set(review_payload(), "pull_request", "not an object")),
    ("pull_request_review", _set(review_payload(), "pull_request", None)),
    ("pull_request_review", _set(review_payload(), "pull_request.number", "7")),
    ("pull_request_review", _set(review_payload(), "pull_request.number", 7.0)),
    ("pull_request_review", _set(review_payload(), "pull_request.number", True)),
    ("pull_request_review", _set(review_payload(), "pull_request.number", 10**30)),
    ("pull_request_review", _set(review_payload(), "pull_request.number", -1)),
    ("pull_request_review", _set(review_payload(), "pull_request.head.ref", ["baton/x"])),
    ("pull_request_review", _set(review_payload(), "pull_request.head.sha", "not-a-sha")),
    ("pull_request_review", _set(review_payload(), "review.state", "pending")),
    ("pull_request_review", _set(review_payload(), "review.state", 1)),
    ("pull_request_review", _set(review_payload(), "review.body", {"text": "hi"})),
    ("pull_request_review", _drop(review_payload(), "review")),
    ("pull_request_review", _drop(review_payload(), "review.html_url")),
    ("pull_request_review", _drop(review_payload(), "repository")),
    ("pull_request_review", _set(review_payload(), "repository", "acme/api")),
    ("pull_request_review", _set(review_payload(), "sender", [])),
    ("pull_request_review", _set(review_payload(), "action", 1)),
    ("pull_request_review_comment", _set(review_comment_payload(), "comment.line", -4)),
    ("pull_request_review_comment", _set(review_comment_payload(), "comment.body", 5)),
    ("pull_request_review_comment", _drop(review_comment_payload(), "comment.path")),
    ("issue_comment", _set(issue_comment_payload(), "issue.pull_request", "yes")),
    ("issue_comment", _set(issue_comment_payload(), "issue.number", "5")),
    ("issue_comment", _drop(issue_comment_payload(), "comment")),
    ("check_run", _set(check_run_payload(), "check_run.pull_requests", {"number": 1})),
    ("check_run", _set(check_run_payload(), "check_run.pull_requests", [{"number": "1"}])),
    ("check_run", _set(check_run_payload(), "check_run.conclusion", ["failure"])),
    ("check_run", _drop(check_run_payload(), "check_run.head_sha")),
    ("check_run", _set(check_run_payload(), "check_run.check_suite", "suite")),
    ("pull_request", _set(pull_closed_payload(), "pull_request.merged", "true")),
    ("pull_request", _drop(pull_closed_payload(), "pull_request.merged")),
    ("push", {"repository": {"full_name": 1}}),
    ("push", {"installation": {"id": "42"}}),
]


@pytest.mark.parametrize(("event", "payload"), HOSTILE)
def test_a_payload_of_the_wrong_shape_is_400(event: str, payload: dict[str, Any]) -> None:
    headers, body = github_delivery(SECRET, event, payload)
    error = refused(headers, body)
    assert error.status == 400
    assert event in str(error)


def test_a_number_too_long_for_python_is_400() -> None:
    body = b'{"action":"submitted","pull_request":{"number":' + b"9" * 5000 + b"}}"
    assert refused(signed(body), body).status == 400


def test_a_refusal_does_not_repeat_the_payload() -> None:
    payload = _set(review_payload(), "review.state", "evil-<script>-value")
    headers, body = github_delivery(SECRET, "pull_request_review", payload)
    error = refused(headers, body)
    assert "review.state" in str(error)
    assert "evil" not in str(error)
