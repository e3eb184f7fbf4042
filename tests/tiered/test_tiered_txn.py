"""Transactions on tiered data (issue 19's log layer), on S3 (moto): segments are copied only below the LSO, the
`.txnindex` of a segment with an aborted transaction travels with it, and a READ_COMMITTED read from offset 0 --
served from remote storage, the local copies being gone -- returns the aborted transactions from the remote index,
so consumers (kafka-python, confluent-kafka) never see aborted records.

The transactional data is written with storage calls while the broker is stopped (there is no transaction
coordinator yet); segments (offsets):
  0: 0 plain, 1-2 producer 7 (aborted at 6), 3 producer 8 (committed at 5)
  4: 4 plain, 5 COMMIT 8, 6 ABORT 7          <- its .txnindex holds producer 7's abort
  7: 7-8 producer 9 (open)                   <- closed and below the HW, but not below the LSO (7): stays local
  9: 9 plain (active)
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from strata.protocol.constants import EARLIEST_PENDING_UPLOAD_TIMESTAMP as EARLIEST_PENDING_UPLOAD
from strata.protocol.uuids import kafka_uuid_str
from tests.support.kafka_wire import WireClient
from tests.support.txn_log import TxnWriter, read_confluent, read_kafka_python, write_partition
from tests.support.waiting import wait_until
from tests.tiered.harness import Harness

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TOPIC = "txn-tiered"
COMMITTED = [b"plain-0", b"p8-0", b"plain-4"]
LSO = 7


def _write(w: TxnWriter) -> None:
    w.plain(b"plain-0")
    w.txn(7, b"p7-0", b"p7-1")
    w.txn(8, b"p8-0")
    w.log.roll()
    w.plain(b"plain-4")
    w.end(8, True)
    w.end(7, False)
    w.log.roll()
    w.txn(9, b"p9-0", b"p9-1")
    w.log.roll()
    w.plain(b"plain-9")
    assert [s.base_offset for s in w.log.segments] == [0, 4, 7, 9]


@pytest.mark.parametrize("backend_name", ["s3"])
def test_read_committed_from_remote_storage(make_harness: Callable[..., Harness]):
    h = make_harness()
    with WireClient.connect(h.broker.bootstrap) as c:
        c.create_topic(TOPIC, 1, {"remote.storage.enable": "true", "local.retention.bytes": "1"})
    h.stop()
    topic_id = write_partition(h.broker.partition_dir(TOPIC, 0), _write)
    h.start()

    # segments 0 and 4 are tiered (and then deleted locally); 7 holds the open transaction: never copied
    def copied() -> list[tuple[int, int]]:
        segs = h.rlmm().for_partition(TOPIC, 0, topic_id)
        return sorted((s.start_offset, s.end_offset) for s in segs if s.state == "COPY_SEGMENT_FINISHED")

    assert wait_until(lambda: copied() == [(0, 3), (4, 6)] and copied(), timeout=60) == [(0, 3), (4, 6)]
    wait_until(lambda: sorted(h.local_segments(TOPIC, 0)) == [7, 9], timeout=60, message="local deletion")
    objects = h.backend.list_partition(f"{TOPIC}-0-{kafka_uuid_str(topic_id)}")
    txn_objects = [o for o in objects if o.endswith(".txnindex")]
    assert len(txn_objects) == 1 and "00000000000000000004-" in txn_objects[0], objects
    assert copied() == [(0, 3), (4, 6)]  # still: the LSO did not move
    # segment 7 is closed but above the LSO: ListOffsets -6 (KIP-1023) answers 7, the first offset not copied, and
    # the copy lag does not count segment 7 (it cannot be copied before its transaction ends)
    assert h.list_offset(TOPIC, 0, EARLIEST_PENDING_UPLOAD, version=11)[:2] == (0, LSO)
    labels = (("partition", "0"), ("topic", TOPIC))
    lag = wait_until(lambda: h.metrics().get(("strata_remote_copy_lag_segments", labels)) is not None, 30)
    assert lag and h.metrics()[("strata_remote_copy_lag_segments", labels)] == 0
    assert h.metrics()[("strata_remote_copy_lag_bytes", labels)] == 0

    with WireClient.connect(h.broker.bootstrap) as c:
        req = WireClient.fetch_request(TOPIC, 0, 0, version=11, max_wait_ms=10)
        req.isolation_level = 1

        def remote_part():
            part = c.request(req).responses[0].partitions[0]
            return part if part.error_code == 0 and part.records else None

        part = wait_until(remote_part, timeout=30, message="remote READ_COMMITTED fetch")
        assert part.last_stable_offset == LSO
        assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(7, 1)]

    values, end, position = read_kafka_python(h.broker.bootstrap, TOPIC, "read_committed", timeout=60)
    assert (values, end, position) == (COMMITTED, LSO, LSO)
    assert read_confluent(h.broker.bootstrap, TOPIC, "read_committed", LSO, timeout=60) == COMMITTED
