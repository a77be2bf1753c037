"""OpenTelemetry traces: a span for each run, model call, tool call, approval wait and
sub-agent, described with OpenTelemetry's GenAI semantic conventions.

Off unless the operator sets OTEL_EXPORTER_OTLP_ENDPOINT (or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT): then `build_tracing` makes a tracer provider of
Baton's own (never the process-global one, which can be set only once) that batches
spans to the OTLP/HTTP exporter. Unset, the SDK and the exporter are not even imported,
and every span below is a shared no-op that touches no context.

The tracing of a run travels in the run's OpenTelemetry context: `Tracing.run` makes it
current with the run's span, and the engine, the model client and the sub-agent runner
find it there (`current()`) as they find the span to parent theirs to. An asyncio task
copies the context it is made in; a background child, run in a task its tracker owns,
is handed the context of the `task` call that started it all the same (`carried`).

Spans carry ids, names, counts and outcomes. Message text, prompts, tool arguments and
outputs join them only with OTEL_CAPTURE_CONTENT=true, and then through Baton's
redaction (`bot.redaction`), cut to a bounded length.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import INVALID_SPAN, Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from bot.redaction import Redactor

__all__ = [
    "DISABLED",
    "INVALID_SPAN",
    "Context",
    "Span",
    "Tracing",
    "active",
    "build_tracing",
    "carried",
    "current",
    "failed",
    "newest_json",
    "resumed",
]

SERVICE_NAME = "baton"
# The longest value an attribute may hold (characters; each item of a list): the SDK
# cuts longer ones, so no captured message or argument makes a span without bound.
MAX_ATTRIBUTE_LENGTH = 16_384
# One captured text (a message, an argument, an output) is cut here, after redaction.
MAX_CONTENT_LENGTH = 4_096
# A model-given id (a tool call's) as a span carries it.
MAX_ID_LENGTH = 128

# The GenAI semantic conventions' names.
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
SYSTEM = "gen_ai.system"  # the older name of the provider, still read by many backends
AGENT_NAME = "gen_ai.agent.name"
AGENT_ID = "gen_ai.agent.id"
CONVERSATION = "gen_ai.conversation.id"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
ERROR_TYPE = "error.type"

Attributes = Mapping[str, AttributeValue]

_TRACING = otel_context.create_key("baton-tracing")
_NO_SPAN: AbstractContextManager[Span] = nullcontext(INVALID_SPAN)


class Tracing:
    """Baton's tracer, and what may go into its spans.

    Built once by the composition root (`build_tracing`); `DISABLED` when traces are
    off, whose spans are `INVALID_SPAN` (every method of it does nothing).
    """

    def __init__(
        self,
        tracer: trace.Tracer | None = None,
        *,
        capture_content: bool = False,
        redact: Redactor | None = None,
        provider: Any = None,
    ) -> None:
        """`provider` is the SDK's tracer provider the tracer comes from: flushed and
        shut down by `flush` and `close`."""
        self._tracer = tracer
        self.capture_content = capture_content and tracer is not None
        self._redact = redact or Redactor()
        self._provider = provider

    @property
    def enabled(self) -> bool:
        return self._tracer is not None

    # ------------------------------------------------------------------ the spans

    def run(
        self,
        *,
        run_id: str,
        conversation: str,
        channel_id: str | None,
        thread_ts: str | None,
        user_id: str,
    ) -> AbstractContextManager[Span]:
        """The span of one run (`invoke_agent baton`), current for everything the run
        does, with this tracing: the run's model calls, tools and sub-agents find it."""
        if self._tracer is None:
            return _NO_SPAN
        attributes: dict[str, AttributeValue] = {
            OPERATION: "invoke_agent",
            AGENT_NAME: SERVICE_NAME,
            CONVERSATION: conversation,
            "baton.run.id": run_id,
            "baton.user.id": user_id,
        }
        if channel_id:
            attributes["baton.channel.id"] = channel_id
        if thread_ts:
            attributes["baton.thread.ts"] = thread_ts
        return self._run_span(attributes)

    def agent(
        self, *, name: str, task_id: str, model: str, background: bool, depth: int
    ) -> AbstractContextManager[Span]:
        """The span of a sub-agent (`invoke_agent {name}`), current while it runs."""
        if self._tracer is None:
            return _NO_SPAN
        return self._current(
            f"invoke_agent {name}",
            {
                OPERATION: "invoke_agent",
                AGENT_NAME: name,
                AGENT_ID: task_id,
                REQUEST_MODEL: model,
                "baton.task.background": background,
                "baton.task.depth": depth,
            },
        )

    def tool_call(self, *, name: str, call_id: str, arguments: str) -> AbstractContextManager[Span]:
        """The span of one tool call (`execute_tool {name}`), current while it runs.

        `name` must be a tool Baton has (or ``unknown``): the model's own words never
        name a span.
        """
        if self._tracer is None:
            return _NO_SPAN
        attributes: dict[str, AttributeValue] = {
            OPERATION: "execute_tool",
            TOOL_NAME: name,
            TOOL_CALL_ID: self.ident(call_id),
            TOOL_TYPE: "function",
        }
        if self.capture_content:
            attributes[TOOL_ARGUMENTS] = self.content(arguments)
        return self._current(f"execute_tool {name}", attributes)

    def approval(
        self, *, tool: str, call_id: str, risk: str | None, reason: str
    ) -> AbstractContextManager[Span]:
        """The span of a wait for a person's decision (`approval {tool}`)."""
        if self._tracer is None:
            return _NO_SPAN
        attributes: dict[str, AttributeValue] = {
            TOOL_NAME: tool,
            TOOL_CALL_ID: self.ident(call_id),
        }
        if risk:
            attributes["baton.approval.risk"] = risk
        if self.capture_content:
            # Why it asks may quote the command it asks about.
            attributes["baton.approval.reason"] = self.content(reason)
        return self._current(f"approval {tool}", attributes)

    def chat(self, *, model: str, server: str | None) -> Span:
        """The span of one model call (`chat {model}`), started but not current: the
        call streams from a generator, across yields no context may be held. The caller
        ends it; `active` makes it current around the HTTP request."""
        if self._tracer is None:
            return INVALID_SPAN
        attributes: dict[str, AttributeValue] = {
            OPERATION: "chat",
            PROVIDER: "openai",
            SYSTEM: "openai",
            REQUEST_MODEL: model,
        }
        if server:
            attributes["server.address"] = server
        return self._tracer.start_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes)

    @contextmanager
    def _run_span(self, attributes: Attributes) -> Iterator[Span]:
        # This tracing joins the context first, so the run's span and everything under
        # it is made in a context that holds it.
        with resumed(otel_context.set_value(_TRACING, self)):
            with self._current(f"invoke_agent {SERVICE_NAME}", attributes) as span:
                yield span

    def _current(self, name: str, attributes: Attributes) -> AbstractContextManager[Span]:
        assert self._tracer is not None
        return _current_span(self._tracer, name, attributes)

    # ------------------------------------------------------------------ content

    def content(self, text: str) -> str:
        """`text` as a span may carry it when content is captured: redacted, then cut
        to MAX_CONTENT_LENGTH (cut after, so no cut leaves part of a secret readable)."""
        return _clip(self._redact(text), MAX_CONTENT_LENGTH)

    def ident(self, value: str) -> str:
        """An id the model gave (a tool call's): redacted and cut, as it is model text."""
        return _clip(self._redact(value), MAX_ID_LENGTH)

    # ------------------------------------------------------------------ the provider

    async def flush(self) -> None:
        """Export every span ended so far (in a thread: the exporter's HTTP is blocking)."""
        if self._provider is not None:
            await asyncio.to_thread(self._provider.force_flush)

    async def close(self) -> None:
        """Export what is left and stop the exporter (at shutdown)."""
        provider, self._provider = self._provider, None
        if provider is not None:
            await asyncio.to_thread(provider.shutdown)


