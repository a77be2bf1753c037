"""A stdio server's stderr, read by Baton through a pipe: its last lines kept in memory
(quoted when the server fails) and its first `MAX_LOG_BYTES` per start in its log file,
so a chatty or hostile server cannot fill the disk."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque
from pathlib import Path
from typing import BinaryIO, TextIO

MAX_LOG_BYTES = 1024 * 1024
KEPT_LINES = 20
MAX_LINE = 1000
END_WAIT_S = 0.5


class _Reader(asyncio.Protocol):
    def __init__(self, capture: StderrCapture) -> None:
        self.capture = capture

    def data_received(self, data: bytes) -> None:
        self.capture.received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.capture.ended.set()


class StderrCapture:
    """One start's stderr: `open` gives the file the process writes to."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.lines: deque[str] = deque(maxlen=KEPT_LINES)
        self._partial = b""
        self._logged = 0
        self._log: BinaryIO | None = None
        self._writer: TextIO | None = None
        self._transport: asyncio.ReadTransport | None = None
        self._closed = False
        # Set when the pipe has ended: every process holding its write end is gone.
        self.ended = asyncio.Event()

    async def open(self) -> TextIO:
        """The write end of the pipe, for the process; call `started` once it runs."""
        # Shielded: were this start cancelled while the file opens, the file still
        # reaches `_opened`, which closes it when `close` has come first.
        opening = asyncio.ensure_future(asyncio.to_thread(open, self.log_path, "wb"))
        opening.add_done_callback(self._opened)
        await asyncio.shield(opening)
        read_fd, write_fd = os.pipe()
        self._writer = os.fdopen(write_fd, "w", encoding="utf-8")
        loop = asyncio.get_running_loop()
        self._transport, _ = await loop.connect_read_pipe(
            lambda: _Reader(self), os.fdopen(read_fd, "rb", buffering=0)
        )
        return self._writer

    def _opened(self, opening: asyncio.Future[BinaryIO]) -> None:
        if opening.cancelled() or opening.exception() is not None:
            return
        if self._closed:
            opening.result().close()
        else:
            self._log = opening.result()

    def started(self) -> None:
        """The process holds its own copy of the write end: ours goes, so the pipe ends
        when the process does."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def received(self, data: bytes) -> None:
        if self._log is not None and self._logged < MAX_LOG_BYTES:
            kept = data[: MAX_LOG_BYTES - self._logged]
            self._log.write(kept)
            self._logged += len(kept)
            if self._logged >= MAX_LOG_BYTES:
                self._log.write(b"\n[Baton: the rest of this start's stderr is not kept]\n")
            self._log.flush()
        *complete, self._partial = (self._partial + data).split(b"\n")
        self._partial = self._partial[-MAX_LINE:]
        for line in complete:
            text = line.decode("utf-8", "replace").strip()
            if text:
                self.lines.append(text[:MAX_LINE])

    def tail(self, count: int) -> list[str]:
        """The last `count` non-empty lines, the unfinished one included."""
        lines = list(self.lines)
        if partial := self._partial.decode("utf-8", "replace").strip():
            lines.append(partial[:MAX_LINE])
        return lines[-count:]

    async def close(self) -> None:
        """Stop reading and close the file; what the process wrote before it ended is
        read first (waiting a moment at most for a process still holding the pipe)."""
        self._closed = True
        self.started()
        try:
            if self._transport is not None:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(END_WAIT_S):
                        await self.ended.wait()
        finally:
            # Even when the wait is cancelled, nothing stays open.
            if self._transport is not None:
                self._transport.close()
                self._transport = None
            if self._log is not None:
                with contextlib.suppress(OSError):
                    self._log.close()
                self._log = None
