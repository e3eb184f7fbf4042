"""Direct mode's chunked reads of one remote segment (strata.pipeline.reading) against LocalTieredStorage, without
Spark: batches cut by chunk ends (inside a batch's length field too, and batches longer than a chunk), compressed
batches, [lo, hi) windows, read buffers reused from chunk to chunk while earlier record batches are still held, and
segments that end inside a batch."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest

from strata.pipeline.decode import CorruptSegmentError
from strata.pipeline.options import parse_source_options
from strata.pipeline.planning import OffsetRange, Piece
from strata.pipeline.reading import _buffers, complete_straddler, read_range
from strata.pipeline.source import _arrow_schema, source_schema
from strata.protocol.records import GZIP, LZ4, NONE, SNAPPY, ZSTD, build_batch, iter_batches, iter_records
from strata.remote.local_tiered import LocalTieredStorage
from strata.remote.metadata import LogSegmentData, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from strata.storage.segment import LogSegment
from tests.support.s3_servers import run

MIN_CHUNK = 64 * 1024  # direct.chunkBytes' smallest value
TIP = TopicIdPartition(uuid.UUID(int=0xABCDEF), "chunks", 0)


def _write_log(dir: Path) -> tuple[Path, Path, Path, Path, int]:
    """A closed segment of batches of uneven sizes: a few records to a few hundred, values up to 3 KiB, two single
    records of 150 KiB (longer than two small chunks), every codec, headers on some records."""
    rnd = random.Random(11)
    dir.mkdir(parents=True)
    seg = LogSegment(dir, 0, index_interval_bytes=4096)
    offset = 0
    codecs = [NONE, NONE, NONE, GZIP, SNAPPY, LZ4, ZSTD]
    for b in range(120):
        recs: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]]
        if b in (30, 77):
            recs = [(b"big-%d" % b, rnd.randbytes(150 * 1024), [("h", b"big")], 1_000 + offset)]
        else:
            recs = [
                (
                    b"k%d" % (offset + i) if i % 7 else None,
                    (b"v%d-" % (offset + i)) * rnd.randrange(1, 300) if i % 11 else None,
                    [("n", b"%d" % i), ("none", None)] if i % 3 == 0 else [],
                    1_000 + offset + i,
                )
                for i in range(rnd.randrange(1, 60))
            ]
        batch = build_batch(recs, base_offset=offset, compression=codecs[b % len(codecs)], timestamp=1_000)
        last = offset + len(recs) - 1
        seg.append(batch, [(0, len(batch), last, 1_000 + last)], last + 1)
        offset = last + 1
    seg.on_become_inactive()
    seg.flush()
    log, oi, ti = seg.log_path, seg.offset_index.path, seg.time_index.path
    seg.close()
    snap = dir / f"{offset:020d}.snapshot"
    snap.write_bytes(b"snapshot")
    return log, oi, ti, snap, offset


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """(rsm dir, segment metadata, the .log bytes) of the segment copied into LocalTieredStorage."""
    tmp = tmp_path_factory.mktemp("direct-chunks")
    log, oi, ti, snap, next_offset = _write_log(tmp / "local")
    data = log.read_bytes()
    md = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TIP, uuid.uuid4()),
        0,
        next_offset - 1,
        1_000 + next_offset,
        broker_id=0,
        event_timestamp_ms=0,
        segment_size_in_bytes=len(data),
        segment_leader_epochs={0: 0},
    )

    async def copy():
        async with LocalTieredStorage.from_config({"dir": str(tmp / "rsm")}) as rsm:
            await rsm.copy_log_segment_data(md, LogSegmentData(log, oi, ti, None, snap, b"0\n1\n0 0\n"))

    run(copy)
    return tmp / "rsm", md, data


def _expected(data: bytes, lo: int, hi: int) -> list[tuple]:
    out = []
    for pos, _h in iter_batches(data):
        for r in iter_records(data, pos):
            if lo <= r.offset < hi:
                out.append((r.key, r.value, r.offset, r.timestamp, [tuple(x) for x in r.headers] or None))
    return out


def _read(rsm_dir: Path, md, lo: int, hi: int, chunk: int, concurrency: int = 3) -> list[tuple]:
    opts = parse_source_options(
        {
            "kafka.bootstrap.servers": "127.0.0.1:1",
            "subscribe": "chunks",
            "read.mode": "direct",
            "rsm.class.name": "local",
            "rsm.config.dir": str(rsm_dir),
            "includeHeaders": "true",
            "direct.chunkBytes": str(chunk),
            "direct.fetchConcurrency": str(concurrency),
        },
        streaming=False,
    )
    schema = _arrow_schema(source_schema(True))
    batches = list(read_range(opts, OffsetRange("chunks", 0, lo, hi, (Piece(lo, hi, md),)), schema))
    # compared only after the whole read: a record batch that still pointed into a read buffer would by now show
    # the bytes of a later chunk
    out = []
    for rb in batches:
        d = rb.to_pydict()
        for k, v, o, ts, hs in zip(d["key"], d["value"], d["offset"], d["timestamp"], d["headers"]):
            out.append((k, v, o, round(ts.timestamp() * 1000), [(h["key"], h["value"]) for h in hs or ()] or None))
    return out


def _cut_inside_a_length_field(data: bytes) -> int:
    """A chunk size (>= the smallest) whose first cut falls 5 bytes into a batch: inside its length field."""
    return next(pos for pos, _h in iter_batches(data) if pos >= MIN_CHUNK) + 5


@pytest.mark.parametrize("chunk", [MIN_CHUNK, MIN_CHUNK + 5, 100_003, "length-field", 4 << 20])
def test_whole_segment_in_chunks_equals_the_reference_decoder(stored, chunk):
    rsm_dir, md, data = stored
    if chunk == "length-field":
        chunk = _cut_inside_a_length_field(data)
    assert len(data) > 6 * MIN_CHUNK
    got = _read(rsm_dir, md, 0, md.end_offset + 1, chunk)
    assert got == _expected(data, 0, md.end_offset + 1)
    assert _buffers._free.get(chunk)  # the read buffers went back to the pool for the next read


@pytest.mark.parametrize("chunk", [MIN_CHUNK, 100_003])
def test_windows_inside_the_segment(stored, chunk):
    rsm_dir, md, data = stored
    offsets = [r.offset for pos, _h in iter_batches(data) for r in iter_records(data, pos)]
    rnd = random.Random(3)
    for _ in range(6):
        lo, hi = sorted(rnd.sample(offsets, 2))
        assert _read(rsm_dir, md, lo, hi, chunk, concurrency=1) == _expected(data, lo, hi), (lo, hi)


def _store(
    rsm_dir: Path, tmp: Path, log_bytes: bytes, end_offset: int, max_ts: int, size: int | None = None
) -> RemoteLogSegmentMetadata:
    """``log_bytes`` stored as a segment of its own (empty indexes); its metadata says ``size`` bytes."""
    md = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TIP, uuid.uuid4()),
        0,
        end_offset,
        max_ts,
        broker_id=0,
        event_timestamp_ms=0,
        segment_size_in_bytes=len(log_bytes) if size is None else size,
        segment_leader_epochs={0: 0},
    )
    d = tmp / md.remote_log_segment_id.id_str
    d.mkdir()
    log = d / "00000000000000000000.log"
    log.write_bytes(log_bytes)
    empty = d / "empty.index"
    empty.write_bytes(b"")

    async def copy():
        async with LocalTieredStorage.from_config({"dir": str(rsm_dir)}) as rsm:
            await rsm.copy_log_segment_data(md, LogSegmentData(log, empty, empty, None, empty, b"0\n1\n0 0\n"))

    run(copy)
    return md


def test_a_segment_that_ends_inside_a_batch_is_reported(stored, tmp_path):
    rsm_dir, md, data = stored
    last = [pos for pos, _h in iter_batches(data)][-1]
    # cut inside the last batch's body: its length field says more than the segment holds
    cut = _store(rsm_dir, tmp_path, data[:-100], md.end_offset, md.max_timestamp_ms)
    with pytest.raises(CorruptSegmentError, match=f"batch at position {last} declares .* do not fit"):
        _read(rsm_dir, cut, 0, md.end_offset + 1, MIN_CHUNK)
    # cut before the length field is complete
    short = _store(rsm_dir, tmp_path, data[: last + 5], md.end_offset, md.max_timestamp_ms)
    with pytest.raises(CorruptSegmentError, match="ends inside a batch: 5 bytes"):
        _read(rsm_dir, short, 0, md.end_offset + 1, MIN_CHUNK)
    # metadata promising more bytes than the store holds
    longer = _store(rsm_dir, tmp_path, data[:-100], md.end_offset, md.max_timestamp_ms, size=len(data))
    with pytest.raises(CorruptSegmentError, match="returned"):
        _read(rsm_dir, longer, 0, md.end_offset + 1, MIN_CHUNK)


@pytest.mark.parametrize("length", [20, -5, 0x7FFF0000])
def test_a_corrupt_length_field_in_a_cut_batch_fails_the_read(stored, tmp_path, length):
    """The first batch a chunk end cuts has a length below a batch header's, negative, or far past the segment's
    end: the read fails there, naming the batch, instead of skipping it or carrying the rest of the segment."""
    rsm_dir, md, data = stored
    pos = next(p for p, _h in iter_batches(data) if p >= MIN_CHUNK)
    bad = bytearray(data)
    bad[pos + 8 : pos + 12] = length.to_bytes(4, "big", signed=True)
    m = _store(rsm_dir, tmp_path, bytes(bad), md.end_offset, md.max_timestamp_ms)
    with pytest.raises(CorruptSegmentError, match=f"batch at position {pos} declares {12 + length} bytes"):
        _read(rsm_dir, m, 0, md.end_offset + 1, pos + 5)


def test_reads_a_window_ends_early_are_not_given_back_to_the_pool(stored, monkeypatch):
    """A read that reaches ``hi`` in its first chunk cancels the reads in flight; their buffers are dropped, not
    pooled (the store may still be writing into them). Only the decoded chunk's buffer is given back."""
    from strata.pipeline import reading

    rsm_dir, md, data = stored
    pool = reading.BufferPool()
    monkeypatch.setattr(reading, "_buffers", pool)
    got = _read(rsm_dir, md, 0, 5, MIN_CHUNK, concurrency=4)
    assert got == _expected(data, 0, 5)
    assert [len(b) for b in pool._free[MIN_CHUNK]] == [MIN_CHUNK]


