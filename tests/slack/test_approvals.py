"""Approvals end to end: buttons the bot posted, clicked with signed requests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.access.deciders import Deciders
from bot.config import AskRuleConfig, PermissionsConfig
from bot.slack.approvals import SlackApprovals
from bot.slack.directory import SlackDirectory
from bot.slack.server import slack_parts
from bot.slack.surface import SlackSurface
from bot.store import SessionKey
from bot.store.approvals import ApprovalStore
from bot.store.models import ApprovalRow
from tests.fakes.openai_api import RecordedRequest, Reply, ToolCallSpec
from tests.slack.harness import (
    ALICE,
    BOB,
    BOT,
    MAIN_MARK,
    SlackHarness,
    next_ts,
    start_harness,
    until,
)

CAROL = "UCAROL"
DAVE = "UDAVE"


@pytest.fixture
async def strict(tmp_path: Path) -> AsyncIterator[SlackHarness]:
    """A harness with approvers (a user and a user group) and a short timeout."""
    async for value in start_harness(tmp_path, approvers=(CAROL, "SOPS"), approval_timeout_s=30.0):
        value.slack.add_usergroup("SOPS", [DAVE])
        yield value


def tool_result(request: RecordedRequest) -> str:
    return str(request.messages[-1]["content"])


async def ask_for(
    harness: SlackHarness, command: str, *, user: str = ALICE
) -> tuple[str, dict[str, Any]]:
    """Start a run whose model wants `command`; return the thread and the Approve button."""
    harness.llm.script(
        Reply(tool_calls=[ToolCallSpec("bash", {"command": command}, id="cmd")]),
        Reply(text="Done with the command."),
    )
    ts = await harness.mention("please run it", user=user)
    await until(lambda: harness.find_button("C1", ts, "baton_approve") is not None)
    found = harness.find_button("C1", ts, "baton_approve")
    assert found is not None
    return ts, found


async def click(harness: SlackHarness, found: dict[str, Any], action: str, user: str) -> None:
    assert (
        await harness.click(action, found["button"]["value"], user=user,
                            message_ts=found["message"]["ts"])
        == 200
    )  # fmt: skip


def approval_message(harness: SlackHarness, found: dict[str, Any]) -> str:
    message = harness.slack.get_message("C1", found["message"]["ts"])
    assert message is not None
    return json.dumps(message["blocks"], ensure_ascii=False)


async def test_approve_runs_the_command(strict: SlackHarness) -> None:
    ts, found = await ask_for(strict, "touch approved.txt")
    posted = approval_message(strict, found)
    assert "`bash`" in posted and "touch approved.txt" in posted
    assert f"asked by <@{ALICE}>" in posted and "the main agent" in posted.lower()
    assert "no rule allows it" in posted  # why it needs approval
    await click(strict, found, "baton_approve", ALICE)
    await strict.settle()
    assert (strict.baton.workspace.root / "approved.txt").exists()
    assert tool_result(strict.llm.requests[1]).startswith("exit code 0")
    final = approval_message(strict, found)
    assert f"✓ Approved by <@{ALICE}>" in final and "baton_approve" not in final
    assert "Done with the command." in json.dumps(strict.thread("C1", ts))


async def test_deny_does_not_run_and_the_model_is_told(strict: SlackHarness) -> None:
    _, found = await ask_for(strict, "touch denied.txt")
    await click(strict, found, "baton_deny", ALICE)
    await strict.settle()
    assert not (strict.baton.workspace.root / "denied.txt").exists()
    told = tool_result(strict.llm.requests[1])
    assert f"a person (<@{ALICE}>) denied this call" in told
    assert f"✗ Denied by <@{ALICE}>" in approval_message(strict, found)


async def test_someone_else_is_refused_and_the_request_stays_open(strict: SlackHarness) -> None:
    _, found = await ask_for(strict, "touch x.txt")
    await click(strict, found, "baton_approve", BOB)
    await until(lambda: any("It stays open" in e["text"] for e in strict.slack.ephemerals))
    refusal = next(e for e in strict.slack.ephemerals if "It stays open" in e["text"])
    assert refusal["user"] == BOB
    record = await ApprovalStore(strict.baton.database).get(found["button"]["value"])
    assert record is not None and record.state == "pending"
    assert not (strict.baton.workspace.root / "x.txt").exists()
    await click(strict, found, "baton_approve", ALICE)
    await strict.settle()
    assert (strict.baton.workspace.root / "x.txt").exists()


@pytest.mark.parametrize("approver", [CAROL, DAVE], ids=["user", "user-group"])
async def test_approvers_may_decide(strict: SlackHarness, approver: str) -> None:
    _, found = await ask_for(strict, "touch by-approver.txt")
    await click(strict, found, "baton_approve", approver)
    await strict.settle()
    assert (strict.baton.workspace.root / "by-approver.txt").exists()
    assert f"✓ Approved by <@{approver}>" in approval_message(strict, found)
    if approver == DAVE:
        assert strict.slack.calls_to("usergroups.users.list")


async def test_a_double_click_changes_nothing(strict: SlackHarness) -> None:
    _, found = await ask_for(strict, "echo once >> count.txt")
    await click(strict, found, "baton_approve", ALICE)
    # Each click is handled in a task of its own: Carol's Deny comes after Alice's
    # Approve is decided, as a late click would, not in a race with it.
    await until(lambda: f"Approved by <@{ALICE}>" in approval_message(strict, found))
    await click(strict, found, "baton_deny", CAROL)
    await click(strict, found, "baton_approve", ALICE)
    await strict.settle()
    assert (strict.baton.workspace.root / "count.txt").read_text() == "once\n"
    polite = [e for e in strict.slack.ephemerals if "already approved" in e["text"]]
    assert len(polite) >= 1
    record = await ApprovalStore(strict.baton.database).get(found["button"]["value"])
    assert record is not None and record.state == "approved" and record.decided_by == ALICE


async def test_a_danger_reason_is_what_the_approver_sees(strict: SlackHarness) -> None:
    _, found = await ask_for(strict, "rm -rf build")
    posted = approval_message(strict, found)
    assert "Recursive delete" in posted
    await click(strict, found, "baton_deny", ALICE)
    await strict.settle()


async def test_a_decision_written_by_another_process_resumes_the_run(
    strict: SlackHarness,
) -> None:
    _, found = await ask_for(strict, "touch from-replica.txt")
    # Another replica took the click: it only writes the row; this process polls it.
    other_replica = ApprovalStore(strict.baton.database)
    assert await other_replica.decide(found["button"]["value"], "approved", by=CAROL)
    await strict.settle()
    assert (strict.baton.workspace.root / "from-replica.txt").exists()
    assert f"✓ Approved by <@{CAROL}>" in approval_message(strict, found)


async def test_long_arguments_are_shortened_with_the_full_text_one_click_away(
    strict: SlackHarness,
) -> None:
    content = "".join(f"line {n}\n" for n in range(2000))
    strict.llm.script(
        Reply(tool_calls=[ToolCallSpec("write_file", {"path": "big.txt", "content": content})]),
        Reply(text="ok"),
    )
    ts = await strict.mention("write a big file")
    await until(lambda: strict.find_button("C1", ts, "baton_approval_args") is not None)
    found = strict.find_button("C1", ts, "baton_approval_args")
    assert found is not None
    assert "characters]" in approval_message(strict, found)
    assert await strict.click("baton_approval_args", found["button"]["value"], user=BOB) == 200
    await until(lambda: bool(strict.slack.calls_to("views.open")))
    modal = json.dumps(strict.slack.calls_to("views.open")[0].params["view"], ensure_ascii=False)
    assert "line 0\\n" in modal and "line 1999\\n" in modal
    approve = strict.find_button("C1", ts, "baton_approve")
    assert approve is not None
    await click(strict, approve, "baton_deny", ALICE)
    await strict.settle()


@pytest.fixture
async def hasty(tmp_path: Path) -> AsyncIterator[SlackHarness]:
    """A harness whose approval requests expire after half a second."""
    async for value in start_harness(tmp_path, approval_timeout_s=0.5):
        yield value


async def test_nobody_deciding_expires_and_is_not_reported_as_a_denial(
    hasty: SlackHarness,
) -> None:
    _, found = await ask_for(hasty, "touch late.txt")
    await hasty.settle()
    told = tool_result(hasty.llm.requests[1])
    assert "nobody decided within 0.5 s" in told and "Nobody denied it" in told
    assert "denied this call" not in told
    assert not (hasty.baton.workspace.root / "late.txt").exists()
    assert "⌛ Expired" in approval_message(hasty, found)
    await click(hasty, found, "baton_approve", ALICE)
    await until(lambda: any("already expired" in e["text"] for e in hasty.slack.ephemerals))


async def test_cancelling_the_run_cancels_its_pending_approval(strict: SlackHarness) -> None:
    ts, found = await ask_for(strict, "touch never.txt")
    cancel = strict.find_button("C1", ts, "baton_cancel_run")
    assert cancel is not None
    await click(strict, cancel, "baton_cancel_run", ALICE)
    await strict.settle()
    assert "⊘ Cancelled" in approval_message(strict, found)
    record = await ApprovalStore(strict.baton.database).get(found["button"]["value"])
    assert record is not None and record.state == "cancelled"
    assert not (strict.baton.workspace.root / "never.txt").exists()


async def test_background_children_fail_closed_without_buttons(strict: SlackHarness) -> None:
    def respond(request: RecordedRequest) -> Reply:
        if str(request.messages[0]["content"]).startswith(MAIN_MARK):
            if len([r for r in strict.llm.requests if r.messages[0] == request.messages[0]]) == 1:
                return Reply(tool_calls=[ToolCallSpec("task", {
                    "subagent_type": "general-purpose", "prompt": "create notes.txt",
                    "background": True})])  # fmt: skip
            return Reply(text="Started.")
        if request.messages[-1]["role"] == "user":
            return Reply(tool_calls=[ToolCallSpec("write_file", {"path": "notes.txt",
                                                                 "content": "x"})])  # fmt: skip
        return Reply(text="I was not allowed to write.")

    strict.llm.responder = respond
    ts = await strict.mention("make notes in the background")
    await strict.settle()
    await until(lambda: "task-general-purpose-1" in json.dumps(strict.thread("C1", ts)))
    assert strict.find_button("C1", ts, "baton_approve") is None
    assert not (strict.baton.workspace.root / "notes.txt").exists()
    detail = await strict.baton.tracker.get("task-general-purpose-1")
    assert detail is not None
    assert any("denied write_file without asking" in line for line in detail.log)
    child_told = [r for r in strict.llm.requests if r.messages[-1]["role"] == "tool"][-1]
    assert "fail closed" in tool_result(child_told)


async def test_a_restart_expires_requests_left_pending(strict: SlackHarness) -> None:
    store = ApprovalStore(strict.baton.database)
    session = await strict.baton.conversations.store.get_or_create(
        SessionKey.slack_thread(team_id="T0001", channel_id="C1", thread_ts="1.0")
    )
    record = await store.create(
        session_id=session.id, agent="main", task_id=None, tool="bash",
        arguments='{"command": "make deploy"}', reason="bash needs approval",
        requested_by=ALICE, channel_id="C1",
    )  # fmt: skip
    ts = strict.slack.add_message("C1", "Approval needed: bash", BOT, bot_id="BBOT")
    await store.set_message(record.id, channel_id="C1", message_ts=ts)
    # A new process starts on the same database: nobody waits for that request now.
    restarted = SlackSurface(slack_parts(strict.baton))
    await restarted.approvals.expire_abandoned()
    final = await store.get(record.id)
    assert final is not None and final.state == "expired"
    message = strict.slack.get_message("C1", ts)
    assert message is not None
    assert "Baton restarted before anyone decided" in json.dumps(message["blocks"])


async def test_clicks_still_work_while_shutting_down(strict: SlackHarness) -> None:
    _, found = await ask_for(strict, "touch during-shutdown.txt")
    strict.surface.turns.accepting = False  # SIGTERM: no new work, runs may finish
    await click(strict, found, "baton_approve", ALICE)
    await strict.settle()
    assert (strict.baton.workspace.root / "during-shutdown.txt").exists()
    # A new question is sent back to Slack (503), to be delivered to another replica.
    ignored = next_ts()
    event = {"type": "app_mention", "user": ALICE, "text": f"<@{BOT}> a new question",
             "ts": ignored, "channel": "C1", "event_ts": ignored}  # fmt: skip
    assert (await strict.send_event(event)).status == 503
    await strict.settle()
    assert not any(BOT == m.get("user") for m in strict.thread("C1", ignored))


# ------------------------------------------------------------ who may decide

ERIN = "UERIN"
PLATFORM = "S0PLATFORM"


async def refused(harness: SlackHarness, user: str) -> dict[str, Any]:
    """The ephemeral refusal `user` got for a click (the request stays open)."""
    await until(
        lambda: any(e["user"] == user and "It stays open" in e["text"]
                    for e in harness.slack.ephemerals)
    )  # fmt: skip
    return next(
        e for e in harness.slack.ephemerals if e["user"] == user and "It stays open" in e["text"]
    )


async def state_of(harness: SlackHarness, found: dict[str, Any]) -> str:
    record = await ApprovalStore(harness.baton.database).get(found["button"]["value"])
    assert record is not None
    return record.state


@pytest.fixture
async def no_self(tmp_path: Path) -> AsyncIterator[SlackHarness]:
    """`self_approval: false` with approvers (a user and a user group)."""
    async for value in start_harness(
        tmp_path, approvers=(CAROL, "SOPS"), self_approval=False, approval_timeout_s=30.0
    ):
        value.slack.add_usergroup("SOPS", [DAVE])
        yield value


async def test_without_self_approval_the_requester_may_deny_but_not_approve(
    no_self: SlackHarness,
) -> None:
    _, found = await ask_for(no_self, "touch mine.txt")
    posted = approval_message(no_self, found)
    assert "Who may decide" in posted
    assert f"<@{CAROL}>" in posted and "<!subteam^SOPS>" in posted
    assert "you (the requester" not in posted and f"<@{ALICE}>, who asked, may deny" in posted
    await click(no_self, found, "baton_approve", ALICE)
    refusal = await refused(no_self, ALICE)
    assert f"<@{CAROL}>" in refusal["text"] and "<!subteam^SOPS>" in refusal["text"]
    assert await state_of(no_self, found) == "pending"
    assert len(no_self.llm.requests) == 1  # the model has not heard back: nothing ran
    await click(no_self, found, "baton_deny", ALICE)
    await no_self.settle()
    assert not (no_self.baton.workspace.root / "mine.txt").exists()
    assert f"✗ Denied by <@{ALICE}>" in approval_message(no_self, found)


@pytest.mark.parametrize("approver", [CAROL, DAVE], ids=["user", "user-group"])
async def test_without_self_approval_an_approver_approves(
    no_self: SlackHarness, approver: str
) -> None:
    _, found = await ask_for(no_self, "touch theirs.txt")
    await click(no_self, found, "baton_approve", approver)
    await no_self.settle()
    assert (no_self.baton.workspace.root / "theirs.txt").exists()
    assert f"✓ Approved by <@{approver}>" in approval_message(no_self, found)


async def test_reported_bug_a_non_approver_cannot_approve_reading_the_bots_environment(
    no_self: SlackHarness,
) -> None:
    """BOB, no approver, asks for the bot's environment and clicks Approve himself."""
    _, found = await ask_for(no_self, "cat /proc/$PPID/environ", user=BOB)
    await click(no_self, found, "baton_approve", BOB)
    await refused(no_self, BOB)
    assert await state_of(no_self, found) == "pending"
    # A forged Deny-as-Approve or a second try changes nothing either.
    await click(no_self, found, "baton_approve", BOB)
    await no_self.surface.turns.idle(runs=False)  # the click was handled
    assert await state_of(no_self, found) == "pending"
    assert len(no_self.llm.requests) == 1  # the command never ran
    await click(no_self, found, "baton_deny", BOB)
    await no_self.settle()
    told = tool_result(no_self.llm.requests[1])
    assert f"a person (<@{BOB}>) denied this call" in told
    assert "SLACK_BOT_TOKEN" not in json.dumps([r.messages for r in no_self.llm.requests])
    assert "xoxb-test" not in json.dumps(no_self.slack.calls_to("chat.postMessage")[-1].params)


