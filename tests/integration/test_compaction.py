"""Log compaction against a real broker with confluent-kafka (librdkafka).

* 100k updates over 1k keys plus tombstones compact to the latest value per key at unchanged offsets; tombstones
  survive the first cleaning and are gone once `delete.retention.ms` has passed (a later cleaning drops them).
* `kill -9` at random moments of a (throttled, so slow) cleaning, several rounds: every restart leaves a readable log
  holding each key's latest value at its original offset, and no `.cleaned`/`.swap` leftovers.
* A produce with a null key to a compacted topic gets INVALID_RECORD (87).
* `cleanup.policy=compact,delete`: compacted, and time retention still deletes old closed segments.

The cleaner runs with `log.cleaner.backoff.ms=100`; topics use small segments and `min.cleanable.dirty.ratio=0.01`.
Progress is observed through the `cleaner-offset-checkpoint` file (Kafka's format: `topic partition offset` lines)
and the segment files of the partition directory.
"""

from __future__ import annotations

import random
import re
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, TopicPartition

from tests.support import ck
from tests.support.records import Rec
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

_SEGMENT = re.compile(r"^(\d{20})\.log$")


def segment_bases(part_dir: Path) -> list[int]:
    return sorted(int(m.group(1)) for f in part_dir.iterdir() if (m := _SEGMENT.match(f.name)))


def cleaner_checkpoint(log_dir: Path, topic: str) -> int | None:
    try:
        lines = (log_dir / "cleaner-offset-checkpoint").read_text().splitlines()
    except FileNotFoundError:
        return None
    for ln in lines[2:]:
        t, p, off = ln.split()
        if t == topic and p == "0":
            return int(off)
    return None


def caught_up(broker, topic: str) -> bool:
    """Every closed segment has been cleaned: the checkpoint reached the active segment's base offset."""
    bases = segment_bases(broker.partition_dir(topic, 0))
    ckpt = cleaner_checkpoint(broker.log_dir, topic)
    return len(bases) > 1 and ckpt is not None and ckpt >= bases[-1]


def read_all(bs: str, topic: str) -> list[Rec]:
    low, high = ck.watermarks(bs, topic, 0)
    c = ck.consumer(bs)
    out: list[Rec] = []
    try:
        c.assign([TopicPartition(topic, 0, low)])
        deadline = time.monotonic() + 60
        while not out or out[-1].offset < high - 1:
            assert time.monotonic() < deadline, f"read up to {out[-1].offset if out else None} of {high}"
            for m in c.consume(num_messages=5000, timeout=0.5):
                if m.error() is not None:
                    raise AssertionError(m.error())
                out.append(ck.msg_to_rec(m))
    finally:
        c.close()
    return out


def produce(bs: str, topic: str, pairs: Sequence[tuple[bytes, bytes | None]], **conf) -> list[int]:
    recs = [Rec(partition=0, key=k, value=v) for k, v in pairs]
    res = ck.produce_all(bs, topic, recs, **{"linger.ms": 20, "batch.num.messages": 500, **conf})
    return [off for _, off in res]


class Model:
    """What the log must show: offset -> (key, value) of everything produced, latest offset per key."""

    def __init__(self) -> None:
        self.by_offset: dict[int, tuple[bytes, bytes | None]] = {}
        self.latest: dict[bytes, int] = {}

    def add(self, pairs: list[tuple[bytes, bytes | None]], offsets: list[int]) -> None:
        for (k, v), off in zip(pairs, offsets, strict=True):
            self.by_offset[off] = (k, v)
            if off > self.latest.get(k, -1):
                self.latest[k] = off

    def check(self, recs: list[Rec], tombstones_may_be_gone: bool = True) -> None:
        offsets = [r.offset for r in recs]
        assert offsets == sorted(set(offsets)), "offsets not strictly increasing"
        for r in recs:  # each survivor is exactly what was produced at that offset
            assert self.by_offset[r.offset] == (r.key, r.value), f"offset {r.offset} holds something else"
        seen = {r.key: r.offset for r in recs}
        for key, off in self.latest.items():
            if self.by_offset[off][1] is None and tombstones_may_be_gone:
                assert seen.get(key, off) == off, f"{key!r}: an older value outlived its tombstone"
            else:
                assert seen.get(key) == off, f"{key!r}: latest offset {off} missing (last seen {seen.get(key)})"


def updates(n: int, keys: int, start: int, tag: bytes = b"") -> list[tuple[bytes, bytes | None]]:
    return [(b"key-%04d" % (i % keys), b"value-%07d-%s" % (i, tag)) for i in range(start, start + n)]


TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": "65536", "min.cleanable.dirty.ratio": "0.01"}


