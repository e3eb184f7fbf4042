"""Read-replica topics (issue 24), the broker side: create them from an origin's bucket, keep their partitions in step
with the origin's partition manifests, and refuse what would write.

A read-replica topic (`remote.readreplica=<bucket>[/<key prefix>]`, create-time only) takes the origin topic's id,
partition count and configs from the origin's topic manifest. Each hosted partition keeps an empty local log whose
offsets mirror the bucket: log start = the manifest's log start, local log start = LEO = HW = one past the last
complete uploaded segment, and the origin's leader-epoch chain. So every offset a consumer may read lies in the
"remote" range of the ordinary tiered read path, which reads it through the origin's `ReadReplicaOrigin`
(remote/read_replica.py); offsets below the start answer OFFSET_OUT_OF_RANGE as on any topic. Every
`remote.readreplica.sync.interval.ms` a partition's newest manifest is read; a new one is validated against the
bucket (`BucketManifestReader.partition_plan`) and applied. Nothing is written to the origin's prefix.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import structlog
from prometheus_client import Counter, Gauge

from strata.protocol.errors import ErrorCode, KafkaApiError
from strata.protocol.uuids import kafka_uuid_str
from strata.remote.bucket_manifest import PartitionManifest, TopicManifest
from strata.remote.metadata import TopicIdPartition
from strata.remote.read_replica import (
    READ_REPLICA_CONFIG,
    OriginLocation,
    ReadReplicaError,
    ReadReplicaOrigin,
    origin_location,
)
from strata.remote.rlm import RemoteLogManager
from strata.storage.epoch_cache import EpochEntry

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .metadata_store import TopicInfo
    from .partition import Partition
    from .replica_manager import ReplicaManager

log = structlog.get_logger("strata.read_replica")

#: what a read-replica topic refuses (Produce, DeleteRecords, CreatePartitions, config changes): Redpanda answers a
#: produce to a read replica with INVALID_TOPIC_EXCEPTION, as Kafka answers a produce to an internal topic
READ_ONLY_ERROR = ErrorCode.INVALID_TOPIC_EXCEPTION
SYNC_RETRY_S = 1.0  # the first retry after a failed sync; doubled up to the sync interval


def read_replica_of(configs: Mapping[str, str] | None) -> str:
    """The origin a topic's configs name ("" for an ordinary topic)."""
    return str((configs or {}).get(READ_REPLICA_CONFIG) or "")


def read_only_message(topic: str, origin: str) -> str:
    return f"Topic '{topic}' is a read replica of {origin}: it is read-only"


@dataclass
class ReplicaState:
    """What one hosted read-replica partition last saw of its origin (describe, metrics)."""

    tip: TopicIdPartition
    origin: str
    manifest_name: tuple[int, int] | None = None  # (writer epoch, revision) of the manifest applied
    origin_end_offset: int = 0  # one past the origin's highest uploaded offset, per its newest manifest
    synced_end_offset: int = 0  # one past the last offset served here
    last_sync_ms: int = -1
    caught_up_ms: int = -1  # last sync that served everything the origin's newest manifest lists
    complete: bool = True  # the applied manifest's segments were all found in the bucket
    error: str = ""

    @property
    def lag_offsets(self) -> int:
        return max(0, self.origin_end_offset - self.synced_end_offset)


class ReadReplicaMetrics:
    def __init__(self, registry: object) -> None:
        p = ["topic", "partition"]
        r = registry
        self.lag_offsets = Gauge(
            "strata_read_replica_lag_offsets",
            "offsets the origin's newest partition manifest lists that this read replica does not serve yet",
            p,
            registry=r,  # type: ignore[arg-type]
        )
        self.lag_seconds = Gauge(
            "strata_read_replica_lag_seconds",
            "seconds since this read replica last served everything the origin's newest partition manifest listed",
            p,
            registry=r,  # type: ignore[arg-type]
        )
        self.sync_errors = Counter(
            "strata_read_replica_sync_errors",
            "manifest reads of read-replica partitions that failed (retried)",
            ["topic"],
            registry=r,  # type: ignore[arg-type]
        )

    def remove(self, topic: str, partition: int) -> None:
        for g in (self.lag_offsets, self.lag_seconds):
            with contextlib.suppress(KeyError):
                g.remove(topic, str(partition))


