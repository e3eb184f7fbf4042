"""Record batches for the fuzzer: valid ones (kafka-python's producer encoder) and hand-made bad ones.

Bad batches keep everything consistent except the one thing under test, so each reaches the check it targets:
a lying record count gets a correct CRC, a garbage record section a correct length and CRC, a bomb a valid header
around a payload that inflates to ``bomb_bytes``. The magic-v2 layout (61-byte header, CRC32C from the
attributes to the end) is Kafka's (DefaultRecordBatch).
"""

from __future__ import annotations

import functools
import random
import struct
import zlib
from typing import Any

import crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder

HEADER = struct.Struct(">qiibIhiqqqhii")  # baseOffset .. recordsCount
# Record timestamps are fixed so that an input is the same bytes whenever it is generated (2026-01-01T00:00Z; in the
# past, as Kafka's message.timestamp.after.max.ms wants).
TIMESTAMP = 1_767_225_600_000
CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


# -- valid -------------------------------------------------------------------------------------------------------
def valid_batch(rnd: random.Random, codec: int = 0, n: int | None = None, keyed: bool = True) -> bytes:
    """A batch as a stock producer writes it: 1-5 records with keys, values and headers."""
    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    now = TIMESTAMP
    for i in range(n if n is not None else rnd.randrange(1, 6)):
        key = f"fz-key-{rnd.randrange(100)}".encode() if keyed or rnd.random() < 0.5 else None
        value = rnd.randbytes(rnd.choice((0, 10, 100, 1000)))
        headers = [(f"h{j}", rnd.randbytes(4)) for j in range(rnd.randrange(0, 3))]
        b.append(i, timestamp=now, key=key, value=value, headers=headers)
    return bytes(b.build())


def valid_records(rnd: random.Random, zstd: bool = True) -> bytes:
    codec = rnd.choice((0, 0, 1, 2, 3, 4) if zstd else (0, 0, 1, 2, 3))
    return valid_batch(rnd, codec)


def consumer_protocol_bytes(rnd: random.Random, ctx: Any) -> bytes:
    """A ConsumerProtocol subscription or assignment (v0), or a few random bytes."""
    topic = ctx.topic(rnd).encode()
    kind = rnd.randrange(3)
    if kind == 0:
        return struct.pack(">hih", 0, 1, len(topic)) + topic + struct.pack(">i", 0)
    if kind == 1:
        return struct.pack(">hih", 0, 1, len(topic)) + topic + struct.pack(">iii", 1, 0, 0)
    return rnd.randbytes(rnd.randrange(0, 16))


# -- hand-made ---------------------------------------------------------------------------------------------------
def varint(v: int) -> bytes:
    """Kafka's zigzag varint/varlong."""
    z = (v << 1) ^ (v >> 63)
    z &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def record(offset_delta: int, key: bytes | None, value: bytes | None, ts_delta: int = 0) -> bytes:
    body = b"\x00" + varint(ts_delta) + varint(offset_delta)
    body += varint(-1) if key is None else varint(len(key)) + key
    body += varint(-1) if value is None else varint(len(value)) + value
    body += varint(0)  # no headers
    return varint(len(body)) + body


def raw_batch(
    records: bytes,
    count: int,
    *,
    attributes: int = 0,
    last_offset_delta: int | None = None,
    magic: int = 2,
    base_ts: int | None = None,
    fix_crc: bool = True,
    length_delta: int = 0,
) -> bytes:
    """A batch with the given records section and header fields; CRC computed unless ``fix_crc`` is False."""
    ts = TIMESTAMP if base_ts is None else base_ts
    lod = count - 1 if last_offset_delta is None else last_offset_delta
    length = HEADER.size - 12 + len(records) + length_delta
    head = HEADER.pack(0, length, -1, magic, 0, attributes, lod, ts, ts, -1, -1, -1, count)
    buf = bytearray(head + records)
    crc = crc32c.crc32c(bytes(buf[21:])) if fix_crc else 0xDEADBEEF
    struct.pack_into(">I", buf, 17, crc)
    return bytes(buf)


def refresh_crc(batch: bytes) -> bytes:
    buf = bytearray(batch)
    if len(buf) >= 21:
        struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


def compress(codec: int, data: bytes) -> bytes:
    from kafka import codec as kc

    return {1: kc.gzip_encode, 2: kc.snappy_encode, 3: kc.lz4_encode, 4: kc.zstd_encode}[codec](data)


