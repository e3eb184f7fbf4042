"""An asyncio connection from this broker to another one (followers' Fetch, OffsetForLeaderEpoch, ListOffsets, and
admin requests forwarded to the controller).

Plain Kafka wire protocol through kafka-python's codec. Each socket has one owner of its read side, a reader task
that matches every response to its pending request by correlation id (as Kafka's NetworkClient does), so a close
from another task, a caller that gives up, or several callers at once never leave a half-read frame or a stale
response for the next request. A request that times out poisons its socket: the socket is closed and every request
pending on it fails with `BrokerConnectionError` (retriable: the callers back off and retry); the next request opens
a new socket.

Security (`inter.broker.listener.name` and its protocol, as Kafka's inter-broker clients): TLS with the listener's
truststore, then SASL with `sasl.mechanism.inter.broker.protocol` (PLAIN or SCRAM, the credentials from the
`username`/`password` options of the listener's JAAS entry) before the socket is used; a failed authentication is a
`BrokerConnectionError` whose message holds Kafka's error message, never a credential.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import struct
import weakref
from typing import TYPE_CHECKING, Any

from strata.protocol.registry import REQUEST_CLASSES, RESPONSE_CLASSES, rewrite_request_header

from ..security.listener_security import ClientSecurity, build_client_security

if TYPE_CHECKING:
    from strata.config import BrokerConfig

_SIZE = struct.Struct(">i")
_CLOSE_WAIT_S = 1.0


class BrokerConnectionError(Exception):
    """The peer is unreachable, closed the connection, timed out, or answered garbage."""


_SECURITY: dict[int, tuple[weakref.ref[Any], ClientSecurity]] = {}


def inter_broker_security(config: BrokerConfig) -> ClientSecurity:
    """How this broker connects to the others: built once per config object (the TLS context is reused)."""
    entry = _SECURITY.get(id(config))
    if entry is not None and entry[0]() is config:
        return entry[1]
    listener = config.inter_broker_listener_name or config.listeners[0].name
    sec = build_client_security(config, listener)
    _SECURITY[id(config)] = (weakref.ref(config), sec)
    return sec


SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


class _Socket:
    """One TCP connection: its writer, its reader task, and the requests waiting for a response on it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str) -> None:
        self.reader, self.writer, self.peer = reader, writer, peer
        self.pending: dict[int, asyncio.Future[bytes]] = {}
        self.abandoned: set[int] = set()  # requests whose caller stopped waiting: their responses are dropped
        self.error: BrokerConnectionError | None = None
        self.task = asyncio.get_running_loop().create_task(self._read_loop(), name=f"broker-client-{peer}")

    async def _read_loop(self) -> None:
        try:
            while True:
                (size,) = _SIZE.unpack(await self.reader.readexactly(4))
                if size < 4:
                    raise BrokerConnectionError(f"bad response size {size} from {self.peer}")
                payload = await self.reader.readexactly(size)
                (corr,) = _SIZE.unpack_from(payload, 0)
                fut = self.pending.pop(corr, None)
                if fut is None:
                    if corr in self.abandoned:
                        self.abandoned.discard(corr)
                        continue
                    raise BrokerConnectionError(
                        f"response from {self.peer} with correlation id {corr} matches no request"
                    )
                if not fut.done():
                    fut.set_result(payload)
        except (OSError, EOFError, asyncio.IncompleteReadError) as e:
            self.fail(BrokerConnectionError(f"connection to {self.peer} lost: {e!r}"))
        except BrokerConnectionError as e:
            self.fail(e)
        except Exception as e:  # noqa: BLE001 - whatever broke the reader, the requests waiting must hear of it
            self.fail(BrokerConnectionError(f"reading from {self.peer} failed: {e!r}"))

    def fail(self, error: BrokerConnectionError) -> None:
        """Close the socket; every request pending on it fails with `error`. Idempotent."""
        if self.error is not None:
            return
        self.error = error
        pending, self.pending = self.pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(error)
        self.writer.close()

    async def closed(self) -> None:
        """Wait (bounded) for the reader task and the socket to finish."""
        if self.task is not asyncio.current_task():
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        try:
            await asyncio.wait_for(self.writer.wait_closed(), _CLOSE_WAIT_S)
        except (TimeoutError, OSError):
            pass


