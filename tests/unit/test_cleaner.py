"""Log compaction: latest value per key with offsets kept, tombstones and their delete horizon, batch metadata,
producers' last batches, the bounded offset map, never the active segment, and the crash-safe swap."""

from __future__ import annotations

import itertools
import shutil
import time
import uuid
from pathlib import Path

import pytest

from strata.config import default_log_config
from strata.protocol.records import (
    DELETE_HORIZON_MASK,
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    BatchHeader,
    build_batch,
    iter_batches,
    iter_records,
)
from strata.storage import segment_swap
from strata.storage.cleaner import CleanedSegmentWriter, Cleaner, CleaningAbortedError, iter_segment_batches
from strata.storage.errors import InvalidRecordError
from strata.storage.log import SegmentsChangedError, UnifiedLog
from strata.storage.offset_map import OffsetMap
from strata.storage.record_codec import batch_payload, build_empty_batch, parse_records
from strata.storage.segment_swap import complete_interrupted_swaps

NOW = int(time.time() * 1000)
TID = uuid.UUID(int=3)


def open_log(path: Path, needs_recovery: bool = False, **cfg) -> UnifiedLog:
    cfg.setdefault("cleanup_policy", "compact")
    cfg.setdefault("segment_bytes", 4096)
    cfg.setdefault("index_interval_bytes", 256)
    return UnifiedLog.open(path, TID, default_log_config(**cfg), needs_recovery=needs_recovery)


def append(log: UnifiedLog, pairs, ts: int = NOW, epoch: int = 0, **kw) -> int:
    info = log.append_as_leader(build_batch([(k, v) for k, v in pairs], timestamp=ts, **kw), epoch, NOW)
    log.update_high_watermark(log.log_end_offset)
    return info.first_offset


def batches_of(log: UnifiedLog) -> list[tuple[BatchHeader, bytes]]:
    out = []
    for seg in log.segments:
        for pos, h in seg.iter_headers(0, seg.size):
            out.append((h, seg.read_batch(pos, h.size)))
    return out


def records_of(log: UnifiedLog) -> list[tuple[int, bytes | None, bytes | None, int]]:
    """(offset, key, value, timestamp) of every record, through the public read path."""
    out = []
    off = log.log_start_offset
    while off < log.log_end_offset:
        data = log.read(off, 1 << 20).records
        if not data:
            break
        last = off
        for p, h in iter_batches(data):
            for r in iter_records(data, p):
                if r.offset >= off:
                    out.append((r.offset, r.key, r.value, r.timestamp))
            last = h.last_offset
        off = last + 1
    return out


def latest_by_key(recs) -> dict:
    out = {}
    for off, k, v, _ts in recs:
        out[k] = (off, v)
    return out


def clean(log: UnifiedLog, first_dirty: int = 0, now: int = NOW, buffer: int = 1 << 20, **kw):
    return Cleaner(buffer, **kw).clean(log, first_dirty, log.active_segment.base_offset, now)


def fill(log: UnifiedLog, n: int, keys: int, start: int = 0, per_batch: int = 1, roll_every: int = 0) -> None:
    for i in range(start, start + n, per_batch):
        append(log, [(b"key-%03d" % (j % keys), b"value-%06d" % j) for j in range(i, i + per_batch)])
        if roll_every and (i - start) % roll_every == roll_every - per_batch:
            log.roll()


# ---------------------------------------------------------------------------------------------------------------


