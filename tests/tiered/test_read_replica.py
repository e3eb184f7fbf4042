"""Read-replica topics (issue 24): a second broker, sharing only the S3 bucket (moto), serves an origin broker's tiered
topic read-only from the origin's manifests.

One origin broker (its own key prefix) and two replica brokers (each with a prefix of its own) for the whole module.
The origin's topic: 5 records of 100 bytes per batch, 2 batches per segment (segment j = offsets [10j, 10j + 9]),
`local.retention.bytes=1`, manifests written at most every 200 ms; the replicas read the manifests every 300 ms.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition

from strata.cli.admin_client import RESOURCE_TOPIC
from tests.support import ck
from tests.support.ck import QUIET
from tests.support.cli_run import ok, strata
from tests.support.s3_servers import MotoServer
from tests.tiered.harness import (
    EARLIEST,
    LATEST,
    LATEST_TIERED,
    OFFSET_OUT_OF_RANGE,
    Harness,
    S3Backend,
    Scenario,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

T = TypeVar("T")
TOPIC = "rr"
SEGMENT_RECORDS = 10
SYNC_MS = 300
Row = tuple[int | None, bytes | None, bytes | None, int]  # offset, key, value, timestamp
WAIT_S = 45.0


def wait_for(what: str, probe: Callable[[], T], ok: Callable[[T], bool], timeout: float = WAIT_S) -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
            if ok(last):
                return last
        except Exception as e:  # noqa: BLE001 - a broker not there yet: probed again
            last = e
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; last saw {last!r}")


class Replica(Harness):
    """A broker with tiered storage of its own (its own prefix in the bucket) that hosts read-replica topics."""

    def __init__(self, moto: MotoServer, tmp: Path, name: str) -> None:
        backend = S3Backend(moto, f"{name}-{uuid.uuid4().hex[:8]}/")
        super().__init__(tmp, backend, {"remote.readreplica.sync.interval.ms": SYNC_MS}, name=name)

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def at(self, spec: int) -> int:
        """ListOffsets `spec` of the replica topic's partition 0."""
        return self.offset(TOPIC, 0, spec)


@pytest.fixture(scope="module")
def brokers(
    moto_server: MotoServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Harness, list[Replica]]]:
    """The origin and two replicas, each with a key prefix of its own in one bucket."""
    backend = S3Backend(moto_server, f"origin-{uuid.uuid4().hex[:8]}/")
    origin = Harness(
        tmp_path_factory.mktemp("origin"),
        backend,
        {"remote.manifest.upload.interval.ms": 200, "remote.cluster.manifest.interval.ms": 300},
        name="origin",
    )
    replicas = [Replica(moto_server, tmp_path_factory.mktemp(f"replica{i}"), f"replica{i}") for i in (1, 2)]
    procs = [origin.broker, *(r.broker for r in replicas)]
    try:
        for b in procs:  # one by one: parallel starts on a busy 2-core runner overrun the start timeout
            b.start()
        Scenario("origin topic").create_topic(TOPIC, configs={"local.retention.bytes": "1"}).produce(
            TOPIC, 0, 50
        ).wait_for_offload(TOPIC, 0, up_to_offset=39).run(origin)
        yield origin, replicas
    finally:
        for b in procs:
            b.stop()


@pytest.fixture(scope="module")
def origin(brokers: tuple[Harness, list[Replica]]) -> Harness:
    return brokers[0]


@pytest.fixture(scope="module")
def replicas(brokers: tuple[Harness, list[Replica]]) -> list[Replica]:
    return brokers[1]


def origin_value(origin: Harness) -> str:
    assert isinstance(origin.backend, S3Backend)
    return f"{origin.backend.server.bucket}/{origin.backend.prefix}"


def create_replica_topic(bootstrap: str, value: str, partitions: int = 1) -> Any:
    a = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    fs = a.create_topics(
        [NewTopic(TOPIC, num_partitions=partitions, replication_factor=1, config={"remote.readreplica": value})],
        request_timeout=30,
    )
    return fs[TOPIC].result(timeout=30)


