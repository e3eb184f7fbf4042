"""Idempotent-producer state: sequence/epoch rules, dedupe of the last 5 batches, Kafka's snapshot format,
snapshots at roll/close, recovery (snapshot + replay, after crash and truncation), expiry, producer id blocks."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from crc32c import crc32c

from strata.config import default_log_config
from strata.protocol.records import build_batch, iter_batches, iter_records
from strata.storage.log import UnifiedLog
from strata.storage.producer_state import (
    BatchMetadata,
    CorruptSnapshotError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerStateEntry,
    ProducerStateManager,
    decode_snapshot,
    encode_snapshot,
    read_snapshot,
)

NOW = int(time.time() * 1000)
TID = uuid.UUID(int=7)
PID = 4000
INT32_MAX = 2**31 - 1


def open_log(tmp_path: Path, needs_recovery: bool = False, **cfg_kw) -> UnifiedLog:
    cfg_kw.setdefault("segment_bytes", 1024)
    cfg_kw.setdefault("index_interval_bytes", 128)
    return UnifiedLog.open(tmp_path / "idem-0", TID, default_log_config(**cfg_kw), needs_recovery=needs_recovery)


def pbatch(
    seq: int, n: int = 2, pid: int = PID, epoch: int = 0, ts: int = NOW, txn: bool = False, tag: str = ""
) -> bytes:
    return build_batch(
        [f"{tag}p{pid}e{epoch}s{seq}+{i}".encode().ljust(30, b".") for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        timestamp=ts,
        is_transactional=txn,
    )


def values(log: UnifiedLog) -> list[bytes | None]:
    data = log.read(log.log_start_offset, 1 << 30).records
    return [r.value for p, _ in iter_batches(data) for r in iter_records(data, p)]


def state(log: UnifiedLog) -> dict[int, tuple]:
    """Comparable producer state: epoch, coordinator epoch, last timestamp and batch metadata per producer id."""
    return {
        pid: (e.producer_epoch, e.coordinator_epoch, e.last_timestamp, tuple(e.batches))
        for pid, e in log.producer_state.producers.items()
    }


# ---------------------------------------------------------------------------------------------------------------
# sequence and epoch rules


def test_in_order_sequences_are_appended_and_tracked(tmp_path):
    log = open_log(tmp_path)
    assert log.append_as_leader(pbatch(0, 3), 0).first_offset == 0
    assert log.append_as_leader(pbatch(3, 2), 0).first_offset == 3
    e = log.producer_state.last_entry(PID)
    assert (e.producer_epoch, e.first_seq, e.last_seq, e.last_data_offset) == (0, 0, 4, 4)
    assert [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in e.batches] == [(0, 2, 0, 2), (3, 4, 3, 4)]


def test_sequence_gap_is_out_of_order_and_writes_nothing(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(pbatch(0, 2), 0)
    with pytest.raises(OutOfOrderSequenceError) as ei:
        log.append_as_leader(pbatch(3, 1), 0)  # expected 2
    assert ei.value.error_code == 45
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(pbatch(1, 2), 0)  # overlaps, not a duplicate of a whole batch
    assert log.log_end_offset == 2
    assert log.producer_state.last_entry(PID).last_seq == 1
    assert log.append_as_leader(pbatch(2, 1), 0).first_offset == 2


def test_older_epoch_is_invalid_producer_epoch(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(pbatch(0, 1, epoch=3), 0)
    with pytest.raises(InvalidProducerEpochError) as ei:
        log.append_as_leader(pbatch(1, 1, epoch=2), 0)
    assert ei.value.error_code == 47
    assert log.log_end_offset == 1


def test_new_epoch_must_start_at_sequence_zero(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(pbatch(0, 5, epoch=0), 0)
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(pbatch(5, 1, epoch=1), 0)
    assert log.append_as_leader(pbatch(0, 1, epoch=1), 0).first_offset == 5
    e = log.producer_state.last_entry(PID)
    assert (e.producer_epoch, e.last_seq, len(e.batches)) == (1, 0, 1)  # a new epoch forgets the old batches
    with pytest.raises(InvalidProducerEpochError):  # and fences the old epoch
        log.append_as_leader(pbatch(5, 1, epoch=0), 0)


def test_unknown_producer_may_start_at_any_sequence(tmp_path):
    """Kafka >= 2.5 (KIP-360): no UNKNOWN_PRODUCER_ID; a producer id without state (new, expired, or whose data
    retention removed) is accepted at any sequence, and from then on must be contiguous."""
    log = open_log(tmp_path)
    assert log.append_as_leader(pbatch(42, 2, pid=77), 0).first_offset == 0
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(pbatch(45, 1, pid=77), 0)
    assert log.append_as_leader(pbatch(44, 1, pid=77), 0).first_offset == 2


def test_sequence_wraps_after_int32_max(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(pbatch(INT32_MAX - 1, 3), 0)  # sequences MAX-1, MAX, 0
    assert log.producer_state.last_entry(PID).last_seq == 0
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(pbatch(0, 1), 0)
    assert log.append_as_leader(pbatch(1, 1), 0).first_offset == 3
    # a batch ending exactly at MAX is followed by 0
    log.append_as_leader(pbatch(INT32_MAX - 1, 2, pid=9), 0)
    assert log.append_as_leader(pbatch(0, 1, pid=9), 0).first_offset == 6


def test_several_batches_of_one_append_are_validated_in_order(tmp_path):
    log = open_log(tmp_path)
    ok = pbatch(0, 2) + pbatch(2, 3) + pbatch(0, 1, pid=5)
    info = log.append_as_leader(ok, 0)
    assert (info.first_offset, info.last_offset, info.duplicate) == (0, 5, False)
    assert log.producer_state.last_entry(PID).last_seq == 4
    bad = pbatch(5, 1) + pbatch(7, 1)  # the second one has a gap
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(bad, 0)
    assert log.log_end_offset == 6 and log.producer_state.last_entry(PID).last_seq == 4


def test_transactional_batches_from_clients_are_refused(tmp_path):
    log = open_log(tmp_path)
    with pytest.raises(InvalidTxnStateError) as ei:
        log.append_as_leader(pbatch(0, 1, txn=True), 0)
    assert ei.value.error_code == 48 and log.log_end_offset == 0


def test_batches_without_producer_id_are_untouched(tmp_path):
    log = open_log(tmp_path)
    plain = build_batch([b"a", b"b"], timestamp=NOW)
    log.append_as_leader(plain, 0)
    log.append_as_leader(plain, 0)  # no dedupe without a producer id
    assert log.log_end_offset == 4 and len(log.producer_state) == 0


# ---------------------------------------------------------------------------------------------------------------
# dedupe


def test_each_of_the_last_five_batches_is_deduplicated_with_its_original_offsets(tmp_path):
    log = open_log(tmp_path, segment_bytes=1 << 20)
    sent = []
    seq = 0
    for i in range(6):
        n = i + 1
        b = pbatch(seq, n)
        info = log.append_as_leader(b, 0)
        sent.append((b, info.first_offset, info.last_offset))
        seq += n
    leo, before = log.log_end_offset, values(log)
    for b, first, last in sent[1:]:  # the last 5
        info = log.append_as_leader(b, 0)
        assert info.duplicate and (info.first_offset, info.last_offset) == (first, last)
        assert (info.record_count, info.valid_bytes) == (0, 0)
        assert info.log_append_time == info.max_timestamp == NOW  # Kafka: the batch's timestamp
    assert log.log_end_offset == leo and values(log) == before
    # the 6th newest is no longer remembered: it is out of order, not a duplicate
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(sent[0][0], 0)
    # a retry inside a multi-batch request: nothing of the request is written, the duplicate's offsets answered
    info = log.append_as_leader(pbatch(seq, 1, pid=99) + sent[-1][0], 0)
    assert info.duplicate and info.first_offset == sent[-1][1] and log.log_end_offset == leo
    assert log.producer_state.last_entry(99) is None


def test_same_sequences_under_another_epoch_are_not_duplicates(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(pbatch(0, 2, epoch=0), 0)
    info = log.append_as_leader(pbatch(0, 2, epoch=1), 0)
    assert not info.duplicate and info.first_offset == 2


def test_duplicate_on_a_log_append_time_topic_answers_the_original_append_time(tmp_path):
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    b = pbatch(0, 2)
    first = log.append_as_leader(b, 0, now_ms=NOW + 5)
    again = log.append_as_leader(b, 0, now_ms=NOW + 999)
    assert again.duplicate and again.first_offset == 0 and again.log_append_time == first.log_append_time == NOW + 5


def test_coordinator_appends_check_the_epoch_but_not_sequences(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(pbatch(0, 1, epoch=2), 0, from_client=False)
    assert log.append_as_leader(pbatch(9, 1, epoch=2), 0, from_client=False).first_offset == 1
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(pbatch(10, 1, epoch=1), 0, from_client=False)


def test_follower_appends_update_state_without_validation(tmp_path):
    leader = open_log(tmp_path / "l")
    for seq in (0, 2, 4):
        leader.append_as_leader(pbatch(seq, 2), 0)
    follower = open_log(tmp_path / "f")
    follower.append_as_follower(leader.read(0, 1 << 20).records)
    assert state(follower) == state(leader)
    assert follower.producer_state.map_end_offset == 6
    # the follower, once leader, deduplicates a retry of the last batch
    assert follower.append_as_leader(pbatch(4, 2), 0).duplicate


# ---------------------------------------------------------------------------------------------------------------
# snapshot format


def test_snapshot_golden_bytes_follow_kafkas_producer_snapshot_v1_schema():
    e1 = ProducerStateEntry(1, 0, -1, 1_700_000_000_000)
    e1.batches.append(BatchMetadata(last_seq=9, last_offset=109, offset_delta=4, timestamp=1_700_000_000_000))
    e2 = ProducerStateEntry(7, 3, 5, -1)  # epoch known, no batch retained
    body = bytes.fromhex(
        "00000002"  # ProducerEntries: 2 (int32)
        "0000000000000001"
        "0000"
        "00000009"
        "000000000000006d"
        "00000004"
        "0000018bcfe56800"
        "ffffffff"
        "ffffffffffffffff"
        "0000000000000007"
        "0003"
        "ffffffff"
        "ffffffffffffffff"
        "00000000"
        "ffffffffffffffff"
        "00000005"
        "ffffffffffffffff"
    )
    # Version int16 = 1, then Crc uint32 = CRC32C of everything after the CRC field
    expected = bytes.fromhex("0001") + crc32c(body).to_bytes(4, "big") + body
    assert encode_snapshot([e2, e1]) == expected  # entries in producer id order
    back = decode_snapshot(expected)
    assert [
        (
            e.producer_id,
            e.producer_epoch,
            e.coordinator_epoch,
            e.last_timestamp,
            e.current_txn_first_offset,
            list(e.batches),
        )
        for e in back
    ] == [(1, 0, -1, 1_700_000_000_000, -1, [BatchMetadata(9, 109, 4, 1_700_000_000_000)]), (7, 3, 5, -1, -1, [])]
    assert back[0].first_seq == 5 and back[0].batches[0].first_offset == 105


def test_snapshot_decode_rejects_corruption():
    e = ProducerStateEntry(3, 1, -1, NOW)
    e.batches.append(BatchMetadata(4, 10, 0, NOW))
    good = encode_snapshot([e])
    assert len(good) == 2 + 4 + 4 + 46
    flipped = bytearray(good)
    flipped[20] ^= 1
    for bad in (bytes(flipped), b"\x00\x02" + good[2:], good[:-1], good + b"\x00", b"\x00\x01"):
        with pytest.raises(CorruptSnapshotError):
            decode_snapshot(bad)
    assert decode_snapshot(encode_snapshot([])) == []


def test_snapshots_at_roll_and_clean_close_and_reload(tmp_path):
    log = open_log(tmp_path)
    seq = 0
    while log.num_segments < 3:
        log.append_as_leader(pbatch(seq, 4) + pbatch(seq // 4, 1, pid=11), 0)
        seq += 4
    bases = [s.base_offset for s in log.segments]
    psm = log.producer_state
    assert psm.snapshot_offsets == bases[1:]  # one per rolled-to segment base
    for off in bases[1:]:
        path = psm.snapshot_file(off)
        assert path.name == f"{off:020d}.snapshot" and path.exists()
    # the snapshot at a base holds exactly the batches below it
    snap = {e.producer_id: e for e in read_snapshot(psm.snapshot_file(bases[2]))}
    assert snap[PID].last_data_offset == bases[2] - 2 and snap[11].last_data_offset == bases[2] - 1
    assert sorted(p.name for p in psm.take_unflushed_snapshots()) == [f"{b:020d}.snapshot" for b in bases[1:]]
    before, leo = state(log), log.log_end_offset
    log.close()
    assert (log.dir / f"{leo:020d}.snapshot").exists()  # clean shutdown: snapshot at the LEO
    reopened = open_log(tmp_path)
    assert reopened.producer_state.map_end_offset == leo
    # the file keeps only the last batch per producer (Kafka's format): compare those
    assert {pid: (s[0], s[3][-1:]) for pid, s in state(reopened).items()} == {
        pid: (s[0], s[3][-1:]) for pid, s in before.items()
    }
    assert reopened.append_as_leader(pbatch(seq - 4, 4), 0).duplicate
    assert reopened.append_as_leader(pbatch(seq, 1), 0).first_offset == leo


def test_flush_fsyncs_the_snapshots_written_at_roll(tmp_path, monkeypatch):
    log = open_log(tmp_path)
    seq = 0
    while log.num_segments < 3:
        log.append_as_leader(pbatch(seq, 3), 0)
        seq += 3
    synced = []
    monkeypatch.setattr(ProducerStateManager, "fsync_snapshots", staticmethod(lambda paths: synced.extend(paths)))
    log.flush()
    assert sorted(p.name for p in synced) == [f"{o:020d}.snapshot" for o in log.producer_state.snapshot_offsets]
    log.flush()
    assert len(synced) == 2  # each one once


def test_crash_recovery_replays_after_the_latest_snapshot(tmp_path):
    log = open_log(tmp_path, segment_bytes=2048)
    seq = 0
    sent = []
    while log.num_segments < 3 or sum(1 for _ in log.active_segment.iter_headers()) < 5:
        b = pbatch(seq, 3)
        sent.append((b, log.append_as_leader(b, 0).first_offset))
        seq += 3
    log.append_as_leader(pbatch(0, 2, pid=12), 0)
    before, leo = state(log), log.log_end_offset
    # crash: no close(); the roll snapshots are there, the active segment must be replayed
    reopened = open_log(tmp_path, needs_recovery=True)
    assert state(reopened) == before  # all 5 batches rebuilt by the replay
    for b, first in sent[-5:]:
        info = reopened.append_as_leader(b, 0)
        assert info.duplicate and info.first_offset == first
    assert reopened.log_end_offset == leo
    assert (reopened.dir / f"{leo:020d}.snapshot").exists()  # the rebuild ends with a snapshot


def test_corrupt_latest_snapshot_falls_back_to_an_older_one(tmp_path):
    log = open_log(tmp_path)
    seq = 0
    while log.num_segments < 4:
        log.append_as_leader(pbatch(seq, 3), 0)
        seq += 3
    before = state(log)
    latest = log.producer_state.latest_snapshot_offset
    path = log.producer_state.snapshot_file(latest)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    reopened = open_log(tmp_path, needs_recovery=True)
    assert state(reopened) == before  # older snapshot + a longer replay
    assert latest not in reopened.producer_state.snapshot_offsets and not path.exists()
    assert {e.producer_id for e in read_snapshot(reopened.producer_state.snapshot_file(reopened.log_end_offset))} == {
        PID
    }


def test_truncation_rebuilds_state_from_the_log(tmp_path):
    log = open_log(tmp_path)
    offsets = []
    seq = 0
    while log.num_segments < 3:
        offsets.append(log.append_as_leader(pbatch(seq, 3), 0).first_offset)
        seq += 3
    cut = offsets[-4]  # drop the last 4 batches
    assert log.truncate_to(cut)
    e = log.producer_state.last_entry(PID)
    assert e.last_data_offset == cut - 1 and e.last_seq == 3 * (len(offsets) - 4) - 1
    assert all(o <= cut for o in log.producer_state.snapshot_offsets)
    # the first truncated batch is new again (not a duplicate), the one before it is a duplicate
    assert log.append_as_leader(pbatch(e.last_seq - 2, 3), 0).duplicate
    assert log.append_as_leader(pbatch(e.last_seq + 1, 3), 0).first_offset == cut
    # truncating below the first segment empties the state and every snapshot
    log.truncate_to(0)
    assert len(log.producer_state) == 0 and log.producer_state.snapshot_offsets == []


def test_retention_deletes_snapshots_with_their_segments(tmp_path):
    log = open_log(tmp_path, retention_ms=1000)
    seq = 0
    old = NOW - 60_000
    while log.num_segments < 5:
        log.append_as_leader(pbatch(seq, 3, ts=old), 0)
        seq += 3
    log.update_high_watermark(log.log_end_offset)
    log.append_as_leader(pbatch(seq, 1), 0)  # a fresh active segment
    log.roll()
    log.append_as_leader(pbatch(seq + 1, 1), 0)
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_retention_breached_segments(NOW) == 4  # the one holding a fresh batch stays
    start = log.log_start_offset
    assert min(log.producer_state.snapshot_offsets) >= start
    on_disk = sorted(int(p.name[:20]) for p in log.dir.glob("*.snapshot"))
    assert on_disk == log.producer_state.snapshot_offsets
    assert len(on_disk) <= log.num_segments
    # producer state itself survives retention (Kafka >= 2.4): the next batch must still follow
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(pbatch(seq + 5, 1), 0)


def test_clean_open_without_snapshots_skips_the_scan(tmp_path):
    """A log written before producer state existed (clean shutdown, no .snapshot file): like Kafka's upgrade path,
    snapshots of the empty state are written at the last two segment bases and the LEO instead of a scan."""
    log = open_log(tmp_path)
    while log.num_segments < 4:
        log.append_as_leader(build_batch([b"x" * 40] * 3, timestamp=NOW), 0)
    log.close(take_snapshot=False)
    for p in log.dir.glob("*.snapshot"):
        p.unlink()
    reopened = open_log(tmp_path)
    bases = [s.base_offset for s in reopened.segments]
    assert reopened.producer_state.snapshot_offsets == sorted({bases[-2], bases[-1], reopened.log_end_offset})
    assert len(reopened.producer_state) == 0


def test_stray_snapshots_are_removed_on_open(tmp_path):
    log = open_log(tmp_path)
    seq = 0
    while log.num_segments < 3:
        log.append_as_leader(pbatch(seq, 3), 0)
        seq += 3
    log.close()
    leo = log.log_end_offset
    stray = log.dir / f"{1:020d}.snapshot"  # no segment starts at 1
    stray.write_bytes(encode_snapshot([]))
    reopened = open_log(tmp_path)
    assert not stray.exists()
    assert reopened.producer_state.latest_snapshot_offset == leo


def test_expiry_forgets_idle_producers(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(pbatch(0, 2, ts=NOW - 10_000), 0)
    log.append_as_leader(pbatch(0, 2, pid=8, ts=NOW), 0)
    assert log.remove_expired_producers(NOW, 5_000) == 1
    assert log.producer_state.last_entry(PID) is None and log.producer_state.last_entry(8) is not None
    # the expired producer is unknown now: any sequence is accepted again
    assert log.append_as_leader(pbatch(17, 1, ts=NOW), 0).first_offset == 4


def test_snapshot_files_survive_manager_reload(tmp_path):
    d = tmp_path / "x-0"
    d.mkdir()
    psm = ProducerStateManager(d)
    psm.replay([(1, 0, 0, 2, NOW, 0, False)])
    psm.update_map_end_offset(3)
    path = psm.take_snapshot(sync=True)
    assert path is not None and psm.take_snapshot() is None  # nothing new: no second file
    again = ProducerStateManager(d)
    assert again.snapshot_offsets == [3]
    again.truncate_and_reload(0, 3)
    assert again.last_entry(1).last_seq == 2 and again.map_end_offset == 3


def test_one_batch_shortcut_matches_the_general_validation(tmp_path):
    """Random appends (in order, gaps, retries, old/new epochs, transactional, other origins) give the same
    answers and the same state through the one-batch fast path and the general per-producer validation."""
    rnd = random.Random(11)
    fast, general = ProducerStateManager(tmp_path / "a"), ProducerStateManager(tmp_path / "b")
    general.fast_path = False
    offset = 0
    outcomes = set()
    for _ in range(4000):
        pid = rnd.choice((1, 2, 3))
        e = fast.last_entry(pid)
        epoch = rnd.choice((0, 1, 1, 2)) if e is None else max(0, e.producer_epoch + rnd.choice((-1, 0, 0, 0, 0, 1)))
        delta = rnd.choice((0, 0, 3))
        choices = [0, rnd.randrange(50), INT32_MAX - 1]
        if e is not None and e.batches:
            choices += [(e.last_seq + 1) & INT32_MAX] * 6 + [rnd.choice(list(e.batches)).first_seq] * 2
        b = (pid, epoch, rnd.choice(choices), delta, NOW + rnd.randrange(100), offset, rnd.random() < 0.03)
        origin = rnd.choice(((True, False),) * 8 + ((False, True), (False, False)))
        results = []
        for m in (fast, general):
            try:
                dup, pending = m.prepare_append([b], client=origin[0], coordinator=origin[1])
                if pending is not None:
                    m.apply(pending)
                results.append(("dup", dup) if dup is not None else ("ok",))
            except Exception as exc:  # noqa: BLE001 - the exception type is the outcome
                results.append((type(exc).__name__,))
        assert results[0] == results[1], (b, origin, results)
        outcomes.add(results[0][0])
        if results[0] == ("ok",):
            offset += delta + 1
        assert {
            p: (x.producer_epoch, x.coordinator_epoch, x.last_timestamp, x.current_txn_first_offset, tuple(x.batches))
            for p, x in fast.producers.items()
        } == {
            p: (x.producer_epoch, x.coordinator_epoch, x.last_timestamp, x.current_txn_first_offset, tuple(x.batches))
            for p, x in general.producers.items()
        }
    assert outcomes >= {"ok", "dup", "OutOfOrderSequenceError", "InvalidProducerEpochError", "InvalidTxnStateError"}


# ---------------------------------------------------------------------------------------------------------------
# producer ids


def test_producer_id_blocks_are_persisted_and_never_reused(tmp_path):
    from strata.broker.metadata_store import LocalMetadataStore
    from strata.broker.producer_ids import ProducerIdManager

    async def main():
        store = LocalMetadataStore(tmp_path)
        assert await store.allocate_producer_id_block(1000) == 0
        mgr = ProducerIdManager(store, block_size=3)
        ids = [await mgr.generate() for _ in range(4)]
        assert ids == [1000, 1001, 1002, 1003]
        reopened = LocalMetadataStore(tmp_path)  # "restart": a new block after the old
        mgr2 = ProducerIdManager(reopened, block_size=3)
        assert await mgr2.generate() == 1006

    asyncio.run(main())


def _init_producer_id(services, version: int, transactional_id: str | None):
    from strata.broker.handlers.producer import init_producer_id
    from strata.broker.request_context import RequestContext
    from strata.protocol.registry import REQUEST_CLASSES, ApiKey, encode_response

    req = REQUEST_CLASSES[ApiKey.INIT_PRODUCER_ID](
        version=version, transactional_id=transactional_id, transaction_timeout_ms=60000
    )
    ctx = RequestContext(
        api_key=ApiKey.INIT_PRODUCER_ID,
        api_version=version,
        correlation_id=1,
        client_id="t",
        received=0.0,
        listener="PLAINTEXT",
        client_address="127.0.0.1:0",
    )
    resp = asyncio.run(init_producer_id(services, ctx, req))
    frame = encode_response(resp, 5)  # encodes at every version
    assert len(frame) > 8
    return resp


def test_init_producer_id_handler(tmp_path):
    from strata.broker.metadata_store import LocalMetadataStore
    from strata.broker.producer_ids import ProducerIdManager

    services = SimpleNamespace(producer_ids=ProducerIdManager(LocalMetadataStore(tmp_path)))
    got = [_init_producer_id(services, v, None) for v in range(6)]
    assert [(r.error_code, r.producer_id, r.producer_epoch) for r in got] == [(0, i, 0) for i in range(6)]
    # a transactional id goes to the transaction coordinator (tests/integration/test_transactions.py); an empty one
    # is refused before, as Kafka refuses it
    assert _init_producer_id(services, 4, "").error_code == 42  # INVALID_REQUEST


# ---------------------------------------------------------------------------------------------------------------
# a follower restoring producer state from a remote segment's snapshot


def test_restore_from_snapshot_makes_a_remote_snapshot_the_state(tmp_path):
    leader = open_log(tmp_path / "leader")
    leader.append_as_leader(pbatch(0), 0)
    dup_of = leader.append_as_leader(pbatch(2), 0)
    leader.append_as_leader(pbatch(0, pid=PID + 1, epoch=3), 0)
    shipped = decode_snapshot(encode_snapshot(leader.producer_state.producers.values()))
    follower = open_log(tmp_path / "follower")
    follower.append_as_leader(pbatch(0, pid=PID + 2), 0)
    follower.truncate_fully_and_start_at(500)
    psm = follower.producer_state
    path = psm.restore_from_snapshot(500, shipped)
    assert path == tmp_path / "follower" / "idem-0" / "00000000000000000500.snapshot"
    assert psm.snapshot_offsets == [500] and psm.map_end_offset == 500
    # a snapshot keeps only the last batch of each producer
    assert state(follower) == {pid: (*e[:3], e[3][-1:]) for pid, e in state(leader).items()}
    assert psm.take_snapshot() is None  # the state as of 500 is already on disk
    assert {e.producer_id: e.last_seq for e in read_snapshot(path)} == {PID: 3, PID + 1: 1}
    # the restored state deduplicates and validates as the leader's would
    dup = follower.append_as_leader(pbatch(2), 1)
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (dup_of.first_offset, dup_of.last_offset)
    with pytest.raises(OutOfOrderSequenceError):
        follower.append_as_leader(pbatch(7), 1)
    assert follower.append_as_leader(pbatch(4), 1).first_offset == 500
    follower.close()
    again = open_log(tmp_path / "follower")
    assert state(again)[PID + 1] == state(leader)[PID + 1] and state(again)[PID][3][-1].last_seq == 5
