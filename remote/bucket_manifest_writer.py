"""Writes the bucket manifests: versioned objects, never overwritten, old revisions garbage-collected.

`ManifestWriter.put` is the one write path (partition, topic, cluster): it writes `<dir>manifest.<epoch>.<revision>
.json` with a revision above every one already in `<dir>` (listed once per directory, then counted here), and then
deletes all but the newest `keep` objects of the directory.

`PartitionManifestWriter` is the RemoteLogManager's hook: after a COPY_SEGMENT_FINISHED or a remote deletion the
partition's leader asks for a manifest (`request`); writes are debounced to at most one per partition per
`remote.manifest.upload.interval.ms`, and each write first checks that this broker still leads at the epoch the
request came with (a deposed leader writes nothing more; its name carries its leader epoch, so even a write that
raced the check loses to the successor's in readers). The content is built from the RLMM at the time of the write
(`build_partition_manifest`): COPY_SEGMENT_FINISHED segments of the leader's lineage at or above the log start.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import structlog

from strata.protocol.uuids import kafka_uuid_str
from strata.storage.log import UnifiedLog

from .bucket_manifest import (
    ClusterManifest,
    GroupOffsetsManifest,
    PartitionManifest,
    SegmentEntry,
    TopicManifest,
    parse_manifest_name,
    partition_manifest_dir,
)
from .bucket_store import ManifestStore
from .metadata import RemoteLogSegmentMetadata, RemoteLogSegmentState, TopicIdPartition
from .remote_metrics import RemoteMetrics
from .rlmm_api import RemoteLogMetadataManager

log = structlog.get_logger("strata.remote.manifests")

DEFAULT_KEEP_REVISIONS = 3
RETRY_BACKOFF_S = 1.0
StillLeader = Callable[[], Awaitable[bool]]
Manifest = PartitionManifest | TopicManifest | ClusterManifest | GroupOffsetsManifest


def _now_ms() -> int:
    return int(time.time() * 1000)


def in_lineage(epochs: list[tuple[int, int]], log_end_offset: int, meta: RemoteLogSegmentMetadata) -> bool:
    """True when every record of `meta` belongs to the lineage whose leader-epoch chain is `epochs` (epoch, start).

    Each epoch of the segment must be one of the chain's, starting where the chain says (the segment's first epoch
    may start earlier in the chain: the segment begins mid-epoch), and the segment must end before its last epoch
    ends in the chain. Epochs older than the chain's first entry (trimmed with the log start) are taken as they are."""
    if not epochs:
        return True
    starts = dict(epochs)
    first_epoch = epochs[0][0]
    seg = sorted(meta.segment_leader_epochs.items())
    for i, (epoch, start) in enumerate(seg):
        if epoch < first_epoch:
            continue
        if epoch not in starts:
            return False
        if i > 0 and starts[epoch] != start and epoch != first_epoch:
            return False
        if i == 0 and starts[epoch] > start and epoch != first_epoch:
            return False
        nxt = [s for e, s in epochs if e > epoch]
        epoch_end = nxt[0] if nxt else log_end_offset  # exclusive
        seg_end = seg[i + 1][1] - 1 if i + 1 < len(seg) else meta.end_offset
        if seg_end >= epoch_end:
            return False
    return True


def segment_entry(meta: RemoteLogSegmentMetadata) -> SegmentEntry:
    return SegmentEntry(
        segment_id=meta.remote_log_segment_id.id_str,
        start_offset=meta.start_offset,
        end_offset=meta.end_offset,
        size_bytes=meta.segment_size_in_bytes,
        max_timestamp_ms=meta.max_timestamp_ms,
        segment_leader_epochs=dict(meta.segment_leader_epochs),
        txn_idx_empty=meta.txn_idx_empty,
        custom_metadata=meta.custom_metadata,
        broker_id=meta.broker_id,
        event_timestamp_ms=meta.event_timestamp_ms,
    )


def lineage_segments(
    segments: Iterable[RemoteLogSegmentMetadata],
    epochs: list[tuple[int, int]],
    log_start_offset: int,
    log_end_offset: int,
) -> list[RemoteLogSegmentMetadata]:
    """The finished segments of the lineage at or above the log start, in offset order; a segment whose offsets an
    earlier one covers wholly (a new leader's duplicate copy, KIP-405 allows them) is left out."""
    done = [
        s
        for s in segments
        if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        and s.end_offset >= log_start_offset
        and in_lineage(epochs, log_end_offset, s)
    ]
    done.sort(key=lambda s: (s.start_offset, -s.end_offset, s.event_timestamp_ms))
    out: list[RemoteLogSegmentMetadata] = []
    covered = -1
    for s in done:
        if s.end_offset <= covered:
            continue
        out.append(s)
        covered = s.end_offset
    return out


