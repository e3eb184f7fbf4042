"""Iceberg topics under faults, one broker (docs/iceberg.md, "Exactly once"):

- kill -9 of the broker while its translators commit, at a point drawn from a seed (a share of the records already
  in the table), then a restart: the table catches up and holds every offset of each partition exactly once
  (0..N-1, no duplicate, no gap), equal to the topic's records;
- the catalog unavailable for a while (the test holds an exclusive lock on the SQLite catalog, so every commit of
  the broker fails with "database is locked"): produce goes on unaffected, local retention (retention.bytes=1)
  deletes no segment the table does not hold yet, and once the catalog is back the table catches up and retention
  moves on.
"""

from __future__ import annotations

import random
import sqlite3
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.support import ck
from tests.support.broker_proc import StrataBroker
from tests.support.iceberg import broker_catalog, rows, table_offsets, wait_translated
from tests.support.records import Rec
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ICEBERG = {"iceberg.enable": "true", "iceberg.target.lag.ms": "100"}
SEEDS = (1, 2, 3)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StrataBroker]:
    b = StrataBroker(
        tmp_path_factory.mktemp("iceberg-faults"),
        {
            "iceberg.translator.max.file.bytes": 8192,  # many small commits: a kill lands among them
            "iceberg.translator.backoff.ms": 100,
            "iceberg.translator.backoff.max.ms": 500,
            "log.retention.check.interval.ms": 200,
            "log.segment.delete.delay.ms": 0,
        },
        name="iceberg-faults",
    ).start()
    try:
        yield b
    finally:
        b.stop()


def _records(n: int, partitions: int, tag: str) -> list[Rec]:
    return [
        Rec(partition=i % partitions, key=f"{tag}-{i}".encode(), value=f"{tag}-value-{i}-".encode() * 3)
        for i in range(n)
    ]


def _ends(broker: StrataBroker, topic: str, partitions: int) -> dict[int, int]:
    return {p: ck.watermarks(broker.bootstrap, topic, p)[1] for p in range(partitions)}


def _assert_exact(broker: StrataBroker, topic: str, ends: dict[int, int]) -> None:
    got = rows(broker_catalog(broker.log_dir), topic)
    for p, end in ends.items():
        mine = [r for r in got if r.partition == p]
        assert [r.offset for r in mine] == list(range(end)), f"partition {p}: offsets not exactly 0..{end - 1}"
        want = ck.read_partition(broker.bootstrap, topic, p, 0, end)
        assert [(r.key, r.value) for r in mine] == [(r.key, r.value) for r in want]


@pytest.mark.parametrize("seed", SEEDS)
def test_kill9_during_commits_leaves_every_offset_once(broker, seed):
    rnd = random.Random(seed)
    partitions, n = 2, 2000
    topic = f"kill9-{seed}-{uuid.uuid4().hex[:4]}"
    ck.create_topic(broker.bootstrap, topic, partitions, ICEBERG)
    ck.produce_all(broker.bootstrap, topic, _records(n, partitions, f"s{seed}"), **{"batch.size": 4096})
    ends = _ends(broker, topic, partitions)
    cat = broker_catalog(broker.log_dir)
    share = rnd.uniform(0.1, 0.6)
    done = wait_until(
        lambda: (s := sum(table_offsets(cat, topic).values())) >= share * n and s,
        timeout=60,
        interval=0.01,
        message=f"{share:.0%} of {topic} translated",
    )
    broker.kill9()
    at_kill = sum(table_offsets(cat, topic).values())
    broker.start()
    assert done <= at_kill < n, f"seed {seed}: killed after {at_kill}/{n} offsets: not during the translation"
    wait_translated(cat, topic, ends, timeout=60)
    _assert_exact(broker, topic, ends)


def test_catalog_outage_produce_unaffected_retention_holds_and_table_catches_up(broker):
    bs = broker.bootstrap
    topic = f"outage-{uuid.uuid4().hex[:4]}"
    ck.create_topic(bs, topic, 1, {**ICEBERG, "segment.bytes": 16384, "retention.bytes": 1})
    cat = broker_catalog(broker.log_dir)
    ck.produce_all(bs, topic, _records(200, 1, "pre"))
    before = wait_translated(cat, topic, _ends(broker, topic, 1))[0]

    lock = sqlite3.connect(broker.log_dir / "iceberg" / "catalog.db", timeout=30, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")  # the catalog refuses the broker's commits from here
    try:
        started = time.monotonic()
        ck.produce_all(bs, topic, _records(3000, 1, "during"), **{"batch.size": 2048})
        produce_s = time.monotonic() - started
        end = _ends(broker, topic, 1)[0]
        # the closed segments beyond what the table holds are kept although retention.bytes=1 wants them gone
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:
            low, _ = ck.watermarks(bs, topic, 0)
            assert low <= before, f"retention deleted offsets {before}..{low} before they were translated"
            time.sleep(0.2)
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    assert produce_s < 20, f"produce took {produce_s:.1f}s during the catalog outage"
    wait_translated(cat, topic, {0: end}, timeout=60)
    # retention moves on once the table holds the records
    wait_until(lambda: ck.watermarks(bs, topic, 0)[0] > before, timeout=30, message="retention resumed")
    got = rows(cat, topic)
    assert [r.offset for r in got] == list(range(end))
    assert sum(1 for r in got if r.key is not None and r.key.startswith(b"during")) == 3000
