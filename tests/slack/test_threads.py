"""End to end: the real Bolt app in HTTP mode, signed requests, fake Slack and fake model."""

from __future__ import annotations

import asyncio
import json

from tests.fakes.openai_api import RecordedRequest, Reply, ToolCallSpec
from tests.slack.harness import ALICE, BOB, BOT, SlackHarness, next_ts, until


def answer_text(harness: SlackHarness, channel: str, thread_ts: str) -> str:
    """Everything the bot posted in a thread, blocks included."""
    return json.dumps(harness.thread(channel, thread_ts), ensure_ascii=False)


async def test_a_mention_is_answered_in_its_thread(harness: SlackHarness) -> None:
    harness.llm.script(Reply(text="Hello **Alice**, the build is green."))
    ts = await harness.mention("is the build green?")
    await harness.settle()
    posts = [m for m in harness.thread("C1", ts) if m.get("user") == BOT]
    # The answer is streamed (Markdown, as the model wrote it) and ends with 👍/👎.
    answer = next(m for m in posts if harness.slack.stream_state("C1", m["ts"]) == "stopped")
    assert answer["text"] == "Hello **Alice**, the build is green."
    assert "feedback_buttons" in json.dumps(answer["blocks"])
    progress = next(m for m in posts if m is not answer)
    assert "✓ Done" in json.dumps(progress["blocks"], ensure_ascii=False)
    assert "Cancel" not in json.dumps(
        progress["blocks"], ensure_ascii=False
    )  # the button goes when done
    user_message = harness.llm.requests[0].messages[-1]["content"]
    assert user_message == f"[Alice <@{ALICE}>] is the build green?"


async def test_memory_across_turns_in_a_thread(harness: SlackHarness) -> None:
    harness.llm.script(Reply(text="Noted: blue."), Reply(text="You said blue."))
    ts = await harness.mention("my favourite colour is blue")
    await harness.settle()
    await harness.mention("what is my favourite colour?", thread_ts=ts)
    await harness.settle()
    second = harness.llm.requests[1].messages
    contents = [m["content"] for m in second]
    assert any("my favourite colour is blue" in str(c) for c in contents)
    assert "Noted: blue." in contents
    assert "You said blue." in answer_text(harness, "C1", ts)


async def test_earlier_thread_messages_are_context_on_the_first_turn(
    harness: SlackHarness,
) -> None:
    parent = next_ts()
    harness.slack.add_message("C1", "Deploy failed with exit code 137", ALICE, ts=parent)
    harness.slack.add_message("C1", "Probably the OOM killer again", BOB, thread_ts=parent)
    harness.slack.add_message("C1", "an old bot note", BOT, thread_ts=parent, bot_id="BBOT")
    harness.llm.script(Reply(text="Exit 137 means the process was killed (OOM)."))
    await harness.mention("what does that mean?", thread_ts=parent)
    await harness.settle()
    prompt = harness.llm.requests[0].messages[-1]["content"]
    assert "<thread_context>" in prompt
    assert f"[Alice <@{ALICE}>] Deploy failed with exit code 137" in prompt
    assert f"[Bob <@{BOB}>] Probably the OOM killer again" in prompt
    assert "an old bot note" not in prompt
    assert prompt.endswith(f"[Alice <@{ALICE}>] what does that mean?")
    # Names come from the directory, read ahead (users.list) or looked up (users.info).
    assert harness.slack.calls_to("users.list") or harness.slack.calls_to("users.info")
    # Cached: asking again for the same people makes no new users.info calls.
    calls = len(harness.slack.calls_to("users.info"))
    harness.llm.script(Reply(text="ok"))
    await harness.mention("thanks", thread_ts=parent)
    await harness.settle()
    assert len(harness.slack.calls_to("users.info")) == calls
    assert "<thread_context>" not in harness.llm.requests[1].messages[-1]["content"]


async def test_direct_messages_start_a_session(harness: SlackHarness) -> None:
    harness.llm.script(Reply(text="Hi from the DM."))
    ts = next_ts()
    harness.slack.add_message("D1", "hello bot", ALICE, ts=ts)
    event = {
        "type": "message", "channel_type": "im", "channel": "D1", "user": ALICE,
        "text": "hello bot", "ts": ts, "event_ts": ts, "team": "T0001",
    }  # fmt: skip
    assert (await harness.send_event(event)).status == 200
    await harness.settle()
    assert "Hi from the DM." in answer_text(harness, "D1", ts)
    statuses = [s.status for s in harness.slack.assistant_statuses]
    assert "is working…" in statuses


