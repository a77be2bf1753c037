"""Attacks on thread turns, the stored inbox, steering and Retry, through the real Bolt app.

Each test plays a hostile outsider or a curious member of the workspace and checks
the safe outcome: Retry runs only an interrupted run's question, once, in its own
thread, for someone who may start runs; no message of one thread (channel, DM, team)
reaches another's turn; talk from a refused person never reaches the model; odd or
duplicated events crash nothing, are not answered 500 (Slack would retry them for
ever) and start at most one run.

What another replica does is done through the database as in
tests/slack/test_thread_turns.py: its rows under an instance id that is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.config import AccessConfig, LimitsConfig
from bot.slack.blocks import CANCEL_RUN, RETRY_RUN
from bot.slack.server import EVENTS_PATH
from bot.store import SessionKey
from bot.store.thread_inbox import (
    DONE,
    INTERRUPTED,
    OFFERED,
    REFUSED,
    RETRIED,
    RETRYABLE,
    TAKEN,
    Inbound,
)
from tests.fakes.openai_api import RecordedRequest, Reply, Usage
from tests.slack.harness import (
    ALICE,
    BOB,
    BOT,
    TEAM,
    SlackHarness,
    next_ts,
    sign,
    start_harness,
    until,
)

GONE = "replica-that-died"
CAROL = "UCAROL"
OTHER_TEAM = "T0OTHER"


@contextlib.asynccontextmanager
async def harness_with(tmp_path: Path, **overrides: Any) -> AsyncIterator[SlackHarness]:
    async for value in start_harness(tmp_path, **overrides):
        value.slack.add_user(CAROL, "carol", real_name="Carol", display_name="Carol")
        yield value


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[SlackHarness]:
    async with harness_with(tmp_path) as value:
        yield value


# --------------------------------------------------------------------- helpers


def thread_key(thread_ts: str, channel: str = "C1", team: str = TEAM) -> SessionKey:
    return SessionKey.slack_thread(team_id=team, channel_id=channel, thread_ts=thread_ts)


def user_texts(request: RecordedRequest) -> list[str]:
    return [str(m.get("content")) for m in request.messages if m["role"] == "user"]


def everything_asked(harness: SlackHarness) -> str:
    """Every user message of every model request, as one string."""
    return "\n".join(t for r in harness.llm.requests for t in user_texts(r))


def ephemerals_to(harness: SlackHarness, user: str) -> list[str]:
    return [e["text"] for e in harness.slack.ephemerals if e["user"] == user]


async def interrupted_run(
    harness: SlackHarness, question: str, *, channel: str = "C1", user: str = ALICE,
    is_dm: bool = False,
) -> str:  # fmt: skip
    """A run a replica now gone was running (its question taken), closed by tidy() with
    a Retry button. Returns the run id."""
    ts = next_ts()
    harness.slack.add_message(channel, f"<@{BOT}> {question}", user, ts=ts)
    key = SessionKey.slack_thread(team_id=TEAM, channel_id=channel, thread_ts="dm" if is_dm else ts)
    threads = harness.surface.turns
    session = await harness.baton.conversations.store.get_or_create(key)
    run_id = f"dead{ts.replace('.', '')[-8:]}"
    await threads.run_store.start(
        run_id=run_id, owner=GONE, session_id=session.id, channel_id=channel, thread_ts=ts,
        user_id=user,
    )  # fmt: skip
    await threads.inbox.receive(
        Inbound(
            session_key=key.key,
            channel_id=channel,
            thread_ts=ts,
            ts=ts,
            user_id=user,
            text=f"<@{BOT}> {question}",
            team_id=TEAM,
            is_dm=is_dm,
        ),
        holder=GONE,
        state=TAKEN,
        run_id=run_id,
    )
    await harness.surface.tidy(prune=False)
    record = await threads.run_store.get(run_id)
    assert record is not None
    return run_id


async def states_of(harness: SlackHarness, run_id: str) -> set[str]:
    inbox = harness.surface.turns.inbox
    every = (DONE, INTERRUPTED, OFFERED, RETRIED, TAKEN, REFUSED, "pending", "dropped", "new")
    return {m.state for m in await inbox.of_run(run_id, states=every)}


def gate_first(harness: SlackHarness, final: str = "FINAL") -> asyncio.Event:
    """The first model call waits for the returned event; every call answers `final`."""
    gate = asyncio.Event()
    first = True

    async def respond(request: RecordedRequest) -> Reply:
        nonlocal first
        if first:
            first = False
            await gate.wait()
        return Reply(text=final)

    harness.llm.responder = respond
    return gate


async def post_payload(
    harness: SlackHarness, event: dict[str, Any], *, team_id: str = TEAM,
    event_id: str | None = None,
) -> int:  # fmt: skip
    """An event_callback with any wrapper team; the HTTP status Baton answered."""
    payload = {
        "token": "legacy", "team_id": team_id, "api_app_id": "ABATON", "event": event,
        "type": "event_callback", "event_id": event_id or f"Ev{next_ts()}",
        "event_time": int(time.time()),
        "authorizations": [{"team_id": team_id, "user_id": BOT, "is_bot": True}],
    }  # fmt: skip
    response = await harness.post(json.dumps(payload), content_type="application/json")
    return response.status


async def still_answers(harness: SlackHarness) -> None:
    """The bot still answers a plain mention afterwards (nothing crashed)."""
    harness.llm.responder = None
    harness.llm.script(Reply(text="STILL-ALIVE"))
    ts = await harness.mention("are you still there?")
    await until(lambda: "STILL-ALIVE" in " ".join(harness.bot_texts("C1", ts)))


# ----------------------------------------------------------------------- Retry


async def test_retry_by_someone_the_policy_refuses_runs_nothing_and_keeps_the_retry(
    tmp_path: Path,
) -> None:
    """Only Alice may start runs: Bob's press is refused to him alone, nothing runs, and
    the run stays retryable for Alice, whose press then runs it once."""
    async with harness_with(tmp_path, access=AccessConfig(users=(ALICE,))) as harness:
        run_id = await interrupted_run(harness, "RESTRICTED-QUESTION")
        assert await harness.click(RETRY_RUN, run_id, user=BOB) == 200
        await until(lambda: bool(ephemerals_to(harness, BOB)))
        await harness.settle()
        assert harness.llm.requests == []
        assert "only open to some people" in ephemerals_to(harness, BOB)[0]
        assert await states_of(harness, run_id) <= set(RETRYABLE)
        harness.llm.script(Reply(text="RESTRICTED-ANSWER"))
        assert await harness.click(RETRY_RUN, run_id, user=ALICE) == 200
        record = await harness.surface.turns.run_store.get(run_id)
        assert record is not None
        await until(
            lambda: "RESTRICTED-ANSWER" in " ".join(harness.bot_texts("C1", record.thread_ts))
        )
        await harness.settle()
        assert len(harness.main_requests()) == 1


async def test_retry_in_a_channel_the_policy_excludes_runs_nothing(tmp_path: Path) -> None:
    """The run's channel is not (any longer) one Baton works in: a Retry there is refused."""
    async with harness_with(tmp_path, access=AccessConfig(channels=("C2",))) as harness:
        run_id = await interrupted_run(harness, "EXCLUDED-CHANNEL-QUESTION")
        assert await harness.click(RETRY_RUN, run_id, user=ALICE) == 200
        await until(lambda: bool(ephemerals_to(harness, ALICE)))
        await harness.settle()
        assert harness.llm.requests == []
        assert await states_of(harness, run_id) <= set(RETRYABLE)


