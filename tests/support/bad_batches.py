"""Hand-made magic-v2 batches with a consistent header and a valid CRC around a bad record section: what the
protocol fuzzer of issue 21 produced. Each builder returns the whole batch, ready for a Produce."""

from __future__ import annotations

import struct
import time
import zlib

import zstandard

from strata.protocol.compression import compress
from strata.protocol.records import HEADER, HEADER_SIZE, LOG_OVERHEAD, compute_crc
from strata.protocol.wire import write_varint, write_varlong


def record(offset_delta: int, key: bytes | None, value: bytes | None, ts_delta: int = 0, headers=()) -> bytes:
    """One record as DefaultRecord.writeTo lays it out (length-prefixed)."""
    body = bytearray(b"\x00")
    write_varlong(body, ts_delta)
    write_varint(body, offset_delta)
    for blob in (key, value):
        write_varint(body, -1 if blob is None else len(blob))
        body += blob or b""
    write_varint(body, len(headers))
    for hk, hv in headers:
        write_varint(body, len(hk))
        body += hk
        write_varint(body, -1 if hv is None else len(hv))
        body += hv or b""
    out = bytearray()
    write_varint(out, len(body))
    return bytes(out + body)


def frame(
    section: bytes,
    count: int,
    *,
    codec: int = 0,
    last_offset_delta: int | None = None,
    base_ts: int | None = None,
    max_ts: int | None = None,
) -> bytes:
    """A batch around `section` (already compressed when `codec` says so) with a correct length and CRC."""
    now = int(time.time() * 1000) if base_ts is None else base_ts
    out = bytearray(HEADER_SIZE + len(section))
    HEADER.pack_into(
        out,
        0,
        0,
        len(out) - LOG_OVERHEAD,
        -1,
        2,
        0,
        codec,
        count - 1 if last_offset_delta is None else last_offset_delta,
        now,
        now if max_ts is None else max_ts,
        -1,
        -1,
        -1,
        count,
    )
    out[HEADER_SIZE:] = section
    struct.pack_into(">I", out, 17, compute_crc(out, 0, len(out)))
    return bytes(out)


def records_batch(recs: list[bytes], codec: int = 0, **kw) -> bytes:
    section = b"".join(recs)
    return frame(compress(codec, section) if codec else section, len(recs), codec=codec, **kw)


def gzip_bomb(inflated: int, key: bytes | None = b"k") -> bytes:
    """One record whose value is `inflated` (whole MiB) zero bytes, gzip-compressed (~1 MB per GiB)."""
    return _bomb(1, key, inflated)


def _bomb_section_prefix(key: bytes | None, value_len: int) -> bytes:
    body = bytearray(b"\x00")
    write_varlong(body, 0)
    write_varint(body, 0)
    write_varint(body, -1 if key is None else len(key))
    body += key or b""
    write_varint(body, value_len)
    prefix = bytearray()
    write_varint(prefix, len(body) + value_len + 1)  # + the header count after the value
    return bytes(prefix + body)


def _bomb(codec: int, key: bytes | None, inflated: int) -> bytes:
    assert inflated % (1 << 20) == 0
    prefix = _bomb_section_prefix(key, inflated)
    zeros = bytes(1 << 20)
    if codec == 1:
        # raw deflate: the 1 MiB of zeros compressed once after a full flush (no back-references across it) and
        # repeated, then the gzip frame around it with the CRC of the whole inflated stream
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        head = c.compress(prefix) + c.flush(zlib.Z_FULL_FLUSH)
        block = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
        tail = c.compress(b"\x00") + c.flush()  # header count 0
        crc = zlib.crc32(prefix)
        for _ in range(inflated >> 20):
            crc = zlib.crc32(zeros, crc)
        crc = zlib.crc32(b"\x00", crc)
        size = (len(prefix) + inflated + 1) & 0xFFFFFFFF
        gz_head = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
        section = gz_head + head + block * (inflated >> 20) + tail + struct.pack("<II", crc, size)
    else:
        cz = zstandard.ZstdCompressor(level=3).compressobj()
        parts = [cz.compress(prefix)]
        for _ in range(inflated >> 20):
            parts.append(cz.compress(zeros))
        parts.append(cz.compress(b"\x00"))
        parts.append(cz.flush())
        section = b"".join(parts)
    return frame(section, 1, codec=codec)


def zstd_bomb(inflated: int, key: bytes | None = b"k") -> bytes:
    """One record whose value is `inflated` zero bytes, zstd-compressed (~33 KB per GiB)."""
    return _bomb(4, key, inflated)
