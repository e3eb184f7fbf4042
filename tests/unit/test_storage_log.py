"""UnifiedLog: append/read, rolls, timestamps, flush, recovery, retention, delete_records, truncation."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from strata.config import default_log_config
from strata.protocol.records import (
    LOG_OVERHEAD,
    BatchHeader,
    build_batch,
    iter_batches,
    iter_records,
    set_base_offset_and_epoch,
)
from strata.storage.epoch_cache import EpochEntry, decode_checkpoint
from strata.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from strata.storage.log import UnifiedLog
from strata.storage.producer_state import ProducerStateEntry, read_snapshot

NOW = int(time.time() * 1000)
TID = uuid.UUID(int=1)


def open_log(tmp_path: Path, needs_recovery: bool = False, name: str = "my-topic-0", **cfg_kw) -> UnifiedLog:
    cfg_kw.setdefault("segment_bytes", 4096)
    cfg_kw.setdefault("index_interval_bytes", 256)
    return UnifiedLog.open(tmp_path / name, TID, default_log_config(**cfg_kw), needs_recovery=needs_recovery)


def batch(n: int = 3, ts: int = NOW, tag: str = "v", size: int = 20) -> bytes:
    return build_batch([f"{tag}{i}".encode().ljust(size, b".") for i in range(n)], timestamp=ts)


def offsets_in(data: bytes | memoryview) -> list[int]:
    return [r.offset for p, _ in iter_batches(data) for r in iter_records(data, p)]


def read_all(log: UnifiedLog, start: int = 0, max_bytes: int = 1000) -> list[int]:
    out: list[int] = []
    off = start
    while off < log.log_end_offset:
        r = log.read(off, max_bytes, None, True)
        got = [o for o in offsets_in(r.records) if o >= off]
        assert got, f"no progress at {off}"
        out.extend(got)
        off = got[-1] + 1
    return out


def test_append_assigns_offsets_epoch_and_reads_back_across_rolls(tmp_path):
    log = open_log(tmp_path)
    assert (log.topic, log.partition, log.log_end_offset) == ("my-topic", 0, 0)
    for i in range(60):
        info = log.append_as_leader(batch(3, NOW + i), leader_epoch=2, now_ms=NOW)
        assert (info.first_offset, info.last_offset, info.record_count) == (3 * i, 3 * i + 2, 3)
        assert info.log_append_time == -1 and info.max_timestamp == NOW + i
    assert log.log_end_offset == 180
    assert log.num_segments >= 3
    assert all(s.size <= 4096 for s in log.segments)
    assert log.segments[0].base_offset == 0
    assert read_all(log) == list(range(180))
    r = log.read(0, 10**6, None, True)
    for _, h in iter_batches(r.records):
        assert h.partition_leader_epoch == 2
    assert log.latest_epoch == 2 and log.epoch_for_offset(100) == 2
    # segment files named by 20-digit base offset
    names = sorted(p.name for p in log.dir.glob("*.log"))
    assert names[0] == "00000000000000000000.log" and len(names) == log.num_segments


def test_read_starting_mid_batch_returns_whole_batch(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(batch(5), 0)
    log.append_as_leader(batch(5), 0)
    r = log.read(7, 10**6, None, False)
    assert r.first_offset == 5 and offsets_in(r.records) == list(range(5, 10))


def test_read_max_bytes_max_offset_min_one_message(tmp_path):
    log = open_log(tmp_path, segment_bytes=1 << 20)
    sizes = []
    for _ in range(10):
        b = batch(2)
        sizes.append(len(b))
        log.append_as_leader(b, 0)
    one = sizes[0]
    # max_bytes fits 3.5 batches -> 3 whole batches
    r = log.read(0, int(one * 3.5), None, False)
    assert len(r.records) == 3 * one and offsets_in(r.records) == list(range(6))
    # too small for one batch: empty unless min_one_message
    assert log.read(0, one - 1, None, False).records == b""
    r = log.read(0, one - 1, None, True)
    assert len(r.records) == one and r.first_offset == 0
    # max_offset (HW) is exclusive and cuts at a batch boundary
    r = log.read(0, 10**6, 6, False)
    assert offsets_in(r.records) == list(range(6))
    r = log.read(6, 10**6, 6, True)
    assert r.records == b"" and r.first_offset == 6
    # HW inside a batch excludes that batch
    r = log.read(0, 10**6, 5, True)
    assert offsets_in(r.records) == list(range(4))
    # reading at LEO is empty, beyond it is out of range
    assert log.read(20, 100, None, True).records == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(21, 100, None, True)


def test_read_uses_index_for_large_logs(tmp_path):
    log = open_log(tmp_path, segment_bytes=1 << 22, index_interval_bytes=1024)
    for i in range(2000):
        log.append_as_leader(batch(1, tag=f"r{i}-"), 0)
    seg = log.active_segment
    assert seg.offset_index.entries > 50
    for off in (0, 1, 999, 1500, 1999):
        r = log.read(off, 1, None, True)
        assert offsets_in(r.records) == [off]


def test_append_validation_errors(tmp_path):
    log = open_log(tmp_path, segment_bytes=4096, max_message_bytes=500)
    good = batch(1)
    corrupt = bytearray(good)
    corrupt[-2] ^= 0x55
    with pytest.raises(CorruptRecordError) as ei:
        log.append_as_leader(bytes(corrupt), 0)
    assert ei.value.error_code == 2
    bad_magic = bytearray(good)
    bad_magic[16] = 0
    with pytest.raises(InvalidRecordError) as ei:
        log.append_as_leader(bytes(bad_magic), 0)
    assert ei.value.error_code == 87
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(good + b"\x00" * 10, 0)  # trailing garbage
    with pytest.raises(RecordTooLargeError) as ei:
        log.append_as_leader(build_batch([b"x" * 600]), 0)
    assert ei.value.error_code == 10
    with pytest.raises(RecordBatchTooLargeError) as ei:
        log.append_as_leader(b"".join(build_batch([b"y" * 400]) for _ in range(11)), 0)
    assert ei.value.error_code == 18
    with pytest.raises(InvalidTimestampError) as ei:
        log.append_as_leader(batch(1, ts=NOW + 2 * 3600 * 1000), 0, now_ms=NOW)
    assert ei.value.error_code == 32
    assert log.log_end_offset == 0 and log.size_in_bytes == 0  # nothing written by failed appends
    log.append_as_leader(good, 0)
    assert log.log_end_offset == 1


def test_timestamp_before_max_ms(tmp_path):
    log = open_log(tmp_path, message_timestamp_before_max_ms=1000)
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(batch(1, ts=NOW - 5000), 0, now_ms=NOW)
    log.append_as_leader(batch(1, ts=NOW - 500), 0, now_ms=NOW)
    assert log.log_end_offset == 1


def test_log_append_time(tmp_path):
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    info = log.append_as_leader(batch(2, ts=1), 0, now_ms=NOW)
    assert info.log_append_time == NOW and info.max_timestamp == NOW
    r = log.read(0, 10**6, None, True)
    h = BatchHeader(r.records)
    assert h.timestamp_type == 1 and h.max_timestamp == NOW
    assert [x.timestamp for x in iter_records(r.records)] == [NOW, NOW]


def test_roll_by_segment_ms_and_explicit_roll(tmp_path):
    log = open_log(tmp_path, segment_bytes=1 << 20, segment_ms=1000)
    log.append_as_leader(batch(1, ts=NOW), 0, now_ms=NOW)
    log.append_as_leader(batch(1, ts=NOW + 500), 0, now_ms=NOW + 500)
    assert log.num_segments == 1
    log.append_as_leader(batch(1, ts=NOW + 1500), 0, now_ms=NOW + 1500)
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.roll()
    log.roll()  # empty active segment: no-op
    assert [s.base_offset for s in log.segments] == [0, 2, 3]
    assert log.read(0, 10**6, None, True).first_offset == 0
    log.append_as_leader(batch(1), 0)
    assert read_all(log) == [0, 1, 2, 3]


def test_fetch_offset_by_timestamp(tmp_path):
    log = open_log(tmp_path, segment_bytes=2048, index_interval_bytes=100)
    for i in range(40):  # timestamps NOW + 10*i, records i*2, i*2+1 (second record +5 ms)
        log.append_as_leader(
            build_batch([(None, b"a" * 30, None, NOW + 10 * i), (None, b"b" * 30, None, NOW + 10 * i + 5)]), 1
        )
    assert log.num_segments > 2
    t = log.fetch_offset_by_timestamp(NOW + 100)
    assert (t.timestamp, t.offset, t.leader_epoch) == (NOW + 100, 20, 1)
    t = log.fetch_offset_by_timestamp(NOW + 101)  # inside a batch: the second record
    assert (t.timestamp, t.offset) == (NOW + 105, 21)
    assert log.fetch_offset_by_timestamp(0).offset == 0
    assert log.fetch_offset_by_timestamp(NOW + 10_000) is None
    assert log.fetch_offset_by_timestamp(-1).offset == 80
    assert log.fetch_offset_by_timestamp(-2).offset == 0
    t = log.fetch_offset_by_timestamp(-3)
    assert (t.timestamp, t.offset) == (NOW + 395, 79)


def test_max_timestamp_points_at_record_not_batch_end(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(build_batch([(None, b"x", None, NOW + 50), (None, b"y", None, NOW)]), 0)
    log.append_as_leader(build_batch([(None, b"z", None, NOW + 10)]), 0)
    t = log.fetch_offset_by_timestamp(-3)
    assert (t.timestamp, t.offset) == (NOW + 50, 0)
    # and it survives a reopen (time index + tail scan)
    log.close()
    log = open_log(tmp_path)
    t = log.fetch_offset_by_timestamp(-3)
    assert (t.timestamp, t.offset) == (NOW + 50, 0)


def test_flush_advances_recovery_point_and_unflushed_count(tmp_path):
    log = open_log(tmp_path)
    for _ in range(4):
        log.append_as_leader(batch(2), 0)
    assert log.unflushed_messages == 8 and log.recovery_point == 0
    log.flush(up_to=4)
    assert log.recovery_point == 4
    log.flush()
    assert log.recovery_point == 8 and log.unflushed_messages == 0


def test_clean_reopen_keeps_everything(tmp_path):
    log = open_log(tmp_path)
    for i in range(30):
        log.append_as_leader(batch(3, NOW + i), 3)
    leo, nseg = log.log_end_offset, log.num_segments
    log.flush()
    log.close()
    log = UnifiedLog.open(
        tmp_path / "my-topic-0",
        TID,
        default_log_config(segment_bytes=4096, index_interval_bytes=256),
        recovery_point=leo,
        high_watermark=50,
        needs_recovery=False,
    )
    assert (log.log_end_offset, log.num_segments, log.high_watermark) == (leo, nseg, 50)
    assert read_all(log) == list(range(leo))
    assert log.fetch_offset_by_timestamp(NOW + 10).offset == 30
    info = log.append_as_leader(batch(1), 4)
    assert info.first_offset == leo and log.leader_epoch_cache.entries[-1] == (4, leo)


def test_missing_index_is_rebuilt_on_clean_open(tmp_path):
    log = open_log(tmp_path)
    for i in range(30):
        log.append_as_leader(batch(3, NOW + i), 0)
    first = log.segments[0]
    entries = first.offset_index.entries
    assert entries > 0
    log.close()
    first.offset_index.path.unlink()
    first.time_index.path.unlink()
    log = open_log(tmp_path)
    assert log.segments[0].offset_index.entries == entries
    assert read_all(log) == list(range(90))


def test_torn_tail_recovery(tmp_path):
    log = open_log(tmp_path, segment_bytes=1 << 20)
    for i in range(10):
        log.append_as_leader(batch(2, NOW + i), 0)
    path = log.active_segment.log_path
    size = path.stat().st_size
    log.close()
    os.truncate(path, size - 7)  # torn last batch
    log = open_log(tmp_path, needs_recovery=True)
    assert log.log_end_offset == 18
    assert path.stat().st_size < size - 7 + 1
    assert read_all(log) == list(range(18))
    # as Kafka's LogLoader: recovery does not advance the recovery point (only a flush does)
    assert log.recovery_point == 0
    log.flush()
    assert log.recovery_point == 18
    info = log.append_as_leader(batch(2), 0)
    assert info.first_offset == 18
    assert read_all(log) == list(range(20))


def test_corrupt_batch_in_middle_truncates_there_and_drops_later_segments(tmp_path):
    log = open_log(tmp_path, segment_bytes=2048)
    for i in range(40):
        log.append_as_leader(batch(2, NOW + i), 0)
    segs = log.segments
    assert len(segs) >= 3
    victim = segs[1]
    positions = [p for p, _ in iter_batches(victim.read_batch(0, victim.size))]
    corrupt_at = positions[2] + 70  # inside the 3rd batch's records
    expected_leo = BatchHeader(victim.read_batch(positions[2], 61)).base_offset
    log.close()
    with open(victim.log_path, "r+b") as f:
        f.seek(corrupt_at)
        byte = f.read(1)
        f.seek(corrupt_at)
        f.write(bytes([byte[0] ^ 0xFF]))
    log = open_log(tmp_path, needs_recovery=True)
    assert log.log_end_offset == expected_leo
    assert log.num_segments == 2
    assert read_all(log) == list(range(expected_leo))


def test_clean_open_trusts_data_but_recovery_open_from_recovery_point_only(tmp_path):
    log = open_log(tmp_path, segment_bytes=2048)
    for i in range(40):
        log.append_as_leader(batch(2, NOW + i), 0)
    segs = log.segments
    first = segs[0]
    log.close()
    with open(first.log_path, "r+b") as f:  # corrupt the first (already flushed) segment
        f.seek(100)
        f.write(b"\xff\xff")
    rp = segs[-1].base_offset
    log = UnifiedLog.open(
        tmp_path / "my-topic-0",
        TID,
        default_log_config(segment_bytes=2048, index_interval_bytes=256),
        recovery_point=rp,
        needs_recovery=True,
    )
    assert log.log_end_offset == 80  # the segment below the recovery point was not rescanned


def test_retention_by_time_includes_an_expired_active_segment(tmp_path):
    """Kafka's deletableSegments: a non-empty active segment wholly below the HW is deleted too, after rolling a
    new empty one, so the log start reaches the LEO."""
    log = open_log(tmp_path, segment_bytes=1024, retention_ms=1000)
    for i in range(20):
        log.append_as_leader(batch(2, NOW + i), 0, now_ms=NOW)
    n = log.num_segments
    assert n >= 3
    leo = log.log_end_offset
    log.update_high_watermark(leo - 1)  # the active segment is not wholly committed yet: it stays
    assert log.delete_retention_breached_segments(now_ms=NOW + 500) == 0
    assert log.delete_retention_breached_segments(now_ms=NOW + 60_000) == n - 1
    assert log.num_segments == 1 and log.active_segment.size > 0
    log.update_high_watermark(leo)
    assert log.delete_retention_breached_segments(now_ms=NOW + 60_000) == 1
    assert log.num_segments == 1 and log.active_segment.size == 0
    assert log.log_start_offset == log.active_segment.base_offset == log.local_log_start_offset == leo
    assert log.delete_retention_breached_segments(now_ms=NOW + 60_000) == 0  # an empty active segment stays
    assert not list(log.dir.glob("*.deleted"))
    assert len(list(log.dir.glob("*.log"))) == 1
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100, None, True)
    log.append_as_leader(batch(2, NOW + 100), 0, now_ms=NOW)
    assert offsets_in(log.read(log.log_start_offset, 10**6, None, True).records)[0] == leo


def test_retention_respects_high_watermark(tmp_path):
    log = open_log(tmp_path, segment_bytes=1024, retention_ms=1000)
    for i in range(20):
        log.append_as_leader(batch(2, NOW + i), 0, now_ms=NOW)
    log.update_high_watermark(log.segments[2].base_offset)
    assert log.delete_retention_breached_segments(now_ms=NOW + 60_000) == 2
    assert log.log_start_offset == log.segments[0].base_offset


def test_retention_by_size(tmp_path):
    log = open_log(tmp_path, segment_bytes=1024, retention_bytes=2500)
    for i in range(60):
        log.append_as_leader(batch(2, NOW + i), 0)
    log.update_high_watermark(log.log_end_offset)
    sizes = [s.size for s in log.segments]
    assert sum(sizes) > 2500 and len(sizes) > 4
    # Kafka's rule: delete the oldest while (size - retention.bytes) - segment.size >= 0
    excess, expect = sum(sizes) - 2500, 0
    for sz in sizes[:-1]:
        if excess - sz < 0:
            break
        excess -= sz
        expect += 1
    assert expect >= 1
    assert log.delete_retention_breached_segments(now_ms=NOW) == expect
    assert log.size_in_bytes == sum(sizes[expect:]) and log.size_in_bytes > 2500 - sizes[0]
    assert log.log_start_offset == log.segments[0].base_offset > 0
    assert read_all(log, log.log_start_offset) == list(range(log.log_start_offset, 120))
    assert log.delete_retention_breached_segments(now_ms=NOW) == 0


def test_delete_records(tmp_path):
    log = open_log(tmp_path, segment_bytes=1024)
    for i in range(20):
        log.append_as_leader(batch(2, NOW + i), 0)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(5)  # above HW (0)
    log.update_high_watermark(30)
    second_base = log.segments[1].base_offset
    assert log.delete_records(second_base + 1) == second_base + 1
    assert log.segments[0].base_offset == second_base
    assert log.log_start_offset == second_base + 1
    r = log.read(second_base + 1, 10**6, None, True)
    assert r.first_offset <= second_base + 1
    with pytest.raises(OffsetOutOfRangeError):
        log.read(second_base, 100, None, True)
    assert log.fetch_offset_by_timestamp(-2).offset == second_base + 1
    assert log.fetch_offset_by_timestamp(0).offset == second_base + 1


def test_truncate_to_and_epoch_cache(tmp_path):
    log = open_log(tmp_path, segment_bytes=1024)
    for i in range(10):
        log.append_as_leader(batch(2, NOW + i), 1)
    for i in range(10):
        log.append_as_leader(batch(2, NOW + i), 3)
    assert [tuple(e) for e in log.leader_epoch_cache.entries] == [(1, 0), (3, 20)]
    assert log.end_offset_for_epoch(1) == (1, 20) and log.end_offset_for_epoch(3) == (3, 40)
    assert log.end_offset_for_epoch(2) == (1, 20)
    log.update_high_watermark(40)
    log.truncate_to(14)
    assert log.log_end_offset == 14 and log.high_watermark == 14
    assert read_all(log) == list(range(14))
    assert [tuple(e) for e in log.leader_epoch_cache.entries] == [(1, 0)]
    assert (log.dir / "leader-epoch-checkpoint").read_text() == "0\n1\n1 0\n"
    assert log.append_as_leader(batch(2), 5).first_offset == 14
    assert [s.base_offset for s in log.segments] == sorted({s.base_offset for s in log.segments})


def test_truncate_fully_and_start_at(tmp_path):
    log = open_log(tmp_path, segment_bytes=1024)
    for i in range(10):
        log.append_as_leader(batch(2, NOW + i), 1)
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset, log.num_segments) == (500, 500, 1)
    assert [p.name for p in log.dir.glob("*.log")] == ["00000000000000000500.log"]
    assert log.leader_epoch_cache.entries == []
    assert log.append_as_leader(batch(1), 2).first_offset == 500


def test_truncate_fully_and_start_at_keeps_a_lower_log_start_offset(tmp_path):
    """Tiered follower: the data below the new local start lives in remote storage, so the log starts lower."""
    log = open_log(tmp_path, segment_bytes=1024)
    for i in range(10):
        log.append_as_leader(batch(2, NOW + i), 1)
    log.truncate_fully_and_start_at(500, 300)
    assert (log.log_start_offset, log.local_log_start_offset) == (300, 500)
    assert (log.high_watermark, log.recovery_point, log.log_end_offset) == (500, 500, 500)
    assert log.fetch_offset_by_timestamp(-2).offset == 300 and log.fetch_offset_by_timestamp(-4).offset == 500
    with pytest.raises(OffsetOutOfRangeError):
        log.read(300, 1000)  # below the local log start: remote storage serves it
    log.truncate_fully_and_start_at(600, 700)  # a log start above the new start is not taken
    assert (log.log_start_offset, log.local_log_start_offset, log.log_end_offset) == (600, 600, 600)


def test_restore_aux_state_from_a_remote_checkpoint_and_producer_snapshot(tmp_path):
    log = open_log(tmp_path, segment_bytes=1024)
    for i in range(10):
        log.append_as_leader(batch(2, NOW + i), 9)
    log.truncate_fully_and_start_at(500, 100)
    epochs = decode_checkpoint(b"0\n4\n1 100\n3 250\n4 500\n5 520\n")
    producer = ProducerStateEntry(77, producer_epoch=2, last_timestamp=NOW)
    producer.add_batch(2, 41, 499, 1, NOW)
    log.restore_aux_state(epochs, [producer])
    # the lineage below the local start only: later entries come with the fetched batches
    assert log.leader_epoch_cache.entries == [EpochEntry(1, 100), EpochEntry(3, 250)]
    assert (log.dir / "leader-epoch-checkpoint").read_text() == "0\n2\n1 100\n3 250\n"
    assert log.epoch_for_offset(499) == 3 and log.end_offset_for_epoch(1) == (1, 250)
    assert log.producer_state.last_entry(77) is producer and producer.last_seq == 41
    assert [e.producer_id for e in read_snapshot(log.dir / "00000000000000000500.snapshot")] == [77]
    log.append_as_follower(log_batch_at(500, epoch=4))
    assert log.leader_epoch_cache.entries[-1] == EpochEntry(4, 500) and log.log_end_offset == 502


def log_batch_at(offset: int, epoch: int) -> bytes:
    """A two-record batch as a leader's log holds it: at `offset`, written in `epoch`."""
    raw = bytearray(batch(2))
    set_base_offset_and_epoch(raw, 0, offset, len(raw) - LOG_OVERHEAD, epoch)
    return bytes(raw)


