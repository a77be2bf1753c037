"""Messages received together are stored in one transaction, each caller answered as if
alone: a duplicate or a redelivery is None, a database error reaches every caller of the
failed batch, a message the database refuses fails alone. Once on SQLite and once on
PostgreSQL (the `database` fixture).

Nothing here is timed: what is batched is read from the database's own events
(commits) and from the order in which the test lets things happen.
"""

from __future__ import annotations

import asyncio
import struct

from sqlalchemy import event, make_url, text
from sqlalchemy.exc import SQLAlchemyError

from bot.store.database import Database
from bot.store.models import ThreadMessageRow
from bot.store.thread_inbox import NEW, Inbound, ThreadInbox

KEY = "slack:T1:C1:1700000000.000100"


def inbound(ts: str, *, text: str = "hello", channel: str = "C1") -> Inbound:
    return Inbound(
        session_key=KEY, channel_id=channel, thread_ts="1700000000.000100", ts=ts,
        user_id="U1", text=text,
    )  # fmt: skip


class Commits:
    """Counts the commits of a database's engines while it is in use (on PostgreSQL the
    intake writer has an engine of its own)."""

    def __init__(self, database: Database) -> None:
        self.count = 0
        self._engines = list(
            {id(e): e.sync_engine for e in (database.engine, database.intake_engine)}.values()
        )

    def _commit(self, _connection: object) -> None:
        self.count += 1

    def __enter__(self) -> Commits:
        for engine in self._engines:
            event.listen(engine, "commit", self._commit)
        return self

    def __exit__(self, *_: object) -> None:
        for engine in self._engines:
            event.remove(engine, "commit", self._commit)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def stored_count(database: Database) -> int:
    async with database.sessions() as session:
        result = await session.exec(text("SELECT count(*) FROM thread_messages"))  # type: ignore[call-overload]
        return int(result.one()[0])


async def test_concurrent_receives_are_one_transaction_each_answered(database: Database) -> None:
    inbox = ThreadInbox(database)
    stamps = [f"1700000001.{n:06d}" for n in range(20)]
    with Commits(database) as commits:
        messages = await asyncio.gather(*(inbox.receive(inbound(ts), holder="p") for ts in stamps))
    assert commits.count == 1
    assert [m.ts if m else None for m in messages] == stamps  # each caller its own message
    assert len({m.id for m in messages if m}) == 20
    assert all(m is not None and m.state == NEW and m.holder == "p" for m in messages)


async def test_duplicates_in_one_batch_and_across_batches_are_stored_once(
    database: Database,
) -> None:
    inbox = ThreadInbox(database)
    a, b, c = "1700000002.000001", "1700000002.000002", "1700000002.000003"
    with Commits(database) as commits:
        first = await asyncio.gather(
            inbox.receive(inbound(a, text="first"), holder="p0"),
            inbox.receive(inbound(a, text="again"), holder="p1"),
            inbox.receive(inbound(b), holder="p2"),
            inbox.receive(inbound(a, text="and again"), holder="p3"),
        )
        later = await asyncio.gather(
            inbox.receive(inbound(c), holder="p4"),
            inbox.receive(inbound(a, text="redelivered"), holder="p5"),
        )
    assert commits.count == 2
    # The first to arrive is stored; every other delivery of it is told it is stored.
    assert first[0] is not None and first[0].holder == "p0" and first[0].text == "first"
    assert first[1] is None and first[3] is None
    assert first[2] is not None and first[2].ts == b
    assert later[0] is not None and later[0].ts == c
    assert later[1] is None
    kept = await inbox.find("C1", a)
    assert kept is not None and kept.id == first[0].id and kept.text == "first"
    assert await stored_count(database) == 3


async def test_the_same_ts_in_another_channel_is_another_message(database: Database) -> None:
    inbox = ThreadInbox(database)
    ts = "1700000003.000001"
    one, two = await asyncio.gather(
        inbox.receive(inbound(ts, channel="C1"), holder="p"),
        inbox.receive(inbound(ts, channel="C2"), holder="p"),
    )
    assert one is not None and two is not None and one.id != two.id


