"""`baton chat` shows errors without credentials, and a failed turn does not end the chat."""

from __future__ import annotations

import io
from pathlib import Path

from sqlalchemy import text

from bot.app import build_baton
from bot.chat import TerminalChat
from bot.store import SessionKey
from tests.conftest import make_settings
from tests.fakes.openai_api import ErrorReply, FakeOpenAI, Reply

DB_PASSWORD = "hunter2-db-password"
LEAKY_MESSAGE = (
    f"upstream postgresql://baton:{DB_PASSWORD}@db.internal/llm refused; "
    "Authorization: Bearer tok-0123456789abcdef"
)


async def chat_once(
    tmp_path: Path, fake_llm: FakeOpenAI, lines: str, *, refuse_messages: bool = False
) -> str:
    baton = await build_baton(
        make_settings(tmp_path, fake_llm.url, openai_api_key="sk-configured-secret")
    )
    out = io.StringIO()
    try:
        if refuse_messages:
            # The history still reads, but writing the turn fails inside SQLAlchemy,
            # whose error quotes the INSERT and its parameters (the person's text).
            async with baton.database.engine.begin() as connection:
                await connection.execute(
                    text(
                        "CREATE TRIGGER refuse BEFORE INSERT ON messages "
                        "BEGIN SELECT RAISE(ABORT, 'the disk is full'); END"
                    )
                )
        chat = TerminalChat(baton, SessionKey.terminal("t"), stdin=io.StringIO(lines), stdout=out)
        await chat.loop()
    finally:
        await baton.close()
    return out.getvalue()


async def test_a_model_error_is_shown_without_credentials(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.responder = lambda request: ErrorReply(
        status=400, message=f"{LEAKY_MESSAGE}; key sk-configured-secret"
    )
    shown = await chat_once(tmp_path, fake_llm, "hello\n")
    assert "HTTP 400" in shown and "postgresql://baton:***@db.internal/llm" in shown
    for secret in (DB_PASSWORD, "tok-0123456789abcdef", "sk-configured-secret"):
        assert secret not in shown


async def test_a_database_error_is_shown_redacted_and_the_chat_goes_on(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(Reply(text="unused"))
    shown = await chat_once(
        tmp_path,
        fake_llm,
        f"use postgresql://admin:{DB_PASSWORD}@prod/db\n/help\n",
        refuse_messages=True,
    )
    assert "✗ Something went wrong: IntegrityError" in shown
    assert "the disk is full" in shown
    assert "[SQL hidden]" in shown and "[parameters hidden]" in shown
    assert DB_PASSWORD not in shown and "INSERT INTO" not in shown
    assert "/tasks" in shown.split("Something went wrong", 1)[1]  # /help still answered
