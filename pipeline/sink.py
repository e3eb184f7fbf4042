"""Producing DataFrame rows to topics (batch ``df.write`` and the streaming sink).

Rows follow Spark's Kafka sink: ``value`` (string or binary, required), optional ``key`` (string or binary),
``headers`` (array<struct<key string, value binary>>), ``topic`` (string; the ``topic`` option overrides it) and
``partition`` (int; null or absent -> the key's murmur2 partition, as Java clients and Spark compute it). Other
columns are ignored, so a DataFrame read from the ``strata`` source can be written back unchanged.

Every task runs one idempotent producer with acks=all (Strata advertises InitProducerId for non-transactional
idempotent producers). A record the broker rejects, or one still undelivered when the flush deadline passes, fails
the task with the broker's error: nothing is dropped silently, and Spark's task retry re-sends the partition
(at-least-once across retries, exactly-once within one producer session).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .options import SinkOptions

FLUSH_TIMEOUT_S = 120.0
SINK_COLUMNS = ("key", "value", "headers", "topic", "partition")


class ProduceError(RuntimeError):
    """Records were not acknowledged by the broker (the task fails with this)."""


@dataclass
class SinkCommit:
    records: int
    topics: tuple[str, ...]


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


def produce_rows(opts: SinkOptions, field_names: list[str], rows: Iterable[Any]) -> SinkCommit:
    from confluent_kafka import KafkaException, Producer

    idx = {name: field_names.index(name) for name in SINK_COLUMNS if name in field_names}
    k_i, v_i, h_i = idx.get("key"), idx["value"], idx.get("headers")
    t_i, p_i = idx.get("topic"), idx.get("partition")
    conf = opts.producer_conf()
    conf.setdefault("partitioner", "murmur2_random")
    producer = Producer(conf)
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
        topic = opts.topic or (row[t_i] if t_i is not None else None)
        if not topic:
            raise ValueError("a row has a null topic and no 'topic' option is set")
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


__all__ = ["FLUSH_TIMEOUT_S", "ProduceError", "SinkCommit", "check_sink_schema", "produce_rows"]
