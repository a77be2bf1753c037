"""Runs a trigger starts go through the one turn machine, for their owner: a thread of
their own, the owner's access, limits and budget, and a public word when refused."""

from __future__ import annotations

from pathlib import Path

from sqlmodel import col, select

from bot.access.budgets import utc_day, utc_now
from bot.config import AccessConfig, LimitsConfig
from bot.store import SessionKey
from bot.store.models import RunRow
from bot.triggers.launch import Launch, trigger_key
from tests.fakes.openai_api import Reply
from tests.slack.harness import (
    ALICE,
    BOB,
    BOT,
    MAIN_MARK,
    TEAM,
    SlackHarness,
    next_ts,
    start_harness,
    until,
)

TRIGGER = trigger_key("schedule", "deps-report")


def launch(prompt: str = "List outdated dependencies", **overrides: object) -> Launch:
    values: dict[str, object] = {
        "trigger": TRIGGER,
        "channel_id": "C1",
        "owner": ALICE,
        "prompt": prompt,
        "announcement": "⏰ Scheduled run *deps-report* for <@UALICE>",
    }
    values.update(overrides)
    return Launch(**values)  # type: ignore[arg-type]


async def runs_of(harness: SlackHarness) -> list[RunRow]:
    async with harness.baton.database.sessions() as session:
        return list((await session.exec(select(RunRow).order_by(col(RunRow.created_at)))).all())


async def answered(harness: SlackHarness, ts: str, text: str) -> None:
    """Wait until Baton said `text` in the thread of `ts`."""
    await until(lambda: any(text in said for said in harness.bot_texts("C1", ts)))


def user_texts(messages: list[dict[str, object]]) -> list[str]:
    return [str(m.get("content")) for m in messages if m["role"] == "user"]


async def test_a_triggered_run_answers_in_a_thread_of_its_own_for_its_owner(
    tmp_path: Path,
) -> None:
    async for harness in start_harness(tmp_path):
        harness.llm.script(Reply(text="Three packages are outdated."))
        stored = await harness.surface.triggers.launcher.launch(launch())
        await harness.settle()
        # The announcement is a new top-level message; the answer is in its thread.
        top = [m for m in harness.slack.channel_messages("C1") if m.get("ts") == stored.ts]
        assert top and "deps-report" in top[0]["text"]
        assert top[0].get("thread_ts") in (None, stored.ts)
        await answered(harness, stored.ts, "Three packages are outdated.")
        (request,) = harness.main_requests()
        assert str(request.messages[0]["content"]).startswith(MAIN_MARK)
        # The model is told who wrote the question: the schedule, not a person.
        assert user_texts(request.messages)[-1] == (
            "[Baton's schedule deps-report] List outdated dependencies"
        )
        (run,) = await runs_of(harness)
        assert (run.trigger, run.user_id, run.thread_ts) == (TRIGGER, ALICE, stored.ts)
        # The tokens are the owner's.
        spent = await harness.baton.usage.user_day(ALICE, utc_day(utc_now()))
        assert spent.prompt_tokens > 0
        # A person who replies in the thread, mentioning Baton, continues its conversation.
        harness.llm.script(Reply(text="Upgrading them is safe."))
        reply_ts = next_ts()
        await harness.send_event(
            {
                "type": "app_mention",
                "user": BOB,
                "text": f"<@{BOT}> which are safe?",
                "ts": reply_ts,
                "thread_ts": stored.ts,
                "channel": "C1",
                "team": TEAM,
            }
        )
        await answered(harness, stored.ts, "Upgrading them is safe.")
        second = harness.main_requests()[-1]
        texts = user_texts(second.messages)
        assert any("List outdated dependencies" in text for text in texts[:-1])
        session = await harness.baton.conversations.store.get(
            (await runs_of(harness))[-1].session_id
        )
        assert session is not None
        assert (
            session.key
            == SessionKey.slack_thread(team_id=TEAM, channel_id="C1", thread_ts=stored.ts).key
        )


async def test_the_same_message_stored_twice_starts_one_run(tmp_path: Path) -> None:
    async for harness in start_harness(tmp_path):
        harness.llm.script(Reply(text="once"))
        launcher = harness.surface.triggers.launcher
        first = await launcher.launch(launch())
        again = await launcher.launch(launch(announcement=None, ts=first.ts))
        await harness.settle()
        assert first.message is not None and again.message is None
        assert len(harness.main_requests()) == 1


async def test_a_run_for_an_owner_who_lost_access_is_refused_in_the_thread(
    tmp_path: Path,
) -> None:
    async for harness in start_harness(tmp_path, access=AccessConfig(users=(BOB,))):
        stored = await harness.surface.triggers.launcher.launch(launch())
        await harness.settle()
        texts = harness.bot_texts("C1", stored.ts)
        assert any(
            "Not run: the schedule *deps-report* runs for its owner" in text
            and "only open to some people" in text
            for text in texts
        ), texts
        # Said in the thread for everyone, not to the owner alone; nothing ran.
        assert not harness.slack.calls_to("chat.postEphemeral")
        assert harness.main_requests() == []
        assert await runs_of(harness) == []


async def test_a_deactivated_owners_run_is_refused(tmp_path: Path) -> None:
    async for harness in start_harness(tmp_path):
        harness.slack.add_user("UGONE", "gone", deleted=True)
        stored = await harness.surface.triggers.launcher.launch(launch(owner="UGONE"))
        await harness.settle()
        texts = harness.bot_texts("C1", stored.ts)
        assert any("account of <@UGONE> is deactivated" in text for text in texts), texts
        assert harness.main_requests() == []


async def test_a_run_is_charged_to_its_owner_and_stops_at_their_budget(tmp_path: Path) -> None:
    limits = LimitsConfig(tokens_per_user_per_day=50)
    async for harness in start_harness(tmp_path, limits=limits):
        harness.llm.script(Reply(text="done"))
        first = await harness.surface.triggers.launcher.launch(launch("x " * 200))
        await harness.settle()
        await answered(harness, first.ts, "done")
        spent = await harness.baton.usage.user_day(ALICE, utc_day(utc_now()))
        assert spent.prompt_tokens + spent.completion_tokens > 50
        # The owner's budget is spent: the next fire is refused, in its thread, and Bob
        # (whose budget is untouched) is not who pays.
        second = await harness.surface.triggers.launcher.launch(launch())
        await harness.settle()
        texts = harness.bot_texts("C1", second.ts)
        assert any("Not run" in text and "budget" in text for text in texts), texts
        assert len(harness.main_requests()) == 1
        bobs = await harness.baton.usage.user_day(BOB, utc_day(utc_now()))
        assert bobs.prompt_tokens == 0


async def test_a_trigger_may_run_a_sub_agent_directly(tmp_path: Path) -> None:
    async for harness in start_harness(tmp_path):
        harness.llm.script(Reply(text="explored"))
        stored = await harness.surface.triggers.launcher.launch(launch(agent="explore"))
        await harness.settle()
        await answered(harness, stored.ts, "explored")
        # The main agent was never called: the explore agent answered.
        assert harness.main_requests() == []
        (request,) = harness.llm.requests
        assert "List outdated dependencies" in user_texts(request.messages)[-1]
