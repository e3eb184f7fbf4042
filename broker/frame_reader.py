"""FrameReader: a connection's receive side as an asyncio BufferedProtocol, so a large request is received by the
kernel straight into the buffer that becomes its payload.

With StreamReader every received chunk is copied into the reader's buffer (`feed_data`), copied out again by
`readexactly`, and the rest shifted down: for Produce that was more CPU than the receive itself
(`bench/flamegraph.py`). Here small reads land in a staging buffer; `readexactly(n)` of more than DIRECT_MIN bytes
moves what is staged into a new bytearray of `n` bytes and has the transport receive the rest into it (the only
copy of those bytes is the kernel's). The payload of such a read is that bytearray, writable, so the append path
can rewrite batch headers in place (`UnifiedLog.append_as_leader`).

It keeps StreamReader's contract where the processor relies on it (broker/network.py): `readexactly` raises
`asyncio.IncompleteReadError` at EOF and the connection's error after a reset; reading stops (the transport is
paused) while the staging buffer is full and nobody reads, so a client that pipelines requests holds at most
STAGE_SIZE bytes of them; an idle connection holds no buffer. It is also the StreamWriter's protocol, with the
write flow control StreamWriter.drain() expects (`_drain_helper`; asyncio's FlowControlMixin is a Protocol, and
uvloop then delivers no data to a BufferedProtocol).
"""

from __future__ import annotations

import asyncio
from collections import deque

__all__ = ["DIRECT_FIRST", "DIRECT_MIN", "STAGE_SIZE", "FrameReader"]

STAGE_SIZE = 64 << 10  # staging buffer: headers, small requests, pipelined requests not read yet
DIRECT_MIN = 16 << 10  # reads larger than this are received into their own buffer
# A large read's buffer starts at this size and doubles as its bytes arrive: a client that announces a 100 MiB
# request and sends nothing makes the broker hold 1 MiB, not 100 (as StreamReader grew with the data).
DIRECT_FIRST = 1 << 20


class FrameReader(asyncio.BufferedProtocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._write_paused = False
        self._drain_waiters: deque[asyncio.Future[None]] = deque()
        self._lost = False
        self._stage: bytearray | None = None
        self._view: memoryview | None = None
        self._start = 0  # staged bytes not read yet: _stage[_start:_end]
        self._end = 0
        self._target: bytearray | None = None  # a large read in progress: received into _target[_got:]
        self._target_size = 0  # its final size
        self._got = 0
        self._want = 0  # a small read waiting for this many staged bytes
        self._waiter: asyncio.Future[None] | None = None
        self._eof = False
        self._error: BaseException | None = None
        self._paused = False

    # -- protocol callbacks -----------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio.Transport

    def get_buffer(self, sizehint: int) -> memoryview:
        target = self._target
        if target is not None and self._got < self._target_size:
            if self._got == len(target):  # what is allocated is full: double it, up to the read's size
                target.extend(bytes(min(len(target), self._target_size - len(target))))
            return memoryview(target)[self._got :]  # a fresh view each time: none outlives the read into it
        if self._view is None:
            self._stage = bytearray(STAGE_SIZE)
            self._view = memoryview(self._stage)
        elif self._end == len(self._view):
            self._compact()
            if self._end == len(self._view):  # full (reading is paused at this point, but never hand out nothing)
                assert self._stage is not None
                self._view.release()
                self._stage.extend(bytes(STAGE_SIZE))
                self._view = memoryview(self._stage)
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._target is not None and self._got < self._target_size:  # into the large read (get_buffer)
            self._got += nbytes
            if self._got == self._target_size:  # done: what comes next is staged
                self._wake()
            return
        self._end += nbytes
        if self._want and self._end - self._start >= self._want:
            self._wake()
        elif self._end >= STAGE_SIZE and self._start == 0 and self.transport is not None:
            self._paused = True  # full, and nobody reads: stop receiving until a read makes room
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        # keep a plaintext transport open for the responses still to be written (as StreamReaderProtocol does);
        # a TLS transport closes itself either way
        return self.transport is not None and self.transport.get_extra_info("sslcontext") is None

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        if exc is not None:
            self._error = exc
        self._eof = True
        self._wake()
        self.transport = None
        self._wake_drainers(exc)

    # -- write flow control (StreamWriter.drain) --------------------------------------------------------------
    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_drainers(None)

    def _wake_drainers(self, exc: Exception | None) -> None:
        while self._drain_waiters:
            w = self._drain_waiters.popleft()
            if not w.done():
                if exc is None:
                    w.set_result(None)
                else:
                    w.set_exception(exc)

    async def _drain_helper(self) -> None:
        if self._lost:
            raise ConnectionResetError("Connection lost")
        if not self._write_paused:
            return
        w: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(w)
        await w

    # -- reading ----------------------------------------------------------------------------------------------
    async def readexactly(self, n: int) -> bytes | bytearray:
        """Exactly `n` bytes (a bytearray when more than DIRECT_MIN); IncompleteReadError at EOF before that."""
        staged = self._end - self._start
        if staged >= n:
            return self._take(n)
        if n > DIRECT_MIN:
            target = bytearray(max(min(n, DIRECT_FIRST), staged))
            if staged:
                assert self._view is not None
                target[:staged] = self._view[self._start : self._end]
            self._release_stage()
            self._target, self._target_size, self._got = target, n, staged
            try:
                while self._got < n:
                    self._raise_if_done(bytes(target[: self._got]), n)
                    await self._wait()
            finally:
                self._target, self._target_size = None, 0
            return target
        if self._view is not None and self._start + n > len(self._view):
            self._compact()
        self._want = n
        try:
            while self._end - self._start < n:
                self._raise_if_done(self._staged_bytes(), n)
                await self._wait()
        finally:
            self._want = 0
        return self._take(n)

    def _take(self, n: int) -> bytes | bytearray:
        assert self._view is not None
        piece = self._view[self._start : self._start + n]
        out = bytearray(piece) if n > DIRECT_MIN else bytes(piece)  # large reads are writable either way
        self._start += n
        if self._start == self._end:
            self._release_stage()
        elif self._paused and self._start >= len(self._view) // 2 and self.transport is not None:
            self._paused = False  # room again (get_buffer compacts): receive the rest of the pipeline
            self.transport.resume_reading()
        return out

    def _staged_bytes(self) -> bytes:
        return bytes(self._view[self._start : self._end]) if self._view is not None else b""

    def _raise_if_done(self, partial: bytes, n: int) -> None:
        if self._error is not None:
            raise self._error
        if self._eof:
            raise asyncio.IncompleteReadError(partial, n)

    async def _wait(self) -> None:
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _compact(self) -> None:
        """Move the unread staged bytes to the front of the staging buffer."""
        assert self._view is not None
        if self._start:
            rest = self._end - self._start
            self._stage[:rest] = self._stage[self._start : self._end]  # type: ignore[index]
            self._start, self._end = 0, rest

    def _release_stage(self) -> None:
        """Nothing staged: drop the buffer (an idle connection holds none) and receive again if paused."""
        self._stage = self._view = None
        self._start = self._end = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
