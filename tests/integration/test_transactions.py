"""Transactions end to end on one broker (issue 19's coordinator): confluent-kafka transactional producers commit
and abort, READ_COMMITTED consumers see only committed records, zombies are fenced, a transaction left open is aborted
by the coordinator after transaction.timeout.ms, consume-transform-produce commits the group's offsets with the
transaction, and an open transaction survives a broker restart (state reloaded from __transaction_state).

One broker for the module; the restart test runs last.
"""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.support import ck
from tests.support.broker_proc import StrataBroker
from tests.support.kafka_wire import WireClient
from tests.support.records import Rec
from tests.support.txn_log import read_confluent, read_kafka_python
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

OFFSET_FETCH, FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS, END_TXN = 9, 10, 22, 24, 26
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StrataBroker]:
    b = StrataBroker(
        tmp_path_factory.mktemp("transactions"),
        {
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200,
            "transaction.state.log.num.partitions": 5,
            "offsets.topic.num.partitions": 5,
        },
        name="transactions",
    ).start()
    try:
        yield b
    finally:
        b.stop()


def _topic(broker: StrataBroker, partitions: int = 1) -> str:
    name = f"txn-{uuid.uuid4().hex[:8]}"
    ck.create_topic(broker.bootstrap, name, partitions)
    return name


def _producer(broker: StrataBroker, tid: str, **conf: Any) -> Producer:
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid, **ck.QUIET, **conf})
    p.init_transactions(30)
    return p


def _end(broker: StrataBroker, topic: str, committed: bool, partition: int = 0) -> int:
    """The latest offset ListOffsets answers: the LSO for READ_COMMITTED, the HW otherwise."""
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "probe",
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            **ck.QUIET,
        }
    )
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)[1])
    finally:
        c.close()


def _read(broker: StrataBroker, topic: str, isolation: str) -> list[bytes]:
    return read_confluent(broker.bootstrap, topic, isolation, stop=_end(broker, topic, False))


def test_commit_and_abort_read_committed_sees_only_committed(broker):
    topic = _topic(broker)
    p = _producer(broker, f"tx-{topic}")
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, f"c{i}".encode())
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(2):
        p.produce(topic, f"a{i}".encode())
    p.flush(30)  # the aborted records reach the log before the abort
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"c3")
    p.commit_transaction(30)

    # 4 committed + 2 aborted records + 3 markers; every transaction ended, so the LSO is the HW
    wait_until(lambda: _end(broker, topic, True) == _end(broker, topic, False) == 9, 30)
    assert _read(broker, topic, "read_committed") == [b"c0", b"c1", b"c2", b"c3"]
    assert _read(broker, topic, "read_uncommitted") == [b"c0", b"c1", b"c2", b"a0", b"a1", b"c3"]


def test_open_transaction_holds_the_lso(broker):
    topic = _topic(broker)
    p = _producer(broker, f"tx-{topic}")
    p.begin_transaction()
    p.produce(topic, b"open-0")
    p.flush(30)
    assert _end(broker, topic, False) == 1
    assert _end(broker, topic, True) == 0  # READ_COMMITTED stops before the open transaction
    p.commit_transaction(30)
    wait_until(lambda: _end(broker, topic, True) == 2, 30)


def test_zombie_producer_is_fenced(broker):
    topic = _topic(broker)
    tid = f"tx-{topic}"
    old = _producer(broker, tid)
    old.begin_transaction()
    old.produce(topic, b"zombie")
    old.flush(30)
    new = _producer(broker, tid)  # aborts the old one's transaction and bumps the epoch
    new.begin_transaction()
    new.produce(topic, b"fresh")
    new.commit_transaction(30)

    with pytest.raises(KafkaException) as e:
        old.commit_transaction(30)
    err: KafkaError = e.value.args[0]
    assert err.code() == KafkaError._FENCED or err.fatal(), err
    assert _read(broker, topic, "read_committed") == [b"fresh"]


def test_open_transaction_is_aborted_after_its_timeout(broker):
    topic = _topic(broker)
    tid = f"tx-{topic}"
    p = _producer(broker, tid, **{"transaction.timeout.ms": 3000})
    p.begin_transaction()
    p.produce(topic, b"left-open")
    p.flush(30)
    assert _end(broker, topic, True) == 0
    # the coordinator aborts it (epoch bump, abort marker): the LSO moves past the marker
    wait_until(lambda: _end(broker, topic, True) == 2, 30, message="LSO did not move after the timeout")
    assert _read(broker, topic, "read_committed") == []
    with WireClient.connect(broker.bootstrap) as c:
        d = c.call(DESCRIBE_TRANSACTIONS, 0, transactional_ids=[tid]).transaction_states[0]
        assert (d.error_code, d.transaction_state, d.producer_epoch) == (0, "CompleteAbort", 1)
    # the producer was fenced: its commit fails, and a fresh start works again
    with pytest.raises(KafkaException):
        p.commit_transaction(10)


