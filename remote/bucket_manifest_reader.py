"""Reads a bucket's manifests back into a restore plan: what topic recovery, whole-cluster restore and read replicas
start from (issue 24).

`BucketManifestReader(store)` lists the topics a bucket describes, reads the newest manifest of each directory
(greatest `(writer epoch, revision)`; an unreadable one falls back to the next), and validates every listed segment
against the objects present: a segment counts only when all its objects are there (the `.log`, its indexes, the
leader-epoch checkpoint, the producer snapshot, the transaction index unless it had none, and the store's own extras
such as the S3 RSM's chunk manifest). The plan of a partition is the longest run of complete, offset-contiguous
segments: segments missing at the start are those retention deleted after the manifest was written (the plan's log
start moves past them); from the first incomplete segment or offset gap after that, nothing is taken (reported).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from strata.protocol.uuids import kafka_uuid_str

from .bucket_manifest import (
    CLUSTER_DIR,
    GROUPS_DIR,
    TOPICS_DIR,
    ClusterManifest,
    GroupOffsetsManifest,
    ManifestFormatError,
    PartitionManifest,
    SegmentEntry,
    TopicManifest,
    parse_manifest_name,
    parse_topic_dir,
    partition_manifest_dir,
    topic_dir,
    topic_manifest_dir,
)
from .bucket_store import ManifestStore
from .metadata import TopicIdPartition
from .rsm import RemoteResourceNotFoundError, partition_dir_name

M = TypeVar("M")


@dataclass(frozen=True)
class SegmentProblem:
    """A listed segment the plan does not take, and why."""

    segment: SegmentEntry
    reason: str  # "missing objects: .log, .index" / "offset gap after N"


@dataclass
class PartitionPlan:
    partition: int
    manifest: PartitionManifest | None
    segments: list[SegmentEntry] = field(default_factory=list)  # complete and contiguous, offset order
    log_start_offset: int = 0
    next_offset: int = 0  # one past the last offset the segments hold (the restored log's end offset)
    problems: list[SegmentProblem] = field(default_factory=list)

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self.segments)


@dataclass
class TopicPlan:
    topic: str
    topic_id: uuid.UUID
    partition_count: int
    replication_factor: int
    configs: dict[str, str]
    manifest: TopicManifest | None
    partitions: dict[int, PartitionPlan] = field(default_factory=dict)


@dataclass
class RestorePlan:
    cluster: ClusterManifest | None
    topics: dict[str, TopicPlan] = field(default_factory=dict)
    #: group -> topic -> partition -> {offset, leader_epoch, metadata}, merged from every group offsets manifest
    group_offsets: dict[str, dict[str, dict[int, dict[str, Any]]]] = field(default_factory=dict)


class BucketManifestReader:
    def __init__(self, store: ManifestStore) -> None:
        self.store = store

    # -- manifests --------------------------------------------------------------------------------------------------
    async def _latest(self, directory: str, parse: Callable[[bytes], M]) -> M | None:
        keys = sorted(
            ((name, k) for k in await self.store.list(directory) if (name := parse_manifest_name(k)) is not None),
            reverse=True,
        )
        for _, key in keys:
            try:
                return parse(await self.store.get(key))
            except (RemoteResourceNotFoundError, ManifestFormatError):
                continue  # garbage-collected meanwhile, or not ours: the next older one
        return None

    async def cluster_manifest(self) -> ClusterManifest | None:
        return await self._latest(CLUSTER_DIR, ClusterManifest.from_bytes)

    async def topic_manifest(self, topic: str, topic_id: uuid.UUID) -> TopicManifest | None:
        return await self._latest(topic_manifest_dir(topic, topic_id), TopicManifest.from_bytes)

    async def partition_manifest(self, topic: str, topic_id: uuid.UUID, partition: int) -> PartitionManifest | None:
        return await self._latest(partition_manifest_dir(topic, topic_id, partition), PartitionManifest.from_bytes)

    async def group_offsets(self) -> dict[str, dict[str, dict[int, dict[str, Any]]]]:
        """The newest group offsets manifest of every `__consumer_offsets` partition, merged."""
        out: dict[str, dict[str, dict[int, dict[str, Any]]]] = {}
        dirs = {k.rsplit("/", 1)[0] + "/" for k in await self.store.list(GROUPS_DIR)}
        for directory in sorted(dirs):
            gm = await self._latest(directory, GroupOffsetsManifest.from_bytes)
            for group, topics in (gm.offsets if gm is not None else {}).items():
                for topic, parts in topics.items():
                    dest = out.setdefault(group, {}).setdefault(topic, {})
                    dest.update({int(p): dict(v) for p, v in parts.items()})
        return out

    async def list_topics(self) -> list[tuple[str, uuid.UUID]]:
        """(topic, topic id) of every topic the bucket has manifests of; a name can appear with several ids (a
        topic deleted and created again)."""
        found: set[tuple[str, uuid.UUID]] = set()
        for key in await self.store.list(TOPICS_DIR):
            parsed = parse_topic_dir(key[len(TOPICS_DIR) :].split("/", 1)[0])
            if parsed is not None:
                found.add(parsed)
        return sorted(found, key=lambda t: (t[0], str(t[1])))

    async def _partitions_listed(self, topic: str, topic_id: uuid.UUID) -> list[int]:
        base = topic_dir(topic, topic_id)
        out = set()
        for key in await self.store.list(base + "partition-"):
            head = key[len(base) :].split("/", 1)[0]
            try:
                out.add(int(head.removeprefix("partition-")))
            except ValueError:
                continue
        return sorted(out)

    # -- validation and plans ------------------------------------------------------------------------------------
    async def partition_plan(self, manifest: PartitionManifest) -> PartitionPlan:
        """Check the manifest's segments against the bucket and keep the complete, contiguous run."""
        tip = TopicIdPartition(manifest.topic_id, manifest.topic, manifest.partition)
        prefix = partition_dir_name(tip) + "/"
        present = {k[len(prefix) :] for k in await self.store.list(prefix)}
        plan = PartitionPlan(manifest.partition, manifest, log_start_offset=manifest.log_start_offset)
        plan.next_offset = manifest.log_start_offset
        segments = manifest.segments
        for i, seg in enumerate(segments):
            missing = [
                s for s in self.store.segment_suffixes(seg.txn_idx_empty) if seg.object_prefix + s not in present
            ]
            reason = "missing objects: " + ", ".join(missing) if missing else None
            if reason is None and plan.segments and seg.start_offset > plan.next_offset:
                reason = f"offset gap after {plan.next_offset - 1}"
            if reason is not None and not plan.segments:  # deleted by retention after the manifest was written
                plan.problems.append(SegmentProblem(seg, reason))
                plan.log_start_offset = plan.next_offset = max(plan.log_start_offset, seg.end_offset + 1)
                continue
            if reason is not None:  # nothing after a hole is taken: the log must stay contiguous
                plan.problems.append(SegmentProblem(seg, reason))
                plan.problems += [SegmentProblem(s, "after an incomplete segment or gap") for s in segments[i + 1 :]]
                break
            if seg.end_offset < plan.next_offset:
                continue  # wholly covered by the segments before it
            plan.segments.append(seg)
            plan.next_offset = seg.end_offset + 1
        if plan.segments:
            plan.log_start_offset = max(plan.log_start_offset, plan.segments[0].start_offset)
        return plan

    async def topic_plan(self, topic: str, topic_id: uuid.UUID) -> TopicPlan:
        tm = await self.topic_manifest(topic, topic_id)
        listed = await self._partitions_listed(topic, topic_id)
        count = tm.partitions if tm is not None else (max(listed) + 1 if listed else 0)
        plan = TopicPlan(
            topic,
            topic_id,
            count,
            tm.replication_factor if tm is not None else -1,
            dict(tm.configs) if tm is not None else {},
            tm,
        )
        for p in range(count):
            pm = await self.partition_manifest(topic, topic_id, p)
            plan.partitions[p] = await self.partition_plan(pm) if pm is not None else PartitionPlan(p, None)
        return plan

    async def restore_plan(self, topics: set[str] | None = None) -> RestorePlan:
        """The plan of every topic in the bucket (or of `topics`) that has a topic manifest (a deleted topic has
        none, whatever partition manifests a racing leader left); when a name has several ids, the one the cluster
        manifest names wins, else the one with the newest topic manifest."""
        cluster = await self.cluster_manifest()
        plan = RestorePlan(cluster, group_offsets=await self.group_offsets())
        candidates: dict[str, list[uuid.UUID]] = {}
        for name, tid in await self.list_topics():
            if topics is None or name in topics:
                candidates.setdefault(name, []).append(tid)
        for name, ids in candidates.items():
            chosen = [t for t in ids if cluster is not None and cluster.topics.get(name) == kafka_uuid_str(t)]
            if not chosen:
                chosen = await self._newest_topic_id(name, ids)
            if chosen:
                plan.topics[name] = await self.topic_plan(name, chosen[0])
        return plan

    async def _newest_topic_id(self, name: str, ids: list[uuid.UUID]) -> list[uuid.UUID]:
        dated = []
        for tid in ids:
            tm = await self.topic_manifest(name, tid)
            if tm is not None:
                dated.append((tm.written_at_ms, tid))
        return [max(dated, key=lambda d: d[0])[1]] if dated else []


__all__ = [
    "BucketManifestReader",
    "PartitionPlan",
    "RestorePlan",
    "SegmentProblem",
    "TopicPlan",
]
