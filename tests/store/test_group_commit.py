"""Group commit on its own: batches, each caller's answer, failures and cancellation.

The writer here is a fake whose batches are held open until the test lets them finish,
so what goes in which batch is decided by the test, never by timing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from bot.store.group_commit import GroupCommit


class Refused(Exception):
    """What the fake writer fails a batch with."""


class GatedWriter:
    """Writes batches of strings (the result: the item upper-cased), each batch held until
    `release()`; records every batch it was given and what it stored."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.stored: list[str] = []
        self.fail_with: Exception | None = None
        self.refuse_item: str | None = None  # any batch holding it fails, as a bad row would
        self._gates: list[asyncio.Event] = []
        self.started = asyncio.Event()

    async def write(self, items: Sequence[str]) -> list[str]:
        self.batches.append(list(items))
        gate = asyncio.Event()
        self._gates.append(gate)
        self.started.set()
        await gate.wait()
        if self.fail_with is not None:
            raise self.fail_with
        if self.refuse_item is not None and self.refuse_item in items:
            raise Refused(self.refuse_item)
        self.stored.extend(items)  # all or nothing, as one transaction
        return [item.upper() for item in items]

    async def in_flight(self, count: int) -> None:
        """Until `count` batches have started."""
        while len(self.batches) < count:
            self.started.clear()
            await self.started.wait()

    def release(self) -> None:
        for gate in self._gates:
            gate.set()


async def settle() -> None:
    # Lets every ready task run up to its next real wait (a few loop turns).
    for _ in range(5):
        await asyncio.sleep(0)


def writer_with(fake: GatedWriter, **options: object) -> GroupCommit[str, str]:
    return GroupCommit(fake.write, name="test", **options)  # type: ignore[arg-type]


async def test_arrivals_while_a_batch_is_written_go_together_in_the_next() -> None:
    fake = GatedWriter()
    commit = writer_with(fake)
    first = asyncio.create_task(commit.submit("a"))
    await fake.in_flight(1)
    rest = [asyncio.create_task(commit.submit(item)) for item in "bcde"]
    await settle()
    assert fake.batches == [["a"]]  # the first goes at once, alone; the rest wait for it
    fake.release()
    await fake.in_flight(2)
    fake.release()
    assert await first == "A"
    assert [await task for task in rest] == ["B", "C", "D", "E"]  # each its own result
    assert fake.batches == [["a"], ["b", "c", "d", "e"]]
    assert commit.batches == 2


async def test_items_submitted_together_are_one_batch() -> None:
    fake = GatedWriter()
    commit = writer_with(fake)
    results = asyncio.gather(*(commit.submit(str(n)) for n in range(20)))
    await fake.in_flight(1)
    fake.release()
    assert await results == [str(n) for n in range(20)]
    assert fake.batches == [[str(n) for n in range(20)]]


async def test_a_batch_is_capped_by_items_and_by_size() -> None:
    fake = GatedWriter()
    commit = writer_with(fake, max_items=3, size=len, max_size=6)
    tasks = [asyncio.create_task(commit.submit(item)) for item in ["a", "b", "c", "d", "eeeee"]]
    tasks.append(asyncio.create_task(commit.submit("x" * 50)))  # alone, however large
    tasks.append(asyncio.create_task(commit.submit("f")))
    for count in range(1, 5):
        await fake.in_flight(count)
        fake.release()
    await asyncio.gather(*tasks)
    assert fake.batches == [["a", "b", "c"], ["d", "eeeee"], ["x" * 50], ["f"]]


async def test_a_failed_batch_fails_every_caller_in_it_and_the_next_batch_works() -> None:
    fake = GatedWriter()
    commit = writer_with(fake)
    failing = [asyncio.create_task(commit.submit(item)) for item in "abc"]
    await fake.in_flight(1)
    fake.fail_with = Refused("the database is down")
    fake.release()
    for task in failing:
        with pytest.raises(Refused, match="the database is down"):
            await task
    assert fake.stored == []  # nothing half-stored
    fake.fail_with = None
    later = asyncio.gather(*(commit.submit(item) for item in "de"))
    await fake.in_flight(2)
    fake.release()
    assert await later == ["D", "E"]
    assert fake.stored == ["d", "e"]