def test_consume_transform_produce_commits_offsets_with_the_transaction(broker):
    src, dst = _topic(broker), _topic(broker)
    group = f"g-{src}"
    ck.produce_all(broker.bootstrap, src, [Rec(0, None, f"in{i}".encode()) for i in range(6)])
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            **ck.QUIET,
        }
    )
    p = _producer(broker, f"tx-{src}")
    try:
        consumer.subscribe([src])
        got: list[Any] = []
        wait_until(lambda: got.extend(m for m in consumer.consume(6, 0.5) if not m.error()) or len(got) >= 6, 60)

        def transform(batch: list[Any], commit: bool) -> None:
            p.begin_transaction()
            for m in batch:
                p.produce(dst, m.value().upper())
            positions = [TopicPartition(src, 0, batch[-1].offset() + 1)]
            p.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
            if commit:
                p.commit_transaction(30)
            else:
                p.flush(30)
                p.abort_transaction(30)

        transform(got[:3], True)
        transform(got[3:], False)  # aborted: neither its output nor its offset count
        committed = consumer.committed([TopicPartition(src, 0)], timeout=10)[0].offset
        assert committed == 3
        assert _read(broker, dst, "read_committed") == [b"IN0", b"IN1", b"IN2"]
    finally:
        consumer.close()


def test_admin_apis_describe_and_list(broker):
    topic = _topic(broker)
    tid = f"tx-{topic}"
    p = _producer(broker, tid)
    p.begin_transaction()
    p.produce(topic, b"x")
    p.flush(30)
    with WireClient.connect(broker.bootstrap) as c:
        d = c.call(DESCRIBE_TRANSACTIONS, 0, transactional_ids=[tid, "no-such-id"]).transaction_states
        assert (d[0].error_code, d[0].transaction_state) == (0, "Ongoing")
        assert [(t.topic, list(t.partitions)) for t in d[0].topics] == [(topic, [0])]
        assert d[1].error_code == 105  # TRANSACTIONAL_ID_NOT_FOUND
        listed = c.call(LIST_TRANSACTIONS, 1, state_filters=["Ongoing", "Bogus"], producer_id_filters=[])
        assert listed.error_code == 0 and list(listed.unknown_state_filters) == ["Bogus"]
        assert tid in {t.transactional_id for t in listed.transaction_states}
        pid = d[0].producer_id
        prod = c.call(DESCRIBE_PRODUCERS, 0, topics=[{"name": topic, "partition_indexes": [0]}])
        part = prod.topics[0].partitions[0]
        assert part.error_code == 0
        assert [(s.producer_id, s.current_txn_start_offset) for s in part.active_producers] == [(pid, 0)]
        # a timeout above transaction.max.timeout.ms (15 minutes by default)
        r = c.call(
            INIT_PRODUCER_ID,
            4,
            transactional_id="t-big",
            transaction_timeout_ms=3_600_000,
            producer_id=-1,
            producer_epoch=-1,
        )
        assert r.error_code == 50  # INVALID_TRANSACTION_TIMEOUT
        # the feature level built (TV1: no KIP-890 part 2), which Java clients read to pick their protocol
        av = c.api_versions(3)
        assert [(f.name, f.min_version, f.max_version) for f in av.supported_features] == [
            ("transaction.version", 0, 1),
            ("group.version", 0, 1),  # KIP-848 consumer groups
        ]
        assert [(f.name, f.max_version_level) for f in av.finalized_features] == [
            ("transaction.version", 1),
            ("group.version", 1),
        ]
    p.commit_transaction(30)


def test_produce_to_a_partition_not_in_the_transaction_is_refused(broker):
    """KIP-890 part 1: a transactional batch for a partition the transaction did not add gets INVALID_TXN_STATE."""
    from strata.protocol.records import build_batch

    topic = _topic(broker, partitions=2)
    tid = f"tx-{topic}"
    with WireClient.connect(broker.bootstrap) as c:
        wait_until(lambda: c.call(FIND_COORDINATOR, 3, key=tid, key_type=1).error_code == 0, 30)
        init = c.call(
            INIT_PRODUCER_ID, 4, transactional_id=tid, transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1
        )
        assert init.error_code == 0
        pid, epoch = init.producer_id, init.producer_epoch
        added = c.call(
            ADD_PARTITIONS,
            3,
            v3_and_below_transactional_id=tid,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[{"name": topic, "partitions": [0]}],
        )
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0

        def produce(partition: int) -> int:
            batch = build_batch([b"v"], producer_id=pid, producer_epoch=epoch, base_sequence=0, is_transactional=True)
            r = c.call(
                0,
                9,
                transactional_id=tid,
                acks=-1,
                timeout_ms=5000,
                topic_data=[{"name": topic, "partition_data": [{"index": partition, "records": batch}]}],
            )
            return int(r.responses[0].partition_responses[0].error_code)

        assert produce(1) == 48  # INVALID_TXN_STATE: partition 1 is not in the transaction
        # offsets without AddOffsetsToTxn: the group's __consumer_offsets partition is not in the transaction
        offsets = c.call(
            28,
            3,
            transactional_id=tid,
            group_id=f"g-{topic}",
            producer_id=pid,
            producer_epoch=epoch,
            generation_id=-1,
            member_id="",
            group_instance_id=None,
            topics=[{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1}]}],
        )
        assert offsets.topics[0].partitions[0].error_code == 48
        # what a partition leader on another broker asks the coordinator (AddPartitionsToTxn v4, verify_only)
        verified = c.call(
            ADD_PARTITIONS,
            4,
            transactions=[
                {
                    "transactional_id": tid,
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "verify_only": True,
                    "topics": [{"name": topic, "partitions": [0, 1]}],
                }
            ],
        )
        codes = [
            p.partition_error_code for p in verified.results_by_transaction[0].topic_results[0].results_by_partition
        ]
        assert (verified.error_code, codes) == (0, [0, 48])
        assert produce(0) == 0
        end = c.call(END_TXN, 3, transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=True)
        assert end.error_code == 0
        assert produce(0) == 48  # the transaction is over: a late batch cannot reopen it
    wait_until(lambda: _end(broker, topic, True) == 2, 30)


