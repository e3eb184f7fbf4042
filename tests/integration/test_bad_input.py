"""Malformed and hostile requests over raw sockets; after each, the broker must still serve a normal client.

One broker is shared by the module (``auto.create.topics.enable=false``, ``socket.request.max.bytes`` = 1 MiB).
"""

from __future__ import annotations

import os
import random
import struct
import uuid

import pytest
from kafka.protocol.metadata import ApiVersionsResponse

from tests.support import ck
from tests.support.kafka_wire import (
    CORRUPT_MESSAGE,
    OFFSET_OUT_OF_RANGE,
    UNKNOWN_TOPIC_OR_PARTITION,
    UNSUPPORTED_VERSION,
    ConnectionClosed,
    WireClient,
    api_versions_request_bytes,
    build_batch,
    corrupt_crc,
    decode_records,
    raw_request_bytes,
)
from tests.support.records import Rec
from tests.support.waiting import wait_until

MAX_REQUEST = 1024 * 1024
MODULE_BROKER_OVERRIDES = {"auto.create.topics.enable": "false", "socket.request.max.bytes": MAX_REQUEST}

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def bs(module_broker) -> str:
    ck.create_topic(module_broker.bootstrap, "sane", 1)
    ck.create_topic(module_broker.bootstrap, "bad-input", 1)
    return module_broker.bootstrap


def new_topic(bs: str, partitions: int = 1) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    ck.create_topic(bs, name, partitions)
    return name


def assert_serves(bs: str) -> None:
    """A normal librdkafka producer round trip, then a raw Fetch of exactly that record."""
    value = os.urandom(16)
    [(_, off)] = ck.produce_all(bs, "sane", [Rec(partition=0, key=b"k", value=value)], timeout=20)
    with WireClient.connect(bs) as c:
        resp = c.fetch("sane", 0, off, version=c.pick_version(1, 11))
        part = resp.responses[0].partitions[0]
        assert part.error_code == 0
        recs = decode_records(part.records)
        assert recs and recs[0].offset == off and recs[0].value == value


def produce_error(resp) -> tuple[int, int]:
    pr = resp.responses[0].partition_responses[0]
    return pr.error_code, pr.base_offset


_rnd = random.Random(20240601)

# -- connection-level garbage ---------------------------------------------------------------------------------
GARBAGE = {
    # Produce v7: transactional_id null (length -2 reads as null in Kafka too), then acks, timeout and a
    # *negative* count for the non-nullable topic_data array: Kafka's parser throws ("non-nullable field
    # topicData was serialized as null") and closes the connection
    "produce-negative-array-count": raw_request_bytes(0, 7, 1, body=b"\xff\xfe\xfd\xfc" * 8 + _rnd.randbytes(64)),
    # Produce v7 whose transactional_id claims 0x7000 bytes but the frame ends after 10
    "produce-truncated-string": raw_request_bytes(0, 7, 1, body=b"\x70\x00" + b"A" * 10),
    # a frame too short to hold a request header
    "short-frame": struct.pack(">i", 3) + b"\x00\x01\x02",
    # a negative frame size
    "negative-size": struct.pack(">i", -5) + _rnd.randbytes(16),
    # a Metadata v8 header whose topic array claims 2^31-1 entries
    "huge-array-count": raw_request_bytes(3, 8, 1, body=struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 8),
    # random bytes under a plausible frame size
    "random": struct.pack(">i", 64) + b"\x7f\x3a" + _rnd.randbytes(62),
}


@pytest.mark.parametrize("kind", sorted(GARBAGE))
def test_garbage_frame_closes_only_that_connection(bs, kind):
    with WireClient.connect(bs) as bystander, WireClient.connect(bs) as victim:
        assert bystander.api_versions(0).error_code == 0
        victim.send_raw(GARBAGE[kind])
        assert victim.wait_closed(5.0), f"{kind}: broker kept the connection open after a garbage frame"
        # the other, already-open connection is unaffected
        md = bystander.metadata(["sane"], version=bystander.pick_version(3, 8))
        assert md.topics[0].error_code == 0
    assert_serves(bs)


def test_frame_larger_than_socket_request_max_bytes_is_refused(bs):
    with WireClient.connect(bs) as c:
        # announce a frame one byte over the limit; the broker must not wait for (or buffer) the body
        c.send_raw(struct.pack(">i", MAX_REQUEST + 1) + raw_request_bytes(18, 0, 1)[4:])
        assert c.wait_closed(5.0), "broker accepted a frame size above socket.request.max.bytes"
    # a legitimate request close to the limit is served: a Produce of one ~900 KB record
    big = os.urandom(900 * 1024)
    with WireClient.connect(bs) as c:
        err, _ = produce_error(
            c.produce("bad-input", 0, build_batch([(b"big", big, [])]), version=c.pick_version(0, 7))
        )
        assert err == 0
    assert_serves(bs)


