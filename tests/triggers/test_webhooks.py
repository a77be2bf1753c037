"""What `verify_hook_delivery` takes and refuses: both signature forms, the timestamp
window at its edges, delivery ids, content types and bodies, table by table.

The end-to-end proofs (a run that starts, replays, the metric, the real HTTP server)
are in tests/slack/test_trigger_webhooks.py; these pin the rules themselves."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
from typing import Any

import pytest

from bot.triggers.webhooks import (
    MAX_DELIVERY_BYTES,
    TIMESTAMP_WINDOW_S,
    HookRefused,
    verify_hook_delivery,
)
from tests.fakes.github_api import github_delivery

SECRET = "issue-hook-secret"
NOW = 1_800_000_000
_ids = itertools.count(1)


def baton_signed(
    body: bytes | str | dict[str, Any],
    secret: str = SECRET,
    *,
    timestamp: int | str | None = None,
    now: float | None = None,
    delivery: str | None = None,
    content_type: str = "application/json",
) -> tuple[dict[str, str], bytes]:
    """Headers and body as a sender signs them in Baton's form: the HMAC-SHA256 of
    `<timestamp>.<body>`; `timestamp` defaults to `now` (or NOW)."""
    raw = body if isinstance(body, bytes) else (body if isinstance(body, str) else json.dumps(body))
    data = raw.encode() if isinstance(raw, str) else raw
    stamp = str(int(now if now is not None else NOW) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), stamp.encode() + b"." + data, hashlib.sha256).hexdigest()
    headers = {
        "Content-Type": content_type,
        "X-Baton-Timestamp": stamp,
        "X-Baton-Signature": f"sha256={digest}",
        "X-Baton-Delivery": delivery or f"delivery-{next(_ids)}",
    }
    return headers, data


def refusal(headers: dict[str, str], body: bytes, *, now: float = NOW) -> tuple[int, str]:
    """The status and result `verify_hook_delivery` refuses with."""
    with pytest.raises(HookRefused) as refused:
        verify_hook_delivery(headers, body, SECRET, now=now)
    return refused.value.status, refused.value.result


# ------------------------------------------------------------------ accepted


def test_baton_form_is_read_with_its_id_payload_and_signature() -> None:
    headers, body = baton_signed({"issue": {"title": "Login fails"}}, delivery="abc-1")
    delivery = verify_hook_delivery(headers, body, SECRET, now=NOW)
    assert delivery.id == "abc-1"
    assert delivery.payload == {"issue": {"title": "Login fails"}}
    assert delivery.event == ""
    assert delivery.signature == headers["X-Baton-Signature"].removeprefix("sha256=")


def test_header_names_are_read_in_any_case() -> None:
    headers, body = baton_signed({"a": 1})
    lowered = {name.lower(): value for name, value in headers.items()}
    upper = {name.upper(): value for name, value in headers.items()}
    assert verify_hook_delivery(lowered, body, SECRET, now=NOW).payload == {"a": 1}
    assert verify_hook_delivery(upper, body, SECRET, now=NOW).payload == {"a": 1}


def test_github_form_is_read_with_its_event() -> None:
    headers, body = github_delivery(SECRET, "issues", {"action": "opened"}, delivery_id="gh-1")
    delivery = verify_hook_delivery(headers, body, SECRET, now=NOW)
    assert (delivery.id, delivery.event) == ("gh-1", "issues")
    assert delivery.payload == {"action": "opened"}


@pytest.mark.parametrize("skew", [-TIMESTAMP_WINDOW_S, 0, TIMESTAMP_WINDOW_S])
def test_a_timestamp_within_five_minutes_either_way_is_taken(skew: int) -> None:
    headers, body = baton_signed({}, timestamp=NOW + skew)
    assert verify_hook_delivery(headers, body, SECRET, now=NOW).payload == {}


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "application/json; charset=utf-8", "Application/JSON"],
)
def test_json_content_types(content_type: str) -> None:
    headers, body = baton_signed({"a": 1}, content_type=content_type)
    assert verify_hook_delivery(headers, body, SECRET, now=NOW).payload == {"a": 1}


def test_a_body_of_exactly_one_mebibyte_is_taken() -> None:
    prefix, suffix = b'{"pad":"', b'"}'
    body = prefix + b"x" * (MAX_DELIVERY_BYTES - len(prefix) - len(suffix)) + suffix
    assert len(body) == MAX_DELIVERY_BYTES
    headers, data = baton_signed(body)
    assert len(verify_hook_delivery(headers, data, SECRET, now=NOW).payload["pad"]) > 1_000_000


# ------------------------------------------------------------------ refused


def test_the_checks_come_in_order_size_first_then_signature() -> None:
    # Over the limit and unsigned: the size is said (nothing is read or computed).
    assert refusal({}, b"x" * (MAX_DELIVERY_BYTES + 1)) == (413, "too_large")
    # Unsigned and not JSON: only the signature is said, never what is wrong with the body.
    assert refusal({"Content-Type": "text/plain"}, b"not json") == (401, "bad_signature")
    # A wrong signature over a malformed timestamp: 401, not 400.
    headers, body = baton_signed({}, timestamp="soon")
    headers["X-Baton-Signature"] = "sha256=" + "0" * 64
    assert refusal(headers, body) == (401, "bad_signature")
    # A wrong signature with no delivery id and the wrong content type: 401.
    headers, body = baton_signed({}, content_type="text/plain", secret="other")
    del headers["X-Baton-Delivery"]
    assert refusal(headers, body) == (401, "bad_signature")


def _without(headers: dict[str, str], *names: str) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k not in names}


def _with(headers: dict[str, str], **values: str) -> dict[str, str]:
    return {**headers, **{k.replace("_", "-"): v for k, v in values.items()}}


def _signatures() -> list[tuple[str, dict[str, str], bytes]]:
    headers, body = baton_signed({"a": 1})
    digest = headers["X-Baton-Signature"].removeprefix("sha256=")
    other, _ = baton_signed({"a": 1}, secret="another-webhook's-secret")
    gh_headers, gh_body = github_delivery(SECRET, "issues", {"a": 1})
    sha1_only = _without(gh_headers, "X-Hub-Signature-256")
    return [
        ("unsigned", _without(headers, "X-Baton-Signature"), body),
        ("no timestamp", _without(headers, "X-Baton-Timestamp"), body),
        ("another secret", _with(headers, X_Baton_Signature=other["X-Baton-Signature"]), body),
        ("another body", headers, body + b" "),
        ("another timestamp", _with(headers, X_Baton_Timestamp=str(NOW + 1)), body),
        ("sha1 named sha256", _with(headers, X_Baton_Signature="sha1=" + digest), body),
        ("no algorithm", _with(headers, X_Baton_Signature=digest), body),
        ("truncated", _with(headers, X_Baton_Signature="sha256=" + digest[:-1]), body),
        ("non-hex", _with(headers, X_Baton_Signature="sha256=" + "z" * 64), body),
        ("non-ASCII", _with(headers, X_Baton_Signature="sha256=" + "é" * 64), body),
        ("huge", _with(headers, X_Baton_Signature="sha256=" + "a" * 8_000), body),
        ("empty", _with(headers, X_Baton_Signature=""), body),
        ("GitHub's SHA-1 alone", sha1_only, gh_body),
        (
            "GitHub form, SHA-1 value",
            _with(gh_headers, X_Hub_Signature_256=gh_headers["X-Hub-Signature"]),
            gh_body,
        ),
        ("GitHub form, another body", gh_headers, gh_body + b"\n"),
        # Both forms sent: Baton's is the one checked, with no fall back to GitHub's.
        (
            "Baton's wrong, GitHub's right",
            _with(gh_headers, X_Baton_Signature="sha256=" + "0" * 64, X_Baton_Timestamp=str(NOW)),
            gh_body,
        ),
    ]


@pytest.mark.parametrize(
    ("headers", "body"),
    [pytest.param(h, b, id=name) for name, h, b in _signatures()],
)
def test_signatures_that_do_not_hold_are_401(headers: dict[str, str], body: bytes) -> None:
    assert refusal(headers, body) == (401, "bad_signature")


@pytest.mark.parametrize(
    ("skew", "expected"),
    [
        (-TIMESTAMP_WINDOW_S - 1, (401, "stale")),
        (TIMESTAMP_WINDOW_S + 1, (401, "stale")),
        (-86_400 * 365, (401, "stale")),
        (86_400 * 365, (401, "stale")),
    ],
)
def test_a_timestamp_more_than_five_minutes_away_is_401(
    skew: int, expected: tuple[int, str]
) -> None:
    headers, body = baton_signed({}, timestamp=NOW + skew)
    assert refusal(headers, body) == expected


@pytest.mark.parametrize(
    "timestamp", ["", "soon", "1.5e9", "-5", " 1800000000", "1" * 13, "\uff11\uff18"]
)
def test_a_signed_timestamp_that_is_not_unix_seconds_is_400(timestamp: str) -> None:
    headers, body = baton_signed({}, timestamp=timestamp)
    assert refusal(headers, body) == (400, "bad_timestamp")


@pytest.mark.parametrize(
    "delivery",
    ["", "a" * 129, "../../etc/passwd", "id with space", "<!channel>", "a`b", "é", "a\tb", "a%2F"],
)
def test_a_delivery_id_with_other_characters_is_400(delivery: str) -> None:
    headers, body = baton_signed({})
    headers["X-Baton-Delivery"] = delivery
    assert refusal(headers, body) == (400, "bad_delivery")


def test_a_delivery_id_is_required_in_either_form() -> None:
    headers, body = baton_signed({})
    assert refusal(_without(headers, "X-Baton-Delivery"), body) == (400, "bad_delivery")
    gh_headers, gh_body = github_delivery(SECRET, "issues", {})
    assert refusal(_without(gh_headers, "X-GitHub-Delivery"), gh_body) == (400, "bad_delivery")


@pytest.mark.parametrize(
    "content_type",
    ["", "text/plain", "application/x-www-form-urlencoded", "application/jsonx", "json"],
)
def test_a_signed_body_that_is_not_sent_as_json_is_415(content_type: str) -> None:
    headers, body = baton_signed({"a": 1}, content_type=content_type)
    assert refusal(headers, body) == (415, "bad_content_type")


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{",
        b"not json",
        b"[1, 2]",
        b'"a string"',
        b"42",
        b"null",
        b'{"a": NaN}',
        b'{"a": Infinity}',
        b"\xff\xfe{}",
        b'{"a": ' + b"9" * 5_000 + b"}",
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    ],
    ids=lambda body: repr(body[:16]),
)
def test_a_signed_body_that_is_not_a_json_object_is_400(body: bytes) -> None:
    headers, data = baton_signed(body)
    assert refusal(headers, data) == (400, "bad_json")


def test_a_secret_is_required() -> None:
    headers, body = baton_signed({})
    with pytest.raises(ValueError, match="secret"):
        verify_hook_delivery(headers, body, "", now=NOW)