def test_highest_offset_in_remote_storage_only_moves_up(tmp_path):
    log = open_log(tmp_path)
    assert log.highest_offset_in_remote_storage == -1
    log.update_highest_offset_in_remote_storage(41)
    log.update_highest_offset_in_remote_storage(7)
    assert log.highest_offset_in_remote_storage == 41


def test_follower_append_keeps_offsets_and_epochs(tmp_path):
    leader = open_log(tmp_path, name="t-0")
    follower = open_log(tmp_path, name="t-1")
    leader.append_as_leader(batch(3), 1)
    leader.append_as_leader(batch(2), 4)
    data = leader.read(0, 10**6, None, True).records
    info = follower.append_as_follower(data + data[:20])  # trailing partial batch is ignored
    assert (info.first_offset, info.last_offset) == (0, 4)
    assert follower.log_end_offset == 5
    assert follower.read(0, 10**6, None, True).records == data
    assert [tuple(e) for e in follower.leader_epoch_cache.entries] == [(1, 0), (4, 3)]
    with pytest.raises(InvalidRecordError):
        follower.append_as_follower(data)  # offsets below LEO


def test_empty_append(tmp_path):
    log = open_log(tmp_path)
    info = log.append_as_leader(b"", 0)
    assert info.record_count == 0 and log.log_end_offset == 0


def test_deleted_segment_stays_readable_through_held_reference(tmp_path):
    log = open_log(tmp_path, segment_bytes=1024, retention_ms=0)
    for i in range(10):
        log.append_as_leader(batch(2, NOW + i), 0)
    held = log.segments[0]
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_retention_breached_segments(now_ms=NOW + 10_000) >= 1
    assert not held.log_path.exists()
    assert offsets_in(held.read_batch(0, held.size))[0] == 0
    held.flush()  # fsync of an unlinked inode is fine
