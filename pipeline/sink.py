"""Producing DataFrame rows to topics (batch ``df.write`` and the streaming sink).

Rows follow Spark's Kafka sink: ``value`` (string or binary, required), optional ``key`` (string or binary),
``headers`` (array<struct<key string, value binary>>), ``topic`` (string; the ``topic`` option overrides it) and
``partition`` (int; null or absent -> the key's murmur2 partition, as Java clients and Spark compute it). Other
columns are ignored, so a DataFrame read from the ``strata`` source can be written back unchanged.

Every task runs one idempotent producer with acks=all. A record the broker rejects, or one still undelivered when the
flush deadline passes, fails the task with the broker's error: nothing is dropped silently, and Spark's task retry
re-sends the partition (at-least-once across retries, exactly-once within one producer session).

``exactlyOnce=true`` makes each task one Kafka transaction (``TaskTxn``): a transactional id per Spark partition
(stable across the task's attempts, so a retry fences a zombie attempt and aborts what it left open), the rows and a
marker offset committed atomically, and the marker checked by every attempt first, so an attempt whose transaction
committed (the task then failed, or a micro-batch is replayed after a driver crash) is not written twice.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from .options import SinkOptions

FLUSH_TIMEOUT_S = 120.0
TXN_TIMEOUT_S = 60.0  # init/commit/abort and the marker look-up
# Spark's local properties of a micro-batch's tasks (MicroBatchExecution.BATCH_ID_KEY, StreamExecution.QUERY_ID_KEY):
# the query id is kept in the checkpoint, so it is the same after a driver restart
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"
SINK_COLUMNS = ("key", "value", "headers", "topic", "partition")


class ProduceError(RuntimeError):
    """Records were not acknowledged by the broker (the task fails with this)."""


@dataclass
class SinkCommit:
    records: int
    topics: tuple[str, ...]


@dataclass(frozen=True)
class TaskTxn:
    """The transaction of one task: ``transactional_id`` is the same for every attempt of the task (Spark's
    partition id in a job or query), ``epoch`` names what the task writes (the batch job, or query + micro-batch)."""

    transactional_id: str
    epoch: str


def task_txn(opts: SinkOptions, job_key: str | None) -> TaskTxn:
    """This task's TaskTxn from Spark's TaskContext. Streaming (``job_key`` None): the query id and micro-batch id
    Spark gives the tasks; batch: ``job_key``, made once per write on the driver."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("exactlyOnce: no Spark TaskContext (the sink's write runs in a Spark task)")
    partition = ctx.partitionId()
    if job_key is None:
        query = ctx.getLocalProperty(QUERY_ID_PROPERTY)
        batch = ctx.getLocalProperty(BATCH_ID_PROPERTY)
        if not query or batch is None:
            raise RuntimeError("exactlyOnce: the task carries no streaming query id / batch id")
        scope, epoch = query, f"{query}:{batch}"
    else:
        scope = epoch = job_key
    prefix = opts.transactional_id_prefix
    tid = f"{prefix}-{partition}" if prefix else f"strata-spark-{scope}-{partition}"
    return TaskTxn(tid, f"strata-spark-sink:{epoch}")


def check_sink_schema(field_names: Iterable[str], opts: SinkOptions) -> None:
    names = set(field_names)
    if "value" not in names:
        raise ValueError("the strata sink needs a 'value' column (string or binary)")
    if opts.topic is None and "topic" not in names:
        raise ValueError("the strata sink needs a 'topic' option or a 'topic' column")


def _bytes(v: Any) -> bytes | None:
    if v is None:
        return None
    if isinstance(v, bytes):
        return v
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, str):
        return v.encode("utf-8")
    raise TypeError(f"key/value must be string or binary, got {type(v).__name__}")


def produce_rows(
    opts: SinkOptions, field_names: list[str], rows: Iterable[Any], txn: TaskTxn | None = None
) -> SinkCommit:
    """Produce the rows; with ``txn``, inside one transaction that also commits the task's marker offset."""
    from confluent_kafka import Producer

    conf = opts.producer_conf()
    conf.setdefault("partitioner", "murmur2_random")
    if txn is None:
        return _send(Producer(conf), opts, field_names, rows)
    conf["transactional.id"] = txn.transactional_id
    return _send_in_transaction(Producer(conf), opts, field_names, iter(rows), txn)


