"""Traces end to end: a run in Slack, exported over OTLP/HTTP to a fake collector.

Each test drives the real bot (Bolt app, turn machine, engine, sub-agent runner, the
OTLP exporter) against the fake Slack, the fake model and the fake collector, then reads
the spans the collector decoded and the bytes it was sent.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from bot.config import TracingConfig
from bot.redaction import MASK
from bot.tracing import MAX_ATTRIBUTE_LENGTH
from tests.fakes.openai_api import ErrorReply, RecordedRequest, Reply, ToolCallSpec
from tests.fakes.otlp import FakeCollector, ReceivedSpan
from tests.slack.harness import ALICE, MAIN_MARK, SlackHarness, start_harness, until

# What must never leave in a span: tokens and keys in what people write and what tools
# read, found by their shape (Slack, OpenAI) or because Baton is configured with them.
SLACK_TOKEN = "xoxb-4242424242-1313131313-QWERTYuiopASDFgh"
API_KEY = "sk-proj-Zq9XwV8uT7sR6qP5oN4mLkJ"
GITHUB_TOKEN = "ghp_S3cr3tG1tHubT0kenValue000000000000"
WEBHOOK_SECRET = "hunter2-correct-horse-battery"
SECRETS = (SLACK_TOKEN, API_KEY, GITHUB_TOKEN, WEBHOOK_SECRET, "QWERTYuiopASDFgh")
# Words of the message and of the file the sub-agent reads: content, kept out unless
# content capture is on.
ASKED = "Summarise the PURPLE-ELEPHANT notes"
FILE_WORDS = "TANGERINE-OCTOPUS"
NOTES = f"{FILE_WORDS} notes\nslack {SLACK_TOKEN}\nkey {API_KEY}\ngithub {GITHUB_TOKEN}\n"
MESSAGE = f"{ASKED}; the bot token is {SLACK_TOKEN}, the key {API_KEY}, {WEBHOOK_SECRET}"

INVOKE_BATON = "invoke_agent baton"
CHAT = "chat fake-model"


async def traced_harness(
    tmp_path: Path, collector: FakeCollector, *, capture_content: bool = False, **overrides: Any
) -> AsyncIterator[SlackHarness]:
    tracing = TracingConfig(endpoint=collector.traces_url, capture_content=capture_content)
    async for harness in start_harness(
        tmp_path,
        tracing=tracing,
        github_token=GITHUB_TOKEN,
        github_webhook_secret=WEBHOOK_SECRET,
        **overrides,
    ):
        yield harness


@pytest.fixture
async def collector() -> AsyncIterator[FakeCollector]:
    async with FakeCollector() as fake:
        yield fake


@pytest.fixture
async def traced(tmp_path: Path, collector: FakeCollector) -> AsyncIterator[SlackHarness]:
    async for harness in traced_harness(tmp_path, collector):
        yield harness


@pytest.fixture
async def captured(tmp_path: Path, collector: FakeCollector) -> AsyncIterator[SlackHarness]:
    async for harness in traced_harness(tmp_path, collector, capture_content=True):
        yield harness


def is_main(request: RecordedRequest) -> bool:
    return str(request.messages[0]["content"]).startswith(MAIN_MARK)


def delegating(*, background: bool = False) -> Callable[[RecordedRequest], Reply]:
    """The model: the main agent lists the workspace and delegates reading the notes to
    `explore` in one answer; the child reads them and answers; the main agent answers."""

    def respond(request: RecordedRequest) -> Reply:
        last = request.messages[-1]
        if is_main(request):
            if last["role"] == "user":
                task = {
                    "subagent_type": "explore",
                    "prompt": f"Read notes.txt and summarise it. {FILE_WORDS}",
                    "description": "Read the notes",
                    "background": background,
                }
                return Reply(
                    tool_calls=[
                        ToolCallSpec("list_dir", {"path": "."}, id="call_list"),
                        ToolCallSpec("task", task, id="call_task"),
                    ]
                )
            return Reply(text="The notes are summarised.")
        if last["role"] == "user":
            return Reply(
                tool_calls=[ToolCallSpec("read_file", {"path": "notes.txt"}, id="call_read")]
            )
        return Reply(text=f"They say {FILE_WORDS}.")

    return respond


async def run_and_export(harness: SlackHarness) -> str:
    """Mention the bot with MESSAGE, wait for everything to end, flush the spans."""
    (harness.baton.workspace.root / "notes.txt").write_text(NOTES)
    ts = await harness.mention(MESSAGE)
    await harness.settle()
    await harness.baton.tracing.flush()
    return ts


def child_of(span: ReceivedSpan, parent: ReceivedSpan) -> bool:
    return span.parent_id == parent.span_id and span.trace_id == parent.trace_id


def assert_no_secrets(collector: FakeCollector) -> None:
    payload = collector.payload
    assert payload, "nothing was exported"
    for secret in SECRETS:
        assert secret.encode() not in payload, secret


async def test_one_run_with_a_tool_and_a_sub_agent_is_one_trace_with_the_right_parents(
    traced: SlackHarness, collector: FakeCollector
) -> None:
    traced.llm.responder = delegating()
    await run_and_export(traced)

    run = collector.one(INVOKE_BATON)
    assert run.parent_id == ""  # the run is the root
    assert {span.trace_id for span in collector.spans} == {run.trace_id}
    assert run.resource["service.name"] == "baton"
    assert run.scope == "baton"
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["gen_ai.agent.name"] == "baton"
    assert run.attributes["baton.channel.id"] == "C1"
    assert run.attributes["baton.user.id"] == ALICE
    assert run.attributes["baton.run.outcome"] == "done"
    assert run.attributes["gen_ai.usage.input_tokens"] > 0
    assert run.attributes["gen_ai.usage.output_tokens"] > 0
    assert run.attributes["baton.run.tokens"] > run.attributes["gen_ai.usage.input_tokens"]

    listing = collector.one("execute_tool list_dir")
    task = collector.one("execute_tool task")
    child = collector.one("invoke_agent explore")
    read = collector.one("execute_tool read_file")
    assert child_of(listing, run) and child_of(task, run)
    assert child_of(child, task)  # the sub-agent, under the call that started it
    assert child_of(read, child)  # its own tool call, under the sub-agent

    for span, name, call_id in (
        (listing, "list_dir", "call_list"),
        (task, "task", "call_task"),
        (read, "read_file", "call_read"),
    ):
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
        assert span.attributes["gen_ai.tool.name"] == name
        assert span.attributes["gen_ai.tool.call.id"] == call_id
        assert span.status_code != 2, span  # none failed

    assert child.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert child.attributes["gen_ai.agent.name"] == "explore"
    assert child.attributes["gen_ai.agent.id"] == "task-explore-1"
    assert child.attributes["gen_ai.request.model"] == "fake-model"
    assert child.attributes["baton.task.background"] is False
    assert child.attributes["baton.task.depth"] == 1
    assert child.attributes["baton.task.state"] == "completed"

    # Each model call is a span of its agent: the main agent's two under the run, the
    # child's (its answer, then the handoff Baton asks it for once) under the child.
    chats = collector.named(CHAT)
    assert sorted(c.parent_id for c in chats) == sorted([run.span_id] * 2 + [child.span_id] * 3)
    for chat in chats:
        assert chat.kind == 3  # SPAN_KIND_CLIENT
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.provider.name"] == "openai"
        assert chat.attributes["gen_ai.request.model"] == "fake-model"
        assert chat.attributes["gen_ai.response.model"] == "fake-model"
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0
        assert chat.attributes["gen_ai.usage.output_tokens"] > 0
        assert chat.attributes["gen_ai.response.finish_reasons"] in (["stop"], ["tool_calls"])
        assert "gen_ai.input.messages" not in chat.attributes
    # Only Baton's spans: no HTTP client, Slack or database instrumentation rode along.
    assert set(collector.names()) == {
        INVOKE_BATON,
        CHAT,
        "execute_tool list_dir",
        "execute_tool task",
        "invoke_agent explore",
        "execute_tool read_file",
    }

    # No content without OTEL_CAPTURE_CONTENT: not the question, not the file, no secret.
    payload = collector.payload
    for words in ("PURPLE-ELEPHANT", FILE_WORDS, "notes.txt", "Summarise"):
        assert words.encode() not in payload, words
    assert_no_secrets(collector)
    assert collector.refused == []


async def test_captured_content_shows_the_messages_with_their_secrets_masked(
    captured: SlackHarness, collector: FakeCollector
) -> None:
    captured.llm.responder = delegating()
    await run_and_export(captured)

    payload = collector.payload
    assert b"PURPLE-ELEPHANT" in payload and FILE_WORDS.encode() in payload
    assert_no_secrets(collector)
    assert f"xoxb-{MASK}".encode() in payload  # masked where it stood, its kind still shown

    read = collector.one("execute_tool read_file")
    assert json.loads(read.attributes["gen_ai.tool.call.arguments"]) == {"path": "notes.txt"}
    result = read.attributes["gen_ai.tool.call.result"]
    assert FILE_WORDS in result and MASK in result

    run = collector.one(INVOKE_BATON)
    main_calls = [c for c in collector.named(CHAT) if c.parent_id == run.span_id]
    sent = [json.loads(c.attributes["gen_ai.input.messages"]) for c in main_calls]
    first, second = sorted(sent, key=len)
    assert first[-1]["role"] == "user" and "PURPLE-ELEPHANT" in first[-1]["parts"][0]["content"]
    assert [m["role"] for m in second[-2:]] == ["tool", "tool"]
    assert all(m["role"] != "system" for m in first + second)
    assert "You are Baton" in main_calls[0].attributes["gen_ai.system_instructions"]
    answered = [json.loads(c.attributes["gen_ai.output.messages"]) for c in collector.named(CHAT)]
    calls = [p for a in answered for p in a[0]["parts"] if p["type"] == "tool_call"]
    assert {call["name"] for call in calls} == {"list_dir", "task", "read_file"}


async def test_a_background_sub_agent_stays_in_the_trace_of_the_run_that_started_it(
    traced: SlackHarness, collector: FakeCollector
) -> None:
    traced.llm.responder = delegating(background=True)
    ts = await run_and_export(traced)
    await until(lambda: "task-explore-1" in json.dumps(traced.thread("C1", ts)))
    await traced.settle()
    await traced.baton.tracing.flush()

    run = collector.one(INVOKE_BATON)
    child = collector.one("invoke_agent explore")
    assert child.attributes["baton.task.background"] is True
    assert child_of(child, collector.one("execute_tool task"))
    assert run in collector.ancestors(child)
    read = collector.one("execute_tool read_file")
    assert child_of(read, child)
    assert_no_secrets(collector)


@pytest.mark.parametrize(
    ("button", "decision"), [("baton_approve", "approved"), ("baton_deny", "denied")]
)
async def test_waiting_for_a_person_is_a_span_with_the_decision(
    traced: SlackHarness, collector: FakeCollector, button: str, decision: str
) -> None:
    command = f"touch ruled-{decision}.txt"
    traced.llm.script(
        Reply(tool_calls=[ToolCallSpec("bash", {"command": command}, id="call_bash")]),
        Reply(text="Done."),
    )
    ts = await traced.mention("please run it")
    await until(lambda: traced.find_button("C1", ts, "baton_approve") is not None)
    found = traced.find_button("C1", ts, "baton_approve")
    assert found is not None
    clicked = await traced.click(
        button, found["button"]["value"], user=ALICE, message_ts=found["message"]["ts"]
    )
    assert clicked == 200
    await traced.settle()
    await traced.baton.tracing.flush()

    bash = collector.one("execute_tool bash")
    waiting = collector.one("approval bash")
    assert child_of(waiting, bash)
    assert child_of(bash, collector.one(INVOKE_BATON))
    assert waiting.attributes["baton.approval.decision"] == decision
    assert waiting.attributes["gen_ai.tool.name"] == "bash"
    assert waiting.attributes["gen_ai.tool.call.id"] == "call_bash"
    assert "baton.approval.reason" not in waiting.attributes
    if decision == "approved":
        assert bash.status_code != 2
    else:
        assert bash.status_code == 2 and bash.attributes["error.type"] == "not_approved"
    assert command.encode() not in collector.payload  # the arguments are content


async def test_secrets_in_tool_names_ids_and_arguments_stay_out(
    traced: SlackHarness, collector: FakeCollector
) -> None:
    traced.llm.script(
        Reply(
            tool_calls=[
                ToolCallSpec(f"leak_{SLACK_TOKEN}", {"x": 1}, id="call_a"),
                ToolCallSpec("list_dir", {"path": WEBHOOK_SECRET}, id=f"call_{GITHUB_TOKEN}"),
                ToolCallSpec("glob", {"pattern": "*"}, id=API_KEY),
            ]
        ),
        Reply(text="Done."),
    )
    await traced.mention("go")
    await traced.settle()
    await traced.baton.tracing.flush()

    invented = collector.one("execute_tool unknown")  # the model's name names nothing
    assert invented.attributes["gen_ai.tool.name"] == "unknown"
    assert invented.status_code == 2 and invented.attributes["error.type"] == "unknown_tool"
    # Ids are the model's text too: Baton's own secrets and key-shaped strings are masked.
    listing = collector.one("execute_tool list_dir")
    assert listing.attributes["gen_ai.tool.call.id"] == f"call_{MASK}"
    assert "gen_ai.tool.call.arguments" not in listing.attributes
    assert collector.one("execute_tool glob").attributes["gen_ai.tool.call.id"] == f"sk-{MASK}"
    assert_no_secrets(collector)
    assert b"leak_" not in collector.payload


async def test_a_failed_model_call_is_an_error_span_without_the_providers_words(
    traced: SlackHarness, collector: FakeCollector
) -> None:
    # A provider (or a proxy before it) quoting what it was sent, keys included.
    leaky = f"upstream refused key {API_KEY} for {WEBHOOK_SECRET}: Bearer tok-0123456789abcdef"
    traced.llm.responder = lambda request: ErrorReply(status=400, message=leaky)
    await traced.mention("hello?")
    await traced.settle()
    await traced.baton.tracing.flush()

    chat = collector.one(CHAT)
    assert chat.status_code == 2 and chat.attributes["error.type"] == "LLMError"
    assert chat.status_message == "LLMError"  # the class, never the provider's words
    run = collector.one(INVOKE_BATON)
    assert child_of(chat, run)
    assert run.attributes["baton.run.outcome"] == "failed" and run.status_code == 2
    assert b"upstream refused" not in collector.payload
    assert b"tok-0123456789abcdef" not in collector.payload
    assert_no_secrets(collector)


async def test_a_huge_argument_is_cut_to_a_bounded_attribute(
    tmp_path: Path, collector: FakeCollector
) -> None:
    huge = "A" * 40_000 + SLACK_TOKEN
    async for harness in traced_harness(tmp_path, collector, capture_content=True):
        harness.llm.script(
            Reply(tool_calls=[ToolCallSpec("list_dir", {"path": huge}, id="call_huge")]),
            Reply(text="Done."),
        )
        await harness.mention("go")
        await harness.settle()
        await harness.baton.tracing.flush()

    listing = collector.one("execute_tool list_dir")
    arguments = listing.attributes["gen_ai.tool.call.arguments"]
    assert arguments.startswith('{"path": "AAAA') and "more characters]" in arguments
    assert len(arguments) < 4_200
    for span in collector.spans:
        for value in span.attributes.values():
            assert len(str(value)) <= MAX_ATTRIBUTE_LENGTH + 100
    assert len(collector.payload) < 200_000
    assert_no_secrets(collector)


async def test_without_an_endpoint_nothing_is_exported(
    tmp_path: Path, collector: FakeCollector
) -> None:
    async for harness in start_harness(tmp_path):
        assert not harness.baton.tracing.enabled
        harness.llm.responder = delegating()
        ts = await run_and_export(harness)
        assert "The notes are summarised." in json.dumps(harness.thread("C1", ts))
    assert collector.bodies == [] and collector.refused == []
