"""Choosing the log to clean (dirty ratio, min/max compaction lag), the cleaner-offset-checkpoint, and the cleaner
threads driven from an asyncio loop while the loop keeps appending."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path

from strata.config import default_log_config
from strata.protocol.records import build_batch, iter_batches, iter_records
from strata.storage.checkpoints import OffsetCheckpointFile
from strata.storage.cleaner_manager import CLEANER_OFFSET_CHECKPOINT, CleanerConfig, LogCleaner, LogCleanerManager
from strata.storage.log import UnifiedLog

NOW = int(time.time() * 1000)


def open_log(root: Path, name: str = "t-0", topic_id: int = 1, **cfg) -> UnifiedLog:
    cfg.setdefault("cleanup_policy", "compact")
    cfg.setdefault("segment_bytes", 4096)
    cfg.setdefault("index_interval_bytes", 256)
    return UnifiedLog.open(root / name, uuid.UUID(int=topic_id), default_log_config(**cfg), needs_recovery=False)


def fill(log: UnifiedLog, n: int, keys: int, start: int = 0, ts: int | None = None) -> None:
    for i in range(start, start + n, 2):
        batch = build_batch([(b"k%03d" % (j % keys), b"v%06d" % j) for j in (i, i + 1)], timestamp=ts or NOW)
        log.append_as_leader(batch, 0, NOW)
    log.update_high_watermark(log.log_end_offset)


def latest(log: UnifiedLog) -> dict:
    out = {}
    off = log.log_start_offset
    while off < log.log_end_offset:
        data = log.read(off, 1 << 20).records
        if not data:
            break
        for p, h in iter_batches(data):
            for r in iter_records(data, p):
                out[r.key] = r.value
            off = h.last_offset + 1
    return out


def cleaner_for(root: Path, logs: list[UnifiedLog], **cfg) -> LogCleaner:
    return LogCleaner(CleanerConfig(**cfg), [root], lambda: list(logs))


def test_dirtiest_log_above_the_ratio_is_chosen(tmp_path):
    a = open_log(tmp_path, "a-0")
    b = open_log(tmp_path, "b-0")
    plain = open_log(tmp_path, "p-0", cleanup_policy="delete")
    for lg in (a, b, plain):
        fill(lg, 300, keys=150)  # compacts to about 60% of its size
    c = cleaner_for(tmp_path, [a, b, plain])
    assert c.clean_filthiest_log(now_ms=NOW)  # both 100% dirty: either goes first
    first = c.manager.checkpointed_offset(a), c.manager.checkpointed_offset(b)
    assert sorted(x is None for x in first) == [False, True]
    assert c.max_dirty_percent == 100
    assert c.clean_filthiest_log(now_ms=NOW)
    assert c.manager.checkpointed_offset(a) == a.active_segment.base_offset
    assert c.manager.checkpointed_offset(b) == b.active_segment.base_offset
    assert not c.clean_filthiest_log(now_ms=NOW)  # nothing dirty left
    assert c.max_dirty_percent == 0 and 40 < c.recopy_percent < 80
    assert plain.num_segments > 1 and c.manager.checkpointed_offset(plain) is None  # delete-only: untouched
    # a few new closed segments: dirty ratio below min.cleanable.dirty.ratio (0.5) -> not cleaned
    before = a.active_segment.base_offset
    fill(a, 4, keys=5, start=1000)
    a.roll()
    a.update_high_watermark(a.log_end_offset)
    ltc = c.manager.log_to_clean(a, NOW)
    assert ltc.first_dirty == before and 0 < ltc.cleanable_ratio < 0.5
    assert not c.clean_filthiest_log(now_ms=NOW)
    assert 0 < c.max_dirty_percent < 50


def test_checkpoint_file_uses_kafkas_format_and_survives_restart(tmp_path):
    lg = open_log(tmp_path)
    fill(lg, 300, keys=5)
    c = cleaner_for(tmp_path, [lg])
    assert c.clean_filthiest_log(now_ms=NOW)
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT
    end = lg.active_segment.base_offset
    assert path.read_text() == f"0\n1\nt 0 {end}\n"
    assert OffsetCheckpointFile(path).read() == {("t", 0): end}
    again = LogCleanerManager([tmp_path], lambda: [lg])
    assert again.checkpointed_offset(lg) == end
    # the same partition re-created under a new topic id starts dirty again
    lg2 = open_log(tmp_path / "new", "t-0", topic_id=2)
    assert again.checkpointed_offset(lg2) is None


def test_checkpoint_moves_down_when_the_log_is_truncated(tmp_path):
    lg = open_log(tmp_path)
    fill(lg, 300, keys=5)
    c = cleaner_for(tmp_path, [lg])
    assert c.clean_filthiest_log(now_ms=NOW)
    end = c.manager.checkpointed_offset(lg)
    lg.truncate_to(end - 40)
    c.manager.maybe_truncate_checkpoint(lg, end - 40)
    assert OffsetCheckpointFile(tmp_path / CLEANER_OFFSET_CHECKPOINT).read() == {("t", 0): end - 40}
    c.manager.maybe_truncate_checkpoint(lg, end)  # never moves up
    assert c.manager.checkpointed_offset(lg) == end - 40


def test_checkpoint_below_log_start_is_reset(tmp_path):
    lg = open_log(tmp_path, cleanup_policy="compact,delete", retention_ms=1000)
    fill(lg, 300, keys=5, ts=NOW - 60_000)
    fill(lg, 40, keys=5, start=1000)
    c = cleaner_for(tmp_path, [lg])
    c.manager._set_offset(lg, 2)
    assert lg.delete_retention_breached_segments(NOW) > 0  # retention of compact,delete moves the log start
    ltc = c.manager.log_to_clean(lg, NOW)
    assert ltc.first_dirty == lg.log_start_offset > 2
    c.manager.write_checkpoints()
    assert OffsetCheckpointFile(tmp_path / CLEANER_OFFSET_CHECKPOINT).read() == {("t", 0): lg.log_start_offset}


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path):
    lg = open_log(tmp_path, min_compaction_lag_ms=60_000)
    fill(lg, 200, keys=5, ts=NOW - 120_000)  # old enough
    lg.roll()
    young_start = lg.log_end_offset
    fill(lg, 200, keys=5, start=1000, ts=NOW)  # too young
    first_dirty, uncleanable, _ = LogCleanerManager.cleanable_offsets(lg, None, NOW)
    assert (first_dirty, uncleanable) == (0, young_start) and lg.active_segment.base_offset > young_start
    c = cleaner_for(tmp_path, [lg])
    young = [s.read_batch(0, s.size) for s in lg.segments if s.base_offset >= uncleanable]
    assert c.clean_filthiest_log(now_ms=NOW)
    assert c.manager.checkpointed_offset(lg) == uncleanable
    assert [s.read_batch(0, s.size) for s in lg.segments if s.base_offset >= uncleanable] == young


def test_max_compaction_lag_forces_a_log_below_the_ratio(tmp_path):
    lg = open_log(tmp_path, min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=60_000)
    fill(lg, 300, keys=5, ts=NOW - 120_000)
    c = cleaner_for(tmp_path, [lg])
    c.manager._set_offset(lg, lg.segments[1].base_offset)  # mostly clean: ratio well below 0.99
    ltc = c.manager.log_to_clean(lg, NOW)
    assert ltc.cleanable_ratio < 0.99 and ltc.need_compaction_now
    assert c.clean_filthiest_log(now_ms=NOW)
    assert c.max_compaction_delay_secs >= 59
    lg2 = open_log(tmp_path, "u-0", min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=600_000)
    fill(lg2, 300, keys=5, ts=NOW - 120_000)
    c2 = cleaner_for(tmp_path, [lg2])
    c2.manager._set_offset(lg2, lg2.segments[1].base_offset)
    assert not c2.clean_filthiest_log(now_ms=NOW)


def test_a_failing_log_is_marked_uncleanable(tmp_path):
    lg = open_log(tmp_path)
    fill(lg, 300, keys=5)
    seg = lg.segments[1]
    with open(seg.log_path, "r+b") as f:  # records section garbage with a valid header: a parse failure
        f.seek(61)
        f.write(b"\xff" * 12)
    c = cleaner_for(tmp_path, [lg])
    assert c.clean_filthiest_log(now_ms=NOW)
    assert c.uncleanable_partitions_count == 1 and not c.manager.in_progress
    assert not c.clean_filthiest_log(now_ms=NOW)
    assert not [f for f in lg.dir.iterdir() if f.name.endswith(".cleaned")]
    # the partition deleted and re-created under a new topic id is cleanable again
    fresh = open_log(tmp_path / "new", topic_id=9)
    fill(fresh, 300, keys=5)
    c2 = LogCleaner(CleanerConfig(), [tmp_path / "new"], lambda: [fresh])
    c2.manager.uncleanable = dict(c.manager.uncleanable)
    assert c2.clean_filthiest_log(now_ms=NOW) and c2.uncleanable_partitions_count == 0
    assert c2.manager.checkpointed_offset(fresh) == fresh.active_segment.base_offset


def test_cleaner_threads_on_an_event_loop_while_appending(tmp_path):
    lg = open_log(tmp_path)
    c = cleaner_for(tmp_path, [lg], backoff_ms=10)

    async def main() -> int:
        await c.start()
        deadline = time.monotonic() + 30
        i = 0
        while c.cleanings < 3:  # appends interleave with cleanings (swaps run on this loop)
            assert time.monotonic() < deadline, "the cleaner did not clean three times"
            fill(lg, 40, keys=7, start=i)
            lg.roll()
            i += 40
            await asyncio.sleep(0.01)
        await c.shutdown()
        return i

    n = asyncio.run(main())
    values = latest(lg)
    assert values == {b"k%03d" % k: b"v%06d" % max(j for j in range(n) if j % 7 == k) for k in range(7)}
    assert c.manager.checkpointed_offset(lg) > 0


def test_shutdown_aborts_a_slow_cleaning_promptly(tmp_path):
    lg = open_log(tmp_path)
    fill(lg, 600, keys=5)
    c = cleaner_for(tmp_path, [lg], backoff_ms=10, max_io_bytes_per_second=2000.0)  # would take ~30 s

    async def main() -> float:
        await c.start()
        deadline = time.monotonic() + 10
        while not c.manager.in_progress:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        t = time.monotonic()
        await c.shutdown()
        return time.monotonic() - t

    assert asyncio.run(main()) < 2.0
    assert c.cleanings == 0 and c.manager.checkpointed_offset(lg) is None
    assert not [f for f in lg.dir.iterdir() if f.name.endswith((".cleaned", ".swap"))]
    assert os.listdir(lg.dir)
