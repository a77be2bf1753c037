"""The agent loop shared by the main agent and every sub-agent.

LLM → tool calls → results → LLM … until the model answers without calling a
tool, the turn limit is reached, or the meter says the token budget is spent.
Events stream out as they happen.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

from bot.engine.events import (
    ApprovalRequired,
    Done,
    ErrorEvent,
    RunEvent,
    StopReason,
    TextDelta,
    ToolResult,
    ToolStart,
)
from bot.engine.hooks import (
    ApprovalFunc,
    ApprovalRequest,
    Hook,
    ToolInvocation,
    decide,
)
from bot.engine.llm import LLMClient, LLMResponse, TextChunk
from bot.engine.messages import ChatMessage, ToolCall, Usage
from bot.engine.meter import Meter
from bot.errors import LLMError, ToolError
from bot.tools.base import DEFAULT_OUTPUT_LIMIT, ToolRegistry, cap_output, person_approved

logger = logging.getLogger(__name__)

DEFAULT_MAX_TURNS = 50

Emit = Callable[[RunEvent], None]
# Messages that arrived while the run was going on (steering), taken before each LLM call.
Inbox = Callable[[], Sequence[ChatMessage]]


@dataclass(frozen=True, slots=True, kw_only=True)
class _CallOutcome:
    output: str
    is_error: bool


class Engine:
    """Runs one agent: a model, a system prompt, tools, and the checks around them.

    The same class serves the main agent and sub-agents; a sub-agent is just an
    engine built with another prompt, fewer tools and no history.
    """

    def __init__(
        self,
        *,
        llm: LLMClient,
        model: str,
        tools: ToolRegistry,
        system_prompt: str = "",
        hooks: Sequence[Hook] = (),
        approval: ApprovalFunc | None = None,
        max_turns: int = DEFAULT_MAX_TURNS,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        meter: Meter | None = None,
    ) -> None:
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        self.llm = llm
        self.model = model
        self.tools = tools
        self.system_prompt = system_prompt
        self.hooks = tuple(hooks)
        self.approval = approval
        self.max_turns = max_turns
        self.output_limit = output_limit
        self.meter = meter

    async def run_stream(
        self,
        prompt: str,
        *,
        history: Sequence[ChatMessage] = (),
        transcript: list[ChatMessage] | None = None,
        inbox: Inbox | None = None,
    ) -> AsyncIterator[RunEvent]:
        """Run the loop on `prompt` after `history`, yielding events; `Done` comes last.

        New messages (the prompt, the model's replies, tool results) are appended
        to `transcript` as they happen, so a caller can persist what a cancelled
        run did. Messages from `inbox` join the conversation before each LLM call;
        a run does not end while its inbox holds any. Cancelling the consumer
        cancels the run and its running tools.
        """
        queue: asyncio.Queue[RunEvent | None] = asyncio.Queue()
        new_messages = transcript if transcript is not None else []
        driver = asyncio.create_task(
            self._drive(prompt, list(history), new_messages, queue.put_nowait, inbox)
        )
        driver.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (event := await queue.get()) is not None:
                yield event
            await driver
        finally:
            if not driver.done():
                driver.cancel()
                await asyncio.gather(driver, return_exceptions=True)

    async def _drive(
        self,
        prompt: str,
        history: list[ChatMessage],
        new_messages: list[ChatMessage],
        emit: Emit,
        inbox: Inbox | None = None,
    ) -> None:
        messages: list[ChatMessage] = []
        if self.system_prompt:
            messages.append(ChatMessage(role="system", content=self.system_prompt))
        messages.extend(history)

        def add(message: ChatMessage) -> None:
            messages.append(message)
            new_messages.append(message)

        add(ChatMessage(role="user", content=prompt))
        usage = Usage()
        turns = 0
        last_text = ""
        stop: StopReason = "completed"
        try:
            while True:
                # Asked before every call, the first included: a budget spent by another
                # part of the run (a sibling sub-agent) stops this one too.
                if (note := self._budget_note()) is not None:
                    stop = "budget"
                    last_text = f"{last_text}\n\n{note}" if last_text else note
                    add(ChatMessage(role="assistant", content=note))
                    break
                turns += 1
                response = await self._call_llm(messages, emit)
                usage += response.usage
                if self.meter is not None:
                    await self.meter.charge(model=self.model, usage=response.usage, task_id=None)
                if response.text:
                    last_text = response.text
                add(
                    ChatMessage(
                        role="assistant",
                        content=response.text or None,
                        tool_calls=response.tool_calls,
                    )
                )
                if not response.tool_calls:
                    # Someone wrote while the model answered: answer them too. At the turn
                    # limit or with the budget spent the inbox is left alone, so its
                    # messages are not taken unread.
                    if inbox is None or turns >= self.max_turns or self._budget_note():
                        break
                    late = list(inbox())
                    if not late:
                        break
                    for message in late:
                        add(message)
                    continue
                outcomes = await asyncio.gather(
                    *(self._run_call(call, emit) for call in response.tool_calls)
                )
                # gather keeps call order, so results go back in the order the model asked.
                for call, outcome in zip(response.tool_calls, outcomes, strict=True):
                    add(
                        ChatMessage(
                            role="tool",
                            content=outcome.output,
                            tool_call_id=call.id,
                            name=call.name,
                        )
                    )
                if turns < self.max_turns and self._budget_note() is None:
                    for message in inbox() if inbox else ():
                        add(message)
                if turns >= self.max_turns:
                    stop = "max_turns"
                    note = (
                        f"[Stopped early: reached the limit of {self.max_turns} turns before "
                        "finishing. The work above is partial.]"
                    )
                    last_text = f"{last_text}\n\n{note}" if last_text else note
                    add(ChatMessage(role="assistant", content=note))
                    break
        except LLMError as exc:
            emit(ErrorEvent(message=f"The model call failed: {exc}"))
            stop = "error"
        emit(Done(final_text=last_text, usage=usage, turns=turns, stop_reason=stop))

    def _budget_note(self) -> str | None:
        return self.meter.exhausted() if self.meter is not None else None

    async def _call_llm(self, messages: list[ChatMessage], emit: Emit) -> LLMResponse:
        response: LLMResponse | None = None
        async for item in self.llm.stream(
            model=self.model, messages=messages, tools=self.tools.schemas()
        ):
            if isinstance(item, TextChunk):
                emit(TextDelta(text=item.text))
            else:
                response = item
        if response is None:
            raise LLMError("the model provider ended the stream without a response")
        return response

    async def _run_call(self, call: ToolCall, emit: Emit) -> _CallOutcome:
        emit(ToolStart(call_id=call.id, name=call.name, arguments=call.arguments))
        try:
            outcome = await self._execute(call, emit)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # A bug in a tool must not end the run: the model hears of it and goes on.
            logger.exception("tool %s failed unexpectedly", call.name)
            outcome = _CallOutcome(
                output=f"Error: {call.name} failed unexpectedly: {type(exc).__name__}: {exc}",
                is_error=True,
            )
        output = cap_output(outcome.output, self.output_limit)
        emit(ToolResult(call_id=call.id, name=call.name, output=output, is_error=outcome.is_error))
        return _CallOutcome(output=output, is_error=outcome.is_error)

    async def _execute(self, call: ToolCall, emit: Emit) -> _CallOutcome:
        tool = self.tools.get(call.name)
        if tool is None:
            available = ", ".join(self.tools.names()) or "none"
            return _CallOutcome(
                output=f"Error: there is no tool named {call.name!r}. Available tools: "
                f"{available}.",
                is_error=True,
            )
        try:
            arguments = tool.parse_arguments(call.arguments)
        except ToolError as exc:
            return _CallOutcome(output=f"Error: {exc}", is_error=True)
        invocation = ToolInvocation(
            call_id=call.id, tool=tool, arguments=arguments, raw_arguments=call.arguments
        )
        decision = await decide(self.hooks, invocation)
        if decision.action == "deny":
            return _CallOutcome(
                output=f"Permission denied: {decision.reason}. The tool was not run.",
                is_error=True,
            )
        if decision.action == "ask":
            emit(
                ApprovalRequired(
                    call_id=call.id,
                    name=call.name,
                    arguments=call.arguments,
                    reason=decision.reason,
                    risk=decision.risk,
                )
            )
            if self.approval is None:
                return _CallOutcome(
                    output=f"Not run: this call needs a person's approval ({decision.reason}) "
                    "and nobody can be asked here, so it was refused.",
                    is_error=True,
                )
            verdict = await self.approval(
                ApprovalRequest(
                    call_id=call.id,
                    tool_name=call.name,
                    arguments=call.arguments,
                    reason=decision.reason,
                    risk=decision.risk,
                    approver_sets=decision.approver_sets,
                )
            )
            if not verdict.approved:
                return _CallOutcome(output=f"Not run: {verdict.message}", is_error=True)
        approved = person_approved.set(decision.action == "ask")
        try:
            output = await tool.run(arguments)
        except ToolError as exc:
            return _CallOutcome(output=f"Error: {exc}", is_error=True)
        finally:
            person_approved.reset(approved)
        return _CallOutcome(output=output, is_error=False)