@pytest.fixture
async def ruled(tmp_path: Path) -> AsyncIterator[SlackHarness]:
    """`git push` is decided by the platform group, `npm publish` by ERIN; bash asks."""
    permissions = PermissionsConfig(
        ask=(
            "bash",
            AskRuleConfig(rule="bash(git push*)", approvers=(PLATFORM,)),
            AskRuleConfig(rule="bash(npm publish*)", approvers=(ERIN,)),
        )
    )
    async for value in start_harness(
        tmp_path, approvers=(CAROL,), permissions=permissions, approval_timeout_s=30.0
    ):
        value.slack.add_usergroup(PLATFORM, [DAVE])
        yield value


async def test_a_rules_approver_group_alone_may_approve(ruled: SlackHarness) -> None:
    _, found = await ask_for(ruled, "git push origin main; echo pushed > pushed.txt")
    posted = approval_message(ruled, found)
    assert f"<!subteam^{PLATFORM}>" in posted and f"<@{CAROL}>" not in posted.split("Who")[-1]
    # A global approver outside the rule's group, the requester outside it, and the
    # approver of another rule's set: all refused.
    for outsider in (CAROL, ALICE, ERIN):
        await click(ruled, found, "baton_approve", outsider)
        assert f"<!subteam^{PLATFORM}>" in (await refused(ruled, outsider))["text"]
    assert await state_of(ruled, found) == "pending"
    assert not (ruled.baton.workspace.root / "pushed.txt").exists()
    await click(ruled, found, "baton_approve", DAVE)
    await ruled.settle()
    assert (ruled.baton.workspace.root / "pushed.txt").exists()
    assert f"✓ Approved by <@{DAVE}>" in approval_message(ruled, found)


