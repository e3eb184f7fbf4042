"""Zero-copy Fetch pieces: a LogSegment's FileRegion (fixed bytes, kept through deletion, refused after truncation)
and the SocketServer writing responses that hold FileRegions with sendfile, on uvloop as the broker runs: exact
frames through partial writes to a slow reader, and a closed connection (never other bytes) when the file was
truncated after the response was built."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
from pathlib import Path
from typing import Any

import pytest
import uvloop

from strata.broker.metrics import BrokerMetrics
from strata.broker.network import Connection, SocketServer
from strata.config import Listener
from strata.storage.file_region import FileRegion, RegionTruncatedError
from strata.storage.segment import LogSegment
from tests.support.kafka_wire import build_batch, recv_exact, slow_reader_socket
from tests.support.waiting import wait_until

BATCH = build_batch([(None, os.urandom(1000), []) for _ in range(100)])  # ~100 KiB


def _segment(tmp_path: Path, batches: int) -> LogSegment:
    seg = LogSegment(tmp_path, 0)
    data = bytearray()
    spans = []
    for i in range(batches):
        b = bytearray(BATCH)
        struct.pack_into(">q", b, 0, i * 100)
        spans.append((len(data), len(b), i * 100 + 99, 0))
        data += b
    seg.append(bytes(data), spans, batches * 100)
    return seg


def test_region_is_fixed_at_read_and_survives_deletion(tmp_path: Path) -> None:
    seg = _segment(tmp_path, 3)
    r = seg.read(0, 10 << 20, None, True, zero_copy_min=1)
    assert r is not None
    region, first = r
    assert isinstance(region, FileRegion) and first == 0
    expected = os.pread(os.open(seg.log_path, os.O_RDONLY), seg.size, 0)
    assert len(region) == seg.size and bytes(region) == expected
    small = seg.read(0, 10 << 20, None, True, zero_copy_min=seg.size + 1)
    assert small is not None and isinstance(small[0], bytes), "below the threshold the bytes are read"
    seg.delete()
    seg.close()
    assert not seg.log_path.exists()
    assert bytes(region) == expected, "the region's own descriptor keeps the deleted file's bytes"
    region.close()


def test_region_is_invalid_once_its_segment_is_truncated(tmp_path: Path) -> None:
    seg = _segment(tmp_path, 3)
    r = seg.read(100, 10 << 20, None, True, zero_copy_min=1)
    assert r is not None and isinstance(r[0], FileRegion)
    region = r[0]
    assert region.valid()
    seg.truncate_to(200)
    assert not region.valid()
    with pytest.raises(RegionTruncatedError):
        bytes(region)
    later = seg.read(100, 10 << 20, None, True, zero_copy_min=1)
    assert later is not None and isinstance(later[0], FileRegion) and later[0].valid()


async def _serve(handler: Any, client: Any, idle_ms: int = 30_000, send_buffer: int = -1) -> Any:
    """A SocketServer on an ephemeral plaintext port whose every frame is answered by `handler`; `client(port,
    server)` runs in a thread (blocking sockets, as a real client)."""
    server = SocketServer(
        [Listener.parse("PLAINTEXT://127.0.0.1:0")],
        handler,
        max_request_bytes=1 << 20,
        idle_ms=idle_ms,
        metrics=BrokerMetrics(),
        zero_copy_send_buffer=send_buffer,
    )
    await server.start()
    try:
        return await asyncio.wait_for(asyncio.to_thread(client, server.bound["PLAINTEXT"][1], server), 60)
    finally:
        await server.stop()


def test_a_reader_that_stops_for_the_idle_time_is_closed(tmp_path: Path) -> None:
    """connections.max.idle.ms applies to a zero-copy send that makes no progress (as to a buffered one): the
    connection is closed and the region's descriptor released, the frame is never completed."""
    size = 1 << 30  # more than any socket buffers can hold (a sparse file: no disk used)
    path = tmp_path / "data"
    with open(path, "wb") as f:
        f.truncate(size)
    fd = os.open(path, os.O_RDONLY)
    regions: list[FileRegion] = []

    async def handler(conn: Connection, frame: bytes) -> list:
        regions.append(FileRegion(fd, 0, size, lambda: True))
        return [struct.pack(">i", size), regions[-1]]

    def client(port: int, server: SocketServer) -> int:
        with slow_reader_socket("127.0.0.1", port) as s:
            s.sendall(struct.pack(">i", 1) + b"x")
            wait_until(lambda: server.connections, 20, message="the connection was not accepted")
            wait_until(lambda: not server.connections, 20, message="the stalled connection was not closed")
            got = 0
            with contextlib.suppress(ConnectionResetError):
                while chunk := s.recv(1 << 20):
                    got += len(chunk)
            return got

    try:
        got = uvloop.run(_serve(handler, client, idle_ms=300))
    finally:
        os.close(fd)
    assert got < 4 + size, "the frame was completed although the reader stalled"
    assert regions and not regions[0].valid(), "the region's descriptor is still open"


