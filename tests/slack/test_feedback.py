"""👍/👎 on answers, end to end: signed clicks to the real Bolt app, the fake Slack, App Home.

Clicks are attacks as much as feedback: a value naming another channel's run, values
that are not Baton's, replays. None of them may count, or raise.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import parse_qs, urlencode

import pytest

from bot.slack.answers import FOOTER_TEXT, post_answer
from bot.slack.blocks import FEEDBACK_ACTION, feedback_blocks, home_view, parse_feedback
from bot.store import SessionKey, SessionStore
from bot.store.feedback import FeedbackCounts, FeedbackStore
from bot.store.runs import RunStore
from tests.slack.harness import ALICE, BOB, SlackHarness, click_body, until

CAROL = "UCAROL"


async def start_run(harness: SlackHarness, run_id: str, *, channel: str, user: str) -> None:
    """A run as the threads record it: in `channel`, started by `user`."""
    session = await SessionStore(harness.baton.database).get_or_create(
        SessionKey.slack_thread(team_id="T0001", channel_id=channel, thread_ts="1.1")
    )
    assert session.id is not None
    await RunStore(harness.baton.database).start(
        run_id=run_id, owner=harness.baton.instances.id, session_id=session.id,
        channel_id=channel, thread_ts="1.1", user_id=user,
    )  # fmt: skip


def store(harness: SlackHarness) -> FeedbackStore:
    return FeedbackStore(harness.baton.database)


async def rate(harness: SlackHarness, value: str, *, user: str, channel: str = "C1") -> None:
    """Click a feedback button in `channel` and wait until the click was handled."""
    status = await harness.click(FEEDBACK_ACTION, value, user=user, channel=channel,
                                 message_ts="1.2")  # fmt: skip
    assert status == 200
    await harness.settle()


async def post_raw_click(harness: SlackHarness, edit: Any) -> None:
    """A signed click whose payload `edit` changed first (to drop or mangle fields)."""
    body = click_body(FEEDBACK_ACTION, "good:r1", user=BOB, message_ts="1.2")
    payload = json.loads(parse_qs(body)["payload"][0])
    edit(payload)
    raw = urlencode({"payload": json.dumps(payload)})
    response = await harness.post(raw, content_type="application/x-www-form-urlencoded")
    assert response.status == 200
    await harness.settle()


def thanks(harness: SlackHarness) -> list[dict[str, Any]]:
    return [e for e in harness.slack.ephemerals if e["text"].startswith("Thanks — noted")]


# ------------------------------------------------------------------------ blocks


def test_feedback_blocks_are_slacks_feedback_buttons() -> None:
    [block] = feedback_blocks("abc123")
    assert block["type"] == "context_actions"
    [element] = block["elements"]
    assert element["type"] == "feedback_buttons"
    assert element["action_id"] == FEEDBACK_ACTION == "answer_feedback"
    assert element["positive_button"]["value"] == "good:abc123"
    assert element["negative_button"]["value"] == "bad:abc123"
    assert element["positive_button"]["text"]["type"] == "plain_text"
    assert parse_feedback(element["negative_button"]["value"]) == ("bad", "abc123")


@pytest.mark.parametrize("run_id", ["", "a:b", "x" * 65, "a b", "<!channel>"])
def test_feedback_blocks_refuse_what_could_not_be_read_back(run_id: str) -> None:
    with pytest.raises(ValueError, match="run id"):
        feedback_blocks(run_id)


@pytest.mark.parametrize(
    "value",
    ["good:", "meh:run", ":r1", "good", "good:r1:x", "GOOD:r1", "good:r1\n", " good:r1",
     "good:" + "x" * 10_000, None, 7, ["good:r1"]],
)  # fmt: skip
def test_parse_feedback_is_strict(value: object) -> None:
    assert parse_feedback(value) is None


def test_home_shows_the_ratings_only_when_there_are_some() -> None:
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    shown = json.dumps(
        home_view(running=0, done=0, tasks=[], now=now, feedback="Answers rated 👍 2 · 👎 1"),
        ensure_ascii=False,
    )
    assert "Answers rated 👍 2 · 👎 1" in shown
    assert "Answers rated" not in json.dumps(home_view(running=0, done=0, tasks=[], now=now))


# ------------------------------------------------------------------------ clicks


async def test_a_click_is_stored_with_the_run_and_thanked(harness: SlackHarness) -> None:
    await start_run(harness, "r1", channel="C1", user=ALICE)
    await rate(harness, "good:r1", user=BOB)
    assert await store(harness).get("r1", user_id=BOB) == "good"
    [ephemeral] = thanks(harness)
    assert (ephemeral["channel"], ephemeral["user"]) == ("C1", BOB)
    assert ephemeral["text"] == "Thanks — noted 👍"


async def test_a_click_naming_another_channels_run_counts_nothing(
    harness: SlackHarness,
) -> None:
    await start_run(harness, "r1", channel="C1", user=ALICE)
    await start_run(harness, "r2", channel="C2", user=ALICE)
    # A button value carried from C2 into a message in C1, and a run that does not exist.
    await rate(harness, "bad:r2", user=BOB, channel="C1")
    await rate(harness, "bad:nosuchrun", user=BOB, channel="C1")
    assert await store(harness).counts() == FeedbackCounts()
    assert not thanks(harness)


@pytest.mark.parametrize("value", ["good:", "meh:r1", "good:r1:x", "good:" + "r" * 10_240, ""])
async def test_a_malformed_value_is_ignored_and_logged(
    harness: SlackHarness, value: str, caplog: pytest.LogCaptureFixture
) -> None:
    await start_run(harness, "r1", channel="C1", user=ALICE)
    with caplog.at_level(logging.INFO, logger="bot.slack.listeners"):
        await rate(harness, value, user=BOB)
    assert await store(harness).counts() == FeedbackCounts()
    assert not thanks(harness)
    assert "ignored a feedback click" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize(
    "edit",
    [
        lambda p: p["actions"][0].pop("value"),
        lambda p: p["actions"][0].update(value={"good": "r1"}),
        lambda p: (p.pop("channel"), p["container"].pop("channel_id")),
    ],
    ids=["missing value", "value not a string", "no channel"],
)
async def test_a_click_missing_its_parts_is_ignored(
    harness: SlackHarness, edit: Any, caplog: pytest.LogCaptureFixture
) -> None:
    await start_run(harness, "r1", channel="C1", user=ALICE)
    await post_raw_click(harness, edit)
    assert await store(harness).counts() == FeedbackCounts()
    assert not thanks(harness)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_replayed_click_counts_once(harness: SlackHarness) -> None:
    await start_run(harness, "r1", channel="C1", user=ALICE)
    for _ in range(3):
        await rate(harness, "good:r1", user=BOB)
    assert await store(harness).counts() == FeedbackCounts(good=1, bad=0)


async def test_two_people_make_two_ratings(harness: SlackHarness) -> None:
    await start_run(harness, "r1", channel="C1", user=ALICE)
    await rate(harness, "good:r1", user=BOB)
    await rate(harness, "bad:r1", user=CAROL)
    assert await store(harness).counts() == FeedbackCounts(good=1, bad=1)
    assert [e["user"] for e in thanks(harness)] == [BOB, CAROL]
    assert thanks(harness)[1]["text"] == "Thanks — noted 👎"


async def test_changing_ones_mind_keeps_the_latest(harness: SlackHarness) -> None:
    await start_run(harness, "r1", channel="C1", user=ALICE)
    await rate(harness, "good:r1", user=BOB)
    await rate(harness, "bad:r1", user=BOB)
    assert await store(harness).get("r1", user_id=BOB) == "bad"
    assert await store(harness).counts() == FeedbackCounts(good=0, bad=1)


async def test_app_home_counts_the_ratings_of_the_viewers_runs(harness: SlackHarness) -> None:
    await start_run(harness, "r1", channel="C1", user=ALICE)
    await start_run(harness, "r2", channel="C2", user=ALICE)
    await rate(harness, "good:r1", user=BOB)
    await rate(harness, "good:r1", user=CAROL)
    await rate(harness, "bad:r2", user=BOB, channel="C2")

    async def home(user: str) -> str:
        before = len(harness.slack.calls_to("views.publish"))
        event = {"type": "app_home_opened", "user": user, "channel": "D1", "tab": "home",
                 "event_ts": "1.1"}  # fmt: skip
        assert (await harness.send_event(event)).status == 200
        await until(lambda: len(harness.slack.calls_to("views.publish")) > before)
        call = harness.slack.calls_to("views.publish")[-1]
        assert call.params["user_id"] == user
        return json.dumps(call.params["view"], ensure_ascii=False)

    assert "Answers rated 👍 2 · 👎 1" in await home(ALICE)
    assert "Answers rated" not in await home(BOB)  # Bob started no run


# ------------------------------------------------------------------------ footer


def footer_of(message: dict[str, Any]) -> bool:
    return any(b.get("type") == "context_actions" for b in message.get("blocks") or ())


async def answer(harness: SlackHarness, markdown: str) -> list[dict[str, Any]]:
    """Post an answer with feedback buttons to a new thread; the bot's messages there."""
    harness.slack.add_message("C1", "question", ALICE, ts="5.5")
    await post_answer(
        harness.surface.threads.client, channel="C1", thread_ts="5.5", markdown=markdown,
        footer=feedback_blocks("r1"),
    )  # fmt: skip
    return [m for m in harness.thread("C1", "5.5") if m.get("user") != ALICE]


