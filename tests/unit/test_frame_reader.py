"""FrameReader (broker/frame_reader.py) on uvloop over a real loopback socket: frames of every size class, cut at
every kind of boundary and pipelined, come out exactly; a large read lands in its own writable buffer; EOF mid-frame
is IncompleteReadError; a client that pipelines more than the staging buffer is paused, not buffered without
bound; an idle reader holds no buffer; the write side drains as StreamWriter expects."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import uvloop

from strata.broker.frame_reader import DIRECT_FIRST, DIRECT_MIN, STAGE_SIZE, FrameReader


def _run(body: Callable[[FrameReader, socket.socket, Any], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        loop = asyncio.get_running_loop()
        srv = socket.create_server(("127.0.0.1", 0))
        srv.setblocking(False)
        client = socket.create_connection(srv.getsockname()[:2])
        conn, _ = await loop.sock_accept(srv)
        srv.close()
        reader = FrameReader()
        transport, _ = await loop.connect_accepted_socket(lambda: reader, conn)
        try:
            return await asyncio.wait_for(body(reader, client, transport), 30)
        finally:
            client.close()
            transport.close()

    return uvloop.run(main())


def _frames(sizes: list[int]) -> list[bytes]:
    return [os.urandom(n) for n in sizes]


SIZES = [0, 1, 100, DIRECT_MIN - 4, DIRECT_MIN, DIRECT_MIN + 1, STAGE_SIZE - 4, STAGE_SIZE + 3, 1 << 20, 3, 5 << 20]


@pytest.mark.parametrize("chunk", [7, 4093, 65537, 1 << 20])
def test_pipelined_frames_cut_anywhere_come_out_exactly(chunk: int) -> None:
    frames = _frames([n for n in SIZES if chunk > 1000 or n < 100_000])
    wire = b"".join(struct.pack(">i", len(f)) + f for f in frames)

    async def body(reader: FrameReader, client: socket.socket, transport: Any) -> list[bytes | bytearray]:
        async def send() -> None:
            for i in range(0, len(wire), chunk):
                await asyncio.get_running_loop().sock_sendall(client, wire[i : i + chunk])

        client.setblocking(False)
        sender = asyncio.ensure_future(send())
        got = []
        for _ in frames:
            (n,) = struct.unpack(">i", await reader.readexactly(4))
            got.append(await reader.readexactly(n))
        await sender
        return got

    got = _run(body)
    assert [bytes(g) for g in got] == frames
    for g, f in zip(got, frames):
        if len(f) > DIRECT_MIN:
            assert isinstance(g, bytearray), "a large read is received into its own (writable) buffer"


def test_eof_in_the_middle_of_a_frame() -> None:
    async def body(reader: FrameReader, client: socket.socket, transport: Any) -> None:
        client.sendall(struct.pack(">i", 100_000) + b"x" * 50_000)
        client.shutdown(socket.SHUT_WR)
        (n,) = struct.unpack(">i", await reader.readexactly(4))
        with pytest.raises(asyncio.IncompleteReadError) as e:
            await reader.readexactly(n)
        assert len(e.value.partial) == 50_000
        with pytest.raises(asyncio.IncompleteReadError):
            await reader.readexactly(4)

    _run(body)


def test_a_client_that_pipelines_without_end_is_paused() -> None:
    """Nobody reads: what the broker holds stays at the staging buffer (the rest waits in the kernel, then in the
    client); reading again resumes the transport."""

    async def body(reader: FrameReader, client: socket.socket, transport: Any) -> None:
        client.setblocking(False)
        blob = b"\0\0\0\x08requests" * 200_000  # 2.4 MB of small frames
        sent = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while transport.is_reading() and loop.time() < deadline:
            try:
                sent += client.send(blob[sent:])
            except BlockingIOError:
                pass
            await asyncio.sleep(0.01)  # the loop receives meanwhile; the condition is the transport's state
        assert not transport.is_reading(), "reading was not paused at a full staging buffer"
        assert reader._end - reader._start <= STAGE_SIZE
        for _ in range(4000):  # 48 KB: more than half the staging buffer
            assert await reader.readexactly(4) == b"\0\0\0\x08"
            assert await reader.readexactly(8) == b"requests"
        assert transport.is_reading()

    _run(body)


def test_an_idle_reader_holds_no_buffer() -> None:
    async def body(reader: FrameReader, client: socket.socket, transport: Any) -> None:
        client.sendall(b"\0\0\0\x02hi")
        assert await reader.readexactly(4) == b"\0\0\0\x02"
        assert await reader.readexactly(2) == b"hi"
        assert reader._stage is None

    _run(body)


def test_the_writer_drains_through_the_reader() -> None:
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
            try:
                got += len(await loop.sock_recv(client, 1 << 20))
            except BlockingIOError:
                continue
        await drain

    _run(body)


def test_an_announced_size_is_not_allocated_before_its_bytes_arrive() -> None:
    """A client that announces a 100 MiB request and sends 10 bytes makes the reader hold DIRECT_FIRST, not 100
    MiB (the buffer doubles as the bytes come)."""

    async def body(reader: FrameReader, client: socket.socket, transport: Any) -> None:
        client.sendall(b"0123456789")
        read = asyncio.ensure_future(reader.readexactly(100 << 20))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while reader._got < 10 and loop.time() < deadline:
            await asyncio.sleep(0.01)  # polling the reader's progress (the condition), bounded
        assert reader._got == 10 and reader._target is not None and len(reader._target) == DIRECT_FIRST
        client.sendall(b"x" * (3 << 20))
        client.shutdown(socket.SHUT_WR)
        with pytest.raises(asyncio.IncompleteReadError) as e:
            await read
        assert len(e.value.partial) == 10 + (3 << 20)

    _run(body)
