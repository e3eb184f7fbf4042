"""Offload and consume (Kafka's OffloadAndConsumeFromLeaderTest, LocalLogStartOffsetTest, ListOffsetsTest):
segments are copied, local retention moves the earliest-local offset while the earliest offset stays, consumers
read the remote part byte for byte (from offset 0, from the middle of a batch, across the remote/local boundary),
ListOffsets by timestamp finds records in remote segments, and a restart keeps it all.

Every topic here has 5 records of 100 bytes per batch and 2 batches per segment: segment j = offsets
[10j, 10j + 9]. `local.retention.bytes=1` keeps only the active segment locally once the rest is copied.
"""

from __future__ import annotations

import time

import pytest

from strata.protocol.records import is_crc_valid, iter_batches
from tests.support.kafka_wire import decode_records
from tests.tiered.harness import EARLIEST, EARLIEST_LOCAL, LATEST_TIERED, Harness, Scenario, ScenarioError

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SEG = 10  # records per segment
LOCAL_TAIL = {"local.retention.bytes": "1"}


def test_offload_and_consume_from_leader(harness: Harness) -> None:
    (
        Scenario("offload and consume from leader")
        .create_topic("t", partitions=1, configs=LOCAL_TAIL)
        # 5 segments + an active one holding 40-49... 50-54 (the active segment is never copied)
        .produce("t", 0, 55)
        .wait_for_offload("t", 0, up_to_offset=49)
        .expect_remote_segments("t", 0, [0, 10, 20, 30, 40])
        .expect_latest_tiered_offset("t", 0, 49)
        .expect_earliest_local_offset("t", 0, 50)
        .expect_earliest_offset("t", 0, 0)
        # from offset 0: remote segments, then the local active segment
        .consume("t", 0, from_offset=0, expect_records=55)
        .expect_fetch_from_remote("t", at_least=5)
        # from the middle of a batch in the middle of a remote segment: the whole batch 20-24 comes back
        .consume("t", 0, from_offset=23, expect_records=32)
        .expect_fetch_from_remote("t", at_least=3)
        # the last remote batch, then across the boundary into local
        .consume("t", 0, from_offset=47, expect_records=8)
        .expect_fetch_from_remote("t", at_least=1)
        # local only: no remote read
        .consume("t", 0, from_offset=51, expect_records=4)
        .expect_fetch_from_remote("t", exactly=0)
        # a real client, from the middle of a remote batch
        .consume("t", 0, from_offset=12, expect_records=43, client="confluent")
        .expect_fetch_from_remote("t", at_least=1)
        .run(harness)
    )


def test_earliest_local_offset_moves_with_local_retention(harness: Harness) -> None:
    """local.retention.bytes allows ~2 segments locally; growing the log moves -4 segment by segment while -2
    stays at 0; local segments are deleted only once copied."""
    sc = Scenario("local log start offset")
    sc.create_topic(
        "t",
        partitions=1,
        configs={
            "local.retention.bytes": "1500",  # ~2 segments of ~1300
            "remote.log.copy.disable": "true",
        },
    )
    sc.produce("t", 0, 40)
    # nothing is copied, so nothing local may go, whatever local retention says
    sc.wait_for_retention_pass()
    sc.step("local segments stay until copied", _assert_no_local_deletion_while_copy_disabled)
    sc.update_topic_config("t", set={"remote.log.copy.disable": "false"})
    sc.wait_for_offload("t", 0, up_to_offset=29)
    sc.expect_earliest_local_offset("t", 0, 20)  # 20-29 (closed, copied) + 30-39 (active) <= 2 segments
    sc.expect_earliest_offset("t", 0, 0)
    sc.produce("t", 0, 20)
    sc.wait_for_offload("t", 0, up_to_offset=49)
    sc.expect_earliest_local_offset("t", 0, 40)
    sc.expect_earliest_offset("t", 0, 0)
    sc.expect_remote_segments("t", 0, [0, 10, 20, 30, 40])
    sc.step("local log holds only the tail", lambda h: _assert_local_bases(h, "t", 0, [40, 50]))
    sc.consume("t", 0, from_offset=0, expect_records=60)
    sc.run(harness)


