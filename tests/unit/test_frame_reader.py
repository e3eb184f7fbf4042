"""The connection read side (broker/frame_reader.py) over real loopback sockets on uvloop and asyncio: frames of every
size, cut at every kind of boundary and pipelined, arrive whole and in order; a frame larger than what was read
ahead lands in its own writable buffer, which grows with the bytes that arrive (an announced size alone reserves
little); EOF mid-frame is IncompleteReadError; no buffer is held between frames and no more than the read-ahead chunk
is read past the frame in progress; the write side drains as StreamWriter expects; the request memory pool's
non-strict admission. Plus the config check Kafka makes of queued.max.request.bytes."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import uvloop

from strata.broker.frame_reader import DIRECT_FIRST, READ_AHEAD, FrameReader, RequestMemory
from strata.config import BrokerConfig, ConfigError

LOOPS = ["uvloop", "asyncio"]


def run_pair(loop_kind: str, body: Callable[[FrameReader, socket.socket, Any], Awaitable[Any]]) -> Any:
    """`body(reader, client socket, transport)`, the reader serving the accepted side of a loopback connection."""

    async def main() -> Any:
        loop = asyncio.get_running_loop()
        srv = socket.create_server(("127.0.0.1", 0))
        srv.setblocking(False)
        client = socket.create_connection(srv.getsockname()[:2])
        accepted, _ = await loop.sock_accept(srv)
        srv.close()
        reader = FrameReader()
        transport, _ = await loop.connect_accepted_socket(lambda: reader, accepted)
        try:
            return await asyncio.wait_for(body(reader, client, transport), 30)
        finally:
            transport.close()
            client.close()

    if loop_kind == "uvloop":
        return uvloop.run(main())
    return asyncio.run(main())


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


async def read_one(reader: FrameReader) -> bytes | bytearray:
    return await reader.read_frame(await reader.read_size())


SIZES = [0, 1, 100, READ_AHEAD - 4, READ_AHEAD, READ_AHEAD + 1, 4 * READ_AHEAD + 3, 1 << 20, 3, 5 << 20]


@pytest.mark.parametrize("loop_kind", LOOPS)
@pytest.mark.parametrize("chunk", [7, 4093, 65537, 1 << 20])
def test_pipelined_frames_cut_anywhere_come_out_exactly(loop_kind: str, chunk: int) -> None:
    frames = [os.urandom(n) for n in SIZES if chunk > 1000 or n < 100_000]
    wire = b"".join(framed(f) for f in frames)

    async def body(reader: FrameReader, client: socket.socket, transport: Any) -> list[bytes | bytearray]:
        loop = asyncio.get_running_loop()

        async def send() -> None:
            for i in range(0, len(wire), chunk):
                await loop.sock_sendall(client, wire[i : i + chunk])
                await asyncio.sleep(0)

        client.setblocking(False)
        sender = asyncio.ensure_future(send())
        got = [await read_one(reader) for _ in frames]
        await sender
        idle = asyncio.ensure_future(reader.read_size())  # the processor between requests
        deadline = loop.time() + 10
        while reader._waiter is None and loop.time() < deadline:
            await asyncio.sleep(0.01)  # bounded poll of the condition: the reader waits for the next size
        assert reader._waiter is not None
        assert reader._chunk is None and reader._frame is None  # nothing held between requests
        client.close()
        with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
            await idle
        return got

    got = run_pair(loop_kind, body)
    assert [bytes(g) for g in got] == frames
    for g, f in zip(got, frames):
        if len(f) > 2 * READ_AHEAD:
            assert isinstance(g, bytearray), "a large frame is received into its own (writable) buffer"


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_reads_stop_after_the_read_ahead_chunk(loop_kind: str) -> None:
    """Nobody reads: what the broker holds stays at the read-ahead chunk (the rest waits in the kernel, then in the
    client); reading again resumes the transport and every frame arrives, in order."""

    async def body(reader: FrameReader, client: socket.socket, transport: Any) -> None:
        frame = framed(b"x" * 1000)
        client.setblocking(False)
        sent = 0
        for _ in range(2000):  # 2 MB of pipelined frames, none read by the processor yet
            try:
                sent += client.send(frame)
            except BlockingIOError:
                break
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while not reader._read_paused and loop.time() < deadline:
            await asyncio.sleep(0.01)  # the loop receives meanwhile; the condition is the reader's state
        assert reader._read_paused, "reading was not paused at a full read-ahead chunk"
        assert reader._end - reader._start <= 2 * READ_AHEAD
        n = 0
        while n * len(frame) < sent:
            assert bytes(await read_one(reader)) == b"x" * 1000
            n += 1
            if n % 50 == 0:
                while True:
                    try:
                        sent += client.send(frame)
                        break
                    except BlockingIOError:
                        await asyncio.sleep(0.001)
        assert not reader._read_paused

    run_pair(loop_kind, body)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_eof_in_the_middle_of_a_frame(loop_kind: str) -> None:
    async def body(reader: FrameReader, client: socket.socket, transport: Any) -> None:
        client.sendall(struct.pack(">i", 100_000) + b"x" * 50_000)
        client.shutdown(socket.SHUT_WR)
        size = await reader.read_size()
        with pytest.raises(asyncio.IncompleteReadError) as e:
            await reader.read_frame(size)
        assert e.value.partial == b"x" * 50_000
        with pytest.raises(asyncio.IncompleteReadError):
            await reader.read_size()

    run_pair(loop_kind, body)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_an_announced_size_is_not_allocated_before_its_bytes_arrive(loop_kind: str) -> None:
    """A client that announces a 100 MiB request and sends 10 bytes makes the reader hold DIRECT_FIRST, not 100
    MiB (the buffer doubles as the bytes come)."""

    async def body(reader: FrameReader, client: socket.socket, transport: Any) -> None:
        client.sendall(struct.pack(">i", 100 << 20) + b"0123456789")
        read = asyncio.ensure_future(reader.read_frame(await reader.read_size()))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while reader._got < 10 and loop.time() < deadline:
            await asyncio.sleep(0.01)  # polling the reader's progress (the condition), bounded
        assert reader._got == 10 and reader._frame is not None and len(reader._frame) == DIRECT_FIRST
        client.sendall(b"x" * (3 << 20))
        client.shutdown(socket.SHUT_WR)
        with pytest.raises(asyncio.IncompleteReadError) as e:
            await read
        assert len(e.value.partial) == 10 + (3 << 20)

    run_pair(loop_kind, body)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_the_writer_drains_through_the_reader(loop_kind: str) -> None:
    """StreamWriter on a FrameReader: drain() waits while the client reads nothing, returns once it reads."""

    async def body(reader: FrameReader, client: socket.socket, transport: Any) -> None:
        loop = asyncio.get_running_loop()
        writer = asyncio.StreamWriter(transport, reader, None, loop)
        transport.set_write_buffer_limits(high=1 << 16, low=1 << 12)
        writer.write(b"y" * (16 << 20))
        drain = asyncio.ensure_future(writer.drain())
        await asyncio.sleep(0.05)  # give a wrong drain the chance to return (the positive case is waited for below)
        assert not drain.done()
        got = 0
        client.setblocking(False)
        while got < 16 << 20:
            got += len(await loop.sock_recv(client, 1 << 20))
        await drain

    run_pair(loop_kind, body)


def test_request_memory_admits_while_any_byte_is_left() -> None:
    async def main() -> None:
        mem = RequestMemory(100)
        assert await mem.acquire(60) == 60
        assert await mem.acquire(90) == 90  # 40 left: admitted (Kafka's non-strict pool), now -50
        waiter = asyncio.ensure_future(mem.acquire(1))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        mem.release(60)  # 10 left
        assert await asyncio.wait_for(waiter, 5) == 1
        assert mem.used == 91
        unbounded = RequestMemory(-1)
        assert await unbounded.acquire(10**9) == 0 and unbounded.used == 0

    asyncio.run(main())


def test_queued_max_request_bytes_must_cover_the_largest_request() -> None:
    with pytest.raises(ConfigError, match=r"must be larger or equal to socket\.request\.max\.bytes"):
        BrokerConfig.from_dict({"queued.max.request.bytes": "1000", "socket.request.max.bytes": "2000"})
    ok = BrokerConfig.from_dict({"queued.max.request.bytes": "2000", "socket.request.max.bytes": "2000"})
    assert ok["queued.max.request.bytes"] == 2000
