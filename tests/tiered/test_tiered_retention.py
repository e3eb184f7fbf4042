"""Remote deletion (Kafka's DeleteSegmentsDueToLogStartOffsetBreachTest, DeleteSegmentsByRetentionSize/TimeTest,
DeleteTopicTest): DeleteRecords moves the log start and the expiration task deletes the remote segments below it;
retention.bytes / retention.ms over local + remote delete remote segments *and* their objects; deleting a topic
empties its remote prefix.

Topics: 5 records of 100 bytes per batch, 2 batches per segment (segment j = offsets [10j, 10j + 9]),
`local.retention.bytes=1` (only the active segment stays local once the rest is copied).
"""

from __future__ import annotations

import time

import pytest

from tests.tiered.harness import OFFSET_OUT_OF_RANGE, Harness, Scenario, shape_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

LOCAL_TAIL = {"local.retention.bytes": "1"}
SEGMENT_BYTES = shape_for(5, 100, 2).batch_bytes * 2


def test_delete_records_moves_log_start_and_deletes_remote_segments(harness: Harness) -> None:
    (
        Scenario("delete records on a tiered topic")
        .create_topic("t", partitions=1, configs=LOCAL_TAIL)
        .produce("t", 0, 50)
        .wait_for_offload("t", 0, up_to_offset=39)
        .expect_earliest_local_offset("t", 0, 40)
        .expect_remote_segments("t", 0, [0, 10, 20, 30])
        # into the middle of remote segment 20-29
        .delete_records("t", 0, before_offset=23)
        .expect_earliest_offset("t", 0, 23)
        .expect_earliest_local_offset("t", 0, 40)
        # segments wholly below the new log start go, from the RLMM and from the storage
        .expect_remote_segments("t", 0, [20, 30])
        .consume("t", 0, from_offset=23, expect_records=27)
        .expect_fetch_from_remote("t", at_least=1)
        .expect_fetch_error("t", 0, offset=22, error=OFFSET_OUT_OF_RANGE)
        .expect_fetch_error("t", 0, offset=0, error=OFFSET_OUT_OF_RANGE)
        # into the local log: every remote segment goes
        .delete_records("t", 0, before_offset=45)
        .expect_earliest_offset("t", 0, 45)
        .expect_earliest_local_offset("t", 0, 45)
        .expect_remote_segments("t", 0, [])
        .consume("t", 0, from_offset=45, expect_records=5)
        .expect_fetch_from_remote("t", exactly=0)
        .expect_fetch_error("t", 0, offset=44, error=OFFSET_OUT_OF_RANGE)
        .run(harness)
    )


def test_remote_retention_by_bytes(harness: Harness) -> None:
    # 5 copied segments + the active one = 6 segments; retention.bytes = 2 segments + a bit: Kafka deletes the oldest
    # segments while the total stays at or above the limit -> 3 remote segments go (0, 10, 20), 30 and 40 stay.
    retention = 2 * SEGMENT_BYTES + 100
    (
        Scenario("remote retention by bytes")
        .create_topic("t", partitions=1, configs=LOCAL_TAIL)
        .produce("t", 0, 60)
        .wait_for_offload("t", 0, up_to_offset=49)
        .expect_remote_segments("t", 0, [0, 10, 20, 30, 40])
        .expect_earliest_local_offset("t", 0, 50)
        .update_topic_config("t", set={"retention.bytes": str(retention)})
        .expect_remote_segments("t", 0, [30, 40])
        .expect_earliest_offset("t", 0, 30)
        .expect_earliest_local_offset("t", 0, 50)
        .consume("t", 0, from_offset=30, expect_records=30)
        .expect_fetch_from_remote("t", at_least=2)
        .expect_fetch_error("t", 0, offset=29, error=OFFSET_OUT_OF_RANGE)
        .step("deleted segments are DELETE_SEGMENT_FINISHED in the RLMM", _deleted_below(30))
        .step("expiration metrics", _expiration_metrics)
        .run(harness)
    )


def _expiration_metrics(h: Harness) -> None:
    # KIP-963: nothing left to delete, the size computation was timed; the copier/expiration pools are idle between
    # runs (RemoteLogManagerTasksAvgIdlePercent)
    m = h.metrics()
    part = (("partition", "0"), ("topic", "t"))
    assert (m[("strata_remote_delete_lag_segments", part)], m[("strata_remote_delete_lag_bytes", part)]) == (0, 0)
    assert ("strata_remote_log_size_computation_time_ms", part) in m
    assert m[("strata_remote_log_size_bytes", part)] > 0
    assert 0 <= m[("strata_remote_log_manager_tasks_avg_idle_percent", ())] <= 100


def test_remote_retention_by_time(harness: Harness) -> None:
    old = int(time.time() * 1000) - 2 * 3600 * 1000  # two hours ago
    (
        Scenario("remote retention by time")
        .create_topic("t", partitions=1, configs=LOCAL_TAIL)
        .produce("t", 0, 30, timestamp_base=old)  # segments 0, 10, 20: old records
        .produce("t", 0, 30)  # segments 30, 40 (closed) and 50 (active): recent
        .wait_for_offload("t", 0, up_to_offset=49)
        .expect_remote_segments("t", 0, [0, 10, 20, 30, 40])
        .update_topic_config("t", set={"retention.ms": str(3600 * 1000)})
        .expect_remote_segments("t", 0, [30, 40])
        .expect_earliest_offset("t", 0, 30)
        .consume("t", 0, from_offset=30, expect_records=30)
        .expect_fetch_from_remote("t", at_least=2)
        .step("deleted segments are DELETE_SEGMENT_FINISHED in the RLMM", _deleted_below(30))
        .run(harness)
    )


def _deleted_below(offset: int):
    def check(h: Harness) -> None:
        segs = h.rlmm_segments("t", 0)
        below = [(s.start_offset, s.history) for s in segs if s.end_offset < offset]
        assert below and all(
            hist
            == ["COPY_SEGMENT_STARTED", "COPY_SEGMENT_FINISHED", "DELETE_SEGMENT_STARTED", "DELETE_SEGMENT_FINISHED"]
            for _, hist in below
        ), below
        kept = [s.state for s in segs if s.start_offset >= offset]
        assert kept == ["COPY_SEGMENT_FINISHED"] * 2, kept

    return check


def test_topic_deletion_empties_remote_storage(harness: Harness) -> None:
    (
        Scenario("delete topic")
        .create_topic("t", partitions=2, configs=LOCAL_TAIL)
        .produce("t", 0, 30)
        .produce("t", 1, 40)
        .wait_for_offload("t", 0, up_to_offset=19)
        .wait_for_offload("t", 1, up_to_offset=29)
        .expect_remote_segments("t", 0, [0, 10])
        .expect_remote_segments("t", 1, [0, 10, 20])
        .delete_topic("t")
        .expect_empty_remote_storage("t")
        # the name again: a new topic id, a new prefix, none of the old data
        .create_topic("t", partitions=1, configs=LOCAL_TAIL)
        .produce("t", 0, 20)
        .wait_for_offload("t", 0, up_to_offset=9)
        .expect_remote_segments("t", 0, [0])
        .expect_earliest_local_offset("t", 0, 10)
        .consume("t", 0, from_offset=0, expect_records=20)
        .expect_fetch_from_remote("t", at_least=1)
        .run(harness)
    )