# -- other clients: commit, abort, commit; READ_COMMITTED readers see the committed records only ------------------
def _check_commit_abort_commit(broker: StrataBroker, topic: str) -> None:
    # c1 c2 marker a1 marker c3 marker
    wait_until(lambda: _end(broker, topic, True) == 7, 30, message=lambda: f"LSO {_end(broker, topic, True)}")
    assert _read(broker, topic, "read_committed") == [b"c1", b"c2", b"c3"]
    values, end, _ = read_kafka_python(broker.bootstrap, topic, "read_committed")
    assert (values, end) == ([b"c1", b"c2", b"c3"], 7)


def test_kafka_python_transactional_producer(broker):
    from kafka import KafkaProducer

    topic = _topic(broker)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"tx-{topic}")
    try:
        p.init_transactions()
        for values, commit in (([b"c1", b"c2"], True), ([b"a1"], False), ([b"c3"], True)):
            p.begin_transaction()
            for v in values:
                p.send(topic, v, partition=0)
            if commit:
                p.commit_transaction()
            else:
                p.flush()
                p.abort_transaction()
    finally:
        p.close()
    _check_commit_abort_commit(broker, topic)


def test_aiokafka_transactional_producer(broker):
    from aiokafka import AIOKafkaProducer

    topic = _topic(broker)

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"tx-{topic}")
        await p.start()
        try:
            for values, commit in (([b"c1", b"c2"], True), ([b"a1"], False), ([b"c3"], True)):
                await p.begin_transaction()
                for v in values:
                    await p.send_and_wait(topic, v, partition=0)
                if commit:
                    await p.commit_transaction()
                else:
                    await p.abort_transaction()
        finally:
            await p.stop()

    asyncio.run(run())
    _check_commit_abort_commit(broker, topic)


def test_kafkajs_transactional_producer(broker):
    js = Path(__file__).resolve().parents[1] / "js"
    assert (js / "node_modules" / "kafkajs").is_dir(), "run `make node-deps` (npm install in tests/js)"
    topic = _topic(broker)
    proc = subprocess.run(
        ["node", str(js / "transactions.js"), broker.bootstrap, topic, f"tx-{topic}"],
        cwd=js,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-4000:]
    _check_commit_abort_commit(broker, topic)


def test_open_transaction_survives_a_restart(broker):
    """Runs last: the broker restarts with a transaction open; the coordinators reload it (__transaction_state) and
    the transactional offsets (__consumer_offsets: committed ones, and the open transaction's pending one), and the
    same producer commits it."""
    topic = _topic(broker)
    group = f"g-{topic}"
    p = _producer(broker, f"tx-{topic}")
    c = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": group, "isolation.level": "read_uncommitted", **ck.QUIET}
    )
    try:
        meta = c.consumer_group_metadata()
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 5)], meta, 30)
        p.commit_transaction(30)
        p.begin_transaction()
        p.produce(topic, b"before-restart")
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 7)], meta, 30)
        p.flush(30)
        broker.restart()
        assert c.committed([TopicPartition(topic, 0)], timeout=30)[0].offset == 5  # 7 is pending
        with WireClient.connect(broker.bootstrap) as w:
            for stable, expected in ((False, (0, 5)), (True, (88, -1))):  # 88: UNSTABLE_OFFSET_COMMIT (KIP-447)
                r = w.call(
                    OFFSET_FETCH,
                    7,
                    group_id=group,
                    topics=[{"name": topic, "partition_indexes": [0]}],
                    require_stable=stable,
                )
                part = r.topics[0].partitions[0]
                assert (part.error_code, part.committed_offset) == expected, (stable, part)
        p.produce(topic, b"after-restart")
        p.commit_transaction(60)
        wait_until(lambda: _end(broker, topic, True) == 3, 30)
        assert _read(broker, topic, "read_committed") == [b"before-restart", b"after-restart"]
        assert c.committed([TopicPartition(topic, 0)], timeout=30)[0].offset == 7
    finally:
        c.close()
