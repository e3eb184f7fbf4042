"""Helpers for the Spark tests: a tiered broker on S3 (moto), stock-client produce/consume, offload waits."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata.cli.admin_client import AdminClient
from tests.support.broker_proc import StrataBroker
from tests.support.s3_servers import MotoServer
from tests.support.waiting import wait_until

EARLIEST_LOCAL = -4

TIERED_BROKER = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": 300,
    "remote.log.metadata.topic.num.partitions": 5,
    "log.retention.check.interval.ms": 300,
    "log.segment.delete.delay.ms": 0,
    "group.initial.rebalance.delay.ms": 0,
}


def s3_broker_overrides(moto: MotoServer, prefix: str) -> dict[str, object]:
    out: dict[str, object] = dict(TIERED_BROKER)
    out["remote.log.storage.manager.class.name"] = "s3"
    out.update({f"rsm.config.{k}": v for k, v in moto.rsm_config(**{"key.prefix": prefix}).items()})
    return out


def direct_options(moto: MotoServer, prefix: str) -> dict[str, str]:
    """Spark options for read.mode=direct against the same bucket/prefix as the broker."""
    out = {"read.mode": "direct", "rsm.class.name": "s3"}
    out.update({f"rsm.config.{k}": str(v) for k, v in moto.rsm_config(**{"key.prefix": prefix}).items()})
    return out


def start_tiered_broker(tmp: Path, moto: MotoServer, name: str) -> tuple[StrataBroker, str]:
    prefix = f"{name}-{uuid.uuid4().hex[:8]}/"
    b = StrataBroker(tmp, s3_broker_overrides(moto, prefix), name=name)
    b.start()
    return b, prefix


@dataclass
class Tiered:
    broker: StrataBroker
    prefix: str
    moto: MotoServer

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def direct_options(self) -> dict[str, str]:
        return direct_options(self.moto, self.prefix)


def create_topic(bootstrap: str, name: str, partitions: int = 1, **configs: Any) -> None:
    with AdminClient(bootstrap) as a:
        a.create_topic(name, partitions, 1, {k.replace("_", "."): str(v) for k, v in configs.items()})
    wait_until(
        lambda: partitions == len(_partitions(bootstrap, name)), timeout=20, message=f"topic {name} has no leader"
    )


def _partitions(bootstrap: str, topic: str) -> list[int]:
    from confluent_kafka.admin import AdminClient as CkAdmin

    md = CkAdmin({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        return []
    return [p for p, pm in t.partitions.items() if pm.leader >= 0]


def produce(
    bootstrap: str,
    topic: str,
    records: list[dict[str, Any]],
    *,
    compression: str = "none",
    linger_ms: int = 5,
    batch_size: int = 16384,
) -> None:
    """Produce with confluent-kafka (acks=all); each record: value, key, partition, headers, timestamp (ms)."""
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "compression.type": compression,
            "linger.ms": linger_ms,
            "batch.size": batch_size,
            "enable.idempotence": False,
            "log_level": 3,
        }
    )
    errors: list[Any] = []
    for r in records:
        kw: dict[str, Any] = {"on_delivery": lambda err, _m: errors.append(err) if err else None}
        for k in ("key", "partition", "headers", "timestamp"):
            if r.get(k) is not None:
                kw[k] = r[k]
        while True:
            try:
                p.produce(topic, r.get("value"), **kw)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0, "records still in flight after 60s"
    assert not errors, errors[:3]


def consume_all(
    bootstrap: str, topic: str, partitions: list[int] | None = None, isolation: str = "read_uncommitted"
) -> list[tuple]:
    """Every record of the topic through a stock consumer (assign, earliest -> high watermark, or the LSO at
    read_committed):
    (partition, offset, key, value, timestamp ms, timestampType, headers)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
            "isolation.level": isolation,
            "log_level": 3,
        }
    )
    try:
        parts = partitions if partitions is not None else _partitions(bootstrap, topic)
        ends = {}
        for p in parts:
            _low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
            ends[p] = high
        c.assign([TopicPartition(topic, p, -2) for p in parts])
        out = []
        done = {p for p in parts if ends[p] == 0}
        pos = {p: -1 for p in parts}

        def step() -> bool:
            for m in c.consume(1000, timeout=0.5):
                err = m.error()
                if err:
                    if err.code() == KafkaError._PARTITION_EOF:
                        p, offset = m.partition(), m.offset()
                        assert p is not None and offset is not None, "a partition EOF event names its position"
                        if offset >= ends[p]:
                            done.add(p)
                        continue
                    raise AssertionError(err)
                p, offset = m.partition(), m.offset()
                assert p is not None and offset is not None, "a consumed message has a partition and an offset"
                if offset >= ends[p]:
                    done.add(p)
                    continue
                ts_type, ts = m.timestamp()
                headers = m.headers() or []
                assert isinstance(headers, list), headers  # a consumed message's headers: [(key, value), ...]
                out.append(
                    (
                        p,
                        offset,
                        m.key(),
                        m.value(),
                        ts,
                        {1: 0, 2: 1}.get(ts_type, -1),
                        [(k, v) for k, v in headers],
                    )
                )
                pos[p] = offset
                if offset + 1 >= ends[p]:
                    done.add(p)
            return done >= set(parts)

        wait_until(step, timeout=120, interval=0, message=lambda: f"consumed up to {pos}, ends {ends}")
        return sorted(out, key=lambda r: (r[0], r[1]))
    finally:
        c.close()


