"""RemoteLogMetadataCache / RemotePartitionMetadataStore: Kafka's state machine and lookups by epoch and offset."""

from __future__ import annotations

import uuid

import pytest
from crc32c import crc32c

from strata.remote.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from strata.remote.rlmm_cache import (
    RemoteLogMetadataCache,
    RemotePartitionMetadataStore,
    is_valid_partition_delete_transition,
)
from strata.remote.rlmm_types import InvalidStateTransitionError, RemoteStorageNotReadyError
from strata.remote.rsm import RemoteResourceNotFoundError

S = RemoteLogSegmentState
P = RemotePartitionDeleteState
TIP = TopicIdPartition(uuid.UUID(int=0xABC), "orders", 0)


def seg(
    start: int, end: int, epochs: dict[int, int], *, size: int = 10, txn_empty: bool = True, tip: TopicIdPartition = TIP
) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, uuid.uuid4()),
        start,
        end,
        1000 + end,
        1,
        1,
        size,
        epochs,
        S.COPY_SEGMENT_STARTED,
        None,
        txn_empty,
    )


def upd(m: RemoteLogSegmentMetadata, state: S) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(m.remote_log_segment_id, 2, {"u": 1}, state, 9)


def copied(cache: RemoteLogMetadataCache, *segs: RemoteLogSegmentMetadata) -> None:
    for m in segs:
        cache.add_copy_in_progress_segment(m)
        cache.update_remote_log_segment_metadata(upd(m, S.COPY_SEGMENT_FINISHED))


def sid(m: RemoteLogSegmentMetadata | None) -> RemoteLogSegmentId | None:
    return None if m is None else m.remote_log_segment_id


def new_cache() -> RemoteLogMetadataCache:
    c = RemoteLogMetadataCache()
    c.mark_initialized()
    return c


# -- state machine -----------------------------------------------------------------------------------------------------


def test_full_lifecycle_and_visibility_per_state() -> None:
    c = new_cache()
    m = seg(0, 99, {0: 0})
    c.add_copy_in_progress_segment(m)
    assert c.remote_log_segment_metadata(0, 50) is None  # not readable while copying
    assert [sid(x) for x in c.list_remote_log_segments(0)] == [sid(m)]  # but listed (for cleanup)
    assert c.highest_offset_for_epoch(0) is None
    c.update_remote_log_segment_metadata(upd(m, S.COPY_SEGMENT_FINISHED))
    got = c.remote_log_segment_metadata(0, 50)
    assert got is not None
    assert sid(got) == sid(m) and got.state == S.COPY_SEGMENT_FINISHED and got.broker_id == 9
    assert got.custom_metadata == {"u": 1} and got.event_timestamp_ms == 2
    assert c.highest_offset_for_epoch(0) == 99
    c.update_remote_log_segment_metadata(upd(m, S.DELETE_SEGMENT_STARTED))
    assert c.remote_log_segment_metadata(0, 50) is None
    assert [x.state for x in c.list_all_remote_log_segments()] == [S.DELETE_SEGMENT_STARTED]
    assert [x.state for x in c.list_remote_log_segments(0)] == [S.DELETE_SEGMENT_STARTED]
    c.update_remote_log_segment_metadata(upd(m, S.DELETE_SEGMENT_FINISHED))
    assert c.list_all_remote_log_segments() == [] and c.list_remote_log_segments(0) == []
    assert c.highest_offset_for_epoch(0) == 99  # never goes down (as Kafka)


def test_copy_started_may_go_straight_to_delete() -> None:
    c = new_cache()
    m = seg(0, 9, {0: 0})
    c.add_copy_in_progress_segment(m)
    c.update_remote_log_segment_metadata(upd(m, S.DELETE_SEGMENT_STARTED))
    c.update_remote_log_segment_metadata(upd(m, S.DELETE_SEGMENT_FINISHED))
    assert c.segment_count() == 0