# -- request-level errors -------------------------------------------------------------------------------------
def test_produce_with_wrong_crc_is_corrupt_message(bs):
    topic = new_topic(bs)
    batch = build_batch([(b"k%d" % i, b"v%d" % i, [("h", b"x")]) for i in range(5)])
    with WireClient.connect(bs) as c:
        v = c.pick_version(0, 7)
        err, _ = produce_error(c.produce(topic, 0, corrupt_crc(batch), version=v))
        assert err == CORRUPT_MESSAGE
        # nothing was appended ...
        lo = c.list_offsets(topic, 0, -1, version=c.pick_version(2, 5))
        assert lo.topics[0].partitions[0].offset == 0
        # ... and the same connection keeps working: the intact batch lands at offset 0
        assert produce_error(c.produce(topic, 0, batch, version=v)) == (0, 0)
        # a corrupted compressed batch too
        gz = build_batch([(b"k", b"v" * 100, [])] * 10, compression=1)
        err, _ = produce_error(c.produce(topic, 0, corrupt_crc(gz), version=v))
        assert err == CORRUPT_MESSAGE
        lo = c.list_offsets(topic, 0, -1, version=c.pick_version(2, 5))
        assert lo.topics[0].partitions[0].offset == 5
    assert_serves(bs)


def test_produce_to_missing_topic_without_auto_create(bs):
    batch = build_batch([(b"k", b"v", [])])
    with WireClient.connect(bs) as c:
        err, _ = produce_error(c.produce("no-such-topic", 0, batch, version=c.pick_version(0, 7)))
        assert err == UNKNOWN_TOPIC_OR_PARTITION
        # and the topic was not created by the Produce or by a Metadata request asking to create it
        md = c.metadata(["no-such-topic"], version=c.pick_version(3, 8), allow_auto_create=True)
        assert md.topics[0].error_code == UNKNOWN_TOPIC_OR_PARTITION
        # an existing topic but a partition it does not have
        err, _ = produce_error(c.produce("bad-input", 7, batch, version=c.pick_version(0, 7)))
        assert err == UNKNOWN_TOPIC_OR_PARTITION
    assert_serves(bs)


def test_fetch_beyond_log_end_is_offset_out_of_range(bs):
    topic = new_topic(bs)
    with WireClient.connect(bs) as c:
        batch = build_batch([(b"k", b"v%d" % i, []) for i in range(3)])
        assert produce_error(c.produce(topic, 0, batch, version=c.pick_version(0, 7))) == (0, 0)
        fv = c.pick_version(1, 11)
        # at the log end: no error, no records
        at_leo = c.fetch(topic, 0, 3, version=fv).responses[0].partitions[0]
        assert at_leo.error_code == 0 and at_leo.high_watermark == 3 and not decode_records(at_leo.records)
        for offset in (4, 1000, 2**40):
            part = c.fetch(topic, 0, offset, version=fv).responses[0].partitions[0]
            assert part.error_code == OFFSET_OUT_OF_RANGE, f"fetch at {offset} (LEO 3): error {part.error_code}"
    assert_serves(bs)


@pytest.mark.parametrize("version", [99, 5, 32767])
def test_api_versions_unknown_version_gets_v0_error_body(bs, version):
    with WireClient.connect(bs) as c:
        c.send_raw(api_versions_request_bytes(version, correlation_id=4242))
        payload = c.recv_frame()
        # response header v0 (correlation id only), then a v0 body: error_code, [api_key, min, max]; nothing else
        (corr, err, n) = struct.unpack_from(">ihi", payload, 0)
        assert corr == 4242
        assert err == UNSUPPORTED_VERSION
        assert n >= 1 and len(payload) == 4 + 2 + 4 + 6 * n, f"not a v0-format body: {payload.hex()}"
        resp = ApiVersionsResponse.decode(payload, version=0, header=True)
        ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        assert 18 in ranges and ranges[18][0] == 0 and ranges[18][1] >= 3, ranges
        assert ranges[18][1] < version
        # the connection stays usable: a supported version is answered normally
        ok = c.api_versions(0)
        assert ok.error_code == 0 and any(k.api_key == 0 for k in ok.api_keys)
    assert_serves(bs)


@pytest.mark.parametrize("api_key", [9999, 32767, 77])
def test_unknown_api_key_closes_connection(bs, api_key):
    with WireClient.connect(bs) as c:
        c.send_raw(raw_request_bytes(api_key, 0, 9, body=b"\x00" * 8))
        assert c.wait_closed(5.0), f"api key {api_key}: connection left open"
    assert_serves(bs)


def test_unsupported_version_of_known_api(bs):
    """A Fetch one version above the advertised maximum gets an answer with the right correlation id or a closed
    connection (Kafka closes it) -- never a hang or a crash: the broker keeps serving."""
    with WireClient.connect(bs) as c:
        _, hi = c.versions()[1]
        c.send_raw(raw_request_bytes(1, hi + 1, 5, body=b"\x00" * 40))
        try:
            payload = c.recv_frame()
        except ConnectionClosed:  # Kafka's answer; a timeout (socket.timeout) fails the test
            payload = None
        if payload is not None:
            (corr,) = struct.unpack_from(">i", payload, 0)
            assert corr == 5
    assert_serves(bs)


