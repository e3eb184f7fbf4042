"""Iceberg translation metrics on the broker's Prometheus registry (docs/metrics.md, "Iceberg topics")."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class IcebergMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        t, p = ["topic"], ["topic", "partition"]
        self.lag_records = Gauge(
            "strata_iceberg_translation_lag_records", "offsets below the LSO not in the table yet", p, registry=r
        )
        self.lag_seconds = Gauge(
            "strata_iceberg_translation_lag_seconds", "how long the table has been behind the LSO", p, registry=r
        )
        self.next_offset = Gauge(
            "strata_iceberg_translated_next_offset", "next offset to translate (the table's)", p, registry=r
        )
        self.hold_bytes = Gauge(
            "strata_iceberg_retention_hold_bytes",
            "bytes local retention keeps because they are neither tiered nor translated",
            p,
            registry=r,
        )
        self.records = Counter("strata_iceberg_records_written", "records written to the table", t, registry=r)
        self.bytes = Counter("strata_iceberg_bytes_written", "Parquet bytes written (committed)", t, registry=r)
        self.files = Counter("strata_iceberg_files_written", "Parquet data files committed", t, registry=r)
        self.commits = Counter("strata_iceberg_commits", "append commits", t, registry=r)
        self.commit_retries = Counter(
            "strata_iceberg_commit_retries", "commits redone after a concurrent commit", t, registry=r
        )
        self.commit_failures = Counter(
            "strata_iceberg_commit_failures", "translation rounds failed (catalog, storage)", t, registry=r
        )
        self.invalid_records = Counter(
            "strata_iceberg_invalid_records",
            "records that did not convert, by action (drop, dlq_table)",
            ["topic", "action"],
            registry=r,
        )
        self.skipped_records = Counter(
            "strata_iceberg_skipped_offsets",
            "offsets deleted before translation (retention past the hold cap, DeleteRecords)",
            t,
            registry=r,
        )

    def forget(self, topic: str, partition: int) -> None:
        """A partition's gauges, once this broker no longer translates it."""
        labels = (topic, str(partition))
        for g in (self.lag_records, self.lag_seconds, self.next_offset):
            try:
                g.remove(*labels)
            except KeyError:
                pass


__all__ = ["IcebergMetrics"]
