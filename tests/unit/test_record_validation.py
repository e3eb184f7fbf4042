"""A producer's batch is validated as Kafka's LogValidator does before anything is appended (issue 21): the
record section must hold exactly recordsCount well-formed records with offset deltas 0..n-1; compressed sections
must decompress to exactly those records, inflated in bounded pieces; per-record failures (keyless records on a
compacted topic, timestamps out of range) are listed with their batch index. Each fuzzer case of the issue is
here, against UnifiedLog.append_as_leader."""

from __future__ import annotations

import os
import random
import time
import tracemalloc
import uuid
from pathlib import Path

import pytest

from strata.config.topic_config import default_log_config
from strata.protocol import record_validation as rv
from strata.protocol.compression import compress
from strata.protocol.errors import ErrorCode
from strata.protocol.record_validation import MIN_INFLATE_LIMIT, inflate_limit, scan_records
from strata.protocol.records import GZIP, LZ4, NONE, SNAPPY, ZSTD, RecordBatchError, build_batch, iter_records
from strata.storage.errors import StorageError
from strata.storage.log import UnifiedLog
from tests.support.bad_batches import frame, gzip_bomb, record, records_batch, zstd_bomb

NOW = 1_700_000_000_000


@pytest.fixture(autouse=True, params=["c", "python"])
def walk(request, monkeypatch):
    """Every test with the C record walk (protocol/_recwalk.c, when built) and with the Python one."""
    if request.param == "c":
        # part of the install (pip install -e . builds it with the machine's gcc): not built is a broken install
        assert rv._recwalk is not None, "the C record walk is not built (pip install -e . builds it)"
        monkeypatch.setattr(rv, "_walk", rv._walk_c)
    else:
        monkeypatch.setattr(rv, "_walk", rv._walk_py)
    return request.param


def open_log(tmp_path: Path, **cfg) -> UnifiedLog:
    cfg.setdefault("segment_bytes", 64 << 20)
    return UnifiedLog.open(tmp_path / "t-0", uuid.uuid4(), default_log_config(**cfg), needs_recovery=False)


def rejected(log: UnifiedLog, batch: bytes, **kw) -> StorageError:
    """Append `batch` expecting a rejection; check that nothing was written."""
    leo, size = log.log_end_offset, log.size_in_bytes
    with pytest.raises(StorageError) as ei:
        log.append_as_leader(batch, 0, **kw)
    assert (log.log_end_offset, log.size_in_bytes) == (leo, size)
    return ei.value


def good_records(n: int, keyed: bool = True) -> list[bytes]:
    return [record(i, b"k%d" % i if keyed else None, b"value-%d" % i) for i in range(n)]


# -- record sections that do not hold the records the header claims ------------------------------------------


def test_count_of_2_pow_31_minus_1_with_one_record(tmp_path):
    log = open_log(tmp_path)
    e = rejected(log, frame(good_records(1)[0], 0x7FFFFFFF))
    assert e.error_code == ErrorCode.INVALID_RECORD
    assert "premature EOF" in str(e)
    log.append_as_leader(records_batch(good_records(2)), 0)
    assert log.log_end_offset == 2


@pytest.mark.parametrize(
    "section",
    [
        pytest.param(os.urandom(200), id="garbage"),
        pytest.param(b"".join(good_records(3))[:-5], id="truncated"),
        pytest.param(b"".join(good_records(2)), id="short-of-count"),
        pytest.param(b"".join(good_records(3)) + b"\x00\x01", id="left-over-bytes"),
        pytest.param(b"".join(good_records(4)), id="more-records-than-count"),
        pytest.param(b"\x02" + b"\x00" * 20, id="record-too-short"),
        pytest.param(record(0, b"k", b"v")[:-1] + b"\x04" + b"\x02a" * 2, id="headers-beyond-record"),
    ],
)
def test_malformed_record_section_is_invalid_record(tmp_path, section):
    log = open_log(tmp_path)
    e = rejected(log, frame(section, 3))
    assert e.error_code == ErrorCode.INVALID_RECORD


def test_record_length_disagreeing_with_its_fields(tmp_path):
    r = bytearray(record(0, b"key", b"value"))
    r[0] += 2  # claims one more byte than its fields use
    log = open_log(tmp_path)
    e = rejected(log, frame(bytes(r) + b"\x00", 1))
    assert e.error_code == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("deltas", [(0, 2, 1), (1, 2, 3), (0, 0, 1), (0, 1, 5)])
def test_offset_deltas_must_be_0_to_n_minus_1(tmp_path, deltas):
    log = open_log(tmp_path)
    e = rejected(log, records_batch([record(d, b"k", b"v") for d in deltas]))
    assert e.error_code == ErrorCode.INVALID_RECORD
    assert "offset delta" in str(e)


def test_last_offset_delta_must_match_the_count(tmp_path):
    log = open_log(tmp_path)
    e = rejected(log, records_batch(good_records(3), last_offset_delta=5))
    assert e.error_code == ErrorCode.INVALID_RECORD