class ReadReplicaManager:
    """The read-replica topics of this broker: their origins (one `ReadReplicaOrigin` per bucket/prefix) and one
    sync task per hosted partition."""

    def __init__(self, replicas: ReplicaManager, broker_rlm: RemoteLogManager) -> None:
        cfg = replicas.config
        self.replicas = replicas
        self.config = cfg
        self.broker_rlm = broker_rlm
        self.interval_s = cfg["remote.readreplica.sync.interval.ms"] / 1000.0
        self.cache_root = Path(cfg.log_dirs[0]) / "read-replica-cache"
        self.metrics = ReadReplicaMetrics(broker_rlm.metrics.registry)
        self.origins: dict[str, ReadReplicaOrigin] = {}
        self.states: dict[tuple[str, int], ReplicaState] = {}
        self._tasks: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._closed = False

    # -- origins --------------------------------------------------------------------------------------------------
    def location(self, value: str) -> OriginLocation:
        cfg = self.config
        loc = origin_location(
            value,
            cfg["remote.log.storage.manager.class.name"],
            cfg.prefixed("rsm.config."),
            Path(cfg.log_dirs[0]),
        )
        own = dict(cfg.prefixed("rsm.config."))
        if loc.class_name == "local":
            own.setdefault("dir", cfg.log_dirs[0])
        if loc.same_as(cfg["remote.log.storage.manager.class.name"], own):
            raise ReadReplicaError(
                f"remote.readreplica {value!r} is this cluster's own remote storage: a read replica reads another "
                "cluster's bucket or prefix"
            )
        return loc

    def origin(self, value: str) -> ReadReplicaOrigin:
        o = self.origins.get(value)
        if o is None:
            o = self.origins[value] = ReadReplicaOrigin(
                self.location(value),
                self.broker_rlm.config,
                broker_id=self.config.broker_id,
                cache_root=self.cache_root,
                metrics=self.broker_rlm.metrics,
            )
        return o

    def rlm_for(self, info: TopicInfo) -> RemoteLogManager | None:
        """The RemoteLogManager that reads a read-replica topic (None for another topic)."""
        value = read_replica_of(info.configs)
        if not value:
            return None
        o = self.origins.get(value)
        return o.rlm if o is not None else None

    async def resolve_topic(self, name: str, configs: Mapping[str, str]) -> tuple[uuid.UUID, int, dict[str, str]]:
        """CreateTopics of a read replica: (topic id, partition count, configs) from the origin's newest topic
        manifest of `name` (the id the origin's cluster manifest names when the bucket holds several)."""
        value = read_replica_of(configs)
        try:
            origin = self.origin(value)
        except Exception as e:  # noqa: BLE001 - the value or the RSM settings it makes: the client's error
            why = str(e) if isinstance(e, ReadReplicaError) else f"remote.readreplica {value!r}: {e}"
            raise KafkaApiError(ErrorCode.INVALID_CONFIG, why) from None
        try:
            best = await self._newest_topic_manifest(origin, name)
        except Exception as e:  # noqa: BLE001 - the bucket unreachable or refusing: the client may retry
            log.warning("cannot read the origin's manifests", topic=name, origin=value, error=repr(e))
            raise KafkaApiError(ErrorCode.KAFKA_STORAGE_ERROR, f"Cannot read the manifests of {value}: {e}") from None
        if best is None:
            raise KafkaApiError(
                ErrorCode.INVALID_CONFIG, f"Topic '{name}' has no topic manifest in {value}: nothing to replicate"
            )
        # the origin's Iceberg table is the origin's: a replica does not translate (its local log holds no records)
        out = {k: v for k, v in best.configs.items() if k != READ_REPLICA_CONFIG and not k.startswith("iceberg.")}
        out["remote.storage.enable"] = "true"
        out[READ_REPLICA_CONFIG] = value
        return best.topic_id, best.partitions, out

    @staticmethod
    async def _newest_topic_manifest(origin: ReadReplicaOrigin, name: str) -> TopicManifest | None:
        """The topic manifest of `name` in the origin's bucket: of the id the origin's cluster manifest names when
        the bucket holds several (a topic deleted and created again), else the newest; None when none is there."""
        ids = [tid for n, tid in await origin.reader.list_topics() if n == name]
        cluster = await origin.reader.cluster_manifest() if len(ids) > 1 else None
        named = cluster.topics.get(name) if cluster is not None else None
        best = None
        for tid in ids:
            tm = await origin.reader.topic_manifest(name, tid)
            if tm is None:
                continue  # deleted at the origin
            if named is not None and kafka_uuid_str(tid) == named:
                return tm
            if best is None or tm.written_at_ms > best.written_at_ms:
                best = tm
        return best

    # -- partitions -----------------------------------------------------------------------------------------------
    def on_partitions(self, parts: list[Partition]) -> None:
        """Hosted read-replica partitions (new, or leadership applied): start following their manifests."""
        if self._closed:
            return
        for p in parts:
            value = read_replica_of(p.topic.configs)
            if not value or p.key in self._tasks:
                continue
            try:
                self.origin(value)
            except Exception as e:  # noqa: BLE001 - a broker config changed since the topic was made
                log.error("read-replica topic cannot be served", topic=p.topic.name, origin=value, error=str(e))
                continue
            tip = TopicIdPartition(p.topic.topic_id, p.topic.name, p.index)
            self.states[p.key] = ReplicaState(tip, value)
            self._tasks[p.key] = asyncio.get_running_loop().create_task(
                self._follow(p.key, value), name=f"read-replica-{p.topic.name}-{p.index}"
            )

    def stop_partition(self, key: tuple[str, int]) -> None:
        task = self._tasks.pop(key, None)
        if task is not None:
            task.cancel()
        st = self.states.pop(key, None)
        if st is not None:
            self.metrics.remove(*key)
            o = self.origins.get(st.origin)
            if o is not None:
                o.rlmm.forget(st.tip)

    async def _follow(self, key: tuple[str, int], value: str) -> None:
        failures = 0
        while True:
            p = self.replicas.partitions.get(key)
            if p is None:
                return
            try:
                await self.sync_partition(p, self.origins[value])
                failures, wait = 0, self.interval_s
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the bucket unreachable: retried, the replica serves what it has
                self.metrics.sync_errors.labels(key[0]).inc()
                st = self.states.get(key)
                if st is not None:
                    st.error = repr(e)
                if failures == 0:  # once per outage, not once per retry of every partition
                    log.warning("read-replica sync failed", topic=key[0], partition=key[1], error=repr(e))
                failures += 1
                wait = min(self.interval_s, SYNC_RETRY_S * 2 ** min(failures - 1, 10))
            await asyncio.sleep(wait)  # the poll period (nothing to wait on: the origin is another cluster)

    async def sync_partition(self, p: Partition, origin: ReadReplicaOrigin) -> None:
        """Read the partition's newest origin manifest; apply it when it is new (or the last one was incomplete)."""
        st = self.states.get(p.key)
        if st is None:
            return
        tid = p.topic.topic_id
        pm = await origin.reader.partition_manifest(p.topic.name, tid, p.index)
        now = _now_ms()
        st.last_sync_ms, st.error = now, ""
        if pm is not None:
            st.origin_end_offset = pm.highest_uploaded_offset + 1
            name = (pm.leader_epoch, pm.revision)
            if name != st.manifest_name or not st.complete:
                await self._apply(p, origin, pm)
                st.manifest_name = name
        elif not origin.rlmm.is_ready(st.tip):
            origin.rlmm.replace(st.tip, [])  # nothing uploaded (or the origin deleted the topic): nothing to read
        if st.lag_offsets == 0:
            st.caught_up_ms = now
        labels = (p.topic.name, str(p.index))
        self.metrics.lag_offsets.labels(*labels).set(st.lag_offsets)
        self.metrics.lag_seconds.labels(*labels).set(
            max(0, now - st.caught_up_ms) / 1000.0 if st.caught_up_ms >= 0 else 0
        )

    async def _apply(self, p: Partition, origin: ReadReplicaOrigin, pm: PartitionManifest) -> None:
        st = self.states[p.key]
        plan = await origin.reader.partition_plan(pm)
        if self.replicas.partitions.get(p.key) is not p:
            return  # stopped meanwhile
        st.complete = not plan.problems
        origin.rlmm.replace(st.tip, plan.segments)
        ulog = p.log
        end, start = plan.next_offset, plan.log_start_offset
        if end != ulog.log_end_offset:
            # the local log holds no records: it restarts empty at the new end, its data below lying in the bucket
            ulog.truncate_fully_and_start_at(end, log_start_offset=start)
            ulog.restore_aux_state((EpochEntry(e, o) for e, o in pm.leader_epochs), ())
        elif start > ulog.log_start_offset:
            ulog.advance_log_start_offset(start)  # origin retention / DeleteRecords
        ulog.reset_highest_offset_in_remote_storage(end - 1)
        st.synced_end_offset = end
        if plan.problems:
            log.info(
                "read-replica manifest lists segments not in the bucket (yet)",
                topic=p.topic.name,
                partition=p.index,
                problems=[f"{pr.segment.start_offset}: {pr.reason}" for pr in plan.problems[:3]],
            )
        self.replicas.fetch_purgatory.check_and_complete(p.key)  # long-polling consumers see the new end

    # -- describe ---------------------------------------------------------------------------------------------------
    def state(self, topic: str, partition: int) -> ReplicaState | None:
        return self.states.get((topic, partition))

    async def close(self) -> None:
        self._closed = True
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        origins = list(self.origins.values())
        self.origins.clear()
        for o in origins:
            await o.close()


def _now_ms() -> int:
    return int(time.time() * 1000)


__all__ = [
    "READ_ONLY_ERROR",
    "ReadReplicaManager",
    "ReplicaState",
    "read_only_message",
    "read_replica_of",
]