def _assert_no_local_deletion_while_copy_disabled(h: Harness) -> None:
    # the copy task saw the 3 closed segments and skipped them (copy lag gauge); a retention pass ran already
    h.wait(
        "copy lag of t-0 reported (the copy task ran with copy disabled)",
        lambda: h.metric("strata_remote_copy_lag_segments", topic="t", partition="0"),
        lambda v: v == 3,
    )
    offs = h.offsets("t", 0)
    if offs["earliest-local(-4)"] != 0 or offs["latest-tiered(-5)"] != -1:
        raise ScenarioError(f"with remote.log.copy.disable=true: {offs}")
    if sorted(h.local_segments("t", 0)) != [0, 10, 20, 30]:
        raise ScenarioError(f"local segments deleted before being copied: {sorted(h.local_segments('t', 0))}")


def _assert_local_bases(h: Harness, topic: str, partition: int, bases: list[int]) -> None:
    h.wait(
        f"local segments of {topic}-{partition} == {bases}",
        lambda: sorted(h.local_segments(topic, partition)),
        lambda got: got == bases,
    )


def test_list_offsets_by_timestamp_lands_in_remote_segments(harness: Harness) -> None:
    base = int(time.time() * 1000) - 3_600_000  # an hour ago, +1 ms per record

    def lookups(h: Harness) -> None:
        t = h.topic("t")
        recs = t.produced[0]
        assert h.offset("t", 0, EARLIEST_LOCAL) == 30
        for target, want in [
            (base + 13, 13),  # inside a batch of a remote segment
            (base + 0, 0),  # the very first record
            (base - 5000, 0),  # before everything: the earliest record
            (base + 29, 29),  # the last remote record
            (base + 32, 32),  # local
            (base + 1000, -1),
        ]:  # after everything
            err, off, ts = h.list_offset("t", 0, target, version=7)
            assert err == 0, f"ListOffsets({target}): error {err}"
            assert off == want, f"ListOffsets({target}) = {off}, expected {want}"
            if want >= 0:
                assert ts == recs[want].timestamp, f"ListOffsets({target}) timestamp {ts}"
        # MAX_TIMESTAMP (-3, v7+) answers the newest record, which is local
        err, off, ts = h.list_offset("t", 0, -3, version=7)
        assert (err, off, ts) == (0, 34, base + 34), (err, off, ts)

    (
        Scenario("list offsets by timestamp")
        .create_topic("t", partitions=1, configs=LOCAL_TAIL)
        .produce("t", 0, 35, timestamp_base=base)
        .wait_for_offload("t", 0, up_to_offset=29)
        .expect_earliest_local_offset("t", 0, 30)
        .step("ListOffsets by timestamp", lookups)
        .run(harness)
    )


def test_restart_keeps_remote_data_readable(harness: Harness) -> None:
    (
        Scenario("restart")
        .create_topic("t", partitions=1, configs=LOCAL_TAIL)
        .produce("t", 0, 30)
        .wait_for_offload("t", 0, up_to_offset=19)
        .expect_earliest_local_offset("t", 0, 20)
        .restart_broker()
        .expect_earliest_offset("t", 0, 0)
        .expect_earliest_local_offset("t", 0, 20)
        .expect_latest_tiered_offset("t", 0, 19)
        .consume("t", 0, from_offset=0, expect_records=30)
        .expect_fetch_from_remote("t", at_least=2)
        # copying resumes after the restart where it stopped (no segment copied twice)
        .produce("t", 0, 20)
        .wait_for_offload("t", 0, up_to_offset=39)
        .expect_remote_segments("t", 0, [0, 10, 20, 30])
        .step("RLMM chain", lambda h: _chain(h, "t", 0, 0, 39))
        .kill_broker()
        .expect_earliest_local_offset("t", 0, 40)
        .consume("t", 0, from_offset=5, expect_records=45)
        .run(harness)
    )