# -- compression -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_uncompressed_bytes_flagged_compressed_are_corrupt(tmp_path, codec):
    log = open_log(tmp_path)
    e = rejected(log, frame(b"".join(good_records(3)), 3, codec=codec))
    assert e.error_code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_truncated_compressed_section_is_corrupt(tmp_path, codec):
    from strata.protocol.compression import compress

    section = compress(codec, b"".join(good_records(50)))
    log = open_log(tmp_path)
    e = rejected(log, frame(section[:-6], 50, codec=codec))
    assert e.error_code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD)


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_compressed_section_must_inflate_to_exactly_the_records(tmp_path, codec):
    from strata.protocol.compression import compress

    log = open_log(tmp_path)
    more = compress(codec, b"".join(good_records(5)))
    assert rejected(log, frame(more, 4, codec=codec)).error_code == ErrorCode.INVALID_RECORD
    assert rejected(log, frame(more, 6, codec=codec)).error_code == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_ids_are_unsupported_compression_type(tmp_path, codec):
    log = open_log(tmp_path)
    e = rejected(log, frame(b"".join(good_records(2)), 2, codec=codec))
    assert e.error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


@pytest.mark.parametrize("codec", [NONE, GZIP, SNAPPY, LZ4, ZSTD])
def test_valid_batches_of_every_codec_are_appended(tmp_path, codec):
    log = open_log(tmp_path)
    values = [(b"k%d" % i, b"abc" * (i % 40), [("h", b"x")] if i % 7 == 0 else []) for i in range(300)]
    info = log.append_as_leader(build_batch(values, compression=codec), 0)
    assert (info.first_offset, info.last_offset) == (0, 299)
    data = log.read(0, 1 << 20).records
    assert [r.value for r in iter_records(data)] == [v for _, v, _ in values]


