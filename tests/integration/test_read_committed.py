"""READ_COMMITTED against a broker that recovered transactional data from its log directory (issue 19's log
layer; the transaction coordinator does not exist yet, so the data is written with storage calls while the broker
is stopped, as a coordinator-approved producer and WriteTxnMarkers would have written it).

Partition layout (offsets): 0 plain, 1-2 producer 7 (aborted by 6), 3 producer 8 (committed by 5), 4 plain,
5 COMMIT marker, 6 ABORT marker, 7-8 producer 9 (still open), 9 plain. So HW = LEO = 10 and LSO = 7.
kafka-python and confluent-kafka consumers with isolation.level=read_committed see plain-0, p8-0, plain-4 and stop
at the LSO; read_uncommitted consumers see every data record and no marker.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.support.broker_proc import StrataBroker
from tests.support.kafka_wire import WireClient
from tests.support.txn_log import TxnWriter, read_confluent, read_kafka_python, write_partition

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOPIC = "txn-read"
COMMITTED = [b"plain-0", b"p8-0", b"plain-4"]
UNCOMMITTED = [b"plain-0", b"p7-0", b"p7-1", b"p8-0", b"plain-4", b"p9-0", b"p9-1", b"plain-9"]
LSO, LEO = 7, 10
LATE = int(time.time() * 1000) + 3_600_000  # plain-9's timestamp: only it is at or after LATE


def write_transactions(w: TxnWriter) -> None:
    w.plain(b"plain-0")
    w.txn(7, b"p7-0", b"p7-1")
    w.txn(8, b"p8-0")
    w.plain(b"plain-4")
    w.end(8, True)
    w.end(7, False)
    w.txn(9, b"p9-0", b"p9-1")
    w.plain(b"plain-9", timestamp=LATE)
    assert w.log.log_end_offset == LEO


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StrataBroker]:
    b = StrataBroker(tmp_path_factory.mktemp("read_committed"), name="read_committed").start()
    try:
        with WireClient.connect(b.bootstrap) as c:
            c.create_topic(TOPIC, 1)
        b.stop()
        write_partition(b.partition_dir(TOPIC, 0), write_transactions)
        b.start()
        yield b
    finally:
        b.stop()


def test_kafka_python_read_committed_skips_aborted_and_stops_at_the_lso(txn_broker):
    values, end, position = read_kafka_python(txn_broker.bootstrap, TOPIC, "read_committed")
    assert end == LSO  # ListOffsets isolation_level=1: latest is the LSO
    assert values == COMMITTED
    assert position == LSO


def test_kafka_python_read_uncommitted_sees_everything(txn_broker):
    values, end, position = read_kafka_python(txn_broker.bootstrap, TOPIC, "read_uncommitted")
    assert end == LEO
    assert values == UNCOMMITTED
    assert position == LEO


def test_fetch_answers_lso_and_aborted_transactions(txn_broker):
    with WireClient.connect(txn_broker.bootstrap) as c:
        req = WireClient.fetch_request(TOPIC, 0, 0, version=11, max_wait_ms=10)
        req.isolation_level = 1
        part = c.request(req).responses[0].partitions[0]
        assert (part.error_code, part.high_watermark, part.last_stable_offset) == (0, LEO, LSO)
        assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(7, 1)]
        plain = c.fetch(TOPIC, 0, 0, version=11, max_wait_ms=10).responses[0].partitions[0]
        assert plain.last_stable_offset == LSO and plain.aborted_transactions is None


def test_confluent_kafka_read_committed(txn_broker):
    assert read_confluent(txn_broker.bootstrap, TOPIC, "read_committed", LSO) == COMMITTED
    assert read_confluent(txn_broker.bootstrap, TOPIC, "read_uncommitted", LEO) == UNCOMMITTED


def test_list_offsets_by_time_stops_at_the_lso(txn_broker):
    """Kafka's lastFetchableOffset: a search by time answers consumers only offsets below the HW, or the LSO for
    READ_COMMITTED (plain-9 is past the open transaction)."""
    from kafka.protocol.consumer import ListOffsetsRequest

    T = ListOffsetsRequest.ListOffsetsTopic

    def lookup(ts: int, isolation: int) -> int:
        part = T.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=ts)
        req = ListOffsetsRequest[5](replica_id=-1, isolation_level=isolation, topics=[T(name=TOPIC, partitions=[part])])
        with WireClient.connect(txn_broker.bootstrap) as c:
            p = c.request(req).topics[0].partitions[0]
        assert p.error_code == 0
        return p.offset

    assert lookup(LATE, 0) == 9
    assert lookup(LATE, 1) == -1
    assert lookup(0, 1) == 0
    assert (lookup(-1, 0), lookup(-1, 1)) == (LEO, LSO)
