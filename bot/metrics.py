"""Baton's Prometheus metrics, served at `GET /metrics`.

They live on a registry of Baton's own (`REGISTRY`), never on prometheus_client's
global default, so a library that registers metrics there cannot clash with them.
They are process-global: the engine, the approvals and the Slack client record
through the functions below without a metrics object handed down to each. Several
Batons in one process (the tests) therefore add to the same series; a test reads
the change it caused (`sample` before and after), not an absolute value.

Label values are bounded: outcomes come from short fixed lists, Slack methods from
our own code, and a tool name the model invented, like a webhook name a caller
invented, is recorded as ``unknown``.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Mapping
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = [
    "CONTENT_TYPE_LATEST",
    "REGISTRY",
    "record_approval",
    "record_llm_call",
    "record_run",
    "record_slack_call",
    "record_slack_rate_limited",
    "record_tool_call",
    "record_webhook_delivery",
    "render",
    "sample",
    "watch_admission",
]

REGISTRY = CollectorRegistry(auto_describe=True)

RUNS = Counter(
    "baton_runs",
    "Runs finished, by outcome (done, failed, cancelled, cut, ...).",
    ["outcome"],
    registry=REGISTRY,
)
TOOL_CALLS = Counter(
    "baton_tool_calls",
    "Tool calls, by tool and outcome (ok or error).",
    ["tool", "outcome"],
    registry=REGISTRY,
)
APPROVALS = Counter(
    "baton_approvals",
    "Approval requests ended, by outcome (approved, denied, expired, cancelled).",
    ["outcome"],
    registry=REGISTRY,
)
LLM_CALL_SECONDS = Histogram(
    "baton_llm_call_seconds",
    "Time of one model answer, from request to last chunk, retries included.",
    registry=REGISTRY,
    buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 900),
)
LLM_TOKENS = Counter(
    "baton_llm_tokens",
    "Tokens of model calls, by kind (prompt or completion).",
    ["kind"],
    registry=REGISTRY,
)
SLACK_CALLS = Counter(
    "baton_slack_api_calls",
    "Slack Web API calls made by Baton's client, by method.",
    ["method"],
    registry=REGISTRY,
)
SLACK_RATE_LIMITED = Counter(
    "baton_slack_api_rate_limited",
    "HTTP 429 answers of the Slack Web API, by method (each retried attempt counts).",
    ["method"],
    registry=REGISTRY,
)
WEBHOOK_DELIVERIES = Counter(
    "baton_webhook_deliveries",
    "Deliveries to POST /hooks/<name>, by webhook (its name in baton.yaml, or unknown) "
    "and result (started, pong, or why it was refused: see bot/triggers/webhooks.py).",
    ["webhook", "result"],
    registry=REGISTRY,
)
RUNS_WAITING = Gauge(
    "baton_runs_waiting",
    "Runs of this process waiting for admission (limits: runs, runs_per_user).",
    registry=REGISTRY,
)
TASKS_RUNNING = Gauge(
    "baton_tasks_running",
    "Sub-agent tasks whose child runs in this process (foreground and background).",
    registry=REGISTRY,
)


class _Waiting(Protocol):
    @property
    def waiting(self) -> frozenset[str]: ...


class _Running(Protocol):
    @property
    def running_here(self) -> int: ...


# Weak: an admission that is gone (a stopped surface, a finished test) drops out.
_admissions: weakref.WeakSet[_Waiting] = weakref.WeakSet()
RUNS_WAITING.set_function(lambda: sum(len(admission.waiting) for admission in _admissions))
_trackers: weakref.WeakSet[_Running] = weakref.WeakSet()
TASKS_RUNNING.set_function(lambda: sum(tracker.running_here for tracker in _trackers))
GC_FROZEN = Gauge(
    "baton_gc_frozen_objects",
    "Objects of the start-up heap set aside from the garbage collector's passes "
    "(bot/heap.py); 0 until Baton serves.",
    registry=REGISTRY,
)
GC_FROZEN.set_function(gc.get_freeze_count)


def record_run(outcome: str) -> None:
    """A run ended with `outcome` (done, failed, cancelled, cut, ...)."""
    RUNS.labels(outcome=outcome).inc()


def record_tool_call(tool: str, *, is_error: bool) -> None:
    """A tool call ended; `tool` must be a registered name or ``unknown``."""
    TOOL_CALLS.labels(tool=tool, outcome="error" if is_error else "ok").inc()


def record_approval(outcome: str) -> None:
    """An approval request ended in state `outcome`."""
    APPROVALS.labels(outcome=outcome).inc()


def record_llm_call(seconds: float, *, prompt_tokens: int, completion_tokens: int) -> None:
    """A model answer arrived after `seconds`, costing these tokens."""
    LLM_CALL_SECONDS.observe(max(0.0, seconds))
    LLM_TOKENS.labels(kind="prompt").inc(max(0, prompt_tokens))
    LLM_TOKENS.labels(kind="completion").inc(max(0, completion_tokens))


def record_slack_call(method: str) -> None:
    """Baton's client called Slack Web API `method` (e.g. ``chat.postMessage``)."""
    SLACK_CALLS.labels(method=method).inc()


def record_slack_rate_limited(method: str) -> None:
    """Slack answered a call of `method` with HTTP 429."""
    SLACK_RATE_LIMITED.labels(method=method).inc()


def record_webhook_delivery(webhook: str, result: str) -> None:
    """A delivery to a webhook was answered; `webhook` must be a name baton.yaml lists or
    ``unknown`` (never the path a caller sent), `result` one of a fixed list."""
    WEBHOOK_DELIVERIES.labels(webhook=webhook, result=result).inc()


def watch_admission(admission: _Waiting) -> None:
    """Count `admission.waiting` in `baton_runs_waiting` for as long as it exists."""
    _admissions.add(admission)


def watch_tasks(tracker: _Running) -> None:
    """Count `tracker.running_here` in `baton_tasks_running` for as long as it exists."""
    _trackers.add(tracker)


def render() -> bytes:
    """The registry in Prometheus' text format (serve it as `CONTENT_TYPE_LATEST`)."""
    return generate_latest(REGISTRY)


def sample(name: str, labels: Mapping[str, str] | None = None) -> float:
    """The current value of one sample (e.g. ``baton_runs_total``); 0 when not recorded."""
    return REGISTRY.get_sample_value(name, dict(labels or {})) or 0.0
