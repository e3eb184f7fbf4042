"""Whole-cluster restore (issue 24): `cluster.restore.enable=true` rebuilds a new, empty cluster from the bucket.

Every broker reads the bucket's restore plan once at startup, before its own manifest writers start (so the new
cluster's first cluster manifest cannot hide the old one). Then:

* the controller (the single broker) restores the cluster manifest's ACLs, SCRAM credentials (the salted, hashed
  form, as stored) and client quotas, and recovers every topic of the plan that the cluster does not have, exactly as
  `CreateTopics` with `remote.recovery=true` does (broker/topic_recovery.py: same topic ids, configs, partition
  counts and replication factors, logs starting past the last uploaded offset);
* every broker, for each `__consumer_offsets` partition it leads once its groups are loaded, commits the bucket's
  offsets of the groups that partition holds (only groups with no committed offset in the new cluster, and only
  for topics that exist), then deletes the old cluster's group offsets manifests of that partition whose writer
  epoch is above the new leader's (they would otherwise keep sorting above the new coordinator's manifests).

The result is logged ("cluster restore ...") and counted in the `strata_restore_*` metrics; `strata recovery
status` shows the recovered topics. The new cluster keeps its own cluster id (a fresh etcd or metadata file makes
one): clients and tools identify the new cluster as new, and nothing in the bucket depends on the id.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import TYPE_CHECKING, Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from strata.protocol.acl import AclBinding
from strata.remote.bucket_manifest import group_offsets_dir, parse_manifest_name
from strata.remote.bucket_manifest_reader import BucketManifestReader, RestorePlan
from strata.remote.bucket_manifest_writer import ManifestWriter

from .group.records import OFFSETS_TOPIC, OffsetAndMetadata
from .security.client_quotas import CLIENT_ID, USER, QuotaEntity
from .security.scram import ScramCredential
from .topic_recovery import RECOVERY_KEY

if TYPE_CHECKING:
    from strata.config import BrokerConfig

    from .group.coordinator import GroupCoordinator
    from .metadata_store import MetadataStore
    from .replica_manager import ReplicaManager
    from .tiered import TieredStorage
    from .topic_manager import TopicManager

log = structlog.get_logger("strata.restore")

POLL_S = 1.0
BROKERS_WAIT_S = 30.0  # how long topics wait for as many brokers as their old replication factor
RETRY_S = 2.0
OFFSET_COMMIT_VERSION = 9


class RestoreMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.topics = Counter(
            "strata_restore_topics", "Topics recovered from the bucket by a cluster restore", registry=registry
        )
        self.topic_errors = Counter(
            "strata_restore_topic_errors",
            "Topic recoveries of a cluster restore that failed (retried)",
            registry=registry,
        )
        self.segments = Counter(
            "strata_restore_segments", "Remote segments of restored topics registered in the RLMM", registry=registry
        )
        self.restored_offsets = Gauge(
            "strata_restore_restored_offsets",
            "Offsets a cluster restore recovered per topic (sum over partitions of next offset - log start)",
            ["topic"],
            registry=registry,
        )
        self.group_offsets = Counter(
            "strata_restore_group_offsets", "Committed offsets restored from the bucket (partitions)", registry=registry
        )
        self.pending_topics = Gauge(
            "strata_restore_pending_topics", "Topics of the restore plan not recovered yet", registry=registry
        )


def _quota_entity(parts: list[list[Any]]) -> QuotaEntity:
    found = {str(t): n for t, n in parts}
    return QuotaEntity(found.get(USER, ""), found.get(CLIENT_ID, ""))


class ClusterRestore:
    def __init__(
        self,
        writer: ManifestWriter,
        store: MetadataStore,
        topics: TopicManager,
        replicas: ReplicaManager,
        groups: GroupCoordinator,
        *,
        broker_id: int,
        registry: CollectorRegistry,
        exclude: list[str] | None = None,
    ) -> None:
        self.writer = writer  # the broker's own manifest writer (shared with its manifest services)
        self.bucket = writer.store
        self.exclude = set(exclude or [])
        self.store = store
        self.topics = topics
        self.replicas = replicas
        self.groups = groups
        self.broker_id = broker_id
        self.metrics = RestoreMetrics(registry)
        self.plan: RestorePlan | None = None
        self._security_done = False
        self._groups_done: set[int] = set()  # __consumer_offsets partitions restored here
        self._task: asyncio.Task[None] | None = None
        self._started = time.monotonic()

    async def prepare(self) -> None:
        """Read the bucket's plan (before this broker's manifest writers start)."""
        self.plan = await BucketManifestReader(self.bucket).restore_plan()
        log.info(
            "cluster restore: read the bucket's manifests",
            topics=len(self.plan.topics),
            groups=len(self.plan.group_offsets),
            old_cluster_id=self.plan.cluster.cluster_id if self.plan.cluster else None,
        )

    def start(self) -> None:
        self._started = time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="cluster-restore")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def pending_topics(self) -> list[str]:
        existing = self.store.topics()
        return sorted(n for n in (self.plan.topics if self.plan else {}) if n not in existing and n not in self.exclude)

    def _pending(self, topic: str) -> bool:
        """A topic the restore will still create."""
        return (
            self.plan is not None
            and topic in self.plan.topics
            and topic not in self.exclude
            and (self.store.topic(topic) is None)
        )

    async def _loop(self) -> None:
        while True:
            try:
                if self.store.controller_id == self.broker_id:
                    await self.restore_security()
                    await self.restore_topics()
                await self.restore_group_offsets()
                wait = POLL_S
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - retried: the cluster may still be settling
                log.warning("cluster restore step failed; retrying", error=repr(e))
                wait = RETRY_S
            await asyncio.sleep(wait)

    # -- controller ---------------------------------------------------------------------------------------------------
    async def restore_security(self) -> None:
        cm = self.plan.cluster if self.plan else None
        if self._security_done or cm is None:
            return
        have = {json.dumps(b.to_json(), sort_keys=True) for b in self.store.acls()}
        acls = [AclBinding.from_json(a) for a in cm.acls if json.dumps(a, sort_keys=True) not in have]
        if acls:
            await self.store.create_acls(acls)
        current = self.store.scram_credentials()
        creds = [
            (user, ScramCredential.from_json(c)) for user, mechs in cm.scram_credentials.items() for c in mechs.values()
        ]
        creds = [(u, c) for u, c in creds if (u, c.mechanism) not in current]
        if creds:
            await self.store.alter_scram_credentials(creds, [])
        quotas = {_quota_entity(q["entity"]): {k: float(v) for k, v in q["quotas"].items()} for q in cm.client_quotas}
        have_quotas = self.store.client_quotas()
        quotas = {e: v for e, v in quotas.items() if e not in have_quotas}
        if quotas:
            await self.store.alter_client_quotas(quotas)
        self._security_done = True
        log.info("cluster restore: security restored", acls=len(acls), scram_credentials=len(creds), quotas=len(quotas))

    async def restore_topics(self) -> None:
        pending = self.pending_topics()
        self.metrics.pending_topics.set(len(pending))
        waiting = time.monotonic() - self._started < BROKERS_WAIT_S
        for name in pending:
            rf = self.plan.topics[name].replication_factor if self.plan else -1
            if waiting and rf > len(self.store.brokers()):
                continue  # the new cluster's brokers are still registering: the old replication factor a bit later
            try:
                info = await self.topics.create_topic(name, -1, -1, {RECOVERY_KEY: "true"})
            except Exception as e:  # noqa: BLE001 - the next pass retries this topic
                self.metrics.topic_errors.inc()
                log.warning("cluster restore: topic recovery failed; retrying", topic=name, error=repr(e))
                continue
            self.metrics.topics.inc()
            rec = (info.recovery if info is not None else None) or {}
            parts = rec.get("partitions", {}).values()
            self.metrics.segments.inc(sum(int(r["segments"]) for r in parts))
            self.metrics.restored_offsets.labels(name).set(
                sum(int(r["next_offset"]) - int(r["log_start_offset"]) for r in parts)
            )
            log.info(
                "cluster restore: topic restored",
                topic=name,
                restored_up_to={p: r["next_offset"] - 1 for p, r in rec.get("partitions", {}).items()},
            )
        self.metrics.pending_topics.set(len(self.pending_topics()))

    # -- every broker -------------------------------------------------------------------------------------------------
    async def restore_group_offsets(self) -> None:
        gc = self.groups
        if self.plan is None or not gc.active:
            return
        for partition in sorted(gc.owned - gc.loading - self._groups_done):
            p = self.replicas.partitions.get((OFFSETS_TOPIC, partition))
            if p is None or not p.is_leader:
                continue
            if await self._restore_partition_groups(partition):
                await self._drop_old_group_manifests(partition, p.leader_epoch)
                self._groups_done.add(partition)

    async def _restore_partition_groups(self, partition: int) -> bool:
        """Commit the offsets of the groups `partition` holds; False while some of their topics do not exist yet."""
        assert self.plan is not None
        gc = self.groups
        complete = True
        now = int(time.time() * 1000)
        for group, topics in sorted(self.plan.group_offsets.items()):
            if gc.partition_for(group) != partition:
                continue
            err, committed = gc.fetch_offsets(group, None)
            if err or any(parts for _, parts in committed):
                continue  # the group has offsets of its own in the new cluster: they win
            offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
            for topic, parts in topics.items():
                if self.store.topic(topic) is None:
                    complete = complete and not self._pending(topic)  # not restored yet: later
                    continue
                for p, v in parts.items():
                    offsets[(topic, int(p))] = OffsetAndMetadata(
                        int(v["offset"]), int(v.get("leader_epoch", -1)), str(v.get("metadata") or ""), now, -1
                    )
            if not offsets or any(self._pending(t) for t in topics):
                continue
            top, results = await gc.commit_offsets(group, -1, "", None, offsets, OFFSET_COMMIT_VERSION)
            if top or any(results.values()):
                log.warning("cluster restore: group offsets not restored", group=group, error=int(top))
                complete = False
                continue
            self.metrics.group_offsets.inc(len(offsets))
            log.info(
                "cluster restore: group offsets restored",
                group=group,
                offsets={f"{t}-{p}": o.offset for (t, p), o in sorted(offsets.items())},
            )
        return complete

    async def _drop_old_group_manifests(self, partition: int, leader_epoch: int) -> None:
        directory = group_offsets_dir(partition)
        for key in await self.bucket.list(directory):
            name = parse_manifest_name(key)
            if name is not None and name[0] > leader_epoch:
                await self.bucket.delete(key)
        self.writer.forget(directory)  # the group manifests' writer lists it afresh: its GC must not see the old ones


async def start_cluster_restore(
    config: BrokerConfig,
    tiered: TieredStorage | None,
    store: MetadataStore,
    topics: TopicManager,
    replicas: ReplicaManager,
    groups: GroupCoordinator,
    *,
    broker_id: int,
    registry: CollectorRegistry,
) -> ClusterRestore | None:
    """With `cluster.restore.enable=true`: read the plan and start restoring; None otherwise (or without a bucket)."""
    if not config["cluster.restore.enable"]:
        return None
    writer = tiered.manifest_writer if tiered is not None else None
    if writer is None:
        log.warning("cluster.restore.enable=true needs tiered storage on LocalTieredStorage or S3: nothing restored")
        return None
    restore = ClusterRestore(
        writer,
        store,
        topics,
        replicas,
        groups,
        broker_id=broker_id,
        registry=registry,
        exclude=list(config["cluster.restore.exclude.topics"]),
    )
    await restore.prepare()
    restore.start()
    return restore


__all__ = ["ClusterRestore", "RestoreMetrics", "start_cluster_restore"]
