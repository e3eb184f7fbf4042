"""The connection read side (broker/frame_reader.py) over real loopback sockets on uvloop and asyncio: frames of every
size arrive whole and in order (split, pipelined, larger than the read-ahead chunk), no buffer is held between
frames, no more than the read-ahead chunk is read past the frame in progress, and the request memory pool's
non-strict admission. Plus the config check Kafka makes of queued.max.request.bytes."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Awaitable, Callable

import pytest
import uvloop

from strata.broker.frame_reader import READ_AHEAD, FrameProtocol, RequestMemory
from strata.config import BrokerConfig, ConfigError


def run_pair(loop_kind: str, body: Callable[[FrameProtocol, socket.socket], Awaitable[None]]) -> None:
    """`body(protocol, client socket)`, the protocol serving the accepted side of a loopback connection."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        srv = socket.create_server(("127.0.0.1", 0))
        srv.setblocking(False)
        client = socket.create_connection(srv.getsockname())
        accepted, _ = await loop.sock_accept(srv)
        proto = FrameProtocol(loop)
        transport, _ = await loop.connect_accepted_socket(lambda: proto, accepted)
        try:
            await asyncio.wait_for(body(proto, client), 20)
        finally:
            transport.close()
            client.close()
            srv.close()

    if loop_kind == "uvloop":
        uvloop.run(main())
    else:
        asyncio.run(main())


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


@pytest.mark.parametrize("loop_kind", ["uvloop", "asyncio"])
def test_frames_arrive_whole_and_in_order(loop_kind: str) -> None:
    small, large, empty = b"a" * 10, bytes(range(256)) * 2000, b""

    async def body(proto: FrameProtocol, client: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        # pipelined small frames in one send, a large one split in pieces, an empty one
        data = framed(small) + framed(small[::-1]) + framed(large) + framed(empty)
        client.setblocking(False)

        async def send() -> None:
            for i in range(0, len(data), 7777):
                await loop.sock_sendall(client, data[i : i + 7777])
                await asyncio.sleep(0)

        sender = asyncio.ensure_future(send())
        got = []
        for _ in range(4):
            got.append(bytes(await proto.read_frame(await proto.read_size())))
        await sender
        assert got == [small, small[::-1], large, empty]
        assert proto._chunk is None and proto._frame is None  # nothing held between requests
        client.close()
        with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
            await proto.read_size()

    run_pair(loop_kind, body)


@pytest.mark.parametrize("loop_kind", ["uvloop", "asyncio"])
def test_reads_stop_after_the_read_ahead_chunk(loop_kind: str) -> None:
    async def body(proto: FrameProtocol, client: socket.socket) -> None:
        frame = framed(b"x" * 1000)
        client.setblocking(False)
        sent = 0
        for _ in range(2000):  # 2 MB of pipelined frames, none read by the processor yet
            try:
                sent += client.send(frame)
            except BlockingIOError:
                break
        for _ in range(20):
            await asyncio.sleep(0.01)
        assert proto._read_paused
        assert proto._end - proto._start <= 2 * READ_AHEAD
        # the processor goes on: every frame still arrives, in order
        n = 0
        while n * len(frame) < sent:
            assert bytes(await proto.read_frame(await proto.read_size())) == b"x" * 1000
            n += 1
            if n % 50 == 0:
                while True:
                    try:
                        sent += client.send(frame)
                        break
                    except BlockingIOError:
                        await asyncio.sleep(0.001)

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