def _chain(h: Harness, topic: str, partition: int, start: int, end: int) -> None:
    from tests.tiered.harness import check_remote_chain

    check_remote_chain(h.rlmm_segments(topic, partition), start, end)


def test_earliest_and_tiered_offsets_untouched_on_plain_topic(harness: Harness) -> None:
    """A topic without remote.storage.enable on a tiered broker: nothing is copied, -5 answers -1, -4 == -2."""
    (
        Scenario("plain topic")
        .create_topic("p", partitions=1, tiered=False, configs={"retention.bytes": "1500"})
        .produce("p", 0, 40)
        .expect_earliest_offset("p", 0, 20)
        .expect_earliest_local_offset("p", 0, 20)
        .expect_latest_tiered_offset("p", 0, -1)
        .step("no remote objects", lambda h: _no_remote(h, "p"))
        .run(harness)
    )
    assert harness.offset("p", 0, LATEST_TIERED) == -1
    assert harness.offset("p", 0, EARLIEST) == harness.offset("p", 0, EARLIEST_LOCAL)


def _no_remote(h: Harness, topic: str) -> None:
    left = [o for o in h.backend.list_all() if o.startswith(f"{topic}-")]
    assert not left, left


@pytest.mark.parametrize("backend_name", ["s3"])
def test_a_sequential_reader_finds_the_next_segment_read_ahead(harness: Harness) -> None:
    """A remote read that reaches the end of a segment has the next segment's first chunk loaded in the background
    (S3 RSM with its chunk cache), so the read of that segment is served from the cache. Reads from a segment's
    start offset begin at position 0: no index of any segment is fetched."""
    (
        Scenario("read-ahead")
        .create_topic("t", partitions=1, configs=LOCAL_TAIL)
        .produce("t", 0, 55)
        .wait_for_offload("t", 0, up_to_offset=49)
        .expect_earliest_local_offset("t", 0, 50)
        .run(harness)
    )

    def counters() -> dict[str, float]:
        m = harness.metrics()
        return {
            "chunk_misses": m.get(("strata_remote_chunk_cache_misses_total", ()), 0.0),
            "chunk_hits": m.get(("strata_remote_chunk_cache_hits_total", (("tier", "memory"),)), 0.0),
            "prefetches": m.get(("strata_remote_chunk_cache_prefetches_total", ()), 0.0),
            "index_misses": m.get(("strata_remote_index_cache_misses_total", ()), 0.0),
            "index_hits": m.get(("strata_remote_index_cache_hits_total", ()), 0.0),
        }

    def fetch(offset: int) -> list[int]:
        with harness.wire() as w:
            p = w.fetch("t", 0, offset, version=12, max_bytes=1 << 20).responses[0].partitions[0]
        assert p.error_code == 0
        return [r.offset for r in decode_records(p.records)]

    c0 = counters()
    assert fetch(0) == list(range(SEG))  # segment 0, read to its end
    # segment 0 loaded for the read (1 chunk), segment 1 read ahead (1 chunk)
    c1 = harness.wait(
        "segment 1 read ahead",
        counters,
        lambda c: c["prefetches"] > c0["prefetches"] and c["chunk_misses"] >= c0["chunk_misses"] + 2,
    )
    assert fetch(SEG) == list(range(SEG, 2 * SEG))  # segment 1, from the cache; segment 2 is read ahead
    c2 = harness.wait(
        "segment 2 read ahead",
        counters,
        lambda c: c["prefetches"] > c1["prefetches"] and c["chunk_misses"] > c1["chunk_misses"],
    )
    assert c2["chunk_hits"] > c1["chunk_hits"], (c1, c2)
    # one load (segment 2's read-ahead): nothing of segment 1 was loaded again, and no index was needed
    assert (c2["chunk_misses"], c2["index_misses"]) == (c1["chunk_misses"] + 1, c0["index_misses"]), (c0, c1, c2)