async def test_a_redelivery_is_none_and_leaves_the_stored_message_as_it_was(
    database: Database,
) -> None:
    inbox = ThreadInbox(database)
    ts = "1700000004.000001"
    stored = await inbox.receive(inbound(ts, text="as sent"), holder="p")
    assert stored is not None
    await inbox.move([stored.id], "pending", only_from=[NEW])
    assert await inbox.receive(inbound(ts, text="changed on the way"), holder="q") is None
    kept = await inbox.get(stored.id)
    assert kept is not None
    assert (kept.text, kept.state, kept.holder) == ("as sent", "pending", None)


async def test_a_batch_the_database_fails_fails_every_caller_and_stores_nothing(
    database: Database,
) -> None:
    """As the intake's 500 needs: no caller is told its message was stored."""
    inbox = ThreadInbox(database)
    stamps = [f"1700000005.{n:06d}" for n in range(6)]
    async with database.sessions() as session:
        await session.exec(text("ALTER TABLE thread_messages RENAME TO thread_messages_away"))  # type: ignore[call-overload]
        await session.commit()
    outcomes = await asyncio.gather(
        *(inbox.receive(inbound(ts), holder="p") for ts in stamps), return_exceptions=True
    )
    assert all(isinstance(outcome, SQLAlchemyError) for outcome in outcomes), outcomes
    async with database.sessions() as session:
        await session.exec(text("ALTER TABLE thread_messages_away RENAME TO thread_messages"))  # type: ignore[call-overload]
        await session.commit()
    assert await stored_count(database) == 0
    # Slack's retries, once the database is back: every one stored, once.
    again = await asyncio.gather(*(inbox.receive(inbound(ts), holder="p") for ts in stamps))
    assert [m.ts if m else None for m in again] == stamps


async def test_a_caller_cancelled_while_waiting_loses_or_duplicates_no_other_message(
    database: Database,
) -> None:
    inbox = ThreadInbox(database)
    # Another engine on the same database (another replica, or another process on the
    # SQLite file), whose open transaction holds a batch in flight.
    blocked_writes = Database(database.url)
    a, b, c, d = (f"1700000006.00000{n}" for n in range(1, 5))
    try:
        async with blocked_writes.sessions() as blocker:
            # Holds a's key uncommitted: a's batch waits for this transaction (on SQLite
            # for its write lock, on PostgreSQL for the unique key), as a slow write would.
            blocker.add(ThreadMessageRow(
                session_key=KEY, channel_id="C1", thread_ts="1", ts=a, user_id="U9",
                author_id="U9", text="the other replica's",
            ))  # fmt: skip
            await blocker.flush()
            first = asyncio.create_task(inbox.receive(inbound(a), holder="p"))
            await settle()
            assert inbox._arrivals.batches == 1  # a's batch is written, and waits
            waiting = {
                ts: asyncio.create_task(inbox.receive(inbound(ts), holder="p")) for ts in (b, c, d)
            }
            await settle()
            assert not first.done()
            waiting[c].cancel()
            await settle()
            await blocker.rollback()  # the other one gave up: a is ours to store
        assert (await first) is not None
        assert (await waiting[b]) is not None and (await waiting[d]) is not None
        assert waiting[c].cancelled()
    finally:
        await blocked_writes.close()
    assert await inbox.find("C1", c) is None  # never written
    assert await stored_count(database) == 3
    # Slack's retry of the cancelled one is stored then.
    assert await inbox.receive(inbound(c), holder="p") is not None


