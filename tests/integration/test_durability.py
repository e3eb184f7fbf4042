"""Durability across restarts: clean SIGTERM restart, and kill -9 in the middle of a produce stream."""

from __future__ import annotations

import os
import signal
import threading
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import ck
from tests.support.kafka_wire import WireClient
from tests.support.records import Rec, assert_partition_matches, by_partition, gen_records, past_ts_base
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration]


@pytest.mark.timeout(120)
def test_restart_between_produce_and_fetch(broker):
    bs = broker.bootstrap
    topic = "durable"
    parts = 2
    ck.create_topic(bs, topic, parts)
    first = gen_records(4000, parts, seed=1, ts_base=past_ts_base(8000), tag="a")
    ck.produce_all(bs, topic, first[:2000], compression="none")
    ck.produce_all(bs, topic, first[2000:], compression="lz4")
    exp = by_partition(first)

    rc = broker.stop()
    assert rc == 0, f"broker exit code after SIGTERM: {rc}"
    broker.start()
    bs = broker.bootstrap

    # the topic, every record and the offsets survive
    assert ck.topic_partitions(bs, topic) == parts
    for p, recs in exp.items():
        assert ck.watermarks(bs, topic, p) == (0, len(recs))
        assert_partition_matches(recs, ck.read_partition(bs, topic, p, 0, len(recs)), p)
    # the time index survives too
    target = first[3001].timestamp
    found = ck.offsets_for_times(bs, topic, {p: target for p in exp})
    assert found == {
        p: next(r.offset for r in ck.read_partition(bs, topic, p, 0, len(exp[p])) if r.timestamp >= target) for p in exp
    }

    # offsets continue where they stopped
    second = gen_records(1000, parts, seed=2, ts_base=first[-1].timestamp + 1, tag="b")
    delivered = ck.produce_all(bs, topic, second, compression="zstd")
    nxt = {p: len(v) for p, v in exp.items()}
    for r, (p, off) in zip(second, delivered):
        assert (p, off) == (r.partition, nxt[r.partition])
        nxt[p] += 1
    for p, recs in by_partition(second).items():
        assert_partition_matches(recs, ck.read_partition(bs, topic, p, len(exp[p]), len(recs)), p, len(exp[p]))

    # and a second restart (with the new data in the same segments) loses nothing either
    assert broker.stop() == 0
    broker.start()
    for p in exp:
        allp = exp[p] + by_partition(second)[p]
        assert_partition_matches(allp, ck.read_partition(broker.bootstrap, topic, p, 0, len(allp)), p)


class AckRecorder:
    """A confluent-kafka producer loop in a thread; records every acknowledged (partition, offset, value)."""

    def __init__(self, bs: str, topic: str, partitions: int):
        self.producer = ck.producer(
            bs,
            **{
                "acks": "all",
                "linger.ms": 2,
                "retries": 1000000,
                "message.timeout.ms": 60000,
                "retry.backoff.ms": 100,
                "reconnect.backoff.ms": 50,
                "reconnect.backoff.max.ms": 200,
            },
        )
        self.topic, self.partitions = topic, partitions
        self.acked: list[tuple[int, int, bytes]] = []
        self.failed: list[tuple[bytes, str]] = []
        self.sent = 0
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="ack-recorder", daemon=True)

    def _cb(self, err, msg) -> None:
        with self.lock:
            if err is None:
                self.acked.append((msg.partition(), msg.offset(), msg.value()))
            else:
                self.failed.append((msg.value(), str(err)))

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            value = b"value-%08d-" % i + b"x" * (i % 200)
            try:
                self.producer.produce(
                    self.topic, value=value, key=b"k%d" % i, partition=i % self.partitions, on_delivery=self._cb
                )
                i += 1
                self.sent = i
            except BufferError:
                pass
            self.producer.poll(0.001 if i % 50 else 0.01)

    def count(self) -> int:
        with self.lock:
            return len(self.acked)


def parked_fetches(broker) -> float:
    url = f"http://127.0.0.1:{broker.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as r:
        for fam in text_string_to_metric_families(r.read().decode()):
            for s in fam.samples:
                if s.name == "strata_purgatory_size" and s.labels.get("purgatory") == "Fetch":
                    return s.value
    return 0.0


