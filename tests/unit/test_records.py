"""strata.protocol.records: header layout, validation, in-place rewrites, record decoding."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c

from strata.protocol import records as R


def _batch(n: int = 3, **kw) -> bytearray:
    return bytearray(R.build_batch([(b"k%d" % i, b"value-%d" % i) for i in range(n)], timestamp=1_000, **kw))


def test_header_fields_match_hand_decoded_layout():
    b = _batch(3, base_offset=42, producer_id=7, producer_epoch=2, base_sequence=10, partition_leader_epoch=4)
    base, length, ple, magic, crc, attrs, lod, bts, mts, pid, pep, bseq, cnt = struct.unpack_from(  # noqa: RUF059 - the header's layout
        ">qiibIhiqqqhii", b, 0
    )
    h = R.BatchHeader(b)
    assert (h.base_offset, h.batch_length, h.size) == (42, length, length + 12) and h.size == len(b)
    assert (h.partition_leader_epoch, h.magic, h.crc, h.attributes) == (4, 2, crc, attrs)
    assert (h.last_offset_delta, h.last_offset, h.records_count) == (2, 44, 3)
    assert (h.base_timestamp, h.max_timestamp) == (1000, 1000)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (7, 2, 10, 12)
    assert h.compression == 0 and h.timestamp_type == R.CREATE_TIME
    assert not h.is_transactional and not h.is_control
    assert crc == crc32c(bytes(b[21:]))


def test_iter_batches_stops_at_truncated_tail():
    a, b = _batch(2), _batch(5, base_offset=2)
    buf = bytes(a + b)
    assert [(p, h.base_offset) for p, h in R.iter_batches(buf)] == [(0, 0), (len(a), 2)]
    assert [p for p, _ in R.iter_batches(buf[:-1])] == [0]
    assert [p for p, _ in R.iter_batches(buf[: len(a) + 30])] == [0]


def test_validate_accepts_good_batch_and_rejects_bad_ones():
    b = _batch()
    assert R.validate_batch(b, 0).records_count == 3
    bad_crc = bytearray(b)
    bad_crc[-1] ^= 0xFF
    with pytest.raises(R.RecordBatchError) as ei:
        R.validate_batch(bad_crc, 0)
    assert ei.value.error_code == 2
    bad_magic = bytearray(b)
    bad_magic[16] = 1
    with pytest.raises(R.RecordBatchError) as ei:
        R.validate_batch(bad_magic, 0)
    assert ei.value.error_code == 87
    with pytest.raises(R.RecordBatchError) as ei:
        R.validate_batch(b[:-5], 0)  # length beyond buffer
    assert ei.value.error_code == 87
    short_len = bytearray(b)
    struct.pack_into(">i", short_len, 8, 10)
    with pytest.raises(R.RecordBatchError):
        R.validate_batch(short_len, 0)
    mismatched = bytearray(b)  # lastOffsetDelta inconsistent with the count (CRC fixed up so that check passes)
    struct.pack_into(">i", mismatched, 23, 5)
    struct.pack_into(">I", mismatched, 17, crc32c(bytes(mismatched[21:])))
    with pytest.raises(R.RecordBatchError) as ei:
        R.validate_batch(mismatched, 0)
    assert ei.value.error_code == 87


def test_base_offset_and_epoch_rewrites_keep_crc_valid():
    b = _batch()
    R.set_base_offset(b, 0, 1_000_000)
    R.set_partition_leader_epoch(b, 0, 9)
    h = R.validate_batch(b, 0)
    assert (h.base_offset, h.partition_leader_epoch) == (1_000_000, 9)
    assert [r.offset for r in R.iter_records(b)] == [1_000_000, 1_000_001, 1_000_002]


def test_log_append_time_sets_type_max_timestamp_and_crc():
    b = _batch()
    R.set_log_append_time(b, 0, 5_000)
    h = R.validate_batch(b, 0)
    assert h.timestamp_type == R.LOG_APPEND_TIME and h.max_timestamp == 5_000
    assert {r.timestamp for r in R.iter_records(b)} == {5_000}


@pytest.mark.parametrize("codec", [R.GZIP, R.SNAPPY, R.LZ4, R.ZSTD])
def test_compressed_batches_decode(codec):
    values = [b"x" * 200 + bytes([i]) for i in range(10)]
    b = R.build_batch([(None, v, [("h", b"1")]) for v in values], compression=codec, base_offset=7)
    h = R.validate_batch(b, 0)
    assert h.compression == codec and h.size < 2000
    recs = list(R.iter_records(b))
    assert [r.value for r in recs] == values
    assert [r.offset for r in recs] == list(range(7, 17))
    assert recs[0].headers == [("h", b"1")] and recs[0].key is None


def test_record_timestamps_and_sequences():
    b = R.build_batch(
        [(b"a", b"1", None, 100), (b"b", None, None, 300), (None, b"3", None, 200)],
        producer_id=1,
        producer_epoch=0,
        base_sequence=5,
    )
    h = R.BatchHeader(b)
    assert (h.base_timestamp, h.max_timestamp) == (100, 300)
    recs = list(R.iter_records(b))
    assert [(r.timestamp, r.key, r.value, r.sequence) for r in recs] == [
        (100, b"a", b"1", 5),
        (300, b"b", None, 6),
        (200, None, b"3", 7),
    ]
