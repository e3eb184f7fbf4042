"""What `make cluster` runs (scripts/cluster.py): config/cluster-node.properties -- the docker-compose.yml node
configuration -- on three loopback brokers with INTERNAL/EXTERNAL listeners, etcd, and SeaweedFS as the S3 server.
Clients see EXTERNAL endpoints, brokers replicate over INTERNAL, and a tiered topic's closed segments go to S3 and
are read back from there once local retention has removed them."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from tests.support.ck import produce_all
from tests.support.kafka_wire import WireClient
from tests.support.records import Rec
from tests.support.s3_servers import SeaweedServer
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


def _node_settings(seaweed: SeaweedServer) -> dict[str, object]:
    spec = importlib.util.spec_from_file_location("strata_make_cluster", REPO / "scripts/cluster.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.node_settings(seaweed)


def test_make_cluster_topology_replicates_over_internal_and_tiers_to_seaweedfs(cluster_factory, tmp_path) -> None:
    with SeaweedServer(tmp_path / "s3") as seaweed:
        settings = {**_node_settings(seaweed), "remote.log.manager.task.interval.ms": 500,
                    "log.retention.check.interval.ms": 500, "auto.create.topics.enable": False,
                    "broker.session.timeout.ms": 3000, "broker.heartbeat.interval.ms": 500}
        c = cluster_factory(3, defaults=settings, split_listeners=True)
        for b in c.brokers.values():
            with WireClient(b.host, b.port) as w:           # EXTERNAL: what clients see
                assert {(x.node_id, x.port) for x in w.metadata([]).brokers} == {
                    (j, c.broker(j).port) for j in c.ids}
            with WireClient(b.host, b.internal_port) as w:  # INTERNAL: what brokers see
                assert {(x.node_id, x.port) for x in w.metadata([]).brokers} == {
                    (j, c.broker(j).internal_port) for j in c.ids}

        topic = "tiered"
        c.create_topic(topic, 1, 3, {"remote.storage.enable": "true", "segment.bytes": 64 * 1024,
                                     "local.retention.bytes": 1, "min.insync.replicas": 2})
        values = [f"{i:06d}".encode() + b"x" * 1000 for i in range(600)]    # ~600 KB: ~9 segments
        acks = produce_all(c.bootstrap, topic, [Rec(0, None, v) for v in values], **{"batch.size": 16384})
        assert [off for _, off in acks] == list(range(600))
        c.wait_isr(topic, 0)                               # replicated over INTERNAL (min.insync.replicas=2)

        leader = c.leader_of(topic, 0)
        # closed segments are in S3, in Kafka's LocalTieredStorage layout, and have left the leader's disk
        wait_until(lambda: sum(k.endswith(".log") and f"/{topic}-0-" in f"/{k}" for k in seaweed.keys("")) >= 5,
                   timeout=60, message=lambda: f"segments in S3: {seaweed.keys('')[:20]}")
        wait_until(lambda: min(int(p.name.split(".")[0]) for p in c.partition_dir(leader, topic, 0).glob("*.log"))
                   > 0, timeout=60, message="local retention removed the first segment on the leader")

        consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "make-cluster", "log_level": 3,
                             "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition(topic, 0, 0)])
            got: list[bytes] = []
            wait_until(lambda: got.extend(m.value() for m in consumer.consume(200, timeout=0.5)
                                          if m.error() is None) or len(got) >= 600, timeout=60,
                       message=lambda: f"read {len(got)} of 600")
        finally:
            consumer.close()
        assert got == values
