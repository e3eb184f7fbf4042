"""What the KIP-405 cluster scenarios share: broker settings for tiering on S3 (moto), `__remote_log_metadata` on every
broker, producing named records to partition 0, and observing the partition through public surfaces (ListOffsets,
the RLMM records, Prometheus, raw Fetch / OffsetForLeaderEpoch requests)."""

from __future__ import annotations

import re
import urllib.request
import uuid
from typing import Any

from strata.cli.admin_client import RESOURCE_TOPIC, AdminClient
from strata.cli.remote_log_metadata import RemoteSegment, remote_log_state
from strata.protocol.registry import REQUEST_CLASSES, RESPONSE_CLASSES, ApiKey
from tests.cluster.checker import encode_value
from tests.support.ck import produce_all
from tests.support.cluster_proc import StrataCluster
from tests.support.kafka_wire import WireClient
from tests.support.records import Rec
from tests.support.s3_servers import MotoServer
from tests.support.waiting import wait_until

LATEST, EARLIEST_LOCAL, LATEST_TIERED = -1, -4, -5
PAD = 200  # value padding: a few records fill a 4 KiB segment

# Tiering every 200 ms; `__remote_log_metadata` created with RF 1 (two brokers starting together with RF 2 can each
# wait in startup for a metadata partition led by the other) and then given every broker (replicate_metadata_topic).
TIERED_CLUSTER: dict[str, object] = {
    "remote.log.storage.system.enable": True,
    "remote.log.manager.task.interval.ms": 200,
    "remote.log.metadata.topic.num.partitions": 3,
    "remote.log.metadata.topic.replication.factor": 1,
    "log.retention.check.interval.ms": 200,
    "log.segment.delete.delay.ms": 0,
    "min.insync.replicas": 1,
    "offsets.topic.replication.factor": 2,
    "default.replication.factor": 2,
    "replica.fetch.backoff.ms": 100,
}


def s3_overrides(moto: MotoServer) -> dict[str, object]:
    """S3RemoteStorageManager on the moto server, under a key prefix of this cluster's own."""
    cfg = moto.rsm_config(**{"key.prefix": f"c-{uuid.uuid4().hex[:8]}/", "s3.retry.backoff.ms": 50})
    return {"remote.log.storage.manager.class.name": "s3", **{f"rsm.config.{k}": v for k, v in cfg.items()}}


def replicate_metadata_topic(c: StrataCluster, replicas: list[int] | None = None) -> None:
    """Every broker's RLMM reads its local replicas of `__remote_log_metadata`: give every partition every broker
    (or `replicas`)."""
    md = c.metadata(["__remote_log_metadata"])
    n = len(md.topics[0].partitions)
    replicas = list(replicas or c.ids)
    R = REQUEST_CLASSES[ApiKey.ALTER_PARTITION_REASSIGNMENTS]
    T = R.ReassignableTopic
    req = R(
        version=0,
        timeout_ms=30000,
        topics=[
            T(
                name="__remote_log_metadata",
                partitions=[T.ReassignablePartition(partition_index=i, replicas=replicas) for i in range(n)],
            )
        ],
    )
    with WireClient(c.broker(1).host, c.broker(1).port, timeout=30) as w:
        resp = w.recv(RESPONSE_CLASSES[ApiKey.ALTER_PARTITION_REASSIGNMENTS], 0, w.send(req))
    assert resp.error_code == 0
    assert all(p.error_code == 0 for t in resp.responses for p in t.partitions), resp
    for i in range(n):

        def reassigned(i: int = i) -> bool:
            return set(c.replicas_of("__remote_log_metadata", i)) == set(replicas)

        wait_until(reassigned, timeout=30)
        c.wait_isr("__remote_log_metadata", i, set(replicas), timeout=30)


def values(name: str, n: int) -> list[bytes]:
    return [encode_value(name, i, PAD) for i in range(n)]


def produce(c: StrataCluster, topic: str, name: str, n: int) -> int:
    """`n` records named `name` to partition 0, one record per batch, idempotent: a retried batch is never written
    twice (and librdkafka may then acknowledge it without an offset), so they take the `n` offsets from the log end
    on. Returns the first of them."""
    start = list_offset(c, topic, LATEST)
    conf: dict[str, Any] = {"linger.ms": 0, "batch.num.messages": 1, "enable.idempotence": True}
    produce_all(
        c.bootstrap,
        topic,
        [Rec(0, None, v) for v in values(name, n)],
        **conf,
    )
    wait_until(
        lambda: list_offset(c, topic, LATEST) == start + n,
        timeout=30,
        message=lambda: f"high watermark {list_offset(c, topic, LATEST)} != {start} + {n}",
    )
    return start


