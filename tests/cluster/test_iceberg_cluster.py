"""Iceberg topics across a leader change (docs/iceberg.md, "Exactly once"): three brokers share one catalog (a
SQLite file all of them open) and one warehouse, the default one: the S3 bucket of their tiered storage (a moto
server); an idempotent producer writes continuously to a two-partition topic with a replica on every broker while
the leaders translate it; the leader of partition 0 is killed with kill -9 in the middle and comes back as a
follower.

The new leader resumes from the offsets in the table's current snapshot: once the producer stops, the table holds
every offset of each partition exactly once (0..N-1, no duplicate, no gap), with the values the topic holds.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog

from tests.cluster.tiered_support import s3_overrides
from tests.cluster.workload import ContinuousProducer, end_offsets, read_all
from tests.support.cluster_proc import StrataCluster
from tests.support.iceberg import rows, table_offsets, wait_translated
from tests.support.s3_servers import ACCESS_KEY, REGION, SECRET_KEY, MotoServer
from tests.support.waiting import wait_until

TOPIC = "iceberg-failover"


def test_leader_change_translates_every_offset_once(
    cluster_factory: Callable[..., StrataCluster], tmp_path: Path, moto: MotoServer
) -> None:
    shared = tmp_path / "iceberg"
    shared.mkdir()
    uri = f"sqlite:///{shared}/catalog.db"
    s3 = s3_overrides(moto)
    c = cluster_factory(
        3,
        overrides={
            **s3,
            "remote.log.storage.system.enable": True,  # the warehouse defaults to s3://<bucket>/<prefix>iceberg/
            "remote.log.metadata.topic.num.partitions": 3,
            "iceberg.catalog.uri": uri,
            "iceberg.translator.max.file.bytes": 16384,
            "iceberg.translator.backoff.ms": 100,
            "iceberg.translator.backoff.max.ms": 1000,
        },
    )
    c.create_topic(
        TOPIC,
        replica_assignment=[[1, 2, 3], [2, 3, 1]],
        config={"iceberg.enable": True, "iceberg.target.lag.ms": 200},
    )
    s3_props = {
        "s3.endpoint": moto.endpoint,
        "s3.region": REGION,
        "s3.access-key-id": ACCESS_KEY,
        "s3.secret-access-key": SECRET_KEY,
    }
    cat = SqlCatalog("strata", uri=uri, **s3_props)
    prod = ContinuousProducer(c.bootstrap, TOPIC, 2, name="ice", rate=300).start()
    try:
        wait_until(lambda: table_offsets(cat, TOPIC).get(0, 0) >= 150, timeout=60, message="partition 0 translated")
        old = c.leader_of(TOPIC, 0)
        c.kill9(old)
        new = c.wait_leader(TOPIC, 0, not_in=[old])
        prod.wait_acked(300)
        before = table_offsets(cat, TOPIC).get(0, 0)
        wait_until(lambda: table_offsets(cat, TOPIC).get(0, 0) > before, timeout=60, message=f"broker {new} commits")
        c.start(old)
    finally:
        prod.stop()
    got_topic = read_all(c.bootstrap, TOPIC, 2, prod.history)
    ends = end_offsets(c.bootstrap, TOPIC, 2)
    wait_translated(cat, TOPIC, ends, timeout=60)
    got = rows(cat, TOPIC)
    for p in (0, 1):
        table_p = [(r.offset, r.value) for r in got if r.partition == p]
        assert [o for o, _ in table_p] == list(range(ends[p])), f"partition {p}: offsets not exactly 0..{ends[p] - 1}"
        assert table_p == [(r.offset, r.value) for r in got_topic if r.partition == p]
    assert prod.acked_count > 600
    prefix = f"{s3['rsm.config.key.prefix']}iceberg/strata/{TOPIC}/data/"
    assert sum(1 for k in moto.keys(prefix) if k.endswith(".parquet")) >= len({f.split("/")[-1] for f in _files(cat)})


def _files(cat: SqlCatalog) -> list[str]:
    """The data files of the table's current snapshot (all in the bucket, under the warehouse)."""
    files = [t.file.file_path for t in cat.load_table(("strata", TOPIC)).scan().plan_files()]
    assert files and all(f.startswith("s3://") for f in files)
    return files