def _send(producer: Any, opts: SinkOptions, field_names: list[str], rows: Iterable[Any]) -> SinkCommit:
    """Send every row and wait until each is acknowledged (ProduceError otherwise)."""
    from confluent_kafka import KafkaException

    idx = {name: field_names.index(name) for name in SINK_COLUMNS if name in field_names}
    k_i, v_i, h_i, p_i = idx.get("key"), idx["value"], idx.get("headers"), idx.get("partition")
    errors: list[str] = []
    delivered = 0

    def on_delivery(err: Any, msg: Any) -> None:
        nonlocal delivered
        if err is not None:
            if len(errors) < 5:
                errors.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")
        else:
            delivered += 1

    topics: set[str] = set()
    sent = 0
    for row in rows:
        topic = row_topic(opts, field_names, row)
        kwargs: dict[str, Any] = {"on_delivery": on_delivery}
        if k_i is not None and row[k_i] is not None:
            kwargs["key"] = _bytes(row[k_i])
        if h_i is not None and row[h_i]:
            kwargs["headers"] = [(h[0], _bytes(h[1])) for h in row[h_i]]
        if p_i is not None and row[p_i] is not None and row[p_i] >= 0:
            kwargs["partition"] = int(row[p_i])
        value = _bytes(row[v_i])
        while True:
            try:
                producer.produce(topic, value, **kwargs)
                break
            except BufferError:  # local queue full: serve delivery reports, then retry
                producer.poll(0.1)
            except KafkaException as e:
                raise ProduceError(f"cannot produce to {topic}: {e}") from None
        topics.add(topic)
        sent += 1
        if sent % 1000 == 0:
            producer.poll(0)
            if errors:
                break
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    if errors:
        raise ProduceError(f"the broker rejected records: {'; '.join(errors)}")
    if remaining:
        raise ProduceError(f"{remaining} of {sent} records were not acknowledged within {FLUSH_TIMEOUT_S:.0f}s")
    if delivered != sent:
        raise ProduceError(f"only {delivered} of {sent} records were acknowledged")
    return SinkCommit(sent, tuple(sorted(topics)))


def row_topic(opts: SinkOptions, field_names: list[str], row: Any) -> str:
    topic = opts.topic or (row[field_names.index("topic")] if "topic" in field_names else None)
    if not topic:
        raise ValueError("a row has a null topic and no 'topic' option is set")
    return str(topic)


def _send_in_transaction(
    producer: Any, opts: SinkOptions, field_names: list[str], rows: Iterator[Any], txn: TaskTxn
) -> SinkCommit:
    """init_transactions (fences an earlier attempt of this task and ends its transaction), then skip the task if
    its marker says this epoch was committed already, else send the rows and commit them with the marker: the
    offset of partition 0 of the task's first topic in the consumer group named like the transactional id, whose
    metadata is the epoch (TxnOffsetCommit: visible exactly when the rows are)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    try:
        first = next(rows)
    except StopIteration:
        return SinkCommit(0, ())
    marker_topic = row_topic(opts, field_names, first)
    consumer = Consumer(
        {
            **opts.connection_conf(),
            "group.id": txn.transactional_id,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        producer.init_transactions(TXN_TIMEOUT_S)
        marker = TopicPartition(marker_topic, 0)
        committed = consumer.committed([marker], timeout=TXN_TIMEOUT_S)[0]
        if committed.error is None and committed.metadata == txn.epoch:
            return SinkCommit(0, ())  # an earlier attempt committed this task's rows
        producer.begin_transaction()
        try:
            result = _send(producer, opts, field_names, itertools.chain([first], rows))
            marker_at = TopicPartition(marker_topic, 0, max(result.records, 0), metadata=txn.epoch)
            producer.send_offsets_to_transaction([marker_at], consumer.consumer_group_metadata(), TXN_TIMEOUT_S)
            producer.commit_transaction(TXN_TIMEOUT_S)
        except BaseException as e:  # a broker error, or the task's input failing: nothing of it may commit
            with contextlib.suppress(KafkaException):  # fenced or fatal: the next attempt's init aborts it
                producer.abort_transaction(TXN_TIMEOUT_S)
            if isinstance(e, KafkaException):
                raise ProduceError(f"transaction {txn.transactional_id} failed: {e}") from None
            raise
        return result
    except KafkaException as e:
        raise ProduceError(f"transaction {txn.transactional_id} failed: {e}") from None
    finally:
        consumer.close()


__all__ = [
    "FLUSH_TIMEOUT_S",
    "ProduceError",
    "SinkCommit",
    "TaskTxn",
    "check_sink_schema",
    "produce_rows",
    "row_topic",
    "task_txn",
]