async def test_retry_value_carried_to_another_channel_or_dm_runs_nothing(
    harness: SlackHarness,
) -> None:
    run_id = await interrupted_run(harness, "CARRIED-QUESTION")
    for channel in ("C2", "DBOB", "G0PRIVATE"):
        assert await harness.click(RETRY_RUN, run_id, user=BOB, channel=channel) == 200
    await until(lambda: len(ephemerals_to(harness, BOB)) >= 3)
    await harness.settle()
    assert harness.llm.requests == []
    assert all("no such run" in text for text in ephemerals_to(harness, BOB))
    assert await states_of(harness, run_id) <= set(RETRYABLE)


async def test_retry_value_carried_to_another_thread_answers_only_in_the_runs_thread(
    harness: SlackHarness,
) -> None:
    """A member pastes a run's id on a Retry in another thread of the same channel: the
    question is answered in its own thread; nothing of it appears in the other."""
    run_id = await interrupted_run(harness, "THREAD-A-QUESTION")
    record = await harness.surface.turns.run_store.get(run_id)
    assert record is not None
    other = next_ts()
    harness.slack.add_message("C1", "thread B", BOB, ts=other)
    harness.llm.script(Reply(text="THREAD-A-ANSWER"))
    assert await harness.click(RETRY_RUN, run_id, user=BOB, message_ts=other) == 200
    await until(lambda: "THREAD-A-ANSWER" in " ".join(harness.bot_texts("C1", record.thread_ts)))
    await harness.settle()
    assert harness.bot_texts("C1", other) == []
    assert len(harness.main_requests()) == 1


