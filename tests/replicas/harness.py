"""Several real `python -m bot` processes on one PostgreSQL database, driven as Slack would.

Each replica is its own process in HTTP mode, with its own PORT and BATON_STATE_DIR;
all share DATABASE_URL (a fresh PostgreSQL database), the workspace directory, one
FakeSlackAPI and one FakeOpenAI, as replicas behind Slack's HTTP endpoint share
Slack and the model. Requests are signed as Slack signs them and sent to the replica
a test chooses. The processes' stderr is read all along (a full pipe would stall
them) and shown in the message of every failed wait; every process is killed at the
end, whatever happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from tests.databases import fresh_postgres
from tests.fakes.openai_api import FakeOpenAI, RecordedRequest
from tests.fakes.slack_api import FakeSlackAPI
from tests.ports import free_port
from tests.processes import bot_environment
from tests.slack.harness import ALICE, BOB, BOT, MAIN_MARK, SIGNING_SECRET, TEAM, click_body, sign

EVENTS_PATH = "/slack/events"
# Two cores run the fakes, the test and every replica: starting takes a while.
START_WITHIN_S = 90.0
_ids = itertools.count(1)


def is_main(request: RecordedRequest) -> bool:
    """A request of the main agent (not of a sub-agent)."""
    return str(request.messages[0]["content"]).startswith(MAIN_MARK)


def text_of(value: Any) -> str:
    """Everything a message (or a list of them) shows, as one string to search."""
    return json.dumps(value, ensure_ascii=False)


@dataclass
class Replica:
    """One `python -m bot` process."""

    name: str
    env: dict[str, str]
    process: asyncio.subprocess.Process
    output: list[str] = field(default_factory=list)
    readers: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.env['PORT']}"

    @property
    def running(self) -> bool:
        return self.process.returncode is None

    def log(self) -> str:
        return "".join(self.output)


@dataclass
class Cluster:
    """The replicas, the fakes they share, and an HTTP client that speaks for Slack."""

    root: Path
    database_url: str
    slack: FakeSlackAPI
    llm: FakeOpenAI
    http: aiohttp.ClientSession
    replicas: list[Replica] = field(default_factory=list)

    @property
    def workspace(self) -> Path:
        return self.root / "ws"

    # ------------------------------------------------------------- processes

    def environment(self, name: str, **extra: str) -> dict[str, str]:
        state = self.root / f"state-{name}"
        return bot_environment(**{
            "SLACK_BOT_TOKEN": "xoxb-test", "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": self.slack.url, "PORT": str(free_port()),
            "OPENAI_BASE_URL": self.llm.url, "OPENAI_API_KEY": "sk-test",
            "BATON_MODEL": "fake-model", "BATON_WORKSPACE": str(self.workspace),
            "DATABASE_URL": self.database_url, "BATON_STATE_DIR": str(state), **extra,
        })  # fmt: skip

    async def launch(self, name: str, **extra: str) -> Replica:
        """Start one replica (not waiting for it to be healthy)."""
        return await self.run_module(name, "bot", cwd=self.root, **extra)

    async def run_module(
        self, name: str, module: str, *args: str, cwd: Path, **extra: str
    ) -> Replica:
        """`python -m module args…` in `cwd`, with the environment a replica gets (its
        fakes, a port of its own), its output kept, stopped with the cluster; not waited
        for (benchmarks start their floors, minimal apps, this way)."""
        env = self.environment(name, **extra)
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", module, *args, cwd=cwd, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        replica = Replica(name=name, env=env, process=process)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                replica.readers.append(asyncio.create_task(collect_lines(stream, replica.output)))
        self.replicas.append(replica)
        return replica

    async def start(self, count: int, **extra: str) -> list[Replica]:
        """Start `count` replicas at once (A, B, C…) and wait until all are healthy."""
        first = len(self.replicas)
        names = [chr(ord("A") + first + n) for n in range(count)]
        started = [await self.launch(name, **extra) for name in names]
        await asyncio.gather(*(self.wait_healthy(r) for r in started))
        return started

    async def wait_healthy(
        self, replica: Replica, within: float = START_WITHIN_S, *, path: str = "/healthz"
    ) -> None:
        """Until `path` answers 200 (`/readyz`: ready, as Kubernetes' probe asks)."""
        deadline = time.monotonic() + within
        while True:
            with contextlib.suppress(aiohttp.ClientConnectionError):
                async with self.http.get(f"{replica.url}{path}") as response:
                    if response.status == 200:
                        return
            if not replica.running:
                await asyncio.sleep(0.2)  # the rest of its output
                raise AssertionError(
                    f"replica {replica.name} exited ({replica.process.returncode}):\n"
                    f"{replica.log()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"replica {replica.name} not healthy after {within:.0f} s:\n{self.logs()}"
                )
            await asyncio.sleep(0.1)

    def kill(self, replica: Replica) -> float:
        """`kill -9`: the process gets no chance to say anything. When it was sent."""
        replica.process.send_signal(signal.SIGKILL)
        return time.monotonic()

    def terminate(self, replica: Replica) -> float:
        """SIGTERM, as a deploy sends it. When it was sent."""
        replica.process.send_signal(signal.SIGTERM)
        return time.monotonic()

    async def exit_code(self, replica: Replica, within: float = 60.0) -> int:
        try:
            return await asyncio.wait_for(replica.process.wait(), within)
        except TimeoutError:
            raise AssertionError(
                f"replica {replica.name} still runs after {within:.0f} s:\n{replica.log()}"
            ) from None

    async def close(self) -> None:
        for replica in self.replicas:
            if replica.running:
                replica.process.kill()
        for replica in self.replicas:
            with contextlib.suppress(ProcessLookupError):
                await replica.process.wait()
            await asyncio.gather(*replica.readers, return_exceptions=True)

    def logs(self) -> str:
        """Every replica's output, for an assertion message."""
        return "\n".join(
            f"----- replica {r.name} (exit {r.process.returncode}) -----\n{r.log()[-12_000:]}"
            for r in self.replicas
        )

    # ------------------------------------------------------------- waiting

    async def quiet(self, within: float = 30.0) -> None:
        """Until nothing goes on anywhere: no replica runs a turn, no run is running or
        queued, and no stored message waits for a turn or is held by one. Whatever what
        came in would still start has started (and ended) then: tests wait on this to
        prove that nothing else happened, instead of sleeping."""
        engine = create_async_engine(
            make_url(self.database_url).set(drivername="postgresql+asyncpg")
        )
        deadline = time.monotonic() + within
        try:
            while busy := await self._busy(engine):
                if time.monotonic() > deadline:
                    raise AssertionError(f"still busy after {within:.0f} s: {busy}\n{self.logs()}")
                await asyncio.sleep(0.1)
        finally:
            await engine.dispose()

    async def _busy(self, engine: AsyncEngine) -> list[str]:
        busy = []
        for replica in self.replicas:
            if not replica.running:
                continue
            with contextlib.suppress(aiohttp.ClientConnectionError):
                async with self.http.get(f"{replica.url}/healthz") as response:
                    if (runs := (await response.json()).get("runs")) != 0:
                        busy.append(f"replica {replica.name} runs {runs}")
        async with engine.connect() as connection:
            waiting = (
                await connection.execute(
                    text(
                        "SELECT count(*) FROM thread_messages "
                        "WHERE state IN ('new', 'pending', 'taken')"
                    )
                )
            ).scalar_one()
            runs = (
                await connection.execute(
                    text("SELECT count(*) FROM runs WHERE state IN ('running', 'queued')")
                )
            ).scalar_one()
        if waiting:
            busy.append(f"{waiting} messages waiting or taken")
        if runs:
            busy.append(f"{runs} runs running or queued")
        return busy

    async def metric(self, replica: Replica, name: str) -> float:
        """The value of the sample `name` on `replica`'s `/metrics`."""
        async with self.http.get(f"{replica.url}/metrics") as response:
            exposed = await response.text()
        for family in text_string_to_metric_families(exposed):
            for sample in family.samples:
                if sample.name == name and not sample.labels:
                    return float(sample.value)
        raise AssertionError(f"{name} is not in {replica.name}'s /metrics:\n{exposed}")

    async def scalar(self, query: str) -> Any:
        """The one value `query` selects from the cluster's database."""
        engine = create_async_engine(
            make_url(self.database_url).set(drivername="postgresql+asyncpg")
        )
        try:
            async with engine.connect() as connection:
                return (await connection.execute(text(query))).scalar_one()
        finally:
            await engine.dispose()

    async def until_true(
        self, probe: Callable[[], Awaitable[bool]], *, within: float = 20.0, what: str
    ) -> None:
        """`until` for a condition asked of a replica or of the database."""
        deadline = time.monotonic() + within
        while not await probe():
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {within:.0f} s: {what}\n{self.logs()}")
            await asyncio.sleep(0.05)

    async def until(
        self, condition: Callable[[], bool], *, within: float = 20.0, what: str = "condition"
    ) -> float:
        """Poll `condition` (state in the fakes) until it holds; when it did (monotonic).

        Fails with every replica's output after `within` seconds.
        """
        deadline = time.monotonic() + within
        # Polling is the point: the condition is state in fakes, with no event to wait on.
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {within:.0f} s: {what}\n{self.logs()}")
            await asyncio.sleep(0.02)
        return time.monotonic()

    def thread(self, channel: str, thread_ts: str) -> list[dict[str, Any]]:
        return self.slack.thread_messages(channel, thread_ts)

    def thread_text(self, channel: str, thread_ts: str) -> str:
        return text_of(self.thread(channel, thread_ts))

    def find_button(self, channel: str, thread_ts: str, action_id: str) -> dict[str, Any] | None:
        """The newest message in a thread with a button `action_id`, and that button."""
        for message in reversed(self.thread(channel, thread_ts)):
            for block in message.get("blocks") or ():
                for element in block.get("elements") or ():
                    if element.get("action_id") == action_id:
                        return {"message": message, "button": element}
        return None

    def main_requests(self) -> list[RecordedRequest]:
        return [r for r in self.llm.requests if is_main(r)]

    # ------------------------------------------------------------- Slack's side

    async def post(
        self, replica: Replica, body: str, *, content_type: str,
        headers: dict[str, str] | None = None,
    ) -> int:  # fmt: skip
        """One signed request to a replica's /slack/events; its HTTP status."""
        all_headers = {"Content-Type": content_type, **sign(body), **(headers or {})}
        async with self.http.post(
            f"{replica.url}{EVENTS_PATH}", data=body, headers=all_headers
        ) as response:
            await response.read()
            return response.status

    async def send_event(
        self, replica: Replica, event: dict[str, Any], *, event_id: str | None = None,
        retry: int | None = None,
    ) -> int:  # fmt: skip
        """An Events API delivery, as Slack posts it."""
        payload = {
            "token": "legacy", "team_id": TEAM, "api_app_id": "ABATON", "event": event,
            "type": "event_callback", "event_id": event_id or f"EvR{next(_ids)}",
            "event_time": int(time.time()),
            "authorizations": [{"team_id": TEAM, "user_id": BOT, "is_bot": True}],
        }  # fmt: skip
        headers = (
            {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"}
            if retry
            else None
        )
        return await self.post(
            replica, json.dumps(payload), content_type="application/json", headers=headers
        )

    def mention_event(
        self, text: str, *, channel: str = "C1", user: str = ALICE,
        thread_ts: str | None = None, ts: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """An app_mention event, its message added to the fake Slack first."""
        ts = ts or next_ts()
        self.slack.add_message(channel, f"<@{BOT}> {text}", user, ts=ts, thread_ts=thread_ts)
        event = {
            "type": "app_mention", "user": user, "text": f"<@{BOT}> {text}", "ts": ts,
            "channel": channel, "event_ts": ts, "team": TEAM,
        }  # fmt: skip
        if thread_ts:
            event["thread_ts"] = thread_ts
        return event

    async def mention(
        self, replica: Replica, text: str, *, channel: str = "C1", user: str = ALICE,
        thread_ts: str | None = None,
    ) -> str:  # fmt: skip
        """Mention the bot on `replica`; the mention's ts. Fails unless it is acked 200."""
        event = self.mention_event(text, channel=channel, user=user, thread_ts=thread_ts)
        status = await self.send_event(replica, event)
        assert status == 200, f"mention answered {status}\n{self.logs()}"
        return str(event["ts"])

    async def reply(
        self, replica: Replica, text: str, *, thread_ts: str, channel: str = "C1",
        user: str = ALICE,
    ) -> str:  # fmt: skip
        """A plain thread reply (no mention) as a message.channels event; its ts."""
        ts = next_ts()
        self.slack.add_message(channel, text, user, ts=ts, thread_ts=thread_ts)
        event = {
            "type": "message", "channel_type": "channel", "user": user, "text": text,
            "ts": ts, "thread_ts": thread_ts, "channel": channel, "event_ts": ts, "team": TEAM,
        }  # fmt: skip
        status = await self.send_event(replica, event)
        assert status == 200, f"reply answered {status}\n{self.logs()}"
        return ts

    async def click(
        self, replica: Replica, found: dict[str, Any], action_id: str | None = None, *,
        user: str = ALICE, channel: str = "C1",
    ) -> int:  # fmt: skip
        """Click a button the bot posted (`found` as `find_button` returns it)."""
        body = click_body(
            action_id or found["button"]["action_id"], found["button"]["value"], user=user,
            channel=channel, message_ts=found["message"]["ts"],
        )  # fmt: skip
        return await self.post(replica, body, content_type="application/x-www-form-urlencoded")

    async def command(
        self, replica: Replica, text: str = "", *, channel: str = "C1", user: str = ALICE
    ) -> int:
        """`/tasks` as Slack posts a slash command."""
        body = urlencode({
            "token": "legacy", "team_id": TEAM, "team_domain": "baton-test",
            "channel_id": channel, "channel_name": "general", "user_id": user,
            "user_name": user.lower(), "command": "/tasks", "text": text,
            "api_app_id": "ABATON", "trigger_id": f"{next(_ids)}.trigger",
            "response_url": "https://hooks.slack.com/commands/T0001/1/x",
        })  # fmt: skip
        return await self.post(replica, body, content_type="application/x-www-form-urlencoded")


C = TypeVar("C", bound=Cluster)


def next_ts() -> str:
    """A message ts no other test module hands out (tests.slack.harness counts from low)."""
    return f"{1_800_000_000 + next(_ids)}.{next(_ids):06d}"


async def collect_lines(stream: asyncio.StreamReader, into: list[str]) -> None:
    while line := await stream.readline():
        into.append(line.decode(errors="replace"))


@contextlib.asynccontextmanager
async def cluster(
    root: Path, *, database_url: str | None = None, kind: type[C] = Cluster, **fields: Any
) -> AsyncIterator[C]:
    """The fakes and a fresh PostgreSQL database (skips without a server); no replica yet.

    `kind` runs the replicas some other way (containers: tests/deploy); `fields` are its own.
    """
    async with contextlib.AsyncExitStack() as stack:
        url = database_url or await stack.enter_async_context(fresh_postgres())
        slack = await stack.enter_async_context(FakeSlackAPI(bot_user_id=BOT))
        llm = await stack.enter_async_context(FakeOpenAI())
        slack.add_user(ALICE, "alice", real_name="Alice Liddell", display_name="Alice")
        slack.add_user(BOB, "bob", real_name="Bob Dylan", display_name="Bob")
        http = await stack.enter_async_context(aiohttp.ClientSession())
        (root / "ws").mkdir(exist_ok=True)
        found = kind(root=root, database_url=url, slack=slack, llm=llm, http=http, **fields)
        try:
            yield found
        finally:
            await found.close()