async def test_several_rules_need_someone_in_every_set(ruled: SlackHarness) -> None:
    _, found = await ask_for(ruled, "git push && npm publish")
    for outsider in (DAVE, ERIN, CAROL):
        await click(ruled, found, "baton_approve", outsider)
        await refused(ruled, outsider)
    assert await state_of(ruled, found) == "pending"
    # Nobody is in both sets; the requester may still say no.
    await click(ruled, found, "baton_deny", ALICE)
    await ruled.settle()
    assert await state_of(ruled, found) == "denied"


async def test_plain_string_rules_keep_the_usual_deciders(ruled: SlackHarness) -> None:
    _, found = await ask_for(ruled, "touch plain.txt")
    posted = approval_message(ruled, found)
    assert f"you (the requester, <@{ALICE}>) or <@{CAROL}>" in posted
    await click(ruled, found, "baton_approve", ALICE)
    await ruled.settle()
    assert (ruled.baton.workspace.root / "plain.txt").exists()


async def test_a_forged_value_for_another_request_is_refused(strict: SlackHarness) -> None:
    """BOB clicks Approve on his own message, with the id of ALICE's request as its value."""
    _, alices = await ask_for(strict, "touch alices.txt")
    assert await strict.click(
        "baton_approve", alices["button"]["value"], user=BOB, message_ts="1700000000.000001"
    ) == 200  # fmt: skip
    await refused(strict, BOB)
    assert await state_of(strict, alices) == "pending"
    assert await strict.click("baton_approve", "ap-does-not-exist", user=BOB) == 200
    await until(lambda: any("no longer exists" in e["text"] for e in strict.slack.ephemerals))
    await click(strict, alices, "baton_deny", ALICE)
    await strict.settle()
    assert not (strict.baton.workspace.root / "alices.txt").exists()