async def test_retry_of_a_run_that_finished_normally_reruns_nothing(
    harness: SlackHarness,
) -> None:
    harness.llm.script(Reply(text="FIRST-AND-ONLY"))
    ts = await harness.mention("finish normally")
    await until(lambda: "FIRST-AND-ONLY" in " ".join(harness.bot_texts("C1", ts)))
    await harness.settle()
    stored = await harness.surface.turns.inbox.find("C1", ts)
    assert stored is not None and stored.run_id and stored.state == DONE
    for user in (ALICE, BOB):
        assert await harness.click(RETRY_RUN, stored.run_id, user=user) == 200
    await until(lambda: len(harness.slack.ephemerals) >= 2)
    await harness.settle()
    assert len(harness.llm.requests) == 1
    assert all("Nothing to retry" in e["text"] for e in harness.slack.ephemerals)


async def test_retry_of_a_run_a_person_cancelled_reruns_nothing(harness: SlackHarness) -> None:
    gate = gate_first(harness)
    ts = await harness.mention("cancel me")
    await until(lambda: len(harness.llm.requests) == 1)
    stored = await harness.surface.turns.inbox.find("C1", ts)
    assert stored is not None and stored.run_id
    run_id = stored.run_id
    assert await harness.click(CANCEL_RUN, run_id, user=ALICE) == 200
    await until(lambda: "Cancelled" in json.dumps(harness.thread("C1", ts)))
    gate.set()
    await harness.settle()
    assert await states_of(harness, run_id) == {DONE}
    assert await harness.click(RETRY_RUN, run_id, user=ALICE) == 200
    await until(lambda: any("Nothing to retry" in t for t in ephemerals_to(harness, ALICE)))
    await harness.settle()
    assert len(harness.llm.requests) == 1


@pytest.mark.parametrize(
    "value",
    [
        "",
        " ",
        "x" * 200_000,
        "' OR '1'='1",
        "'; DROP TABLE thread_messages; --",
        "%",
        "dead%",
        "../../etc/passwd",
        "\u202e\u0000nul",
        "🔥" * 1000,
    ],
    ids=["empty", "space", "huge", "or-true", "drop", "percent", "like", "path", "nul", "emoji"],
)
async def test_retry_with_a_forged_value_runs_nothing_and_breaks_nothing(
    harness: SlackHarness, value: str
) -> None:
    run_id = await interrupted_run(harness, "FORGED-VALUE-QUESTION")
    assert await harness.click(RETRY_RUN, value, user=BOB) == 200
    await harness.settle()
    assert harness.llm.requests == []
    assert await states_of(harness, run_id) <= set(RETRYABLE)
    await still_answers(harness)


async def test_a_retry_click_without_actions_or_value_breaks_nothing(
    harness: SlackHarness,
) -> None:
    from urllib.parse import urlencode

    run_id = await interrupted_run(harness, "NO-ACTIONS-QUESTION")
    # An empty `actions` list is answered 500 by Bolt itself (its kwargs for custom
    # middleware index actions[0]); only Slack can sign such a body, and Slack does not
    # retry interactive payloads, so it is only checked that nothing runs or breaks.
    for actions in ([], [{"action_id": RETRY_RUN, "type": "button"}],
                    [{"action_id": RETRY_RUN, "value": None}]):  # fmt: skip
        payload = {
            "type": "block_actions", "user": {"id": BOB, "team_id": TEAM},
            "team": {"id": TEAM}, "api_app_id": "ABATON", "token": "legacy",
            "trigger_id": "1.t", "actions": actions,
            "channel": {"id": "C1"}, "container": {"type": "message", "channel_id": "C1"},
        }  # fmt: skip
        body = urlencode({"payload": json.dumps(payload)})
        response = await harness.post(body, content_type="application/x-www-form-urlencoded")
        assert response.status in ((200, 404, 500) if not actions else (200, 404))
    await harness.settle()
    assert harness.llm.requests == []
    assert await states_of(harness, run_id) <= set(RETRYABLE)
    await still_answers(harness)


async def test_simultaneous_retry_clicks_run_the_question_exactly_once(
    harness: SlackHarness,
) -> None:
    run_id = await interrupted_run(harness, "RACED-QUESTION")
    record = await harness.surface.turns.run_store.get(run_id)
    assert record is not None
    harness.llm.responder = lambda request: Reply(text="RACED-ANSWER")
    clicks = [harness.click(RETRY_RUN, run_id, user=user) for user in (ALICE, BOB, CAROL) * 3]
    assert set(await asyncio.gather(*clicks)) == {200}
    await until(lambda: "RACED-ANSWER" in " ".join(harness.bot_texts("C1", record.thread_ts)))
    await harness.settle()
    assert len(harness.main_requests()) == 1
    assert len(harness.slack.ephemerals) == 8
    assert all("Nothing to retry" in e["text"] for e in harness.slack.ephemerals)
    raced = [t for t in user_texts(harness.main_requests()[0]) if "RACED-QUESTION" in t]
    assert len(raced) == 1