def consume_confluent(bootstrap: str, start: int, end: int, **conf: Any) -> list[Row]:
    return [
        (r.offset, r.key, r.value, r.timestamp or 0)
        for r in ck.read_range(bootstrap, TOPIC, 0, start, end, WAIT_S, **conf)
    ]


def consume_kafka_python(bootstrap: str, start: int, end: int) -> list[Row]:
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    out: list[Row] = []
    try:
        tp = KTopicPartition(TOPIC, 0)
        c.assign([tp])
        c.seek(tp, start)
        deadline = time.monotonic() + WAIT_S
        while (not out or (out[-1][0] or 0) < end - 1) and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                out += [(r.offset, r.key, r.value, r.timestamp) for r in recs]
    finally:
        c.close()
    return [r for r in out if (r[0] or 0) < end]


def test_replicas_follow_the_origin_and_serve_its_bytes(origin: Harness, replicas: list[Replica]) -> None:
    value = origin_value(origin)
    r1, r2 = replicas
    for r in replicas:
        create_replica_topic(r.bootstrap, value)
    # the topic id and configs are the origin's
    with r1.admin() as a:
        [desc] = a.describe_topics([TOPIC])
    assert desc.topic_id == origin.topic(TOPIC).topic_id
    for r in replicas:
        wait_for(f"{r.broker.name} serving [0, 40)", functools.partial(r.at, LATEST), lambda o: o == 40)
        assert r.at(EARLIEST) == 0
        assert r.at(LATEST_TIERED) == 39
    expected = consume_confluent(origin.broker.bootstrap, 0, 40)
    assert [r[0] for r in expected] == list(range(40))
    assert consume_confluent(r1.bootstrap, 0, 40) == expected
    assert consume_kafka_python(r2.bootstrap, 0, 40) == expected
    # the replica cluster's own consumer groups: offsets commit there as on any topic
    group = Consumer({"bootstrap.servers": r1.bootstrap, "group.id": "rr-group", **QUIET})
    try:
        group.commit(offsets=[TopicPartition(TOPIC, 0, 40)], asynchronous=False)
        [committed] = group.committed([TopicPartition(TOPIC, 0)], timeout=30)
        assert committed.offset == 40
    finally:
        group.close()
    # ListOffsets by timestamp through the origin's remote time indexes
    ts = expected[23][3]
    with r1.wire() as c:
        p = c.list_offsets(TOPIC, 0, ts, version=7).topics[0].partitions[0]
        assert (p.error_code, p.offset) == (0, 23)

    # the origin keeps producing: the replicas follow within one segment plus the sync interval
    Scenario("more").produce(TOPIC, 0, 40).wait_for_offload(TOPIC, 0, up_to_offset=79).run(origin)
    started = time.monotonic()
    for r in replicas:
        wait_for(f"{r.broker.name} following to 80", functools.partial(r.at, LATEST), lambda o: o == 80)
    assert time.monotonic() - started < SYNC_MS / 1000 + 10.0
    origin_hw = origin.offset(TOPIC, 0, LATEST)
    assert origin_hw - r1.at(LATEST) <= SEGMENT_RECORDS
    assert consume_confluent(r2.bootstrap, 35, 80) == consume_confluent(origin.broker.bootstrap, 35, 80)
    assert consume_kafka_python(r1.bootstrap, 60, 80) == consume_confluent(origin.broker.bootstrap, 60, 80)

    # `strata topics describe` and the metrics show the read-replica state
    out = ok(strata("topics", "describe", "--bootstrap-server", r1.bootstrap, "--topic", TOPIC))
    assert f"ReadReplicaOf: {value}" in out and "SyncedOffset: 79\tLag: 0" in out, out
    lag = {"topic": TOPIC, "partition": "0"}
    assert ("strata_read_replica_lag_offsets", tuple(sorted(lag.items()))) in r1.metrics()
    assert r1.metric("strata_read_replica_lag_offsets", **lag) == 0
    assert r1.metric("strata_read_replica_lag_seconds", **lag) < 10

    # nothing of the replicas lands in their own prefix (their topics are the origin's), nor a manifest of theirs
    for r in replicas:
        assert not [k for k in r.backend.list_all() if TOPIC in k], r.backend.list_all()


