"""The agent loop against the fake OpenAI server, through the real openai client."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import openai
import pytest

from bot.engine import (
    ApprovalDecision,
    ApprovalRequest,
    ApprovalRequired,
    ChatMessage,
    Done,
    Engine,
    ErrorEvent,
    HookDecision,
    LLMClient,
    RunEvent,
    TextDelta,
    ToolInvocation,
    ToolResult,
    ToolStart,
)
from bot.errors import ToolError
from bot.tools import ToolRegistry, Workspace, build_workspace_tools
from bot.tools.base import Tool, ToolArguments
from tests.conftest import TEST_RETRY_DEADLINE_S
from tests.fakes.openai_api import ErrorReply, FakeOpenAI, Hang, Reply, ToolCallSpec, Usage
from tests.processes import alive


def make_engine(llm: LLMClient, workspace: Workspace, **kwargs: object) -> Engine:
    options: dict[str, object] = {"model": "fake-model", "system_prompt": "You are a test agent."}
    options.update(kwargs)
    return Engine(llm=llm, tools=build_workspace_tools(workspace), **options)  # type: ignore[arg-type]


async def collect(engine: Engine, prompt: str, **kwargs: object) -> list[RunEvent]:
    return [event async for event in engine.run_stream(prompt, **kwargs)]  # type: ignore[arg-type]


def done_of(events: list[RunEvent]) -> Done:
    assert isinstance(events[-1], Done), events[-1]
    return events[-1]


def taking(pending: list[ChatMessage]) -> Callable[[], list[ChatMessage]]:
    """A steering inbox: each call takes the messages waiting in `pending`."""

    def inbox() -> list[ChatMessage]:
        taken = list(pending)
        pending.clear()
        return taken

    return inbox


def tool_messages(request_messages: list[dict]) -> list[dict]:
    return [m for m in request_messages if m["role"] == "tool"]


async def test_text_answer_streams_and_reports_usage(
    fake_llm: FakeOpenAI, llm: LLMClient, workspace: Workspace
) -> None:
    fake_llm.script(
        Reply(
            text="Hello there, this is a streamed answer.",
            usage=Usage(prompt_tokens=42, completion_tokens=9),
        )
    )
    events = await collect(make_engine(llm, workspace), "hi")
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 1
    assert "".join(deltas) == "Hello there, this is a streamed answer."
    done = done_of(events)
    assert done.final_text == "Hello there, this is a streamed answer."
    assert done.stop_reason == "completed"
    assert done.turns == 1
    assert (done.usage.prompt_tokens, done.usage.completion_tokens) == (42, 9)
    request = fake_llm.requests[0]
    assert request.stream
    assert request.messages[0] == {"role": "system", "content": "You are a test agent."}
    assert request.messages[-1] == {"role": "user", "content": "hi"}
    assert set(request.tools) == {
        "read_file",
        "write_file",
        "edit_file",
        "list_dir",
        "glob",
        "grep",
        "bash",
        "skill",
    }


async def test_tool_call_result_goes_back_to_the_model(
    fake_llm: FakeOpenAI, llm: LLMClient, workspace: Workspace
) -> None:
    (workspace.root / "notes.txt").write_text("alpha\nbeta\n")
    fake_llm.script(
        Reply(
            tool_calls=[ToolCallSpec("read_file", {"path": "notes.txt"}, id="c1")],
            usage=Usage(prompt_tokens=10, completion_tokens=5),
        ),
        Reply(
            text="The file says alpha and beta.", usage=Usage(prompt_tokens=20, completion_tokens=7)
        ),
    )
    transcript: list[ChatMessage] = []
    events = await collect(make_engine(llm, workspace), "read notes", transcript=transcript)
    starts = [e for e in events if isinstance(e, ToolStart)]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert [s.name for s in starts] == ["read_file"]
    assert not results[0].is_error and "alpha" in results[0].output
    second = fake_llm.requests[1].messages
    assert second[-2]["tool_calls"][0]["id"] == "c1"
    assert second[-1]["role"] == "tool" and second[-1]["tool_call_id"] == "c1"
    assert "     1\talpha" in second[-1]["content"]
    done = done_of(events)
    assert done.turns == 2
    assert done.usage.prompt_tokens == 30 and done.usage.completion_tokens == 12
    assert [m.role for m in transcript] == ["user", "assistant", "tool", "assistant"]
    fake_llm.assert_all_used()


async def test_parallel_tool_calls_run_concurrently_and_answer_in_call_order(
    fake_llm: FakeOpenAI, llm: LLMClient, workspace: Workspace
) -> None:
    # Each command waits for the file the other one creates: run one after the other,
    # the first would only end by its timeout.
    wait_for = "for i in $(seq 200); do [ -f {flag} ] && echo {name} && exit 0; sleep 0.05; done"
    first = "touch a.flag; " + wait_for.format(flag="b.flag", name="first-done") + "; exit 3"
    second = "touch b.flag; " + wait_for.format(flag="a.flag", name="second-done") + "; exit 3"
    fake_llm.script(
        Reply(
            tool_calls=[
                ToolCallSpec("bash", {"command": first, "timeout_s": 30}, id="one"),
                ToolCallSpec("bash", {"command": second, "timeout_s": 30}, id="two"),
            ]
        ),
        Reply(text="both done"),
    )
    events = await collect(make_engine(llm, workspace), "go")
    assert done_of(events).final_text == "both done"
    answered = tool_messages(fake_llm.requests[1].messages)
    assert [m["tool_call_id"] for m in answered] == ["one", "two"]
    assert (
        answered[0]["content"].startswith("exit code 0") and "first-done" in answered[0]["content"]
    )
    assert (
        answered[1]["content"].startswith("exit code 0") and "second-done" in answered[1]["content"]
    )


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (ToolCallSpec("read_file", '{"path": "x.txt"', id="bad"), "not valid JSON"),
        (ToolCallSpec("read_file", '["x.txt"]', id="bad"), "must be a JSON object"),
        (ToolCallSpec("read_file", {"file": "x.txt"}, id="bad"), "invalid arguments for read_file"),
        (ToolCallSpec("launch_rockets", {}, id="bad"), "no tool named 'launch_rockets'"),
    ],
)
async def test_bad_tool_calls_go_back_to_the_model_as_errors(
    fake_llm: FakeOpenAI, llm: LLMClient, workspace: Workspace, spec: ToolCallSpec, expected: str
) -> None:
    fake_llm.script(Reply(tool_calls=[spec]), Reply(text="sorry, fixed"))
    events = await collect(make_engine(llm, workspace), "go")
    result = next(e for e in events if isinstance(e, ToolResult))
    assert result.is_error
    assert expected in result.output
    [answer] = tool_messages(fake_llm.requests[1].messages)
    assert expected in answer["content"]
    assert done_of(events).stop_reason == "completed"


async def test_unknown_tool_error_lists_the_available_tools(
    fake_llm: FakeOpenAI, llm: LLMClient, workspace: Workspace
) -> None:
    fake_llm.script(Reply(tool_calls=[ToolCallSpec("nope", {})]), Reply(text="ok"))
    events = await collect(make_engine(llm, workspace), "go")
    result = next(e for e in events if isinstance(e, ToolResult))
    assert "read_file" in result.output and "bash" in result.output


async def test_max_turns_stops_with_a_clear_note_and_keeps_partial_text(
    fake_llm: FakeOpenAI, llm: LLMClient, workspace: Workspace
) -> None:
    fake_llm.responder = lambda request: Reply(
        text=f"step {len(request.messages)}",
        tool_calls=[ToolCallSpec("list_dir", {})],
    )
    transcript: list[ChatMessage] = []
    events = await collect(make_engine(llm, workspace, max_turns=3), "loop", transcript=transcript)
    done = done_of(events)
    assert done.stop_reason == "max_turns"
    assert done.turns == 3
    assert len(fake_llm.requests) == 3
    assert done.final_text.startswith("step ")
    assert "reached the limit of 3 turns" in done.final_text
    assert transcript[-1].role == "assistant" and "limit of 3 turns" in (
        transcript[-1].content or ""
    )


async def test_provider_http_500_becomes_an_error_event(
    fake_llm: FakeOpenAI, llm: LLMClient, workspace: Workspace
) -> None:
    fake_llm.script(ErrorReply(status=500, message="the GPUs are on fire"))
    events = await collect(make_engine(llm, workspace), "hi")
    errors = [e for e in events if isinstance(e, ErrorEvent)]
    assert len(errors) == 1
    assert "HTTP 500" in errors[0].message and "the GPUs are on fire" in errors[0].message
    assert done_of(events).stop_reason == "error"


async def test_provider_timeout_becomes_an_error_event(
    fake_llm: FakeOpenAI, workspace: Workspace
) -> None:
    client = openai.AsyncOpenAI(
        api_key="sk-test", base_url=fake_llm.url, max_retries=0, timeout=0.5
    )
    try:
        fake_llm.script(Hang())
        events = await collect(
            make_engine(LLMClient(client, retry_deadline_s=TEST_RETRY_DEADLINE_S), workspace), "hi"
        )
    finally:
        await client.close()
    errors = [e for e in events if isinstance(e, ErrorEvent)]
    assert len(errors) == 1 and "did not answer in time" in errors[0].message
    assert done_of(events).stop_reason == "error"


async def test_unreachable_provider_becomes_an_error_event(workspace: Workspace) -> None:
    client = openai.AsyncOpenAI(api_key="sk-test", base_url="http://127.0.0.1:9/v1", max_retries=0)
    try:
        events = await collect(
            make_engine(LLMClient(client, retry_deadline_s=TEST_RETRY_DEADLINE_S), workspace), "hi"
        )
    finally:
        await client.close()
    errors = [e for e in events if isinstance(e, ErrorEvent)]
    assert len(errors) == 1 and "could not reach the model provider" in errors[0].message


async def test_cancelling_the_run_kills_running_tools(
    fake_llm: FakeOpenAI, llm: LLMClient, workspace: Workspace
) -> None:
    fake_llm.script(
        Reply(tool_calls=[ToolCallSpec("bash", {"command": "echo $$ > pid; sleep 60"})])
    )
    engine = make_engine(llm, workspace)
    started = asyncio.Event()

    async def consume() -> None:
        async for event in engine.run_stream("go"):
            if isinstance(event, ToolStart):
                started.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(started.wait(), 10)
    pid_file = workspace.root / "pid"
    for _ in range(200):
        if pid_file.exists() and pid_file.read_text().strip():
            break
        await asyncio.sleep(0.02)
    pid = int(pid_file.read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert not alive(pid)


class RecordingHook:
    def __init__(self, decision: HookDecision | None) -> None:
        self.decision = decision
        self.seen: list[ToolInvocation] = []

    async def __call__(self, invocation: ToolInvocation) -> HookDecision | None:
        self.seen.append(invocation)
        return self.decision


async def test_a_denying_hook_stops_the_call_and_tells_the_model_why(
    fake_llm: FakeOpenAI, llm: LLMClient, workspace: Workspace
) -> None:
    hook = RecordingHook(HookDecision.deny("writing is not allowed here"))
    fake_llm.script(
        Reply(tool_calls=[ToolCallSpec("write_file", {"path": "x.txt", "content": "x"})]),
        Reply(text="ok"),
    )
    await collect(make_engine(llm, workspace, hooks=[hook]), "go")
    assert not (workspace.root / "x.txt").exists()
    [answer] = tool_messages(fake_llm.requests[1].messages)
    assert "Permission denied: writing is not allowed here" in answer["content"]
    assert hook.seen[0].tool.name == "write_file"
    assert hook.seen[0].arguments.path == "x.txt"  # type: ignore[attr-defined]


async def test_ask_without_an_approval_channel_fails_closed(
    fake_llm: FakeOpenAI, llm: LLMClient, workspace: Workspace
) -> None:
    hook = RecordingHook(HookDecision.ask("bash needs approval", risk="runs commands"))
    fake_llm.script(
        Reply(tool_calls=[ToolCallSpec("bash", {"command": "touch ran"})]), Reply(text="ok")
    )
    events = await collect(make_engine(llm, workspace, hooks=[hook]), "go")
    assert not (workspace.root / "ran").exists()
    asked = [e for e in events if isinstance(e, ApprovalRequired)]
    assert asked and asked[0].reason == "bash needs approval"
    [answer] = tool_messages(fake_llm.requests[1].messages)
    assert "nobody can be asked" in answer["content"]


@pytest.mark.parametrize("approved", [True, False])
async def test_ask_goes_to_the_approval_function(
    fake_llm: FakeOpenAI, llm: LLMClient, workspace: Workspace, approved: bool
) -> None:
    requests: list[ApprovalRequest] = []

    async def approval(request: ApprovalRequest) -> ApprovalDecision:
        requests.append(request)
        return ApprovalDecision(approved=approved, message="denied by <@U1>")

    hook = RecordingHook(HookDecision.ask("bash needs approval"))
    fake_llm.script(
        Reply(tool_calls=[ToolCallSpec("bash", {"command": "touch ran"})]), Reply(text="ok")
    )
    await collect(make_engine(llm, workspace, hooks=[hook], approval=approval), "go")
    assert requests[0].tool_name == "bash" and '"touch ran"' in requests[0].arguments
    assert (workspace.root / "ran").exists() is approved
    [answer] = tool_messages(fake_llm.requests[1].messages)
    if approved:
        assert answer["content"].startswith("exit code 0")
    else:
        assert answer["content"] == "Not run: denied by <@U1>"


async def test_deny_beats_ask_and_a_failing_hook_denies(
    fake_llm: FakeOpenAI, llm: LLMClient, workspace: Workspace
) -> None:
    async def broken(invocation: ToolInvocation) -> HookDecision | None:
        raise RuntimeError("rules unreadable")

    fake_llm.script(
        Reply(tool_calls=[ToolCallSpec("bash", {"command": "touch ran"})]), Reply(text="ok")
    )
    hooks = [RecordingHook(HookDecision.ask("maybe")), broken]
    await collect(make_engine(llm, workspace, hooks=hooks), "go")
    [answer] = tool_messages(fake_llm.requests[1].messages)
    assert "a permission check failed (rules unreadable)" in answer["content"]
    assert not (workspace.root / "ran").exists()


async def test_large_tool_output_is_capped_with_a_note(
    fake_llm: FakeOpenAI, llm: LLMClient, workspace: Workspace
) -> None:
    (workspace.root / "big.txt").write_text("x" * 5000 + "\n")
    fake_llm.script(
        Reply(tool_calls=[ToolCallSpec("read_file", {"path": "big.txt"})]), Reply(text="ok")
    )
    engine = make_engine(llm, workspace, output_limit=1000)
    events = await collect(engine, "go")
    result = next(e for e in events if isinstance(e, ToolResult))
    assert len(result.output) < 1200
    assert "characters cut" in result.output


async def test_history_is_sent_before_the_prompt(
    fake_llm: FakeOpenAI, llm: LLMClient, workspace: Workspace
) -> None:
    fake_llm.script(Reply(text="you said hello"))
    history = [
        ChatMessage(role="user", content="hello"),
        ChatMessage(role="assistant", content="hi!"),
    ]
    await collect(make_engine(llm, workspace), "what did I say?", history=history)
    roles = [(m["role"], m["content"]) for m in fake_llm.requests[0].messages]
    assert roles == [
        ("system", "You are a test agent."),
        ("user", "hello"),
        ("assistant", "hi!"),
        ("user", "what did I say?"),
    ]


async def test_no_tools_means_no_tools_field(fake_llm: FakeOpenAI, llm: LLMClient) -> None:
    fake_llm.script(Reply(text="plain"))
    engine = Engine(llm=llm, model="fake-model", tools=ToolRegistry())
    events = [e async for e in engine.run_stream("hi")]
    assert done_of(events).final_text == "plain"
    assert "tools" not in fake_llm.requests[0].body


async def test_steering_messages_join_before_the_next_llm_call(
    fake_llm: FakeOpenAI, llm: LLMClient, workspace: Workspace
) -> None:
    pending: list[ChatMessage] = []

    inbox = taking(pending)

    def respond(request: object) -> Reply:
        count = len(fake_llm.requests)
        if count == 1:
            pending.append(ChatMessage(role="user", content="[Bob] also check b.txt"))
            return Reply(tool_calls=[ToolCallSpec("list_dir", {}, id="c1")])
        if count == 2:
            pending.append(ChatMessage(role="user", content="[Bob] and say hi"))
            return Reply(text="Checked both.")
        return Reply(text="Hi Bob!")

    fake_llm.responder = respond
    transcript: list[ChatMessage] = []
    events = await collect(make_engine(llm, workspace), "look", transcript=transcript, inbox=inbox)
    second = fake_llm.requests[1].messages
    assert [m["role"] for m in second[-3:]] == ["assistant", "tool", "user"]
    assert second[-1]["content"] == "[Bob] also check b.txt"
    # The model had answered, but a message was waiting: the run went on for it.
    third = fake_llm.requests[2].messages
    assert third[-1]["content"] == "[Bob] and say hi"
    assert done_of(events).final_text == "Hi Bob!"
    assert [m.content for m in transcript if m.role == "user"] == [
        "look",
        "[Bob] also check b.txt",
        "[Bob] and say hi",
    ]


async def test_at_the_turn_limit_the_inbox_is_left_unread(
    fake_llm: FakeOpenAI, llm: LLMClient, workspace: Workspace
) -> None:
    pending = [ChatMessage(role="user", content="[Bob] one more thing")]

    inbox = taking(pending)

    fake_llm.script(Reply(tool_calls=[ToolCallSpec("list_dir", {})]))
    events = await collect(make_engine(llm, workspace, max_turns=1), "go", inbox=inbox)
    assert done_of(events).stop_reason == "max_turns"
    # Nobody read it, so it is still there for whoever answers it next.
    assert [m.content for m in pending] == ["[Bob] one more thing"]


class _HandBackArgs(ToolArguments):
    answer: str


class HandBack(Tool):
    """A tool whose successful call ends the run (as submit_result does)."""

    name = "hand_back"
    description = "Hand the result back; ends the run."
    arguments = _HandBackArgs
    read_only = True
    ends_run = True

    async def run(self, args: _HandBackArgs) -> str:
        if args.answer == "refuse":
            raise ToolError("not an answer")
        return "recorded"


def ending_engine(llm: LLMClient, workspace: Workspace) -> Engine:
    tools = ToolRegistry([*build_workspace_tools(workspace), HandBack()])
    return Engine(llm=llm, tools=tools, model="fake-model", system_prompt="test")


async def test_a_call_that_ends_the_run_is_the_last_model_call(
    fake_llm: FakeOpenAI, llm: LLMClient, workspace: Workspace
) -> None:
    (workspace.root / "a.txt").write_text("A")
    fake_llm.script(
        # Refused: the run goes on, and the model hears why.
        Reply(tool_calls=[ToolCallSpec("hand_back", {"answer": "refuse"}, id="h0")]),
        # Its siblings in the same response still run to the end.
        Reply(
            text="Done.",
            tool_calls=[
                ToolCallSpec("read_file", {"path": "a.txt"}, id="r"),
                ToolCallSpec("hand_back", {"answer": "fine"}, id="h1"),
            ],
        ),
        Reply(text="never asked for"),
    )
    transcript: list[ChatMessage] = []
    events = await collect(ending_engine(llm, workspace), "go", transcript=transcript)
    done = done_of(events)
    assert (done.stop_reason, done.turns, done.final_text) == ("completed", 2, "Done.")
    assert len(fake_llm.requests) == 2
    assert "not an answer" in tool_messages(fake_llm.requests[1].messages)[0]["content"]
    results = {m.tool_call_id: m.content for m in transcript if m.role == "tool"}
    assert results["h1"] == "recorded" and "A" in (results["r"] or "")


async def test_a_message_waiting_when_the_run_would_end_is_answered_first(
    fake_llm: FakeOpenAI, llm: LLMClient, workspace: Workspace
) -> None:
    pending: list[ChatMessage] = []

    inbox = taking(pending)

    def respond(request: object) -> Reply:
        if len(fake_llm.requests) == 1:
            pending.append(ChatMessage(role="user", content="[Bob] wait, one more thing"))
            return Reply(tool_calls=[ToolCallSpec("hand_back", {"answer": "first"}, id="h")])
        return Reply(tool_calls=[ToolCallSpec("hand_back", {"answer": "second"}, id="h2")])

    fake_llm.responder = respond
    events = await collect(ending_engine(llm, workspace), "go", inbox=inbox)
    assert done_of(events).stop_reason == "completed"
    assert len(fake_llm.requests) == 2
    assert fake_llm.requests[1].messages[-1]["content"] == "[Bob] wait, one more thing"
