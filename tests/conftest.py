"""Shared fixtures: local fakes for the outside world, and no real network."""

from __future__ import annotations

import gc
import inspect
import ipaddress
import os
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from bot.app import Baton, build_baton
from bot.config import ModelCallsConfig, PermissionsConfig, SandboxConfig, Settings
from bot.engine.llm import LLMClient
from bot.store import Database
from bot.tools.workspace import Workspace
from tests.databases import fresh_database, migrated_sqlite
from tests.fakes.openai_api import FakeOpenAI

TEST_RETRY_DEADLINE_S = 2.0
# Which database the Slack end-to-end harness runs on: "sqlite" (the default) or
# "postgresql" (a fresh database per harness on BATON_TEST_POSTGRES_URL's server).
TEST_DATABASE_KINDS = ("sqlite", "postgresql")


def harness_database_kind() -> str:
    """BATON_TEST_DATABASE, checked: asking for PostgreSQL without a server is an error,
    never a quiet fall back to SQLite."""
    kind = os.environ.get("BATON_TEST_DATABASE", "").strip().lower() or "sqlite"
    if kind not in TEST_DATABASE_KINDS:
        raise pytest.UsageError(
            f"BATON_TEST_DATABASE={kind!r}: expected one of {', '.join(TEST_DATABASE_KINDS)}"
        )
    if kind == "postgresql" and not os.environ.get("BATON_TEST_POSTGRES_URL"):
        raise pytest.UsageError(
            "BATON_TEST_DATABASE=postgresql needs BATON_TEST_POSTGRES_URL (a server where "
            "the user may create databases), e.g. postgresql://user:pw@127.0.0.1:5432/postgres"
        )
    return kind


def pytest_configure(config: pytest.Config) -> None:
    harness_database_kind()  # a wrong or unusable BATON_TEST_DATABASE stops the run at once


_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Iterator[pytest.TestReport]:
    """After a test that failed, collect its garbage before the next test starts.

    A failed test may leave a database connection its teardown never returned. Were it
    collected later, inside the next test's database call, SQLAlchemy's finalizer would
    switch into that call's greenlet and break it, and every test after it on the worker.
    """
    report: pytest.TestReport = yield
    if report.failed:
        item.stash[_FAILED] = True
    if report.when == "teardown" and item.stash.get(_FAILED, False):
        gc.collect()
    return report


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On PostgreSQL, only the tests that build the Slack harness (in the test's module or
    in one of its fixtures' modules) run: the others would only repeat the SQLite pass."""
    if harness_database_kind() != "postgresql":
        return
    from tests.slack import forge_harness, harness

    builders = {
        "start_harness": harness.start_harness,
        "start_forge_harness": forge_harness.start_forge_harness,
        "forge_harness": forge_harness.forge_harness,
    }

    def builds_harness(item: pytest.Item) -> bool:
        modules = {getattr(item, "module", None)}
        info = getattr(item, "_fixtureinfo", None)
        for definitions in info.name2fixturedefs.values() if info else ():
            modules.update(inspect.getmodule(d.func) for d in definitions)
        return any(
            getattr(m, name, None) is builder for m in modules for name, builder in builders.items()
        )

    kept = [item for item in items if builds_harness(item)]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[i for i in items if not builds_harness(i)])
        items[:] = kept


_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _check_address(address: Any) -> None:
    if isinstance(address, tuple):
        host = address[0]
        try:
            if ipaddress.ip_address(host).is_loopback:
                return
        except ValueError:
            if host == "localhost":
                return
        raise RuntimeError(f"tests may not reach the network (tried {address!r})")


def _guarded_connect(self: socket.socket, address: Any) -> None:
    _check_address(address)
    return _real_connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> int:
    _check_address(address)
    return _real_connect_ex(self, address)


@pytest.fixture(params=["sqlite", "postgresql"])
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    """A fresh database with Baton's schema, once on SQLite and once on PostgreSQL (that
    one skips without BATON_TEST_POSTGRES_URL). Modules with a database of their own
    define their own `database`."""
    async with fresh_database(request.param, tmp_path) as url:
        db = Database(url)
        await db.create_schema()
        try:
            yield db
        finally:
            await db.close()


@pytest.fixture
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No user-level git config from the machine running the tests; the fake home.

    Modules that run git use it for every test (`pytestmark` or an autouse conftest).
    """
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    for key in list(os.environ):
        if key.startswith("GIT_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    return home


@pytest.fixture(autouse=True)
def no_real_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Only loopback connections are possible, and provider settings point nowhere."""
    monkeypatch.setattr(socket.socket, "connect", _guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", _guarded_connect_ex)
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "SLACK_BOT_TOKEN",
        "SLACK_APP_TOKEN",
        "SLACK_SIGNING_SECRET",
        "SLACK_API_URL",
        "BATON_MODEL",
        "BATON_CONFIG",
        "BATON_WORKSPACE",
        "BATON_STATE_DIR",
        "DATABASE_URL",
        "PORT",
        # Traces: a developer's collector must not receive the tests' spans.
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_CAPTURE_CONTENT",
        "OTEL_SERVICE_NAME",
        "OTEL_RESOURCE_ATTRIBUTES",
        "OTEL_TRACES_SAMPLER",
        "OTEL_SDK_DISABLED",
    ):
        monkeypatch.delenv(name, raising=False)
    yield


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
async def llm(fake_llm: FakeOpenAI) -> AsyncIterator[LLMClient]:
    client = openai.AsyncOpenAI(api_key="sk-test", base_url=fake_llm.url, max_retries=0)
    yield LLMClient(client, retry_deadline_s=TEST_RETRY_DEADLINE_S)
    await client.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    root.mkdir()
    return Workspace(root, protected_files=[tmp_path / "baton.yaml"])


def make_settings(tmp_path: Path, llm_url: str, **overrides: Any) -> Settings:
    """Settings as the operator would give them, pointing at local fakes."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    # Beside the workspace, never in it, made as load_settings makes it.
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700, exist_ok=True)
    values: dict[str, Any] = {
        "slack_bot_token": None,
        "slack_signing_secret": None,
        "slack_app_token": None,
        "slack_api_url": "http://127.0.0.1:9/api/",
        "port": 3000,
        "openai_api_key": "sk-test",
        "openai_base_url": llm_url,
        "model": "fake-model",
        "database_url": f"sqlite:///{tmp_path / 'baton.db'}",
        "database_origin": "explicit",
        "state_dir": state_dir,
        "workspace": workspace.resolve(),
        "config_path": None,
        "max_turns": 50,
        "max_background_tasks": 16,
        "approval_timeout_s": 600,
        "approvers": (),
        "agent_dirs": (tmp_path / "agents",),
        "permissions": PermissionsConfig(),
        "sandbox": SandboxConfig(),
        # A provider that keeps failing is given up on quickly: tests of retries set
        # their own deadlines.
        "model_calls": ModelCallsConfig(retry_deadline_s=TEST_RETRY_DEADLINE_S),
    }
    values.update(overrides)
    database = tmp_path / "baton.db"
    if "database_url" not in overrides and not database.exists():
        migrated_sqlite(database)  # at the newest revision, as after a first start
    return Settings(**values)


@pytest.fixture
async def baton(tmp_path: Path, fake_llm: FakeOpenAI) -> AsyncIterator[Baton]:
    """The real composition root over a fresh database, the fake LLM and a temp workspace."""
    app = await build_baton(make_settings(tmp_path, fake_llm.url))
    yield app
    await app.close()
