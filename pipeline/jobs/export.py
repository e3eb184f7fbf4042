"""Export a topic's history -- remote (tiered) and local -- to Parquet.

    python -m strata.pipeline.jobs.export --bootstrap-server 127.0.0.1:9092 --topic events --to /data/events.parquet
    strata pipeline export --topic events --to /data/events.parquet --from earliest [--read-mode direct ...]

The output is a Parquet dataset (a directory, as Spark writes it) with Spark's Kafka columns (key, value, topic,
partition, offset, timestamp, timestampType, headers), partitioned by nothing unless ``--partition-by`` says so.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from strata.pipeline.jobs.common import job_options, position_options, source_options


def export(
    spark: Any,
    bootstrap: str,
    topic: str,
    to: str,
    *,
    start: str = "earliest",
    end: str = "latest",
    read_mode: str = "broker",
    rsm_class: str | None = None,
    rsm_config: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
    mode: str = "overwrite",
    partition_by: list[str] | None = None,
    compression: str = "zstd",
) -> int:
    """Write the topic's records in [start, end) to Parquet at ``to``; returns the number of records written."""
    opts = source_options(
        bootstrap,
        topic,
        read_mode=read_mode,
        rsm_class=rsm_class,
        rsm_config=rsm_config,
        extra={**position_options(start, end), **(extra or {})},
    )
    df = spark.read.format("strata").options(**opts).load()
    before = _records_at(spark, to) if mode in ("append", "ignore") else 0  # what the dataset already held
    writer = df.write.mode(mode).option("compression", compression)
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.parquet(to)
    return _records_at(spark, to) - before


def _records_at(spark: Any, path: str) -> int:
    """Rows of the Parquet dataset at ``path``; 0 when there is none yet."""
    from pyspark.errors import AnalysisException

    try:
        return spark.read.parquet(path).count()
    except AnalysisException:  # PATH_NOT_FOUND: nothing written there before
        return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", required=True)
    p.add_argument("--to", required=True, metavar="PATH", help="output Parquet dataset (a directory)")
    p.add_argument(
        "--from",
        dest="start",
        default="earliest",
        help="earliest (default), latest, epoch millis, ISO-8601 time or a JSON offset map",
    )
    p.add_argument("--until", dest="end", default="latest", help="latest (default), epoch millis, ISO time or JSON")
    p.add_argument("--mode", default="overwrite", choices=("overwrite", "append", "error", "ignore"))
    p.add_argument("--partition-by", action="append", metavar="COLUMN", help="e.g. partition (repeatable)")
    p.add_argument("--compression", default="zstd")


def run(spark: Any, args: argparse.Namespace) -> int:
    n = export(
        spark,
        args.bootstrap_server,
        args.topic,
        args.to,
        start=args.start,
        end=args.end,
        read_mode=args.read_mode,
        rsm_class=args.rsm_class,
        rsm_config=dict(args.rsm_config or []),
        extra=job_options(args),
        mode=args.mode,
        partition_by=args.partition_by,
        compression=args.compression,
    )
    print(f"exported {n} records of {args.topic} to {args.to}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from strata.pipeline.cli import run_standalone

    return run_standalone("export", argv)


if __name__ == "__main__":
    sys.exit(main())
