"""A Fetch client that does not decode records: broker-side fetch throughput without a consumer library in the way.

Each worker process opens one connection, sends Fetch v11 requests (encoded by kafka-python's ``kafka.protocol``)
with a big ``max_bytes``, reads each response into one reusable buffer (``recv_into``, no per-response allocation)
and parses only what it needs to advance: the partition headers and, inside each partition's records, the batch
headers (base offset, length, last offset delta) to find the next fetch offset. Record bytes are never copied or
decoded, so the client needs little CPU and the broker is what is measured.

Fetch v11 is the newest non-flexible version (plain int32 lengths, topic names); every broker here serves it.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
import traceback
from collections.abc import Iterator
from typing import Any

MiB = 1024 * 1024
FETCH_VERSION = 11

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PART = struct.Struct(">ihqqq")  # partition, error, high watermark, last stable offset, log start offset
_BATCH = struct.Struct(">qi")  # base offset, batch length (bytes after this field)


def encode_fetch(
    topic: str,
    offsets: dict[int, int],
    correlation_id: int,
    max_bytes: int,
    partition_max_bytes: int,
    max_wait_ms: int = 100,
) -> bytes:
    from kafka.protocol.consumer.fetch import FetchRequest

    T = FetchRequest.FetchTopic
    P = T.FetchPartition
    req = FetchRequest(
        version=FETCH_VERSION,
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            T(
                topic=topic,
                partitions=[
                    P(
                        partition=p,
                        current_leader_epoch=-1,
                        fetch_offset=o,
                        log_start_offset=-1,
                        partition_max_bytes=partition_max_bytes,
                    )
                    for p, o in offsets.items()
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    req.with_header(correlation_id=correlation_id, client_id="bench-rawfetch")
    return bytes(req.encode(header=True, framed=True))


def parse_fetch_v11(buf: memoryview, size: int) -> dict[int, tuple[int, int, int]]:
    """{partition: (error, record bytes, next offset or -1 if no complete batch)} of a framed-off v11 response
    (``buf[:size]`` = correlation id + body)."""
    pos = 4 + 4 + 2 + 4  # correlation id, throttle, error, session id
    (ntopics,) = _I32.unpack_from(buf, pos)
    pos += 4
    out: dict[int, tuple[int, int, int]] = {}
    for _ in range(ntopics):
        (tlen,) = _I16.unpack_from(buf, pos)
        pos += 2 + max(tlen, 0)
        (nparts,) = _I32.unpack_from(buf, pos)
        pos += 4
        for _ in range(nparts):
            part, err, _hw, _lso, _ls = _PART.unpack_from(buf, pos)
            pos += _PART.size
            (naborted,) = _I32.unpack_from(buf, pos)
            pos += 4 + max(naborted, 0) * 16
            pos += 4  # preferred read replica
            (rlen,) = _I32.unpack_from(buf, pos)
            pos += 4
            rlen = max(rlen, 0)
            end = pos + rlen
            nxt = -1
            p = pos
            while p + 12 <= end:
                base, blen = _BATCH.unpack_from(buf, p)
                if p + 12 + blen > end or blen < 49:
                    break  # a partial trailing batch (allowed by the protocol)
                (delta,) = _I32.unpack_from(buf, p + 23)
                nxt = base + delta + 1
                p += 12 + blen
            out[part] = (err, rlen, nxt)
            pos = end
    if pos > size:
        raise ValueError(f"response parse ran past its end ({pos} > {size})")
    return out


def recv_exact(sock: socket.socket, view: memoryview, n: int) -> None:
    got = 0
    while got < n:
        k = sock.recv_into(view[got:n], n - got)
        if k == 0:
            raise ConnectionError("broker closed the connection")
        got += k


@contextlib.contextmanager
def worker_result(worker: int, barrier, out) -> Iterator[tuple[dict[str, Any], contextlib.ExitStack]]:
    """A bench worker's result dict, put on `out` when the body ends; a failure is reported there with its traceback
    and breaks the barrier (the parent stops waiting). Sockets entered on the stack are closed first."""
    res: dict[str, Any] = {"worker": worker}
    try:
        with contextlib.ExitStack() as stack:
            yield res, stack
    except Exception:  # noqa: BLE001
        res["error"] = traceback.format_exc(limit=3)
        with contextlib.suppress(Exception):
            barrier.abort()
    out.put(res)


def raw_fetch_worker(cfg: dict, barrier, out) -> None:
    """Read ``cfg['targets']`` ({partition: end offset}) of ``cfg['topic']`` from offset 0, whole passes repeated
    while the measurement is shorter than ``min_seconds`` (bounded by ``max_passes`` and ``time_cap``)."""
    with worker_result(cfg["worker"], barrier, out) as (res, stack):
        host, port = cfg["bootstrap"].rsplit(":", 1)
        sock = stack.enter_context(socket.create_connection((host, int(port)), timeout=30))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * MiB)
        topic = cfg["topic"]
        targets = {int(k): int(v) for k, v in cfg["targets"].items() if int(v) > 0}
        max_bytes, pmax = cfg["max_bytes"], cfg["partition_max_bytes"]
        buf = bytearray(max_bytes + 16 * MiB)
        view = memoryview(buf)
        head = memoryview(bytearray(4))
        corr = 0
        # one small warm-up request outside the clock (connection setup); at ``warmup_offsets`` if given (the end
        # of the data, so a cold remote read is not warmed by it)
        warm = {int(k): int(v) for k, v in (cfg.get("warmup_offsets") or dict.fromkeys(targets, 0)).items()}
        sock.sendall(encode_fetch(topic, warm, corr, 1024, 1024, max_wait_ms=0))
        recv_exact(sock, head, 4)
        recv_exact(sock, view, _I32.unpack_from(head)[0])
        barrier.wait(timeout=120)
        start = time.monotonic()
        deadline = start + cfg["time_cap"]
        min_seconds, max_passes = cfg.get("min_seconds", 0.0), cfg.get("max_passes", 1)
        passes = requests = record_bytes = frame_bytes = errors = 0
        first_error = None
        capped = False
        end = start
        while passes < max_passes:
            offsets = dict.fromkeys(targets, 0)
            while offsets and time.monotonic() < deadline:
                corr += 1
                sock.sendall(encode_fetch(topic, offsets, corr, max_bytes, pmax))
                recv_exact(sock, head, 4)
                (size,) = _I32.unpack_from(head)
                if size > len(buf):
                    buf = bytearray(size)
                    view = memoryview(buf)
                recv_exact(sock, view, size)
                requests += 1
                frame_bytes += size + 4
                for part, (err, nbytes, nxt) in parse_fetch_v11(view, size).items():
                    if err:
                        errors += 1
                        first_error = first_error or f"partition {part}: error {err}"
                        continue
                    record_bytes += nbytes
                    if nxt > 0 and part in offsets:
                        offsets[part] = nxt
                        if nxt >= targets[part]:
                            del offsets[part]
                if errors > 100:
                    raise RuntimeError(f"too many fetch errors, first: {first_error}")
                end = time.monotonic()
            if offsets:
                capped = True
                break
            passes += 1
            if end - start >= min_seconds:
                break
        res.update(
            start=start,
            end=end,
            passes=passes,
            requests=requests,
            bytes=record_bytes,
            frame_bytes=frame_bytes,
            errors=errors,
            first_error=first_error,
            capped=capped,
        )


def list_offset(
    bootstrap: str, topic: str, partition: int, timestamp: int, version: int = 9, timeout: float = 10.0
) -> tuple[int, int]:
    """One ListOffsets request (kafka-python's codec) -> (error code, offset). Sentinels: -1 latest, -2 earliest,
    -4 earliest local (v8+), -5 latest tiered (v9+)."""
    from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse

    T = ListOffsetsRequest.ListOffsetsTopic
    P = T.ListOffsetsPartition
    req = ListOffsetsRequest(
        version=version,
        replica_id=-1,
        isolation_level=0,
        topics=[T(name=topic, partitions=[P(partition_index=partition, current_leader_epoch=-1, timestamp=timestamp)])],
    )
    req.with_header(correlation_id=1, client_id="bench-listoffsets")
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(bytes(req.encode(header=True, framed=True)))
        head = memoryview(bytearray(4))
        recv_exact(sock, head, 4)
        body = memoryview(bytearray(_I32.unpack_from(head)[0]))
        recv_exact(sock, body, len(body))
    resp = ListOffsetsResponse.decode(bytes(body), version=version, header=True)
    p = resp.topics[0].partitions[0]
    return p.error_code, p.offset
