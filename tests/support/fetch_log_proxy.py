"""A TCP proxy, on its own thread and event loop, that records every Fetch exchange passing through it.

Clients that use fetch sessions (librdkafka, kafka-python) hide them; the tests read them here: for each Fetch, the
request's session id and epoch, the partitions it names and forgets, and the response's error, session id and
partitions (with the size of their records). Frames are forwarded unchanged. The broker must advertise the proxy's
address (``advertised.listeners``) so that clients keep talking through it. The proxy outlives broker restarts: each
client connection opens its own upstream connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from strata.protocol.registry import RESPONSE_CLASSES, decode_request

FETCH = 1


@dataclass
class FetchExchange:
    conn: int
    version: int
    session_id: int
    epoch: int
    replica_id: int
    topics: list[tuple[Any, list[int]]]  # (topic name or id, partitions) the request names
    forgotten: list[tuple[Any, list[int]]]
    error: int | None = None  # None: no response (yet)
    response_session_id: int | None = None
    # (topic name or id, partition, error, high watermark, bytes of records)
    partitions: list[tuple[Any, int, int, int, int]] = field(default_factory=list)

    @property
    def answered(self) -> bool:
        return self.error is not None

    @property
    def incremental(self) -> bool:
        return self.epoch > 0

    def named(self) -> set[tuple[Any, int]]:
        return {(t, p) for t, ps in self.topics for p in ps}

    def forgot(self) -> set[tuple[Any, int]]:
        return {(t, p) for t, ps in self.forgotten for p in ps}

    def answered_partitions(self) -> set[tuple[Any, int]]:
        return {(t, p) for t, p, *_ in self.partitions}


class FetchLogProxy:
    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self.exchanges: list[FetchExchange] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fetch-log-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._conns = 0
        self._tasks: set[asyncio.Task] = set()
        with socket.socket() as s:  # the port is known before the broker starts (it advertises it)
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]

    def start(self) -> FetchLogProxy:
        self._thread.start()
        self._call(self._start())
        return self

    def stop(self) -> None:
        self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> FetchLogProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _call(self, coro: Any) -> Any:
        fut: Future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return fut.result(10)

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- what was seen -----------------------------------------------------------------------------------------
    def fetches(self, where: Callable[[FetchExchange], bool] = lambda x: True) -> list[FetchExchange]:
        with self._lock:
            return [x for x in self.exchanges if x.answered and where(x)]

    def clear(self) -> None:
        with self._lock:
            self.exchanges.clear()

    # -- forwarding --------------------------------------------------------------------------------------------
    async def _handle(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._conns += 1
        conn = self._conns
        pending: dict[int, FetchExchange | None] = {}
        versions: dict[int, int] = {}
        try:
            b_reader, b_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            c_writer.transport.abort()
            self._tasks.discard(task)
            return

        async def requests() -> None:
            with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
                while True:
                    head = await c_reader.readexactly(4)
                    body = await c_reader.readexactly(struct.unpack(">i", head)[0])
                    api_key, version, corr = struct.unpack_from(">hhi", body)
                    if api_key == FETCH:
                        pending[corr] = self._request(conn, body, version)
                        versions[corr] = version
                    b_writer.write(head + body)
                    await b_writer.drain()

        async def responses() -> None:
            with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
                while True:
                    head = await b_reader.readexactly(4)
                    body = await b_reader.readexactly(struct.unpack(">i", head)[0])
                    (corr,) = struct.unpack_from(">i", body)
                    x = pending.pop(corr, None)
                    if x is not None:
                        self._response(x, body, versions.pop(corr))
                    c_writer.write(head + body)
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
                w.transport.abort()
            self._tasks.discard(task)

    def _request(self, conn: int, body: bytes, version: int) -> FetchExchange:
        req = decode_request(body, FETCH, version).body
        key = "topic_id" if version >= 13 else "topic"
        replica_id = req.replica_state.replica_id if version >= 15 and req.replica_state else req.replica_id
        x = FetchExchange(
            conn,
            version,
            req.session_id if version >= 7 else 0,
            req.session_epoch if version >= 7 else -1,
            replica_id if replica_id is not None else -1,
            [(getattr(t, key), [p.partition for p in t.partitions]) for t in req.topics],
            [(getattr(t, key), list(t.partitions)) for t in (req.forgotten_topics_data or [])] if version >= 7 else [],
        )
        with self._lock:
            self.exchanges.append(x)
        return x

    def _response(self, x: FetchExchange, body: bytes, version: int) -> None:
        resp = RESPONSE_CLASSES[FETCH].decode(body, version=version, header=True)
        key = "topic_id" if version >= 13 else "topic"
        parts = [
            (getattr(t, key), p.partition_index, p.error_code, p.high_watermark, len(p.records or b""))
            for t in resp.responses
            for p in t.partitions
        ]
        with self._lock:
            x.partitions = parts
            x.response_session_id = resp.session_id if version >= 7 else 0
            x.error = resp.error_code if version >= 7 else 0
