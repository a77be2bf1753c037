"""Long threads keep answering: requests fit the window, history folds into a stored summary.

The real engine and openai client talk over HTTP to the fake OpenAI server, which
refuses (400, context length) any request whose o200k count passes its window and
reports that count as the request's prompt_tokens.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bot.app import Baton, build_baton
from bot.engine import Compacted, Done, RunEvent
from bot.engine.messages import SUMMARY_HEADER
from bot.sessions.compaction import SUMMARY_PROMPT
from bot.store import SessionKey
from tests.conftest import make_settings
from tests.fakes.openai_api import (
    ErrorReply,
    FakeOpenAI,
    RecordedRequest,
    Reply,
    ScriptedReply,
    ToolCallSpec,
    Usage,
    o200k_tokens,
)

THREAD = SessionKey.slack_thread(team_id="T1", channel_id="C1", thread_ts="1.000")
WINDOW = 16_000
SUMMARY = "The person asked about the log files; each was read and described."


def request_tokens(request: RecordedRequest) -> int:
    """What the fake provider counts: the JSON of the messages and of the tools, in
    exact o200k tokens (Baton only estimates them)."""
    text = json.dumps(request.messages) + json.dumps(request.body.get("tools") or [])
    return o200k_tokens(text)


def is_summary_request(request: RecordedRequest) -> bool:
    return request.messages[0]["content"] == SUMMARY_PROMPT


class Provider:
    """A model with a context window; `main` answers the main agent's requests."""

    def __init__(self, fake: FakeOpenAI, window: int, main: Any) -> None:
        self.fake = fake
        self.window = window
        self.main = main
        self.accepted: list[tuple[RecordedRequest, int]] = []
        self.refused: list[int] = []
        fake.responder = self.respond

    def respond(self, request: RecordedRequest) -> ScriptedReply:
        tokens = request_tokens(request)
        if tokens > self.window:
            self.refused.append(tokens)
            return ErrorReply(
                status=400,
                message=f"This model's maximum context length is {self.window} tokens. However, "
                f"your messages resulted in {tokens} tokens. Please reduce the length.",
            )
        self.accepted.append((request, tokens))
        usage = Usage(prompt_tokens=tokens, completion_tokens=20)
        if is_summary_request(request):
            return Reply(text=SUMMARY, usage=usage)
        reply = self.main(request)
        return Reply(text=reply.text, tool_calls=reply.tool_calls, usage=usage)

    def summary_requests(self) -> list[RecordedRequest]:
        return [r for r, _ in self.accepted if is_summary_request(r)]


def read_logs(count: int = 1) -> Any:
    """Each turn: read `count` big files (in parallel), then answer."""

    def main(request: RecordedRequest) -> Reply:
        last = request.messages[-1]
        if last["role"] == "user":
            return Reply(
                tool_calls=[
                    ToolCallSpec("read_file", {"path": f"log{i}.txt"}) for i in range(count)
                ]
            )
        question = next(m for m in reversed(request.messages) if m["role"] == "user")
        return Reply(text=f"Answered: {str(question['content'])[:40]}")

    return main


def write_logs(root: Path, count: int = 4) -> None:
    for i in range(count):
        lines = [
            f"worker {i} took the nightly report job, checked the input and wrote the summary"
            for _ in range(400)
        ]
        (root / f"log{i}.txt").write_text("\n".join(lines))


async def make(tmp_path: Path, fake: FakeOpenAI, **overrides: Any) -> Baton:
    settings = make_settings(tmp_path, fake.url, **overrides)
    write_logs(settings.workspace)
    return await build_baton(settings)


async def turn(baton: Baton, text: str) -> list[RunEvent]:
    return [e async for e in baton.conversations.run_turn(THREAD, text)]


def done(events: list[RunEvent]) -> Done:
    last = events[-1]
    assert isinstance(last, Done)
    return last