def test_offset_map_put_get_latest_and_full():
    m = OffsetMap(24 * 10, load_factor=0.5)
    assert (m.slots, m.max_entries) == (10, 5)
    for i in range(5):
        m.put(b"k%d" % i, 100 + i)
    m.put(b"k1", 200)  # an update does not take a new slot
    assert m.size == 5 and m.full
    assert m.get(b"k1") == 200 and m.get(b"k4") == 104 and m.get(b"absent") == -1
    assert m.latest_offset == 200
    tight = OffsetMap(24 * 4, load_factor=1.0)  # never completely full: a lookup of an absent key ends
    for i in range(4):
        if not tight.full:
            tight.put(b"t%d" % i, i)
    assert tight.size == 3 and tight.get(b"absent") == -1
    sized = OffsetMap(1 << 30, expected_entries=100)  # memory follows the job, bounded by the configured size
    assert sized.slots < 1000
    assert len(sized._digests) + sized._offsets.itemsize * len(sized._offsets) == sized.slots * 24


def test_keeps_latest_value_per_key_with_offsets_unchanged(tmp_path):
    log = open_log(tmp_path / "t-0")
    fill(log, 600, keys=25, per_batch=3)
    append(log, [(b"key-000", b"in-active"), (b"key-001", b"in-active")])  # duplicates in the active segment
    log.roll()
    append(log, [(b"key-002", b"active-1"), (b"key-002", b"active-2")])
    before = records_of(log)
    active_bytes = log.active_segment.read_batch(0, log.active_segment.size)
    res = clean(log)
    after = records_of(log)
    assert res.end_offset == log.active_segment.base_offset
    assert latest_by_key(after) == latest_by_key(before)
    by_offset = {off: (k, v, ts) for off, k, v, ts in before}
    assert all(by_offset[off] == (k, v, ts) for off, k, v, ts in after)  # every survivor at its original offset
    assert [r[0] for r in after] == sorted({r[0] for r in after})
    cleaned = [r for r in after if r[0] < log.active_segment.base_offset]
    assert len({k for _, k, _, _ in cleaned}) == len(cleaned) == 25  # one record per key below the active segment
    assert log.active_segment.read_batch(0, log.active_segment.size) == active_bytes  # never touched
    assert [r for r in after if r[0] >= log.active_segment.base_offset] == [
        r for r in before if r[0] >= log.active_segment.base_offset
    ]
    assert log.log_end_offset == 604 and res.stats.bytes_written < res.stats.bytes_read
    # reopening (clean and recovering) sees the same log
    log.close()
    for recover in (False, True):
        again = open_log(tmp_path / "t-0", needs_recovery=recover)
        assert records_of(again) == after
        again.close()


def test_active_segment_alone_is_never_cleaned(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=1 << 20)
    fill(log, 50, keys=2)
    raw = log.active_segment.read_batch(0, log.active_segment.size)
    res = clean(log)
    assert res.end_offset == 0 and res.stats.bytes_read == 0
    assert log.active_segment.read_batch(0, log.active_segment.size) == raw and log.num_segments == 1


def test_tombstones_kept_with_delete_horizon_then_dropped(tmp_path):
    log = open_log(tmp_path / "t-0", delete_retention_ms=1000)
    fill(log, 90, keys=3, per_batch=3)
    append(log, [(b"key-001", None)], ts=NOW - 5)  # tombstone for key-001
    append(log, [(b"key-000", b"after")])
    log.roll()
    res = clean(log, now=NOW)
    recs = records_of(log)
    tomb = [r for r in recs if r[1] == b"key-001"]
    assert len(tomb) == 1 and tomb[0][2] is None and tomb[0][3] == NOW - 5  # record timestamp unchanged
    ((h, _),) = [(h, b) for h, b in batches_of(log) if h.base_offset <= tomb[0][0] <= h.last_offset]
    assert h.attributes & DELETE_HORIZON_MASK and h.base_timestamp == NOW + 1000  # Kafka's delete horizon

    # another round before the horizon keeps it (new dirty data so the cleaner has work)
    fill(log, 6, keys=1, start=1000)
    log.roll()
    res = clean(log, first_dirty=res.end_offset, now=NOW + 999)
    assert [r[2] for r in records_of(log) if r[1] == b"key-001"] == [None]
    # a round at the horizon drops it, and nothing of key-001 is left
    fill(log, 6, keys=1, start=2000)
    log.roll()
    res = clean(log, first_dirty=res.end_offset, now=NOW + 1000)
    assert not [r for r in records_of(log) if r[1] == b"key-001"]
    assert res.stats.tombstones_dropped == 1
    assert latest_by_key(records_of(log))[b"key-000"][1] == b"value-002005"


