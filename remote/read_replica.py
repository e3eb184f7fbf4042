"""Read-replica topics (issue 24), the remote side: where an origin cluster's bucket is, and its segments as this
broker's RemoteLogManager reads them.

A read-replica topic names its origin with `remote.readreplica=<bucket>[/<key prefix>]` (S3: the origin's
`rsm.config.s3.bucket.name` and, verbatim, its `rsm.config.key.prefix`; LocalTieredStorage: the origin's
`rsm.config.dir`). `ReadReplicaOrigin` holds one origin's RSM (this broker's RSM settings with the origin's bucket and
prefix), its manifest reader, an in-memory RLMM filled from the partition manifests (`ManifestRLMM`: nothing is ever
written to the origin's prefix, nor to this cluster's `__remote_log_metadata`) and a RemoteLogManager of its own over
them, so Fetch and ListOffsets take the ordinary tiered read path (reader pool, index and chunk caches, lineage
rules). The broker side (broker/read_replica.py) decides when to read the manifests and keeps the local logs' offsets.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .bucket_manifest import SegmentEntry
from .bucket_manifest_reader import BucketManifestReader
from .bucket_store import manifest_store_for
from .executors import RemoteExecutors
from .local_tiered import LocalTieredStorage
from .manifest_segment_metadata import metadata_cache
from .metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)
from .remote_metrics import RemoteMetrics
from .rlm import RemoteLogManager, RemoteLogManagerConfig
from .rlmm_api import RemoteLogMetadataManager
from .rlmm_cache import RemoteLogMetadataCache
from .rlmm_types import RemoteStorageNotReadyError
from .rsm import create_remote_storage_manager, load_rsm_class, strip_rsm_prefix

READ_REPLICA_CONFIG = "remote.readreplica"


class ReadReplicaError(ValueError):
    """A `remote.readreplica` value this broker cannot serve (its message is the client's error message)."""


@dataclass(frozen=True)
class OriginLocation:
    """Where an origin's objects are: the RSM class and its `rsm.config.*` keys (prefix stripped)."""

    value: str  # the topic config as given
    class_name: str
    configs: dict[str, Any]

    def same_as(self, class_name: str, configs: Mapping[str, Any]) -> bool:
        """Whether this is the root the broker's own RSM writes to (a read replica must never share it)."""
        own = strip_rsm_prefix(configs)
        if self.class_name == "s3":
            return (own.get("s3.bucket.name"), own.get("key.prefix", "")) == (
                self.configs.get("s3.bucket.name"),
                self.configs.get("key.prefix", ""),
            )
        return Path(str(own.get("dir", ""))).resolve() == Path(str(self.configs["dir"])).resolve()


def origin_location(value: str, class_name: str, rsm_configs: Mapping[str, Any], default_dir: Path) -> OriginLocation:
    """The origin's RSM settings: this broker's, with the origin's bucket and key prefix (S3) or directory (local)."""
    value = value.strip()
    if not value:
        raise ReadReplicaError("remote.readreplica must name the origin's bucket")
    own = strip_rsm_prefix(rsm_configs)
    try:
        cls = load_rsm_class(class_name)
    except (ValueError, ImportError) as e:
        raise ReadReplicaError(str(e)) from None
    from .s3 import S3RemoteStorageManager  # the S3 client stack loads only when a read replica is made

    kind = "s3" if issubclass(cls, S3RemoteStorageManager) else "local" if issubclass(cls, LocalTieredStorage) else ""
    if kind == "s3":
        bucket, _, prefix = value.partition("/")
        if not bucket:
            raise ReadReplicaError(f"remote.readreplica {value!r}: no bucket name")
        cfg = {k: v for k, v in own.items() if k != "fetch.chunk.cache.path"}  # the disk cache is the own RSM's
        cfg.update({"s3.bucket.name": bucket, "key.prefix": prefix})
        return OriginLocation(value, "s3", cfg)
    if kind == "local":
        cfg = dict(own)
        cfg["dir"] = value
        return OriginLocation(value, "local", cfg)
    raise ReadReplicaError(f"read-replica topics need the S3 or local remote storage manager, not {class_name}")


class ManifestRLMM(RemoteLogMetadataManager):
    """A read-only RLMM over the origin's partition manifests, in memory: `replace` swaps a partition's segments
    for those of a newer manifest. Writes are refused (a read replica records nothing)."""

    def __init__(self) -> None:
        self._caches: dict[TopicIdPartition, RemoteLogMetadataCache] = {}

    def replace(self, tip: TopicIdPartition, entries: list[SegmentEntry]) -> None:
        self._caches[tip] = metadata_cache(tip, entries)

    def forget(self, tip: TopicIdPartition) -> None:
        self._caches.pop(tip, None)

    async def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        raise PermissionError("a read replica's remote log metadata is read-only")

    async def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        raise PermissionError("a read replica's remote log metadata is read-only")

    async def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None:
        raise PermissionError("a read replica's remote log metadata is read-only")

    def _cache(self, tip: TopicIdPartition) -> RemoteLogMetadataCache:
        """The partition's segments; before its first manifest is applied (a broker just started) a retriable
        error, not "no such segment", which a consumer would take for OFFSET_OUT_OF_RANGE and reset."""
        cache = self._caches.get(tip)
        if cache is None:
            raise RemoteStorageNotReadyError(f"the origin's manifest of {tip} is not read yet")
        return cache

    def remote_log_segment_metadata(
        self, tip: TopicIdPartition, leader_epoch: int, offset: int
    ) -> RemoteLogSegmentMetadata | None:
        return self._cache(tip).remote_log_segment_metadata(leader_epoch, offset)

    def highest_offset_for_epoch(self, tip: TopicIdPartition, leader_epoch: int) -> int | None:
        return self._cache(tip).highest_offset_for_epoch(leader_epoch)

    def list_remote_log_segments(
        self, tip: TopicIdPartition, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        cache = self._cache(tip)
        if leader_epoch is None:
            return cache.list_all_remote_log_segments()
        return cache.list_remote_log_segments(leader_epoch)

    def partition_delete_metadata(self, tip: TopicIdPartition) -> RemotePartitionDeleteMetadata | None:
        return None

    def on_partition_leadership_changes(
        self, leader_partitions: Iterable[TopicIdPartition], follower_partitions: Iterable[TopicIdPartition]
    ) -> None:
        pass

    def on_stop_partitions(self, partitions: Iterable[TopicIdPartition]) -> None:
        for tip in partitions:
            self.forget(tip)

    def followed_partitions(self) -> set[TopicIdPartition]:
        return set(self._caches)

    def is_ready(self, tip: TopicIdPartition) -> bool:
        return tip in self._caches

    async def wait_until_ready(self, tip: TopicIdPartition, timeout_s: float | None = None) -> None:
        return None

    async def wait_for_catch_up(self, tip: TopicIdPartition, timeout_s: float | None = None) -> None:
        return None


class ReadReplicaOrigin:
    """One origin bucket (or prefix): its RSM, manifest reader, manifest RLMM and a RemoteLogManager reading them.
    Shared by every read-replica topic of that origin on this broker."""

    def __init__(
        self,
        location: OriginLocation,
        rlm_config: RemoteLogManagerConfig,
        *,
        broker_id: int,
        cache_root: Path,
        metrics: RemoteMetrics,
    ) -> None:
        self.location = location
        self.rsm = create_remote_storage_manager(
            location.class_name, location.configs, broker_id=broker_id, default_dir=cache_root
        )
        # pools of its own (closing the RLM shuts them down); reads only: one copier and one expiration thread
        self.rsm.use_executors(RemoteExecutors.create(1, 1, rlm_config.reader_threads))
        store = manifest_store_for(self.rsm)
        assert store is not None  # origin_location only admits the S3 and local RSMs
        self.reader = BucketManifestReader(store)
        self.rlmm = ManifestRLMM()
        digest = hashlib.sha256(location.value.encode()).hexdigest()[:16]
        self.rlm = RemoteLogManager(
            rlm_config,
            self.rsm,
            self.rlmm,
            broker_id=broker_id,
            index_cache_dir=cache_root / digest / "remote-log-index-cache",
            metrics=metrics,
        )

    async def close(self) -> None:
        await self.rlm.close()  # closes the RSM and its pools too


__all__ = [
    "READ_REPLICA_CONFIG",
    "ManifestRLMM",
    "OriginLocation",
    "ReadReplicaError",
    "ReadReplicaOrigin",
    "origin_location",
]