def test_produce_and_writes_are_refused(origin: Harness, replicas: list[Replica]) -> None:
    r1 = replicas[0]
    wait_for("replica topic", lambda: r1.at(LATEST), lambda o: o > 0)
    errors: list[Any] = []
    p = Producer({"bootstrap.servers": r1.bootstrap, **QUIET})
    started = time.monotonic()
    p.produce(TOPIC, b"v", partition=0, on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(30) == 0
    assert time.monotonic() - started < 10
    [err] = errors
    assert err is not None and err.code() == KafkaError.TOPIC_EXCEPTION, err  # not retried: a permanent error
    del p

    a = AdminClient({"bootstrap.servers": r1.bootstrap, **QUIET})
    with pytest.raises(Exception, match="is a read replica"):
        a.create_partitions([NewPartitions(TOPIC, 3)])[TOPIC].result(timeout=30)
    op = ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)
    res = ConfigResource(ConfigResource.Type.TOPIC, TOPIC, incremental_configs=[op])
    with pytest.raises(Exception, match="is a read replica"):
        a.incremental_alter_configs([res])[res].result(timeout=30)
    [fut] = a.delete_records([TopicPartition(TOPIC, 0, 10)], request_timeout=30).values()
    with pytest.raises(KafkaException) as info:
        fut.result(timeout=30)
    assert info.value.args[0].code() == KafkaError.POLICY_VIOLATION
    # a topic the bucket does not describe cannot be replicated
    with pytest.raises(Exception, match="no topic manifest"):
        a2 = AdminClient({"bootstrap.servers": r1.bootstrap, **QUIET})
        fs = a2.create_topics([NewTopic("nope", 1, 1, config={"remote.readreplica": origin_value(origin)})])
        fs["nope"].result(timeout=30)


def test_origin_retention_is_seen_and_replicas_restart(origin: Harness, replicas: list[Replica]) -> None:
    r1 = replicas[0]
    wait_for("replica topic", lambda: r1.at(LATEST), lambda o: o >= 40)
    segment_bytes = origin.topic(TOPIC).shape.batch_bytes * 2
    with origin.admin() as a:
        a.alter_configs(RESOURCE_TOPIC, TOPIC, set={"retention.bytes": str(3 * segment_bytes)})
    start = wait_for("origin retention", lambda: origin.offset(TOPIC, 0, EARLIEST), lambda o: o >= 20)
    wait_for("replica log start", lambda: r1.at(EARLIEST), lambda o: o >= start)
    with r1.wire() as c:
        part = c.fetch(TOPIC, 0, 0).responses[0].partitions[0]
        assert part.error_code == OFFSET_OUT_OF_RANGE
    # a consumer with auto.offset.reset=earliest moves on to the new start
    got = consume_confluent(r1.bootstrap, 0, start + 5, **{"auto.offset.reset": "earliest"})
    assert got and (got[0][0] or -1) >= start

    # a restarted replica serves the topic again from the bucket, the origin's retention included
    r2 = replicas[1]
    r2.broker.restart()
    wait_for("restarted replica", lambda: (r2.at(EARLIEST), r2.at(LATEST)), lambda o: o[0] >= start)
    assert r2.at(LATEST) == r1.at(LATEST)
    end = r1.at(LATEST)
    assert consume_confluent(r2.bootstrap, end - 10, end) == consume_confluent(origin.broker.bootstrap, end - 10, end)

    # deleting a read-replica topic deletes nothing of the origin's: no partition deletion is even recorded
    before = origin.remote_objects(TOPIC, 0)
    with r2.admin() as a:
        a.delete_topic(TOPIC)
    assert not r2.rlmm().partition_deletes
    assert origin.remote_objects(TOPIC, 0) == before
    assert consume_confluent(r1.bootstrap, end - 10, end) == consume_confluent(origin.broker.bootstrap, end - 10, end)
