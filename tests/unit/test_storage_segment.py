"""LogSegment and edge cases of UnifiedLog: index entries, index-full rolls, corrupt indexes, flush in a thread."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from strata.config import default_log_config
from strata.protocol.records import GZIP, BatchHeader, build_batch, iter_batches, iter_records
from strata.storage.errors import InvalidRecordError
from strata.storage.log import UnifiedLog
from strata.storage.segment import LogSegment

NOW = int(time.time() * 1000)


def test_index_entries_are_last_offset_to_batch_start(tmp_path):
    seg = LogSegment(tmp_path, 100, index_interval_bytes=150)
    pos, offset, layout = 0, 100, []
    for i in range(6):
        b = bytearray(build_batch([b"z" * 60, b"w" * 60], timestamp=NOW + i))
        b[0:8] = offset.to_bytes(8, "big")
        h = BatchHeader(b)
        layout.append((pos, h.last_offset))
        seg.append(b, [(0, h.size, h.last_offset, h.max_timestamp)], h.last_offset + 1)
        pos += h.size
        offset = h.last_offset + 1
    entries = [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)]
    assert entries, "expected index entries"
    for off, p in entries:
        assert (p, off) in layout  # every entry maps a batch's last offset to that batch's start
    # Kafka's rule: first batch is never indexed (0 bytes since last entry), later ones when > interval bytes
    assert entries[0][1] > 0
    ts_entries = [seg.time_index.entry(i) for i in range(seg.time_index.entries)]
    assert all(o in {lo: p for p, lo in layout} for _, o in ts_entries)
    assert seg.next_offset == 112 and seg.max_timestamp_so_far == NOW + 5
    seg.close()


def test_full_offset_index_rolls(tmp_path):
    log = UnifiedLog.open(
        tmp_path / "t-0",
        uuid.UUID(int=1),
        default_log_config(segment_bytes=1 << 20, index_interval_bytes=1, segment_index_bytes=24),
        needs_recovery=False,
    )
    for _ in range(12):
        log.append_as_leader(build_batch([b"a" * 10]), 0)
    assert log.num_segments >= 3
    assert all(s.offset_index.entries <= 3 for s in log.segments)
    data = b"".join(log.read(s.base_offset, 1 << 20, None, True).records for s in log.segments)
    assert [h.base_offset for _, h in iter_batches(data)] == list(range(12))


def test_zero_filled_index_tail_is_rebuilt_on_clean_open(tmp_path):
    cfg = default_log_config(segment_bytes=1 << 20, index_interval_bytes=100)
    log = UnifiedLog.open(tmp_path / "t-0", uuid.UUID(int=1), cfg, needs_recovery=False)
    for i in range(20):
        log.append_as_leader(build_batch([b"q" * 50], timestamp=NOW + i), 0)
    seg = log.active_segment
    good = [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)]
    idx_path = seg.offset_index.path
    log.close()
    with open(idx_path, "ab") as f:  # what an un-trimmed, preallocated Kafka index looks like after a crash
        f.write(b"\x00" * 80)
    log = UnifiedLog.open(tmp_path / "t-0", uuid.UUID(int=1), cfg, needs_recovery=False)
    s = log.active_segment
    assert [s.offset_index.entry(i) for i in range(s.offset_index.entries)] == good
    assert log.log_end_offset == 20
    assert [x.offset for x in iter_records(log.read(13, 1, None, True).records)] == [13]


def test_compressed_batches_with_log_append_time(tmp_path):
    log = UnifiedLog.open(
        tmp_path / "t-0",
        uuid.UUID(int=1),
        default_log_config(message_timestamp_type="LogAppendTime"),
        needs_recovery=False,
    )
    log.append_as_leader(build_batch([b"a"], timestamp=1), 0, now_ms=NOW)
    info = log.append_as_leader(build_batch([b"c" * 100] * 5, compression=GZIP, timestamp=1), 0, now_ms=NOW + 7)
    assert (info.first_offset, info.last_offset, info.log_append_time) == (1, 5, NOW + 7)
    data = log.read(1, 1 << 20, None, True).records
    assert BatchHeader(data).compression == GZIP
    assert [(r.offset, r.timestamp) for r in iter_records(data)] == [(i, NOW + 7) for i in range(1, 6)]
    t = log.fetch_offset_by_timestamp(NOW + 1)
    assert (t.timestamp, t.offset) == (NOW + 7, 1)
    assert log.fetch_offset_by_timestamp(-3).offset == 1


def test_control_batch_rejected_from_clients_allowed_for_coordinator(tmp_path):
    log = UnifiedLog.open(tmp_path / "t-0", uuid.UUID(int=1), default_log_config(), needs_recovery=False)
    b = bytearray(
        build_batch(
            [(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")],
            producer_id=5,
            producer_epoch=0,
            base_sequence=-1,
            is_transactional=True,
        )
    )
    attrs = int.from_bytes(b[21:23], "big") | 0x20
    b[21:23] = attrs.to_bytes(2, "big")
    from crc32c import crc32c

    b[17:21] = crc32c(bytes(b[21:])).to_bytes(4, "big")
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(bytes(b), 0)
    assert log.append_as_leader(bytes(b), 0, from_client=False).first_offset == 0
    assert BatchHeader(log.read(0, 1000, None, True).records).is_control


def test_flush_in_a_thread_while_appending(tmp_path):
    log = UnifiedLog.open(
        tmp_path / "t-0", uuid.UUID(int=1), default_log_config(segment_bytes=8192), needs_recovery=False
    )
    errors: list[BaseException] = []
    stop = threading.Event()
    observed: list[int] = []

    def flusher():
        try:
            while not stop.is_set():
                log.flush()
                observed.append(log.recovery_point)
        except BaseException as e:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(e)

    t = threading.Thread(target=flusher)
    t.start()
    try:
        for i in range(400):
            log.append_as_leader(build_batch([b"f" * 100], timestamp=NOW), 0)
            if i % 50 == 0:
                log.delete_retention_breached_segments(NOW)  # no-op by policy, exercises the list copy
    finally:
        stop.set()
        t.join()
    assert not errors
    assert observed == sorted(observed) and all(rp <= 400 for rp in observed)
    log.flush()
    assert log.recovery_point == 400 and log.unflushed_messages == 0
    assert log.num_segments > 3


def test_reopen_with_log_start_beyond_recovered_end(tmp_path):
    cfg = default_log_config()
    log = UnifiedLog.open(tmp_path / "t-0", uuid.UUID(int=1), cfg, needs_recovery=False)
    for _ in range(5):
        log.append_as_leader(build_batch([b"x"]), 0)
    log.close()
    log = UnifiedLog.open(tmp_path / "t-0", uuid.UUID(int=1), cfg, log_start_offset=50, needs_recovery=True)
    assert (log.log_start_offset, log.log_end_offset, log.num_segments) == (50, 50, 1)
    assert log.append_as_leader(build_batch([b"y"]), 0).first_offset == 50


def test_short_index_regrows_on_clean_open(tmp_path):
    cfg = default_log_config(segment_bytes=1 << 20, index_interval_bytes=100)
    log = UnifiedLog.open(tmp_path / "t-0", uuid.UUID(int=1), cfg, needs_recovery=False)
    for i in range(30):
        log.append_as_leader(build_batch([b"s" * 70], timestamp=NOW + i), 0)
    seg = log.active_segment
    good = [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)]
    assert len(good) > 4
    path = seg.offset_index.path
    log.close()
    with open(path, "r+b") as f:
        f.truncate(8 * 2)  # keep only two entries
    log = UnifiedLog.open(tmp_path / "t-0", uuid.UUID(int=1), cfg, needs_recovery=False)
    s = log.active_segment
    assert [s.offset_index.entry(i) for i in range(s.offset_index.entries)] == good
    assert path.stat().st_size == 8 * len(good)
    # appends continue to index exactly as before the reopen
    log.append_as_leader(build_batch([b"s" * 70], timestamp=NOW + 99), 0)
    assert log.log_end_offset == 31


def test_recovery_leaves_equal_indexes_alone_and_rewrites_differing_ones(tmp_path):
    """Recovery after kill -9 rebuilds both indexes from the log: files that already hold those entries are not
    written (no truncate and rewrite of 20,000 unchanged indexes), a wrong entry, a stray tail or a torn log tail
    still ends with exactly the rebuilt entries on disk."""
    cfg = default_log_config(segment_bytes=1 << 20, index_interval_bytes=100)
    log = UnifiedLog.open(tmp_path / "t-0", uuid.UUID(int=1), cfg, needs_recovery=False)
    for i in range(20):
        log.append_as_leader(build_batch([b"q" * 50], timestamp=NOW + i), 0)
    seg = log.active_segment
    idx, tidx, log_path = seg.offset_index.path, seg.time_index.path, seg.log_path
    log.close()
    good_idx, good_tidx = idx.read_bytes(), tidx.read_bytes()
    assert len(good_idx) >= 16 and len(good_tidx) >= 24
    before = (idx.stat().st_mtime_ns, tidx.stat().st_mtime_ns)
    time.sleep(0.01)  # (mtime granularity: a rewrite now gets a later mtime)

    log = UnifiedLog.open(tmp_path / "t-0", uuid.UUID(int=1), cfg, needs_recovery=True, recovery_point=0)
    assert log.log_end_offset == 20
    log.close()
    assert (idx.stat().st_mtime_ns, tidx.stat().st_mtime_ns) == before  # neither file written
    assert (idx.read_bytes(), tidx.read_bytes()) == (good_idx, good_tidx)

    wrong = bytearray(good_idx)
    wrong[-4:] = (999999).to_bytes(4, "big")  # the last entry's position is wrong
    idx.write_bytes(bytes(wrong))
    tidx.write_bytes(good_tidx + good_tidx[-12:])  # a stray entry past the rebuilt ones
    log = UnifiedLog.open(tmp_path / "t-0", uuid.UUID(int=1), cfg, needs_recovery=True, recovery_point=0)
    log.close()
    assert (idx.read_bytes(), tidx.read_bytes()) == (good_idx, good_tidx)

    with open(log_path, "r+b") as f:  # a torn last batch: recovery truncates it, the indexes follow
        f.truncate(log_path.stat().st_size - 10)
    log = UnifiedLog.open(tmp_path / "t-0", uuid.UUID(int=1), cfg, needs_recovery=True, recovery_point=0)
    assert log.log_end_offset == 19
    s = log.active_segment
    entries = [s.offset_index.entry(i) for i in range(s.offset_index.entries)]
    last_ts = s.time_index.last_entry
    log.close()
    assert all(off < 19 for off, _ in entries) and last_ts == (NOW + 18, 18)
    assert len(idx.read_bytes()) == 8 * len(entries) and tidx.read_bytes()[-12:] == (NOW + 18).to_bytes(8, "big") + (
        18
    ).to_bytes(4, "big")
