"""Streaming topic-to-topic transform through the ``strata`` sink.

    strata pipeline transform --topic raw --to-topic clean --checkpoint /data/ck/clean \\
        --value "upper(CAST(value AS STRING))" --where "value IS NOT NULL" [--once]

Each record of ``--topic`` becomes one record of ``--to-topic``: key and headers are kept, the value is the SQL
expression ``--value`` (default: the value unchanged), records failing ``--where`` are dropped, and
``--keep-partition`` writes to the same partition number. The sink produces with acks=all and idempotence; offsets
are Spark-managed in the checkpoint, so a restart resumes after the last committed micro-batch (at-least-once
into the output topic, like Spark's Kafka sink). ``--exactly-once`` reads the input READ_COMMITTED and writes each
task's records in a transaction (the sink's ``exactlyOnce``): each input record's result is in the output exactly
once for READ_COMMITTED readers, a replayed micro-batch included (docs/spark.md, "Transactions").
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from strata.pipeline.jobs.common import job_options, position_options, security_options, source_options


def transform_frame(
    events: Any, value_expr: str = "value", where: str | None = None, keep_partition: bool = False
) -> Any:
    from pyspark.sql import functions as F

    df = events.where(F.expr(where)) if where else events
    cols = [F.col("key"), F.expr(value_expr).alias("value"), F.col("headers")]
    if keep_partition:
        cols.append(F.col("partition"))
    return df.select(*cols)


def transform(
    spark: Any,
    bootstrap: str,
    topic: str,
    to_topic: str,
    checkpoint: str,
    *,
    value_expr: str = "value",
    where: str | None = None,
    keep_partition: bool = False,
    once: bool = True,
    interval: str = "5 seconds",
    start: str = "earliest",
    read_mode: str = "broker",
    max_offsets_per_trigger: int | None = None,
    to_bootstrap: str | None = None,
    rsm_class: str | None = None,
    rsm_config: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
    exactly_once: bool = False,
) -> Any:
    more = dict(position_options(start))
    if exactly_once:
        more["kafka.isolation.level"] = "read_committed"  # an explicit --option wins
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
    w = (
        transform_frame(events, value_expr, where, keep_partition)
        .writeStream.format("strata")
        .options(**security_options(extra or {}))
        .option("kafka.bootstrap.servers", to_bootstrap or bootstrap)
        .option("topic", to_topic)
        .option("exactlyOnce", str(exactly_once).lower())
        .option("checkpointLocation", checkpoint)
        .queryName(f"transform-{topic}-to-{to_topic}")
    )
    w = w.trigger(availableNow=True) if once else w.trigger(processingTime=interval)
    query = w.start()
    if once:
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(f"transform query failed: {query.exception()}")
    return query


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", required=True, help="input topic")
    p.add_argument("--to-topic", required=True, help="output topic")
    p.add_argument("--checkpoint", required=True, metavar="DIR")
    p.add_argument("--value", default="value", help="SQL expression for the output value (default: unchanged)")
    p.add_argument("--where", default=None, help="SQL filter over the input columns")
    p.add_argument("--keep-partition", action="store_true", help="write to the input record's partition number")
    p.add_argument("--to-bootstrap-server", default=None, help="output cluster (default: the input cluster)")
    p.add_argument("--from", dest="start", default="earliest", help="where a new query starts (default earliest)")
    p.add_argument("--once", action="store_true", help="process what is there now, then stop (availableNow)")
    p.add_argument("--interval", default="5 seconds")
    p.add_argument("--max-offsets-per-trigger", type=int, default=None)
    p.add_argument(
        "--exactly-once",
        action="store_true",
        help="read the input read_committed and write each task in a transaction (sink option exactlyOnce)",
    )


def run(spark: Any, args: argparse.Namespace) -> int:
    query = transform(
        spark,
        args.bootstrap_server,
        args.topic,
        args.to_topic,
        args.checkpoint,
        value_expr=args.value,
        where=args.where,
        keep_partition=args.keep_partition,
        once=args.once,
        interval=args.interval,
        start=args.start,
        read_mode=args.read_mode,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        to_bootstrap=args.to_bootstrap_server,
        rsm_class=args.rsm_class,
        rsm_config=dict(args.rsm_config or []),
        extra=job_options(args),
        exactly_once=args.exactly_once,
    )
    if not args.once:
        try:
            query.awaitTermination()
        except KeyboardInterrupt:
            query.stop()
    print(f"transformed {args.topic} into {args.to_topic}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from strata.pipeline.cli import run_standalone

    return run_standalone("transform", argv)


if __name__ == "__main__":
    sys.exit(main())