@functools.lru_cache(maxsize=16)
def bomb_payload(codec: int, inflated: int, kind: str) -> bytes:
    """A compressed stream that inflates to ``inflated`` bytes of zeros (kind "zeros") or of one small record
    repeated (kind "records"), built in chunks so the fuzzer never holds the inflated bytes."""
    chunk_len = 1 << 20
    if kind == "records":
        rec = record(0, b"k", bytes(100))
        unit = rec * (chunk_len // len(rec))
    else:
        unit = bytes(chunk_len)
    chunks = max(1, inflated // len(unit))
    if codec == 1:
        co = zlib.compressobj(1, zlib.DEFLATED, 31)
        return b"".join([co.compress(unit) for _ in range(chunks)] + [co.flush()])
    if codec == 4:
        import zstandard

        zc = zstandard.ZstdCompressor(level=1).compressobj()
        return b"".join([zc.compress(unit) for _ in range(chunks)] + [zc.flush()])
    if codec == 3:
        import lz4.frame  # type: ignore[import-untyped]

        lc = lz4.frame.LZ4FrameCompressor(block_linked=False)
        return lc.begin() + b"".join(lc.compress(unit) for _ in range(chunks)) + lc.flush()
    if codec == 2:  # xerial framing: magic header, then (length, raw snappy block) pairs
        import snappy

        block = snappy.compress(unit[: 32 * 1024])
        framed = struct.pack(">i", len(block)) + block
        head = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
        return head + framed * max(1, inflated // (32 * 1024))
    raise ValueError(codec)


def bad_batch(rnd: random.Random, bomb_bytes: int) -> tuple[str, bytes]:
    """One malformed batch and a short name of what is wrong with it."""
    kind = rnd.choice(
        (
            "bad-crc",
            "bad-magic",
            "count-lie",
            "length-lie",
            "truncated",
            "garbage-records",
            "short-records",
            "offset-deltas",
            "codec-5-7",
            "flagged-not-compressed",
            "corrupt-compressed",
            "bomb",
            "bomb",
            "two-batches",
            "timestamp",
            "keyless",
            "control-flag",
        )
    )
    codec = rnd.choice((1, 2, 3, 4))
    recs = b"".join(record(i, f"k{i}".encode(), rnd.randbytes(20)) for i in range(3))
    if kind == "bad-crc":
        return kind, raw_batch(recs, 3, fix_crc=False)
    if kind == "bad-magic":
        return kind, raw_batch(recs, 3, magic=rnd.choice((0, 1, 3, 0x7F, -1)), fix_crc=rnd.random() < 0.7)
    if kind == "count-lie":
        return kind, raw_batch(recs, rnd.choice((0, 1, 2, 4, 2**31 - 1, -1, 1 << 20)))
    if kind == "length-lie":
        return kind, raw_batch(recs, 3, length_delta=rnd.choice((-60, -1, 1, 1000, 2**30)))
    if kind == "truncated":
        b = raw_batch(recs, 3)
        return kind, b[: rnd.randrange(1, len(b))]
    if kind == "garbage-records":
        return kind, raw_batch(rnd.randbytes(rnd.randrange(1, 200)), rnd.randrange(1, 4))
    if kind == "short-records":
        return kind, raw_batch(recs[: rnd.randrange(1, len(recs))], 3)
    if kind == "offset-deltas":
        deltas = rnd.choice(((0, 0, 0), (2, 1, 0), (0, 5, 9), (-1, 0, 1)))
        r = b"".join(record(d, b"k", b"v") for d in deltas)
        return kind, raw_batch(r, 3, last_offset_delta=rnd.choice((2, max(deltas), 0)))
    if kind == "codec-5-7":
        return kind, raw_batch(recs, 3, attributes=rnd.choice((5, 6, 7)))
    if kind == "flagged-not-compressed":
        return kind, raw_batch(recs, 3, attributes=codec)
    if kind == "corrupt-compressed":
        payload = bytearray(compress(codec, recs))
        for _ in range(rnd.randrange(1, 4)):
            payload[rnd.randrange(len(payload))] ^= 1 << rnd.randrange(8)
        return f"{kind}-{CODECS[codec]}", raw_batch(bytes(payload), 3, attributes=codec)
    if kind == "bomb":
        content = rnd.choice(("zeros", "records"))
        inflated = bomb_bytes if codec != 2 else min(bomb_bytes, 64 << 20)
        bomb = bomb_payload(codec, inflated, content)
        count = rnd.choice((1, 3, 2**31 - 1))
        return f"bomb-{CODECS[codec]}-{content}", raw_batch(bomb, count, attributes=codec)
    if kind == "two-batches":
        return kind, raw_batch(recs, 3) + raw_batch(recs, 3)
    if kind == "timestamp":
        ts = rnd.choice((-5, 0, 2**62, -(2**63)))
        return kind, raw_batch(recs, 3, base_ts=ts)
    if kind == "keyless":
        r = b"".join(record(i, None, b"v") for i in range(3))
        return kind, raw_batch(r, 3)
    # control-flag: a control batch (and transactional) from a client, which Kafka refuses
    return kind, raw_batch(recs, 3, attributes=0x30)