async def test_a_click_after_the_timeout_decides_nothing(hasty: SlackHarness) -> None:
    """Nobody waits for it any more (its process died): a late Approve must not count."""
    store = ApprovalStore(hasty.baton.database)
    session = await hasty.baton.conversations.store.get_or_create(
        SessionKey.slack_thread(team_id="T0001", channel_id="C1", thread_ts="2.0")
    )
    record = await store.create(
        session_id=session.id, agent="main", task_id=None, tool="bash",
        arguments='{"command": "make deploy"}', reason="bash needs approval",
        requested_by=ALICE, channel_id="C1", owner="a-replica-that-died",
    )  # fmt: skip
    await asyncio.sleep(0.6)
    assert await hasty.click("baton_approve", record.id, user=ALICE) == 200
    await until(lambda: any("has expired" in e["text"] for e in hasty.slack.ephemerals))
    final = await store.get(record.id)
    assert final is not None and final.state == "pending" and final.decided_by is None


async def test_a_decision_on_a_tasks_request_goes_into_its_log(strict: SlackHarness) -> None:
    def respond(request: RecordedRequest) -> Reply:
        if str(request.messages[0]["content"]).startswith(MAIN_MARK):
            if request.messages[-1]["role"] == "user":
                task = {"subagent_type": "general-purpose", "prompt": "create notes.txt"}
                return Reply(tool_calls=[ToolCallSpec("task", task)])
            return Reply(text="The task finished.")
        if request.messages[-1]["role"] == "user":
            return Reply(tool_calls=[ToolCallSpec("bash", {"command": "touch notes.txt"})])
        return Reply(text="Created.")

    strict.llm.responder = respond
    ts = await strict.mention("make notes")
    await until(lambda: strict.find_button("C1", ts, "baton_approve") is not None)
    found = strict.find_button("C1", ts, "baton_approve")
    assert found is not None
    assert "task-general-purpose-1" in approval_message(strict, found)
    await click(strict, found, "baton_approve", DAVE)
    await strict.settle()
    assert (strict.baton.workspace.root / "notes.txt").exists()
    detail = await strict.baton.tracker.get("task-general-purpose-1")
    assert detail is not None
    line = next(line for line in detail.log if line.startswith("✓ Approved"))
    assert f"by <@{DAVE}> at " in line and " UTC: bash · ap-" in line
    assert found["button"]["value"] in line


