"""The RLMM of a broker that hosts no replica of a `__remote_log_metadata` partition reads it from its leader (as
Kafka's RLMM consumer does), so every broker can tier, serve remote reads and trim locally for every tiered partition
it hosts, whatever the metadata topic's replication factor. Here the metadata topic has one replica per partition
on a 3-broker cluster: each broker hosts one of its three partitions and reads the two others from their leaders."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strata.cli.admin_client import AdminClient
from tests.cluster.checker import encode_value
from tests.cluster.tiered_support import (
    EARLIEST_LOCAL,
    TIERED_CLUSTER,
    s3_overrides,
    set_topic_config,
    wait_tiered_everywhere,
)
from tests.cluster.workload import read_all
from tests.support.ck import produce_all
from tests.support.cluster_proc import StrataCluster
from tests.support.records import Rec
from tests.support.s3_servers import MotoServer
from tests.support.waiting import wait_until

TOPIC = "tiered-spread"
PARTITIONS = 6
RECORDS = 60


def test_brokers_follow_metadata_partitions_they_do_not_host(
    cluster_factory: Callable[..., StrataCluster], moto: MotoServer
) -> None:
    c = cluster_factory(3, overrides={**TIERED_CLUSTER, **s3_overrides(moto)})
    hosts = {i: set(c.replicas_of("__remote_log_metadata", i)) for i in range(3)}
    assert all(len(h) == 1 for h in hosts.values()), hosts
    c.create_topic(TOPIC, PARTITIONS, 2, config={"remote.storage.enable": True, "segment.bytes": 4096})
    leaders = {c.leader_of(TOPIC, p) for p in range(PARTITIONS)}
    assert leaders == set(c.ids), leaders  # every broker leads some partitions (and follows others)
    values = {p: [encode_value(f"p{p}", i, 200) for i in range(RECORDS)] for p in range(PARTITIONS)}
    conf: dict[str, Any] = {"linger.ms": 5, "batch.size": 2048}
    produce_all(
        c.bootstrap,
        TOPIC,
        [Rec(p, None, v) for p in range(PARTITIONS) for v in values[p]],
        **conf,
    )

    wait_tiered_everywhere(c, TOPIC, PARTITIONS)

    set_topic_config(c, TOPIC, {"local.retention.bytes": 1})

    def earliest_local() -> dict[int, int]:
        with AdminClient(c.bootstrap, timeout=10) as admin:
            return admin.list_offsets(TOPIC, range(PARTITIONS), EARLIEST_LOCAL)

    wait_until(
        lambda: all(o > 0 for o in earliest_local().values()),
        timeout=60,
        message=lambda: f"earliest local offsets {earliest_local()}",
    )
    got: dict[int, list[bytes | None]] = {p: [] for p in range(PARTITIONS)}
    for r in sorted(read_all(c.bootstrap, TOPIC, PARTITIONS), key=lambda r: (r.partition, r.offset)):
        got[r.partition].append(r.value)
    assert got == values

    # Followers trim locally too: their follower task reads the RLMM of partitions whose metadata they do not host.
    def first_local(i: int, p: int) -> int:
        return min(int(f.name[:-4]) for f in c.partition_dir(i, TOPIC, p).glob("*.log"))

    wait_until(
        lambda: all(first_local(i, p) > 0 for p in range(PARTITIONS) for i in c.replicas_of(TOPIC, p)),
        timeout=60,
        message=lambda: str({(i, p): first_local(i, p) for p in range(PARTITIONS) for i in c.replicas_of(TOPIC, p)}),
    )