async def test_a_dm_run_cannot_be_retried_from_a_shared_channel_or_another_dm(
    harness: SlackHarness,
) -> None:
    """Alice's DM run was interrupted; Bob has its id (pasted, guessed): neither a click in
    a channel they share nor in his own DM runs Alice's private question."""
    run_id = await interrupted_run(harness, "PRIVATE-DM-QUESTION", channel="DALICE", is_dm=True)
    for channel in ("C1", "DBOB"):
        assert await harness.click(RETRY_RUN, run_id, user=BOB, channel=channel) == 200
    await until(lambda: len(ephemerals_to(harness, BOB)) >= 2)
    await harness.settle()
    assert harness.llm.requests == []
    assert "PRIVATE-DM-QUESTION" not in json.dumps(harness.slack.ephemerals)
    leaked = [c for c in harness.slack.calls
              if "PRIVATE-DM-QUESTION" in json.dumps(c.params, default=str)]  # fmt: skip
    assert leaked == []
    assert await states_of(harness, run_id) <= set(RETRYABLE)


# ------------------------------------------------------------ steering isolation


def reply_event(
    text: str, *, channel: str, thread_ts: str, user: str = BOB, team: str = TEAM,
    ts: str | None = None, mention: bool = False,
) -> dict[str, Any]:  # fmt: skip
    ts = ts or next_ts()
    body = f"<@{BOT}> {text}" if mention else text
    return {
        "type": "app_mention" if mention else "message", "user": user, "text": body,
        "ts": ts, "thread_ts": thread_ts, "channel": channel, "event_ts": ts, "team": team,
        "channel_type": "im" if channel.startswith("D") else "channel",
    }  # fmt: skip


async def test_no_message_of_another_channel_dm_or_team_steers_a_running_turn(
    harness: SlackHarness,
) -> None:
    """Alice's turn runs in C1's thread R. Messages with the same thread_ts R in another
    channel, a DM, and the same channel and thread under another team never reach it;
    a reply in R itself (the control) does."""
    gate = gate_first(harness)
    root = await harness.mention("C1-ROOT-QUESTION")
    await until(lambda: len(harness.llm.requests) == 1)
    harness.slack.add_message("C2", "another channel's thread", BOB, ts=root)
    foreign = [
        (reply_event("C2-TALK", channel="C2", thread_ts=root), TEAM),
        (reply_event("C2-MENTION", channel="C2", thread_ts=root, mention=True), TEAM),
        (reply_event("DM-TALK", channel="DBOB", thread_ts=root), TEAM),
        (reply_event("DM-TALK-SAME-TS", channel="DBOB", thread_ts=root, ts=root), TEAM),
        (reply_event("OTHER-TEAM-TALK", channel="C1", thread_ts=root, team=OTHER_TEAM),
         OTHER_TEAM),
        (reply_event("OTHER-TEAM-MENTION", channel="C1", thread_ts=root, team=OTHER_TEAM,
                     mention=True), OTHER_TEAM),
    ]  # fmt: skip
    for event, team in foreign:
        assert await post_payload(harness, event, team_id=team) == 200
    control = reply_event("C1-CONTROL-REPLY", channel="C1", thread_ts=root)
    assert await post_payload(harness, control) == 200
    await until(lambda: "eyes" in harness.slack.reactions.get(("C1", control["ts"]), []))
    gate.set()
    await harness.settle()
    words = ("C2-TALK", "C2-MENTION", "DM-TALK", "OTHER-TEAM-TALK", "OTHER-TEAM-MENTION")
    for request in harness.llm.requests:
        asked = "\n".join(user_texts(request))
        if "C1-ROOT-QUESTION" in asked:
            assert not any(word in asked for word in words), asked
    assert "C1-CONTROL-REPLY" in "\n".join(user_texts(harness.llm.requests[-1])) or any(
        "C1-CONTROL-REPLY" in "\n".join(user_texts(r)) for r in harness.llm.requests
    )
    for event, _ in foreign:
        if event["channel"] != "DBOB":  # his own DM conversation may steer its own run
            seen = harness.slack.reactions.get((event["channel"], event["ts"]), [])
            assert "eyes" not in seen, event
    threads = harness.surface.turns
    assert threads.runs == {} and threads.threads == {}