def second_replica(harness: SlackHarness, *, approvers: tuple[str, ...]) -> SlackApprovals:
    """Another process on the same database, with self-approval on (the first may differ)."""
    return SlackApprovals(
        store=ApprovalStore(harness.baton.database),
        client=harness.surface.client,
        deciders=Deciders(SlackDirectory(harness.surface.client), approvers, self_approval=True),
        instances=harness.baton.instances,
        timeout_s=30.0,
        self_approval=True,
    )


async def test_another_replica_decides_by_the_deciders_stored_with_the_request(
    no_self: SlackHarness,
) -> None:
    _, found = await ask_for(no_self, "touch via-replica.txt")
    replica = second_replica(no_self, approvers=(CAROL, "SOPS"))
    approval_id = found["button"]["value"]
    # Made without self-approval: the other replica's lenient setting does not apply.
    result = await replica.click(approval_id, user=ALICE, approve=True)
    assert result.message is not None and "It stays open" in result.message
    assert await state_of(no_self, found) == "pending"
    assert (await replica.click(approval_id, user=DAVE, approve=True)).message is None
    await no_self.settle()
    assert (no_self.baton.workspace.root / "via-replica.txt").exists()
    assert f"✓ Approved by <@{DAVE}>" in approval_message(no_self, found)


