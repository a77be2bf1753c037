"""Approvals end to end: buttons the bot posted, clicked with signed requests."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.slack.surface import SlackSurface
from bot.store import SessionKey
from bot.store.approvals import ApprovalStore
from tests.fakes.openai_api import RecordedRequest, Reply, ToolCallSpec
from tests.slack.harness import ALICE, BOB, BOT, MAIN_MARK, SlackHarness, start_harness, until

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


async def ask_for(harness: SlackHarness, command: str) -> tuple[str, dict[str, Any]]:
    """Start a run whose model wants `command`; return the thread and the Approve button."""
    harness.llm.script(
        Reply(tool_calls=[ToolCallSpec("bash", {"command": command}, id="cmd")]),
        Reply(text="Done with the command."),
    )
    ts = await harness.mention("please run it")
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
    restarted = SlackSurface(strict.baton)
    await restarted.approvals.expire_abandoned()
    final = await store.get(record.id)
    assert final is not None and final.state == "expired"
    message = strict.slack.get_message("C1", ts)
    assert message is not None
    assert "Baton restarted before anyone decided" in json.dumps(message["blocks"])


async def test_clicks_still_work_while_shutting_down(strict: SlackHarness) -> None:
    _, found = await ask_for(strict, "touch during-shutdown.txt")
    strict.surface.threads.accepting = False  # SIGTERM: no new work, runs may finish
    await click(strict, found, "baton_approve", ALICE)
    await strict.settle()
    assert (strict.baton.workspace.root / "during-shutdown.txt").exists()
    ignored = await strict.mention("a new question while stopping")
    await strict.settle()
    assert not any(BOT == m.get("user") for m in strict.thread("C1", ignored))