async def test_a_long_thread_with_big_tool_outputs_keeps_answering(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    provider = Provider(fake_llm, WINDOW, read_logs())
    baton = await make(tmp_path, fake_llm, context_window=WINDOW)
    try:
        compactions = 0
        for n in range(30):
            events = await turn(baton, f"What does log0 say, take {n}?")
            assert done(events).stop_reason == "completed", n
            assert done(events).final_text.startswith("Answered: What does log0 say")
            compactions += sum(1 for e in events if isinstance(e, Compacted) and e.folded)
    finally:
        await baton.close()
    assert not provider.refused
    assert max(tokens for _, tokens in provider.accepted) <= WINDOW
    assert compactions >= 1
    # A summary takes one request per piece of history that fits the window.
    assert len(provider.summary_requests()) >= compactions


async def test_one_oversized_turn_keeps_the_previous_answer(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    replies = iter([Reply(text="The plan: build, then test, then ship.")])

    def main(request: RecordedRequest) -> Reply:
        if len(request.messages) == 2:
            return next(replies)
        return read_logs(count=4)(request)

    provider = Provider(fake_llm, WINDOW, main)
    baton = await make(tmp_path, fake_llm, context_window=WINDOW)
    try:
        await turn(baton, "What is the plan?")
        events = await turn(baton, "Read all four logs.")
    finally:
        await baton.close()
    assert done(events).stop_reason == "completed"
    assert not provider.refused
    last, tokens = provider.accepted[-1]
    assert tokens <= WINDOW
    contents = [str(m["content"]) for m in last.messages]
    assert "The plan: build, then test, then ship." in contents
    tool_results = [m for m in last.messages if m["role"] == "tool"]
    assert len(tool_results) == 4
    assert any("left out to fit the context" in str(m["content"]) for m in tool_results)


async def test_a_context_length_error_compacts_and_retries(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    # baton.yaml says 128k, the model takes 16k: the provider's refusal must not end the thread.
    provider = Provider(fake_llm, WINDOW, read_logs())
    baton = await make(tmp_path, fake_llm, context_window=128_000)
    try:
        results = [await turn(baton, f"Look at log0 again, {n}.") for n in range(6)]
    finally:
        await baton.close()
    assert all(done(events).stop_reason == "completed" for events in results)
    assert provider.refused  # the provider did refuse...
    # ...and the request was fitted again (trimmed, folded or cut) and answered.
    # After the first refusal, the engine knows the window: no more refusals.
    assert len(provider.refused) == 1


async def test_a_compaction_is_stored_and_the_next_turn_starts_from_it(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    provider = Provider(fake_llm, WINDOW, read_logs())
    baton = await make(tmp_path, fake_llm, context_window=WINDOW)
    try:
        n = 0
        while not provider.summary_requests():
            events = await turn(baton, f"Question number {n}.")
            assert done(events).stop_reason == "completed"
            n += 1
            assert n < 40, "never compacted"
        folded = next(e for e in events if isinstance(e, Compacted)).folded
        summary_request = provider.summary_requests()[0]
        assert "Question number 0." in json.dumps(summary_request.messages)

        session = await baton.conversations.store.get_or_create(THREAD)
        stored = await baton.conversations.store.load_history(session.id)
        assert stored.summary == SUMMARY and stored.folded == folded
        assert stored.messages[0].content == stored.messages[0].content  # loaded
        assert all(seq > stored.through_seq for seq in stored.seqs)

        before = len(provider.accepted)
        summaries = len(provider.summary_requests())
        events = await turn(baton, "And now?")
        assert done(events).stop_reason == "completed"
    finally:
        await baton.close()
    assert len(provider.summary_requests()) == summaries  # the next turn reuses the summary
    first = provider.accepted[before][0]
    assert str(first.messages[1]["content"]).startswith(SUMMARY_HEADER)
    assert SUMMARY in str(first.messages[1]["content"])
    assert "Question number 0." not in json.dumps(first.messages)


async def test_a_sub_agent_with_a_long_run_fits(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    steps = 20
    calls: list[int] = []

    def main(request: RecordedRequest) -> Reply:
        if len(calls) < steps:
            calls.append(1)
            path = f"log{len(calls) % 4}.txt"
            return Reply(tool_calls=[ToolCallSpec("read_file", {"path": path})])
        return Reply(text=f"Read {len(calls)} logs.")

    provider = Provider(fake_llm, WINDOW, main)
    baton = await make(tmp_path, fake_llm, context_window=WINDOW)
    try:
        outcome = await baton.conversations.run_agent(THREAD, "explore", "read the logs")
    finally:
        await baton.close()
    assert outcome.state == "completed", outcome.error
    assert not provider.refused
    assert max(tokens for _, tokens in provider.accepted) <= WINDOW
    last = provider.accepted[-1][0]
    assert "left out here to fit the context" in json.dumps(last.messages)