async def test_bot_and_edited_messages_start_nothing(harness: SlackHarness) -> None:
    base = {"channel": "D1", "channel_type": "im", "team": "T0001"}
    for extra in (
        {"type": "message", "user": BOT, "text": "my own words", "ts": next_ts()},
        {"type": "message", "bot_id": "B2", "user": "UOTHERBOT", "text": "bot", "ts": next_ts()},
        {"type": "message", "subtype": "message_changed", "ts": next_ts(),
         "message": {"user": ALICE, "text": "edited"}},
        {"type": "message", "subtype": "message_deleted", "ts": next_ts()},
    ):  # fmt: skip
        assert (await harness.send_event({**base, **extra})).status == 200
    await harness.settle()
    assert harness.llm.requests == []
    assert harness.slack.calls_to("chat.postMessage") == []


async def test_retries_and_double_deliveries_start_one_run(harness: SlackHarness) -> None:
    harness.llm.script(Reply(text="Only once."))
    ts = next_ts()
    text = f"<@{BOT}> do it once"
    harness.slack.add_message("C1", text, ALICE, ts=ts)
    mention = {"type": "app_mention", "user": ALICE, "text": text, "ts": ts, "channel": "C1",
               "event_ts": ts, "team": "T0001"}  # fmt: skip
    message = {**mention, "type": "message", "channel_type": "channel"}
    await harness.send_event(mention, event_id="EvSAME")
    await harness.send_event(mention, event_id="EvSAME", retry=1)
    await harness.send_event(message, event_id="EvOTHER")
    await harness.settle()
    assert len(harness.llm.requests) == 1
    answers = [t for t in harness.bot_texts("C1", ts) if "Only once." in t]
    assert len(answers) == 1


async def test_ack_does_not_wait_for_the_model(harness: SlackHarness) -> None:
    release = asyncio.Event()

    async def slow(request: RecordedRequest) -> Reply:
        await release.wait()
        return Reply(text="finally")

    harness.llm.responder = slow
    ts = await harness.mention("slow question")  # asserts HTTP 200
    await until(lambda: len(harness.llm.requests) == 1)
    assert "finally" not in answer_text(harness, "C1", ts)  # acked while the model works
    release.set()
    await harness.settle()
    assert "finally" in answer_text(harness, "C1", ts)


async def test_bad_signatures_and_stale_requests_are_refused(harness: SlackHarness) -> None:
    body = json.dumps({"type": "event_callback", "event": {"type": "app_mention"}})
    url = f"{harness.url}/slack/events"
    from tests.slack.harness import sign

    forged = sign(body, secret="not-the-secret")
    stale = sign(body, timestamp=1_000_000)
    for headers in (forged, stale, {}):
        async with harness.http.post(
            url, data=body, headers={"Content-Type": "application/json", **headers}
        ) as response:
            assert response.status == 401
    assert harness.llm.requests == []


async def test_health_check(harness: SlackHarness) -> None:
    async with harness.http.get(f"{harness.url}/healthz") as response:
        assert response.status == 200
        assert (await response.json())["ok"] is True


async def test_progress_lines_show_tool_calls(harness: SlackHarness) -> None:
    (harness.baton.workspace.root / "notes.md").write_text("# Notes\n")
    harness.llm.script(
        Reply(tool_calls=[ToolCallSpec("read_file", {"path": "notes.md"})]),
        Reply(text="The notes have a heading."),
    )
    ts = await harness.mention("summarise notes.md")
    await harness.settle()
    progress = next(
        m
        for m in harness.thread("C1", ts)
        if "▸ read_file" in json.dumps(m.get("blocks", []), ensure_ascii=False)
    )
    rendered = json.dumps(progress["blocks"], ensure_ascii=False)
    assert "▸ read_file notes.md" in rendered and "✓" in rendered
    assert "2 turns" in rendered and "tokens" in rendered