async def test_the_footer_ends_a_short_answer(harness: SlackHarness) -> None:
    [message] = await answer(harness, "All good.")
    assert footer_of(message) and message["blocks"][0]["type"] == "markdown"


async def test_the_footer_goes_on_the_last_message_of_a_split_answer(
    harness: SlackHarness,
) -> None:
    paragraph = "word " * 1_000
    messages = await answer(harness, "\n\n".join([paragraph] * 5))  # ~25,000 characters
    assert len(messages) >= 2
    assert [footer_of(m) for m in messages] == [False] * (len(messages) - 1) + [True]


async def test_the_footer_follows_a_file_answer(harness: SlackHarness) -> None:
    paragraph = "word " * 1_000
    messages = await answer(harness, "\n\n".join([paragraph] * 12))  # ~60,000: a file
    assert harness.slack.files
    preview, shared, last = messages  # the file's share is a message of the thread too
    assert not footer_of(preview) and shared.get("files")
    assert footer_of(last) and last["text"] == FOOTER_TEXT
    methods = [c.method for c in harness.slack.calls if not c.failed]
    upload = methods.index("files.completeUploadExternal")
    assert methods.index("chat.postMessage", upload) > upload  # after the file


async def test_a_refused_footer_costs_only_the_footer(harness: SlackHarness) -> None:
    # Slack refuses the answer with its buttons, then the buttons alone.
    harness.slack.fail_next("chat.postMessage", error="invalid_blocks")
    messages = await answer(harness, "The whole answer.")
    assert [m["text"] for m in messages] == ["The whole answer.", FOOTER_TEXT]
    assert footer_of(messages[1]) and not footer_of(messages[0])

    # Refused with and without its buttons: the answer goes as plain text, whole.
    harness.slack.fail_next("chat.postMessage", error="invalid_blocks", times=2)
    harness.slack.add_message("C1", "again", ALICE, ts="6.6")
    await post_answer(
        harness.surface.threads.client, channel="C1", thread_ts="6.6",
        markdown="Still whole.", footer=feedback_blocks("r1"),
    )  # fmt: skip
    messages = [m for m in harness.thread("C1", "6.6") if m.get("user") != ALICE]
    assert [m["text"] for m in messages] == ["Still whole.", FOOTER_TEXT]
    assert not messages[0].get("blocks") and footer_of(messages[1])


async def test_slack_refusing_the_buttons_everywhere_still_gets_the_answer_through(
    harness: SlackHarness,
) -> None:
    builtin = harness.slack._chat_post_message  # the fake's own chat.postMessage

    def no_buttons(params: dict[str, Any]) -> dict[str, Any]:
        if any(b.get("type") == "context_actions" for b in params.get("blocks") or ()):
            return {"ok": False, "error": "invalid_blocks"}
        return builtin(params)

    harness.slack.register("chat.postMessage", no_buttons)
    messages = await answer(harness, "The answer, without buttons.")
    assert [m["text"] for m in messages] == ["The answer, without buttons."]
    assert messages[0]["blocks"][0]["type"] == "markdown"
