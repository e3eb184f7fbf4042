"""Streaming per-key aggregation into a Parquet table.

    strata pipeline aggregate --topic events --to /data/per_key.parquet --checkpoint /data/ck/per_key [--once]

For every key (null keys are grouped as null): number of records, total value bytes, first and last record
timestamp. The running totals live in Spark's state store (in the checkpoint); after each micro-batch the whole
table is rewritten to ``--to`` (complete output mode through ``foreachBatch``), so the Parquet always holds the
current totals. ``--once`` processes what is in the topic now (``trigger(availableNow=True)``) and stops;
otherwise the query runs every ``--interval`` until interrupted. Restarting with the same checkpoint resumes
exactly where the last run stopped.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from strata.pipeline.jobs.common import job_options, position_options, source_options


def per_key_totals(events: Any) -> Any:
    from pyspark.sql import functions as F

    return events.groupBy("topic", "key").agg(
        F.count(F.lit(1)).alias("records"),
        F.sum(F.coalesce(F.length("value"), F.lit(0))).alias("value_bytes"),
        F.min("timestamp").alias("first_timestamp"),
        F.max("timestamp").alias("last_timestamp"),
    )


def aggregate(
    spark: Any,
    bootstrap: str,
    topic: str,
    to: str,
    checkpoint: str,
    *,
    once: bool = True,
    interval: str = "10 seconds",
    start: str = "earliest",
    read_mode: str = "broker",
    max_offsets_per_trigger: int | None = None,
    rsm_class: str | None = None,
    rsm_config: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
) -> Any:
    """Start the query; with ``once`` wait for it to finish. Returns the StreamingQuery."""
    more = dict(position_options(start))
    if max_offsets_per_trigger:
        more["maxOffsetsPerTrigger"] = str(max_offsets_per_trigger)
    opts = source_options(
        bootstrap,
        topic,
        read_mode=read_mode,
        rsm_class=rsm_class,
        rsm_config=rsm_config,
        extra={**more, **(extra or {})},
    )
    events = spark.readStream.format("strata").options(**opts).load()

    def write_table(batch: Any, _batch_id: int) -> None:
        batch.write.mode("overwrite").parquet(to)

    w = (
        per_key_totals(events)
        .writeStream.outputMode("complete")
        .foreachBatch(write_table)
        .option("checkpointLocation", checkpoint)
        .queryName(f"aggregate-{topic}")
    )
    w = w.trigger(availableNow=True) if once else w.trigger(processingTime=interval)
    query = w.start()
    if once:
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(f"aggregate query failed: {query.exception()}")
    return query


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", required=True)
    p.add_argument("--to", required=True, metavar="PATH", help="Parquet table of per-key totals (rewritten)")
    p.add_argument("--checkpoint", required=True, metavar="DIR", help="Spark checkpoint (offsets + state)")
    p.add_argument("--from", dest="start", default="earliest", help="where a new query starts (default earliest)")
    p.add_argument("--once", action="store_true", help="process what is there now, then stop (availableNow)")
    p.add_argument("--interval", default="10 seconds", help="trigger interval when running continuously")
    p.add_argument("--max-offsets-per-trigger", type=int, default=None)


def run(spark: Any, args: argparse.Namespace) -> int:
    query = aggregate(
        spark,
        args.bootstrap_server,
        args.topic,
        args.to,
        args.checkpoint,
        once=args.once,
        interval=args.interval,
        start=args.start,
        read_mode=args.read_mode,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        rsm_class=args.rsm_class,
        rsm_config=dict(args.rsm_config or []),
        extra=job_options(args),
    )
    if not args.once:
        try:
            query.awaitTermination()
        except KeyboardInterrupt:
            query.stop()
    print(f"per-key totals of {args.topic} in {args.to}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from strata.pipeline.cli import run_standalone

    return run_standalone("aggregate", argv)


if __name__ == "__main__":
    sys.exit(main())
