"""Fetch reads of a compacted log whose cleaned segments hold nothing but an empty batch (the retained last batch
of a cleaned group whose records were all superseded).

librdkafka doubles its per-partition fetch size for every response that delivers no record and, once that is
1 GiB, fails the partition with MSG_SIZE_TOO_LARGE ("Message at offset N might be too large to fetch"): eleven
record-less responses in one consumer's life are enough. A response therefore carries on into the next segment
when all it holds are empty batches, so a consumer gets a record (or the end of the log) in every response.
"""

from __future__ import annotations

from pathlib import Path

from strata.protocol.records import iter_batches, iter_records
from strata.storage.file_region import FileRegion
from strata.storage.log import UnifiedLog
from tests.unit.test_cleaner import clean, fill, latest_by_key, open_log


def cleaned_in_rounds(path: Path, rounds: int = 6) -> UnifiedLog:
    """Every round overwrites all keys of the rounds before it, then is cleaned on its own: each earlier
    round's segment keeps only its empty last batch."""
    log = open_log(path)
    for rnd in range(rounds):
        fill(log, 300, keys=20, start=rnd * 300, per_batch=3)
        log.roll()
        clean(log)
    return log


def consume(log: UnifiedLog, zero_copy_min: int = 0) -> tuple[list[tuple[int, bytes | None]], list[int]]:
    """Fetch from the log start up to the HW as librdkafka does; returns ((offset, key) delivered, the fetch
    offsets whose response held batches but no record at or after the fetch offset)."""
    f, out, recordless = log.log_start_offset, [], []
    while f < log.high_watermark:
        data = log.read_zero_copy(f, 1 << 20, log.high_watermark, True, zero_copy_min).records
        if isinstance(data, FileRegion):
            data = bytes(data)
        assert data, f"nothing below the HW at {f}"
        got, nxt = [], f
        for p, h in iter_batches(data):
            got += [(r.offset, r.key) for r in iter_records(data, p) if r.offset >= f]
            nxt = max(nxt, h.last_offset + 1)
        if not got:
            recordless.append(f)
        out += got
        f = nxt
    return out, recordless


def test_every_fetch_response_of_a_cleaned_log_delivers_records(tmp_path):
    log = cleaned_in_rounds(tmp_path / "t-0")
    only_empty = [s for s in log.segments if s.size and all(h.records_count == 0 for _, h in s.iter_headers())]
    assert len(only_empty) >= 3  # the case under test: segments that hold one empty batch and nothing else
    for zero_copy_min in (0, 1):
        got, recordless = consume(log, zero_copy_min)
        assert recordless == []
        assert [o for o, _ in got] == sorted({o for o, _ in got})
        assert {k: o for o, k in got} == {k: v[0] for k, v in latest_by_key(_all_records(log)).items()}


def test_follower_reads_still_get_every_batch(tmp_path):
    """A replica (no max offset) copies the log batch for batch: the empty batches are carried, not skipped."""
    log = cleaned_in_rounds(tmp_path / "t-0")
    on_disk = b"".join(s.read_batch(0, s.size) for s in log.segments)
    f, fetched = log.log_start_offset, b""
    while f < log.log_end_offset:
        data = bytes(log.read(f, 1 << 20).records)
        fetched += data
        f = max(h.last_offset for _, h in iter_batches(data)) + 1
    assert fetched == on_disk


def test_a_small_fetch_still_returns_whole_batches(tmp_path):
    """The carried empty batches count against max_bytes: a fetch never exceeds it (beyond one batch)."""
    log = cleaned_in_rounds(tmp_path / "t-0")
    data = log.read(0, 100).records
    assert 0 < len(data) <= 100 and sum(h.size for _, h in iter_batches(data)) == len(data)


def _all_records(log: UnifiedLog) -> list[tuple[int, bytes | None, bytes | None, int]]:
    out = []
    for s in log.segments:
        for p, _h in s.iter_headers():
            data = s.read_batch(p, _h.size)
            out += [(r.offset, r.key, r.value, r.timestamp) for r in iter_records(data, 0)]
    return out