async def test_hostile_messages_fail_alone_and_the_rest_of_their_batch_is_stored(
    database: Database,
) -> None:
    """Huge text is stored whole. A NUL, which PostgreSQL's text cannot hold, is stored
    as U+FFFD on both (it failed its delivery on PostgreSQL); text that is no valid
    Unicode (a lone surrogate, which JSON can carry) fails its own delivery on both,
    and not the messages it was batched with."""
    inbox = ThreadInbox(database)
    huge = "é𝄞 " * 700_000  # 2.1 M characters, beyond the basic plane too
    sent = {
        "1700000007.000001": "fine",
        "1700000007.000002": "a\x00b",
        "1700000007.000003": huge,
        "1700000007.000004": "half a pair \ud800",
        "1700000007.000005": "also fine",
    }
    outcomes = await asyncio.gather(
        *(inbox.receive(inbound(ts, text=body), holder="p") for ts, body in sent.items()),
        return_exceptions=True,
    )
    by_ts = dict(zip(sent, outcomes, strict=True))
    for ts in ("1700000007.000001", "1700000007.000003", "1700000007.000005"):
        stored = await inbox.find("C1", ts)
        assert stored is not None and stored.text == sent[ts]
    assert isinstance(by_ts["1700000007.000004"], Exception)
    assert await inbox.find("C1", "1700000007.000004") is None
    nul = by_ts["1700000007.000002"]
    assert not isinstance(nul, BaseException) and nul is not None and nul.text == "a\ufffdb"


class PostgresWire:
    """A TCP relay to the PostgreSQL server that reads what the client sends: per frame
    of the protocol, its type ("Q" a simple query such as BEGIN or COMMIT; "P", "B",
    "E" parse, bind, execute; "S" the sync that ends an extended-protocol round trip).
    The client must not ask for TLS (its frames would not be readable)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.sent: list[str] = []
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> int:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def __aexit__(self, *_: object) -> None:
        assert self.server is not None
        self.server.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)

        async def downstream() -> None:
            while data := await up_reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.close()

        answers = asyncio.create_task(downstream())
        try:
            (length,) = struct.unpack("!I", await reader.readexactly(4))  # the startup
            up_writer.write(struct.pack("!I", length) + await reader.readexactly(length - 4))
            while True:
                kind = await reader.readexactly(1)
                (length,) = struct.unpack("!I", await reader.readexactly(4))
                body = await reader.readexactly(length - 4)
                self.sent.append(kind.decode())
                up_writer.write(kind + struct.pack("!I", length) + body)
                await up_writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            up_writer.close()
            answers.cancel()


async def test_on_postgresql_a_batch_is_one_round_trip_no_begin_or_commit(
    database: Database,
) -> None:
    """The ack waits on its batch's write, so on PostgreSQL that write is one round trip
    to the server: the INSERT alone, in autocommit (one statement is a transaction of
    its own), not BEGIN, INSERT and COMMIT. Read from the protocol's frames the intake
    connection sends, through a relay."""
    if database.engine.dialect.name != "postgresql":
        return  # SQLite's transactions are calls into a library, not round trips
    url = make_url(database.url)
    wire = PostgresWire(url.host or "127.0.0.1", url.port or 5432)
    async with wire as port:
        relayed = Database(
            url.set(
                host="127.0.0.1", port=port, query={**url.query, "ssl": "disable"}
            ).render_as_string(hide_password=False)
        )
        try:
            inbox = ThreadInbox(relayed)
            frames: list[list[str]] = []
            for batch in range(3):
                stamps = [f"1700000008.{batch:02d}{n:04d}" for n in range(50)]
                before = len(wire.sent)
                messages = await asyncio.gather(
                    *(inbox.receive(inbound(ts), holder="p") for ts in stamps)
                )
                assert [m.ts if m else None for m in messages] == stamps
                frames.append(wire.sent[before:])
            assert all("Q" not in sent for sent in frames), frames  # no BEGIN, no COMMIT
            # The first batch also opens the connection and prepares the statement; the
            # next ones, as large, are one bind-execute-sync each.
            assert [sent.count("S") for sent in frames[1:]] == [1, 1], frames
            assert inbox._arrivals.batches == 3
        finally:
            await relayed.close()
    assert await stored_count(database) == 150