async def test_a_message_with_a_colliding_channel_and_ts_from_another_team_steals_nothing(
    harness: SlackHarness,
) -> None:
    """Another team's event reuses the channel id and ts of Alice's stored question (the
    inbox's key is channel+ts): it is taken for a redelivery and neither re-runs Alice's
    question nor reaches any model call."""
    harness.llm.script(Reply(text="ALICE-ANSWER"))
    ts = await harness.mention("ALICE-ORIGINAL")
    await until(lambda: "ALICE-ANSWER" in " ".join(harness.bot_texts("C1", ts)))
    await harness.settle()
    forged = {
        "type": "app_mention", "user": BOB, "text": f"<@{BOT}> FORGED-TEAM-TEXT", "ts": ts,
        "channel": "C1", "event_ts": ts, "team": OTHER_TEAM,
    }  # fmt: skip
    assert await post_payload(harness, forged, team_id=OTHER_TEAM) == 200
    await harness.settle()
    assert len(harness.llm.requests) == 1
    assert "FORGED-TEAM-TEXT" not in everything_asked(harness)
    stored = await harness.surface.turns.inbox.find("C1", ts)
    assert stored is not None and stored.user_id == ALICE and stored.state == DONE


async def test_talk_and_mentions_from_a_refused_person_never_reach_the_running_turn(
    tmp_path: Path,
) -> None:
    async with harness_with(tmp_path, access=AccessConfig(users=(ALICE,))) as harness:
        gate = gate_first(harness)
        root = await harness.mention("ALICE-ALLOWED-QUESTION")
        await until(lambda: len(harness.llm.requests) == 1)
        talk = reply_event("BOB-REFUSED-TALK", channel="C1", thread_ts=root)
        asked = reply_event("BOB-REFUSED-MENTION", channel="C1", thread_ts=root, mention=True)
        files = reply_event("BOB-REFUSED-FILE", channel="C1", thread_ts=root)
        files |= {"subtype": "file_share", "files": [{"id": "F1", "name": "x.txt"}]}
        broadcast = reply_event("BOB-REFUSED-BROADCAST", channel="C1", thread_ts=root)
        broadcast["subtype"] = "thread_broadcast"
        for event in (talk, asked, files, broadcast):
            assert await post_payload(harness, event) == 200
        control = reply_event("ALICE-OWN-REPLY", channel="C1", thread_ts=root, user=ALICE)
        assert await post_payload(harness, control) == 200
        await until(lambda: "eyes" in harness.slack.reactions.get(("C1", control["ts"]), []))
        await until(lambda: bool(ephemerals_to(harness, BOB)))
        gate.set()
        await harness.settle()
        assert "BOB-REFUSED" not in everything_asked(harness)
        assert "ALICE-OWN-REPLY" in everything_asked(harness)
        inbox = harness.surface.turns.inbox
        for event in (talk, asked, files, broadcast):
            stored = await inbox.find("C1", event["ts"])
            assert stored is None or stored.state == REFUSED, stored
            assert "eyes" not in harness.slack.reactions.get(("C1", event["ts"]), [])
        # Only the mention is answered (to Bob alone); talk is refused silently.
        assert len(ephemerals_to(harness, BOB)) == 1


async def test_a_person_over_their_daily_budget_gets_no_turn_by_mentioning_in_a_busy_thread(
    tmp_path: Path,
) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "helper.md").write_text("---\nname: helper\ndescription: Helps.\n---\nYou help.\n")
    limits = LimitsConfig(tokens_per_user_per_day=1_000)
    async with harness_with(tmp_path, limits=limits) as harness:
        harness.llm.script(
            Reply(text="BOB-SPENT", usage=Usage(prompt_tokens=1_400, completion_tokens=100))
        )
        first = await harness.mention("spend my budget", user=BOB)
        await until(lambda: "BOB-SPENT" in " ".join(harness.bot_texts("C1", first)))
        await harness.settle()
        # Bob is over budget: a top-level mention is refused (the control).
        await harness.mention("BOB-TOP-LEVEL", user=BOB)
        await until(lambda: bool(ephemerals_to(harness, BOB)))
        await harness.settle()
        assert "BOB-TOP-LEVEL" not in everything_asked(harness)
        # Alice's `@helper` run holds its thread (it reads no steering); Bob asks there.
        gate = gate_first(harness, final="HELPER-DONE")
        root = await harness.mention("@helper do some work")
        await until(lambda: len(harness.llm.requests) == 2)
        await harness.mention("BOB-OVER-BUDGET", user=BOB, thread_ts=root)
        await asyncio.sleep(0.3)
        gate.set()
        await harness.settle()
        # Asserted once the harness is closed: a failure inside it would leave its
        # generator (and database threads) to the garbage collector.
        asked, refusals = everything_asked(harness), ephemerals_to(harness, BOB)
    assert "BOB-OVER-BUDGET" not in asked
    assert len(refusals) == 2


# ------------------------------------------------------------------ odd events