@pytest.mark.parametrize("codec", [NONE, GZIP, SNAPPY, LZ4, ZSTD])
def test_rewritten_batch_keeps_metadata_and_codec(tmp_path, codec):
    log = open_log(tmp_path / "t-0")
    vals = [b"x" * 200 + b"%d" % i for i in range(6)]  # compressible
    append(
        log,
        [(b"a", vals[0]), (b"b", vals[1]), (b"a", vals[2]), (b"c", vals[3])],
        ts=NOW - 10,
        epoch=7,
        compression=codec,
        producer_id=42,
        producer_epoch=3,
        base_sequence=0,
    )
    append(log, [(b"z", vals[4])], epoch=7, compression=codec, producer_id=42, producer_epoch=3, base_sequence=4)
    untouched = batches_of(log)[1][1]
    append(log, [(b"b", vals[5])], epoch=8)
    log.roll()
    original = batches_of(log)[0][0]
    clean(log)
    hs = batches_of(log)
    h, raw = hs[0]
    assert (h.base_offset, h.last_offset_delta, h.records_count) == (0, 3, 2)  # last offset delta kept
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.partition_leader_epoch) == (42, 3, 0, 7)
    assert h.compression == original.compression == codec and h.timestamp_type == original.timestamp_type
    assert h.base_timestamp == NOW - 10 and h.max_timestamp == NOW - 10
    assert [(r.offset, r.key, r.value) for r in iter_records(raw)] == [(2, b"a", vals[2]), (3, b"c", vals[3])]
    assert hs[1][1] == untouched  # all records survive: copied byte for byte
    assert [r[0] for r in parse_records(batch_payload(raw, h), h.records_count)] == [2, 3]


def test_log_append_time_batch_keeps_its_timestamp(tmp_path):
    log = open_log(tmp_path / "t-0", message_timestamp_type="LogAppendTime")
    append(log, [(b"a", b"1"), (b"b", b"2"), (b"a", b"3")], ts=NOW - 100_000)
    append(log, [(b"b", b"4")])
    log.roll()
    clean(log)
    (h, raw), _ = batches_of(log)[:2]
    assert h.timestamp_type == 1 and h.max_timestamp == NOW
    assert [(r.offset, r.value, r.timestamp) for r in iter_records(raw)] == [(2, b"3", NOW)]


def test_last_batch_of_an_active_producer_is_kept_empty(tmp_path):
    log = open_log(tmp_path / "t-0")
    append(log, [(b"k", b"1"), (b"j", b"1")], producer_id=9, producer_epoch=1, base_sequence=0)
    append(log, [(b"k", b"2"), (b"j", b"2")])  # not idempotent: supersedes both records of producer 9
    append(log, [(b"x", b"0")])
    log.roll()
    clean(log)
    hs = [h for h, _ in batches_of(log)]
    kept = [h for h in hs if h.producer_id == 9]
    assert len(kept) == 1 and kept[0].records_count == 0 and kept[0].last_offset == 1  # sequence info survives
    assert (kept[0].producer_epoch, kept[0].base_sequence, kept[0].compression) == (1, 0, 0)
    assert latest_by_key(records_of(log)) == {b"k": (2, b"2"), b"j": (3, b"2"), b"x": (4, b"0")}
    # the log with an empty batch reopens and recovers
    log.close()
    assert latest_by_key(records_of(open_log(tmp_path / "t-0", needs_recovery=True)))[b"j"] == (3, b"2")
    assert build_empty_batch(kept[0]) == batches_of(open_log(tmp_path / "t-0"))[0][1]