@pytest.mark.parametrize(
    "path, illegal",
    [
        ([], S.COPY_SEGMENT_FINISHED),  # unknown segment: not found (below)
        ([S.COPY_SEGMENT_FINISHED], S.COPY_SEGMENT_STARTED),
        ([], S.DELETE_SEGMENT_FINISHED),
        ([S.COPY_SEGMENT_FINISHED], S.DELETE_SEGMENT_FINISHED),
        ([S.DELETE_SEGMENT_STARTED], S.COPY_SEGMENT_FINISHED),
        ([S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED], S.COPY_SEGMENT_FINISHED),
    ],
)
def test_illegal_transitions_raise_and_leave_the_cache_unchanged(path: list[S], illegal: S) -> None:
    c = new_cache()
    m = seg(0, 9, {0: 0})
    c.add_copy_in_progress_segment(m)
    for st in path:
        c.update_remote_log_segment_metadata(upd(m, st))
    before = c.state_view()
    if not path and illegal == S.COPY_SEGMENT_FINISHED:
        stranger = seg(0, 9, {0: 0})
        with pytest.raises(RemoteResourceNotFoundError):
            c.update_remote_log_segment_metadata(upd(stranger, S.COPY_SEGMENT_FINISHED))
    elif illegal == S.COPY_SEGMENT_STARTED:
        again = RemoteLogSegmentMetadata(m.remote_log_segment_id, 0, 9, 1, 1, 1, 10, {0: 0})
        with pytest.raises(InvalidStateTransitionError):
            c.add_copy_in_progress_segment(again)
        with pytest.raises(InvalidStateTransitionError):
            c.check_transition(m.remote_log_segment_id, S.COPY_SEGMENT_STARTED)
    else:
        with pytest.raises(InvalidStateTransitionError):
            c.check_transition(m.remote_log_segment_id, illegal)
        with pytest.raises(InvalidStateTransitionError):
            c.update_remote_log_segment_metadata(upd(m, illegal))
    assert c.state_view() == before


def test_same_state_is_idempotent_and_add_must_be_copy_started() -> None:
    c = new_cache()
    m = seg(0, 9, {0: 0})
    c.add_copy_in_progress_segment(m)
    c.add_copy_in_progress_segment(m)  # replay of the same event
    copied_once = c.state_view()
    assert len(copied_once[0]) == 1
    c.update_remote_log_segment_metadata(upd(m, S.COPY_SEGMENT_FINISHED))
    c.update_remote_log_segment_metadata(upd(m, S.COPY_SEGMENT_FINISHED))
    assert sid(c.remote_log_segment_metadata(0, 5)) == sid(m)
    with pytest.raises(InvalidStateTransitionError):
        c.add_copy_in_progress_segment(
            RemoteLogSegmentMetadata(
                RemoteLogSegmentId(TIP, uuid.uuid4()), 0, 9, 1, 1, 1, 10, {0: 0}, S.COPY_SEGMENT_FINISHED
            )
        )


def test_update_of_unknown_segment_is_dropped_while_catching_up() -> None:
    c = RemoteLogMetadataCache()  # not initialized: base record may be gone (retention)
    c.update_remote_log_segment_metadata(upd(seg(0, 9, {0: 0}), S.COPY_SEGMENT_FINISHED))
    assert c.segment_count() == 0
    c.mark_initialized()
    with pytest.raises(RemoteResourceNotFoundError):
        c.update_remote_log_segment_metadata(upd(seg(0, 9, {0: 0}), S.COPY_SEGMENT_FINISHED))


# -- lookups -----------------------------------------------------------------------------------------------------------


def test_lookup_by_epoch_and_offset_respects_epoch_boundaries_inside_segments() -> None:
    c = new_cache()
    s1, s2, s3 = seg(0, 99, {0: 0}), seg(100, 199, {0: 100, 1: 150}), seg(200, 299, {1: 200, 3: 250})
    copied(c, s1, s2, s3)
    assert sid(c.remote_log_segment_metadata(0, 0)) == sid(s1)
    assert sid(c.remote_log_segment_metadata(0, 99)) == sid(s1)
    assert sid(c.remote_log_segment_metadata(0, 149)) == sid(s2)
    assert c.remote_log_segment_metadata(0, 150) is None  # epoch 0 ends at 149 in s2
    assert sid(c.remote_log_segment_metadata(1, 150)) == sid(s2)
    assert sid(c.remote_log_segment_metadata(1, 249)) == sid(s3)
    assert c.remote_log_segment_metadata(1, 250) is None
    assert sid(c.remote_log_segment_metadata(3, 299)) == sid(s3)
    assert c.remote_log_segment_metadata(3, 300) is None
    assert c.remote_log_segment_metadata(2, 220) is None  # epoch never seen
    assert c.remote_log_segment_metadata(1, 149) is None  # below the epoch's first offset
    assert (c.highest_offset_for_epoch(0), c.highest_offset_for_epoch(1), c.highest_offset_for_epoch(3)) == (
        149,
        249,
        299,
    )
    assert c.highest_offset_for_epoch(2) is None
    assert [sid(x) for x in c.list_remote_log_segments(1)] == [sid(s2), sid(s3)]
    assert [sid(x) for x in c.list_all_remote_log_segments()] == [sid(s1), sid(s2), sid(s3)]