DISABLED = Tracing()


def current() -> Tracing:
    """The tracing of the run in progress, from its context; `DISABLED` outside a run."""
    found = otel_context.get_value(_TRACING)
    return found if isinstance(found, Tracing) else DISABLED


def carried() -> Context:
    """The context here (the tracing, the span now current), for work that goes on in
    a task made elsewhere (`resumed`)."""
    return otel_context.get_current()


@contextmanager
def resumed(context: Context) -> Iterator[None]:
    """Work within `context` (from `carried`); enter and leave it in one task."""
    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)


@contextmanager
def active(span: Span) -> Iterator[None]:
    """`span` current for the block (a model call's, around its HTTP request)."""
    if not span.is_recording():
        yield
        return
    with trace.use_span(span, record_exception=False, set_status_on_exception=False):
        yield


def failed(span: Span, error: BaseException | str) -> None:
    """Mark `span` failed: an error status and `error.type`, which is the exception's
    class or a short fixed word (never its message, which may quote content).

    A cancellation (or a reader that stopped reading a stream) is no failure: it is
    noted, and the status is left alone.
    """
    if isinstance(error, asyncio.CancelledError | GeneratorExit):
        span.set_attribute("baton.cancelled", True)
        return
    kind = error if isinstance(error, str) else type(error).__name__
    span.set_attribute(ERROR_TYPE, kind)
    span.set_status(Status(StatusCode.ERROR, kind))


def newest_json(items: Sequence[Any], limit: int = MAX_ATTRIBUTE_LENGTH) -> str:
    """`items` as a JSON array of about `limit` characters: the oldest are left out
    first (the newest message of a conversation says most about a call). The newest is
    kept even when it alone is longer (the span's attribute limit then cuts it)."""
    kept: list[str] = []
    size = 2
    for item in reversed(items):
        encoded = json.dumps(item, ensure_ascii=False)
        if kept and size + len(encoded) + 1 > limit:
            break
        kept.append(encoded)
        size += len(encoded) + 1
    return "[" + ",".join(reversed(kept)) + "]"


def build_tracing(*, endpoint: str | None, capture_content: bool, redact: Redactor) -> Tracing:
    """Tracing that exports to `endpoint` (an OTLP/HTTP traces URL); `DISABLED` when None.

    The SDK and the exporter are imported here, and only when there is an endpoint. The
    standard variables the SDK reads itself apply: OTEL_SERVICE_NAME (default
    ``baton``), OTEL_RESOURCE_ATTRIBUTES, OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT,
    _COMPRESSION and _CERTIFICATE, OTEL_TRACES_SAMPLER, OTEL_BSP_* (batching).
    """
    if not endpoint:
        return DISABLED
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    provider = TracerProvider(
        resource=resource, span_limits=SpanLimits(max_attribute_length=MAX_ATTRIBUTE_LENGTH)
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return Tracing(
        provider.get_tracer("baton"),
        capture_content=capture_content,
        redact=redact,
        provider=provider,
    )


@contextmanager
def _current_span(tracer: trace.Tracer, name: str, attributes: Attributes) -> Iterator[Span]:
    # Exceptions are recorded by `failed`, by class only: the SDK's own recording would
    # put the exception's message and traceback (which may quote content) on the span.
    with tracer.start_as_current_span(
        name,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            failed(span, exc)
            raise


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"… [{len(text) - limit:,} more characters]"