@pytest.mark.parametrize("backend_name", ["local"])
def test_remote_fetch_quota_answers_empty_while_throttled(make_harness) -> None:
    """KIP-956 remote.log.manager.fetch.max.bytes.per.second: over the quota, a Fetch schedules no remote read and
    its remote partition answers empty without error (Kafka's ReplicaManager); the throttle time is counted, and
    reads resume once the rate is back under the quota."""
    # 200 B/s: after the first ~1.2 KB read, remote reads stay throttled for ~6 s (a loaded machine may be slow)
    h = make_harness(**{"remote.log.manager.fetch.max.bytes.per.second": 200})
    (
        Scenario("fetch quota")
        .create_topic("t", partitions=1, configs=LOCAL_TAIL)
        .produce("t", 0, 55)
        .wait_for_offload("t", 0, up_to_offset=49)
        .expect_earliest_local_offset("t", 0, 50)
        .run(h)
    )

    def fetch(offset: int) -> tuple[int, list[int]]:
        with h.wire() as w:
            p = w.fetch("t", 0, offset, version=12, max_wait_ms=100, max_bytes=1 << 20).responses[0].partitions[0]
        return p.error_code, [r.offset for r in decode_records(p.records)]

    assert fetch(0) == (0, list(range(SEG)))  # ~1.2 KB read from remote storage: now over 200 B/s
    reads = h.remote_fetches("t")
    assert fetch(SEG) == (0, [])  # throttled: empty, no error, no remote read scheduled
    assert h.remote_fetches("t") == reads
    assert h.metric("strata_remote_fetch_throttle_time_ms_total") > 0
    assert h.wait("remote reads resume under the quota", lambda: fetch(SEG), lambda r: r[1][:1] == [SEG])[0] == 0


@pytest.mark.parametrize("backend_name", ["s3"])
def test_a_remote_read_across_chunk_boundaries_returns_whole_intact_batches(make_harness) -> None:
    """S3 chunks (rsm.config.chunk.size 200 B) smaller than a batch (~600 B): every batch straddles chunk boundaries.
    The RLM walks batch headers across the chunks and the Fetch response carries the chunks' bytes unjoined
    (remote/pieces.py, strata.protocol.records.BufferChain): whole batches with valid CRCs, at the offsets asked."""
    h = make_harness(**{"rsm.config.chunk.size": 200})
    (
        Scenario("small chunks")
        .create_topic("t", partitions=1, configs=LOCAL_TAIL)
        .produce("t", 0, 55)
        .wait_for_offload("t", 0, up_to_offset=49)
        .expect_earliest_local_offset("t", 0, 50)
        .run(h)
    )

    def fetch(offset: int, max_bytes: int = 1 << 20) -> bytes:
        with h.wire() as w:
            p = w.fetch("t", 0, offset, version=12, max_bytes=max_bytes).responses[0].partitions[0]
        assert p.error_code == 0
        return bytes(p.records)

    for start, first_batch in ((0, 0), (SEG, SEG), (SEG + 7, SEG + 5)):  # a segment's start; mid-batch
        buf = fetch(start)
        batches = list(iter_batches(buf))
        assert sum(b.size for _, b in batches) == len(buf), "whole batches only"
        assert all(is_crc_valid(buf, pos) for pos, _ in batches)
        assert [r.offset for r in decode_records(buf)] == list(range(first_batch, first_batch + 10 - first_batch % 10))
    one = fetch(0, max_bytes=1)  # at least one batch is owed: exactly one
    assert [b.base_offset for _, b in iter_batches(one)] == [0] and len(one) == next(iter_batches(one))[1].size