def build_partition_manifest(
    tip: TopicIdPartition,
    ulog: UnifiedLog,
    segments: Iterable[RemoteLogSegmentMetadata],
    *,
    leader_epoch: int,
    revision: int,
    broker_id: int,
) -> PartitionManifest:
    epochs = [(e.epoch, e.start_offset) for e in ulog.leader_epoch_cache.entries]
    kept = lineage_segments(segments, epochs, ulog.log_start_offset, ulog.log_end_offset)
    return PartitionManifest(
        topic_id=tip.topic_id,
        topic=tip.topic,
        partition=tip.partition,
        leader_epoch=leader_epoch,
        revision=revision,
        broker_id=broker_id,
        written_at_ms=_now_ms(),
        log_start_offset=ulog.log_start_offset,
        highest_uploaded_offset=kept[-1].end_offset if kept else -1,
        leader_epochs=epochs,
        segments=[segment_entry(s) for s in kept],
    )


class ManifestWriter:
    """Versioned writes of any manifest kind into its directory, with garbage collection of old revisions."""

    def __init__(
        self, store: ManifestStore, *, keep: int = DEFAULT_KEEP_REVISIONS, metrics: RemoteMetrics | None = None
    ) -> None:
        self.store = store
        self.keep = max(1, keep)
        self.metrics = metrics
        # directory -> its manifests' keys, oldest first: listed once (or when `fresh`), then kept here, so that a
        # write costs one PUT and the deletion of the oldest revision, no LIST
        self._keys: dict[str, list[str]] = {}

    async def _listed(self, directory: str, fresh: bool) -> list[str]:
        keys = None if fresh else self._keys.get(directory)
        if keys is None:
            found = [(name, k) for k in await self.store.list(directory) if (name := parse_manifest_name(k))]
            keys = self._keys[directory] = [k for _, k in sorted(found)]
        return keys

    async def next_revision(self, directory: str, fresh: bool = False) -> int:
        """One above the highest revision in `directory`: listed the first time (or when `fresh`), then counted here
        (a partition's leader is its only writer until the next leader epoch, whose names sort above anyway)."""
        names = [parse_manifest_name(k) for k in await self._listed(directory, fresh)]
        return max((r for _, r in filter(None, names)), default=0) + 1

    async def put(
        self, directory: str, kind: str, build: Callable[[int], Manifest], *, fresh: bool = False
    ) -> Manifest:
        """Build the manifest for the next revision of `directory` and write it; then GC old revisions. `fresh`:
        list the directory first (a writer that may have changed meanwhile: the controller's manifests)."""
        revision = await self.next_revision(directory, fresh)
        manifest = build(revision)
        data = manifest.to_bytes()
        try:
            await self.store.put(directory + manifest.name, data)
        except Exception:
            if self.metrics is not None:
                self.metrics.manifest_upload_errors.labels(kind).inc()
            raise
        keys = self._keys.setdefault(directory, [])
        keys.append(directory + manifest.name)
        keys.sort(key=lambda k: parse_manifest_name(k) or (-1, -1))
        if self.metrics is not None:
            self.metrics.manifest_uploads.labels(kind).inc()
            self.metrics.manifest_upload_bytes.labels(kind).inc(len(data))
        await self.collect_garbage(directory)
        return manifest

    async def collect_garbage(self, directory: str) -> None:
        """Delete all but the `keep` greatest manifests of the directory (best effort: the next write retries)."""
        keys = self._keys.get(directory, [])
        try:
            while len(keys) > self.keep:
                await self.store.delete(keys[0])
                keys.pop(0)
        except Exception as e:  # noqa: BLE001 - garbage only: the next write collects it
            log.info("manifest garbage collection failed", directory=directory, error=repr(e))

    def forget(self, directory: str) -> None:
        self._keys.pop(directory, None)


@dataclass
class _PartitionState:
    ulog: UnifiedLog
    tip: TopicIdPartition
    leader_epoch: int
    still_leader: StillLeader
    dirty: bool = False
    last_write: float = float("-inf")  # monotonic seconds
    task: asyncio.Task[None] | None = None