def test_gzip_bomb_to_a_compacted_topic_is_refused_by_the_bound(tmp_path):
    """The fuzzer's 1 MB gzip of 1,000 MiB took the broker to 2 GiB and 4.4 s: now the inflation bound stops it."""
    bomb = gzip_bomb(1000 << 20)
    assert len(bomb) < 1100 * 1024
    log = open_log(tmp_path, cleanup_policy="compact", max_message_bytes=2 << 20)
    tracemalloc.start()
    t = time.monotonic()
    try:
        e = rejected(log, bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert e.error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert f"{inflate_limit(2 << 20)}" in str(e)
    assert peak < 16 << 20, peak  # the bomb's one big value is skipped as it inflates, never gathered
    assert time.monotonic() - t < 30


def test_zstd_bomb_in_the_log_then_list_offsets_by_timestamp(tmp_path):
    """A 33 KB zstd batch took ListOffsets by timestamp to 3.2 GiB: stored batches are inflated under the bound
    too (here one a leader would refuse, written as a follower: followers trust their leader)."""
    bomb = zstd_bomb(1000 << 20)
    assert len(bomb) < 40 * 1024
    log = open_log(tmp_path)
    log.append_as_follower(bomb)
    tracemalloc.start()
    try:
        with pytest.raises(RecordBatchError) as ei:
            log.fetch_offset_by_timestamp(1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert ei.value.error_code == ErrorCode.MESSAGE_TOO_LARGE
    # decoding gathers values (iter_records returns them): bounded by the limit, not by the bomb
    assert peak < 1.25 * MIN_INFLATE_LIMIT + (16 << 20), peak
    # and a leader refuses the same batch
    assert rejected(open_log(tmp_path / "leader"), bomb).error_code == ErrorCode.MESSAGE_TOO_LARGE


def test_scan_walks_records_cut_across_inflated_pieces():
    big = [record(i, b"k", os.urandom(100_000 + i)) for i in range(12)]  # > the 256 KiB pieces
    b = records_batch(big, codec=LZ4)

    scan = scan_records(b, 0, len(b), LZ4, 12, want_keyless=True, limit=1 << 26)
    assert scan.keyless == []


@pytest.mark.parametrize("codec", [GZIP, LZ4, ZSTD])
def test_records_larger_than_the_pieces_are_walked_without_gathering_them(tmp_path, codec):
    """Values of several MiB are skipped as they inflate; their header sections are still checked."""
    big = [
        record(0, None, os.urandom(64) * (3 << 14), headers=[(b"h", b"v")]),  # 3 MiB, keyless
        record(1, b"k", b"small"),
        record(2, b"k2", os.urandom(64) * (2 << 14), ts_delta=900),
    ]
    b = records_batch(big, codec=codec)
    scan = scan_records(b, 0, len(b), codec, 3, want_keyless=True, limit=1 << 26)
    assert (scan.keyless, scan.min_ts_delta, scan.max_ts_delta) == ([0], 0, 900)
    log = open_log(tmp_path, max_message_bytes=8 << 20)
    assert log.append_as_leader(b, 0).last_offset == 2
    for name, section, count in (
        ("headers", big[0][:-5] + b"\x04" + big[0][-4:], 1),  # claims 2 headers, has 1
        ("offset-delta", record(1, b"k", os.urandom(64) * (3 << 14)), 1),
        ("ends-in-value", big[0][: len(big[0]) // 2], 1),
        ("count", b"".join(big), 4),
    ):
        e = rejected(log, frame(compress(codec, section), count, codec=codec))
        assert e.error_code == ErrorCode.INVALID_RECORD, name


# -- per-record errors (Produce v8+ record_errors) ------------------------------------------------------------


def test_keyless_records_on_a_compacted_topic_are_listed(tmp_path):
    log = open_log(tmp_path, cleanup_policy="compact")
    recs = [record(i, None if i in (1, 3) else b"k%d" % i, b"v") for i in range(5)]
    e = rejected(log, records_batch(recs))
    assert e.error_code == ErrorCode.INVALID_RECORD
    assert [i for i, _ in e.record_errors or []] == [1, 3]
    assert "Compacted topic cannot accept message without key in topic partition" in e.record_errors[0][1]
    assert str(e).startswith("One or more records have been rejected due to 2 record errors in total")
    log.append_as_leader(records_batch(good_records(5)), 0)
    assert log.log_end_offset == 5


@pytest.mark.parametrize("codec", [NONE, ZSTD])
def test_timestamps_out_of_range_are_listed_per_record(tmp_path, codec):
    log = open_log(tmp_path, message_timestamp_before_max_ms=1000, message_timestamp_after_max_ms=1000)
    recs = [record(0, b"a", b"v", ts_delta=0), record(1, b"b", b"v", ts_delta=-5000), record(2, b"c", b"v")]
    recs.append(record(3, b"d", b"v", ts_delta=9000))
    e = rejected(log, records_batch(recs, codec=codec, base_ts=NOW), now_ms=NOW)
    assert e.error_code == ErrorCode.INVALID_TIMESTAMP
    assert str(e) == "One or more records have been rejected due to invalid timestamp"
    assert [i for i, _ in e.record_errors or []] == [1, 3]
    assert e.record_errors[0][1].startswith(f"Timestamp {NOW - 5000} of message with offset 1 is out of range")


def test_producer_may_not_set_log_append_time_on_a_log_append_time_topic(tmp_path):
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    b = bytearray(records_batch(good_records(2)))
    from strata.protocol.records import set_log_append_time

    set_log_append_time(b, 0, NOW)
    e = rejected(log, bytes(b), now_ms=NOW)
    assert e.error_code == ErrorCode.INVALID_TIMESTAMP and len(e.record_errors or []) == 2


def test_max_timestamp_is_the_largest_record_timestamp(tmp_path):
    """As Kafka's leader: a header lying about maxTimestamp is rewritten (the time index and retention use it)."""
    log = open_log(tmp_path)
    recs = [record(0, b"a", b"v", ts_delta=0), record(1, b"b", b"v", ts_delta=700)]
    info = log.append_as_leader(records_batch(recs, base_ts=NOW, max_ts=NOW + 10**9), 0, now_ms=NOW)
    assert info.max_timestamp == NOW + 700
    stored = log.read(0, 1 << 20).records
    from strata.protocol.records import BatchHeader, is_crc_valid

    assert BatchHeader(stored).max_timestamp == NOW + 700 and is_crc_valid(stored)


def test_followers_are_not_validated_record_by_record(tmp_path):
    """Replication trusts the leader, as Kafka does (and stays fast)."""
    log = open_log(tmp_path)
    log.append_as_follower(records_batch([record(0, b"a", b"v"), record(5, b"b", b"v")]))
    assert log.log_end_offset == 2


def test_c_and_python_walks_agree_on_mutated_sections(walk):
    """Differential check: the same result or the same error message for seeded mutations of a record section
    (it calls both walks itself, whichever the fixture installed)."""
    rnd = random.Random(21)
    base = b"".join(
        record(
            i,
            None if i % 3 == 0 else b"k%d" % i,
            rnd.randbytes(rnd.randrange(0, 300)),
            ts_delta=rnd.randrange(-200_000, 200_000),
            headers=[(b"h", b"v")] if i % 4 == 0 else (),
        )
        for i in range(40)
    )

    def outcome(fn, p: bytes, partial: bool):
        keyless: list[int] = []
        try:
            return fn(p, 0, len(p), 0, 40, (1 << 63) - 1, -(1 << 63), keyless, partial), keyless
        except RecordBatchError as e:
            return str(e), e.error_code

    for _ in range(3000):
        p = bytearray(base)
        kind = rnd.randrange(4)
        if kind == 0:
            for _ in range(rnd.randrange(1, 4)):
                p[rnd.randrange(len(p))] = rnd.randrange(256)
        elif kind == 1:
            del p[rnd.randrange(len(p)) :]
        elif kind == 2:
            p = bytearray(rnd.randbytes(rnd.randrange(0, 200)))
        else:
            p[rnd.randrange(len(p))] ^= 0x80
        for partial in (False, True):
            assert outcome(rv._walk_c, bytes(p), partial) == outcome(rv._walk_py, bytes(p), partial), bytes(p).hex()