def test_divergent_lineages_two_segments_for_the_same_offsets_in_different_epochs() -> None:
    # The old leader (epoch 3) uploaded 100-199 but its tail was truncated away by the new leader (epoch 4), which
    # uploaded its own 100-199. Both stay listed until expiration deletes the orphan; each epoch finds its own.
    c = new_cache()
    base = seg(0, 99, {3: 0})
    old = seg(100, 199, {3: 100})
    new = seg(100, 199, {3: 100, 4: 120})
    copied(c, base, old, new)
    assert sid(c.remote_log_segment_metadata(4, 150)) == sid(new)
    assert sid(c.remote_log_segment_metadata(3, 110)) == sid(new)  # the later upload supersedes in epoch 3
    # Offset 150 lies in epoch 4 in the new lineage (its epoch cache asks for (4, 150)); a lineage where epoch 3 runs
    # past 119 (the old leader's, if a later unclean election makes it survive) finds the replaced upload.
    assert sid(c.remote_log_segment_metadata(3, 150)) == sid(old)
    assert c.remote_log_segment_metadata(3, 200) is None
    assert sid(c.remote_log_segment_metadata(3, 99)) == sid(base)
    # the replaced upload stays listed (unreferenced) so that expiration can delete it; ties keep referenced first
    assert [sid(x) for x in c.list_remote_log_segments(3)] == [sid(base), sid(new), sid(old)]
    assert [sid(x) for x in c.list_remote_log_segments(4)] == [sid(new)]
    assert [sid(x) for x in c.list_all_remote_log_segments()] == [sid(base), sid(old), sid(new)]
    # fully separate lineages: same offsets, disjoint epochs
    c2 = new_cache()
    a, b = seg(500, 599, {7: 500}), seg(500, 599, {8: 500})
    copied(c2, a, b)
    assert sid(c2.remote_log_segment_metadata(7, 550)) == sid(a)
    assert sid(c2.remote_log_segment_metadata(8, 550)) == sid(b)
    c2.update_remote_log_segment_metadata(upd(a, S.DELETE_SEGMENT_STARTED))  # the orphan goes
    assert c2.remote_log_segment_metadata(7, 550) is None
    assert sid(c2.remote_log_segment_metadata(8, 550)) == sid(b)


def test_reupload_superseding_earlier_segments_in_the_same_epoch() -> None:
    # Kafka's cases: a duplicate upload of a superset (0-100 then 0-200) and an overlapping one (10-90 then 5-100).
    c = new_cache()
    s0, s1 = seg(0, 100, {0: 0}), seg(0, 200, {0: 0})
    copied(c, s0, s1)
    assert sid(c.remote_log_segment_metadata(0, 50)) == sid(s1)
    assert sid(c.remote_log_segment_metadata(0, 150)) == sid(s1)
    assert {sid(x) for x in c.list_remote_log_segments(0)} == {sid(s0), sid(s1)}  # s0 unreferenced, still listed
    c2 = new_cache()
    t0, t1, t2 = seg(10, 90, {0: 10}), seg(5, 100, {0: 5}), seg(101, 200, {0: 101})
    copied(c2, t0, t1, t2)
    assert sid(c2.remote_log_segment_metadata(0, 95)) == sid(t1)
    assert sid(c2.remote_log_segment_metadata(0, 20)) == sid(t1)
    assert sid(c2.remote_log_segment_metadata(0, 150)) == sid(t2)
    assert [x.start_offset for x in c2.list_remote_log_segments(0)] == [5, 10, 101]


