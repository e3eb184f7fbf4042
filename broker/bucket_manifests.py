"""The broker's bucket manifest writers besides the partition manifests (which the RemoteLogManager's leaders write):

* topic manifests, written by the controller (or the single broker) whenever a tiered topic is created, its configs
  change or it gains partitions, and removed when it is deleted;
* the cluster manifest (cluster id, topics, ACLs, SCRAM credentials as stored, client quotas), written by the
  controller every `remote.cluster.manifest.interval.ms` and soon after any of these changes;
* group offset manifests: every broker, for each `__consumer_offsets` partition it leads, writes the committed offsets
  of the groups it coordinates there at the same interval (only a coordinator holds them; the partition's leader epoch
  in the name makes a new coordinator's manifest win over its predecessor's).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from strata.protocol.uuids import kafka_uuid_str
from strata.remote.bucket_manifest import (
    CLUSTER_DIR,
    TOPICS_DIR,
    ClusterManifest,
    GroupOffsetsManifest,
    TopicManifest,
    group_offsets_dir,
    parse_topic_dir,
    topic_dir,
    topic_manifest_dir,
)
from strata.remote.bucket_manifest_writer import ManifestWriter

from .group.records import OFFSETS_TOPIC
from .read_replica import read_replica_of

if TYPE_CHECKING:
    from .group.coordinator import GroupCoordinator
    from .metadata_store import MetadataStore, TopicInfo
    from .replica_manager import ReplicaManager

log = structlog.get_logger("strata.manifests")

CHANGE_DEBOUNCE_S = 0.2  # a burst of metadata changes (CreateTopics of many topics) makes one pass
RETRY_S = 1.0


def is_tiered(t: TopicInfo) -> bool:
    """A topic whose data this cluster tiers (a read replica's is the origin's: it has no manifest of its own)."""
    return str(t.configs.get("remote.storage.enable", "false")).lower() == "true" and not read_replica_of(t.configs)


def _now_ms() -> int:
    return int(time.time() * 1000)


def cluster_manifest(store: MetadataStore, revision: int) -> ClusterManifest:
    """The cluster manifest of the metadata store's image now."""
    topics = {  # a read replica's topic is its origin's (in another cluster's manifests)
        n: kafka_uuid_str(t.topic_id)
        for n, t in store.topics().items()
        if not t.internal and not read_replica_of(t.configs)
    }
    scram: dict[str, dict[str, dict[str, Any]]] = {}
    for (user, mechanism), cred in store.scram_credentials().items():
        scram.setdefault(user, {})[mechanism.name] = cred.to_json()  # salted, hashed: never a password
    quotas = [
        {"entity": [[etype, name] for etype, name in entity.components()], "quotas": dict(values)}
        for entity, values in store.client_quotas().items()
    ]
    return ClusterManifest(
        cluster_id=store.cluster_id,
        revision=revision,
        written_at_ms=_now_ms(),
        topics=topics,
        acls=[b.to_json() for b in store.acls()],
        scram_credentials=scram,
        client_quotas=quotas,
    )


