"""A fake OpenTelemetry collector: OTLP/HTTP traces on loopback, for tests.

Serves ``POST /v1/traces`` with ``application/x-protobuf`` bodies, as the OTLP/HTTP
exporter sends them, and decodes each with the protocol's own message
(``ExportTraceServiceRequest``). Tests read ``fake.spans`` (every span received, with
its resource's attributes) and ``fake.bodies`` (the raw request bytes, to look for
what must never be exported).

Example:
    async with FakeCollector() as collector:
        tracing = build_tracing(endpoint=collector.traces_url, ...)
        ...
        await tracing.flush()
        assert collector.named("chat fake-model")
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from tests.fakes.serving import AppServer

__all__ = ["FakeCollector", "ReceivedSpan"]

PROTOBUF = "application/x-protobuf"


@dataclass(frozen=True, slots=True, kw_only=True)
class ReceivedSpan:
    """One exported span, decoded: ids as hex, attributes as Python values."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root span
    kind: int
    attributes: dict[str, Any]
    status_code: int  # 0 unset, 1 ok, 2 error
    status_message: str
    events: tuple[str, ...]
    resource: dict[str, Any]
    scope: str


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    if kind is None:
        return None
    return getattr(value, kind)


def _attributes(pairs: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    pair: KeyValue
    for pair in pairs:
        found[pair.key] = _value(pair.value)
    return found


class FakeCollector(AppServer):
    """An in-process OTLP/HTTP traces receiver.

    Attributes:
        bodies: Each export request's body, as received (decompressed).
        spans: Every span received, in arrival order.
        refused: Requests that were not OTLP protobuf traces (answered 400 or 415).
    """

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.spans: list[ReceivedSpan] = []
        self.refused: list[str] = []
        super().__init__()

    def runner(self) -> web.AppRunner:
        # Its base URL is what OTEL_EXPORTER_OTLP_ENDPOINT names: a collector.
        app = web.Application()
        app.router.add_post("/v1/traces", self._handle_traces)
        return web.AppRunner(app, access_log=None, shutdown_timeout=1.0)

    @property
    def traces_url(self) -> str:
        """The traces URL, as OTEL_EXPORTER_OTLP_TRACES_ENDPOINT names it."""
        return f"{self.url}/v1/traces"

    @property
    def payload(self) -> bytes:
        """Every body received, joined: what a search for a leaked secret reads."""
        return b"".join(self.bodies)

    def named(self, name: str) -> list[ReceivedSpan]:
        return [span for span in self.spans if span.name == name]

    def one(self, name: str) -> ReceivedSpan:
        found = self.named(name)
        assert len(found) == 1, f"{len(found)} spans named {name!r}: {self.names()}"
        return found[0]

    def names(self) -> list[str]:
        return [span.name for span in self.spans]

    def by_id(self, span_id: str) -> ReceivedSpan | None:
        return next((span for span in self.spans if span.span_id == span_id), None)

    def ancestors(self, span: ReceivedSpan) -> list[ReceivedSpan]:
        """`span`'s parent, its parent's parent, … up to the root (all received)."""
        found = []
        while span.parent_id:
            parent = self.by_id(span.parent_id)
            assert parent is not None, f"{span.name}: its parent {span.parent_id} never arrived"
            found.append(parent)
            span = parent
        return found

    async def _handle_traces(self, request: web.Request) -> web.Response:
        if request.content_type != PROTOBUF:
            self.refused.append(f"content type {request.content_type}")
            return web.Response(status=415, text=f"not {PROTOBUF}")
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        message = ExportTraceServiceRequest()
        try:
            message.ParseFromString(body)
        except Exception as exc:  # a body that is not the protocol's message
            self.refused.append(f"undecodable: {exc}")
            return web.Response(status=400, text="not an ExportTraceServiceRequest")
        self.bodies.append(body)
        for resource_spans in message.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            kind=span.kind,
                            attributes=_attributes(span.attributes),
                            status_code=span.status.code,
                            status_message=span.status.message,
                            events=tuple(event.name for event in span.events),
                            resource=resource,
                            scope=scope_spans.scope.name,
                        )
                    )
        reply = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=reply, content_type=PROTOBUF)
