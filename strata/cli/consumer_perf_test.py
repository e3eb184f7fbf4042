"""``strata consumer-perf-test``: consume N records and print Kafka's summary, like kafka-consumer-perf-test.sh:
the header ``start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms,
fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec`` and one line of totals (--show-detailed-stats: one line per
--reporting-interval instead). The consumer is kafka-python's. Without --group it assigns itself every partition
(no rebalance, rebalance.time.ms 0); with --group it joins that group."""

from __future__ import annotations

import argparse
import time
from datetime import datetime
from typing import Any

from .clients import ClientConfigError, bootstrap_list, client_config
from .command_config import read_properties
from .common import SubParsers, add_bootstrap_option, add_client_config_options, error

NAME = "consumer-perf-test"
PROG = "strata consumer-perf-test"
HEADER = (
    "data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, "
    "fetch.MB.sec, fetch.nMsg.sec"
)


def register(sub: SubParsers) -> None:
    p = sub.add_parser(NAME, help="consumer throughput (kafka-consumer-perf-test.sh)")
    add_bootstrap_option(p, command_config=False)
    p.add_argument("--topic", required=True)
    p.add_argument("--messages", type=int, required=True, help="records to consume")
    p.add_argument("--group", help="consumer group to join (default: none, partitions assigned directly)")
    p.add_argument("--fetch-size", type=int, default=1024 * 1024, help="max.partition.fetch.bytes")
    p.add_argument("--from-latest", action="store_true", help="start at the log end (default: the log start)")
    add_client_config_options(p, "consumer", properties=True)
    p.add_argument("--timeout", type=int, default=10_000, metavar="MS", help="max time between two records")
    p.add_argument("--reporting-interval", type=int, default=5000, metavar="MS")
    p.add_argument("--show-detailed-stats", action="store_true")
    p.add_argument("--date-format", default="%Y-%m-%d %H:%M:%S:%f", help="strftime format (%%f: milliseconds)")
    p.add_argument("--hide-header", action="store_true")
    p.add_argument("--print-metrics", action="store_true")
    p.set_defaults(func=run)


def _date(fmt: str, epoch: float) -> str:
    dt = datetime.fromtimestamp(epoch)
    return dt.strftime(fmt.replace("%f", f"{dt.microsecond // 1000:03d}"))


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    from kafka import KafkaConsumer

    settings: dict[str, Any] = {
        "bootstrap_servers": bootstrap_list(args.bootstrap_server),
        "client_id": "perf-consumer-client",
        "group_id": args.group,
        "enable_auto_commit": args.group is not None,
        "auto_offset_reset": "latest" if args.from_latest else "earliest",
        "max_partition_fetch_bytes": args.fetch_size,
        "allow_auto_create_topics": False,
    }
    props = read_properties(args.consumer_config) if args.consumer_config else []
    settings.update(client_config(KafkaConsumer.DEFAULT_CONFIG, props + args.consumer_property))
    return settings


class _Counts:
    def __init__(self) -> None:
        self.msgs = self.bytes = 0
        self.join_ms = 0.0


def _row(start: float, end: float, c: _Counts, last_msgs: int, last_bytes: int, join_ms: float) -> str:
    elapsed = max(end - start, 1e-9)
    mb, d_mb = c.bytes / 1024 / 1024, (c.bytes - last_bytes) / 1024 / 1024
    fetch_s = elapsed - join_ms / 1000
    fetch_mb = d_mb / fetch_s if fetch_s > 0 else 0.0
    fetch_n = (c.msgs - last_msgs) / fetch_s if fetch_s > 0 else 0.0
    return (
        f"{mb:.4f}, {d_mb / elapsed:.4f}, {c.msgs}, {(c.msgs - last_msgs) / elapsed:.4f}, {int(join_ms)}, "
        f"{int(fetch_s * 1000)}, {fetch_mb:.4f}, {fetch_n:.4f}"
    )


def run(args: argparse.Namespace) -> int:
    try:
        if args.messages <= 0:
            raise ClientConfigError("--messages must be positive")
        settings = _settings(args)
    except ClientConfigError as e:
        error(PROG, str(e))
        return 2
    from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError

    counts = _Counts()
    if not args.hide_header:
        print(("time, threadId, " if args.show_detailed_stats else "start.time, end.time, ") + HEADER)
    try:
        consumer = KafkaConsumer(**settings)
    except KafkaError as e:
        error(PROG, f"cannot connect to {args.bootstrap_server}: {e}")
        return 1
    start = time.time()
    try:
        if args.group is None:
            parts = consumer.partitions_for_topic(args.topic)
            if not parts:
                error(PROG, f"topic {args.topic!r} does not exist")
                return 1
            tps = [TopicPartition(args.topic, p) for p in sorted(parts)]
            consumer.assign(tps)
            (consumer.seek_to_end if args.from_latest else consumer.seek_to_beginning)(*tps)
        else:
            joined_at = [time.time()]

            class Timing(ConsumerRebalanceListener):
                def on_partitions_revoked(self, revoked: Any) -> None:
                    joined_at[0] = time.time()

                def on_partitions_assigned(self, assigned: Any) -> None:
                    counts.join_ms += (time.time() - joined_at[0]) * 1000

            consumer.subscribe(topics=[args.topic], listener=Timing())
        last_record = last_report = time.time()
        last_msgs = last_bytes = 0
        last_join = 0.0
        while counts.msgs < args.messages and (time.time() - last_record) * 1000 <= args.timeout:
            batches = consumer.poll(timeout_ms=100, max_records=min(10_000, args.messages - counts.msgs))
            now = time.time()
            for records in batches.values():
                last_record = now
                for r in records:
                    counts.msgs += 1
                    counts.bytes += (len(r.key) if r.key else 0) + (len(r.value) if r.value else 0)
            if args.show_detailed_stats and (now - last_report) * 1000 >= args.reporting_interval:
                print(
                    f"{_date(args.date_format, now)}, 0, "
                    f"{_row(last_report, now, counts, last_msgs, last_bytes, counts.join_ms - last_join)}",
                    flush=True,
                )
                last_report, last_msgs, last_bytes, last_join = now, counts.msgs, counts.bytes, counts.join_ms
    except KafkaError as e:
        error(PROG, str(e))
        return 1
    finally:
        metrics = consumer.metrics() if args.print_metrics else None
        consumer.close(autocommit=False)
    end = time.time()
    if counts.msgs < args.messages:
        print(
            f"WARNING: Exiting before consuming the expected number of messages: timeout ({args.timeout} ms) "
            "exceeded. You can use the --timeout option to increase the timeout."
        )
    if not args.show_detailed_stats:
        print(
            f"{_date(args.date_format, start)}, {_date(args.date_format, end)}, "
            f"{_row(start, end, counts, 0, 0, counts.join_ms)}"
        )
    if metrics:
        for group, values in sorted(metrics.items()):
            for name, value in sorted(values.items()):
                print(f"{group}:{name} : {value}")
    return 0
