"""What `make cluster` runs (scripts/cluster.py): config/cluster-node.properties -- the docker-compose.yml node
configuration -- on three loopback brokers with INTERNAL/EXTERNAL listeners, etcd, and SeaweedFS as the S3 server.
Clients see EXTERNAL endpoints, brokers replicate over INTERNAL, and a leader tiers its segments to S3 while its
RLMM writes their metadata to a __remote_log_metadata partition led by another broker."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from strata.remote.metadata import TopicIdPartition
from strata.remote.rlmm_partitioner import metadata_partition
from tests.support.ck import produce_all
from tests.support.kafka_wire import WireClient
from tests.support.records import Rec
from tests.support.s3_servers import SeaweedServer
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


def _node_settings(seaweed: SeaweedServer) -> dict[str, object]:
    spec = importlib.util.spec_from_file_location("strata_make_cluster", REPO / "scripts/cluster.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.node_settings(seaweed)


def test_make_cluster_topology_replicates_over_internal_and_tiers_to_seaweedfs(cluster_factory, tmp_path) -> None:
    with SeaweedServer(tmp_path / "s3") as seaweed:
        settings = {
            **_node_settings(seaweed),
            "remote.log.manager.task.interval.ms": 500,
            "log.retention.check.interval.ms": 500,
            "auto.create.topics.enable": False,
        }
        c = cluster_factory(3, defaults=settings, split_listeners=True)
        for b in c.brokers.values():
            with WireClient(b.host, b.port) as w:  # EXTERNAL: what clients see
                assert {(x.node_id, x.port) for x in w.metadata([]).brokers} == {(j, c.broker(j).port) for j in c.ids}
            with WireClient(b.host, b.internal_port) as w:  # INTERNAL: what brokers see
                assert {(x.node_id, x.port) for x in w.metadata([]).brokers} == {
                    (j, c.broker(j).internal_port) for j in c.ids
                }

        # The topic's partition 1 is placed so that its leader does NOT lead the __remote_log_metadata partition
        # its segment metadata goes to (Kafka's partitioner over the topic id): the RLMM must write to another
        # broker's partition, as with most partitions of a real cluster.
        topic = "tiered"
        cfg = {
            "remote.storage.enable": "true",
            "segment.bytes": 64 * 1024,
            "local.retention.bytes": 1,
            "min.insync.replicas": 2,
        }
        c.create_topic(topic, 1, 3, cfg)
        topic_id = c.metadata([topic], via=1, version=12).topics[0].topic_id
        rlmm_partitions = len(c.metadata(["__remote_log_metadata"], via=1).topics[0].partitions)
        meta_partition = metadata_partition(TopicIdPartition(topic_id, topic, 1), rlmm_partitions)
        meta_leader = c.leader_of("__remote_log_metadata", meta_partition)
        leader = next(i for i in c.ids if i != meta_leader)
        admin = AdminClient({"bootstrap.servers": c.bootstrap, "log_level": 3})
        admin.create_partitions(
            [NewPartitions(topic, 2, replica_assignment=[[leader, *(i for i in c.ids if i != leader)]])]
        )[topic].result(timeout=30)
        del admin
        assert c.wait_leader(topic, 1) == leader
        c.wait_isr(topic, 1)

        values = [f"{i:06d}".encode() + b"x" * 1000 for i in range(600)]  # ~600 KB: ~9 segments
        conf: dict[str, Any] = {"batch.size": 16384}
        acks = produce_all(c.bootstrap, topic, [Rec(1, None, v) for v in values], **conf)
        assert [off for _, off in acks] == list(range(600))
        c.wait_isr(topic, 1)  # replicated over INTERNAL (min.insync.replicas=2)

        # closed segments are in S3, in Kafka's LocalTieredStorage layout, and have left the leader's disk
        wait_until(
            lambda: sum(k.endswith(".log") and f"/{topic}-1-" in f"/{k}" for k in seaweed.keys("")) >= 5,
            timeout=60,
            message=lambda: f"segments in S3: {seaweed.keys('')[:20]}; leader {leader} log: {c.broker(leader).tail(5)}",
        )
        wait_until(
            lambda: min(int(p.name.split(".")[0]) for p in c.partition_dir(leader, topic, 1).glob("*.log")) > 0,
            timeout=60,
            message="local retention removed the first segment on the leader",
        )
        # the segment metadata sits in the metadata partition led by another broker
        assert c.leader_of("__remote_log_metadata", meta_partition) != leader

        # everything reads back over EXTERNAL from offset 0, the first segments from S3
        consumer = Consumer(
            {"bootstrap.servers": c.bootstrap, "group.id": "make-cluster", "log_level": 3, "enable.auto.commit": False}
        )
        try:
            consumer.assign([TopicPartition(topic, 1, 0)])
            got: list[bytes | None] = []

            def read_all_600() -> bool:
                got.extend(m.value() for m in consumer.consume(200, timeout=0.5) if m.error() is None)
                return len(got) >= 600

            wait_until(
                read_all_600,
                timeout=60,
                message=lambda: f"read {len(got)} of 600",
            )
        finally:
            consumer.close()
        assert got == values