def test_compacts_to_latest_value_per_key_and_drops_tombstones_after_retention(broker_factory):
    b = broker_factory(**{"log.cleaner.backoff.ms": 100})
    bs = b.bootstrap
    topic = "compacted"
    ck.create_topic(bs, topic, 1, {**TOPIC_CONFIG, "delete.retention.ms": "6000"})
    model = Model()
    pairs = updates(100_000, 1000, 0)
    model.add(pairs, produce(bs, topic, pairs, **{"compression.type": "lz4"}))  # cleaned batches re-compressed
    wait_until(lambda: caught_up(b, topic), timeout=60, message="cleaner never caught up with 100k updates")
    recs = read_all(bs, topic)
    model.check(recs)
    active_base = segment_bases(b.partition_dir(topic, 0))[-1]
    closed = [r for r in recs if r.offset < active_base]
    assert len(closed) == len({r.key for r in closed}) <= 1000, "more than one record per key in cleaned segments"
    assert len(recs) < 5000

    # tombstones for 100 keys, then enough other updates to roll segments so the cleaner runs again
    t0 = time.monotonic()
    tomb = [(b"key-%04d" % k, None) for k in range(100)]
    model.add(tomb, produce(bs, topic, tomb))
    filler = updates(3000, 900, 200_000, b"f1")
    filler = [(b"key-%04d" % (100 + int(k[4:]) % 900), v) for k, v in filler]
    model.add(filler, produce(bs, topic, filler))
    wait_until(
        lambda: caught_up(b, topic) and cleaner_checkpoint(b.log_dir, topic) > max(model.latest.values()) - 3000,
        timeout=30,
        message="cleaner did not clean the tombstones' segment",
    )
    recs = read_all(bs, topic)
    if time.monotonic() - t0 < 5.5:  # still inside delete.retention.ms: every tombstone is kept
        dead = {r.key for r in recs if r.value is None}
        assert dead == {k for k, _ in tomb}
    model.check(recs)

    # after delete.retention.ms a cleaning drops them: keep rolling new segments until one does
    n = [300_000]

    def tombstones_gone() -> bool:
        more = [(b"key-%04d" % (100 + i % 900), b"value-%07d-f2" % i) for i in range(n[0], n[0] + 2000)]
        n[0] += 2000
        model.add(more, produce(bs, topic, more))
        return not any(r.value is None for r in read_all(bs, topic))

    wait_until(tombstones_gone, timeout=60, interval=0.2, message="tombstones still there")
    assert time.monotonic() - t0 >= 6.0, "tombstones dropped before delete.retention.ms"
    final = read_all(bs, topic)
    model.check(final)
    assert not {r.key for r in final} & {k for k, _ in tomb}

    # the cleaner's gauges are exported
    with urllib.request.urlopen(f"http://127.0.0.1:{b.metrics_port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    gauges = dict(re.findall(r"^(strata_log_cleaner_\w+) (\S+)$", text, re.MULTILINE))
    assert 0 < float(gauges["strata_log_cleaner_recopy_percent"]) < 100
    assert "strata_log_cleaner_max_dirty_percent" in gauges


def test_kill_dash_nine_during_cleaning_leaves_a_readable_log(broker_factory):
    # throttled cleaner I/O: a cleaning takes seconds, so a kill lands in the middle of one
    b = broker_factory(**{"log.cleaner.backoff.ms": 100, "log.cleaner.io.max.bytes.per.second": 500_000})
    bs = b.bootstrap
    topic = "compacted-crash"
    ck.create_topic(bs, topic, 1, {**TOPIC_CONFIG, "segment.bytes": "32768"})
    part = b.partition_dir(topic, 0)
    model = Model()
    rnd = random.Random(20240)
    start = 0
    kills = 0
    for rnd_no in range(4):
        pairs = updates(8000, 1000, start, b"r%d" % rnd_no)
        start += 8000
        model.add(pairs, produce(bs, topic, pairs))
        bases = segment_bases(part)
        target = bases[rnd.randrange(len(bases) - 1)]  # kill while some group from there on is being written

        def cleaning_past_target(target: int = target) -> bool:
            return any(
                f.name.endswith(".cleaned") and int(f.name[:20]) >= target
                for f in part.iterdir()
                if f.name[:20].isdigit()
            )

        try:
            wait_until(cleaning_past_target, timeout=30, interval=0.01)
            in_flight = True
        except AssertionError:
            in_flight = False  # that group was cleaned between two looks: kill anyway
        b.kill9()
        kills += in_flight
        b.start()
        leftovers = [f.name for f in part.iterdir() if f.name.endswith((".cleaned", ".swap", ".deleted"))]
        assert not leftovers, leftovers
        model.check(read_all(bs, topic))
    assert kills >= 2, "too few kills landed during a cleaning"
    # the cleaner resumes after the last restart and completes
    wait_until(lambda: caught_up(b, topic), timeout=60, message="cleaner did not catch up after the restarts")
    recs = read_all(bs, topic)
    model.check(recs)
    active_base = segment_bases(part)[-1]
    closed = [r for r in recs if r.offset < active_base]
    assert len(closed) == len({r.key for r in closed})


def test_null_key_on_compacted_topic_is_rejected_with_invalid_record(broker_factory):
    b = broker_factory()
    bs = b.bootstrap
    ck.create_topic(bs, "compact-keys", 1, {"cleanup.policy": "compact"})
    ck.create_topic(bs, "plain-keys", 1)
    errors: list = []
    p = ck.producer(bs, retries=0)
    p.produce("compact-keys", value=b"no key", partition=0, on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(30) == 0  # alone in its batch: the whole batch is refused
    p.produce("compact-keys", key=b"k", value=b"keyed", partition=0, on_delivery=lambda err, msg: errors.append(err))
    p.produce("plain-keys", value=b"no key is fine here", partition=0, on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(30) == 0
    assert len(errors) == 3
    codes = [e.code() if e is not None else 0 for e in errors]
    assert codes == [KafkaError.INVALID_RECORD, 0, 0], errors
    assert ck.watermarks(bs, "compact-keys", 0) == (0, 1)
    assert ck.watermarks(bs, "plain-keys", 0) == (0, 1)


def test_compact_delete_compacts_and_applies_time_retention(broker_factory):
    # cleanup.policy=compact,delete: the cleaner keeps the latest value per key, and retention.ms still deletes whole
    # closed segments (here: everything produced an hour ago, while the recent records stay, compacted)
    b = broker_factory(**{"log.cleaner.backoff.ms": 100, "log.retention.check.interval.ms": 200})
    bs, topic = b.bootstrap, "both-policies"
    ck.create_topic(
        bs, topic, 1, config={**TOPIC_CONFIG, "cleanup.policy": "compact,delete", "retention.ms": str(30 * 60 * 1000)}
    )
    old_ts = int(time.time() * 1000) - 60 * 60 * 1000
    old = [Rec(partition=0, key=b"old-%03d" % i, value=b"x" * 200, timestamp=old_ts + i) for i in range(600)]
    ck.produce_all(bs, topic, old, **{"linger.ms": 20, "batch.num.messages": 100})  # batches < segment.bytes
    model = Model()
    pairs = updates(6000, 50, 0)
    model.add(pairs, produce(bs, topic, pairs))
    # the old records fill closed segments of their own (the last one may share a segment with new records, which
    # keeps that one): time retention deletes them and moves the log start
    wait_until(
        lambda: ck.watermarks(bs, topic, 0)[0] > 0,
        timeout=30,
        message="time retention deleted old segments (log start moved)",
    )
    wait_until(lambda: caught_up(b, topic), timeout=60, message="cleaner caught up")
    recs = read_all(bs, topic)
    low = ck.watermarks(bs, topic, 0)[0]
    assert recs[0].offset >= low > 0
    assert len([r for r in recs if r.key.startswith(b"old-")]) < len(old)
    new = [r for r in recs if not r.key.startswith(b"old-")]
    model.check(new, tombstones_may_be_gone=False)
    assert len(new) < 6000 // 2  # compacted: far fewer than the updates produced


def test_consumer_reads_through_cleaned_segments_that_hold_only_an_empty_batch(broker_factory):
    """Tiny segments, one batch each, all of one key: cleaning leaves every old segment holding only its empty
    last batch. librdkafka fails a partition with MSG_SIZE_TOO_LARGE after eleven Fetch responses that deliver no
    record, so a read must not answer with a segment's empty batches alone."""
    b = broker_factory(**{"log.cleaner.backoff.ms": 100})
    bs = b.bootstrap
    topic = "empty-batches"
    ck.create_topic(bs, topic, 1, {**TOPIC_CONFIG, "segment.bytes": "100"})
    for i in range(16):  # a batch of ~75 bytes each: every one rolls a new segment
        produce(bs, topic, [(b"k", b"value-%02d" % i)])
    wait_until(lambda: caught_up(b, topic), timeout=30, message="cleaner never caught up")
    assert len(segment_bases(b.partition_dir(topic, 0))) >= 13
    recs = read_all(bs, topic)
    assert [r.value for r in recs] == [b"value-14", b"value-15"]  # the active segment's record is not in the map