async def test_direct_agent_run_and_unknown_agent(harness: SlackHarness) -> None:
    harness.llm.responder = lambda request: (
        Reply(text="The main agent knows explore found 3 files.")
        if str(request.messages[0]["content"]).startswith("You are Baton")
        else Reply(text="explore: found 3 files.")
    )
    ts = await harness.mention("@explore how many files are there?")
    await harness.settle()
    assert len(harness.llm.requests) == 1 and not harness.main_requests()
    assert "explore: found 3 files." in answer_text(harness, "C1", ts)
    assert "task-explore-1" in answer_text(harness, "C1", ts)

    unknown = await harness.mention("@nobody do things")
    await harness.settle()
    assert len(harness.llm.requests) == 1  # no model call for an unknown agent
    reply = answer_text(harness, "C1", unknown)
    assert "no agent named `nobody`" in reply and "`explore`" in reply

    await harness.mention("what did explore find?", thread_ts=ts)
    await harness.settle()
    history = [str(m["content"]) for m in harness.main_requests()[0].messages]
    assert any("explore: found 3 files." in c for c in history)


async def test_cancel_from_the_progress_message(harness: SlackHarness) -> None:
    started = asyncio.Event()

    async def hang(request: RecordedRequest) -> Reply:
        started.set()
        await asyncio.Event().wait()
        return Reply(text="never")

    harness.llm.responder = hang
    ts = await harness.mention("take forever")
    await asyncio.wait_for(started.wait(), 10)
    await until(lambda: any("Cancel" in json.dumps(m.get("blocks", []), ensure_ascii=False)
                            for m in harness.thread("C1", ts)))  # fmt: skip
    progress = next(
        m
        for m in harness.thread("C1", ts)
        if "Cancel" in json.dumps(m.get("blocks", []), ensure_ascii=False)
    )
    button = next(
        element
        for block in progress["blocks"] if block["type"] == "actions"
        for element in block["elements"]
    )  # fmt: skip
    # Someone else may not cancel; the person who started the run may.
    assert await harness.click(button["action_id"], button["value"], user=BOB,
                               message_ts=progress["ts"]) == 200  # fmt: skip
    await asyncio.sleep(0.2)
    assert harness.surface.turns.runs
    assert any("Only the person who started" in e["text"] for e in harness.slack.ephemerals)
    assert await harness.click(button["action_id"], button["value"], user=ALICE,
                               message_ts=progress["ts"]) == 200  # fmt: skip
    await harness.settle()
    final = harness.slack.get_message("C1", progress["ts"])
    assert final is not None
    assert f"Cancelled by <@{ALICE}>" in json.dumps(final["blocks"], ensure_ascii=False)
    assert "never" not in answer_text(harness, "C1", ts)


async def test_a_60000_character_answer_is_delivered_whole(harness: SlackHarness) -> None:
    paragraphs = [f"Paragraph {n}: " + "lorem ipsum dolor sit amet " * 20 for n in range(200)]
    answer = "\n\n".join(paragraphs)[:60_000]
    assert len(answer) == 60_000
    harness.llm.script(Reply(text=answer))
    ts = await harness.mention("write a lot")
    await harness.settle()
    files = [f for f in harness.slack.files if f.thread_ts == ts]
    if files:
        assert files[0].content.decode() == answer
    else:
        posted = "".join(
            b["text"] for m in harness.thread("C1", ts) for b in m.get("blocks", [])
            if b["type"] == "markdown"
        )  # fmt: skip
        assert posted.replace("\n", "") == answer.replace("\n", "")


async def test_rate_limits_during_a_run_still_deliver_the_answer(harness: SlackHarness) -> None:
    harness.llm.script(
        Reply(tool_calls=[ToolCallSpec("list_dir", {})], chunk_delay=0.01),
        Reply(text="Listed; all fine."),
    )
    harness.slack.fail_next("chat.update", status=429, retry_after=1, times=2)
    harness.slack.fail_next("chat.postMessage", status=429, retry_after=1, times=1)
    ts = await harness.mention("list things")
    await harness.settle()
    assert "Listed; all fine." in answer_text(harness, "C1", ts)
    assert any(c.failed for c in harness.slack.calls)
    progress = [
        m
        for m in harness.thread("C1", ts)
        if "Done" in json.dumps(m.get("blocks", []), ensure_ascii=False)
    ]
    assert progress  # the final state was written despite the 429s


async def test_a_model_failure_is_reported_in_the_thread(harness: SlackHarness) -> None:
    from tests.fakes.openai_api import ErrorReply

    harness.llm.responder = lambda request: ErrorReply(status=401, message="invalid api key")
    ts = await harness.mention("hello?")
    await harness.settle()
    text = answer_text(harness, "C1", ts)
    assert "HTTP 401" in text and "invalid api key" in text


