"""The KIP-405/963/956/1018 remote storage metrics, registered on the broker's Prometheus registry.

Kept in `remote` (not `broker`) so the RemoteLogManager updates them directly; names map to Kafka's MBeans in
docs/metrics.md.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class RemoteMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry or CollectorRegistry()
        t = ["topic"]
        self.copy_bytes = Counter("strata_remote_copy_bytes", "RemoteCopyBytesPerSec", t, registry=r)
        self.copy_requests = Counter("strata_remote_copy_requests", "RemoteCopyRequestsPerSec", t, registry=r)
        self.copy_errors = Counter("strata_remote_copy_errors", "RemoteCopyErrorsPerSec", t, registry=r)
        self.fetch_bytes = Counter("strata_remote_fetch_bytes", "RemoteFetchBytesPerSec", t, registry=r)
        self.fetch_requests = Counter("strata_remote_fetch_requests", "RemoteFetchRequestsPerSec", t, registry=r)
        self.fetch_errors = Counter("strata_remote_fetch_errors", "RemoteFetchErrorsPerSec", t, registry=r)
        self.delete_requests = Counter("strata_remote_delete_requests", "RemoteDeleteRequestsPerSec", t,
                                       registry=r)
        self.delete_errors = Counter("strata_remote_delete_errors", "RemoteDeleteErrorsPerSec", t, registry=r)
        self.build_aux_state_requests = Counter("strata_remote_build_aux_state_requests",
                                                "BuildRemoteLogAuxStateRequestsPerSec", t, registry=r)
        self.build_aux_state_errors = Counter("strata_remote_build_aux_state_errors",
                                              "BuildRemoteLogAuxStateErrorsPerSec", t, registry=r)
        p = ["topic", "partition"]
        self.copy_lag_bytes = Gauge("strata_remote_copy_lag_bytes", "RemoteCopyLagBytes", p, registry=r)
        self.copy_lag_segments = Gauge("strata_remote_copy_lag_segments", "RemoteCopyLagSegments", p, registry=r)
        self.delete_lag_bytes = Gauge("strata_remote_delete_lag_bytes", "RemoteDeleteLagBytes", p, registry=r)
        self.delete_lag_segments = Gauge("strata_remote_delete_lag_segments", "RemoteDeleteLagSegments", p,
                                         registry=r)
        self.log_size_bytes = Gauge("strata_remote_log_size_bytes", "RemoteLogSizeBytes", p, registry=r)
        self.log_size_computation_ms = Gauge("strata_remote_log_size_computation_time_ms",
                                             "RemoteLogSizeComputationTime", p, registry=r)
        self.metadata_count = Gauge("strata_remote_log_metadata_count", "RemoteLogMetadataCount", p, registry=r)
        self.reader_queue_size = Gauge("strata_remote_log_reader_task_queue_size", "RemoteLogReaderTaskQueueSize",
                                       registry=r)
        self.reader_avg_idle = Gauge("strata_remote_log_reader_avg_idle_percent", "RemoteLogReaderAvgIdlePercent",
                                     registry=r)
        self.reader_fetch_time = Histogram("strata_remote_log_reader_fetch_time_seconds",
                                           "RemoteLogReaderFetchRateAndTimeMs", registry=r,
                                           buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        self.tasks_avg_idle = Gauge("strata_remote_log_manager_tasks_avg_idle_percent",
                                    "RemoteLogManagerTasksAvgIdlePercent", registry=r)
        self.delayed_remote_fetch_expires = Counter("strata_delayed_remote_fetch_expires",
                                                    "DelayedRemoteFetchMetrics ExpiresPerSec", t, registry=r)
        self.copy_throttle_ms = Counter("strata_remote_copy_throttle_time_ms", "remote-copy-throttle-time",
                                        registry=r)
        self.fetch_throttle_ms = Counter("strata_remote_fetch_throttle_time_ms", "remote-fetch-throttle-time",
                                         registry=r)
