"""KIP-950 (Kafka's DisableRemoteLogOnTopicTest / EnableRemoteLogOnTopicTest): turning remote storage off without
`remote.log.delete.on.disable=true` is rejected with Kafka's message; `remote.log.copy.disable=true` stops
copying while remote reads go on (and local retention keeps what is not copied); copying resumes when re-enabled;
`remote.storage.enable=false` + `remote.log.delete.on.disable=true` deletes the remote data and the log then starts
at the local log start; a plain topic can be made tiered later.
"""

from __future__ import annotations

import pytest

from tests.tiered.harness import LATEST_TIERED, OFFSET_OUT_OF_RANGE, Harness, Scenario, ScenarioError

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

LOCAL_TAIL = {"local.retention.bytes": "1"}
DISABLE_MSG = (
    "It is invalid to disable remote storage without deleting remote data. If you want to keep the "
    "remote data and turn to read only, please set `remote.storage.enable=true,"
    "remote.log.copy.disable=true`."
)


def _copy_skipped(segments: int, still_tiered_to: int, remote_bases: list[int]):
    """The copy task ran and left `segments` closed segments uncopied (RemoteCopyLagSegments), -5 did not move."""

    def check(h: Harness) -> None:
        h.wait(
            f"copy lag of t-0 == {segments} segments (the copy task ran with copy disabled)",
            lambda: h.metric("strata_remote_copy_lag_segments", topic="t", partition="0"),
            lambda v: v == segments,
        )
        offs = h.offsets("t", 0)
        if offs["latest-tiered(-5)"] != still_tiered_to:
            raise ScenarioError(f"copied with remote.log.copy.disable=true: {offs}")
        bases = sorted(s.start_offset for s in h.rlmm_segments("t", 0))
        if bases != remote_bases:
            raise ScenarioError(f"RLMM segments {bases} with copy disabled, expected {remote_bases}")

    return check


def test_disable_copy_then_remote_storage(harness: Harness) -> None:
    (
        Scenario("KIP-950")
        .create_topic("t", partitions=1, configs=LOCAL_TAIL)
        .produce("t", 0, 30)
        .wait_for_offload("t", 0, up_to_offset=19)
        .expect_earliest_local_offset("t", 0, 20)
        # turning it off while keeping the data is refused, with the message Kafka gives
        .update_topic_config("t", set={"remote.storage.enable": "false"}, expect_error=DISABLE_MSG)
        .update_topic_config(
            "t",
            set={"remote.storage.enable": "false", "remote.log.delete.on.disable": "false"},
            expect_error="INVALID_CONFIG",
        )
        # read-only remote: nothing more is copied, so local retention cannot delete the new segments either
        .update_topic_config("t", set={"remote.log.copy.disable": "true"})
        .produce("t", 0, 20)  # closes 20-29 and 30-39
        .step("copy skipped", _copy_skipped(2, 19, [0, 10]))
        .wait_for_retention_pass()
        .expect_earliest_local_offset("t", 0, 20)
        .expect_remote_segments("t", 0, [0, 10])
        .consume("t", 0, from_offset=0, expect_records=50)
        .expect_fetch_from_remote("t", at_least=2)
        # copying again
        .update_topic_config("t", set={"remote.log.copy.disable": "false"})
        .wait_for_offload("t", 0, up_to_offset=39)
        .expect_remote_segments("t", 0, [0, 10, 20, 30])
        .expect_earliest_local_offset("t", 0, 40)
        # off, deleting the remote data: the log now starts at the local log start
        .update_topic_config("t", set={"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"})
        .expect_empty_remote_storage("t")
        .expect_earliest_offset("t", 0, 40)
        .expect_latest_tiered_offset("t", 0, -1)
        .expect_fetch_error("t", 0, offset=39, error=OFFSET_OUT_OF_RANGE)
        .consume("t", 0, from_offset=40, expect_records=10)
        .expect_fetch_from_remote("t", exactly=0)
        # no more copying for this topic
        .produce("t", 0, 20)
        .wait_for_retention_pass()
        .step("nothing copied after disabling", _nothing_copied)
        .consume("t", 0, from_offset=40, expect_records=30)
        .run(harness)
    )


def _nothing_copied(h: Harness) -> None:
    assert h.offset("t", 0, LATEST_TIERED) == -1
    assert h.remote_objects("t", 0) == []
    assert not [s for s in h.rlmm_segments("t", 0) if s.start_offset >= 40], h.rlmm_segments("t", 0)
    assert sorted(h.local_segments("t", 0)) == [40, 50, 60]


def test_with_copy_disabled_total_retention_deletes_uncopied_local_segments(harness: Harness) -> None:
    # Nothing more is copied, so waiting for copies would keep the local log forever: retention.ms applies to the
    # local segments, copied or not (Kafka's remoteLogEnabledAndRemoteCopyEnabled), the active one included.
    (
        Scenario("KIP-950 retention")
        .create_topic("t", partitions=1, configs=LOCAL_TAIL)
        .produce("t", 0, 30)
        .wait_for_offload("t", 0, up_to_offset=19)
        .expect_earliest_local_offset("t", 0, 20)
        .update_topic_config("t", set={"remote.log.copy.disable": "true"})
        .produce("t", 0, 20)  # closes 20-29 and 30-39, never copied
        .step("copy skipped", _copy_skipped(2, 19, [0, 10]))
        .expect_earliest_local_offset("t", 0, 20)
        .update_topic_config("t", set={"retention.ms": "1000"})
        .expect_earliest_local_offset("t", 0, 50)
        .run(harness)
    )


def test_enable_remote_storage_on_an_existing_topic(harness: Harness) -> None:
    (
        Scenario("enable later")
        .create_topic("t", partitions=1, tiered=False)
        .produce("t", 0, 30)
        .expect_latest_tiered_offset("t", 0, -1)
        .update_topic_config("t", set={"remote.storage.enable": "true", "local.retention.bytes": "1"})
        .wait_for_offload("t", 0, up_to_offset=19)
        .expect_remote_segments("t", 0, [0, 10])
        .expect_earliest_local_offset("t", 0, 20)
        .expect_earliest_offset("t", 0, 0)
        .consume("t", 0, from_offset=0, expect_records=30)
        .expect_fetch_from_remote("t", at_least=2)
        .run(harness)
    )
