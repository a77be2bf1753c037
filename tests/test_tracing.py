"""Traces: on only with an endpoint, free without one, and Baton's own provider each time.

The end-to-end tests of the spans a Slack run makes are in tests/slack/test_traces.py.
"""

from __future__ import annotations

import ast
import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from opentelemetry import trace

from bot import tracing
from bot.redaction import Redactor
from bot.tracing import DISABLED, MAX_ATTRIBUTE_LENGTH, build_tracing
from tests.fakes.openai_api import FakeOpenAI, Reply, ToolCallSpec
from tests.fakes.otlp import FakeCollector
from tests.processes import bot_environment

# Imports what the bot and the terminal chat run, builds the whole bot from the
# environment it is given, and names the OpenTelemetry modules then loaded.
LOADED_WITHOUT_TRACES = """
import asyncio, sys
import bot.chat, bot.cli, bot.slack.server
from bot.app import build_baton
from bot.config import load_settings

async def main():
    baton = await build_baton(load_settings())
    print(baton.tracing.enabled)
    await baton.close()

asyncio.run(main())
print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
"""


def loaded_modules(tmp_path: Path, **extra: str) -> tuple[bool, list[str]]:
    """Whether a bot built with `extra` in its environment traces, and the OpenTelemetry
    modules it loaded."""
    result = subprocess.run(
        [sys.executable, "-c", LOADED_WITHOUT_TRACES],
        cwd=tmp_path, env=environment(tmp_path, **extra), capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    enabled, loaded = result.stdout.strip().splitlines()[-2:]
    return enabled == "True", ast.literal_eval(loaded)


@pytest.fixture
async def collector() -> AsyncIterator[FakeCollector]:
    async with FakeCollector() as fake:
        yield fake


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    return bot_environment(
        BATON_STATE_DIR=str(tmp_path / "state"),
        BATON_WORKSPACE=str(workspace),
        BATON_MODEL="fake-model",
        DATABASE_URL=f"sqlite:///{tmp_path / 'baton.db'}",
        LOG_LEVEL="",
        **extra,
    )


def test_without_an_endpoint_the_sdk_and_the_exporter_are_never_imported(tmp_path: Path) -> None:
    # Other OTEL_ variables alone (headers, a service name) turn nothing on.
    enabled, loaded = loaded_modules(
        tmp_path,
        OTEL_SERVICE_NAME="baton-quiet",
        OTEL_EXPORTER_OTLP_HEADERS="authorization=Bearer unused",
        OTEL_CAPTURE_CONTENT="true",
    )
    assert not enabled
    assert "opentelemetry.trace" in loaded  # the API: the no-op tracer's home
    assert not [m for m in loaded if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter"))]
    # The same bot with an endpoint loads them (so the check above can see them).
    enabled, loaded = loaded_modules(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")
    assert enabled
    assert "opentelemetry.sdk.trace" in loaded
    assert "opentelemetry.exporter.otlp.proto.http.trace_exporter" in loaded


async def test_baton_chat_sends_its_run_where_the_environment_says(
    tmp_path: Path, fake_llm: FakeOpenAI, collector: FakeCollector
) -> None:
    fake_llm.script(
        Reply(tool_calls=[ToolCallSpec("list_dir", {"path": "."}, id="call_list")]),
        Reply(text="There is nothing here."),
    )
    env = environment(
        tmp_path,
        OPENAI_BASE_URL=fake_llm.url,
        OPENAI_API_KEY="sk-test-chat-key-0123456789",
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.url,
        OTEL_SERVICE_NAME="baton-chat-test",
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "chat",
        cwd=tmp_path, env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(b"what is in the workspace?\n"), 60)
    assert process.returncode == 0, err.decode()
    assert "There is nothing here." in out.decode()

    # Sent as the process ended (closing Baton flushes the spans), in one trace.
    run = collector.one("invoke_agent baton")
    assert run.parent_id == "" and run.resource["service.name"] == "baton-chat-test"
    assert run.attributes["gen_ai.conversation.id"] == "chat:default"
    listing = collector.one("execute_tool list_dir")
    assert listing.parent_id == run.span_id
    assert [c.parent_id for c in collector.named("chat fake-model")] == [run.span_id] * 2
    assert b"what is in the workspace" not in collector.payload
    assert b"sk-test-chat-key" not in collector.payload


async def test_off_the_spans_are_no_ops_that_touch_no_context() -> None:
    assert build_tracing(endpoint=None, capture_content=True, redact=Redactor()) is DISABLED
    assert not DISABLED.capture_content
    before = trace.get_current_span()
    with DISABLED.run(
        run_id="r", conversation="c", channel_id="C1", thread_ts="1.0", user_id="U1"
    ) as span:
        assert not span.is_recording()
        assert trace.get_current_span() is before
        assert tracing.current() is DISABLED
        with DISABLED.tool_call(name="bash", call_id="x", arguments="{}") as call:
            assert not call.is_recording()
    assert not DISABLED.chat(model="m", server=None).is_recording()


async def test_each_tracing_is_its_own_provider_and_never_the_global_one() -> None:
    async with FakeCollector() as first, FakeCollector() as second:
        one = build_tracing(endpoint=first.traces_url, capture_content=False, redact=Redactor())
        two = build_tracing(endpoint=second.traces_url, capture_content=False, redact=Redactor())
        try:
            with one.run(
                run_id="r1", conversation="c1", channel_id=None, thread_ts=None, user_id="U1"
            ) as span:
                span.set_attribute("baton.test.long", "y" * 50_000)  # cut by the span limits
                assert tracing.current() is one
                with tracing.current().tool_call(name="glob", call_id="a", arguments="{}"):
                    pass
            with two.run(
                run_id="r2", conversation="c2", channel_id=None, thread_ts=None, user_id="U2"
            ):
                assert tracing.current() is two
            assert tracing.current() is DISABLED  # left with the run
        finally:
            await one.close()
            await two.close()
        assert first.names() == ["execute_tool glob", "invoke_agent baton"]
        assert second.names() == ["invoke_agent baton"]
        assert first.one("execute_tool glob").parent_id == first.one("invoke_agent baton").span_id
        assert first.spans[0].resource["service.name"] == "baton"
        long = first.one("invoke_agent baton").attributes["baton.test.long"]
        assert long == "y" * MAX_ATTRIBUTE_LENGTH
    # The process-wide provider was never set: libraries that trace through it (the MCP
    # SDK does) stay no-ops, and Baton's spans go only where Baton sends them.
    assert type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider"