class BucketManifestService:
    def __init__(
        self,
        writer: ManifestWriter,
        store: MetadataStore,
        replicas: ReplicaManager,
        groups: GroupCoordinator | None,
        *,
        broker_id: int,
        cluster_interval_ms: int,
    ) -> None:
        self.writer = writer
        self.store = store
        self.replicas = replicas
        self.groups = groups
        self.broker_id = broker_id
        self.interval_s = cluster_interval_ms / 1000.0
        self._dirty_topics: set[str] = set()
        self._cluster_dirty = True
        self._last_cluster: ClusterManifest | None = None  # content last written (revision, time zeroed)
        self._last_groups: dict[int, tuple[int, dict[str, Any]]] = {}  # offsets partition -> (epoch, offsets)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.store.add_listener(self._on_metadata)
        self._dirty_topics.update(n for n, t in self.store.topics().items() if is_tiered(t))
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="bucket-manifests")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _on_metadata(self, kind: str, key: object) -> None:
        if kind == "topic" and isinstance(key, str):
            self._dirty_topics.add(key)
            self._cluster_dirty = True
        elif kind in ("acl", "scram", "quota"):
            self._cluster_dirty = True
        else:
            return
        self._wake.set()

    def _is_writer(self) -> bool:
        return self.store.controller_id == self.broker_id

    async def _loop(self) -> None:
        last_periodic = float("-inf")
        while True:
            periodic = self.interval_s > 0 and time.monotonic() - last_periodic >= self.interval_s
            self._wake.clear()  # before the pass: a change during it wakes the next one
            try:
                if self._is_writer():
                    await self.write_topic_manifests()
                    if self.interval_s > 0 and (periodic or self._cluster_dirty):
                        self._cluster_dirty = False
                        await self.write_cluster_manifest()
                if periodic:
                    await self.write_group_offsets()
                    last_periodic = time.monotonic()
                timeout = max(0.0, last_periodic + self.interval_s - time.monotonic()) if self.interval_s else None
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the bucket failing: retried
                log.warning("bucket manifest write failed", error=repr(e))
                timeout = RETRY_S
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
            await asyncio.sleep(CHANGE_DEBOUNCE_S)

    # -- topics -------------------------------------------------------------------------------------------------------
    async def write_topic_manifests(self) -> None:
        while self._dirty_topics:
            name = self._dirty_topics.pop()
            try:
                await self._write_topic(name)
            except BaseException:
                self._dirty_topics.add(name)
                raise

    async def _write_topic(self, name: str) -> None:
        t = self.store.topic(name)
        live = t.topic_id if t is not None and is_tiered(t) else None
        # manifests of an earlier topic of that name (deleted, recreated, no longer tiered), whoever wrote them
        stale = set()
        for key in await self.writer.store.list(f"{TOPICS_DIR}{name}-"):
            parsed = parse_topic_dir(key[len(TOPICS_DIR) :].split("/", 1)[0])
            if parsed is not None and parsed[0] == name and parsed[1] != live:
                stale.add(parsed[1])
        for topic_id in stale:
            await self._delete_topic_manifests(name, topic_id)
        if t is None or live is None:
            return
        rf = len(t.assignments[0]) if t.assignments else 1

        def build(revision: int) -> TopicManifest:
            return TopicManifest(t.topic_id, t.name, t.partitions, rf, dict(t.configs), revision, _now_ms())

        await self.writer.put(topic_manifest_dir(t.name, t.topic_id), "topic", build, fresh=True)

    async def _delete_topic_manifests(self, name: str, topic_id: uuid.UUID) -> None:
        """The topic manifest first: without it a reader does not take the topic, whatever partition manifests
        remain (a leader's last write racing the deletion)."""
        store = self.writer.store
        keys = await store.list(topic_dir(name, topic_id))
        first = topic_manifest_dir(name, topic_id)
        for key in sorted(keys, key=lambda k: not k.startswith(first)):
            await store.delete(key)
        for key in keys:
            self.writer.forget(key.rsplit("/", 1)[0] + "/")

    # -- cluster ------------------------------------------------------------------------------------------------------
    def cluster_state(self, revision: int) -> ClusterManifest:
        return cluster_manifest(self.store, revision)

    async def write_cluster_manifest(self) -> bool:
        """Write the cluster manifest if its content changed since this broker last wrote it."""
        content = dataclasses.replace(self.cluster_state(0), written_at_ms=0)
        if content == self._last_cluster:
            return False
        await self.writer.put(CLUSTER_DIR, "cluster", self.cluster_state, fresh=True)
        self._last_cluster = content
        return True

    # -- group offsets ------------------------------------------------------------------------------------------------
    async def write_group_offsets(self) -> None:
        gc = self.groups
        if gc is None or not gc.active:
            return
        by_partition = self._group_offsets(gc)
        for partition in sorted(gc.owned - gc.loading):
            p = self.replicas.partitions.get((OFFSETS_TOPIC, partition))
            if p is None or not p.is_leader:
                continue
            offsets = by_partition.get(partition, {})
            last = self._last_groups.get(partition)
            if (last is None and not offsets) or last == (p.leader_epoch, offsets):
                continue  # unchanged, or nothing to say (a predecessor's manifest may have more)
            part = functools.partial(
                GroupOffsetsManifest,
                partition,
                p.leader_epoch,
                written_at_ms=_now_ms(),
                broker_id=self.broker_id,
                offsets=offsets,
            )

            def build(revision: int, part: Callable[..., GroupOffsetsManifest] = part) -> GroupOffsetsManifest:
                return part(revision=revision)

            await self.writer.put(group_offsets_dir(partition), "groups", build)
            self._last_groups[partition] = (p.leader_epoch, offsets)

    @staticmethod
    def _group_offsets(gc: GroupCoordinator) -> dict[int, dict[str, dict[str, dict[str, dict[str, Any]]]]]:
        """`__consumer_offsets` partition -> group -> topic -> partition -> committed offset, of every group here."""
        out: dict[int, dict[str, dict[str, dict[str, dict[str, Any]]]]] = {}
        _, groups = gc.list_groups()
        for g in groups:
            err, topics = gc.fetch_offsets(g.group_id, None)
            if err:
                continue
            for topic, parts in topics:
                for p, om in parts:
                    if om is None:
                        continue
                    entry = {"offset": om.offset, "leader_epoch": om.leader_epoch, "metadata": om.metadata}
                    group = out.setdefault(gc.partition_for(g.group_id), {}).setdefault(g.group_id, {})
                    group.setdefault(topic, {})[str(p)] = entry
        return out


__all__ = ["BucketManifestService", "cluster_manifest", "is_tiered"]
