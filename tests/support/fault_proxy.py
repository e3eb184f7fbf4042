"""An asyncio TCP proxy, run on the test's own event loop, that delays, splits and cuts a broker's responses.

Requests go to the broker unchanged. Each response frame, before it is forwarded, passes the current fault:

* ``delay_s``: every response waits this long before it is forwarded;
* ``split()``: the next response is forwarded up to its first 4 bytes (its size) only; the rest waits for
  ``release()`` -- the moment between a client's read of a response's size and its body;
* ``cut(n)``: the next response is forwarded up to its first `n` bytes, then both connections are aborted.

``responses`` counts the response frames seen, ``connections`` the client connections accepted.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct


class FaultProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.delay_s = 0.0
        self.responses = 0
        self.connections = 0
        self.split_sent = asyncio.Event()  # a split response's size was forwarded
        self._split = False
        self._release = asyncio.Event()
        self._cut_at: int | None = None
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task] = set()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.transport.abort()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def __aenter__(self) -> FaultProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- faults ------------------------------------------------------------------------------------------------
    def split(self) -> None:
        self._split = True
        self._release.clear()
        self.split_sent.clear()

    def release(self) -> None:
        self._release.set()

    def cut(self, after_bytes: int) -> None:
        self._cut_at = after_bytes

    # -- forwarding --------------------------------------------------------------------------------------------
    async def _handle(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        try:
            b_reader, b_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            c_writer.transport.abort()
            self._tasks.discard(task)
            return
        self._writers.update((c_writer, b_writer))

        async def requests() -> None:
            with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
                while data := await c_reader.read(65536):
                    b_writer.write(data)
                    await b_writer.drain()

        async def responses() -> None:
            with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
                while True:
                    head = await b_reader.readexactly(4)
                    frame = head + await b_reader.readexactly(struct.unpack(">i", head)[0])
                    self.responses += 1
                    if self.delay_s:
                        await asyncio.sleep(self.delay_s)  # the fault itself: a slow peer
                    if self._cut_at is not None:
                        c_writer.write(frame[: self._cut_at])
                        await c_writer.drain()
                        self._cut_at = None
                        return
                    if self._split:
                        self._split = False
                        c_writer.write(frame[:4])
                        await c_writer.drain()
                        self.split_sent.set()
                        await self._release.wait()
                        frame = frame[4:]
                    c_writer.write(frame)
                    await c_writer.drain()

        try:
            both = [asyncio.ensure_future(requests()), asyncio.ensure_future(responses())]
            try:
                await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t in both:
                    t.cancel()
                await asyncio.gather(*both, return_exceptions=True)
        finally:
            for w in (c_writer, b_writer):
                self._writers.discard(w)
                w.transport.abort()
            self._tasks.discard(task)