async def test_steering_reaches_the_running_agent(harness: SlackHarness) -> None:
    first_call = asyncio.Event()
    go_on = asyncio.Event()

    async def respond(request: RecordedRequest) -> Reply:
        if len(harness.llm.requests) == 1:
            first_call.set()
            await go_on.wait()
            return Reply(tool_calls=[ToolCallSpec("list_dir", {})])
        return Reply(text="Adjusted as Bob asked.")

    harness.llm.responder = respond
    ts = await harness.mention("start the review")
    await asyncio.wait_for(first_call.wait(), 10)
    steer_ts = next_ts()
    harness.slack.add_message("C1", "also check the tests please", BOB, ts=steer_ts, thread_ts=ts)
    event = {
        "type": "message", "channel_type": "channel", "channel": "C1", "user": BOB,
        "text": "also check the tests please", "ts": steer_ts, "thread_ts": ts,
        "event_ts": steer_ts, "team": "T0001",
    }  # fmt: skip
    await harness.send_event(event)
    # Acknowledged with a reaction on Bob's message, not with a message of its own.
    await until(lambda: harness.slack.reactions.get(("C1", steer_ts)) == ["eyes"])
    go_on.set()
    await harness.settle()
    second = harness.llm.requests[1].messages
    assert second[-1]["role"] == "user"
    assert second[-1]["content"] == (
        f"[Bob <@{BOB}>, while you were working] also check the tests please"
    )
    assert len(harness.main_requests()) == 2  # no second run was started for it
    assert harness.bot_texts("C1", ts)[1:-1] == []  # progress, then only the answer


async def test_progress_updates_are_coalesced_and_show_the_last_lines(
    harness: SlackHarness,
) -> None:
    calls = [ToolCallSpec("list_dir", {}, id=f"c{n}") for n in range(20)]
    harness.llm.script(Reply(tool_calls=calls), Reply(text="Listed twenty times."))
    began = asyncio.get_running_loop().time()
    ts = await harness.mention("list a lot")
    await harness.settle()
    elapsed = asyncio.get_running_loop().time() - began
    updates = harness.slack.calls_to("chat.update")
    # 40 progress lines, yet at most one write per second plus the final one.
    assert 1 <= len(updates) <= int(elapsed) + 2
    final = json.dumps(updates[-1].params["blocks"], ensure_ascii=False)
    assert final.count("▸ list_dir") + final.count("✓") >= 12
    assert "✓ Done" in final
    assert "Listed twenty times." in answer_text(harness, "C1", ts)


async def test_a_sustained_rate_limit_still_delivers_the_answer(harness: SlackHarness) -> None:
    started = asyncio.Event()
    go_on = asyncio.Event()

    async def respond(request: RecordedRequest) -> Reply:
        started.set()
        await go_on.wait()
        return Reply(text="Worth the wait.")

    harness.llm.responder = respond
    ts = await harness.mention("slow and limited")
    await asyncio.wait_for(started.wait(), 10)
    # More 429s in a row than the client's own retries absorb.
    harness.slack.fail_next("chat.postMessage", status=429, retry_after=1, times=5)
    go_on.set()
    await harness.settle()
    assert "Worth the wait." in answer_text(harness, "C1", ts)


async def test_cancel_stops_the_conversation_not_just_the_call(harness: SlackHarness) -> None:
    started = asyncio.Event()

    async def hang(request: RecordedRequest) -> Reply:
        started.set()
        await asyncio.Event().wait()
        return Reply(text="never")

    harness.llm.responder = hang
    ts = await harness.mention("long job")
    await asyncio.wait_for(started.wait(), 10)
    steer_ts = next_ts()
    harness.slack.add_message("C1", "and also this", BOB, ts=steer_ts, thread_ts=ts)
    await harness.send_event({
        "type": "message", "channel_type": "channel", "channel": "C1", "user": BOB,
        "text": "and also this", "ts": steer_ts, "thread_ts": ts, "event_ts": steer_ts,
    })  # fmt: skip
    await until(lambda: harness.slack.reactions.get(("C1", steer_ts)) == ["eyes"])
    found = harness.find_button("C1", ts, "baton_cancel_run")
    assert found is not None
    await harness.click("baton_cancel_run", found["button"]["value"], user=ALICE,
                        message_ts=found["message"]["ts"])  # fmt: skip
    await harness.settle()
    assert len(harness.llm.requests) == 1  # no follow-up run after the cancel
    assert any("Not handled (the run was cancelled)" in t for t in harness.bot_texts("C1", ts))
