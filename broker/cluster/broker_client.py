"""An asyncio connection from this broker to another one (followers' Fetch, OffsetForLeaderEpoch, ListOffsets, and
admin requests forwarded to the controller).

Plain Kafka wire protocol through kafka-python's codec, one request in flight at a time (a ReplicaFetcher owns its
connection and sends its requests in sequence, as Kafka's fetcher threads do).
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import struct
from typing import Any

from strata.protocol.registry import REQUEST_CLASSES, RESPONSE_CLASSES, rewrite_request_header

_SIZE = struct.Struct(">i")


class BrokerConnectionError(Exception):
    """The peer is unreachable, closed the connection, timed out, or answered garbage."""


class BrokerConnection:
    def __init__(self, host: str, port: int, client_id: str, timeout_s: float) -> None:
        self.host, self.port = host, port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._corr = itertools.count(1)

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def connect(self) -> None:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), self.timeout_s)
        except (TimeoutError, OSError) as e:
            raise BrokerConnectionError(f"cannot connect to {self.host}:{self.port}: {e!r}") from None
        self._reader, self._writer = reader, writer
        sock = writer.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # small fetch requests go at once
            except OSError:
                pass

    async def request(self, api_key: int, version: int, timeout_s: float | None = None, **fields: Any) -> Any:
        """Send one request and return its decoded response body; the connection is closed on any failure."""
        corr = next(self._corr) & 0x7FFFFFFF
        req = REQUEST_CLASSES[api_key][version](**fields)
        req.with_header(correlation_id=corr, client_id=self.client_id)
        payload = await self._roundtrip(bytes(req.encode(header=True, framed=True)), corr, timeout_s)
        try:
            return RESPONSE_CLASSES[api_key].decode(payload, version=version, header=True)
        except Exception as e:  # noqa: BLE001 - an undecodable response: the stream is out of sync
            await self.close()
            raise BrokerConnectionError(f"bad response from {self.host}:{self.port}: {e!r}") from None

    async def forward(self, request: bytes | memoryview, client_id: str | None, timeout_s: float) -> bytes:
        """Send a client's request as it came (under our correlation id and `client_id`); return the response
        payload, header included, undecoded."""
        corr = next(self._corr) & 0x7FFFFFFF
        body = rewrite_request_header(request, corr, client_id)
        return await self._roundtrip(_SIZE.pack(len(body)) + body, corr, timeout_s)

    async def _roundtrip(self, frame: bytes, corr: int, timeout_s: float | None) -> bytes:
        if not self.connected:
            await self.connect()
        assert self._reader is not None and self._writer is not None
        try:
            self._writer.write(frame)
            await self._writer.drain()
            head = await asyncio.wait_for(self._reader.readexactly(4), timeout_s or self.timeout_s)
            (size,) = _SIZE.unpack(head)
            payload = await asyncio.wait_for(self._reader.readexactly(size), self.timeout_s)
        except (TimeoutError, OSError, EOFError, asyncio.IncompleteReadError) as e:
            await self.close()
            raise BrokerConnectionError(f"request to {self.host}:{self.port} failed: {e!r}") from None
        got = _SIZE.unpack_from(payload, 0)[0] if len(payload) >= 4 else None
        if got != corr:
            await self.close()
            raise BrokerConnectionError(f"correlation id {got} != {corr}")
        return payload

    async def close(self) -> None:
        w, self._writer, self._reader = self._writer, None, None
        if w is not None:
            w.close()
            try:
                await asyncio.wait_for(w.wait_closed(), 1.0)
            except (TimeoutError, OSError):
                pass
