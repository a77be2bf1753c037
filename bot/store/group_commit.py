"""Group commit: many callers' items written by one writer, a batch per transaction.

An item that finds no writer busy starts one, which writes at once whatever waits by
the time it runs; the items that arrive while a batch is being written wait and go
together in the next one. Nothing waits on a timer: under a burst, the number of
transactions falls to one per write's duration instead of one per item, and a caller
waits for at most the batch in flight and its own.

Each caller gets its own result, or the exception its batch failed with. A batch that
fails for what one item holds (`alone` says which errors may be that) is written again
one item at a time, so only that item's caller gets the error, as without batching;
an error of the database as a whole fails every caller at once. A caller that is
cancelled while its item waits takes the item out (it is never written); one cancelled
while its batch is written leaves the batch alone (the item may be written, as it may
have been without batching), and no other caller's item is lost or written twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

logger = logging.getLogger(__name__)

ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")


@dataclass(slots=True)
class _Waiting(Generic[ItemT, ResultT]):
    item: ItemT
    outcome: asyncio.Future[ResultT]


class GroupCommit(Generic[ItemT, ResultT]):
    """Hands items to `write` in batches, one batch at a time.

    `write` gets the items of a batch in arrival order and returns one result per item,
    in the same order; it writes them in one transaction, so a batch is stored whole or
    not at all. A batch holds at most `max_items` items and, past its first item, at most
    `max_size` by `size` (so one huge item goes alone rather than swelling a statement).
    """

    def __init__(
        self,
        write: Callable[[Sequence[ItemT]], Awaitable[Sequence[ResultT]]],
        *,
        name: str,
        max_items: int = 100,
        size: Callable[[ItemT], int] = lambda _: 1,
        max_size: int | None = None,
        alone: Callable[[Exception], bool] = lambda _: False,
    ) -> None:
        self._write = write
        self._name = name
        self._max_items = max_items
        self._size = size
        self._max_size = max_size
        self._alone = alone
        self._waiting: deque[_Waiting[ItemT, ResultT]] = deque()
        self._writer: asyncio.Task[None] | None = None
        self.batches = 0  # batches written or tried, for tests and figures

    async def submit(self, item: ItemT) -> ResultT:
        """Write `item` with whatever else arrives meanwhile; its result, or the error
        that failed its batch."""
        waiting: _Waiting[ItemT, ResultT] = _Waiting(
            item, asyncio.get_running_loop().create_future()
        )
        self._waiting.append(waiting)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_all(), name=f"group-commit-{self._name}")
            self._writer.add_done_callback(self._writer_ended)
        # Cancelling the caller cancels `outcome`: the writer then skips the item if its
        # batch has not started, and leaves the rest of the batch alone if it has.
        return await waiting.outcome

    async def _write_all(self) -> None:
        """Write batches until nobody waits; the writer then ends (no idle task to own)."""
        batch: list[_Waiting[ItemT, ResultT]] = []
        try:
            while self._waiting:
                batch = self._next_batch()
                if batch:
                    await self._write_batch(batch)
                batch = []
        except BaseException:
            # The writer itself was cancelled (the loop is closing): nobody may be left
            # waiting on an outcome that will never come.
            for waiting in [*batch, *self._waiting]:
                waiting.outcome.cancel()
            self._waiting.clear()
            raise

    def _next_batch(self) -> list[_Waiting[ItemT, ResultT]]:
        batch: list[_Waiting[ItemT, ResultT]] = []
        size = 0
        while self._waiting and len(batch) < self._max_items:
            waiting = self._waiting[0]
            if waiting.outcome.done():  # its caller was cancelled before it was written
                self._waiting.popleft()
                continue
            item_size = self._size(waiting.item)
            if batch and self._max_size is not None and size + item_size > self._max_size:
                break
            self._waiting.popleft()
            batch.append(waiting)
            size += item_size
        return batch

    async def _write_batch(self, batch: list[_Waiting[ItemT, ResultT]]) -> None:
        self.batches += 1
        try:
            results = await self._write([waiting.item for waiting in batch])
        except Exception as exc:
            if len(batch) > 1 and self._alone(exc):
                for waiting in batch:
                    if not waiting.outcome.done():
                        await self._write_batch([waiting])
                return
            for waiting in batch:
                if not waiting.outcome.done():
                    waiting.outcome.set_exception(exc)
            return
        if len(results) != len(batch):  # a broken `write`; nobody may go unanswered
            error = RuntimeError(f"{self._name}: {len(results)} results for {len(batch)} items")
            for waiting in batch:
                if not waiting.outcome.done():
                    waiting.outcome.set_exception(error)
            return
        for waiting, result in zip(batch, results, strict=True):
            if not waiting.outcome.done():
                waiting.outcome.set_result(result)

    def _writer_ended(self, writer: asyncio.Task[None]) -> None:
        if not writer.cancelled() and writer.exception() is not None:
            logger.error("the %s writer failed", self._name, exc_info=writer.exception())