async def test_a_good_mention_not_signed_by_slack_is_refused_and_stores_nothing(
    harness: SlackHarness,
) -> None:
    """A message event is taken before Bolt sees it (HttpServer): the signature, the
    timestamp and the body it covers are checked there first, as Bolt checks them."""
    ts = next_ts()
    event = {"type": "app_mention", "user": ALICE, "text": f"<@{BOT}> FORGED", "ts": ts,
             "channel": "C1", "event_ts": ts, "team": TEAM}  # fmt: skip
    payload = {"type": "event_callback", "team_id": TEAM, "event": event, "event_id": "EvF"}
    body = json.dumps(payload)
    tampered = body.replace("FORGED", "TAMPER")
    url = f"{harness.url}{EVENTS_PATH}"
    attempts = {
        "unsigned": (body, {}),
        "wrong secret": (body, sign(body, secret="not-the-secret")),
        "replayed an hour late": (body, sign(body, timestamp=int(time.time()) - 3600)),
        "from the future": (body, sign(body, timestamp=int(time.time()) + 3600)),
        "body changed after signing": (tampered, sign(body)),
        "signature of another body": (body, sign(tampered)),
        "signature without its version": (
            body, {**sign(body), "X-Slack-Signature": sign(body)["X-Slack-Signature"][3:]},
        ),
    }  # fmt: skip
    for name, (sent, headers) in attempts.items():
        async with harness.http.post(
            url, data=sent, headers={"Content-Type": "application/json", **headers}
        ) as response:
            assert response.status == 401, name
    await harness.settle()
    assert await harness.surface.turns.inbox.find("C1", ts) is None
    assert harness.llm.requests == []
    # The same event, signed by Slack, is a request like any other.
    harness.llm.script(Reply(text="SIGNED-ANSWER"))
    assert await post_payload(harness, event) == 200
    await until(lambda: "SIGNED-ANSWER" in " ".join(harness.bot_texts("C1", ts)))


@pytest.mark.parametrize(
    ("event", "status"),
    [
        ("a string", 200),
        (["a", "list"], 200),
        (None, 200),
        # Events no listener takes: Bolt's answer for what it does not handle.
        ({"type": ["message"], "user": ALICE, "text": f"<@{BOT}> hi"}, 404),
        ({}, 404),
    ],
)
async def test_a_signed_delivery_whose_event_is_no_message_is_answered_and_runs_nothing(
    harness: SlackHarness, event: Any, status: int
) -> None:
    assert await post_payload(harness, event) == status
    await harness.settle()
    assert harness.llm.requests == []
    await still_answers(harness)


def _not_from_people() -> dict[str, dict[str, Any]]:
    ts, old = next_ts(), next_ts()
    mention = f"<@{BOT}> do it"
    base = {"channel": "C1", "ts": ts, "event_ts": ts, "team": TEAM}
    return {
        "no-user": {"type": "message", "text": mention, **base},
        "empty-user": {"type": "message", "user": "", "text": mention, **base},
        "own-message": {"type": "message", "user": BOT, "text": mention, **base},
        "bot-message": {"type": "message", "subtype": "bot_message", "bot_id": "B1",
                        "text": mention, **base},
        "bot-id-with-user": {"type": "message", "user": ALICE, "bot_id": "B1",
                             "text": mention, **base},
        "message-changed": {"type": "message", "subtype": "message_changed", **base,
                            "message": {"user": ALICE, "text": mention, "ts": old}},
        "message-deleted": {"type": "message", "subtype": "message_deleted", **base,
                            "deleted_ts": old, "previous_message": {"user": ALICE,
                                                                   "text": mention}},
        "message-replied": {"type": "message", "subtype": "message_replied", **base,
                            "message": {"user": ALICE, "text": mention, "ts": old}},
        "channel-join": {"type": "message", "subtype": "channel_join", "user": ALICE,
                         "text": f"<@{ALICE}> has joined {mention}", **base},
        "me-message": {"type": "message", "subtype": "me_message", "user": ALICE,
                       "text": mention, **base},
        "talk-thread-ts-is-ts": {"type": "message", "user": ALICE, "text": "just talk",
                                 "thread_ts": ts, **base},
    }  # fmt: skip


NOT_FROM_PEOPLE = _not_from_people()


@pytest.mark.parametrize("name", list(NOT_FROM_PEOPLE))
async def test_events_that_are_not_a_persons_request_store_and_start_nothing(
    harness: SlackHarness, name: str
) -> None:
    event = NOT_FROM_PEOPLE[name]
    assert await post_payload(harness, event) == 200
    await harness.settle()
    assert await harness.surface.turns.inbox.find("C1", event["ts"]) is None
    assert harness.llm.requests == []
    await still_answers(harness)


async def test_a_mention_whose_thread_ts_is_its_own_ts_is_answered_once(
    harness: SlackHarness,
) -> None:
    harness.llm.script(Reply(text="TOP-LEVEL-ANSWER"))
    ts = next_ts()
    harness.slack.add_message("C1", f"<@{BOT}> SAME-TS", ALICE, ts=ts)
    event = {"type": "app_mention", "user": ALICE, "text": f"<@{BOT}> SAME-TS", "ts": ts,
             "thread_ts": ts, "channel": "C1", "event_ts": ts, "team": TEAM}  # fmt: skip
    assert await post_payload(harness, event) == 200
    await until(lambda: "TOP-LEVEL-ANSWER" in " ".join(harness.bot_texts("C1", ts)))
    await harness.settle()
    assert len(harness.llm.requests) == 1