def test_sizes_counts_and_txn_index_walk() -> None:
    c = new_cache()
    s1 = seg(0, 99, {0: 0}, size=100)
    s2 = seg(100, 199, {0: 100, 1: 150}, size=200)
    s3 = seg(200, 299, {1: 200}, size=400, txn_empty=False)
    s4 = seg(300, 399, {1: 300}, size=800)
    copied(c, s1, s2, s3)
    c.add_copy_in_progress_segment(s4)
    assert c.remote_log_size() == 1500 and c.remote_log_size(0) == 300 and c.remote_log_size(1) == 1400
    assert c.segment_count() == 4 and c.copied_size_bytes() == 700
    assert sid(c.next_segment_with_txn_index(1, 160)) == sid(s3)
    assert sid(c.next_segment_with_txn_index(0, 10)) is None  # epoch 0 ends before the segment with aborted txns
    assert c.next_segment_with_txn_index(1, 300) is None
    c.update_remote_log_segment_metadata(upd(s3, S.DELETE_SEGMENT_STARTED))
    assert c.next_segment_with_txn_index(1, 160) is None
    assert c.copied_size_bytes() == 300


# -- store -------------------------------------------------------------------------------------------------------------


def test_store_readiness_not_found_and_partition_deletion() -> None:
    store = RemotePartitionMetadataStore()
    with pytest.raises(RemoteResourceNotFoundError):
        store.cache_for(TIP)
    cache = store.maybe_load_partition(TIP)
    with pytest.raises(RemoteStorageNotReadyError) as ei:
        store.cache_for(TIP)
    assert ei.value.retriable and ei.value.error_code == 9
    cache.mark_initialized()
    m = seg(0, 9, {0: 0})
    store.handle_segment_metadata(m)
    assert store.cache_for(TIP).segment_count() == 1
    with pytest.raises(RemoteResourceNotFoundError):
        store.handle_segment_metadata(seg(0, 9, {0: 0}, tip=TopicIdPartition(uuid.uuid4(), "other", 1)))
    for st in (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED):
        store.handle_partition_delete(RemotePartitionDeleteMetadata(TIP, st, 1, 1))
        pd = store.partition_delete_state(TIP)
        assert pd is not None and pd.state == st
        assert store.cache_for(TIP).segment_count() == 1
    store.handle_partition_delete(RemotePartitionDeleteMetadata(TIP, P.DELETE_PARTITION_FINISHED, 1, 1))
    assert store.partition_delete_state(TIP) is None
    with pytest.raises(RemoteResourceNotFoundError):
        store.cache_for(TIP)


def test_partition_delete_transitions() -> None:
    assert is_valid_partition_delete_transition(None, P.DELETE_PARTITION_MARKED)
    assert not is_valid_partition_delete_transition(None, P.DELETE_PARTITION_STARTED)
    assert is_valid_partition_delete_transition(P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED)
    assert is_valid_partition_delete_transition(P.DELETE_PARTITION_STARTED, P.DELETE_PARTITION_FINISHED)
    assert is_valid_partition_delete_transition(P.DELETE_PARTITION_STARTED, P.DELETE_PARTITION_STARTED)
    assert not is_valid_partition_delete_transition(P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_FINISHED)
    assert not is_valid_partition_delete_transition(P.DELETE_PARTITION_FINISHED, P.DELETE_PARTITION_MARKED)


# -- the cache's snapshot file (remote/rlmm_snapshot.py) -----------------------------------------------------------


def test_snapshot_round_trip_and_every_truncation_is_a_format_error() -> None:
    from strata.remote.rlmm_snapshot import SnapshotFormatError, decode_snapshot, encode_snapshot

    cache = new_cache()
    a, b = seg(0, 99, {0: 0}), seg(100, 199, {0: 100, 2: 150})
    copied(cache, a, b)
    data = encode_snapshot(3, 4242, cache, None)
    back = decode_snapshot(data, TIP)
    assert (back.metadata_partition, back.metadata_partition_offset, back.delete_metadata) == (3, 4242, None)
    assert set(back.cache.id_to_segment) == {a.remote_log_segment_id, b.remote_log_segment_id}
    assert sid(back.cache.remote_log_segment_metadata(2, 160)) == b.remote_log_segment_id
    body = data[:-4]
    for cut in range(len(body)):  # a body cut anywhere, with a CRC that matches what is left
        short = body[:cut] + crc32c(body[:cut]).to_bytes(4, "big")
        with pytest.raises(SnapshotFormatError):
            decode_snapshot(short, TIP)