def test_clients_cannot_write_the_remote_log_metadata_topic(broker_factory):
    """`__remote_log_metadata` is internal: a client's Produce gets INVALID_TOPIC_EXCEPTION, and so does one with the
    RLMM producer's client id aimed at another internal topic (only other brokers' RLMMs write metadata records)."""
    from strata.broker.tiered import RLMM_PRODUCER_CLIENT_ID
    from strata.protocol.errors import ErrorCode

    b = broker_factory(
        **{
            "remote.log.storage.system.enable": True,
            "remote.log.metadata.topic.num.partitions": 1,
            "offsets.topic.num.partitions": 1,
        }
    )
    ck.create_topic(b.bootstrap, "user", 1)
    c = ck.consumer(b.bootstrap, **{"group.id": "makes-offsets-topic", "auto.offset.reset": "earliest"})
    try:
        c.subscribe(["user"])
        wait_until(lambda: c.poll(0.2) is None and c.assignment(), timeout=30, message="group joined")
    finally:
        c.close()
    batch = build_batch([(None, b"not a metadata record", [])])
    with WireClient.connect(b.bootstrap) as w:
        err, _ = produce_error(w.produce("__remote_log_metadata", 0, batch, version=w.pick_version(0, 7)))
        assert err == ErrorCode.INVALID_TOPIC_EXCEPTION
    with WireClient(b.host, b.port, client_id=f"{RLMM_PRODUCER_CLIENT_ID}-7") as w:
        err, _ = produce_error(w.produce("__consumer_offsets", 0, batch, version=w.pick_version(0, 7)))
        assert err == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert_serves(b.bootstrap)


# -- accepted before, refused as Kafka refuses them ------------------------------------------------------------
def test_produce_records_must_be_exactly_one_v2_batch(bs):
    """Kafka's ProduceRequest.validateRecords (v3+): no batch, two batches, or zstd below v7 are refused per
    partition, with a message (v8+), and nothing is appended."""
    from strata.protocol.errors import ErrorCode

    topic = new_topic(bs)
    one = build_batch([(b"k", b"v", [])])
    with WireClient.connect(bs) as c:
        v = c.pick_version(8, 9)
        for records, want in (
            (one + one, "exactly one record batch per partition"),
            (b"", "at least one record batch"),
        ):
            pr = c.produce(topic, 0, records, version=v).responses[0].partition_responses[0]
            assert (pr.error_code, pr.base_offset) == (ErrorCode.INVALID_RECORD, -1)
            assert want in pr.error_message
        zstd = build_batch([(b"k", b"z" * 100, [])], compression=4)
        pr = c.produce(topic, 0, zstd, version=6).responses[0].partition_responses[0]
        assert pr.error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        assert c.list_offsets(topic, 0, -1, version=c.pick_version(2, 5)).topics[0].partitions[0].offset == 0
        # the same batches, as Kafka takes them: one at a time, zstd from v7 on
        assert produce_error(c.produce(topic, 0, one, version=v)) == (0, 0)
        assert produce_error(c.produce(topic, 0, zstd, version=7)) == (0, 1)
    assert_serves(bs)


def test_a_topic_name_colliding_in_dots_and_underscores_is_refused(bs):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    base = f"fz{uuid.uuid4().hex[:8]}"
    ck.create_topic(bs, f"{base}.col", 1)
    a = ck.admin(bs)
    fs = a.create_topics([NewTopic(f"{base}_col", num_partitions=1, replication_factor=1)], request_timeout=30)
    with pytest.raises(KafkaException) as ei:
        fs[f"{base}_col"].result(timeout=30)
    err = ei.value.args[0]
    assert err.code() == KafkaError.TOPIC_EXCEPTION  # INVALID_TOPIC_EXCEPTION (17)
    assert f"collides with existing topic: {base}.col" in err.str()
    assert f"{base}_col" not in a.list_topics(timeout=30).topics
    assert_serves(bs)


def test_offset_commit_to_a_partition_the_topic_does_not_have(bs):
    from kafka.protocol.consumer import OffsetCommitRequest

    from strata.protocol.errors import ErrorCode

    topic = new_topic(bs)  # one partition
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    P = T.OffsetCommitRequestPartition
    with WireClient.connect(bs) as c:
        v = c.pick_version(8, 8)
        req = OffsetCommitRequest[v](
            group_id=f"g-{uuid.uuid4().hex[:8]}",
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=[
                T(
                    name=topic,
                    partitions=[P(partition_index=i, committed_offset=5, committed_metadata=None) for i in (-1, 1)],
                )
            ],
        )
        resp = c.request(req)
        assert [(p.partition_index, p.error_code) for p in resp.topics[0].partitions] == [
            (-1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            (1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ]
    assert_serves(bs)
