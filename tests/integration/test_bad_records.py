"""Bad record sections over real sockets (issue 21): each corrupt batch of the fuzzer is refused with Kafka's error
and appends nothing, so a confluent-kafka consumer reads the valid record produced after it; per-record errors
reach librdkafka (test 0011: keyless records on a compacted topic fail, keyed ones of other batches succeed);
bombs are stopped by the inflation bound while the broker keeps answering."""

from __future__ import annotations

import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import KafkaError

from strata.protocol.errors import ErrorCode
from strata.protocol.records import GZIP, LZ4, SNAPPY, ZSTD
from tests.support import ck
from tests.support.bad_batches import frame, gzip_bomb, record, records_batch, zstd_bomb
from tests.support.kafka_wire import WireClient
from tests.support.records import Rec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def bs(module_broker) -> str:
    return module_broker.bootstrap


def new_topic(bs: str, **config: str) -> str:
    name = f"br-{uuid.uuid4().hex[:10]}"
    ck.create_topic(bs, name, 1, config=config)
    return name


def good_records(n: int) -> list[bytes]:
    return [record(i, b"k%d" % i, b"value-%d" % i) for i in range(n)]


CORRUPT = {
    "count-2^31-1": (frame(good_records(1)[0], 0x7FFFFFFF), ErrorCode.INVALID_RECORD),
    "garbage-section": (frame(os.urandom(300), 3), ErrorCode.INVALID_RECORD),
    "truncated-section": (frame(b"".join(good_records(3))[:-4], 3), ErrorCode.INVALID_RECORD),
    "short-section": (frame(b"".join(good_records(2)), 3), ErrorCode.INVALID_RECORD),
    "bad-offset-deltas": (
        records_batch([record(0, b"a", b"v"), record(2, b"b", b"v"), record(1, b"c", b"v")]),
        ErrorCode.INVALID_RECORD,
    ),
    **{
        f"uncompressed-flagged-{name}": (frame(b"".join(good_records(3)), 3, codec=c), ErrorCode.CORRUPT_MESSAGE)
        for name, c in (("gzip", GZIP), ("snappy", SNAPPY), ("lz4", LZ4), ("zstd", ZSTD))
    },
    **{
        f"codec-{c}": (frame(b"".join(good_records(2)), 2, codec=c), ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
        for c in (5, 6, 7)
    },
}


def partition_response(c: WireClient, topic: str, batch: bytes):
    v = c.pick_version(0, 9)
    assert v >= 8
    return c.produce(topic, 0, batch, version=v).responses[0].partition_responses[0]


@pytest.mark.parametrize("case", sorted(CORRUPT))
def test_corrupt_batch_is_refused_and_the_next_record_is_readable(bs, case):
    batch, expected = CORRUPT[case]
    topic = new_topic(bs)
    with WireClient.connect(bs) as c:
        pr = partition_response(c, topic, batch)
        assert (pr.error_code, pr.base_offset) == (expected, -1)
    [(_, off)] = ck.produce_all(bs, topic, [Rec(partition=0, key=b"after", value=b"valid")], timeout=30)
    assert off == 0  # the refused batch moved nothing
    [rec] = ck.read_partition(bs, topic, 0, 0, 1, timeout=30, **{"auto.offset.reset": "earliest"})
    assert (rec.key, rec.value, rec.offset) == (b"after", b"valid", 0)


def test_produce_v8_lists_record_errors_with_batch_index(bs):
    topic = new_topic(bs, **{"cleanup.policy": "compact"})
    recs = [record(i, None if i in (0, 2) else b"k%d" % i, b"v") for i in range(4)]
    with WireClient.connect(bs) as c:
        pr = partition_response(c, topic, records_batch(recs))
        assert pr.error_code == ErrorCode.INVALID_RECORD
        assert [e.batch_index for e in pr.record_errors] == [0, 2]
        assert all(
            "Compacted topic cannot accept message without key" in e.batch_index_error_message for e in pr.record_errors
        )
        assert pr.error_message.startswith("One or more records have been rejected due to 2 record errors")
        ok = partition_response(c, topic, records_batch(good_records(2)))
        assert (ok.error_code, ok.base_offset) == (0, 0)


def test_librdkafka_fails_only_the_keyless_records_of_a_compacted_topic(bs):
    """librdkafka 0011: the keyless records of a batch fail with INVALID_RECORD (their own message), the keyed
    ones of that batch with _INVALID_DIFFERENT_RECORD, and the batches that are all keyed are delivered."""
    topic = new_topic(bs, **{"cleanup.policy": "compact"})
    p = ck.producer(bs, **{"linger.ms": 50})
    reports: dict[bytes, KafkaError | None] = {}

    def on_delivery(err, msg):
        reports[msg.value()] = err

    for i in range(5):
        p.produce(topic, value=b"first-%d" % i, key=b"k%d" % i, partition=0, on_delivery=on_delivery)
    assert p.flush(30) == 0
    for i in range(6):
        key = None if i % 2 else b"k%d" % i
        p.produce(topic, value=b"mixed-%d" % i, key=key, partition=0, on_delivery=on_delivery)
    assert p.flush(30) == 0
    for i in range(5):
        p.produce(topic, value=b"last-%d" % i, key=b"k%d" % i, partition=0, on_delivery=on_delivery)
    assert p.flush(30) == 0

    for i in range(5):
        assert reports[b"first-%d" % i] is None and reports[b"last-%d" % i] is None
    for i in range(1, 6, 2):
        err = reports[b"mixed-%d" % i]
        assert err is not None and err.code() == KafkaError.INVALID_RECORD, err
    for i in range(0, 6, 2):
        err = reports[b"mixed-%d" % i]
        assert err is not None and err.code() == KafkaError._INVALID_DIFFERENT_RECORD, err
    got = ck.read_partition(bs, topic, 0, 0, 10, timeout=30, **{"auto.offset.reset": "earliest"})
    assert [r.value for r in got] == [b"first-%d" % i for i in range(5)] + [b"last-%d" % i for i in range(5)]


def _answers_quickly(bs: str) -> float:
    t = time.monotonic()
    with WireClient.connect(bs) as c:
        c.api_versions()
    return time.monotonic() - t


def test_gzip_bomb_to_a_compacted_topic(bs):
    """1 MB of gzip inflating to 1,000 MiB: refused by the bound (MESSAGE_TOO_LARGE), in a worker thread."""
    topic = new_topic(bs, **{"cleanup.policy": "compact", "max.message.bytes": str(2 << 20)})
    bomb = gzip_bomb(1000 << 20)
    with WireClient.connect(bs, timeout=60) as c, ThreadPoolExecutor(1) as pool:
        fut = pool.submit(partition_response, c, topic, bomb)
        assert _answers_quickly(bs) < 5  # other clients are served meanwhile
        pr = fut.result(timeout=60)
    assert pr.error_code == ErrorCode.MESSAGE_TOO_LARGE
    [(_, off)] = ck.produce_all(bs, topic, [Rec(partition=0, key=b"k", value=b"after")], timeout=30)
    assert off == 0


def test_zstd_bomb_then_list_offsets_by_timestamp(bs):
    """33 KB of zstd inflating to 1,000 MiB: refused on produce; ListOffsets by time still answers."""
    topic = new_topic(bs)
    ts = int(time.time() * 1000)
    with WireClient.connect(bs, timeout=60) as c:
        pr = partition_response(c, topic, zstd_bomb(1000 << 20))
        assert pr.error_code == ErrorCode.MESSAGE_TOO_LARGE
    ck.produce_all(bs, topic, [Rec(partition=0, key=b"k", value=b"v")], timeout=30)
    assert ck.offsets_for_times(bs, topic, {0: ts - 60_000}) == {0: 0}
