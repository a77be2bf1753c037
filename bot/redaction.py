"""Take credentials out of texts shown to people (Slack threads, the terminal chat).

Error texts are built from exceptions, and exceptions quote what failed: a
database URL with its password, the SQL and bound parameters of a statement, an
HTTP header. Whoever can read the thread must not learn Baton's secrets from
them, so every error text passes through `redact` before it is shown.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

MASK = "***"

# Exact secret values shorter than this are not searched for: replacing every
# "abc" in a text would mangle it. Short passwords inside URLs are still masked
# by the URL pattern.
MIN_SECRET_LENGTH = 6

# scheme://user:password@host — the password runs to the last "@" before the
# host (passwords may hold a raw "@"), never across whitespace, a path or quotes.
_URL_PASSWORD = re.compile(
    r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:/?#@\s'\"]*:)(?P<password>[^\s/?#'\"]*)@"
)
# postgresql://host/db?password=… and similar credentials in query strings.
_QUERY_SECRET = re.compile(
    r"(?P<head>[?&](?:password|passwd|pwd|secret|token|access_token|api_key|apikey|key)=)"
    r"[^&#\s'\"]+",
    re.IGNORECASE,
)
# SQLAlchemy appends the statement and its bound values as their own blocks:
# "[SQL: INSERT …]", "[parameters: ('value', …)]", then "(Background on this error …)".
_SQL_BLOCK = re.compile(
    r"\[SQL: .*?\](?=\s*(?:\[parameters: |\(Background on this error|\n|\Z))", re.DOTALL
)
_PARAMETERS_BLOCK = re.compile(
    r"\[parameters: .*?\](?=\s*(?:\(Background on this error|\n|\Z))", re.DOTALL
)
_SLACK_TOKEN = re.compile(r"\b(?P<head>xox[abprs]|xapp)-[A-Za-z0-9-]+")
_OPENAI_KEY = re.compile(r"\bsk-[A-Za-z0-9_-]{8,}")
_AUTHORIZATION = re.compile(r"\b(?P<head>(?:Bearer|Basic)\s+)[A-Za-z0-9._~+/=-]+", re.IGNORECASE)


def url_password(url: str | None) -> str | None:
    """The password in `scheme://user:password@host/…`, decoded, or None."""
    if not url:
        return None
    try:
        password = urlsplit(url).password
    except ValueError:
        return None
    return unquote(password) if password else None


def _secret_forms(secrets: Iterable[str | None]) -> tuple[str, ...]:
    forms: set[str] = set()
    for secret in secrets:
        if not secret or len(secret) < MIN_SECRET_LENGTH:
            continue
        # A password appears percent-encoded inside URLs and plain elsewhere.
        forms.update({secret, quote(secret, safe="")})
    # Longest first, so a secret that contains another is masked whole.
    return tuple(sorted(forms, key=len, reverse=True))


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """`text` without credentials: URL passwords, SQL and its parameters, tokens, keys.

    Args:
        text: What is about to be shown to a person.
        secrets: Exact values that must never appear (the bot's tokens, keys and
            database password); empty or very short values are ignored.

    Returns:
        The text with each credential replaced by `***` (Slack tokens keep their
        `xoxb-` prefix, SQL blocks become `[SQL hidden]` and `[parameters hidden]`),
        so the reader still sees what kind of thing failed.
    """
    return Redactor(secrets)(text)


@dataclass(frozen=True, slots=True, init=False)
class Redactor:
    """`redact` bound to one set of secret values, built once from the settings."""

    secrets: tuple[str, ...]

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        object.__setattr__(self, "secrets", _secret_forms(secrets))

    def __call__(self, text: str) -> str:
        """Return `text` with every credential masked (see `redact`)."""
        for secret in self.secrets:
            text = text.replace(secret, MASK)
        text = _SQL_BLOCK.sub("[SQL hidden]", text)
        text = _PARAMETERS_BLOCK.sub("[parameters hidden]", text)
        text = _URL_PASSWORD.sub(rf"\g<head>{MASK}@", text)
        text = _QUERY_SECRET.sub(rf"\g<head>{MASK}", text)
        text = _SLACK_TOKEN.sub(rf"\g<head>-{MASK}", text)
        text = _OPENAI_KEY.sub(f"sk-{MASK}", text)
        return _AUTHORIZATION.sub(rf"\g<head>{MASK}", text)