def test_regions_go_out_in_order_through_partial_writes(tmp_path: Path) -> None:
    """A 20 MiB region (far more than the socket buffers) after 1,500 small buffers (more than one sendmsg takes)
    and an 8 MiB one, read slowly in small pieces: the frame is exact and in order, and a second request on the
    connection is answered after it."""
    path = tmp_path / "data"
    payload = os.urandom(24 << 20)
    path.write_bytes(payload)
    fd = os.open(path, os.O_RDONLY)
    head, tail = b"HEAD" * 100, b"TAIL"
    smalls = [i.to_bytes(3, "big") for i in range(1500)]
    big_buffer = os.urandom(8 << 20)
    body_size = len(head) + 1000 + len(tail)

    async def handler(conn: Connection, frame: bytes) -> list:
        region = FileRegion(fd, 4096, 1000, lambda: True) if frame == b"small" else None
        big = FileRegion(fd, 1 << 20, 20 << 20, lambda: True)
        if region is not None:
            return [struct.pack(">i", body_size), head, region, tail, bytearray()]  # the encoder may end so
        parts: list[Any] = [head, *smalls, memoryview(big_buffer), big, tail]
        return [struct.pack(">i", sum(len(p) for p in parts)), *parts]

    def client(port: int, server: SocketServer) -> tuple[bytes, bytes]:
        with slow_reader_socket("127.0.0.1", port) as s:
            s.sendall(struct.pack(">i", 3) + b"big")
            (size,) = struct.unpack(">i", recv_exact(s, 4))
            first = recv_exact(s, size)
            s.sendall(struct.pack(">i", 5) + b"small")
            (size,) = struct.unpack(">i", recv_exact(s, 4))
            return first, recv_exact(s, size)

    try:
        first, second = uvloop.run(_serve(handler, client))
    finally:
        os.close(fd)
    assert first == head + b"".join(smalls) + big_buffer + payload[1 << 20 : 21 << 20] + tail
    assert second == head + payload[4096 : 4096 + 1000] + tail


def test_truncated_region_closes_the_connection(tmp_path: Path) -> None:
    """The segment is truncated between building the response and sending it: no bytes of the region go out (not
    the new ones written at the same place, nor a short frame), the connection is closed."""
    seg = _segment(tmp_path, 40)  # ~4 MiB
    other = build_batch([(None, os.urandom(1000), []) for _ in range(100)])  # the new leader's batches
    rest = bytearray()
    for i in range(1, 40):
        b = bytearray(other)
        struct.pack_into(">q", b, 0, i * 100)
        rest += b

    async def handler(conn: Connection, frame: bytes) -> list:
        r = seg.read(0, 64 << 20, None, True, zero_copy_min=1)
        assert r is not None and isinstance(r[0], FileRegion)
        region = r[0]
        seg.truncate_to(100)  # a new leader's log diverged: this replica truncates, then appends the leader's
        spans = [(i * len(other), len(other), 100 * (i + 2) - 1, 0) for i in range(39)]
        seg.append(bytes(rest), spans, 4000)  # the same positions now hold other batches
        return [struct.pack(">i", 4 + len(region)), b"HEAD", region]

    def client(port: int, server: SocketServer) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(struct.pack(">i", 1) + b"x")
            got = bytearray()
            while chunk := s.recv(1 << 16):
                got += chunk
            return bytes(got)

    got = uvloop.run(_serve(handler, client))
    assert seg.size == 40 * len(BATCH) and seg.next_offset == 4000, "the handler truncated and appended"
    assert len(got) <= 8, f"{len(got)} bytes of a truncated region were sent"


def test_the_send_buffer_is_set_on_the_first_zero_copy_response(tmp_path: Path) -> None:
    """fetch.zero.copy.send.buffer.bytes: a connection's SO_SNDBUF is set when it first sends a FileRegion, not
    before (a connection that never does keeps the OS's buffer)."""
    path = tmp_path / "data"
    path.write_bytes(os.urandom(1 << 20))
    fd = os.open(path, os.O_RDONLY)
    wanted = 96 << 10  # below what Linux autotunes a loopback socket to at once, above its minimum

    async def handler(conn: Connection, frame: bytes) -> list:
        sock = conn.writer.transport.get_extra_info("socket")
        sndbuf = struct.pack(">i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF))
        if frame == b"region":
            return [struct.pack(">i", 4 + 4096), sndbuf, FileRegion(fd, 0, 4096, lambda: True)]
        return [struct.pack(">i", 4), sndbuf]

    def client(port: int, server: SocketServer) -> list[int]:
        seen = []
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            for req in (b"plain", b"region", b"plain"):
                s.sendall(struct.pack(">i", len(req)) + req)
                (size,) = struct.unpack(">i", recv_exact(s, 4))
                seen.append(struct.unpack(">i", recv_exact(s, size)[:4])[0])
        return seen

    try:
        before, at_region, after = uvloop.run(_serve(handler, client, send_buffer=wanted))
    finally:
        os.close(fd)
    assert at_region == before, "the buffer was set before a zero-copy response"
    assert after != before and after >= wanted, f"SO_SNDBUF {before} -> {after}, not set to {wanted}"