async def test_a_gigantic_mention_is_taken_once_and_crashes_nothing(harness: SlackHarness) -> None:
    harness.llm.responder = lambda request: Reply(text="GIANT-ANSWER")
    ts = next_ts()
    text = f"<@{BOT}> GIANT " + "lorem ipsum " * 40_000  # ~480 kB; Slack caps text at 40k
    event = {"type": "app_mention", "user": ALICE, "text": text, "ts": ts, "channel": "C1",
             "event_ts": ts, "team": TEAM}  # fmt: skip
    payload = json.dumps({"token": "legacy", "team_id": TEAM, "api_app_id": "ABATON",
                          "event": event, "type": "event_callback", "event_id": "EvGiant",
                          "event_time": int(time.time())})  # fmt: skip
    headers = {"Content-Type": "application/json", **sign(payload)}
    async with harness.http.post(
        f"{harness.url}{EVENTS_PATH}", data=io.BytesIO(payload.encode()), headers=headers
    ) as response:
        assert response.status == 200
    await until(lambda: "GIANT-ANSWER" in " ".join(harness.bot_texts("C1", ts)), within=20)
    await harness.settle()
    assert len(harness.main_requests()) == 1
    stored = await harness.surface.turns.inbox.find("C1", ts)
    assert stored is not None and stored.state == DONE


async def test_files_that_are_a_dict_not_a_list_crash_nothing(harness: SlackHarness) -> None:
    harness.llm.script(Reply(text="DICT-FILES-ANSWER"))
    ts = next_ts()
    event = {"type": "message", "subtype": "file_share", "user": ALICE,
             "text": f"<@{BOT}> DICT-FILES", "ts": ts, "channel": "C1", "event_ts": ts,
             "team": TEAM, "files": {"id": "F1", "name": "x.txt"}}  # fmt: skip
    assert await post_payload(harness, event) == 200
    await until(lambda: "DICT-FILES-ANSWER" in " ".join(harness.bot_texts("C1", ts)))
    await harness.settle()
    assert len(harness.main_requests()) == 1


def _malformed() -> dict[str, dict[str, Any]]:
    ts = next_ts()
    mention = f"<@{BOT}> MALFORMED"
    base = {"type": "app_mention", "user": ALICE, "team": TEAM}
    return {
        "no-ts": {**base, "text": mention, "channel": "C1", "event_ts": ts},
        "no-channel": {**base, "text": mention, "ts": ts, "event_ts": ts},
        "files-an-int": {**base, "text": mention, "ts": ts, "channel": "C1", "files": 7},
        "text-an-int": {**base, "text": 12345, "ts": ts, "channel": "C1",
                        "thread_ts": next_ts()},
        "user-a-dict": {**base, "user": {"id": ALICE}, "text": mention, "ts": ts,
                        "channel": "C1"},
    }  # fmt: skip


MALFORMED = _malformed()


@pytest.mark.parametrize("name", list(MALFORMED))
async def test_a_malformed_person_event_is_not_answered_500(
    harness: SlackHarness, name: str
) -> None:
    """Not a database failure: retrying cannot help, so Slack must not be told to."""
    assert await post_payload(harness, MALFORMED[name]) == 200


@pytest.mark.parametrize("name", list(MALFORMED))
async def test_a_malformed_person_event_crashes_nothing_and_runs_nothing(
    harness: SlackHarness, name: str
) -> None:
    if name == "files-an-int":
        harness.llm.script(Reply(text="ANSWERED-WITHOUT-FILES"))
    await post_payload(harness, MALFORMED[name])
    await harness.settle()
    if name == "files-an-int":
        # Only its files are malformed: the question itself is kept and answered once.
        answers = [t for t in harness.bot_texts("C1", MALFORMED[name]["ts"])
                   if "ANSWERED-WITHOUT-FILES" in t]  # fmt: skip
        assert len(answers) == 1 and len(harness.main_requests()) == 1
    else:
        assert harness.llm.requests == []
    await still_answers(harness)


# ------------------------------------------------------ duplicates and floods