def list_offset(c: StrataCluster, topic: str, spec: int) -> int:
    with AdminClient(c.bootstrap, timeout=10) as admin:
        return admin.list_offsets(topic, [0], spec)[0]


def set_topic_config(c: StrataCluster, topic: str, configs: dict[str, object]) -> None:
    with AdminClient(c.bootstrap, timeout=10) as admin:
        admin.alter_configs(RESOURCE_TOPIC, topic, set={k: str(v) for k, v in configs.items()})


def copied_segments(c: StrataCluster, topic: str) -> list[RemoteSegment]:
    """COPY_SEGMENT_FINISHED segments of partition 0 by the RLMM records, sorted by (start, end)."""
    return [s for s in remote_log_state(c.bootstrap).for_partition(topic, 0) if s.state == "COPY_SEGMENT_FINISHED"]


def wait_tiered_everywhere(c: StrataCluster, topic: str, partitions: int, timeout: float = 60.0) -> None:
    """Wait until every partition of `topic` has a copied segment by the RLMM records."""

    def tiered() -> bool:
        st = remote_log_state(c.bootstrap)
        return all(
            any(s.state == "COPY_SEGMENT_FINISHED" for s in st.for_partition(topic, p)) for p in range(partitions)
        )

    wait_until(tiered, timeout=timeout, message="every partition has copied segments")


def wait_tiered_past(c: StrataCluster, topic: str, offset: int, timeout: float = 60.0) -> int:
    """Wait until the leader's last tiered offset (ListOffsets -5) is at least `offset`; return it."""
    return wait_until(
        lambda: (t := list_offset(c, topic, LATEST_TIERED)) >= offset and t,
        timeout=timeout,
        message=lambda: f"last tiered offset {list_offset(c, topic, LATEST_TIERED)} < {offset}",
    )


def _counter(c: StrataCluster, i: int, name: str, topic: str) -> float:
    text = urllib.request.urlopen(c.broker(i).metrics_url, timeout=5).read().decode()
    m = re.search(rf'^{name}_total\{{topic="{re.escape(topic)}"\}} (\S+)$', text, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


def remote_fetches(c: StrataCluster, i: int, topic: str) -> float:
    """Remote reads broker i served for `topic` (RemoteFetchRequestsPerSec)."""
    return _counter(c, i, "strata_remote_fetch_requests", topic)


def remote_deletes(c: StrataCluster, i: int, topic: str) -> float:
    """Remote segment deletions broker i started for `topic` (RemoteDeleteRequestsPerSec)."""
    return _counter(c, i, "strata_remote_delete_requests", topic)


def aux_state_builds(c: StrataCluster, i: int, topic: str) -> float:
    """Follower rebuilds from remote storage broker i attempted for `topic` (BuildRemoteLogAuxStateRequestsPerSec)."""
    return _counter(c, i, "strata_remote_build_aux_state_requests", topic)


def call(c: StrataCluster, i: int, api_key: int, version: int, **fields: Any) -> Any:
    """One raw request to broker i."""
    with WireClient(c.broker(i).host, c.broker(i).port, timeout=30) as w:
        return w.recv(RESPONSE_CLASSES[api_key], version, w.send(REQUEST_CLASSES[api_key](version=version, **fields)))


def fetch(
    c: StrataCluster,
    i: int,
    topic: str,
    offset: int,
    *,
    last_fetched_epoch: int = -1,
    current_leader_epoch: int = -1,
    version: int = 12,
) -> Any:
    """A consumer's Fetch of partition 0 from broker i: the partition's response."""
    T = REQUEST_CLASSES[ApiKey.FETCH].FetchTopic
    r = call(
        c,
        i,
        ApiKey.FETCH,
        version,
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            T(
                topic=topic,
                partitions=[
                    T.FetchPartition(
                        partition=0,
                        current_leader_epoch=current_leader_epoch,
                        fetch_offset=offset,
                        last_fetched_epoch=last_fetched_epoch,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    return r.responses[0].partitions[0]


def epoch_end_offset(c: StrataCluster, i: int, topic: str, epoch: int) -> tuple[int, int, int]:
    """(error, epoch, end offset) broker i answers to a consumer's OffsetForLeaderEpoch for `epoch`."""
    T = REQUEST_CLASSES[ApiKey.OFFSET_FOR_LEADER_EPOCH].OffsetForLeaderTopic
    r = call(
        c,
        i,
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        4,
        replica_id=-1,
        topics=[
            T(
                topic=topic,
                partitions=[T.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=epoch)],
            )
        ],
    )
    p = r.topics[0].partitions[0]
    return p.error_code, p.leader_epoch, p.end_offset
