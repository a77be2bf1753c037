"""The engine asks its meter before every LLM call and charges it after each one."""

from __future__ import annotations

from dataclasses import dataclass, field

from bot.engine import ChatMessage, Done, Engine, LLMClient, Meter, RunEvent, ToolResult, Usage
from bot.tools import Workspace, build_workspace_tools
from tests.fakes.openai_api import FakeOpenAI, Reply, ToolCallSpec
from tests.fakes.openai_api import Usage as FakeUsage


@dataclass
class CountingMeter:
    """A token budget in its simplest form: a limit, a running total, every charge kept."""

    limit: int
    charges: list[tuple[str, Usage, str | None]] = field(default_factory=list)

    @property
    def spent(self) -> int:
        return sum(usage.total_tokens for _, usage, _ in self.charges)

    def exhausted(self) -> str | None:
        if self.spent < self.limit:
            return None
        return f"[Stopped: budget spent ({self.spent:,} of {self.limit:,} tokens).]"

    async def charge(self, *, model: str, usage: Usage, task_id: str | None) -> None:
        self.charges.append((model, usage, task_id))


def make_engine(llm: LLMClient, workspace: Workspace, meter: Meter | None) -> Engine:
    return Engine(
        llm=llm,
        model="fake-model",
        tools=build_workspace_tools(workspace),
        system_prompt="You are a test agent.",
        meter=meter,
    )


async def collect(engine: Engine, prompt: str, **kwargs: object) -> list[RunEvent]:
    return [event async for event in engine.run_stream(prompt, **kwargs)]  # type: ignore[arg-type]


def used(prompt: int, completion: int) -> FakeUsage:
    return FakeUsage(prompt_tokens=prompt, completion_tokens=completion)


def look(call_id: str) -> Reply:
    return Reply(
        text=f"Looking ({call_id}).",
        tool_calls=[ToolCallSpec("list_dir", {}, id=call_id)],
        usage=used(300, 20),
    )


async def test_every_call_is_charged_with_the_usage_the_provider_reported(
    fake_llm: FakeOpenAI, llm: LLMClient, workspace: Workspace
) -> None:
    meter = CountingMeter(limit=1_000_000)
    fake_llm.script(look("c1"), Reply(text="All done.", usage=used(500, 40)))
    events = await collect(make_engine(llm, workspace, meter), "look around")
    done = events[-1]
    assert isinstance(done, Done)
    assert done.stop_reason == "completed"
    assert done.final_text == "All done."
    assert meter.charges == [
        ("fake-model", Usage(prompt_tokens=300, completion_tokens=20, requests=1), None),
        ("fake-model", Usage(prompt_tokens=500, completion_tokens=40, requests=1), None),
    ]
    assert done.usage.total_tokens == meter.spent == 860


async def test_a_spent_budget_stops_before_the_next_call_and_keeps_the_partial_work(
    fake_llm: FakeOpenAI, llm: LLMClient, workspace: Workspace
) -> None:
    meter = CountingMeter(limit=600)
    # The second call crosses the limit (640 of 600): its tool still runs, then no third call.
    fake_llm.script(look("c1"), look("c2"), Reply(text="never asked for"))
    transcript: list[ChatMessage] = []
    events = await collect(make_engine(llm, workspace, meter), "look", transcript=transcript)
    done = events[-1]
    assert isinstance(done, Done)
    assert done.stop_reason == "budget"
    assert done.turns == 2
    assert len(fake_llm.requests) == 2
    assert fake_llm.remaining == 1
    note = "[Stopped: budget spent (640 of 600 tokens).]"
    assert done.final_text == f"Looking (c2).\n\n{note}"
    assert [e.call_id for e in events if isinstance(e, ToolResult)] == ["c1", "c2"]
    # The history stays valid: every tool call has its result, then the note.
    assert [m.role for m in transcript] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert transcript[-1] == ChatMessage(role="assistant", content=note)
    assert done.usage.total_tokens == 640


async def test_a_budget_spent_before_the_run_makes_no_call_at_all(
    fake_llm: FakeOpenAI, llm: LLMClient, workspace: Workspace
) -> None:
    meter = CountingMeter(limit=100, charges=[("other", Usage(prompt_tokens=100), "task-x-1")])
    transcript: list[ChatMessage] = []
    events = await collect(make_engine(llm, workspace, meter), "hi", transcript=transcript)
    assert fake_llm.requests == []
    assert events == [
        Done(
            final_text="[Stopped: budget spent (100 of 100 tokens).]",
            usage=Usage(),
            turns=0,
            stop_reason="budget",
        )
    ]
    assert [m.role for m in transcript] == ["user", "assistant"]


async def test_with_the_budget_spent_steering_messages_are_left_unread(
    fake_llm: FakeOpenAI, llm: LLMClient, workspace: Workspace
) -> None:
    meter = CountingMeter(limit=300)
    waiting = [ChatMessage(role="user", content="also check the tests")]

    def inbox() -> list[ChatMessage]:
        taken = list(waiting)
        waiting.clear()
        return taken

    fake_llm.script(look("c1"))
    events = await collect(make_engine(llm, workspace, meter), "look", inbox=inbox)
    done = events[-1]
    assert isinstance(done, Done)
    assert done.stop_reason == "budget"
    assert waiting == [ChatMessage(role="user", content="also check the tests")]


async def test_an_answer_that_crosses_the_budget_is_complete(
    fake_llm: FakeOpenAI, llm: LLMClient, workspace: Workspace
) -> None:
    meter = CountingMeter(limit=10)
    fake_llm.script(Reply(text="Here it is.", usage=used(50, 5)))
    events = await collect(make_engine(llm, workspace, meter), "hi")
    done = events[-1]
    assert isinstance(done, Done)
    assert (done.stop_reason, done.final_text) == ("completed", "Here it is.")


async def test_without_a_meter_nothing_changes(
    fake_llm: FakeOpenAI, llm: LLMClient, workspace: Workspace
) -> None:
    fake_llm.script(look("c1"), Reply(text="Done.", usage=used(10**7, 10**6)))
    engine = make_engine(llm, workspace, None)
    assert engine.meter is None
    done = (await collect(engine, "look"))[-1]
    assert isinstance(done, Done)
    assert (done.stop_reason, done.final_text, done.turns) == ("completed", "Done.", 2)
    fake_llm.assert_all_used()
