"""Iceberg topics under faults, one broker (docs/iceberg.md, "Exactly once"):

- kill -9 of the broker while its translators commit, at a point drawn from a seed (a share of the records already
  in the table), then a restart: the table catches up and holds every offset of each partition exactly once
  (0..N-1, no duplicate, no gap), equal to the topic's records;
- the catalog unavailable for a while (the test holds an exclusive lock on the SQLite catalog, so every commit of
  the broker fails with "database is locked"): produce goes on unaffected, local retention (retention.bytes=1)
  deletes no segment the table does not hold yet, and once the catalog is back the table catches up and retention
  moves on; a tiered topic's segments are copied and deleted locally meanwhile, so its translator catches up by
  reading remote storage.
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
SEEDS = (1, 2)  # each seed kills at another point; more seeds: edit here (each adds a broker kill and restart)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StrataBroker]:
    b = StrataBroker(
        tmp_path_factory.mktemp("iceberg-faults"),
        {
            "iceberg.translator.max.file.bytes": 16384,  # several commits per partition: a kill lands among them
            "iceberg.translator.backoff.ms": 100,
            "iceberg.translator.backoff.max.ms": 500,
            "log.retention.check.interval.ms": 200,
            "log.segment.delete.delay.ms": 0,
            "remote.log.storage.system.enable": True,  # LocalTieredStorage under the data dir
            "remote.log.manager.task.interval.ms": 200,
            "remote.log.metadata.topic.num.partitions": 1,
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
        interval=0.05,
        message=f"{share:.0%} of {topic} translated",
    )
    broker.kill9()
    at_kill = sum(table_offsets(cat, topic).values())
    broker.start()
    assert done <= at_kill < n, f"seed {seed}: killed after {at_kill}/{n} offsets: not during the translation"
    wait_translated(cat, topic, ends, timeout=60)
    _assert_exact(broker, topic, ends)


def test_catalog_outage_produce_unaffected_retention_holds_and_table_catches_up(broker):
    from strata.cli.admin_client import AdminClient

    bs = broker.bootstrap
    topic = f"outage-{uuid.uuid4().hex[:4]}"
    tiered = f"outage-tiered-{uuid.uuid4().hex[:4]}"
    ck.create_topic(bs, topic, 1, {**ICEBERG, "segment.bytes": 16384, "retention.bytes": 1})
    ck.create_topic(
        bs, tiered, 1, {**ICEBERG, "segment.bytes": 16384, "remote.storage.enable": True, "local.retention.bytes": 1}
    )
    cat = broker_catalog(broker.log_dir)
    for t in (topic, tiered):
        ck.produce_all(bs, t, _records(200, 1, "pre"))
    before = wait_translated(cat, topic, _ends(broker, topic, 1))[0]
    tiered_before = wait_translated(cat, tiered, _ends(broker, tiered, 1))[0]

    lock = sqlite3.connect(broker.log_dir / "iceberg" / "catalog.db", timeout=30, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")  # the catalog refuses the broker's commits from here
    try:
        started = time.monotonic()
        for t in (topic, tiered):
            ck.produce_all(bs, t, _records(3000, 1, "during"), **{"batch.size": 2048})
        produce_s = time.monotonic() - started
        end, tiered_end = _ends(broker, topic, 1)[0], _ends(broker, tiered, 1)[0]
        with AdminClient(bs, timeout=10) as a:
            # the tiered topic's untranslated segments are copied, then deleted locally: the table is behind the
            # local log, so its translator will read remote storage
            wait_until(lambda: a.list_offsets(tiered, [0], -4)[0] > tiered_before + 1000, timeout=30)
        # the other topic's closed segments beyond what the table holds are kept though retention.bytes=1 says go
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            low, _ = ck.watermarks(bs, topic, 0)
            assert low <= before, f"retention deleted offsets {before}..{low} before they were translated"
            time.sleep(0.2)
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    assert produce_s < 20, f"produce took {produce_s:.1f}s during the catalog outage"
    wait_translated(cat, topic, {0: end}, timeout=60)
    wait_translated(cat, tiered, {0: tiered_end}, timeout=60)
    # retention moves on once the table holds the records
    wait_until(lambda: ck.watermarks(bs, topic, 0)[0] > before, timeout=30, message="retention resumed")
    for t, n in ((topic, end), (tiered, tiered_end)):
        got = rows(cat, t)
        assert [r.offset for r in got] == list(range(n)), t
        assert [r.key for r in got] == [r.key for r in _records(200, 1, "pre") + _records(3000, 1, "during")], t
