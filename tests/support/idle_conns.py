"""Open many idle client connections to a broker, each having completed one ApiVersions round trip (as a client
does on connect), for the connection-scale test and bench/conn_bench.py."""

from __future__ import annotations

import socket
import struct

from kafka.protocol.metadata import ApiVersionsRequest

BATCH = 250  # connections opened (and their ApiVersions sent) before their answers are read


def _api_versions_frame() -> bytes:
    req = ApiVersionsRequest[3](client_software_name="idle", client_software_version="1")
    req.with_header(correlation_id=1, client_id="idle")
    return bytes(req.encode(header=True, framed=True))


def _read_frame(s: socket.socket) -> None:
    head = b""
    while len(head) < 4:
        chunk = s.recv(4 - len(head))
        if not chunk:
            raise ConnectionError("closed before answering ApiVersions")
        head += chunk
    left = struct.unpack(">i", head)[0]
    while left:
        chunk = s.recv(min(left, 65536))
        if not chunk:
            raise ConnectionError("closed while answering ApiVersions")
        left -= len(chunk)


def open_idle(host: str, port: int, n: int, timeout: float = 30.0) -> list[socket.socket]:
    """`n` connections, each answered once; the caller closes them."""
    frame = _api_versions_frame()
    socks: list[socket.socket] = []
    try:
        while len(socks) < n:
            batch = []
            for _ in range(min(BATCH, n - len(socks))):
                s = socket.create_connection((host, port), timeout=timeout)
                batch.append(s)
                socks.append(s)
                s.sendall(frame)
            for s in batch:
                _read_frame(s)
    except BaseException:
        close_all(socks)
        raise
    return socks


def close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        try:
            s.close()
        except OSError:
            pass
