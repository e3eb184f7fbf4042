"""Read-replica topics on a cluster (issue 24): a 2-broker cluster on etcd serves an origin broker's tiered topic from
the shared moto bucket with RF 2; every replica reads the bucket itself (no replica fetcher), and when the leader
stops the other broker serves the same bytes."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.tiered_support import TIERED_CLUSTER, s3_overrides
from tests.support.s3_servers import MotoServer
from tests.support.waiting import wait_until
from tests.tiered.harness import Harness, S3Backend, Scenario
from tests.tiered.test_read_replica import TOPIC, consume_confluent

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def test_a_cluster_serves_a_read_replica_and_fails_over(
    moto: MotoServer, cluster_factory: Callable[..., Any], tmp_path: Path
) -> None:
    origin = Harness(
        tmp_path / "origin",
        S3Backend(moto, f"origin-{uuid.uuid4().hex[:8]}/"),
        {"remote.manifest.upload.interval.ms": 200},
        name="origin",
    ).start()
    try:
        Scenario("origin").create_topic(TOPIC, configs={"local.retention.bytes": "1"}).produce(
            TOPIC, 0, 30
        ).wait_for_offload(TOPIC, 0, up_to_offset=19).run(origin)
        assert isinstance(origin.backend, S3Backend)
        value = f"{origin.backend.server.bucket}/{origin.backend.prefix}"
        c = cluster_factory(
            2, overrides={**TIERED_CLUSTER, **s3_overrides(moto), "remote.readreplica.sync.interval.ms": 300}
        )
        c.create_topic(TOPIC, 1, replication_factor=2, config={"remote.readreplica": value})
        expected = consume_confluent(origin.broker.bootstrap, 0, 20)
        assert [r[0] for r in expected] == list(range(20))
        assert consume_confluent(c.bootstrap, 0, 20) == expected
        leader = c.leader_of(TOPIC, 0)
        c.stop(leader)
        c.wait_leader(TOPIC, 0, not_in=[leader])
        got = wait_until(lambda: consume_confluent(c.bootstrap, 0, 20), timeout=60)
        assert got == expected
    finally:
        origin.stop()
