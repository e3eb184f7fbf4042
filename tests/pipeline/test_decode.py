"""Direct-mode record decoding against protocol.records.iter_records (kafka-python's decoder): every codec, null
keys/values, headers, LogAppendTime, control batches and [lo, hi) cuts inside batches."""
from __future__ import annotations

import pytest

from pipeline.decode import Columns, CorruptSegmentError, decode_batch
from protocol.records import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    BatchHeader,
    build_batch,
    compute_crc,
    iter_batches,
    iter_records,
    set_log_append_time,
)


def _log() -> bytes:
    out = b""
    off = 0
    for codec in (NONE, GZIP, SNAPPY, LZ4, ZSTD):
        recs = [(b"k%d" % i if i % 3 else None, (b"v" * 100 + b"%d" % i) if i % 5 else None,
                 [("h", b"x"), ("empty", None)] if i % 2 else [], 1_000 + i * 7) for i in range(40)]
        out += build_batch(recs, base_offset=off, compression=codec, producer_id=7, producer_epoch=0,
                           base_sequence=off)
        off += 40
    appended = bytearray(build_batch([b"a%d" % i for i in range(10)], base_offset=off, timestamp=5))
    set_log_append_time(appended, 0, 99_999)
    out += bytes(appended)
    # a transaction marker (control batch): never returned to consumers
    control = bytearray(build_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], base_offset=off + 10,
                                    is_transactional=True, producer_id=7, producer_epoch=0))
    attrs = int.from_bytes(control[21:23], "big") | 0x20
    control[21:23] = attrs.to_bytes(2, "big")
    control[17:21] = compute_crc(control, 0, len(control)).to_bytes(4, "big")
    return out + bytes(control)


def _expected(buf: bytes, lo: int, hi: int) -> list[tuple]:
    out = []
    for pos, h in iter_batches(buf):
        if h.is_control:
            continue
        for r in iter_records(buf, pos):
            if lo <= r.offset < hi:
                ts = h.max_timestamp if h.timestamp_type == 1 else r.timestamp
                out.append((r.key, r.value, r.offset, ts, h.timestamp_type, [tuple(x) for x in r.headers] or None))
    return out


@pytest.mark.parametrize("lo, hi", [(0, 1 << 62), (13, 187), (39, 41), (200, 1 << 62), (0, 0)])
def test_decode_matches_the_reference_decoder(lo, hi):
    buf = _log()
    cols = Columns(with_headers=True)
    for pos, h in iter_batches(buf):
        decode_batch(buf, pos, h, lo, hi, cols)
    got = list(zip(cols.keys, cols.values, cols.offsets, cols.timestamps, cols.timestamp_types,
                   [[tuple(x) for x in hs] if hs else None for hs in cols.headers]))
    assert got == _expected(buf, lo, hi)
    if hi > 205:
        assert [t for t in cols.timestamp_types if t == 1] == [1] * 10      # LogAppendTime batch
        assert max(cols.offsets) == 209                                    # the control batch at 210 is skipped


def test_truncated_records_section_is_reported():
    batch = bytearray(build_batch([b"x" * 50 for _ in range(3)]))
    h = BatchHeader(bytes(batch), 0)
    cut = bytes(batch[:-40])
    with pytest.raises(CorruptSegmentError):
        decode_batch(cut, 0, h, 0, 10, Columns(False))
