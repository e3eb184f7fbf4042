"""SocketServer: acceptor and per-connection processors.

As in Kafka, a connection has at most one request in progress: the next frame is read only after the previous
response is queued, so responses leave in request order, while connections are served concurrently. Frames larger
than `socket.request.max.bytes` and undecodable requests close that connection only; idle connections are closed
after `connections.max.idle.ms` by a sweeper rather than a per-read timer (cheaper on the hot path).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial

import structlog

from strata.config import Listener

from .metrics import BrokerMetrics
from .request_context import ANONYMOUS, KafkaPrincipal

log = structlog.get_logger("strata.network")

_SIZE = struct.Struct(">i")


def os_error_text(e: OSError) -> str:
    """`address already in use`, `cannot assign requested address`, `name or service not known` (a host that does
    not resolve): the OS's words, without asyncio's wrapping."""
    if e.errno is not None and e.errno > 0:
        return os.strerror(e.errno).lower()
    return (e.strerror or str(e)).lower()


class ListenerBindError(OSError):
    """A listener whose address could not be bound; the message names the setting, the listener and the address."""

    def __init__(self, listener: Listener, cause: OSError) -> None:
        reason = os_error_text(cause)
        super().__init__(
            cause.errno, f"listeners: cannot bind {listener.name} {listener.host}:{listener.port}: {reason}"
        )

    def __str__(self) -> str:
        return str(self.strerror)


class CloseConnection(Exception):
    """Raised by a handler to drop the connection (Kafka does this for malformed requests and acks=0 errors)."""


@dataclass
class Connection:
    id: int
    peer: str
    listener: str
    writer: asyncio.StreamWriter
    last_active: float = field(default_factory=time.monotonic)
    busy: bool = False
    principal: KafkaPrincipal = ANONYMOUS  # who authenticated (ANONYMOUS: no SASL, no TLS client auth)

    def close(self) -> None:
        if not self.writer.is_closing():
            self.writer.close()


# A handler answers one frame with the framed response: bytes, or a list of buffers (written with writelines,
# so large record buffers are sent without being joined), or None (no response, acks=0).
Handler = Callable[[Connection, bytes], Awaitable[bytes | list | None]]


class SocketServer:
    def __init__(
        self,
        listeners: list[Listener],
        handler: Handler,
        *,
        max_request_bytes: int,
        idle_ms: int,
        metrics: BrokerMetrics,
    ) -> None:
        self.listeners = listeners
        self.handler = handler
        self.max_request_bytes = max_request_bytes
        self.idle_s = idle_ms / 1000.0 if idle_ms > 0 else None
        self.metrics = metrics
        self.servers: list[asyncio.base_events.Server] = []
        self.connections: dict[int, Connection] = {}
        self._tasks: set[asyncio.Task] = set()
        self.bound: dict[str, tuple[str, int]] = {}
        self._ids = itertools.count(1)
        self._sweeper: asyncio.Task | None = None

    async def bind(self) -> None:
        """Bind every listener without accepting connections yet: a taken port ends the startup before the broker
        registers anywhere or loads a partition (Kafka binds its acceptors first, then enables request
        processing). Raises ListenerBindError naming the listener; what was bound is closed again."""
        for lst in self.listeners:
            try:
                srv = await asyncio.start_server(
                    partial(self._serve, listener=lst.name),
                    lst.host or None,
                    lst.port,
                    reuse_address=True,
                    limit=1 << 20,
                    backlog=1024,
                    start_serving=False,
                )
            except OSError as e:
                for bound in self.servers:
                    bound.close()
                self.servers.clear()
                self.bound.clear()
                raise ListenerBindError(lst, e) from None
            self.servers.append(srv)
            self.bound[lst.name] = srv.sockets[0].getsockname()[:2]

    async def start(self) -> None:
        """Accept connections on every listener (bound first if bind() was not called)."""
        if not self.servers:
            await self.bind()
        for lst, srv in zip(self.listeners, self.servers, strict=True):
            await srv.start_serving()
            log.info("listening", listener=lst.name, address=f"{lst.host}:{self.bound[lst.name][1]}")
        if self.idle_s:
            self._sweeper = asyncio.create_task(self._sweep_idle(self.idle_s))

    async def stop(self) -> None:
        """Stop accepting, then close every connection (in-flight responses are abandoned as in Kafka)."""
        if self._sweeper:
            self._sweeper.cancel()
        for srv in self.servers:
            srv.close()
        for conn in list(self.connections.values()):
            conn.close()
        # a handler may be parked (a long-poll fetch, a produce waiting for acks): end it here rather than leave it
        # to the loop's teardown
        tasks = [t for t in self._tasks if not t.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        for srv in self.servers:
            try:
                await asyncio.wait_for(srv.wait_closed(), 5)
            except TimeoutError:
                pass

    async def _sweep_idle(self, idle_s: float) -> None:
        period = max(0.05, min(idle_s / 4, 5.0))
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for conn in list(self.connections.values()):
                if not conn.busy and now - conn.last_active > idle_s:
                    log.info("closing idle connection", conn=conn.id, peer=conn.peer)
                    conn.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, listener: str) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        peer = writer.get_extra_info("peername")
        conn = Connection(next(self._ids), f"{peer[0]}:{peer[1]}" if peer else "?", listener, writer)
        self.connections[conn.id] = conn
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        self.metrics.connections.inc()
        self.metrics.connections_created.inc()
        try:
            while True:
                head = await reader.readexactly(4)
                (size,) = _SIZE.unpack(head)
                if size < 0 or size > self.max_request_bytes:
                    log.warning(
                        "closing connection: request size out of bounds",
                        conn=conn.id,
                        peer=conn.peer,
                        size=size,
                        max=self.max_request_bytes,
                    )
                    return
                payload = await reader.readexactly(size)
                conn.busy = True
                try:
                    response = await self.handler(conn, payload)
                finally:
                    conn.busy = False
                    conn.last_active = time.monotonic()
                if response is not None:
                    if isinstance(response, list):
                        writer.writelines(response)
                    else:
                        writer.write(response)
                    if writer.transport.get_write_buffer_size() > 1 << 20:
                        await writer.drain()
        except CloseConnection:
            pass
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except asyncio.CancelledError:
            # This task is the root of the connection: cancelling it means dropping the connection, and must not
            # propagate, because asyncio's start_server callback (Python 3.11) calls task.exception() on it and
            # logs a traceback for a cancelled task.
            pass
        except Exception:
            log.exception("connection failed", conn=conn.id, peer=conn.peer)
        finally:
            self._tasks.discard(task)
            self.connections.pop(conn.id, None)
            self.metrics.connections.dec()
            conn.close()
