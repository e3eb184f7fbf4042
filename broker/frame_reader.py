"""The read side of a client connection: 4-byte-framed requests received with buffers sized on demand, and Kafka's
request memory pool (`queued.max.request.bytes`).

`FrameReader` is the connection's asyncio protocol (a BufferedProtocol: the event loop receives straight into the
buffer it offers). Between requests it holds no buffer at all: an idle connection costs its objects, not a read
buffer. When bytes arrive, a chunk of READ_AHEAD bytes takes the size and small frames, which are copied out of it.
A frame that is not all there yet gets a buffer of its own and the rest of it is received in place: the kernel's
copy is the only one (StreamReader copied every byte in with `feed_data` and out again with `readexactly`, more CPU
than the receive itself for Produce, `bench/flamegraph.py`). That buffer is a bytearray and becomes the payload, so
the append can stamp batch headers in place (`protocol/produce_records.py`). It starts at DIRECT_FIRST bytes and
doubles as the bytes arrive: a client that announces a 100 MiB request and sends nothing makes the broker hold
1 MiB, not 100. Nothing is read beyond the frame in progress but what fits in the chunk: at READ_AHEAD bytes read
ahead the socket is not read any more, so pipelined requests wait in the kernel, as Kafka mutes a channel with a
request in progress. It is also the StreamWriter's protocol, with the write flow control StreamWriter.drain()
expects (asyncio's FlowControlMixin is a Protocol, and uvloop delivers no bytes to a class that is both).

`RequestMemory` is Kafka's SimpleMemoryPool in its broker mode (non-strict): a request's bytes are taken when its
size has been read, before its body is, and given back when it is done; while the pool is empty no request body is
read from any connection (backpressure instead of memory growth). As in Kafka, a request is admitted while any bytes
are left, so one larger than what remains still goes in.
"""

from __future__ import annotations

import asyncio
import struct
from collections import deque
from typing import Any

__all__ = ["DIRECT_FIRST", "READ_AHEAD", "FrameReader", "RequestMemory"]

READ_AHEAD = 16 << 10  # bytes read past the frame in progress, at most
DIRECT_FIRST = 1 << 20  # a frame's own buffer starts at this size and doubles up to the frame's

_SIZE = struct.Struct(">i")


