"""Direct-mode record decoding against strata.protocol.records.iter_records (kafka-python's decoder): every codec, null
keys/values, headers, LogAppendTime, control batches and [lo, hi) cuts inside batches."""

from __future__ import annotations

import pytest

from strata.pipeline.decode import CorruptSegmentError, decode_batches
from strata.protocol.records import (
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
        recs = [
            (
                b"k%d" % i if i % 3 else None,
                (b"v" * 100 + b"%d" % i) if i % 5 else None,
                [("h", b"x"), ("empty", None)] if i % 2 else [],
                1_000 + i * 7,
            )
            for i in range(40)
        ]
        out += build_batch(recs, base_offset=off, compression=codec, producer_id=7, producer_epoch=0, base_sequence=off)
        off += 40
    appended = bytearray(build_batch([b"a%d" % i for i in range(10)], base_offset=off, timestamp=5))
    set_log_append_time(appended, 0, 99_999)
    out += bytes(appended)
    # a transaction marker (control batch): never returned to consumers
    control = bytearray(
        build_batch(
            [(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")],
            base_offset=off + 10,
            is_transactional=True,
            producer_id=7,
            producer_epoch=0,
        )
    )
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
    d = decode_batches(buf, list(iter_batches(buf)), lo, hi, with_headers=True)
    expected = _expected(buf, lo, hi)
    if not expected:
        assert d is None
        return
    got = list(
        zip(
            d.keys.to_pylist(),
            d.values.to_pylist(),
            d.offsets.tolist(),
            d.timestamps.tolist(),
            d.timestamp_types.tolist(),
            [[tuple(x) for x in hs] if hs else None for hs in d.headers],
        )
    )
    assert got == expected
    if hi > 205:
        assert [t for t in d.timestamp_types.tolist() if t == 1] == [1] * 10  # LogAppendTime batch
        assert max(d.offsets.tolist()) == 209  # the control batch at 210 is skipped


def test_batches_decoded_one_by_one_equal_batches_decoded_together():
    """Records of several batches are decoded in one pass; splitting the pass differently changes nothing."""
    buf = _log()
    batches = list(iter_batches(buf))
    whole = decode_batches(buf, batches, 0, 1 << 62, with_headers=False)
    parts = [decode_batches(buf, [b], 0, 1 << 62, with_headers=False) for b in batches]
    parts = [p for p in parts if p is not None]
    assert whole.headers is None
    assert whole.values.to_pylist() == [v for p in parts for v in p.values.to_pylist()]
    assert whole.offsets.tolist() == [o for p in parts for o in p.offsets.tolist()] == list(range(210))


def test_long_varints_and_large_records():
    """Multi-byte length prefixes and deltas (records of 100 KiB, timestamps far from the base)."""
    recs = [(b"k" * 300, bytes([i]) * (100_000 + i), [], 10**12 + i * 10**9) for i in range(5)]
    buf = build_batch(recs, base_offset=1000)
    d = decode_batches(buf, list(iter_batches(buf)), 0, 1 << 62, with_headers=True)
    assert d.offsets.tolist() == list(range(1000, 1005))
    assert d.timestamps.tolist() == [10**12 + i * 10**9 for i in range(5)]
    assert d.values.to_pylist() == [bytes([i]) * (100_000 + i) for i in range(5)]
    assert d.keys.to_pylist() == [b"k" * 300] * 5
    assert d.headers == [None] * 5


def test_truncated_records_section_is_reported():
    batch = bytearray(build_batch([b"x" * 50 for _ in range(3)]))
    h = BatchHeader(bytes(batch), 0)
    cut = bytes(batch[:-40])
    with pytest.raises(CorruptSegmentError):
        decode_batches(cut, [(0, h)], 0, 10, False)


def test_a_record_that_overruns_its_length_prefix_is_reported():
    batch = bytearray(build_batch([b"x" * 50 for _ in range(3)]))
    batch[-52] += 2  # the last record's value length (varint 100 -> 102): past its record's end
    with pytest.raises(CorruptSegmentError):
        decode_batches(bytes(batch), list(iter_batches(bytes(batch))), 0, 10, False)


@pytest.mark.parametrize("pattern", ["fixed", "runs", "random", "alternating", "tiny", "one"])
def test_runs_of_equal_sizes_are_located_where_the_loop_finds_them(pattern):
    """The NumPy run check (records of one size located together) against the record-by-record loop."""
    import random

    import numpy as np

    from strata.pipeline.decode import _locate, _record_starts

    rnd = random.Random(pattern)
    n = {"tiny": 3, "one": 1}.get(pattern, 3000)
    sizes = {
        "fixed": lambda i: 100,
        "runs": lambda i: 100 + (i // 700) * 13,
        "random": lambda i: rnd.randint(0, 300),
        "alternating": lambda i: 50 + i % 2,
        "tiny": lambda i: 5,
        "one": lambda i: 10,
    }[pattern]
    recs = [(None if i % 11 == 0 else b"k", b"v" * sizes(i), [], 1_000 + (i % 90)) for i in range(n)]
    buf = build_batch(recs, base_offset=0)
    ((pos, h),) = list(iter_batches(buf))
    starts, ends = [], []
    _record_starts(buf, pos + 61, pos + h.size, n, 0, 5, starts, ends)
    got_starts, got_ends = _locate(np, buf, np.frombuffer(buf, dtype=np.uint8), pos + 61, pos + h.size, n, 0, 5)
    assert got_starts.tolist() == starts
    assert got_ends.tolist() == ends
    with pytest.raises(CorruptSegmentError):  # one record fewer than the section holds
        _locate(np, buf, np.frombuffer(buf, dtype=np.uint8), pos + 61, pos + h.size, n - 1, 0, 0)


def test_an_executor_process_keeps_one_remote_storage_per_configuration(tmp_path):
    """Tasks in one Python worker share the RemoteStorageManager (building an S3 client costs ~0.1 s of CPU);
    other rsm.config values get another one."""
    from strata.pipeline.options import parse_source_options
    from strata.pipeline.reading import shared_storage

    def opts(directory):
        return parse_source_options(
            {
                "kafka.bootstrap.servers": "127.0.0.1:1",
                "subscribe": "t",
                "read.mode": "direct",
                "rsm.class.name": "local",
                "rsm.config.dir": str(directory),
            },
            streaming=False,
        )

    a, b = shared_storage(opts(tmp_path / "a")), shared_storage(opts(tmp_path / "a"))
    c = shared_storage(opts(tmp_path / "c"))
    assert a is b
    assert c is not a
    assert a.call(_probe(a.rsm)) == "ok"  # its event loop thread is alive for the next task


async def _probe(rsm):
    return "ok" if rsm is not None else "no rsm"


@pytest.mark.parametrize("codecs", ["uncompressed", "all"])
def test_decoded_records_do_not_point_into_the_buffer(codecs):
    """Direct mode reuses its read buffers: nothing decoded may still reference the bytes it came from (records of
    uncompressed batches are decoded in place)."""
    log = _log()
    if codecs == "uncompressed":
        pos, h = next(iter_batches(log))
        log = log[pos : pos + h.size]
    buf = bytearray(log)
    expected = _expected(log, 0, 1 << 62)
    d = decode_batches(memoryview(buf), list(iter_batches(buf)), 0, 1 << 62, with_headers=True)
    buf[:] = b"\x00" * len(buf)
    got = list(
        zip(
            d.keys.to_pylist(),
            d.values.to_pylist(),
            d.offsets.tolist(),
            d.timestamps.tolist(),
            d.timestamp_types.tolist(),
            [[tuple(x) for x in hs] if hs else None for hs in d.headers],
        )
    )
    assert got == expected and any(hs for hs in d.headers)
