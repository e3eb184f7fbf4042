"""A Produce client that does no per-record work: broker-side produce cost without a client library in the way.

Each worker process opens one connection and sends the same pre-encoded Produce v9 request again and again: one
uncompressed batch per partition (``batch_records`` records of ``record_size`` random bytes, no idempotence, so the
broker appends every copy at new offsets), just under 1 MB per request with the defaults (120 records of 1 KiB
per partition, 8 partitions): the frame size of the floor in ``bench/floor.py``, and below the 1 MiB above which
the broker decodes a request in a worker thread (librdkafka's requests stay under ``message.max.bytes`` too). Up
to ``inflight`` requests are outstanding (librdkafka's default is 5); each response is decoded only to check its
error codes. The client's CPU is small and constant per request, so the broker's CPU per
GiB is what differs between two brokers.
"""

from __future__ import annotations

import os
import socket
import struct
import time

from .rawfetch import recv_exact, worker_result

_I32 = struct.Struct(">i")
PRODUCE_VERSION = 9


def encode_produce(topic: str, partitions: list[int], batch: bytes, acks: int, correlation_id: int) -> bytes:
    from kafka.protocol.producer import ProduceRequest

    P = ProduceRequest.TopicProduceData
    req = ProduceRequest[PRODUCE_VERSION](
        transactional_id=None,
        acks=acks,
        timeout_ms=30000,
        topic_data=[P(name=topic, partition_data=[P.PartitionProduceData(index=p, records=batch) for p in partitions])],
    )
    req.with_header(correlation_id=correlation_id, client_id="bench-rawproduce")
    return bytes(req.encode(header=True, framed=True))


def build_batch(records: int, record_size: int) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    ts = int(time.time() * 1000)
    value = os.urandom(record_size)
    for i in range(records):
        b.append(i, timestamp=ts, key=None, value=value, headers=[])
    return bytes(b.build())


def raw_produce_worker(cfg: dict, barrier, out) -> None:
    """Send ``cfg['requests']`` Produce requests to ``cfg['partitions']`` of ``cfg['topic']`` (bounded by
    ``time_cap``); reports the record bytes acknowledged and the measured window."""
    from kafka.protocol.producer import ProduceResponse

    with worker_result(cfg["worker"], barrier, out) as (res, stack):
        host, port = cfg["bootstrap"].rsplit(":", 1)
        sock = stack.enter_context(socket.create_connection((host, int(port)), timeout=60))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        batch = build_batch(cfg.get("batch_records", 120), cfg.get("record_size", 1024))
        parts = list(cfg["partitions"])
        frame = encode_produce(cfg["topic"], parts, batch, cfg.get("acks", 1), 0)
        per_request = len(batch) * len(parts)
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        head = memoryview(bytearray(4))

        def answer() -> int:
            recv_exact(sock, head, 4)
            (size,) = _I32.unpack_from(head)
            recv_exact(sock, view, size)
            resp = ProduceResponse.decode(bytes(view[:size]), version=PRODUCE_VERSION, header=True)
            return sum(1 for t in resp.responses for p in t.partition_responses if p.error_code)

        sock.sendall(frame)  # warm-up outside the clock (topic metadata, first segment)
        errors = answer()
        barrier.wait(timeout=120)
        start = time.monotonic()
        deadline = start + cfg["time_cap"]
        sent = acked = 0
        total, inflight = cfg["requests"], cfg.get("inflight", 5)
        while acked < total:
            while sent < total and sent - acked < inflight and time.monotonic() < deadline:
                sock.sendall(frame)
                sent += 1
            if sent == acked:
                break
            errors += answer()
            acked += 1
        end = time.monotonic()
        res.update(start=start, end=end, requests=acked, bytes=acked * per_request, errors=errors)
