"""SocketServer: acceptor and per-connection processors, with Kafka's connection limits.

As in Kafka, a connection has at most one request in progress: the next frame is read only after the previous
response has left the user-space write buffer (below its low-water mark), so responses leave in request order and a
client that does not read its responses holds at most one response in broker memory. A peer whose pending response
makes no progress for `connections.max.idle.ms` is closed (Kafka closes a connection idle that long, and a send
that does not move is idleness) and its buffers are dropped at once, not flushed.

Limits (Kafka's SocketServer / ConnectionQuotas):

* `max.connections`: at the limit the acceptor stops accepting (connections wait in the listen backlog) until one
  closes; the time it waits is `strata_network_acceptor_blocked_seconds` (Kafka's AcceptorBlockedPercent). The
  inter-broker listener, when there are several listeners, is exempt: it accepts, and the least recently active
  connection of another listener is closed instead.
* `max.connections.per.ip` (+ overrides): a connection beyond its address's limit is accepted and closed at once,
  with Kafka's log line.
* `queued.max.requests` is KafkaApis' (broker/apis.py): a request waiting for a slot is one this connection has
  read, and with one request per connection in progress nothing more is read from it.

Frames larger than `socket.request.max.bytes`, negative sizes and undecodable requests close that connection only.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import itertools
import os
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import structlog

from strata.config import ConnectionQuotas, Listener

from .metrics import BrokerMetrics
from .request_context import ANONYMOUS, KafkaPrincipal

log = structlog.get_logger("strata.network")

_SIZE = struct.Struct(">i")

READ_LIMIT = 1 << 20  # StreamReader buffer; it stops reading the socket at twice this
# Write buffer water marks: drain() waits above HIGH until the buffer is below LOW. A response larger than HIGH
# stays referenced by the transport until sent, so these bound what is queued *beyond* the response in progress.
WRITE_HIGH = 1 << 20
WRITE_LOW = 256 << 10
LISTEN_BACKLOG = 1024
ACCEPT_BACKOFF_S = 0.1  # after EMFILE/ENFILE: retry accepting later rather than spin


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
    address: str = ""  # the client's IP address (per-IP limits)
    last_active: float = field(default_factory=time.monotonic)
    busy: bool = False
    principal: KafkaPrincipal = ANONYMOUS  # who authenticated (ANONYMOUS: no SASL, no TLS client auth)

    def close(self) -> None:
        if not self.writer.is_closing():
            self.writer.close()

    def abort(self) -> None:
        """Close without flushing: the pending response (possibly tens of MiB) is released now."""
        self.writer.transport.abort()


# A handler answers one frame with the framed response: bytes, or a list of buffers (written with writelines,
# so large record buffers are sent without being joined), or None (no response, acks=0).
Handler = Callable[[Connection, bytes], Awaitable[bytes | list | None]]


def client_address(addr: object) -> str:
    """The IP address of a peer as `socket.accept` returned it; an IPv4-mapped IPv6 address as plain IPv4."""
    host = addr[0] if isinstance(addr, tuple) and addr else str(addr)
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return str(host)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def _bind(host: str, port: int) -> list[socket.socket]:
    """Listening sockets for one listener: every address of `host`, or all interfaces when it is empty."""
    if not host:
        if socket.has_dualstack_ipv6():
            six = socket.AF_INET6
            return [socket.create_server(("", port), family=six, dualstack_ipv6=True, backlog=LISTEN_BACKLOG)]
        return [socket.create_server(("", port), backlog=LISTEN_BACKLOG)]
    socks: list[socket.socket] = []
    seen: set[tuple] = set()
    try:
        for fam, _, _, _, sa in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE):
            if sa in seen:
                continue
            seen.add(sa)
            socks.append(socket.create_server(sa[:2], family=fam, backlog=LISTEN_BACKLOG))
            if port == 0:  # an ephemeral port: one address, or each would get a different port
                break
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks


class SocketServer:
    def __init__(
        self,
        listeners: list[Listener],
        handler: Handler,
        *,
        max_request_bytes: int,
        idle_ms: int,
        metrics: BrokerMetrics,
        quotas: ConnectionQuotas | None = None,
        inter_broker_listener: str = "",
    ) -> None:
        self.listeners = listeners
        self.handler = handler
        self.max_request_bytes = max_request_bytes
        self.idle_s = idle_ms / 1000.0 if idle_ms > 0 else None
        self.metrics = metrics
        self.quotas = quotas or ConnectionQuotas()
        # Kafka protects the inter-broker listener only when there is another listener to take connections from
        self.protected_listener = inter_broker_listener if len(listeners) > 1 else ""
        self.sockets: list[socket.socket] = []
        self._socket_listeners: list[Listener] = []  # the listener of each socket in `sockets`
        self.connections: dict[int, Connection] = {}
        self._per_ip: dict[str, int] = {}
        self._open = 0  # admitted connections, counted from accept (before their processor runs)
        self._slot_freed = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self._acceptors: list[asyncio.Task] = []
        self.bound: dict[str, tuple[str, int]] = {}
        self._ids = itertools.count(1)
        self._sweeper: asyncio.Task | None = None

    async def bind(self) -> None:
        """Bind every listener without accepting connections yet: a taken port ends the startup before the broker
        registers anywhere or loads a partition (Kafka binds its acceptors first, then enables request
        processing). Raises ListenerBindError naming the listener; what was bound is closed again."""
        if self.sockets:
            return
        bound: list[tuple[Listener, socket.socket]] = []
        try:
            for lst in self.listeners:
                try:
                    bound += [(lst, s) for s in _bind(lst.host, lst.port)]
                except OSError as e:
                    raise ListenerBindError(lst, e) from None
        except BaseException:
            for _, s in bound:
                s.close()
            raise
        for lst, sock in bound:
            sock.setblocking(False)
            self.sockets.append(sock)
            self._socket_listeners.append(lst)
            if lst.name not in self.bound:
                self.bound[lst.name] = sock.getsockname()[:2]

    async def start(self) -> None:
        """Accept connections on every listener (bound first if bind() was not called)."""
        await self.bind()
        logged: set[str] = set()
        for lst, sock in zip(self._socket_listeners, self.sockets, strict=True):
            if lst.name not in logged:
                logged.add(lst.name)
                log.info("listening", listener=lst.name, address=f"{lst.host}:{self.bound[lst.name][1]}")
            self._acceptors.append(asyncio.create_task(self._accept_loop(sock, lst.name)))
        if self.idle_s:
            self._sweeper = asyncio.create_task(self._sweep_idle(self.idle_s))

    async def stop(self) -> None:
        """Stop accepting, then close every connection (in-flight responses are abandoned as in Kafka)."""
        if self._sweeper:
            self._sweeper.cancel()
        for t in self._acceptors:
            t.cancel()
        if self._acceptors:
            await asyncio.wait(self._acceptors, timeout=5)
        for s in self.sockets:
            s.close()
        for conn in list(self.connections.values()):
            conn.abort()
        # a handler may be parked (a long-poll fetch, a produce waiting for acks): end it here rather than leave it
        # to the loop's teardown
        tasks = [t for t in self._tasks if not t.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)

    async def _sweep_idle(self, idle_s: float) -> None:
        period = max(0.05, min(idle_s / 4, 5.0))
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for conn in list(self.connections.values()):
                if not conn.busy and now - conn.last_active > idle_s:
                    log.info("closing idle connection", conn=conn.id, peer=conn.peer)
                    conn.abort()

    # -- acceptor ----------------------------------------------------------------------------------------------

    def _slot_available(self, listener: str) -> bool:
        return listener == self.protected_listener or self._open < self.quotas.max_connections

    async def _accept_loop(self, sock: socket.socket, listener: str) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._slot_available(listener):
                started = time.monotonic()
                while not self._slot_available(listener):
                    self._slot_freed.clear()
                    await self._slot_freed.wait()
                self.metrics.acceptor_blocked.labels(listener).inc(time.monotonic() - started)
            try:
                csock, addr = await loop.sock_accept(sock)
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.warning("cannot accept a connection", listener=listener, error=e.strerror)
                    await asyncio.sleep(ACCEPT_BACKOFF_S)  # backoff: the condition clears when fds are closed
                    continue
                if sock.fileno() < 0:  # stopped
                    return
                log.warning("accept failed", listener=listener, error=str(e))
                continue
            self._admit(csock, addr, listener)

    def _admit(self, csock: socket.socket, addr: object, listener: str) -> None:
        address = client_address(addr)
        count = self._per_ip.get(address, 0)
        limit = self.quotas.max_for(address)
        if count >= limit:
            log.info(
                f"Rejected connection from {address}, address already has the configured maximum of {limit} "
                "connections."
            )
            csock.close()
            return
        self._per_ip[address] = count + 1
        self._open += 1
        if listener == self.protected_listener and self._open > self.quotas.max_connections:
            self._close_least_recently_used(listener)
        task = asyncio.get_running_loop().create_task(self._serve(csock, addr, address, listener))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _close_least_recently_used(self, protected: str) -> None:
        others = [c for c in self.connections.values() if c.listener != protected]
        if others:
            lru = min(others, key=lambda c: c.last_active)
            log.info("closing least recently used connection: max.connections reached", conn=lru.id, peer=lru.peer)
            lru.abort()

    def _release(self, address: str) -> None:
        n = self._per_ip.get(address, 0) - 1
        if n > 0:
            self._per_ip[address] = n
        else:
            self._per_ip.pop(address, None)
        self._open -= 1
        self._slot_freed.set()

    # -- processor ---------------------------------------------------------------------------------------------

    async def _serve(self, csock: socket.socket, addr: object, address: str, listener: str) -> None:
        try:
            await self._process(csock, addr, address, listener)
        except asyncio.CancelledError:
            # This task is the root of the connection: cancelling it means dropping the connection.
            pass
        finally:
            self._release(address)

    async def _process(self, csock: socket.socket, addr: object, address: str, listener: str) -> None:
        loop = asyncio.get_running_loop()
        try:
            csock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        reader = asyncio.StreamReader(limit=READ_LIMIT)
        protocol = asyncio.StreamReaderProtocol(reader)
        try:
            transport, _ = await loop.connect_accepted_socket(lambda: protocol, csock)
        except OSError:
            csock.close()
            return
        transport.set_write_buffer_limits(high=WRITE_HIGH, low=WRITE_LOW)
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        peer = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) and len(addr) >= 2 else "?"
        conn = Connection(next(self._ids), peer, listener, writer, address)
        self.connections[conn.id] = conn
        self.metrics.connections.inc()
        self.metrics.connections_created.inc()
        clean = False
        try:
            await self._requests(conn, reader)
            clean = True
        except CloseConnection:
            pass
        except (asyncio.IncompleteReadError, ConnectionError):
            clean = True
        except Exception:
            log.exception("connection failed", conn=conn.id, peer=conn.peer)
        finally:
            self.connections.pop(conn.id, None)
            self.metrics.connections.dec()
            if clean:
                conn.close()  # the client closed: flush what is left of the last response
            else:
                conn.abort()

    async def _requests(self, conn: Connection, reader: asyncio.StreamReader) -> None:
        """Read, answer and write requests one at a time until the peer closes or a request closes the connection."""
        writer = conn.writer
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
                raise CloseConnection
            payload = await reader.readexactly(size)
            conn.busy = True
            try:
                response = await self.handler(conn, payload)
            finally:
                conn.busy = False
                conn.last_active = time.monotonic()
            del payload
            if response is not None:
                if isinstance(response, list):
                    writer.writelines(response)
                else:
                    writer.write(response)
                # the transport holds what it has not sent; this frame must not (an exception's traceback would
                # keep the frame, and with it the response, until the cyclic GC runs)
                del response
            await self._drain(conn)

    async def _drain(self, conn: Connection) -> None:
        """Wait until the write buffer is below its low-water mark; close a peer that reads nothing for
        `connections.max.idle.ms` (its pending response would stay pinned in memory)."""
        transport = conn.writer.transport
        if transport.get_write_buffer_size() <= WRITE_HIGH:
            return
        if self.idle_s is None:
            await conn.writer.drain()
            return
        conn.busy = True  # the sweeper leaves it to us: a slow reader is not idle while it makes progress
        try:
            while True:
                pending = transport.get_write_buffer_size()
                try:
                    await asyncio.wait_for(conn.writer.drain(), self.idle_s)
                    return
                except TimeoutError:
                    if transport.get_write_buffer_size() >= pending:
                        log.info(
                            "closing connection: the client has not read its response",
                            conn=conn.id,
                            peer=conn.peer,
                            pending_bytes=transport.get_write_buffer_size(),
                            idle_ms=int(self.idle_s * 1000),
                        )
                        raise CloseConnection from None
        finally:
            conn.busy = False
            conn.last_active = time.monotonic()
