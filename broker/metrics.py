"""Prometheus metrics named after Kafka's MBeans (mapping in docs/metrics.md), served off the event loop.

prometheus-client's HTTP server runs in its own daemon thread, so a scrape never waits on the broker's event loop;
gauges that describe logs are computed at scrape time from plain attribute reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .loop_metrics import LoopCounter, LoopHistogram

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class BrokerMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        # kafka.server:type=BrokerTopicMetrics
        # changed on the event loop only, per produced partition or per request: loop_metrics (no lock per inc)
        self.bytes_in = LoopCounter("strata_broker_topic_bytes_in", "Bytes appended by producers", ["topic"], r)
        self.bytes_out = Counter("strata_broker_topic_bytes_out", "Bytes sent to consumers", ["topic"], registry=r)
        self.messages_in = LoopCounter("strata_broker_topic_messages_in", "Records appended", ["topic"], r)
        self.bytes_rejected = Counter(
            "strata_broker_topic_bytes_rejected", "Bytes refused on produce", ["topic"], registry=r
        )
        self.produce_requests = LoopCounter(
            "strata_broker_topic_produce_requests", "Produce requests per topic", ["topic"], r
        )
        self.fetch_requests = Counter(
            "strata_broker_topic_fetch_requests", "Fetch requests per topic", ["topic"], registry=r
        )
        self.failed_produce = Counter(
            "strata_broker_topic_failed_produce_requests",
            "Produce partitions answered with an error",
            ["topic"],
            registry=r,
        )
        self.failed_fetch = Counter(
            "strata_broker_topic_failed_fetch_requests",
            "Fetch partitions answered with an error",
            ["topic"],
            registry=r,
        )
        # kafka.network:type=RequestMetrics
        self.requests = LoopCounter("strata_network_requests", "Requests handled", ["api"], r)
        self.request_errors = Counter(
            "strata_network_request_errors", "Requests that failed or were refused", ["api"], registry=r
        )
        self._request_meters: dict[str, tuple[Any, Any]] = {}
        self.request_latency = LoopHistogram(
            "strata_network_request_total_time_seconds",
            "Time from a request's arrival to its response",
            ["api"],
            _LATENCY_BUCKETS,
            r,
        )
        # kafka.server:type=ForwardingManager: admin requests this broker handed to the controller
        self.forwarded_requests = Counter(
            "strata_forwarding_requests", "Requests forwarded to the controller", ["api"], registry=r
        )
        # Strata only (Kafka fences a broker at its session timeout): peers found gone by connection evidence
        self.peers_gone = Counter(
            "strata_cluster_peer_brokers_gone",
            "Brokers whose lease this broker revoked because their connection closed and their listener refused",
            registry=r,
        )
        self.peers_watched = Gauge(
            "strata_cluster_peer_brokers_watched", "Brokers this broker holds a liveness connection to", registry=r
        )
        # kafka.server:type=socket-server-metrics
        self.connections = Gauge("strata_network_connections", "Open client connections", registry=r)
        self.connections_created = Counter("strata_network_connections_created", "Connections accepted", registry=r)
        # Strata's own: record bytes of Fetch responses sent from the segment files with sendfile (zero-copy)
        self.sendfile_bytes = Counter(
            "strata_network_sendfile_bytes", "Fetch record bytes sent from segment files with sendfile", registry=r
        )
        # kafka.network:type=Acceptor,name=AcceptorBlockedPercent,listener=*: time the acceptor waited at
        # max.connections (a counter of seconds: its rate is the blocked fraction)
        self.acceptor_blocked = Counter(
            "strata_network_acceptor_blocked_seconds",
            "Time the acceptor stopped accepting because max.connections was reached",
            ["listener"],
            registry=r,
        )
        # kafka.server:type=socket-server-metrics,listener=*: successful-authentication-total and friends. Labels are
        # the listener and the SASL mechanism (SSL for a TLS handshake or client certificate): never a user name.
        auth_labels = ["listener", "mechanism"]
        self.auth_success = Counter(
            "strata_network_successful_authentication", "Successful authentications", auth_labels, registry=r
        )
        self.auth_failure = Counter(
            "strata_network_failed_authentication", "Failed authentications", auth_labels, registry=r
        )
        self.reauth_success = Counter(
            "strata_network_successful_reauthentication",
            "Successful re-authentications (KIP-368)",
            auth_labels,
            registry=r,
        )
        self.reauth_failure = Counter(
            "strata_network_failed_reauthentication", "Failed re-authentications (KIP-368)", auth_labels, registry=r
        )
        # kafka.server:type=authorizer-metrics,name=authorization-denied-rate-per-minute, by listener, operation and
        # resource type (no principal or resource name: the label set stays small)
        self.authorizer_denied = Counter(
            "strata_authorizer_denials",
            "Authorization decisions that denied an operation",
            ["listener", "operation", "resource_type"],
            registry=r,
        )
        # kafka.server:type=authorizer-metrics,name=acls-total-count (set when an authorizer is configured)
        self.authorizer_acls = Gauge("strata_authorizer_acls", "ACL bindings the authorizer holds", registry=r)
        # kafka.server:type=DelayedOperationPurgatory
        self.purgatory_size = Gauge(
            "strata_purgatory_size", "Operations waiting in a purgatory", ["purgatory"], registry=r
        )
        # kafka.server:type=ReplicaManager,name=IsrShrinksPerSec / IsrExpandsPerSec
        self.isr_shrinks = Counter(
            "strata_replica_manager_isr_shrinks", "ISR shrinks committed by this leader", registry=r
        )
        self.isr_expands = Counter(
            "strata_replica_manager_isr_expands", "ISR expansions committed by this leader", registry=r
        )
        # kafka.log:type=LogFlushStats
        self.log_flush = Histogram(
            "strata_log_flush_time_seconds", "fsync of a log", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.txn = TxnMetrics(r)
        self._server: WSGIServer | None = None

    def authentication(self, listener: str, mechanism: str, ok: bool, reauth: bool = False) -> None:
        """Count one authentication outcome (Kafka's successful-/failed-(re)authentication-total)."""
        if reauth:
            (self.reauth_success if ok else self.reauth_failure).labels(listener, mechanism).inc()
        else:
            (self.auth_success if ok else self.auth_failure).labels(listener, mechanism).inc()

    def authorizer_denials(self, listener: str, operation: str, resource_type: str, n: int = 1) -> None:
        """Count `n` denied authorization decisions (operation and resource type by their Kafka names)."""
        self.authorizer_denied.labels(listener, operation, resource_type).inc(n)

    def request_completed(self, name: str, elapsed_s: float, request: Any = None) -> None:
        """Count an answered request and its latency under its API name; a Fetch also under FetchConsumer or
        FetchFollower, as Kafka's RequestMetrics reports it (replica fetches are long polls: mixed with consumer
        fetches they would hide both latencies)."""
        names = (name, fetch_request_name(request)) if name == "Fetch" and request is not None else (name,)
        for n in names:
            meters = self._request_meters.get(n)
            if meters is None:  # a label lookup costs more than the count: once per API
                meters = self._request_meters[n] = (self.requests.labels(n), self.request_latency.labels(n))
            meters[0].inc()
            meters[1].observe(elapsed_s)

    def register_log_collector(self, logs: Callable[[], Iterable]) -> None:
        self.registry.register(_LogCollector(logs))

    def register_replica_manager(self, rm) -> None:
        """kafka.server:type=ReplicaManager gauges and the ReplicaFetcherManager's MaxLag, read at scrape time."""
        r = self.registry
        for name, doc, fn in (
            (
                "strata_replica_manager_under_replicated_partitions",
                "Partitions led here whose ISR is smaller than their replica set",
                lambda: rm.under_replicated_count,
            ),
            ("strata_replica_manager_leader_count", "Partitions led by this broker", lambda: rm.leader_count),
            ("strata_replica_manager_partition_count", "Partitions hosted by this broker", lambda: rm.partition_count),
            (
                "strata_replica_fetcher_max_lag",
                "Largest follower lag (leader HW - own LEO) in records",
                lambda: rm.fetcher_manager.max_lag,
            ),
        ):
            Gauge(name, doc, registry=r).set_function(_safe(fn))
        r.register(_PartitionCollector(lambda: rm.partitions.values()))

    def register_controller(self, active: Callable[[], bool], offline_partitions: Callable[[], int]) -> None:
        """kafka.controller:type=KafkaController ActiveControllerCount (1 on the active controller, 0 on the other
        brokers: the cluster's sum must be 1) and OfflinePartitionsCount (partitions without a live leader; only
        the active controller reports them, as in Kafka), read at scrape time."""
        r = self.registry
        Gauge(
            "strata_controller_active_controller_count", "1 on the active controller, 0 elsewhere", registry=r
        ).set_function(_safe(lambda: 1 if active() else 0))
        Gauge(
            "strata_controller_offline_partitions_count",
            "Partitions without a live leader (reported by the active controller)",
            registry=r,
        ).set_function(_safe(lambda: offline_partitions() if active() else 0))

    def register_txn_coordinator(self, coordinator) -> None:
        """kafka.coordinator.transaction gauges (transactions by state, partitions loaded and loading, transactions
        whose markers are being written), read from the transaction coordinator at scrape time."""
        self.registry.register(_TxnCoordinatorCollector(coordinator))

    def register_group_coordinator(self, coordinator) -> None:
        """kafka.server:type=group-coordinator-metrics: groups by protocol and state, rebalances by protocol, read
        from the group coordinator at scrape time."""
        self.registry.register(_GroupCoordinatorCollector(coordinator))

    def register_open_file_cache(self, cache) -> None:
        """The open-file cache of segment files (`log.open.files.cache.size`, Strata only), read at scrape time."""
        self.registry.register(_OpenFilesCollector(cache))

    def register_log_cleaner(self, cleaner) -> None:
        """kafka.log:type=LogCleanerManager / LogCleaner gauges, read from the cleaner at scrape time."""
        r = self.registry
        for name, doc, attr in (
            (
                "strata_log_cleaner_max_dirty_percent",
                "Dirty ratio of the dirtiest compacted log, in percent",
                "max_dirty_percent",
            ),
            (
                "strata_log_cleaner_time_since_last_run_ms",
                "Time since the cleaner last chose a log",
                "time_since_last_run_ms",
            ),
            (
                "strata_log_cleaner_recopy_percent",
                "Bytes written over bytes read by the last cleanings",
                "recopy_percent",
            ),
            ("strata_log_cleaner_max_clean_time_secs", "Duration of the longest last cleaning", "max_clean_time_secs"),
            (
                "strata_log_cleaner_max_buffer_utilization_percent",
                "Fill of the dedupe map in the last cleanings",
                "max_buffer_utilization_percent",
            ),
            (
                "strata_log_cleaner_max_compaction_delay_secs",
                "How far past max.compaction.lag.ms a log is",
                "max_compaction_delay_secs",
            ),
            (
                "strata_log_cleaner_uncleanable_partitions_count",
                "Partitions the cleaner gave up on",
                "uncleanable_partitions_count",
            ),
        ):
            Gauge(name, doc, registry=r).set_function(partial(getattr, cleaner, attr))

    def start_http(self, url: str) -> tuple[str, int] | None:
        """Serve /metrics on the address of `metrics.listener` (empty disables it)."""
        if not url:
            return None
        u = urlparse(url if "://" in url else f"http://{url}")
        host, port = u.hostname or "127.0.0.1", 9464 if u.port is None else u.port
        self._server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return host, self._server.server_address[1]

    def stop_http(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class TxnMetrics:
    """What the transaction coordinator counts as it goes: transactions completed (commit / abort), the ones it
    aborted past their timeout, and the marker latency (Kafka's TransactionMarkerChannelManager: from
    PrepareCommit/PrepareAbort written to the last partition's marker written), with the retries on the way."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.completed = Counter(
            "strata_txn_coordinator_transactions_completed",
            "Transactions completed (CompleteCommit / CompleteAbort written) by this coordinator",
            ["result"],
            registry=r,
        )
        self.timed_out = Counter(
            "strata_txn_coordinator_timed_out_transactions",
            "Ongoing transactions this coordinator aborted past transaction.timeout.ms",
            registry=r,
        )
        self.marker_latency = Histogram(
            "strata_txn_coordinator_marker_latency_seconds",
            "From PrepareCommit/PrepareAbort written to every partition's marker written",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.marker_retries = Counter(
            "strata_txn_coordinator_marker_retries",
            "Marker writes retried (a leader not reachable or not ready)",
            registry=r,
        )

    def transaction_completed(self, commit: bool, marker_s: float) -> None:
        self.completed.labels("commit" if commit else "abort").inc()
        self.marker_latency.observe(marker_s)


def fetch_request_name(request: Any) -> str:
    """FetchFollower for a Fetch sent by a replica (replica id >= 0: in ReplicaState from v15, a field before),
    FetchConsumer otherwise (consumers send -1)."""
    state = getattr(request, "replica_state", None)
    replica_id = getattr(state, "replica_id", None) if state is not None else getattr(request, "replica_id", -1)
    return "FetchFollower" if isinstance(replica_id, int) and replica_id >= 0 else "FetchConsumer"


def _safe(fn: Callable[[], float]) -> Callable[[], float]:
    """A gauge callback read from the metrics thread while the event loop mutates what it reads."""

    def read() -> float:
        for _ in range(3):
            try:
                return fn()
            except RuntimeError:  # a dict changed size during iteration: read again
                continue
        return 0

    return read


class _PartitionCollector:
    """kafka.cluster:type=Partition InSyncReplicasCount / ReplicasCount / UnderMinIsr per partition led here (the
    leader reports them, as in Kafka), and ReplicaManager UnderMinIsrPartitionCount, read at scrape time."""

    def __init__(self, partitions: Callable[[], Iterable]) -> None:
        self._partitions = partitions

    def collect(self):
        labels = ["topic", "partition"]
        isr = GaugeMetricFamily(
            "strata_partition_in_sync_replicas_count", "ISR size of a partition led here", labels=labels
        )
        reps = GaugeMetricFamily("strata_partition_replicas_count", "Replicas of a partition led here", labels=labels)
        under = GaugeMetricFamily(
            "strata_partition_under_min_isr", "1 when the ISR is below min.insync.replicas", labels=labels
        )
        n_under = 0
        for p in list(self._partitions()):  # (the scrape runs off the loop: a copy, plain attribute reads)
            if not p.is_leader:
                continue
            key = [p.key[0], str(p.key[1])]
            below = len(p.isr) < p.effective_min_isr()
            isr.add_metric(key, len(p.isr))
            reps.add_metric(key, len(p.replicas))
            under.add_metric(key, 1 if below else 0)
            n_under += below
        total = GaugeMetricFamily(
            "strata_replica_manager_under_min_isr_partitions",
            "Partitions led here whose ISR is below min.insync.replicas",
        )
        total.add_metric([], n_under)
        yield from (isr, reps, under, total)


class _TxnCoordinatorCollector:
    """Transactions this broker coordinates by state, its `__transaction_state` partitions loaded and loading, and
    the transactions whose markers are being written (Kafka's marker queue), read at scrape time."""

    STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead")

    def __init__(self, coordinator: Any) -> None:
        self._coordinator = coordinator

    def collect(self):
        c = self._coordinator
        by_state = GaugeMetricFamily(
            "strata_txn_coordinator_transactions",
            "Transactional ids this broker coordinates, by state",
            labels=["state"],
        )
        counts = dict.fromkeys(self.STATES, 0)
        for md in list(c.txns.values()):  # (off the loop: a copy, plain attribute reads)
            name = md.state.wire_name
            counts[name] = counts.get(name, 0) + 1
        for state, n in counts.items():
            by_state.add_metric([state], n)
        parts = GaugeMetricFamily(
            "strata_txn_coordinator_partitions",
            "__transaction_state partitions this broker leads, loaded or loading",
            labels=["state"],
        )
        loading = len(set(c.runtime.loading))
        parts.add_metric(["loaded"], max(len(set(c.runtime.owned)) - loading, 0))
        parts.add_metric(["loading"], loading)
        pending = GaugeMetricFamily(
            "strata_txn_coordinator_markers_pending", "Transactions whose markers are being written"
        )
        pending.add_metric([], c.markers_pending)
        yield from (by_state, parts, pending)


class _GroupCoordinatorCollector:
    """Groups this broker coordinates by type (classic, consumer) and state, and the rebalances each protocol
    started (a classic PreparingRebalance, a consumer group epoch bump)."""

    def __init__(self, coordinator: Any) -> None:
        self._coordinator = coordinator

    def collect(self):
        c = self._coordinator
        groups = GaugeMetricFamily(
            "strata_group_coordinator_groups",
            "Groups this broker coordinates, by type and state",
            labels=["type", "state"],
        )
        counts: dict[tuple[str, str], int] = {}
        for kind, gs in (("classic", list(c.groups.values())), ("consumer", list(c.consumer_groups.values()))):
            for g in gs:  # (off the loop: copies, plain attribute reads)
                key = (kind, g.state.value)
                counts[key] = counts.get(key, 0) + 1
        for (kind, state), n in sorted(counts.items()):
            groups.add_metric([kind, state], n)
        rebalances = CounterMetricFamily(
            "strata_group_coordinator_rebalances", "Rebalances started, by group protocol", labels=["protocol"]
        )
        rebalances.add_metric(["classic"], c.classic_rebalances)
        rebalances.add_metric(["consumer"], c.consumer.rebalances)
        yield from (groups, rebalances)


class _OpenFilesCollector:
    def __init__(self, cache: Any) -> None:
        self._cache = cache

    def collect(self):
        c = self._cache
        yield GaugeMetricFamily("strata_log_open_files", "Segment files open now", value=c.open_files)
        yield GaugeMetricFamily(
            "strata_log_open_files_capacity", "Segment files kept open at most (effective cache size)", value=c.capacity
        )
        yield CounterMetricFamily(
            "strata_log_open_files_opens", "Segment files opened (first opens and reopens after eviction)", c.opens
        )
        yield CounterMetricFamily(
            "strata_log_open_files_evictions", "Idle segment files closed to stay within the cache size", c.evictions
        )


class _LogCollector:
    """kafka.log:type=Log gauges (Size, LogStartOffset, LogEndOffset, NumLogSegments), read at scrape time."""

    def __init__(self, logs: Callable[[], Iterable]) -> None:
        self._logs = logs

    def collect(self):
        size = GaugeMetricFamily(
            "strata_log_size_bytes", "Bytes of a partition's local log", labels=["topic", "partition"]
        )
        start = GaugeMetricFamily("strata_log_start_offset", "Log start offset", labels=["topic", "partition"])
        end = GaugeMetricFamily("strata_log_end_offset", "Log end offset (LEO)", labels=["topic", "partition"])
        hw = GaugeMetricFamily("strata_log_high_watermark", "High watermark", labels=["topic", "partition"])
        segs = GaugeMetricFamily("strata_log_num_segments", "Segments of a local log", labels=["topic", "partition"])
        lso = GaugeMetricFamily(
            "strata_log_last_stable_offset", "Last stable offset (LSO)", labels=["topic", "partition"]
        )
        lso_lag = GaugeMetricFamily(
            "strata_log_lso_lag",
            "HW - LSO: offsets READ_COMMITTED consumers wait for (open transactions)",
            labels=["topic", "partition"],
        )
        for log in list(self._logs()):
            labels = [log.topic, str(log.partition)]
            try:
                values = (log.size_in_bytes, log.log_start_offset, log.log_end_offset, log.high_watermark)
                stable = log.last_stable_offset
                size.add_metric(labels, values[0])
                start.add_metric(labels, values[1])
                end.add_metric(labels, values[2])
                hw.add_metric(labels, values[3])
                segs.add_metric(labels, log.num_segments)
                lso.add_metric(labels, stable)
                lso_lag.add_metric(labels, max(values[3] - stable, 0))
            except Exception:  # noqa: BLE001, S112 - a log being deleted while scraped: skip it, keep the scrape
                continue
        yield from (size, start, end, hw, segs, lso, lso_lag)
