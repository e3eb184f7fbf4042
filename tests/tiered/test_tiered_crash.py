"""kill -9 while segments are being copied (docs/architecture.md, invariants): with a copy quota small enough
that offloading takes seconds, the broker is killed right after the RLMM records COPY_SEGMENT_STARTED for a segment
and before COPY_SEGMENT_FINISHED (the test follows `__remote_log_metadata` on disk and kills within a millisecond or
two). After the restart:

* readers see no duplicate and no missing remote segment: the COPY_SEGMENT_FINISHED segments form a gapless,
  non-overlapping chain from offset 0 to the last closed segment, and the storage holds exactly those segments;
* the orphan (the copy attempt cut short) is cleaned: its state goes COPY_SEGMENT_STARTED -> DELETE_SEGMENT_STARTED ->
  DELETE_SEGMENT_FINISHED and none of its objects (partial uploads, `.tmp` files) remain;
* every record reads back from offset 0 exactly once, byte for byte.

Segments are ~1 MiB (40 batches of 10 records of 2.5 KB) so a copy takes long enough to be caught mid-way; with
`local.retention.bytes=1` local copies go as soon as they are remote, so a lost or duplicated segment would show.
"""

from __future__ import annotations

import time
import uuid

import pytest

from strata.protocol.uuids import kafka_uuid_str
from tests.tiered.harness import (
    Harness,
    MetadataTail,
    Scenario,
    ScenarioError,
    check_remote_chain,
    segment_objects,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

RECORDS_PER_BATCH = 10
BATCHES_PER_SEGMENT = 40
SEG = RECORDS_PER_BATCH * BATCHES_PER_SEGMENT  # 400 records per segment
COPY_QUOTA = 2_500_000  # bytes/s: ~2.5 segments per second
ATTEMPTS = 6


def _kill_mid_copy(h: Harness, min_finished: int) -> uuid.UUID:
    """Follow the metadata topic on disk; SIGKILL the broker as soon as a segment of `t` is COPY_SEGMENT_STARTED
    (not yet finished) after `min_finished` segments finished. Returns that segment's id."""
    tail = MetadataTail(h.broker.log_dir)
    deadline = time.monotonic() + 60
    while True:
        tail.poll()
        segs = tail.segments_of("t")
        finished = sum(1 for hist in segs.values() if "COPY_SEGMENT_FINISHED" in hist)
        inflight = [sid for sid, hist in segs.items() if hist == ["COPY_SEGMENT_STARTED"]]
        if inflight and finished >= min_finished:
            h.broker.kill9()
            return inflight[0]
        if time.monotonic() > deadline:
            raise ScenarioError(f"no copy in flight within 60s (finished {finished}, states {list(segs.values())})")
        time.sleep(0.0005)


def _history_on_disk(h: Harness, sid: uuid.UUID) -> list[str]:
    tail = MetadataTail(h.broker.log_dir)
    tail.poll()
    return tail.history.get(sid, [])


def test_kill_during_copy_leaves_no_duplicate_missing_or_orphan_segment(make_harness) -> None:
    h: Harness = make_harness(**{"remote.log.manager.copy.max.bytes.per.second": COPY_QUOTA})
    Scenario("setup").create_topic(
        "t",
        partitions=1,
        configs={"local.retention.bytes": "1"},
        records_per_batch=RECORDS_PER_BATCH,
        batches_per_segment=BATCHES_PER_SEGMENT,
        value_size=2500,
    ).produce("t", 0, 10 * SEG + RECORDS_PER_BATCH).run(h)
    orphans: list[uuid.UUID] = []
    races_lost = 0
    for attempt in range(ATTEMPTS):
        sid = _kill_mid_copy(h, min_finished=2 if attempt == 0 else 0)
        hist = _history_on_disk(h, sid)
        if hist == ["COPY_SEGMENT_STARTED"]:
            orphans.append(sid)
        else:
            races_lost += 1  # the copy finished between our read and the kill
        h.broker.start()
        if orphans:
            break
        # keep segments coming for the next attempt
        Scenario("more").produce("t", 0, 2 * SEG).run(h)
    assert orphans, f"no kill landed between COPY_SEGMENT_STARTED and FINISHED in {ATTEMPTS} attempts"
    orphan = orphans[0]
    t = h.topic("t")
    produced = len(t.produced[0])
    last_closed_end = (produced - 1) // SEG * SEG - 1  # the active segment holds the last partial one
    bases = list(range(0, last_closed_end + 1, SEG))

    def orphan_cleaned(hh: Harness) -> None:
        st = hh.rlmm()
        seg = st.segments.get(orphan)
        hh.wait(
            f"orphan {kafka_uuid_str(orphan)} deleted (RLMM DELETE_SEGMENT_FINISHED, no objects left)",
            lambda: (
                hh.rlmm().segments[orphan].history,
                [o for o in hh.remote_objects("t", 0) if kafka_uuid_str(orphan) in o],
            ),
            lambda v: v[0][-1] == "DELETE_SEGMENT_FINISHED" and not v[1],
        )
        hist = hh.rlmm().segments[orphan].history
        assert hist == ["COPY_SEGMENT_STARTED", "DELETE_SEGMENT_STARTED", "DELETE_SEGMENT_FINISHED"], hist
        assert seg is not None

    def chain(hh: Harness) -> None:
        segs = hh.rlmm_segments("t", 0)
        check_remote_chain(segs, 0, last_closed_end)
        # nothing else is left half-way: every attempt either finished or was deleted
        states = {
            kafka_uuid_str(s.segment_id): s.history
            for s in segs
            if s.state not in ("COPY_SEGMENT_FINISHED", "DELETE_SEGMENT_FINISHED")
        }
        assert not states, f"segments stuck mid-way: {states}"
        stored = segment_objects(hh.remote_objects("t", 0))
        assert sorted(b for b, _ in stored) == bases, sorted(stored)

    (
        Scenario("after the kill")
        .wait_for_offload("t", 0, up_to_offset=last_closed_end, timeout=60)
        .expect_remote_segments("t", 0, bases, timeout=60)
        .step("orphan cleaned", orphan_cleaned)
        .step("gapless, non-overlapping remote chain", chain)
        .expect_earliest_offset("t", 0, 0)
        .expect_earliest_local_offset("t", 0, last_closed_end + 1)
        .consume("t", 0, from_offset=0, expect_records=produced, max_bytes=4 << 20, timeout=120)
        .expect_fetch_from_remote("t", at_least=len(bases))
        .run(h)
    )
    print(
        f"[{h.backend.name}] orphan {kafka_uuid_str(orphan)} after {races_lost} lost races; "
        f"{len(bases)} remote segments"
    )