async def test_another_replica_keeps_a_rules_approver_set(ruled: SlackHarness) -> None:
    _, found = await ask_for(ruled, "git push; echo done > replica-push.txt")
    replica = second_replica(ruled, approvers=(CAROL, BOB))
    approval_id = found["button"]["value"]
    for outsider in (CAROL, BOB, ALICE):
        assert (await replica.click(approval_id, user=outsider, approve=True)).message
    assert await state_of(ruled, found) == "pending"
    assert (await replica.click(approval_id, user=DAVE, approve=True)).message is None
    await ruled.settle()
    assert (ruled.baton.workspace.root / "replica-push.txt").exists()


async def test_requests_from_before_deciders_were_stored_keep_the_old_rules(
    strict: SlackHarness,
) -> None:
    session = await strict.baton.conversations.store.get_or_create(
        SessionKey.slack_thread(team_id="T0001", channel_id="C1", thread_ts="3.0")
    )
    async with strict.baton.database.sessions() as db:
        db.add(ApprovalRow(
            id="ap-old", session_id=session.id, tool="bash", arguments="{}", reason="old",
            requested_by=ALICE, channel_id="C1",
        ))  # fmt: skip
        await db.commit()
    store = ApprovalStore(strict.baton.database)
    old = await store.get("ap-old")
    assert old is not None and old.approver_sets == () and old.self_approval is True
    clicked = await strict.surface.approvals.click("ap-old", user=ALICE, approve=True)
    assert clicked.message is None
    decided = await store.recent_decisions("C1", limit=5)
    assert [r.id for r in decided] == ["ap-old"] and decided[0].decided_by == ALICE
    assert await store.recent_decisions("C2", limit=5) == []
