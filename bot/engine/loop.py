"""The agent loop shared by the main agent and every sub-agent.

LLM → tool calls → results → LLM … until the model answers without calling a
tool, the turn limit is reached, or the meter says the token budget is spent.
Events stream out as they happen. Every request is fitted to the model's context
window first (see `bot.engine.context`).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from bot import metrics, tracing
from bot.engine.context import Compactor, Fitted, fit, fold_point
from bot.engine.events import (
    ApprovalRequired,
    Compacted,
    Done,
    ErrorEvent,
    ModelWaiting,
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
from bot.engine.messages import (
    ChatMessage,
    ImagePart,
    ToolCall,
    Usage,
    is_summary,
    summary_message,
)
from bot.engine.meter import Meter
from bot.engine.tokens import TokenCounter, reply_reserve
from bot.errors import ContextLengthError, LLMError, ToolError
from bot.tools.base import (
    DEFAULT_OUTPUT_LIMIT,
    IMAGE_MEDIA_TYPES,
    Tool,
    ToolOutput,
    ToolRegistry,
    cap_output,
    person_approved,
)

logger = logging.getLogger(__name__)

DEFAULT_MAX_TURNS = 50
# An answer cut at the model's output limit is continued this many times at most.
MAX_CONTINUATIONS = 2
CONTINUE_PROMPT = (
    "[Your answer was cut at your output limit. Continue exactly where it stopped, "
    "without repeating anything.]"
)
CUT_NOTE = "[The answer was cut: the model reached its output limit.]"
FILTERED_NOTE = "[The model provider's content filter stopped this answer.]"
# After a context-length error the retried request is at most this share of the one refused.
RETRY_SHARE = 0.75
# History kept word for word by a compaction: at most this share of the budget.
KEEP_AFTER_FOLD = 4
MIN_BUDGET = 256

Emit = Callable[[RunEvent], None]
# Messages that arrived while the run was going on (steering), taken before each LLM call.
Inbox = Callable[[], Sequence[ChatMessage]]

# Images for the prompt of the next run started in this context, for callers that start
# a run through code that passes only text (a sub-agent run directly by a person). The
# run takes them once: its own tool calls (sub-agents it starts) do not see them.
_prompt_images: contextvars.ContextVar[tuple[ImagePart, ...]] = contextvars.ContextVar(
    "prompt_images", default=()
)


@dataclass(slots=True, eq=False)
class ResponseCalls:
    """The tool calls of one model response while they run, and which have ended."""

    calls: tuple[ToolCall, ...]
    ended: set[str] = field(default_factory=set)


# The response whose calls are running, and the call each tool runs for: a tool that
# works with its siblings (`task` calls of one `group`) reads them.
response_calls: contextvars.ContextVar[ResponseCalls | None] = contextvars.ContextVar(
    "response_calls", default=None
)
current_call: contextvars.ContextVar[ToolCall | None] = contextvars.ContextVar(
    "current_call", default=None
)


# The Chat Completions entry of each tool class whose entry is its class's alone (the
# base `Tool.schema`, built from class attributes). Pydantic builds a JSON schema in
# about 0.3 ms, and every LLM call sends every tool: rebuilt each time, the entries cost
# 2-3 ms per call (bench/loop_overhead.py). A tool with its own `schema` (the `task` tool
# lists the agents on disk now) is still asked every time.
_class_schemas: dict[type[Tool], dict[str, Any]] = {}


def tool_schemas(tools: ToolRegistry) -> list[dict[str, Any]]:
    """The `tools` entries of a request, as `tools.schemas()` gives them (shared: not to
    be changed)."""
    schemas = []
    for tool in tools:
        kind = type(tool)
        if kind.schema is not Tool.schema:
            schemas.append(tool.schema())
            continue
        schema = _class_schemas.get(kind)
        if schema is None:
            schema = _class_schemas[kind] = tool.schema()
        schemas.append(schema)
    return schemas


@contextmanager
def prompt_images(images: Sequence[ImagePart]) -> Iterator[None]:
    """Give `images` to the prompt of the next run started within this block."""
    token = _prompt_images.set(tuple(images))
    try:
        yield
    finally:
        _prompt_images.reset(token)


@dataclass(frozen=True, slots=True, kw_only=True)
class _CallOutcome:
    output: str
    is_error: bool
    # Images the tool returned (an MCP tool's): shown to the model after the results.
    images: tuple[ImagePart, ...] = ()


def _returned_images(
    calls: Sequence[ToolCall], outcomes: Sequence[_CallOutcome]
) -> ChatMessage | None:
    """The images tools returned, as a user message after the results (Chat Completions
    takes images in user messages only); None when there are none."""
    images: list[ImagePart] = []
    names: list[str] = []
    for call, outcome in zip(calls, outcomes, strict=True):
        for image in outcome.images:
            images.append(image)
            names.append(f"{image.name} (from {call.name}, call {call.id})")
    if not images:
        return None
    listed = "\n".join(f"- {name}" for name in names)
    return ChatMessage(
        role="user",
        content=f"[Images returned by the tool calls above, in order:\n{listed}]",
        images=tuple(images),
    )


@dataclass(slots=True, kw_only=True)
class _Conversation:
    """One run's messages: the system prompt, the history (folded as it goes), the run's own."""

    system: list[ChatMessage]
    history: list[ChatMessage]
    run: list[ChatMessage] = field(default_factory=list)
    # Messages left out of the last request, so a new drop is reported once.
    dropped: int = 0

    def messages(self) -> list[ChatMessage]:
        return [*self.system, *self.history, *self.run]

    @property
    def prompt_index(self) -> int:
        return len(self.system) + len(self.history)


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
        context_window: int | None = None,
        compactor: Compactor | None = None,
        counter: TokenCounter | None = None,
    ) -> None:
        """`context_window` (tokens) bounds every request; None sets no bound until the
        provider refuses one. `compactor` folds stored history into a summary; without
        one, history that does not fit is dropped instead. `counter` carries the
        token calibration, shared by the engines of one model.
        """
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
        self.context_window = context_window
        self.compactor = compactor
        self.counter = counter if counter is not None else TokenCounter()
        self._tools_tokens: int | None = None

    async def run_stream(
        self,
        prompt: str,
        *,
        history: Sequence[ChatMessage] = (),
        transcript: list[ChatMessage] | None = None,
        inbox: Inbox | None = None,
        images: Sequence[ImagePart] = (),
    ) -> AsyncIterator[RunEvent]:
        """Run the loop on `prompt` after `history`, yielding events; `Done` comes last.

        `images` go with the prompt as image parts (else those given by `prompt_images`).

        New messages (the prompt, the model's replies, tool results) are appended
        to `transcript` as they happen, so a caller can persist what a cancelled
        run did. Messages from `inbox` join the conversation before each LLM call;
        a run does not end while its inbox holds any. Cancelling the consumer
        cancels the run and its running tools.
        """
        queue: asyncio.Queue[RunEvent | None] = asyncio.Queue()
        new_messages = transcript if transcript is not None else []
        first = ChatMessage(
            role="user", content=prompt, images=tuple(images or _prompt_images.get())
        )
        driver = asyncio.create_task(
            self._drive(first, list(history), new_messages, queue.put_nowait, inbox)
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
        prompt: ChatMessage,
        history: list[ChatMessage],
        new_messages: list[ChatMessage],
        emit: Emit,
        inbox: Inbox | None = None,
    ) -> None:
        _prompt_images.set(())  # this task's copy: runs started by its tools get none
        system = [ChatMessage(role="system", content=self.system_prompt)]
        conversation = _Conversation(system=system if self.system_prompt else [], history=history)

        def add(message: ChatMessage) -> None:
            conversation.run.append(message)
            new_messages.append(message)

        add(prompt)
        usage = Usage()
        turns = 0
        last_text = ""
        cut_so_far = ""  # an answer cut at the output limit, being continued
        continuations = 0
        stop = StopReason.COMPLETED
        try:
            while True:
                # Asked before every call, the first included: a budget spent by another
                # part of the run (a sibling sub-agent) stops this one too.
                if (note := self._budget_note()) is not None:
                    stop = StopReason.BUDGET
                    last_text = f"{last_text}\n\n{note}" if last_text else note
                    add(ChatMessage(role="assistant", content=note))
                    break
                turns += 1
                response, folding = await self._request(conversation, emit)
                usage += folding + response.usage
                if self.meter is not None:
                    await self.meter.charge(model=self.model, usage=response.usage, task_id=None)
                if response.text:
                    last_text = cut_so_far + response.text
                add(
                    ChatMessage(
                        role="assistant",
                        content=response.text or None,
                        tool_calls=response.tool_calls,
                    )
                )
                if response.finish_reason == "content_filter":
                    stop = StopReason.CONTENT_FILTER
                    last_text = f"{last_text}\n\n{FILTERED_NOTE}" if last_text else FILTERED_NOTE
                    break
                cut_so_far = ""
                if response.finish_reason == "length" and not response.tool_calls:
                    # The answer hit the model's output limit: let it go on where it
                    # stopped, a few times, then say it was cut.
                    if continuations < MAX_CONTINUATIONS and turns < self.max_turns:
                        continuations += 1
                        cut_so_far = last_text
                        add(ChatMessage(role="user", content=CONTINUE_PROMPT))
                        continue
                    stop = StopReason.LENGTH
                    last_text = f"{last_text}\n\n{CUT_NOTE}" if last_text else CUT_NOTE
                    break
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
                calls = response_calls.set(ResponseCalls(calls=tuple(response.tool_calls)))
                try:
                    outcomes = await asyncio.gather(
                        *(self._run_call(call, emit) for call in response.tool_calls)
                    )
                finally:
                    response_calls.reset(calls)
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
                if shown := _returned_images(response.tool_calls, outcomes):
                    add(shown)
                late: list[ChatMessage] = []
                if turns < self.max_turns and self._budget_note() is None:
                    late = list(inbox()) if inbox else []
                    for message in late:
                        add(message)
                if not late and self._ended_by(response.tool_calls, outcomes):
                    break  # its result is handed back: no model call is left to make
                if turns >= self.max_turns:
                    stop = StopReason.MAX_TURNS
                    note = (
                        f"[Stopped early: reached the limit of {self.max_turns} turns before "
                        "finishing. The work above is partial.]"
                    )
                    last_text = f"{last_text}\n\n{note}" if last_text else note
                    add(ChatMessage(role="assistant", content=note))
                    break
        except LLMError as exc:
            emit(ErrorEvent(message=f"The model call failed: {exc}"))
            stop = StopReason.ERROR
        emit(Done(final_text=last_text, usage=usage, turns=turns, stop_reason=stop))

    def _ended_by(self, calls: Sequence[ToolCall], outcomes: Sequence[_CallOutcome]) -> bool:
        """Whether a call that ends the run (`Tool.ends_run`) succeeded among `calls`."""
        for call, outcome in zip(calls, outcomes, strict=True):
            tool = self.tools.get(call.name)
            if tool is not None and tool.ends_run and not outcome.is_error:
                return True
        return False

    def _budget_note(self) -> str | None:
        return self.meter.exhausted() if self.meter is not None else None

    async def _request(self, conversation: _Conversation, emit: Emit) -> tuple[LLMResponse, Usage]:
        """One LLM call on the fitted conversation; also what folding history cost.

        A context-length error means the provider counts more than we do: the count is
        raised for the model, history is folded (or the request fitted harder when
        there is nothing to fold), and the call is made once more.
        """
        fitted, folding = await self._fit(conversation, emit)
        try:
            response = await self._call_llm(fitted.messages, emit)
        except ContextLengthError as exc:
            logger.warning("the request did not fit the context of %s: %s", self.model, exc)
            sent = fitted.tokens + self._count_tools()
            if exc.tokens:
                self.counter.calibrate(self.model, estimated=sent, reported=exc.tokens)
            else:
                self.counter.distrust(self.model)
            if exc.limit:
                self.counter.learn_window(self.model, exc.limit)
            fitted, more = await self._fit(
                conversation, emit, fold=True, limit=int(fitted.tokens * RETRY_SHARE)
            )
            folding += more
            response = await self._call_llm(fitted.messages, emit)
        if not any(message.images for message in fitted.messages):
            # An image's count is a fixed guess (and a model taking no images got notes
            # instead): such a request would teach the calibration the guess's error.
            self.counter.calibrate(
                self.model,
                estimated=fitted.tokens + self._count_tools(),
                reported=response.usage.prompt_tokens,
            )
        return response, folding

    def _count_tools(self) -> int:
        if self._tools_tokens is None:
            self._tools_tokens = self.counter.tools(tool_schemas(self.tools))
        return self._tools_tokens

    def _budget(self, limit: int | None) -> int:
        """Counted tokens the messages of a request may take."""
        budget = sys.maxsize
        window = self.counter.window(self.model, self.context_window)
        if window is not None:
            usable = window - reply_reserve(window)
            budget = self.counter.budget(self.model, usable) - self._count_tools()
        if limit is not None:
            budget = min(budget, limit)
        return max(MIN_BUDGET, budget)

    async def _fit(
        self,
        conversation: _Conversation,
        emit: Emit,
        *,
        fold: bool = False,
        limit: int | None = None,
    ) -> tuple[Fitted, Usage]:
        """Fit the conversation: trim old tool outputs, fold history, then drop and cut.

        `fold` folds history even when trimming would do (the provider refused the
        request); `limit` caps the budget below the window's.
        """
        budget = self._budget(limit)

        def fitted(drop: bool) -> Fitted:
            return fit(
                conversation.messages(),
                budget=budget,
                counter=self.counter,
                prompt_index=conversation.prompt_index,
                drop=drop,
            )

        result = fitted(drop=False)
        folded = 0
        spent = Usage()
        # Folding is for history: an oversized newest turn is cut to half the budget
        # anyway, and only what is left over after that asks for a summary.
        excess = result.tokens - budget
        if (fold or excess > result.newest_shrink) and self.compactor is not None:
            folded, spent = await self._fold(conversation, budget)
            if folded:
                result = fitted(drop=False)
        if not result.fits:
            result = fitted(drop=True)
        if folded or result.dropped > conversation.dropped:
            emit(Compacted(folded=folded, dropped=result.dropped, trimmed=result.trimmed))
        conversation.dropped = result.dropped
        return result, spent

    async def _fold(self, conversation: _Conversation, budget: int) -> tuple[int, Usage]:
        """Fold older history into a summary; how many messages it replaced, and its cost."""
        assert self.compactor is not None
        history = conversation.history
        point = fold_point(history, counter=self.counter, keep_tokens=budget // KEEP_AFTER_FOLD)
        if not point:
            return 0, Usage()
        try:
            summary = await self.compactor.compact(history[:point])
        except LLMError as exc:
            # Without a summary the request is still fitted, by leaving messages out.
            logger.warning("could not fold the history into a summary: %s", exc)
            return 0, Usage()
        if self.meter is not None and summary.usage.requests:
            await self.meter.charge(model=self.model, usage=summary.usage, task_id=None)
        folded = sum(1 for m in history[:point] if not is_summary(m))
        history[:point] = [summary_message(summary.text)]
        return folded, summary.usage

    async def _call_llm(self, messages: list[ChatMessage], emit: Emit) -> LLMResponse:
        response: LLMResponse | None = None
        async for item in self.llm.stream(
            model=self.model, messages=messages, tools=tool_schemas(self.tools)
        ):
            if isinstance(item, TextChunk):
                emit(TextDelta(text=item.text))
            elif isinstance(item, ModelWaiting):
                emit(item)
            else:
                response = item
        if response is None:
            raise LLMError("the model provider ended the stream without a response")
        return response

    async def _run_call(self, call: ToolCall, emit: Emit) -> _CallOutcome:
        emit(ToolStart(call_id=call.id, name=call.name, arguments=call.arguments))
        # Each call runs in a task of its own (gather), so this is set for it alone.
        current_call.set(call)
        # A name the model invented must not become a label (nor name a span).
        label = call.name if call.name in self.tools else "unknown"
        traced = tracing.current()
        with traced.tool_call(name=label, call_id=call.id, arguments=call.arguments) as span:
            try:
                outcome = await self._execute(call, emit, traced, span)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # A bug in a tool must not end the run: the model hears of it and goes on.
                logger.exception("tool %s failed unexpectedly", call.name)
                tracing.failed(span, exc)
                outcome = _CallOutcome(
                    output=f"Error: {call.name} failed unexpectedly: {type(exc).__name__}: {exc}",
                    is_error=True,
                )
            finally:
                if (siblings := response_calls.get()) is not None:
                    siblings.ended.add(call.id)
            output = cap_output(outcome.output, self.output_limit)
            if traced.capture_content:
                span.set_attribute(tracing.TOOL_RESULT, traced.content(output))
        metrics.record_tool_call(label, is_error=outcome.is_error)
        emit(ToolResult(call_id=call.id, name=call.name, output=output, is_error=outcome.is_error))
        return _CallOutcome(output=output, is_error=outcome.is_error, images=outcome.images)

    async def _execute(
        self, call: ToolCall, emit: Emit, traced: tracing.Tracing, span: tracing.Span
    ) -> _CallOutcome:
        """Run one call (after the hooks and, if they ask, a person); `span` is its span,
        marked with the kind of failure when it does not run or fails."""
        tool = self.tools.get(call.name)
        if tool is None:
            tracing.failed(span, "unknown_tool")
            available = ", ".join(self.tools.names()) or "none"
            return _CallOutcome(
                output=f"Error: there is no tool named {call.name!r}. Available tools: "
                f"{available}.",
                is_error=True,
            )
        try:
            arguments = tool.parse_arguments(call.arguments)
        except ToolError as exc:
            tracing.failed(span, "invalid_arguments")
            return _CallOutcome(output=f"Error: {exc}", is_error=True)
        invocation = ToolInvocation(
            call_id=call.id, tool=tool, arguments=arguments, raw_arguments=call.arguments
        )
        decision = await decide(self.hooks, invocation)
        if decision.action == "deny":
            tracing.failed(span, "denied")
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
                tracing.failed(span, "not_approved")
                return _CallOutcome(
                    output=f"Not run: this call needs a person's approval ({decision.reason}) "
                    "and nobody can be asked here, so it was refused.",
                    is_error=True,
                )
            with traced.approval(
                tool=call.name, call_id=call.id, risk=decision.risk, reason=decision.reason
            ) as waiting:
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
                waiting.set_attribute("baton.approval.decision", verdict.outcome)
            if not verdict.approved:
                tracing.failed(span, "not_approved")
                return _CallOutcome(output=f"Not run: {verdict.message}", is_error=True)
        approved = person_approved.set(decision.action == "ask")
        try:
            output = await tool.run(arguments)
        except ToolError as exc:
            tracing.failed(span, "tool_error")
            return _CallOutcome(output=f"Error: {exc}", is_error=True)
        finally:
            person_approved.reset(approved)
        if isinstance(output, ToolOutput):
            images = tuple(
                ImagePart(name=image.name, media_type=image.media_type, data=image.data)
                for image in output.images
                if image.media_type in IMAGE_MEDIA_TYPES
            )
            return _CallOutcome(output=output.text, is_error=False, images=images)
        return _CallOutcome(output=output, is_error=False)
