"""bot/metrics.py: the series, and the Slack client's counting over real HTTP.

The metrics are process-global, so each test reads the change it caused.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from slack_sdk.errors import SlackApiError

from bot import metrics
from bot.slack.surface import build_web_client
from bot.store.database import Database
from bot.store.instances import Instances
from bot.store.tasks import TaskStore
from bot.subagents.tracker import TaskTracker
from tests.conftest import make_settings
from tests.fakes.slack_api import FakeSlackAPI


def test_record_run_counts_by_outcome() -> None:
    before = metrics.sample("baton_runs_total", {"outcome": "done"})
    cut = metrics.sample("baton_runs_total", {"outcome": "cut"})
    metrics.record_run("done")
    metrics.record_run("done")
    metrics.record_run("cut")
    assert metrics.sample("baton_runs_total", {"outcome": "done"}) == before + 2
    assert metrics.sample("baton_runs_total", {"outcome": "cut"}) == cut + 1
    assert b'baton_runs_total{outcome="done"}' in metrics.render()


def test_tool_calls_approvals_and_llm_calls_are_counted() -> None:
    error = {"tool": "bash", "outcome": "error"}
    before = metrics.sample("baton_tool_calls_total", error)
    metrics.record_tool_call("bash", is_error=True)
    assert metrics.sample("baton_tool_calls_total", error) == before + 1

    denied = metrics.sample("baton_approvals_total", {"outcome": "denied"})
    metrics.record_approval("denied")
    assert metrics.sample("baton_approvals_total", {"outcome": "denied"}) == denied + 1

    calls = metrics.sample("baton_llm_call_seconds_count")
    prompt = metrics.sample("baton_llm_tokens_total", {"kind": "prompt"})
    completion = metrics.sample("baton_llm_tokens_total", {"kind": "completion"})
    metrics.record_llm_call(1.5, prompt_tokens=120, completion_tokens=30)
    assert metrics.sample("baton_llm_call_seconds_count") == calls + 1
    assert metrics.sample("baton_llm_tokens_total", {"kind": "prompt"}) == prompt + 120
    assert metrics.sample("baton_llm_tokens_total", {"kind": "completion"}) == completion + 30


def test_the_registry_is_batons_own() -> None:
    from prometheus_client import REGISTRY as DEFAULT

    assert metrics.REGISTRY is not DEFAULT
    assert DEFAULT.get_sample_value("baton_runs_total", {"outcome": "done"}) is None


class _Queue:
    def __init__(self, *run_ids: str) -> None:
        self.waiting = frozenset(run_ids)


def test_runs_waiting_follows_the_admissions_alive() -> None:
    base = metrics.sample("baton_runs_waiting")
    first, second = _Queue("r1", "r2"), _Queue("r3")
    metrics.watch_admission(first)
    metrics.watch_admission(second)
    assert metrics.sample("baton_runs_waiting") == base + 3
    del second
    assert metrics.sample("baton_runs_waiting") == base + 2
    first.waiting = frozenset()
    assert metrics.sample("baton_runs_waiting") == base


async def test_tasks_running_counts_the_children_running_in_this_process(
    tmp_path: Path,
) -> None:
    """What a replica's operator (and the replica tests) read to know that a child it
    ran, cancelled from another replica, has stopped here."""
    database = Database(f"sqlite:///{tmp_path / 'baton.db'}")
    await database.create_schema()
    instances = Instances(database)
    await instances.register()
    tracker = TaskTracker(TaskStore(database), instances, sweep_s=30.0)
    base = metrics.sample("baton_tasks_running")
    try:
        children = [asyncio.create_task(asyncio.Event().wait()) for _ in range(2)]
        tracker.attach("explore-1", children[0])
        tracker.attach("explore-2", children[1])
        assert metrics.sample("baton_tasks_running") == base + 2
        children[0].cancel()
        await asyncio.gather(children[0], return_exceptions=True)
        assert metrics.sample("baton_tasks_running") == base + 1
        assert b"baton_tasks_running" in metrics.render()
    finally:
        children[1].cancel()
        await asyncio.gather(children[1], return_exceptions=True)
        await tracker.shutdown()
        await database.close()
    assert metrics.sample("baton_tasks_running") == base


async def test_the_slack_client_counts_calls_and_429s_by_method(tmp_path: Path) -> None:
    async with FakeSlackAPI() as slack:
        settings = make_settings(
            tmp_path, "http://127.0.0.1:9", slack_bot_token="xoxb-test", slack_api_url=slack.url
        )
        client = build_web_client(settings)
        post = {"method": "chat.postMessage"}
        calls = metrics.sample("baton_slack_api_calls_total", post)
        limited = metrics.sample("baton_slack_api_rate_limited_total", post)
        slack.fail_next("chat.postMessage", status=429, retry_after=0)
        await client.chat_postMessage(channel="C1", text="after one 429")
        assert metrics.sample("baton_slack_api_calls_total", post) == calls + 1
        assert metrics.sample("baton_slack_api_rate_limited_total", post) == limited + 1

        # The 429 that uses up the retries is counted too.
        slack.fail_next("chat.postMessage", status=429, retry_after=0, times=4)
        with pytest.raises(SlackApiError):
            await client.chat_postMessage(channel="C1", text="never posted")
        assert metrics.sample("baton_slack_api_rate_limited_total", post) == limited + 5