def local_log_start(bootstrap: str, topic: str, partition: int) -> int:
    with AdminClient(bootstrap) as a:
        return a.list_offsets(topic, [partition], EARLIEST_LOCAL)[partition]


def wait_offloaded(bootstrap: str, topic: str, partition: int, at_least: int, timeout: float = 60) -> int:
    """Wait until local retention moved the local log start to >= at_least (so older offsets live only in S3)."""

    def reached() -> int:
        v = local_log_start(bootstrap, topic, partition)
        return v if v >= at_least else 0

    return wait_until(
        reached, timeout=timeout, interval=0.1, message=f"{topic}-{partition}: local log start never reached {at_least}"
    )


def df_records(df: Any, with_topic: bool = False) -> list[tuple]:
    """A strata-schema DataFrame -> the consume_all tuple shape (timestamps as epoch millis, computed by Spark),
    prefixed with the topic if ``with_topic``."""
    cols = ["topic", "partition", "offset", "key", "value", "unix_millis(timestamp) AS ts", "timestampType"]
    with_headers = "headers" in df.columns
    rows = df.selectExpr(*cols, *(["headers"] if with_headers else [])).collect()
    out = []
    for r in rows:
        hdrs = [(h["key"], h["value"]) for h in (r["headers"] or [])] if with_headers else []
        rec = (r["partition"], r["offset"], r["key"], r["value"], r["ts"], r["timestampType"], hdrs)
        out.append((r["topic"], *rec) if with_topic else rec)
    return sorted(out, key=lambda t: tuple(t[:3]))


def remote_fetch_bytes(broker: StrataBroker, topic: str) -> float:
    """The broker's strata_remote_fetch_bytes_total for a topic (bytes it served from remote storage)."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("strata_remote_fetch_bytes_total{") and f'topic="{topic}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def produce_transactions(bootstrap: str, topic: str, rounds: list[tuple[int, int, bool]], value_size: int = 120):
    """Two transactional confluent-kafka producers (A and B) on partition 0, interleaved: each round opens a
    transaction on both, sends A's and B's records alternately (one batch each), then ends A's (commit if the
    round's flag, else abort) and B's the other way. A round's counts may be 0 (that producer sits it out).
    Returns (committed, aborted): values in offset order, as the delivery reports placed them."""
    from confluent_kafka import Producer

    producers = {
        name: Producer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": f"{topic}-{name}-{uuid.uuid4().hex[:6]}",
                "linger.ms": 0,
                "log_level": 3,
            }
        )
        for name in ("A", "B")
    }
    for p in producers.values():
        p.init_transactions(60)
    placed: dict[bytes, int] = {}
    committed: list[bytes] = []
    aborted: list[bytes] = []

    def sent(err: Any, msg: Any) -> None:
        assert err is None, err
        placed[msg.value()] = msg.offset()

    for i, (n_a, n_b, a_commits) in enumerate(rounds):
        values = {
            name: [f"{name}-{i}-{j}-".encode().ljust(value_size, b"x") for j in range(n)]
            for name, n in (("A", n_a), ("B", n_b))
        }
        for name in ("A", "B"):
            if values[name]:
                producers[name].begin_transaction()
        for j in range(max(n_a, n_b)):
            for name in ("A", "B"):
                if j < len(values[name]):
                    producers[name].produce(topic, values[name][j], partition=0, on_delivery=sent)
                    assert producers[name].flush(30) == 0
        for name, commit in (("A", a_commits), ("B", not a_commits)):
            if not values[name]:
                continue
            if commit:
                producers[name].commit_transaction(60)
                committed.extend(values[name])
            else:
                producers[name].abort_transaction(60)
                aborted.extend(values[name])
    return sorted(committed, key=placed.__getitem__), sorted(aborted, key=placed.__getitem__)