class BrokerConnection:
    def __init__(
        self, host: str, port: int, client_id: str, timeout_s: float, security: ClientSecurity | None = None
    ) -> None:
        self.host, self.port = host, port
        self.security = security or ClientSecurity()
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._sock: _Socket | None = None
        self._corr = itertools.count(1)
        self._connecting = asyncio.Lock()
        self._closes = 0  # close() calls: a connect that a close overtook does not install its socket

    @property
    def peer(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        return self._sock is not None and self._sock.error is None

    async def connect(self) -> None:
        """Open a socket unless one is open (callers at once share one connect)."""
        async with self._connecting:
            if self.connected:
                return
            closes = self._closes
            try:
                ctx = self.security.ssl_context
                opened = asyncio.open_connection(
                    self.host, self.port, ssl=ctx, server_hostname=self.host if ctx else None
                )
                reader, writer = await asyncio.wait_for(opened, self.timeout_s)
            except (TimeoutError, OSError) as e:
                raise BrokerConnectionError(f"cannot connect to {self.peer}: {e!r}") from None
            sock = writer.get_extra_info("socket")
            if sock is not None:
                try:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # small fetch requests go at once
                except OSError:
                    pass
            new = _Socket(reader, writer, self.peer)
            if self.security.mechanism:
                try:
                    await self._authenticate(new)
                except BaseException:
                    await new.closed()
                    raise
            if closes != self._closes:  # closed while connecting: the close wins
                new.fail(BrokerConnectionError(f"connection to {self.peer} closed while connecting"))
                await new.closed()
                raise new.error or BrokerConnectionError("closed")
            self._sock = new

    async def request(self, api_key: int, version: int, timeout_s: float | None = None, **fields: Any) -> Any:
        """Send one request and return its decoded response body."""
        corr = self._next_corr()
        req = REQUEST_CLASSES[api_key][version](**fields)
        req.with_header(correlation_id=corr, client_id=self.client_id)
        payload = await self._roundtrip(bytes(req.encode(header=True, framed=True)), corr, timeout_s)
        try:
            return RESPONSE_CLASSES[api_key].decode(payload, version=version, header=True)
        except Exception as e:  # noqa: BLE001 - an undecodable response: the peer is not speaking our protocol
            await self.close()
            raise BrokerConnectionError(f"bad response from {self.peer}: {e!r}") from None

    async def forward(self, request: bytes | bytearray | memoryview, client_id: str | None, timeout_s: float) -> bytes:
        """Send a client's request as it came (under our correlation id and `client_id`); return the response
        payload, header included, undecoded."""
        corr = self._next_corr()
        body = rewrite_request_header(request, corr, client_id)
        return await self._roundtrip(_SIZE.pack(len(body)) + body, corr, timeout_s)

    async def _authenticate(self, sock: _Socket) -> None:
        """SaslHandshake v1 + SaslAuthenticate v1 exchanges on a new socket, before anyone else uses it."""
        sec = self.security
        hs = await self._sock_request(sock, SASL_HANDSHAKE, 1, mechanism=sec.mechanism)
        if hs.error_code != 0:
            raise self._auth_failed(sock, f"SASL handshake for {sec.mechanism} failed with error {hs.error_code}")
        if sec.mechanism == "PLAIN":
            await self._sasl_step(sock, b"\0" + sec.username.encode() + b"\0" + sec.password.encode())
            return
        from scramp import ScramClient, ScramException

        client = ScramClient([sec.mechanism], sec.username, sec.password)
        try:
            first = await self._sasl_step(sock, client.get_client_first().encode())
            client.set_server_first(first.decode())
            final = await self._sasl_step(sock, client.get_client_final().encode())
            client.set_server_final(final.decode())
        except (ScramException, UnicodeDecodeError) as e:
            raise self._auth_failed(sock, f"SCRAM exchange failed: {type(e).__name__}") from None

    async def _sasl_step(self, sock: _Socket, token: bytes) -> bytes:
        resp = await self._sock_request(sock, SASL_AUTHENTICATE, 1, auth_bytes=token)
        if resp.error_code != 0:
            raise self._auth_failed(sock, f"SASL authentication failed: {resp.error_message}")
        return bytes(resp.auth_bytes)

    def _auth_failed(self, sock: _Socket, why: str) -> BrokerConnectionError:
        """The error to raise (the broker's own message, not the close that follows it); the socket is closed."""
        err = BrokerConnectionError(f"{self.peer}: {why}")
        sock.fail(err)
        return err

    async def _sock_request(self, sock: _Socket, api_key: int, version: int, **fields: Any) -> Any:
        corr = self._next_corr()
        req = REQUEST_CLASSES[api_key][version](**fields)
        req.with_header(correlation_id=corr, client_id=self.client_id)
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        sock.pending[corr] = fut
        try:
            async with asyncio.timeout(self.timeout_s):
                sock.writer.write(bytes(req.encode(header=True, framed=True)))
                await sock.writer.drain()
                payload = await fut
        except (TimeoutError, OSError) as e:
            raise self._auth_failed(sock, f"SASL authentication did not complete: {e!r}") from None
        return RESPONSE_CLASSES[api_key].decode(payload, version=version, header=True)

    def _next_corr(self) -> int:
        return next(self._corr) & 0x7FFFFFFF

    async def _roundtrip(self, frame: bytes, corr: int, timeout_s: float | None) -> bytes:
        if not self.connected:
            await self.connect()
        sock = self._sock
        if sock is None or sock.error is not None:  # closed by another task right after connecting
            raise BrokerConnectionError(f"connection to {self.peer} closed")
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        sock.pending[corr] = fut
        limit = timeout_s or self.timeout_s
        try:
            async with asyncio.timeout(limit):
                sock.writer.write(frame)
                await sock.writer.drain()
                return await fut
        except TimeoutError:
            err = BrokerConnectionError(f"request to {self.peer} timed out after {limit:.1f}s; connection closed")
            await self._poison(sock, err)
            raise err from None
        except (OSError, RuntimeError) as e:  # the write side failed (reset, or the transport already closed)
            err = BrokerConnectionError(f"request to {self.peer} failed: {e!r}")
            await self._poison(sock, err)
            raise err from None
        except asyncio.CancelledError:
            if sock.pending.pop(corr, None) is not None:
                sock.abandoned.add(corr)  # its response, if it comes, is dropped by the reader
            raise

    async def _poison(self, sock: _Socket, error: BrokerConnectionError) -> None:
        """A socket whose state is unknown (a response may still come) is never reused."""
        sock.fail(error)
        if self._sock is sock:
            self._sock = None
        await sock.closed()

    async def close(self) -> None:
        """Close the socket: every request pending on it fails with BrokerConnectionError; a later request
        reconnects."""
        self._closes += 1
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.fail(BrokerConnectionError(f"connection to {self.peer} closed"))
            await sock.closed()