class PartitionManifestWriter:
    """The RLM's hook: debounced, leader-fenced partition manifest writes."""

    def __init__(
        self,
        writer: ManifestWriter,
        rlmm: RemoteLogMetadataManager,
        *,
        broker_id: int,
        interval_ms: int,
        metrics: RemoteMetrics | None = None,
    ) -> None:
        self.writer = writer
        self.rlmm = rlmm
        self.broker_id = broker_id
        self.interval_s = max(0, interval_ms) / 1000.0
        self.metrics = metrics
        self._parts: dict[TopicIdPartition, _PartitionState] = {}
        self._closed = False

    def request(self, ulog: UnifiedLog, tip: TopicIdPartition, leader_epoch: int, still_leader: StillLeader) -> None:
        """The partition's remote segments changed (copy finished, deletion finished): write a manifest soon."""
        if self._closed:
            return
        st = self._parts.get(tip)
        if st is None or st.leader_epoch != leader_epoch:
            if st is not None and st.task is not None:
                st.task.cancel()
            # a new leadership lists the directory again: another leader wrote revisions meanwhile
            self.writer.forget(partition_manifest_dir(tip.topic, tip.topic_id, tip.partition))
            st = self._parts[tip] = _PartitionState(ulog, tip, leader_epoch, still_leader)
        st.ulog, st.still_leader, st.dirty = ulog, still_leader, True
        if st.task is None or st.task.done():
            st.task = asyncio.get_running_loop().create_task(self._run(st), name=f"manifest-{tip}")

    def stop(self, tip: TopicIdPartition) -> None:
        """Leadership lost or replica gone: no further write for the partition."""
        st = self._parts.pop(tip, None)
        if st is not None and st.task is not None:
            st.task.cancel()

    async def delete_partition(self, tip: TopicIdPartition) -> None:
        """The partition's remote data is gone (topic deleted): its manifests go too."""
        self.stop(tip)
        directory = partition_manifest_dir(tip.topic, tip.topic_id, tip.partition)
        for key in await self.writer.store.list(directory):
            await self.writer.store.delete(key)
        self.writer.forget(directory)

    async def _run(self, st: _PartitionState) -> None:
        while st.dirty and not self._closed and self._parts.get(st.tip) is st:
            wait = st.last_write + self.interval_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            st.dirty = False
            try:
                await self.write_now(st)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the bucket failing: retried, the manifest must catch up
                st.dirty = True
                log.warning("partition manifest write failed", partition=str(st.tip), error=repr(e))
                await asyncio.sleep(max(self.interval_s, RETRY_BACKOFF_S))
            finally:
                st.last_write = time.monotonic()

    async def write_now(self, st: _PartitionState) -> PartitionManifest | None:
        """Write the partition's manifest now, if this broker still leads at the request's epoch."""
        directory = partition_manifest_dir(st.tip.topic, st.tip.topic_id, st.tip.partition)
        await self.writer.next_revision(directory)  # any listing first: the fence is checked right before the put
        if not await st.still_leader():
            self.stop(st.tip)
            if self.metrics is not None:
                self.metrics.manifest_writes_fenced.inc()
            log.info("leadership lost: partition manifest not written", partition=str(st.tip), epoch=st.leader_epoch)
            return None
        segments = self.rlmm.list_remote_log_segments(st.tip)

        def build(rev: int) -> PartitionManifest:
            return build_partition_manifest(
                st.tip,
                st.ulog,
                segments,
                leader_epoch=st.leader_epoch,
                revision=rev,
                broker_id=self.broker_id,
            )

        manifest = await self.writer.put(directory, "partition", build)
        assert isinstance(manifest, PartitionManifest)
        log.debug(
            "partition manifest written",
            partition=str(st.tip),
            topic_id=kafka_uuid_str(st.tip.topic_id),
            revision=manifest.revision,
            segments=len(manifest.segments),
        )
        return manifest

    async def close(self) -> None:
        self._closed = True
        tasks = [st.task for st in self._parts.values() if st.task is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._parts.clear()


__all__ = [
    "DEFAULT_KEEP_REVISIONS",
    "ManifestWriter",
    "PartitionManifestWriter",
    "build_partition_manifest",
    "in_lineage",
    "lineage_segments",
]
