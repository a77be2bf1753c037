"""Texts shown to people lose their credentials and keep the rest."""

from __future__ import annotations

import pytest

from bot.errors import ConfigError
from bot.redaction import Redactor, redact, url_password
from bot.store.database import async_url

SQLALCHEMY_ERROR = """\
(sqlalchemy.dialects.postgresql.asyncpg.IntegrityError) <class 'asyncpg.exceptions.UniqueViolationError'>: duplicate key value violates unique constraint "sessions_key"
[SQL: INSERT INTO sessions (key, token) VALUES ($1::VARCHAR, $2::VARCHAR)]
[parameters: ('slack:C1:1.2', 'hunter2-param')]
(Background on this error at: https://sqlalche.me/e/20/gkpj)"""  # noqa: E501

MULTILINE_SQL_ERROR = """\
(sqlite3.OperationalError) database is locked
[SQL: SELECT sessions.id, sessions.key
FROM sessions
WHERE sessions.key = ? AND sessions.secret = 'inline-secret']
[parameters: [('a', 'batch-secret-1'), ('b', 'batch-secret-2')]]
(Background on this error at: https://sqlalche.me/e/20/e3q8)"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # URL passwords, whatever the scheme and driver.
        (
            "cannot connect to postgresql://baton:hunter2@db.internal:5432/baton",
            "cannot connect to postgresql://baton:***@db.internal:5432/baton",
        ),
        (
            "postgresql+asyncpg://baton:s3cr%40t@db/baton refused",
            "postgresql+asyncpg://baton:***@db/baton refused",
        ),
        (
            "Error 111 connecting to redis://:r3dis@cache:6379/0.",
            "Error 111 connecting to redis://:***@cache:6379/0.",
        ),
        (
            "broker amqp://guest:guest@mq:5672// is down",
            "broker amqp://guest:***@mq:5672// is down",
        ),
        ("a raw @ in it: mysql://u:p@ss@h/db", "a raw @ in it: mysql://u:***@h/db"),
        ("quoted 'postgresql://u:pw@h/db'", "quoted 'postgresql://u:***@h/db'"),
        (
            "https://h/x?user=a&password=pw1&sslmode=require",
            "https://h/x?user=a&password=***&sslmode=require",
        ),
        # What is not a credential stays.
        (
            "see https://example.com:8443/path@v2 and http://user@host/",
            "see https://example.com:8443/path@v2 and http://user@host/",
        ),
        ("HTTP 401: invalid api key", "HTTP 401: invalid api key"),
        ("ratio 3:2@noon, a:b", "ratio 3:2@noon, a:b"),
        # SQLAlchemy's statement and bound parameters go; the first line stays.
        (
            SQLALCHEMY_ERROR,
            SQLALCHEMY_ERROR.splitlines()[0]
            + "\n[SQL hidden]\n[parameters hidden]\n"
            + "(Background on this error at: https://sqlalche.me/e/20/gkpj)",
        ),
        (
            MULTILINE_SQL_ERROR,
            "(sqlite3.OperationalError) database is locked\n[SQL hidden]\n[parameters hidden]\n"
            "(Background on this error at: https://sqlalche.me/e/20/e3q8)",
        ),
        (
            "crashed: IntegrityError: x [SQL: UPDATE t SET v=?] [parameters: ('p1',)]",
            "crashed: IntegrityError: x [SQL hidden] [parameters hidden]",
        ),
        # Tokens and keys by their shape.
        ("token xoxb-1234-5678-AbCdEf rejected", "token xoxb-*** rejected"),
        ("xoxp-1-2-3 xoxa-2-x xoxr-9 xoxs-7", "xoxp-*** xoxa-*** xoxr-*** xoxs-***"),
        ("app token xapp-1-A0B1-123-abcdef", "app token xapp-***"),
        ("key sk-proj-AbCdEf0123456789_xyz is wrong", "key sk-*** is wrong"),
        ("Authorization: Bearer eyJhbGciOi.payload.sig", "Authorization: Bearer ***"),
        ("authorization: basic dXNlcjpwYXNz", "authorization: basic ***"),
        ("the sk-learn package", "the sk-learn package"),
    ],
)
def test_redact_masks_credentials_and_keeps_the_message(text: str, expected: str) -> None:
    redacted = redact(text)
    assert redacted == expected
    for secret in ("hunter2", "s3cr", "r3dis", "p@ss", "pw1", "hunter2-param", "inline-secret",
                   "batch-secret", "AbCdEf", "eyJhbGciOi", "dXNlcjpwYXNz"):  # fmt: skip
        assert secret not in redacted


@pytest.mark.parametrize(
    ("secrets", "text", "expected"),
    [
        (["opaque-signing-secret"], "bad signature opaque-signing-secret!", "bad signature ***!"),
        # Percent-encoded in a URL, plain elsewhere: both forms go.
        (["p@ss word"], "p@ss word or p%40ss%20word", "*** or ***"),
        # A secret containing another is masked whole.
        (["abcdef", "abcdefghij"], "abcdefghij abcdef", "*** ***"),
        # Empty, missing and very short values would mangle the text: ignored.
        ([None, "", "abc"], "abc abc", "abc abc"),
        # Keys of unknown shape (a proxy's key, a test key) by value.
        (["sk-test"], "Incorrect API key provided: sk-test", "Incorrect API key provided: ***"),
    ],
)
def test_redact_masks_the_exact_secrets_it_is_given(
    secrets: list[str | None], text: str, expected: str
) -> None:
    assert redact(text, secrets) == expected
    assert Redactor(secrets)(text) == expected


@pytest.mark.parametrize(
    ("url", "password"),
    [
        ("postgresql://baton:hunter2@db/baton", "hunter2"),
        ("postgresql+asyncpg://baton:p%40ss@db/baton", "p@ss"),
        ("redis://:r3dis@cache:6379/0", "r3dis"),
        ("sqlite:////var/lib/baton.db", None),
        ("postgresql://baton@db/baton", None),
        (None, None),
        ("", None),
    ],
)
def test_url_password(url: str | None, password: str | None) -> None:
    assert url_password(url) == password


@pytest.mark.parametrize(
    "url", ["postgresql://u:hunter2@h:notaport/db", "postgresql//u:hunter2@h/db xoxb-1-2"]
)
def test_a_bad_database_url_is_refused_without_its_password(url: str) -> None:
    with pytest.raises(ConfigError, match="DATABASE_URL") as caught:
        async_url(url)
    assert "hunter2" not in str(caught.value)
    assert "xoxb-1" not in str(caught.value)