@pytest.mark.timeout(60)
def test_sigterm_with_a_parked_fetch_exits_cleanly(broker):
    """A consumer's long-poll Fetch parked in the purgatory when SIGTERM arrives is dropped with its connection: the
    broker exits 0 and logs no traceback (a cancelled connection task once surfaced as 'Exception in callback')."""
    topic = "parked"
    ck.create_topic(broker.bootstrap, topic, 1)
    with WireClient.connect(broker.bootstrap) as client:
        client.send(client.fetch_request(topic, 0, 0, max_wait_ms=30000))
        wait_until(lambda: parked_fetches(broker) == 1, 15, message="the fetch was not parked")
        rc = broker.stop()
    out = broker.output()
    assert rc == 0, f"broker exit code after SIGTERM: {rc}"
    assert "Traceback" not in out and "Exception in callback" not in out, broker.tail()


@pytest.mark.timeout(180)
def test_kill9_during_produce_keeps_every_acknowledged_record(broker_factory):
    broker = broker_factory(**{"log.flush.interval.messages": 1})
    bs = broker.bootstrap
    topic = "crashy"
    parts = 2
    ck.create_topic(bs, topic, parts)

    rec = AckRecorder(bs, topic, parts)
    rec.thread.start()
    try:
        wait_until(lambda: rec.count() >= 3000, timeout=60, message=lambda: f"{rec.count()} acks so far")
        acked_before_kill = rec.count()
        broker.kill9()
        # the stream keeps going against the dead broker (records queue up in the producer); then stop it
        sent_at_kill = rec.sent
        wait_until(
            lambda: rec.sent > sent_at_kill + 200 and len(rec.producer) > 0,
            timeout=10,
            message="producer loop stalled after the crash",
        )
        rec.stop.set()
        rec.thread.join(timeout=10)
        broker.start()
        # records that were in flight are retried against the restarted broker; wait for every outcome
        remaining = rec.producer.flush(90)
        assert remaining == 0, f"{remaining} records neither acknowledged nor failed"
    finally:
        rec.stop.set()
        rec.thread.join(timeout=10)

    acked = list(rec.acked)
    assert len(acked) >= acked_before_kill >= 3000
    assert not rec.failed, f"{len(rec.failed)} deliveries failed, first: {rec.failed[:3]}"

    # no offset was acknowledged twice
    per_part: dict[int, dict[int, bytes]] = {}
    for p, off, value in acked:
        assert off not in per_part.setdefault(p, {}), f"offset {off} of partition {p} acknowledged twice"
        per_part[p][off] = value

    # every acknowledged record is there, at its offset
    for p, by_off in per_part.items():
        lo, hi = ck.watermarks(broker.bootstrap, topic, p)
        assert lo == 0
        assert hi > max(by_off), f"partition {p}: high watermark {hi} <= highest acknowledged {max(by_off)}"
        got = ck.read_partition(broker.bootstrap, topic, p, 0, hi)
        assert [r.offset for r in got] == list(range(hi))
        at = {r.offset: r.value for r in got}
        missing = [(off, v) for off, v in sorted(by_off.items()) if at.get(off) != v]
        assert not missing, (
            f"partition {p}: {len(missing)} acknowledged records lost or changed, first "
            f"{missing[:3]}, found {[at.get(o) for o, _ in missing[:3]]}"
        )

    # the log continues after the recovered end
    hi0 = ck.watermarks(broker.bootstrap, topic, 0)[1]
    [(p, off)] = ck.produce_all(broker.bootstrap, topic, [Rec(partition=0, key=b"after", value=b"crash")])
    assert (p, off) == (0, hi0)


@pytest.mark.timeout(60)
def test_sigusr1_prints_where_each_task_waits_and_the_broker_goes_on(broker):
    """`kill -USR1` is the broker's thread dump: every asyncio task's stack, so a request that never completes shows
    the await it is parked on (py-spy sees only an idle event loop)."""

    topic = "dumped"
    ck.create_topic(broker.bootstrap, topic, 1)
    with WireClient.connect(broker.bootstrap) as client:
        client.send(client.fetch_request(topic, 0, 0, max_wait_ms=30000))
        wait_until(lambda: parked_fetches(broker) == 1, 15, message="the fetch was not parked")
        os.kill(broker.pid, signal.SIGUSR1)
        dump = wait_until(
            lambda: (out := broker.output()).count("===== end of task dump") and out,
            15,
            message="no task dump after SIGUSR1",
        )
    assert "===== asyncio task dump:" in dump
    assert "purgatory.py" in dump and " in wait" in dump, dump[-3000:]  # the parked Fetch
    ck.create_topic(broker.bootstrap, "after-the-dump", 1)  # still serving
    assert broker.stop() == 0
