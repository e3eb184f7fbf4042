"""The KIP-405/963/956/1018 remote storage metrics, registered on the broker's Prometheus registry.

Kept in `remote` (not `broker`) so the RemoteLogManager updates them directly; names map to Kafka's MBeans in
docs/metrics.md.

`RemoteStorageStatsCollector` exports the RSM's and the caches' own statistics (`S3Stats`, `ChunkCacheStats`,
`IndexCacheStats`) at scrape time as `strata_rsm_s3_*`, `strata_remote_chunk_cache_*` and
`strata_remote_index_cache_*` (docs/metrics.md maps them to the Aiven tiered-storage plugin's names).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric


class RemoteMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        t = ["topic"]
        self.copy_bytes = Counter("strata_remote_copy_bytes", "RemoteCopyBytesPerSec", t, registry=r)
        self.copy_requests = Counter("strata_remote_copy_requests", "RemoteCopyRequestsPerSec", t, registry=r)
        self.copy_errors = Counter("strata_remote_copy_errors", "RemoteCopyErrorsPerSec", t, registry=r)
        self.fetch_bytes = Counter("strata_remote_fetch_bytes", "RemoteFetchBytesPerSec", t, registry=r)
        self.fetch_requests = Counter("strata_remote_fetch_requests", "RemoteFetchRequestsPerSec", t, registry=r)
        self.fetch_errors = Counter("strata_remote_fetch_errors", "RemoteFetchErrorsPerSec", t, registry=r)
        self.delete_requests = Counter("strata_remote_delete_requests", "RemoteDeleteRequestsPerSec", t, registry=r)
        self.delete_errors = Counter("strata_remote_delete_errors", "RemoteDeleteErrorsPerSec", t, registry=r)
        self.build_aux_state_requests = Counter(
            "strata_remote_build_aux_state_requests", "BuildRemoteLogAuxStateRequestsPerSec", t, registry=r
        )
        self.build_aux_state_errors = Counter(
            "strata_remote_build_aux_state_errors", "BuildRemoteLogAuxStateErrorsPerSec", t, registry=r
        )
        p = ["topic", "partition"]
        self.copy_lag_bytes = Gauge("strata_remote_copy_lag_bytes", "RemoteCopyLagBytes", p, registry=r)
        self.copy_lag_segments = Gauge("strata_remote_copy_lag_segments", "RemoteCopyLagSegments", p, registry=r)
        self.delete_lag_bytes = Gauge("strata_remote_delete_lag_bytes", "RemoteDeleteLagBytes", p, registry=r)
        self.delete_lag_segments = Gauge("strata_remote_delete_lag_segments", "RemoteDeleteLagSegments", p, registry=r)
        self.log_size_bytes = Gauge("strata_remote_log_size_bytes", "RemoteLogSizeBytes", p, registry=r)
        self.log_size_computation_ms = Gauge(
            "strata_remote_log_size_computation_time_ms", "RemoteLogSizeComputationTime", p, registry=r
        )
        self.metadata_count = Gauge("strata_remote_log_metadata_count", "RemoteLogMetadataCount", p, registry=r)
        self.reader_queue_size = Gauge(
            "strata_remote_log_reader_task_queue_size", "RemoteLogReaderTaskQueueSize", registry=r
        )
        self.reader_avg_idle = Gauge(
            "strata_remote_log_reader_avg_idle_percent", "RemoteLogReaderAvgIdlePercent", registry=r
        )
        self.reader_fetch_time = Histogram(
            "strata_remote_log_reader_fetch_time_seconds",
            "RemoteLogReaderFetchRateAndTimeMs",
            registry=r,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.tasks_avg_idle = Gauge(
            "strata_remote_log_manager_tasks_avg_idle_percent", "RemoteLogManagerTasksAvgIdlePercent", registry=r
        )
        # Idle until a read or a task runs (a fresh broker is 100 % idle, as Kafka's thread pools report it)
        self.reader_avg_idle.set(100.0)
        self.tasks_avg_idle.set(100.0)
        self.delayed_remote_fetch_expires = Counter(
            "strata_delayed_remote_fetch_expires", "DelayedRemoteFetchMetrics ExpiresPerSec", t, registry=r
        )
        self.copy_throttle_ms = Counter("strata_remote_copy_throttle_time_ms", "remote-copy-throttle-time", registry=r)
        self.fetch_throttle_ms = Counter(
            "strata_remote_fetch_throttle_time_ms", "remote-fetch-throttle-time", registry=r
        )
        k = ["kind"]  # bucket manifests (issue 24): partition, topic, cluster
        self.manifest_uploads = Counter("strata_remote_manifest_uploads", "Bucket manifests written", k, registry=r)
        self.manifest_upload_errors = Counter(
            "strata_remote_manifest_upload_errors", "Bucket manifest writes that failed (retried)", k, registry=r
        )
        self.manifest_upload_bytes = Counter(
            "strata_remote_manifest_upload_bytes", "Bytes of bucket manifests written", k, registry=r
        )
        self.manifest_writes_fenced = Counter(
            "strata_remote_manifest_writes_fenced",
            "Partition manifest writes dropped because this broker no longer leads at the epoch",
            registry=r,
        )

    def register_storage_stats(self, rsm: Callable[[], Any], index_cache: Callable[[], Any]) -> None:
        """Export the RSM's and the caches' statistics (read at scrape time) on this registry."""
        self.registry.register(RemoteStorageStatsCollector(rsm, index_cache))


# (field of S3Stats, metric name, help) -- all counters
_S3_COUNTERS = (
    ("requests", "strata_rsm_s3_requests", "S3 request attempts (every retry is an attempt)"),
    ("retries", "strata_rsm_s3_retries", "S3 attempts that failed retriably and were retried"),
    ("errors", "strata_rsm_s3_errors", "S3 operations that failed for good (retries exhausted or not retriable)"),
    ("timeouts", "strata_rsm_s3_timeouts", "S3 attempts or operations that hit their timeout"),
    ("bytes_uploaded", "strata_rsm_s3_upload_bytes", "Bytes uploaded to S3 (PUT bodies and multipart parts)"),
    ("bytes_downloaded", "strata_rsm_s3_download_bytes", "Bytes downloaded from S3 (GET bodies)"),
    ("multipart_aborts", "strata_rsm_s3_multipart_aborts", "Multipart uploads aborted after a failure"),
)
# (field of ChunkCacheStats, metric name, tier label or None, help)
_CHUNK_COUNTERS = (
    ("memory_hits", "strata_remote_chunk_cache_hits", "memory", "Chunk requests served from the cache"),
    ("disk_hits", "strata_remote_chunk_cache_hits", "disk", "Chunk requests served from the cache"),
    ("misses", "strata_remote_chunk_cache_misses", None, "Chunks loaded from remote storage (prefetches included)"),
    (
        "shared_waits",
        "strata_remote_chunk_cache_shared_waits",
        None,
        "Chunk requests that joined a load already in flight",
    ),
    ("load_errors", "strata_remote_chunk_cache_load_errors", None, "Chunk loads that failed"),
    ("prefetches", "strata_remote_chunk_cache_prefetches", None, "Read-ahead chunk loads started"),
    ("memory_evictions", "strata_remote_chunk_cache_evictions", "memory", "Chunks evicted from a tier"),
    ("disk_evictions", "strata_remote_chunk_cache_evictions", "disk", "Chunks evicted from a tier"),
    ("disk_write_errors", "strata_remote_chunk_cache_disk_write_errors", None, "Chunk files that could not be written"),
)
_INDEX_COUNTERS = (
    ("hits", "strata_remote_index_cache_hits", "RemoteIndexCache lookups served from the cache"),
    ("misses", "strata_remote_index_cache_misses", "RemoteIndexCache lookups that fetched the segment's indexes"),
    ("load_errors", "strata_remote_index_cache_load_errors", "Index fetches from remote storage that failed"),
    ("evictions", "strata_remote_index_cache_evictions", "Entries evicted (size bound)"),
)


class RemoteStorageStatsCollector:
    """Reads `rsm().stats` (S3 RSM only), `rsm().chunk_cache.stats` (when the RSM has a chunk cache) and
    `index_cache().stats` when scraped; families whose source is absent are not exported. The scrape runs on the
    metrics HTTP thread: it only reads integer fields (a scrape may see a counter one update behind)."""

    def __init__(self, rsm: Callable[[], Any], index_cache: Callable[[], Any]) -> None:
        self._rsm = rsm
        self._index_cache = index_cache

    def describe(self) -> list[Metric]:
        return []  # no fixed family set (it depends on the RSM): registry checks names at collect time

    def collect(self) -> Iterator[Metric]:
        rsm = self._rsm()
        s3 = getattr(rsm, "stats", None)
        if s3 is not None and hasattr(s3, "bytes_uploaded"):
            for attr, name, doc in _S3_COUNTERS:
                yield CounterMetricFamily(name, doc, value=getattr(s3, attr))
        cache = getattr(rsm, "chunk_cache", None)
        if cache is not None:
            yield from _counters(cache.stats, _CHUNK_COUNTERS)
            size = GaugeMetricFamily(
                "strata_remote_chunk_cache_size_bytes", "Bytes held by a chunk cache tier", labels=["tier"]
            )
            size.add_metric(["memory"], cache.memory_bytes)
            size.add_metric(["disk"], cache.disk_bytes)
            yield size
        idx = self._index_cache()
        if idx is not None:
            for attr, name, doc in _INDEX_COUNTERS:
                yield CounterMetricFamily(name, doc, value=getattr(idx.stats, attr))
            yield GaugeMetricFamily(
                "strata_remote_index_cache_size_bytes", "Bytes of index files in the cache", value=idx.size_bytes
            )
            yield GaugeMetricFamily(
                "strata_remote_index_cache_entries", "Segments whose indexes are cached", value=len(idx)
            )


def _counters(stats: Any, spec: tuple[tuple[str, str, str | None, str], ...]) -> Iterator[Metric]:
    families: dict[str, CounterMetricFamily] = {}
    for attr, name, tier, doc in spec:
        fam = families.get(name)
        if fam is None:
            fam = families[name] = CounterMetricFamily(name, doc, labels=["tier"] if tier else None)
        fam.add_metric([tier] if tier else [], getattr(stats, attr))
    yield from families.values()
