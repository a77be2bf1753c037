"""Conversation scenarios, written once, run on Slack and at the terminal.

Each test takes the `driver` fixture (tests/scenarios/conftest.py): the same steps
and the same assertions run against the Slack surface (the real Bolt app on the
fake Slack API) and the terminal chat (`TerminalChat` on a pipe), both over the
fake model server.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from tests.fakes.openai_api import RecordedRequest, Reply, ToolCallSpec
from tests.scenarios.conftest import SECRET
from tests.scenarios.drivers import PATIENCE_S, Driver, is_main_request, open_slack, open_terminal
from tests.slack.harness import until

# describe_end's words: the outcome, then turns, tokens and time.
DONE = r"✓ Done · {turns} · [\d,]+ in / [\d,]+ out tokens · \d+\.\d s"
WRITE_HELLO = ToolCallSpec("write_file", {"path": "hello.txt", "content": "hi\n"}, id="write-1")


def done_in(turns: int) -> re.Pattern[str]:
    return re.compile(DONE.format(turns=f"{turns} turn{'s' if turns != 1 else ''}"))


def user_texts(request: RecordedRequest) -> list[str]:
    return [str(m["content"]) for m in request.messages if m["role"] == "user"]


class Blocked:
    """A model whose first call waits until the test lets it answer."""

    def __init__(self, driver: Driver, first: Reply, then: Reply) -> None:
        self.called = asyncio.Event()
        self.go_on = asyncio.Event()
        self.first, self.then = first, then
        driver.llm.responder = self.respond

    async def respond(self, request: RecordedRequest) -> Reply:
        if not self.called.is_set():
            self.called.set()
            await self.go_on.wait()
            return self.first
        return self.then

    async def wait_called(self) -> None:
        await asyncio.wait_for(self.called.wait(), PATIENCE_S)


async def test_a_question_is_answered_and_the_end_says_done(driver: Driver) -> None:
    driver.llm.script(Reply(text="The build is green."))
    await driver.ask("is the build green?")
    await driver.wait_idle()
    assert "The build is green." in driver.transcript()
    assert done_in(1).fullmatch(driver.status()), driver.status()
    [request] = driver.main_requests()
    assert user_texts(request)[-1].endswith("is the build green?")
    driver.llm.assert_all_used()


async def test_a_follow_up_sees_the_earlier_exchange(driver: Driver) -> None:
    driver.llm.script(Reply(text="Paris is the capital."), Reply(text="About 2.1 million."))
    await driver.ask("what is the capital of France?")
    await driver.wait_idle()
    await driver.ask("how many people live there?")
    await driver.wait_idle()
    _, second = driver.main_requests()
    history = [(m["role"], str(m["content"])) for m in second.messages]
    asked = [text for role, text in history if role == "user"]
    assert asked[-2].endswith("what is the capital of France?")
    assert asked[-1].endswith("how many people live there?")
    assert ("assistant", "Paris is the capital.") in history
    shown = driver.transcript()
    assert "Paris is the capital." in shown and "About 2.1 million." in shown
    assert done_in(1).fullmatch(driver.status()), driver.status()


@pytest.mark.parametrize("decision", ["approve", "deny"])
async def test_a_risky_call_asks_and_the_decision_reaches_the_model(
    driver: Driver, decision: str
) -> None:
    driver.llm.script(Reply(tool_calls=[WRITE_HELLO]), Reply(text="Finished."))
    await driver.ask("please write hello")
    await (driver.approve() if decision == "approve" else driver.deny())
    await driver.wait_idle()
    told = driver.main_requests()[1].messages[-1]
    assert told["role"] == "tool" and told["tool_call_id"] == "write-1"
    written = driver.workspace / "hello.txt"
    if decision == "approve":
        assert written.read_text() == "hi\n"
        assert "denied" not in str(told["content"])
    else:
        assert not written.exists()
        assert "denied" in str(told["content"])
    assert "Finished." in driver.transcript()
    assert done_in(2).fullmatch(driver.status()), driver.status()


async def test_words_before_a_tool_call_and_the_answer_are_each_shown_once(
    driver: Driver,
) -> None:
    driver.llm.script(
        Reply(text="Let me look.", tool_calls=[ToolCallSpec("list_dir", {}, id="list-1")]),
        Reply(text="Here it is."),
    )
    await driver.ask("look around")
    await driver.wait_idle()
    shown = driver.transcript()
    assert "▸ list_dir" in driver.steps()
    assert done_in(2).fullmatch(driver.status()), driver.status()
    assert shown.count("Let me look.") == 1
    assert shown.count("Here it is.") == 1


async def test_what_is_said_while_it_works_steers_the_run(driver: Driver) -> None:
    model = Blocked(
        driver,
        first=Reply(tool_calls=[ToolCallSpec("list_dir", {}, id="list-1")]),
        then=Reply(text="Checked the tests too."),
    )
    await driver.ask("start the review")
    await model.wait_called()
    await driver.say_while_running("also check the tests please")
    model.go_on.set()
    await driver.wait_idle()
    first, second = driver.main_requests()  # no second run was started for it
    steering = user_texts(second)[-1]
    assert re.fullmatch(r"\[(.+, )?while you were working\] also check the tests please", steering)
    assert all("also check the tests" not in text for text in user_texts(first))
    assert "Checked the tests too." in driver.transcript()
    assert done_in(2).fullmatch(driver.status()), driver.status()


async def test_cancel_stops_the_run_and_the_model_is_not_called_again(driver: Driver) -> None:
    model = Blocked(driver, first=Reply(text="Too late."), then=Reply(text="Never."))
    try:
        await driver.ask("take your time")
        await model.wait_called()
        await driver.cancel()
        await driver.wait_idle()
        # Its call was dropped with it: the model, still holding its answer, saw the
        # caller leave, so the answer it is then let give goes nowhere.
        await until(lambda: driver.llm.in_flight == 0, PATIENCE_S)
    finally:
        model.go_on.set()
    assert driver.status().startswith("⊘ Cancelled"), driver.status()
    assert len(driver.llm.requests) == 1
    assert "Too late." not in driver.transcript()


async def test_an_agent_named_with_at_runs_directly(driver: Driver) -> None:
    def respond(request: RecordedRequest) -> Reply:
        if is_main_request(request):
            return Reply(text="The main agent answered instead.")
        return Reply(text="The README is one line long.")

    driver.llm.responder = respond
    await driver.ask("@explore how long is the README?")
    await driver.wait_idle()
    assert driver.main_requests() == []
    assert driver.llm.requests  # explore was asked
    shown = driver.transcript()
    assert "The README is one line long." in shown
    assert "The main agent answered instead." not in shown
    assert driver.status().startswith("✓ Done (explore) · "), driver.status()


async def test_a_configured_secret_in_tool_arguments_is_never_shown(
    driver: Driver,
) -> None:
    driver.llm.script(
        Reply(
            tool_calls=[
                ToolCallSpec("write_file", {"path": "notes.txt", "content": f"key {SECRET}"})
            ]
        ),
        Reply(tool_calls=[ToolCallSpec("bash", {"command": f"echo {SECRET}"})]),
        Reply(text="Saved the key."),
    )
    await driver.ask("save the key in notes.txt")
    await driver.approve()  # the write
    await driver.approve()  # the command
    await driver.wait_idle()
    assert (driver.workspace / "notes.txt").read_text() == f"key {SECRET}"  # it did run
    assert "bash" in str(driver.main_requests()[2].messages[-2])  # and so did the command
    steps = driver.steps()
    assert "▸ write_file notes.txt, key ***" in steps, steps
    assert "▸ bash echo ***" in steps, steps
    assert done_in(3).fullmatch(driver.status()), driver.status()
    shown = driver.transcript()
    assert "Saved the key." in shown
    assert SECRET not in shown


async def test_a_tool_call_reads_as_its_event_line(driver: Driver) -> None:
    driver.llm.script(Reply(tool_calls=[WRITE_HELLO]), Reply(text="Wrote it."))
    await driver.ask("please write hello")
    await driver.approve()
    await driver.wait_idle()
    steps = driver.steps()
    assert "▸ write_file hello.txt, hi" in steps, steps
    assert "✓" in steps[steps.index("▸ write_file hello.txt, hi") + 1 :], steps


async def test_both_surfaces_describe_the_same_run_in_the_same_lines(tmp_path: Path) -> None:
    """The same model turn, on both surfaces at once: the same tool and result lines."""
    seen: dict[str, list[str]] = {}
    for name, opener in (("slack", open_slack), ("terminal", open_terminal)):
        (tmp_path / name).mkdir()
        async with opener(tmp_path / name, openai_api_key=SECRET) as driver:
            driver.llm.script(
                # One call a turn: parallel calls' results come in either order.
                Reply(tool_calls=[ToolCallSpec("list_dir", {}, id="l1")]),
                Reply(tool_calls=[ToolCallSpec("read_file", {"path": "missing.md"}, id="r1")]),
                Reply(tool_calls=[WRITE_HELLO]),
                Reply(text="All done."),
            )
            await driver.ask("look around, then write hello")
            await driver.approve()
            await driver.wait_idle()
            seen[name] = [s for s in driver.steps() if s[:1] in {"▸", "✓", "✗"}]
    assert seen["slack"] == seen["terminal"]
    assert "▸ write_file hello.txt, hi" in seen["slack"]
    assert any(s.startswith("✗ ") for s in seen["slack"])  # the missing file's error