def test_bounded_map_cleans_partially_then_finishes(tmp_path):
    log = open_log(tmp_path / "t-0")
    fill(log, 400, keys=200, per_batch=4)  # 200 distinct keys, each updated twice
    log.roll()
    before = records_of(log)
    end = log.active_segment.base_offset
    cl = Cleaner(24 * 100, load_factor=0.9)  # room for 90 keys
    res = cl.clean(log, 0, end, NOW)
    assert 0 < res.end_offset < end and res.stats.buffer_utilization == pytest.approx(0.9)
    mid = records_of(log)
    assert latest_by_key(mid) == latest_by_key(before)
    assert [r for r in mid if r[0] >= res.end_offset] == [r for r in before if r[0] >= res.end_offset]
    rounds = 1
    while res.end_offset < end:
        res = cl.clean(log, res.end_offset, end, NOW)
        rounds += 1
    assert rounds >= 3
    final = records_of(log)
    assert latest_by_key(final) == latest_by_key(before)


def test_null_keys_rejected_on_compacted_topics_only(tmp_path):
    log = open_log(tmp_path / "t-0")
    for codec in (NONE, GZIP, LZ4):
        with pytest.raises(InvalidRecordError) as e:
            log.append_as_leader(build_batch([(b"k", b"v" * 50), (None, b"v" * 50)], compression=codec), 0, NOW)
        assert e.value.error_code == 87
    assert log.log_end_offset == 0
    log.append_as_leader(build_batch([(b"k", None)]), 0, NOW)  # a tombstone has a key: fine
    plain = open_log(tmp_path / "d-0", cleanup_policy="delete")
    assert plain.append_as_leader(build_batch([(None, b"v")]), 0, NOW).record_count == 1
    both = open_log(tmp_path / "b-0", cleanup_policy="compact,delete")
    with pytest.raises(InvalidRecordError):
        both.append_as_leader(build_batch([(None, b"v")]), 0, NOW)


def test_reader_holding_a_replaced_segment_keeps_reading(tmp_path):
    log = open_log(tmp_path / "t-0")
    fill(log, 200, keys=5, per_batch=2)
    log.roll()
    old = log.segments[0]
    data_before = old.read(0, 1 << 20, None, True)
    clean(log)
    assert old.deleted and log.segments[0] is not old
    assert old.read(0, 1 << 20, None, True) == data_before  # the unlinked inode is still readable via its fd


def test_swap_refuses_when_the_log_changed_and_leaves_no_files(tmp_path):
    log = open_log(tmp_path / "t-0", cleanup_policy="compact,delete", retention_ms=1)
    fill(log, 200, keys=5, per_batch=2)
    log.roll()
    cl = Cleaner(1 << 20)

    def racing_swap(fn):
        log.delete_retention_breached_segments(NOW + 10_000)  # retention deletes what is being cleaned
        return fn()

    with pytest.raises(CleaningAbortedError):
        cl.clean(log, 0, log.active_segment.base_offset, NOW, swap=racing_swap)
    assert not [f for f in log.dir.iterdir() if f.name.endswith((".cleaned", ".swap"))]
    assert log.num_segments == 1


# ---------------------------------------------------------------------------------------------------------------
# crash safety

SWAP_STEPS = [
    "before-swap",
    "swap-indexes-renamed",
    "swap-committed",
    "old-deleted-0",
    "old-deleted-1",
    "final-indexes-renamed",
    "swapped",
]


def check_valid(log: UnifiedLog, expected_latest: dict) -> None:
    segs = log.segments
    for a, b in itertools.pairwise(segs):
        assert a.next_offset <= b.base_offset, f"overlapping segments {a} {b}"
    recs = records_of(log)
    offsets = [r[0] for r in recs]
    assert offsets == sorted(set(offsets))
    assert latest_by_key(recs) == expected_latest
    assert not [f for f in log.dir.iterdir() if f.name.endswith((".cleaned", ".swap", ".deleted"))]