class FrameReader(asyncio.BufferedProtocol):
    """A BufferedProtocol only (uvloop treats a class that is also an asyncio.Protocol as one and would hand it
    bytes through a no-op data_received), with the write flow control StreamWriter.drain() expects."""

    def __init__(self, over_ssl: bool = False) -> None:
        self._over_ssl = over_ssl
        self.transport: Any = None  # uvloop's transports are not asyncio.Transport
        self._chunk: bytearray | None = None  # bytes read ahead of the frame in progress: _chunk[_start:_end]
        self._start = 0
        self._end = 0
        self._frame: bytearray | None = None  # a frame being received in place: _frame[:_got] of _frame_size
        self._frame_size = 0
        self._got = 0
        self._waiter: asyncio.Future[None] | None = None
        self._eof = False
        self._error: BaseException | None = None
        self._read_paused = False
        self._write_paused = False
        self._drain_waiters: deque[asyncio.Future[None]] = deque()
        self._lost = False

    # ---- asyncio callbacks -------------------------------------------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        for w in self._drain_waiters:  # a drain() in progress ends (with the error, as asyncio's)
            if not w.done():
                if exc is None:
                    w.set_result(None)
                else:
                    w.set_exception(exc)
        self._eof = True
        self._error = exc
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return not self._over_ssl  # keep a half-closed plain socket open to answer what it sent (as StreamReader)

    def get_buffer(self, sizehint: int) -> memoryview:
        frame = self._frame
        if frame is not None and self._got < self._frame_size:
            if self._got == len(frame):  # what is allocated is full: double it, up to the frame's size
                frame.extend(bytes(min(len(frame), self._frame_size - len(frame))))
            return memoryview(frame)[self._got :]  # a fresh view each time: none outlives the receive into it
        chunk = self._chunk
        if chunk is None:
            chunk = self._chunk = bytearray(READ_AHEAD)
        elif self._end == len(chunk):  # only while reading stops (a loop may ask once more): make room
            if self._start:
                chunk[: self._end - self._start] = chunk[self._start : self._end]
                self._end -= self._start
                self._start = 0
            else:
                chunk.extend(bytes(len(chunk)))
        return memoryview(chunk)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._frame is not None and self._got < self._frame_size:
            self._got += nbytes
            if self._got == self._frame_size:  # the reader waits for the whole frame only
                self._wake()
            return
        self._end += nbytes
        if self._end - self._start >= READ_AHEAD and not self._read_paused and not self.transport.is_closing():
            self._read_paused = True  # enough read ahead: the rest waits in the kernel
            self.transport.pause_reading()
        self._wake()

    # ---- write flow control (asyncio's FlowControlMixin, which StreamWriter.drain() calls) ------------------------
    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        for w in self._drain_waiters:
            if not w.done():
                w.set_result(None)

    async def _drain_helper(self) -> None:
        if self._lost:
            raise ConnectionResetError("Connection lost")
        if not self._write_paused:
            return
        w = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(w)
        try:
            await w
        finally:
            self._drain_waiters.remove(w)

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    # ---- the processor's side ------------------------------------------------------------------------------------
    async def read_size(self) -> int:
        """The next frame's size (its 4-byte prefix)."""
        while self._end - self._start < 4:
            self._raise_if_closed(self._chunk, self._start, self._end, 4)
            # the loop may have asked for a buffer it then had nothing for (after filling a frame's): drop it
            self._drop_empty_chunk()
            await self._wait()
        assert self._chunk is not None
        (size,) = _SIZE.unpack_from(self._chunk, self._start)
        self._start += 4
        self._drop_empty_chunk()
        return int(size)

    async def read_frame(self, size: int) -> bytes | bytearray:
        """The body of the frame whose size was just read: bytes when it came with the chunk, else the bytearray it
        was received into (writable)."""
        have = self._end - self._start
        if have >= size:
            chunk = self._chunk
            out = bytes(memoryview(chunk)[self._start : self._start + size]) if chunk is not None and size else b""
            self._start += size
            self._drop_empty_chunk()
            return out
        frame = bytearray(max(min(size, DIRECT_FIRST), have))
        if have:
            assert self._chunk is not None
            frame[:have] = memoryview(self._chunk)[self._start : self._end]
        self._chunk, self._start, self._end = None, 0, 0
        self._frame, self._frame_size, self._got = frame, size, have
        try:
            while self._got < size:
                self._raise_if_closed(frame, 0, self._got, size)
                await self._wait()
        finally:
            self._frame, self._frame_size = None, 0
        return frame

    def _drop_empty_chunk(self) -> None:
        if self._start == self._end:
            self._chunk, self._start, self._end = None, 0, 0  # an idle connection holds no read buffer

    def _raise_if_closed(self, buf: bytearray | None, start: int, end: int, want: int) -> None:
        """At EOF: the connection's error, or StreamReader's IncompleteReadError with what did arrive."""
        if not self._eof:
            return
        if isinstance(self._error, ConnectionError):
            raise self._error
        raise asyncio.IncompleteReadError(bytes(buf[start:end]) if buf is not None else b"", want)

    async def _wait(self) -> None:
        if self._read_paused:
            self._read_paused = False
            self.transport.resume_reading()
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None


class RequestMemory:
    """Bytes of requests in progress, bounded by `queued.max.request.bytes` (<= 0: unbounded, nothing is counted)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.available = limit
        self._freed = asyncio.Event()

    @property
    def bounded(self) -> bool:
        return self.limit > 0

    @property
    def used(self) -> int:
        return self.limit - self.available if self.bounded else 0

    async def acquire(self, size: int) -> int:
        """Take `size` bytes once any are left; returns what was taken (0 when unbounded)."""
        if not self.bounded:
            return 0
        while self.available <= 0:
            self._freed.clear()
            await self._freed.wait()
        self.available -= size
        return size

    def release(self, size: int) -> None:
        if size:
            self.available += size
            self._freed.set()