@pytest.mark.parametrize("same_event_id", [True, False])
async def test_the_same_mention_delivered_five_times_at_once_runs_once(
    harness: SlackHarness, same_event_id: bool
) -> None:
    """Slack's retries and the app_mention + message.channels pair, all at the same moment."""
    harness.llm.responder = lambda request: Reply(text="ONCE-ANSWER")
    ts = next_ts()
    harness.slack.add_message("C1", f"<@{BOT}> ONCE", ALICE, ts=ts)
    mention = {"type": "app_mention", "user": ALICE, "text": f"<@{BOT}> ONCE", "ts": ts,
               "channel": "C1", "event_ts": ts, "team": TEAM}  # fmt: skip
    message = {**mention, "type": "message", "channel_type": "channel"}
    events = [mention, message, mention, message, mention]
    statuses = await asyncio.gather(*(
        post_payload(harness, e, event_id="EvSame" if same_event_id else None) for e in events
    ))  # fmt: skip
    assert set(statuses) == {200}
    await until(lambda: "ONCE-ANSWER" in " ".join(harness.bot_texts("C1", ts)))
    await harness.settle()
    assert len(harness.main_requests()) == 1
    progress = [m for m in harness.thread("C1", ts) if m.get("user") == BOT]
    assert sum("ONCE-ANSWER" in m.get("text", "") for m in progress) == 1


async def test_a_flood_of_mentions_during_a_turn_is_all_handled_once_in_ts_order(
    harness: SlackHarness,
) -> None:
    gate = gate_first(harness)
    root = await harness.mention("FLOOD-ROOT")
    await until(lambda: len(harness.llm.requests) == 1)
    # Everyone's directory entry is known already: the order-by-latency race is its own
    # test (below); here every dispatch takes about as long.
    for user in (BOB, CAROL):
        await harness.surface.access.directory.person(user)
        await harness.surface.threads.names.name_of(user)
    sent: list[str] = []
    for n in range(15):
        user = (ALICE, BOB, CAROL)[n % 3]
        label = f"FLOOD-{n:02d}"
        ts = next_ts()
        harness.slack.add_message("C1", f"<@{BOT}> {label}", user, ts=ts, thread_ts=root)
        event = reply_event(label, channel="C1", thread_ts=root, user=user, ts=ts,
                            mention=n % 2 == 0)  # fmt: skip
        assert await post_payload(harness, event) == 200
        sent.append(ts)
    inbox = harness.surface.turns.inbox
    for ts in sent:
        await until(lambda ts=ts: "eyes" in harness.slack.reactions.get(("C1", ts), []))
    gate.set()
    await harness.settle(within=20)
    threads = harness.surface.turns
    for ts in sent:
        stored = await inbox.find("C1", ts)
        assert stored is not None and stored.state == DONE, stored
    last = "\n".join(user_texts(harness.llm.requests[-1]))
    positions = [last.find(f"FLOOD-{n:02d}") for n in range(15)]
    assert all(p >= 0 for p in positions)
    assert positions == sorted(positions), positions
    for n in range(15):
        assert last.count(f"FLOOD-{n:02d}") == 1
    assert threads.runs == {} and threads.threads == {} and threads._starting == set()
    assert not [t for t in threads._tasks if not t.done()]
    assert len(threads._tasks) == 0


async def test_a_flood_in_many_threads_leaves_no_runs_or_tasks_behind(
    harness: SlackHarness,
) -> None:
    harness.llm.responder = lambda request: Reply(text="MANY-ANSWER")
    roots = await asyncio.gather(*(harness.mention(f"MANY-{n}") for n in range(20)))
    for root in roots:
        await until(lambda root=root: "MANY-ANSWER" in " ".join(harness.bot_texts("C1", root)),
                    within=20)  # fmt: skip
    await harness.settle(within=20)
    threads = harness.surface.turns
    assert len(harness.main_requests()) == 20
    assert threads.runs == {} and threads.threads == {} and threads._starting == set()
    assert len(threads._tasks) == 0


async def test_steering_keeps_slacks_order_when_one_authors_lookup_is_slow(
    harness: SlackHarness,
) -> None:
    gate = gate_first(harness)
    root = await harness.mention("ORDER-ROOT")
    await until(lambda: len(harness.llm.requests) == 1)
    harness.slack.set_latency("users.info", 0.5)  # Carol is not looked up yet; Alice is
    first = reply_event("ORDER-FIRST-CAROL", channel="C1", thread_ts=root, user=CAROL)
    second = reply_event("ORDER-SECOND-ALICE", channel="C1", thread_ts=root, user=ALICE)
    assert await post_payload(harness, first) == 200
    assert await post_payload(harness, second) == 200
    for event in (first, second):
        await until(
            lambda event=event: "eyes" in harness.slack.reactions.get(("C1", event["ts"]), [])
        )
    harness.slack.set_latency("users.info", 0)
    gate.set()
    await harness.settle()
    last = "\n".join(user_texts(harness.llm.requests[-1]))
    assert 0 <= last.find("ORDER-FIRST-CAROL") < last.find("ORDER-SECOND-ALICE"), last