def test_crash_at_every_step_of_the_swap_leaves_a_valid_log(tmp_path, monkeypatch):
    log = open_log(tmp_path / "t-0", segment_bytes=64 * 1024)
    for r in range(4):  # small segments so one group holds several
        fill(log, 60, keys=10, start=r * 60, per_batch=3)
        log.roll()
    expected = latest_by_key(records_of(log))
    snapshots: dict[str, Path] = {}

    def hook(step: str) -> None:
        if step in SWAP_STEPS and step not in snapshots:
            snapshots[step] = tmp_path / "crash" / step / "t-0"
            shutil.copytree(log.dir, snapshots[step])

    monkeypatch.setattr(segment_swap, "_crash_hook", hook)
    clean(log)
    assert set(snapshots) == set(SWAP_STEPS)
    check_valid(log, expected)
    for step, path in snapshots.items():
        for recover in (True, False):
            work = tmp_path / "open" / f"{step}-{recover}" / "t-0"
            shutil.copytree(path, work)
            again = open_log(work, needs_recovery=recover)
            check_valid(again, expected)
            if step in ("swap-committed", "old-deleted-0", "old-deleted-1", "final-indexes-renamed"):
                assert again.num_segments == 2, step  # the committed swap was completed: one cleaned segment
            again.close()


def test_leftover_cleaned_files_are_deleted_on_open(tmp_path):
    log = open_log(tmp_path / "t-0")
    fill(log, 100, keys=5, per_batch=2)
    log.roll()
    expected = records_of(log)
    log.close()
    d = tmp_path / "t-0"
    for suffix in (".log.cleaned", ".index.cleaned", ".timeindex.cleaned"):
        (d / f"{0:020d}{suffix}").write_bytes(b"garbage")
    (d / f"{0:020d}.index.swap").write_bytes(b"\0" * 8)  # a swap index without its .log.swap: not committed
    again = open_log(d)
    assert records_of(again) == expected
    assert not [f for f in d.iterdir() if f.name.endswith((".cleaned", ".swap"))]


def test_swap_at_or_above_a_cleaned_offset_is_not_completed(tmp_path):
    """KAFKA-12977: a .swap at or above the lowest .cleaned offset belongs to a replacement that never committed."""
    d = tmp_path / "t-0"
    log = open_log(d)
    fill(log, 100, keys=5, per_batch=2)
    log.roll()
    expected = records_of(log)
    base = log.segments[0].base_offset
    log.close()
    shutil.copy(d / f"{base:020d}.log", d / f"{base:020d}.log.swap")
    (d / f"{base:020d}.log.cleaned").write_bytes(b"")
    assert complete_interrupted_swaps(d) == []
    assert records_of(open_log(d)) == expected


def test_swap_refuses_a_truncated_log(tmp_path):
    log = open_log(tmp_path / "t-0")
    fill(log, 100, keys=5, per_batch=2)
    log.roll()
    calls = []

    def truncating_swap(fn):
        calls.append(fn)
        if len(calls) == 2:  # the first group is ready: a follower truncation gets there first
            log.truncate_to(50)
        return fn()

    with pytest.raises(CleaningAbortedError):
        Cleaner(1 << 20).clean(log, 0, log.active_segment.base_offset, NOW, swap=truncating_swap)
    assert log.log_end_offset == 50 and [r[0] for r in records_of(log)] == list(range(50))
    assert not [f for f in log.dir.iterdir() if f.name.endswith((".cleaned", ".swap"))]


# ---------------------------------------------------------------------------------------------------------------
# UnifiedLog.replace_segments on its own (a verbatim copy stands in for a cleaned group)


