"""End to end: errors reach the thread, the /tasks log and the terminal without credentials."""

from __future__ import annotations

import json

from sqlalchemy import text

from tests.fakes.openai_api import ErrorReply, RecordedRequest, Reply, ToolCallSpec
from tests.slack.harness import ALICE, MAIN_MARK, SIGNING_SECRET, SlackHarness, until

DB_PASSWORD = "hunter2-db-password"
PROXY_URL = f"postgresql+asyncpg://baton:{DB_PASSWORD}@db.internal:5432/llm"
# What an upstream proxy in front of the model might answer with: its own
# connection string and the header it was sent.
LEAKY_MESSAGE = f"upstream {PROXY_URL} refused; Authorization: Bearer tok-0123456789abcdef"


def everything_posted(harness: SlackHarness, ts: str) -> str:
    return json.dumps(harness.thread("C1", ts), ensure_ascii=False)


def assert_no_credentials(rendered: str) -> None:
    for secret in (DB_PASSWORD, "tok-0123456789abcdef", "xoxb-test", SIGNING_SECRET):
        assert secret not in rendered


async def test_a_model_error_quoting_a_url_with_a_password_is_posted_without_it(
    harness: SlackHarness,
) -> None:
    harness.llm.responder = lambda request: ErrorReply(status=400, message=LEAKY_MESSAGE)
    ts = await harness.mention("hello?")
    await harness.settle()
    rendered = everything_posted(harness, ts)
    assert "HTTP 400" in rendered  # the error is still reported, and says what failed
    assert "postgresql+asyncpg://baton:***@db.internal:5432/llm" in rendered
    assert "Bearer ***" in rendered
    assert_no_credentials(rendered)


async def test_a_database_error_is_posted_without_its_sql_and_parameters(
    harness: SlackHarness,
) -> None:
    harness.llm.script(Reply(text="never reached"))
    # The message history table is gone (a botched migration, a wiped volume):
    # writing the turn fails with SQLAlchemy's full error text.
    async with harness.baton.database.engine.begin() as connection:
        await connection.execute(text("DROP TABLE messages"))
    ts = await harness.mention(f"connect with postgresql://admin:{DB_PASSWORD}@prod/db")
    await harness.settle()
    bot_posts = [m for m in harness.thread("C1", ts) if m.get("user") != ALICE]
    rendered = json.dumps(bot_posts, ensure_ascii=False)
    assert "Something went wrong" in rendered
    # SQLite's words, or PostgreSQL's: what went wrong is said, only its SQL is hidden.
    assert "no such table: messages" in rendered or (
        'relation \\"messages\\" does not exist' in rendered
    )
    assert "[parameters hidden]" in rendered
    assert "INSERT INTO" not in rendered
    assert_no_credentials(rendered)


async def test_a_failed_background_task_is_posted_and_logged_without_credentials(
    harness: SlackHarness,
) -> None:
    main_replies = [
        Reply(
            tool_calls=[
                ToolCallSpec(
                    "task",
                    {"subagent_type": "explore", "prompt": "check the proxy",
                     "background": True, "description": "Proxy check"},
                )
            ]
        ),
        Reply(text="Started a task."),
    ]  # fmt: skip

    def respond(request: RecordedRequest) -> Reply | ErrorReply:
        if str(request.messages[0]["content"]).startswith(MAIN_MARK):
            return main_replies.pop(0)
        return ErrorReply(status=400, message=LEAKY_MESSAGE)

    harness.llm.responder = respond
    ts = await harness.mention("check the proxy in the background")
    await harness.settle()
    await until(lambda: "task-explore-1" in everything_posted(harness, ts))
    await until(lambda: "failed" in everything_posted(harness, ts).lower())
    rendered = everything_posted(harness, ts)
    assert "baton:***@db.internal" in rendered
    assert_no_credentials(rendered)

    # The /tasks panel's View log shows the child's log and error, redacted too.
    assert await harness.click("baton_view_log", "task-explore-1", user=ALICE) == 200
    await until(lambda: bool(harness.slack.calls_to("views.open")))
    view = json.dumps(harness.slack.calls_to("views.open")[0].params["view"], ensure_ascii=False)
    assert "HTTP 400" in view
    assert_no_credentials(view)
