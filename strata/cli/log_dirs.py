"""``strata log-dirs describe``: every broker's log directories and the partitions in them (size, offset lag),
like ``kafka-log-dirs.sh --describe``, printing its two header lines and its JSON document."""

from __future__ import annotations

import argparse
import json
from typing import Any

from strata.protocol.errors import ErrorCode
from strata.protocol.registry import REQUEST_CLASSES, ApiKey

from .admin_client import AdminClient, check_error
from .common import SubParsers, UsageError, add_action_command, run_action

NAME = "log-dirs"
# the exception class Kafka's tool prints for a log dir's error
_EXCEPTIONS = {ErrorCode.KAFKA_STORAGE_ERROR: "org.apache.kafka.common.errors.KafkaStorageException"}


def register(sub: SubParsers) -> None:
    action = add_action_command(sub, NAME, "log directories of the brokers (kafka-log-dirs.sh)", run)
    d = action("describe", _describe, "log dirs, partition sizes and offset lags, as JSON")
    d.add_argument("--topic-list", default="", metavar="T1,T2", help="only these topics (default: all)")
    d.add_argument("--broker-list", default="", metavar="ID1,ID2", help="only these brokers (default: all)")


def run(args: argparse.Namespace) -> int:
    return run_action("strata log-dirs", AdminClient, args)


def _describe_dirs(conn: AdminClient, topics: list[str]) -> list[dict[str, Any]]:
    cls = REQUEST_CLASSES[ApiKey.DESCRIBE_LOG_DIRS]
    req = None  # null: every partition
    if topics:
        parts = conn.all_partitions()
        req = [cls.DescribableLogDirTopic(topic=t, partitions=parts.get(t, [])) for t in topics]
    _, resp = conn.call(ApiKey.DESCRIBE_LOG_DIRS, topics=req)
    check_error(getattr(resp, "error_code", 0), None, "DescribeLogDirs: ")
    dirs = []
    for d in sorted(resp.results, key=lambda d: d.log_dir):
        partitions = [
            {
                "partition": f"{t.name}-{p.partition_index}",
                "size": p.partition_size,
                "offsetLag": p.offset_lag,
                "isFuture": bool(p.is_future_key),
            }
            for t in sorted(d.topics, key=lambda t: t.name)
            if not topics or t.name in topics
            for p in sorted(t.partitions, key=lambda p: p.partition_index)
        ]
        err = None
        if d.error_code:
            err = _EXCEPTIONS.get(d.error_code) or ErrorCode(d.error_code).name
        dirs.append({"partitions": partitions, "error": err, "logDir": d.log_dir})
    return dirs


def _describe(a: AdminClient, args: argparse.Namespace) -> int:
    topics = [t for t in args.topic_list.split(",") if t]
    nodes = a.brokers()
    if args.broker_list:
        try:
            wanted = {int(x) for x in args.broker_list.split(",") if x}
        except ValueError:
            raise UsageError(f"--broker-list expects comma-separated broker ids, not {args.broker_list!r}") from None
        missing = wanted - {n.node_id for n in nodes}
        if missing:
            raise UsageError(
                "ERROR: The given brokers do not exist from --broker-list: "
                f"{','.join(map(str, sorted(missing)))}. Current existent brokers: "
                f"{','.join(str(n.node_id) for n in nodes)}"
            )
        nodes = [n for n in nodes if n.node_id in wanted]
    print("Querying brokers for log directories information")
    brokers = [{"broker": n.node_id, "logDirs": _describe_dirs(a.peer(n.host, n.port), topics)} for n in nodes]
    print(f"Received log directory information from brokers {','.join(str(n.node_id) for n in nodes)}")
    print(json.dumps({"brokers": brokers, "version": 1}, separators=(",", ":")))
    return 0