async def test_a_batch_failed_by_one_item_is_written_again_one_by_one() -> None:
    """When `alone` says the error may be one item's doing, only that item's caller
    fails, as when every item had its own transaction."""
    fake = GatedWriter()
    commit = writer_with(fake, alone=lambda error: isinstance(error, Refused))
    fake.refuse_item = "bad"
    fake.release()
    tasks = [asyncio.create_task(commit.submit(item)) for item in ["a", "bad", "c"]]
    while not all(task.done() for task in tasks):
        fake.release()
        await asyncio.sleep(0)
    assert [task.result() for task in (tasks[0], tasks[2])] == ["A", "C"]
    assert isinstance(tasks[1].exception(), Refused)
    assert fake.batches == [["a", "bad", "c"], ["a"], ["bad"], ["c"]]
    assert fake.stored == ["a", "c"]


async def test_an_error_of_the_whole_database_is_not_retried_item_by_item() -> None:
    fake = GatedWriter()
    commit = writer_with(fake, alone=lambda error: False)
    fake.fail_with = Refused("locked")
    tasks = [asyncio.create_task(commit.submit(item)) for item in "abc"]
    await fake.in_flight(1)
    fake.release()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(result, Refused) for result in results)
    assert fake.batches == [["a", "b", "c"]]


async def test_a_caller_cancelled_while_waiting_is_not_written_and_others_are_once() -> None:
    fake = GatedWriter()
    commit = writer_with(fake)
    first = asyncio.create_task(commit.submit("a"))
    await fake.in_flight(1)
    waiting = {item: asyncio.create_task(commit.submit(item)) for item in "bcd"}
    await settle()
    waiting["c"].cancel()
    fake.release()
    await fake.in_flight(2)
    fake.release()
    assert await first == "A"
    assert await waiting["b"] == "B" and await waiting["d"] == "D"
    assert waiting["c"].cancelled()
    assert fake.stored == ["a", "b", "d"]  # c never written, nobody written twice


async def test_a_caller_cancelled_during_its_batch_leaves_the_batch_alone() -> None:
    fake = GatedWriter()
    commit = writer_with(fake)
    tasks = {item: asyncio.create_task(commit.submit(item)) for item in "abc"}
    await fake.in_flight(1)
    tasks["b"].cancel()
    await settle()
    fake.release()
    assert await tasks["a"] == "A" and await tasks["c"] == "C"
    assert tasks["b"].cancelled()
    # Its item was in the transaction already: written, as it could be without batching.
    assert fake.stored == ["a", "b", "c"]
    assert fake.batches == [["a", "b", "c"]]


async def test_callers_are_not_left_waiting_when_the_writer_is_cancelled() -> None:
    fake = GatedWriter()
    commit = writer_with(fake)
    first = asyncio.create_task(commit.submit("a"))
    await fake.in_flight(1)
    second = asyncio.create_task(commit.submit("b"))
    await settle()
    writer = commit._writer
    assert writer is not None
    writer.cancel()  # as when the event loop shuts down
    for task in (first, second):
        with pytest.raises(asyncio.CancelledError):
            await task
    # A later item starts a new writer.
    fake.release()
    later = asyncio.create_task(commit.submit("c"))
    await fake.in_flight(2)
    fake.release()
    assert await later == "C"


async def test_a_writer_that_answers_the_wrong_count_fails_its_callers() -> None:
    async def broken(items: Sequence[str]) -> list[str]:
        return []

    commit: GroupCommit[str, str] = GroupCommit(broken, name="broken")
    with pytest.raises(RuntimeError, match="0 results for 1 items"):
        await commit.submit("a")
