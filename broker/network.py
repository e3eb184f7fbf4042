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
* `queued.max.request.bytes` (broker/frame_reader.py, Kafka's request memory pool): a request's bytes are taken
  once its size is read and given back when it is done (or parked: what waits for other requests, as exempt from
  `queued.max.requests`); while none are left no request body is read from any connection.

Reading (broker/frame_reader.py): a connection holds no read buffer between requests; a small chunk takes sizes and
small frames, a larger frame is received in place into a buffer of its size, and at most that chunk is read ahead of
the request in progress (pipelined requests wait in the kernel).

Frames larger than `socket.request.max.bytes`, negative sizes and undecodable requests close that connection only.

Security (Kafka's SslTransportLayer / SaslServerAuthenticator, per listener, `broker/security/`): an SSL or SASL_SSL
listener wraps each accepted socket in TLS. A handshake that fails, or stays idle for `connections.max.idle.ms` (as
Kafka closes an idle connection), is logged once with the peer and closes that connection only; a client certificate
becomes the principal through `ssl.principal.mapping.rules`. On a SASL listener a connection may send only
ApiVersions, SaslHandshake and SaslAuthenticate (or raw tokens after a v0 handshake) until it authenticates, in
frames of at most `sasl.server.max.receive.size`; anything else closes it, as does a failed authentication once its
response is sent (after `connection.failed.authentication.delay.ms`, which slows password guessing down without
holding up other connections) and an expired session (`connections.max.reauth.ms`) that sends anything but a
re-authentication.
PLAINTEXT listeners skip all of it.

Zero-copy Fetch (Kafka's FileRecords.writeTo): on listeners without TLS a Fetch response may hold FileRegions
(`strata.storage.file_region`, `fetch.zero.copy.enable`) among its buffers. Such a response is written on a
duplicate of the socket's descriptor (uvloop has no loop.sendfile and refuses add_writer on a transport's own
descriptor), once the transport has sent anything it held: its buffers with `sendmsg` (MSG_MORE before a region, so
they ride in the region's first segment), each region from the file with `os.sendfile`, waiting for writability
between partial sends, so a slow reader holds only its own connection. The connection's first such response sets
its SO_SNDBUF (`fetch.zero.copy.send.buffer.bytes`). The frame size was computed from the regions' sizes when the
response was built; a region whose file was truncated since then closes the connection instead of sending other
bytes or a short frame.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import itertools
import os
import socket
import ssl
import struct
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import NoReturn

import structlog
from prometheus_client import Gauge

from strata.config import ConnectionQuotas, Listener
from strata.storage.file_region import FileRegion

from .frame_reader import FrameReader, RequestMemory
from .metrics import BrokerMetrics
from .request_context import ANONYMOUS, KafkaPrincipal
from .security.listener_security import ListenerSecurity, NoMatchingRule
from .security.sasl import SASL_HANDSHAKE, SaslAuthenticator, SaslState
from .security.sasl_session import authenticate_step

log = structlog.get_logger("strata.network")

_SIZE = struct.Struct(">i")
_SIZE_API = struct.Struct(">h")

# Write buffer water marks: drain() waits above HIGH until the buffer is below LOW. A response larger than HIGH
# stays referenced by the transport until sent, so these bound what is queued *beyond* the response in progress.
WRITE_HIGH = 1 << 20
WRITE_LOW = 256 << 10
LISTEN_BACKLOG = 1024
ACCEPT_BACKOFF_S = 0.1  # after EMFILE/ENFILE: retry accepting later rather than spin
SSL_HANDSHAKE_TIMEOUT_S = 60.0  # without connections.max.idle.ms: a TLS handshake that takes longer is closed
SASL_MAX_RECEIVE = 524288  # Kafka's sasl.server.max.receive.size: frames before authentication
# A TLS transport encrypts what one write() hands it into a memory BIO before sending any of it; a response of many
# MiB written at once grows that BIO by reallocation (2-4x the cost of the encryption itself). Responses go to TLS
# transports in pieces of this size instead, each encrypted and sent before the next (bench/security_bench.py).
TLS_WRITE_PIECE = 256 << 10
# Zero-copy responses: buffers before a region are sent flagged "more to come" (Linux), so they share its first
# segment; a sendmsg takes at most IOV_MAX buffers (a response of thousands of small partitions has more).
_MSG_MORE = getattr(socket, "MSG_MORE", 0)
_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


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
    sasl: SaslAuthenticator | None = None  # on a SASL listener: the connection's authentication state
    muted_until: float = 0.0  # client quotas (KIP-219): no request is read before this monotonic time
    plaintext: bool = False  # no TLS: responses may carry FileRegions sent with sendfile
    sendfile_sock: socket.socket | None = None  # a duplicate of the socket for zero-copy writes, made on demand
    request_memory: RequestMemory | None = None  # queued.max.request.bytes
    request_bytes: int = 0  # what the request in progress holds of it

    def release_request_bytes(self) -> None:
        """The request in progress no longer counts against queued.max.request.bytes (done, or parked waiting for
        other requests, which must still be read)."""
        if self.request_bytes and self.request_memory is not None:
            self.request_memory.release(self.request_bytes)
        self.request_bytes = 0

    def mute(self, throttle_ms: int) -> None:
        """Read nothing more from this client for `throttle_ms` (Kafka mutes a throttled channel)."""
        self.muted_until = max(self.muted_until, time.monotonic() + throttle_ms / 1000)

    def close(self) -> None:
        if not self.writer.is_closing():
            self.writer.close()

    def abort(self) -> None:
        """Close without flushing: the pending response (possibly tens of MiB) is released now."""
        self.writer.transport.abort()

    def zero_copy_socket(self, send_buffer: int = -1) -> socket.socket:
        """The socket zero-copy writes use: a duplicate of the transport's descriptor (uvloop refuses add_writer
        on a transport's own), kept until `release_zero_copy_socket`. Made on the first zero-copy response, which
        also sets SO_SNDBUF to `send_buffer` (> 0)."""
        if self.sendfile_sock is None:
            sock = self.writer.transport.get_extra_info("socket")
            if sock is None:
                raise ConnectionError("the connection has no socket any more")
            dup = socket.socket(fileno=os.dup(sock.fileno()))
            dup.setblocking(False)  # the file description is the transport's: non-blocking already
            if send_buffer > 0:
                try:
                    dup.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
                except OSError:
                    pass  # the OS's autotuning stays: slower, not wrong
            self.sendfile_sock = dup
        return self.sendfile_sock

    def release_zero_copy_socket(self) -> None:
        if self.sendfile_sock is not None:
            sock, self.sendfile_sock = self.sendfile_sock, None
            sock.close()


# A handler answers one frame with the framed response: bytes, or a list of buffers (written with writelines,
# so large record buffers are sent without being joined), or None (no response, acks=0).
Handler = Callable[[Connection, bytes | bytearray], Awaitable[bytes | list | None]]


def _wake(fut: asyncio.Future, value: bool) -> None:
    if not fut.done():
        fut.set_result(value)


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


def tls_pieces(response: bytes | list) -> Iterator[bytes | memoryview]:
    """The response's bytes in order, in pieces of at most TLS_WRITE_PIECE: large buffers cut into views, small
    ones (headers) joined, so each TLS record is full and no record buffer is copied whole."""
    pending: list[memoryview] = []
    size = 0
    for part in response if isinstance(response, list) else (response,):
        view = memoryview(bytes(part) if isinstance(part, FileRegion) else part).cast("B")
        while len(view):
            take = view[: TLS_WRITE_PIECE - size]
            pending.append(take)
            size += len(take)
            view = view[len(take) :]
            if size == TLS_WRITE_PIECE:
                yield pending[0] if len(pending) == 1 else b"".join(pending)
                pending, size = [], 0
    if pending:
        yield pending[0] if len(pending) == 1 else b"".join(pending)


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
        security: Mapping[str, ListenerSecurity] | None = None,
        sasl_max_receive: int = SASL_MAX_RECEIVE,
        queued_max_request_bytes: int = -1,
        failed_authentication_delay_ms: int = 0,
        zero_copy_send_buffer: int = -1,
    ) -> None:
        self.listeners = listeners
        self.handler = handler
        self.max_request_bytes = max_request_bytes
        self.idle_s = idle_ms / 1000.0 if idle_ms > 0 else None
        self.metrics = metrics
        self.quotas = quotas or ConnectionQuotas()
        self.security = dict(security or {})
        self.sasl_max_receive = sasl_max_receive
        self.request_memory = memory = RequestMemory(queued_max_request_bytes)
        # kafka.network:type=SocketServer,name=MemoryPoolAvailable / MemoryPoolUsed (unbounded: available is +Inf)
        Gauge(
            "strata_network_memory_pool_available_bytes",
            "Bytes of queued.max.request.bytes not held by requests in progress",
            registry=metrics.registry,
        ).set_function(lambda: memory.available if memory.bounded else float("inf"))
        Gauge(
            "strata_network_memory_pool_used_bytes",
            "Bytes of requests in progress counted against queued.max.request.bytes",
            registry=metrics.registry,
        ).set_function(lambda: memory.used)
        self.failed_auth_delay_s = failed_authentication_delay_ms / 1000.0
        # fetch.zero.copy.send.buffer.bytes: a sendfile moves what the socket buffer takes; with a fixed buffer
        # larger than Linux's autotuned one (at most tcp_wmem's 4 MiB) the broker's CPU per GiB on the raw Fetch
        # bench was 15-20 % lower (bench/floor.py). Set on a connection's first zero-copy response only: idle and
        # produce-only connections keep the OS's buffer.
        self.zero_copy_send_buffer = zero_copy_send_buffer
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
        peer = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) and len(addr) >= 2 else "?"
        sec = self.security.get(listener)
        protocol = FrameReader(over_ssl=sec is not None and sec.ssl_context is not None)
        try:
            if sec is None or sec.ssl_context is None:
                transport, _ = await loop.connect_accepted_socket(lambda: protocol, csock)
            else:
                transport, _ = await loop.connect_accepted_socket(
                    lambda: protocol,
                    csock,
                    ssl=sec.ssl_context,
                    ssl_handshake_timeout=self.idle_s or SSL_HANDSHAKE_TIMEOUT_S,
                )
        except (OSError, TimeoutError) as e:  # ssl.SSLError is an OSError
            if sec is not None and sec.ssl_context is not None:
                self._tls_failed(listener, peer, e)
            csock.close()
            return
        transport.set_write_buffer_limits(high=WRITE_HIGH, low=WRITE_LOW)
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
        conn = Connection(
            next(self._ids),
            peer,
            listener,
            writer,
            address,
            request_memory=self.request_memory,
            plaintext=sec is None or sec.ssl_context is None,
        )
        if sec is not None and not self._secure(conn, sec):
            conn.abort()
            return
        self.connections[conn.id] = conn
        self.metrics.connections.inc()
        self.metrics.connections_created.inc()
        clean = False
        try:
            await self._requests(conn, protocol)
            clean = True
        except CloseConnection:
            pass
        except (asyncio.IncompleteReadError, ConnectionError):
            clean = True
        except Exception:
            log.exception("connection failed", conn=conn.id, peer=conn.peer)
        finally:
            conn.release_request_bytes()
            self.connections.pop(conn.id, None)
            self.metrics.connections.dec()
            if clean:
                conn.close()  # the client closed: flush what is left of the last response
            else:
                conn.abort()
            conn.release_zero_copy_socket()  # after the transport's close: the socket closes with the last descriptor

    async def _requests(self, conn: Connection, frames: FrameReader) -> None:
        """Read, answer and write requests one at a time until the peer closes or a request closes the connection."""
        writer = conn.writer
        tls = writer.get_extra_info("ssl_object") is not None
        while True:
            size = await frames.read_size()
            limit = self.max_request_bytes
            if conn.sasl is not None and conn.sasl.principal is None:
                limit = min(limit, self.sasl_max_receive)  # not authenticated yet: Kafka's SASL receive bound
            if size < 0 or size > limit:
                log.warning(
                    "closing connection: request size out of bounds",
                    conn=conn.id,
                    peer=conn.peer,
                    size=size,
                    max=limit,
                )
                raise CloseConnection
            conn.request_bytes = await self.request_memory.acquire(size)
            payload = await frames.read_frame(size)
            conn.busy = True
            try:
                if conn.sasl is None:
                    response = await self.handler(conn, payload)
                else:
                    response = await self._sasl_request(conn, conn.sasl, payload)
            finally:
                conn.busy = False
                conn.last_active = time.monotonic()
                conn.release_request_bytes()
            del payload
            if conn.sasl is not None and conn.sasl.state is SaslState.FAILED:
                await self._failed_authentication_delay()
            if writer.is_closing():
                return  # the peer went away while its request was handled: nothing to answer (uvloop would raise)
            if response is not None:
                if tls:
                    await self._write_tls(conn, response)
                elif isinstance(response, list):
                    if any(isinstance(part, FileRegion) for part in response):
                        await self._write_zero_copy(conn, response)
                    else:
                        writer.writelines(response)
                else:
                    writer.write(response)
                # the transport holds what it has not sent; this frame must not (an exception's traceback would
                # keep the frame, and with it the response, until the cyclic GC runs)
                del response
            await self._drain(conn)
            if conn.sasl is not None and conn.sasl.state is SaslState.FAILED:
                return  # Kafka closes a connection whose authentication failed once the response is sent
            if conn.muted_until:
                await self._throttle(conn)

    async def _throttle(self, conn: Connection) -> None:
        """A client over its quota: requests it pipelined stay unread until its throttle time has passed. Muted
        is not idle (the sweeper leaves it alone). The sleep is the throttle itself."""
        conn.busy = True
        try:
            left = conn.muted_until - time.monotonic()
            if left > 0:  # nothing extends the mute meanwhile: this connection has no request in progress
                await asyncio.sleep(left)
        finally:
            conn.muted_until = 0.0
            conn.busy = False
            conn.last_active = time.monotonic()

    async def _write_tls(self, conn: Connection, response: bytes | list) -> None:
        """Hand a response to a TLS transport in pieces of TLS_WRITE_PIECE bytes, draining between them above the
        high-water mark, so the encrypted bytes waiting in the TLS layer stay about WRITE_HIGH."""
        for piece in tls_pieces(response):
            conn.writer.write(piece)
            await self._drain(conn)

    async def _write_zero_copy(self, conn: Connection, response: list) -> None:
        """Write a response whose record parts may be FileRegions, all of it on the socket's duplicate descriptor
        (nothing through the transport, which holds no earlier bytes once this starts): buffers with `sendmsg`,
        flagged MSG_MORE when a region follows so the kernel puts them in the region's first segment rather than
        a packet of their own, and each region with `sendfile`. The regions' descriptors are closed here, sent or
        not."""
        conn.busy = True  # the sweeper leaves it to us: progress is checked against connections.max.idle.ms here
        try:
            transport = conn.writer.transport
            sock = conn.zero_copy_socket(self.zero_copy_send_buffer)
            fd = sock.fileno()
            while transport.get_write_buffer_size():  # what an earlier response left in the transport goes first
                await self._writable(conn, fd)
            pending: list = []
            for part in response:
                if not isinstance(part, FileRegion):
                    pending.append(part)
                    continue
                if pending:
                    await self._send_buffers(conn, sock, pending, _MSG_MORE)
                    pending = []
                await self._sendfile(conn, fd, part)
                self.metrics.sendfile_bytes.inc(part.size)
            if pending:
                await self._send_buffers(conn, sock, pending, 0)
        finally:
            for part in response:
                if isinstance(part, FileRegion):
                    part.close()
            conn.busy = False
            conn.last_active = time.monotonic()

    async def _send_buffers(self, conn: Connection, sock: socket.socket, buffers: list, flags: int) -> None:
        """All of `buffers` on the non-blocking socket, waiting for writability between partial sends."""
        views = [v for v in (memoryview(b).cast("B") for b in buffers) if v]  # an empty one would never leave
        while views:
            if conn.writer.transport.is_closing():
                raise ConnectionResetError("the connection closed during a zero-copy send")
            try:
                n = sock.sendmsg(views[:_IOV_MAX], (), flags)
            except BlockingIOError:
                await self._writable(conn, sock.fileno())
                continue
            while n and n >= len(views[0]):
                n -= len(views.pop(0))
            if n:
                views[0] = views[0][n:]

    async def _sendfile(self, conn: Connection, sock: int, region: FileRegion) -> None:
        transport = conn.writer.transport
        pos, end = region.position, region.position + region.size
        while pos < end:
            if transport.is_closing():
                raise ConnectionResetError("the connection closed during a zero-copy send")
            if not region.valid():  # checked right before each write: the loop thread is the only truncator
                self._region_truncated(conn, region, pos)
            try:
                n = os.sendfile(sock, region.fd, pos, end - pos)
            except BlockingIOError:
                await self._writable(conn, sock)
                continue
            if n == 0:  # end of file before the region's end: the file shrank
                self._region_truncated(conn, region, pos)
            pos += n

    def _region_truncated(self, conn: Connection, region: FileRegion, pos: int) -> NoReturn:
        log.warning(
            "closing connection: a segment was truncated while its records were being sent",
            conn=conn.id,
            peer=conn.peer,
            position=region.position,
            size=region.size,
            sent=pos - region.position,
        )
        raise CloseConnection

    async def _writable(self, conn: Connection, fd: int) -> None:
        """Wait until the socket takes more bytes; close a peer that takes none for `connections.max.idle.ms`.
        One future woken by the writer callback or the idle timer (asyncio.wait_for costs a task's worth more)."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[bool] = loop.create_future()
        loop.add_writer(fd, _wake, ready, True)
        timer = loop.call_later(self.idle_s, _wake, ready, False) if self.idle_s else None
        try:
            writable = await ready
        finally:
            loop.remove_writer(fd)
            if timer is not None:
                timer.cancel()
        if not writable:
            log.info(
                "closing connection: the client has not read its response",
                conn=conn.id,
                peer=conn.peer,
                idle_ms=int((self.idle_s or 0) * 1000),
            )
            raise CloseConnection

    # -- security ----------------------------------------------------------------------------------------------

    def _tls_failed(self, listener: str, peer: str, e: BaseException) -> None:
        """Log a TLS handshake that did not complete, once. A peer that closes before finishing the handshake (a
        port probe, the liveness watcher) is no failed authentication, as in Kafka; a TLS error or a handshake
        that idles past its time is."""
        if isinstance(e, ConnectionResetError | BrokenPipeError):
            log.debug("connection closed during the TLS handshake", listener=listener, peer=peer)
            return
        if isinstance(e, TimeoutError | ConnectionAbortedError):  # asyncio / uvloop's handshake timeout
            reason = "handshake timed out"
        else:
            reason = getattr(e, "reason", None) or str(e)
        log.warning("Failed authentication: TLS handshake failed", listener=listener, peer=peer, reason=reason)
        self.metrics.authentication(listener, "SSL", False)

    def _secure(self, conn: Connection, sec: ListenerSecurity) -> bool:
        """The principal of a TLS client certificate and the SASL state of a new connection; False: refuse it."""
        sslobj = conn.writer.transport.get_extra_info("ssl_object")
        # on SASL_SSL the principal is SASL's, as in Kafka: a client certificate is only checked against the CA
        if sec.sasl is None and isinstance(sslobj, ssl.SSLObject | ssl.SSLSocket):
            der = sslobj.getpeercert(binary_form=True)
            try:
                conn.principal = sec.tls_principal(der)
            except (NoMatchingRule, ValueError) as e:
                log.warning(
                    "Failed authentication: no principal for the client certificate",
                    listener=conn.listener,
                    peer=conn.peer,
                    reason=str(e),
                )
                self.metrics.authentication(conn.listener, "SSL", False)
                return False
            self.metrics.authentication(conn.listener, "SSL", True)
        conn.sasl = sec.new_authenticator()
        return True

    async def _failed_authentication_delay(self) -> None:
        """Kafka's connection.failed.authentication.delay.ms: the answer to a failed authentication (and the close)
        comes this much later, so a client guessing passwords is slowed down; only this connection waits."""
        if self.failed_auth_delay_s > 0:
            await asyncio.sleep(self.failed_auth_delay_s)

    async def _sasl_request(
        self, conn: Connection, auth: SaslAuthenticator, payload: bytes | bytearray
    ) -> bytes | list | None:
        """A frame on a SASL listener: a raw token after a v0 handshake, else a request the state allows."""
        if auth.expects_raw_token:
            step = await authenticate_step(auth, bytes(payload), self.metrics, conn.listener, conn.peer)
            if auth.state is SaslState.FAILED:
                await self._failed_authentication_delay()
                raise CloseConnection  # the legacy flow has no error response: Kafka closes
            if auth.state is SaslState.COMPLETE:
                conn.principal = auth.principal or ANONYMOUS
            return _SIZE.pack(len(step.auth_bytes)) + step.auth_bytes
        api_key = _SIZE_API.unpack_from(payload)[0] if len(payload) >= 2 else -1
        if auth.state is SaslState.COMPLETE and auth.session_expired() and api_key != SASL_HANDSHAKE:
            log.info("closing connection: SASL session expired", conn=conn.id, peer=conn.peer, listener=conn.listener)
            raise CloseConnection
        if not auth.allows(api_key):
            log.warning(
                "closing connection: request not allowed before SASL authentication",
                conn=conn.id,
                peer=conn.peer,
                listener=conn.listener,
                api_key=api_key,
            )
            self.metrics.authentication(conn.listener, auth.mechanism or "NONE", False, auth.principal is not None)
            raise CloseConnection
        response = await self.handler(conn, payload)
        if auth.state is SaslState.COMPLETE and auth.principal is not None:
            conn.principal = auth.principal
        return response

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
