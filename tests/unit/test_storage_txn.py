"""Transactions in the log (issue 19's log layer): transactional batches and commit/abort markers, producer state
of open transactions, the LSO, the `.txnindex` in Kafka's format, and their recovery (snapshot reload, replay after
a crash, torn tails, truncation) -- on real files."""

from __future__ import annotations

import io
import os
import struct
import uuid
from pathlib import Path

import pytest

from strata.config import default_log_config
from strata.protocol.records import BatchHeader, build_batch, iter_batches, iter_records
from strata.protocol.txn_markers import build_end_txn_marker
from strata.storage.dump import dump_file
from strata.storage.file_region import FileRegion
from strata.storage.log import UnifiedLog
from strata.storage.producer_state import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
    read_snapshot,
)
from strata.storage.txn_index import ENTRY_SIZE, AbortedTxn

TID = uuid.UUID(int=19)
NOW = 1_800_000_000_000


def _open(d: Path, *, recover: bool = False, hw: int = 0, **cfg: int) -> UnifiedLog:
    return UnifiedLog.open(d, TID, default_log_config(**cfg), needs_recovery=recover, high_watermark=hw)


def _txn(pid: int, seq: int, n: int, epoch: int = 0) -> bytes:
    return build_batch(
        [b"p%d-%d" % (pid, seq + i) for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )


def _marker(pid: int, commit: bool, epoch: int = 0, coordinator_epoch: int = 1) -> bytes:
    return build_end_txn_marker(pid, epoch, commit=commit, coordinator_epoch=coordinator_epoch)


def _append_txn(log: UnifiedLog, pid: int, seq: int, n: int, epoch: int = 0) -> int:
    return log.append_as_leader(_txn(pid, seq, n, epoch), 0, verified_producers={pid}).first_offset


def _end(log: UnifiedLog, pid: int, commit: bool, **kw: int) -> int:
    return log.append_as_leader(_marker(pid, commit, **kw), 0, from_client=False).first_offset


def _replicate(log: UnifiedLog) -> None:
    log.update_high_watermark(log.log_end_offset)


def _interleaved(log: UnifiedLog) -> None:
    """offsets: 0 plain, 1-2 pid 7 (aborted by 6), 3 pid 8 (committed by 5), 4 plain, 5 commit 8, 6 abort 7,
    7-8 pid 9 (open)."""
    log.append_as_leader(build_batch([b"plain-0"]), 0)
    assert _append_txn(log, 7, 0, 2) == 1
    assert _append_txn(log, 8, 0, 1) == 3
    log.append_as_leader(build_batch([b"plain-4"]), 0)
    assert _end(log, 8, True) == 5
    assert _end(log, 7, False) == 6
    assert _append_txn(log, 9, 0, 2) == 7
    _replicate(log)


def test_lso_follows_the_earliest_open_transaction(tmp_path):
    log = _open(tmp_path / "t-0")
    log.append_as_leader(build_batch([b"a", b"b"]), 0)
    _replicate(log)
    assert log.last_stable_offset == log.high_watermark == 2
    _append_txn(log, 7, 0, 3)  # 2..4
    _append_txn(log, 8, 0, 1)  # 5
    _replicate(log)
    assert (log.last_stable_offset, log.high_watermark) == (2, 6)
    assert log.producer_state.ongoing_txns == {2: 7, 5: 8}
    _end(log, 8, True)  # 6: the later one ends first: the LSO stays at 2
    _replicate(log)
    assert log.last_stable_offset == 2
    _end(log, 7, False)  # 7: the marker is not replicated yet: still unstable
    assert log.last_stable_offset == 2 and log.high_watermark == 7
    _replicate(log)
    assert log.last_stable_offset == log.high_watermark == 8
    assert log.first_unstable_offset is None
    # the abort's index entry: its LSO is the offset after its marker (no other transaction was open)
    assert log.collect_aborted_transactions(0, 8) == [AbortedTxn(7, 2, 7, 8)]


def test_lso_never_passes_the_hw_nor_falls_below_the_log_start(tmp_path):
    log = _open(tmp_path / "t-0")
    _append_txn(log, 7, 0, 2)
    log.append_as_leader(build_batch([b"a", b"b"]), 0)
    assert log.last_stable_offset == log.high_watermark == 0  # nothing replicated yet
    _replicate(log)
    assert log.last_stable_offset == 0
    log.delete_records(3)  # DeleteRecords past the open transaction's start (as Kafka allows, up to the HW)
    assert log.last_stable_offset == 3 and log.log_start_offset == 3


def test_abort_entry_records_the_lso_of_other_open_transactions(tmp_path):
    log = _open(tmp_path / "t-0")
    _interleaved(log)
    # when 7 aborted at 6, producer 9 had not started: the LSO was 7; 8 had committed already
    assert log.collect_aborted_transactions(0, 9) == [AbortedTxn(7, 1, 6, 7)]
    assert log.last_stable_offset == 7
    data = (log.dir / "00000000000000000000.txnindex").read_bytes()
    assert data == struct.pack(">hqqqq", 0, 7, 1, 6, 7) and len(data) == ENTRY_SIZE == 34
    # a range wholly before the aborted transaction, or after its marker, needs no entry
    assert log.collect_aborted_transactions(0, 1) == []
    assert log.collect_aborted_transactions(7, 9) == []


def test_control_batches_are_read_with_the_data(tmp_path):
    log = _open(tmp_path / "t-0")
    _interleaved(log)
    got = log.read(0, 1 << 20, log.last_stable_offset)
    kinds = [(h.base_offset, h.is_control, h.is_transactional) for _, h in iter_batches(got.records)]
    assert kinds == [(0, False, False), (1, False, True), (3, False, True), (4, False, False), (5, True, True)] + [
        (6, True, True)
    ]
    assert log.aborted_transactions_for(got) == [AbortedTxn(7, 1, 6, 7)]
    # a read of offsets 0..3 only: the abort overlaps it too (its data is there)
    part = log.read(0, 1 << 20, 4)
    assert log.aborted_transactions_for(part) == [AbortedTxn(7, 1, 6, 7)]
    assert log.aborted_transactions_for(log.read(0, 1 << 20, 1)) == []
    # zero-copy reads (a FileRegion, not read yet) answer the same aborted transactions, and hold the same bytes
    region = log.read_zero_copy(0, 1 << 20, 4, True, zero_copy_min=1)
    assert isinstance(region.records, FileRegion) and bytes(region.records) == bytes(part.records)
    assert log.aborted_transactions_for(region) == [AbortedTxn(7, 1, 6, 7)]
    assert log.aborted_transactions_for(log.read_zero_copy(0, 1 << 20, 1, True, zero_copy_min=1)) == []


def test_unverified_transactional_batch_is_refused(tmp_path):
    log = _open(tmp_path / "t-0")
    with pytest.raises(InvalidTxnStateError):
        log.append_as_leader(_txn(7, 0, 1), 0)
    assert log.log_end_offset == 0
    _append_txn(log, 7, 0, 1)
    log.append_as_leader(_txn(7, 1, 1), 0)  # inside its open transaction: no new verification needed
    with pytest.raises(InvalidTxnStateError):  # a non-transactional write while its transaction is open
        log.append_as_leader(build_batch([b"x"], producer_id=7, producer_epoch=0, base_sequence=2), 0)
    assert log.log_end_offset == 2


def test_marker_validation(tmp_path):
    log = _open(tmp_path / "t-0")
    _append_txn(log, 7, 0, 1, epoch=3)
    with pytest.raises(InvalidProducerEpochError):
        _end(log, 7, True, epoch=2)
    _end(log, 7, True, epoch=3, coordinator_epoch=5)
    _append_txn(log, 7, 1, 1, epoch=3)
    with pytest.raises(TransactionCoordinatorFencedError):
        _end(log, 7, False, epoch=3, coordinator_epoch=4)
    _end(log, 7, False, epoch=3, coordinator_epoch=5)
    assert log.producer_state.producers[7].coordinator_epoch == 5
    # a marker for a producer with no open transaction completes nothing
    _end(log, 7, False, epoch=3, coordinator_epoch=5)
    assert [t.last_offset for t in log.collect_aborted_transactions(0, 100)] == [3]


def test_snapshot_carries_the_open_transaction(tmp_path):
    d = tmp_path / "t-0"
    log = _open(d)
    _interleaved(log)
    log.close()
    snap = read_snapshot(d / f"{9:020d}.snapshot")
    assert {e.producer_id: e.current_txn_first_offset for e in snap} == {7: -1, 8: -1, 9: 7}
    log = _open(d, hw=9)
    assert log.producer_state.ongoing_txns == {7: 9}
    assert log.last_stable_offset == 7
    _end(log, 9, False)
    _replicate(log)
    assert log.last_stable_offset == 10
    assert log.collect_aborted_transactions(0, 10) == [AbortedTxn(7, 1, 6, 7), AbortedTxn(9, 7, 9, 10)]


def _crash_copy(src: Path, dst: Path, keep_snapshots: bool = False) -> None:
    """The files as a kill -9 leaves them: no shutdown snapshot at the log end."""
    dst.mkdir()
    for f in src.iterdir():
        if f.name.endswith(".snapshot") and not keep_snapshots:
            continue
        (dst / f.name).write_bytes(f.read_bytes())


def test_recovery_rebuilds_open_transactions_and_the_txnindex(tmp_path):
    src = tmp_path / "a-0"
    log = _open(src, segment_bytes=400)  # several segments
    _interleaved(log)
    for pid in (10, 11):
        _append_txn(log, pid, 0, 1)
    _end(log, 10, False)
    _end(log, 9, False)
    _replicate(log)
    expected = log.collect_aborted_transactions(0, log.log_end_offset)
    assert len(expected) == 3 and log.num_segments > 2
    lso, leo = log.last_stable_offset, log.log_end_offset
    txnindex = {f.name: f.read_bytes() for f in src.glob("*.txnindex")}
    dst = tmp_path / "b-0"
    _crash_copy(src, dst)
    for f in dst.glob("*.txnindex"):
        f.write_bytes(b"garbage-that-replay-replaces"[: len(f.read_bytes())])
    got = _open(dst, recover=True, hw=leo)
    assert got.log_end_offset == leo
    assert got.collect_aborted_transactions(0, leo) == expected
    assert got.producer_state.ongoing_txns == log.producer_state.ongoing_txns == {10: 11}
    assert got.last_stable_offset == lso == 10
    assert {f.name: f.read_bytes() for f in dst.glob("*.txnindex")} == txnindex


def test_torn_tail_drops_the_marker_and_reopens_the_transaction(tmp_path):
    src = tmp_path / "a-0"
    log = _open(src)
    _interleaved(log)
    _end(log, 9, False)  # offset 9, the last batch
    _replicate(log)
    assert log.last_stable_offset == 10
    dst = tmp_path / "b-0"
    _crash_copy(src, dst)
    seg = dst / "00000000000000000000.log"
    os.truncate(seg, seg.stat().st_size - 5)  # tear the abort marker of producer 9
    idx = dst / "00000000000000000000.txnindex"
    idx.write_bytes(idx.read_bytes() + b"\x00\x00\x00")  # and a torn index entry
    got = _open(dst, recover=True, hw=10)
    assert got.log_end_offset == 9
    assert got.producer_state.ongoing_txns == {7: 9}
    assert got.last_stable_offset == 7
    assert got.collect_aborted_transactions(0, 9) == [AbortedTxn(7, 1, 6, 7)]
    assert idx.stat().st_size == ENTRY_SIZE


def test_truncation_removes_index_entries_and_reopens_transactions(tmp_path):
    log = _open(tmp_path / "t-0")
    _interleaved(log)
    assert log.truncate_to(6)  # the abort marker of 7 goes
    assert log.collect_aborted_transactions(0, 100) == []
    assert log.producer_state.ongoing_txns == {1: 7}
    assert log.last_stable_offset == 1
    assert not (log.dir / "00000000000000000000.txnindex").read_bytes()
    _end(log, 7, False)
    _replicate(log)
    assert log.collect_aborted_transactions(0, 100) == [AbortedTxn(7, 1, 6, 7)]


def test_follower_append_builds_the_same_index(tmp_path):
    leader = _open(tmp_path / "l-0")
    _interleaved(leader)
    follower = _open(tmp_path / "f-0")
    follower.append_as_follower(leader.read(0, 1 << 20).records)
    assert follower.collect_aborted_transactions(0, 100) == leader.collect_aborted_transactions(0, 100)
    assert follower.producer_state.ongoing_txns == {7: 9}


def test_txnindex_goes_with_its_segment(tmp_path):
    log = _open(tmp_path / "t-0", segment_bytes=300)
    _interleaved(log)
    log.roll()
    log.append_as_leader(build_batch([b"x"]), 0)
    _replicate(log)
    marker_seg = next(s for s in log.segments if s.base_offset <= 6 < s.next_offset)
    path = marker_seg.txn_index.path
    assert path.exists()
    log.delete_records(marker_seg.next_offset)
    assert not path.exists()
    assert log.collect_aborted_transactions(0, 100) == []


def test_dump_log_decodes_markers_and_txnindex(tmp_path):
    log = _open(tmp_path / "t-0")
    _interleaved(log)
    log.flush()
    out, err = io.StringIO(), io.StringIO()
    dump_file(log.dir / "00000000000000000000.txnindex", out, err)
    assert "version: 0 producerId: 7 firstOffset: 1 lastOffset: 6 lastStableOffset: 7" in out.getvalue()
    out = io.StringIO()
    dump_file(log.dir / "00000000000000000000.log", out, err, deep_iteration=True)
    text = out.getvalue()
    assert "isControl: true" in text and "endTxnMarker: ABORT coordinatorEpoch: 1" in text
    assert "endTxnMarker: COMMIT coordinatorEpoch: 1" in text
    assert BatchHeader(log.read(5, 100).records).is_control


def test_abort_marker_in_a_later_segment_is_found_for_an_earlier_range(tmp_path):
    log = _open(tmp_path / "t-0")
    _append_txn(log, 7, 0, 2)  # 0-1
    log.roll()
    log.append_as_leader(build_batch([b"x"]), 0)  # 2
    log.roll()
    _end(log, 7, False)  # 3, two segments later
    _replicate(log)
    first = log.read(0, 1 << 20, log.last_stable_offset)
    assert [h.base_offset for _, h in iter_batches(first.records)] == [0]  # one segment per read
    assert log.aborted_transactions_for(first) == [AbortedTxn(7, 0, 3, 4)]
    assert log.collect_aborted_transactions(2, 3) == [AbortedTxn(7, 0, 3, 4)]


def _committed_view(log: UnifiedLog) -> dict[bytes | None, bytes | None]:
    """What a READ_COMMITTED reader ends with per key: records of aborted transactions dropped, markers skipped."""
    out: dict[bytes | None, bytes | None] = {}
    off, lso = log.log_start_offset, log.last_stable_offset
    while off < lso:
        data = log.read(off, 1 << 24, lso)
        aborted = log.aborted_transactions_for(data)
        for pos, h in iter_batches(data.records):
            off = h.last_offset + 1
            if h.is_control:
                continue
            if h.is_transactional and any(
                t.producer_id == h.producer_id and t.first_offset <= h.base_offset <= t.last_offset for t in aborted
            ):
                continue
            for r in iter_records(data.records, pos):
                out[r.key] = r.value
    return out


def _batches(log: UnifiedLog) -> list[BatchHeader]:
    return [h for seg in log.segments for _, h in seg.iter_headers()]


def test_compaction_keeps_transaction_semantics(tmp_path):
    from strata.storage.cleaner import Cleaner

    log = _open(tmp_path / "t-0", cleanup_policy="compact")
    log.append_as_leader(build_batch([(b"k", b"plain-old")]), 0)  # 0
    log.append_as_leader(
        build_batch([(b"k", b"committed")], producer_id=8, producer_epoch=0, base_sequence=0, is_transactional=True),
        0,
        verified_producers={8},
    )  # 1
    log.append_as_leader(
        build_batch([(b"k", b"aborted")], producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True),
        0,
        verified_producers={7},
    )  # 2: the latest value of k in the log, but aborted
    _end(log, 8, True)  # 3
    _end(log, 7, False)  # 4
    log.roll()
    log.append_as_leader(build_batch([(b"o", b"x")]), 0)  # 5
    log.roll()
    log.append_as_leader(build_batch([(b"o", b"y")]), 0)  # 6 (active)
    _replicate(log)
    before = _committed_view(log)
    assert before == {b"k": b"committed", b"o": b"y"}
    retention = log.config.values["delete.retention.ms"]
    t0 = NOW

    def clean(now: int) -> list[tuple[int, int, bool]]:
        Cleaner(1 << 20).clean(log, 0, log.active_segment.base_offset, now)
        assert _committed_view(log) == before
        return [(h.base_offset, h.records_count, h.is_control) for h in _batches(log) if h.base_offset < 5]

    # pass 1: the aborted record is gone (it never entered the offset map, so the committed value survives and the
    # older plain one is compacted away); its batch stays as an empty header, being producer 7's last data batch
    # (as Kafka keeps it for producer state); both markers stay, this pass having seen data of both transactions
    assert clean(t0) == [(1, 1, False), (2, 0, False), (3, 1, True), (4, 1, True)]
    assert log.collect_aborted_transactions(0, 7) == [AbortedTxn(7, 2, 4, 5)]  # carried into the cleaned segment
    assert (log.dir / "00000000000000000000.txnindex").read_bytes() == AbortedTxn(7, 2, 4, 5).encode()
    # pass 2, the producers expired: the empty batch goes; the marker stays while a pass still sees its data
    log.remove_expired_producers(t0, 0)
    assert clean(t0 + 1) == [(1, 1, False), (3, 1, True), (4, 1, True)]
    # pass 3: no data of 7 left: its marker gets a delete horizon (KIP-534), its index entry goes
    assert clean(t0 + 2) == [(1, 1, False), (3, 1, True), (4, 1, True)]
    marker7 = next(h for h in _batches(log) if h.base_offset == 4)
    assert marker7.attributes & 0x40 and marker7.base_timestamp == t0 + 2 + retention
    assert log.collect_aborted_transactions(0, 7) == []
    # pass 4, before the horizon: still there; after it: gone. 8's commit marker stays with its data
    assert clean(t0 + 1 + retention) == [(1, 1, False), (3, 1, True), (4, 1, True)]
    assert clean(t0 + 2 + retention) == [(1, 1, False), (3, 1, True)]
    log.close()
    again = _open(tmp_path / "t-0", recover=True, hw=7)
    assert _committed_view(again) == before


KILLED_WRITER = """
import os, signal, sys, uuid
sys.path.insert(0, sys.argv[2])
from strata.config import default_log_config
from strata.protocol.records import build_batch
from strata.protocol.txn_markers import build_end_txn_marker
from strata.storage.log_manager import LogManager
cfg = default_log_config(segment_bytes=2048)
lm = LogManager([sys.argv[1]], lambda t: cfg)
lm.startup()
log = lm.get_or_create_log("txn", 0, uuid.UUID(int=19), cfg)
for i in range(40):  # producer 100 + i: committed when i % 3 == 1, producer 138 left open, the others aborted
    pid = 100 + i
    log.append_as_leader(
        build_batch([b"v%d" % i] * 2, producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True),
        0,
        verified_producers={pid},
    )
    log.append_as_leader(build_batch([b"plain"]), 0)
    if i % 3 != 2 or i < 38:
        log.append_as_leader(build_end_txn_marker(pid, 0, commit=i % 3 == 1, coordinator_epoch=0), 0, from_client=False)
print(log.log_end_offset, log.last_stable_offset, flush=True)
print(sorted(log.producer_state.ongoing_txns.items()), flush=True)
print(log.collect_aborted_transactions(0, log.log_end_offset), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_kill_dash_nine_recovery_rebuilds_transactions(tmp_path):
    import signal
    import subprocess
    import sys

    from strata.storage.log_manager import LogManager

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER, str(tmp_path), str(root)], capture_output=True, timeout=60, text=True
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    ends, ongoing, aborted = proc.stdout.splitlines()
    leo = ends.split()[0]
    cfg = default_log_config(segment_bytes=2048)
    lm = LogManager([tmp_path], lambda t: cfg)
    lm.startup()  # no clean shutdown: recovery replays the log after the newest snapshot
    try:
        log = lm.get_log("txn", 0)
        assert log is not None and log.num_segments > 3
        assert log.log_end_offset == int(leo)
        assert str(sorted(log.producer_state.ongoing_txns.items())) == ongoing
        assert [pid for _, pid in log.producer_state.ongoing_txns.items()] == [138]
        got = log.collect_aborted_transactions(0, log.log_end_offset)
        assert str(got) == aborted and len(got) == 26
        log.update_high_watermark(log.log_end_offset)
        assert log.last_stable_offset == min(log.producer_state.ongoing_txns)
    finally:
        lm.shutdown()


def test_a_damaged_txnindex_is_cut_at_the_first_bad_entry(tmp_path):
    d = tmp_path / "t-0"
    log = _open(d)
    _interleaved(log)
    _end(log, 9, False)
    log.close()
    idx = d / "00000000000000000000.txnindex"
    good = idx.read_bytes()
    assert len(good) == 2 * ENTRY_SIZE
    idx.write_bytes(good[:ENTRY_SIZE] + struct.pack(">h", 7) + good[ENTRY_SIZE + 2 :] + good[:ENTRY_SIZE])
    again = _open(d, hw=10)  # loads; what follows the unknown version is dropped
    assert again.collect_aborted_transactions(0, 10) == [AbortedTxn(7, 1, 6, 7)]
    assert idx.read_bytes() == good[:ENTRY_SIZE]