def write_copy(log: UnifiedLog, segs) -> list[tuple[int, int]]:
    """`<base>.*.cleaned` holding every batch of `segs`; returns their (size, next offset) as read."""
    w = CleanedSegmentWriter(
        log.dir, segs[0].base_offset, log.config.index_interval_bytes, log.config.segment_index_bytes
    )
    for seg in segs:
        for _, h, raw in iter_segment_batches(seg):
            w.append(raw, h.last_offset, h.max_timestamp)
    w.finish()
    return [(seg.size, seg.next_offset) for seg in segs]


def leftovers(log: UnifiedLog) -> list[str]:
    return sorted(f.name for f in log.dir.iterdir() if f.name.endswith((".cleaned", ".swap", ".deleted")))


def test_replace_segments_swaps_in_one_segment_and_drops_the_replaced_snapshots(tmp_path):
    log = open_log(tmp_path / "t-0")
    fill(log, 90, keys=90, per_batch=3, roll_every=30)
    segs = log.segments
    assert len(segs) == 4
    before = records_of(log)
    assert segs[1].base_offset in log.producer_state.snapshot_offsets
    state = write_copy(log, segs[:2])
    new = log.replace_segments(segs[0].base_offset, segs[:2], state)
    assert log.segments == [new, segs[2], segs[3]]
    assert (new.base_offset, new.next_offset) == (segs[0].base_offset, segs[1].next_offset)
    assert segs[0].deleted and segs[1].deleted and not leftovers(log)
    assert records_of(log) == before
    assert segs[1].base_offset not in log.producer_state.snapshot_offsets
    log.close()
    again = open_log(tmp_path / "t-0", needs_recovery=True)
    assert records_of(again) == before and again.num_segments == 3


@pytest.mark.parametrize("change", ["appended", "truncated", "active", "removed"])
def test_replace_segments_refuses_segments_that_changed(tmp_path, change):
    log = open_log(tmp_path / "t-0", cleanup_policy="compact,delete", retention_ms=1)
    fill(log, 60, keys=60, per_batch=3, roll_every=30)
    segs = log.segments
    old = segs[:2]
    state = write_copy(log, old)
    if change == "appended":
        state[0] = (state[0][0] - 1, state[0][1])
    elif change == "truncated":
        log.truncate_to(segs[1].base_offset + 3)
    elif change == "active":
        old = segs[1:]
        state = [(s.size, s.next_offset) for s in old]
    else:
        log.delete_retention_breached_segments(NOW + 10_000)
    kept = log.segments
    with pytest.raises(SegmentsChangedError):
        log.replace_segments(old[0].base_offset, old, state)
    assert log.segments == kept and not any(s.deleted for s in kept)
    assert all(name.endswith(".cleaned") for name in leftovers(log))  # the caller deletes its .cleaned files


@pytest.mark.parametrize(
    "step, completed",
    [
        ("swap-indexes-renamed", False),
        ("swap-committed", True),
        ("old-deleted-0", True),
        ("final-indexes-renamed", True),
    ],
)
def test_replace_segments_interrupted_by_a_crash_is_completed_or_rolled_back_on_open(
    tmp_path, monkeypatch, step, completed
):
    log = open_log(tmp_path / "t-0")
    fill(log, 90, keys=90, per_batch=3, roll_every=30)
    segs = log.segments
    before = records_of(log)
    state = write_copy(log, segs[:2])

    class Crash(Exception):
        pass

    def hook(name: str) -> None:
        if name == step:
            raise Crash(name)

    monkeypatch.setattr(segment_swap, "_crash_hook", hook)
    with pytest.raises(Crash):
        log.replace_segments(segs[0].base_offset, segs[:2], state)
    monkeypatch.setattr(segment_swap, "_crash_hook", None)
    for recover in (True, False):
        work = tmp_path / f"open-{recover}" / "t-0"
        shutil.copytree(log.dir, work)
        again = open_log(work, needs_recovery=recover)
        assert records_of(again) == before
        assert again.num_segments == (3 if completed else 4)
        assert not leftovers(again)
        again.close()