def test_buffer_pool_keeps_a_bounded_amount_and_makes_room_for_a_new_size():
    from strata.pipeline.reading import BufferPool

    pool = BufferPool(keep_bytes=10)
    a, b, c = pool.get(4), pool.get(4), pool.get(4)
    for buf in (a, b, c):
        pool.put(buf)
    assert pool.get(4) is b and pool.get(4) is a  # two of 4 bytes fit in 10; the third was dropped
    pool.put(a)
    pool.put(b)
    six = bytearray(6)
    pool.put(six)  # a new size: one 4-byte buffer gives way
    assert pool.get(6) is six and pool.get(4) is a
    fresh = pool.get(4)
    assert fresh is not a and fresh is not b


def test_complete_straddler():
    batch = build_batch([b"x" * 100], base_offset=0)
    after = b"NEXT"
    # the cut falls inside the length field, then inside the body, then exactly at the end
    for cut in (3, 11, 12, 40, len(batch) - 1):
        carry = bytearray(batch[:cut])
        rest, whole = complete_straddler(carry, memoryview(batch[cut:] + after))
        assert (carry, bytes(rest), whole) == (batch, after, True), cut
    # chunks too short to finish it: everything is carried on
    for have, more in ((5, 4), (20, 10)):
        carry = bytearray(batch[:have])
        rest, whole = complete_straddler(carry, memoryview(batch[have : have + more]))
        assert (carry, bytes(rest), whole) == (batch[: have + more], b"", False)
