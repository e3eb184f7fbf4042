"""``strata console-consumer``: print a topic's records, like kafka-console-consumer.sh (same options and
``--property`` names: print.key, print.timestamp, print.headers, print.partition, print.offset, print.value,
key.separator, line.separator, headers.separator, null.literal). The consumer is kafka-python's.

Without ``--group`` the consumer assigns itself the partitions (no group is created or committed), where Kafka's
tool joins a generated group: same records, no rebalance wait, nothing left behind on the broker.
``--from-timestamp`` (not in Kafka's tool, kcat's ``-o s@``) starts each partition at the first offset whose
timestamp is at or after the given time.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from typing import Any

from .clients import ClientConfigError, bootstrap_list, client_config
from .command_config import read_properties
from .common import SubParsers, add_bootstrap_option, add_client_config_options, add_property_options, error
from .console_format import MessageFormatter
from .timestamps import TimestampError, parse_timestamp

NAME = "console-consumer"
PROG = "strata console-consumer"


class _UsageError(Exception):
    pass


def register(sub: SubParsers) -> None:
    p = sub.add_parser(NAME, help="print a topic's records (kafka-console-consumer.sh)")
    add_bootstrap_option(p, command_config=False)
    p.add_argument("--topic")
    p.add_argument("--include", metavar="REGEX", help="consume every topic whose name matches")
    p.add_argument("--partition", type=int, help="consume this partition only")
    p.add_argument("--offset", help="with --partition: a non-negative offset, earliest or latest (default latest)")
    p.add_argument("--from-beginning", action="store_true", help="start at the log start offset")
    p.add_argument(
        "--from-timestamp", metavar="TIME", help="start at this time: epoch ms or ISO 8601 (yyyy-MM-ddTHH:mm:ss...)"
    )
    p.add_argument("--group", help="consumer group (commits its offsets)")
    p.add_argument("--max-messages", type=int, help="exit after this many records")
    p.add_argument("--timeout-ms", type=int, help="exit when no record arrives for this long")
    p.add_argument("--isolation-level", choices=("read_uncommitted", "read_committed"), default="read_uncommitted")
    add_property_options(
        p,
        ("--property", "--formatter-property"),
        "formatter property (print.key, print.timestamp, key.separator, ...)",
        ("--formatter-config",),
    )
    add_client_config_options(p, "consumer", properties=True)
    p.add_argument("--skip-message-on-error", action="store_true", help="accepted for compatibility")
    p.set_defaults(func=run)


def _check(args: argparse.Namespace) -> None:
    """Kafka's option rules, with its messages."""
    if (args.topic is None) == (args.include is None):
        raise _UsageError("Exactly one of --include/--topic is required.")
    if args.partition is not None:
        if args.topic is None:
            raise _UsageError("The topic is required when partition is specified.")
        if args.from_beginning and args.offset is not None:
            raise _UsageError("Options from-beginning and offset cannot be specified together.")
        if args.group is not None:
            raise _UsageError("Options group and partition cannot be specified together.")
    elif args.offset is not None:
        raise _UsageError("The partition is required when offset is specified.")
    if args.from_timestamp is not None and (args.from_beginning or args.offset is not None):
        raise _UsageError("Options from-timestamp, from-beginning and offset cannot be specified together.")
    if args.offset is not None and not re.fullmatch(r"earliest|latest|\d+", args.offset, re.IGNORECASE):
        raise _UsageError(
            f"The provided offset value '{args.offset}' is incorrect. Valid values are 'earliest', 'latest', "
            "or a non-negative long."
        )
    if args.max_messages is not None and args.max_messages < 0:
        raise _UsageError("--max-messages must not be negative")


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    from kafka import KafkaConsumer

    props = read_properties(args.consumer_config) if args.consumer_config else []
    settings: dict[str, Any] = {
        "bootstrap_servers": bootstrap_list(args.bootstrap_server),
        "client_id": "console-consumer",
        "group_id": args.group,
        "auto_offset_reset": "earliest" if args.from_beginning else "latest",
        "enable_auto_commit": args.group is not None,
        "isolation_level": args.isolation_level,
        "allow_auto_create_topics": False,
    }
    settings.update(client_config(KafkaConsumer.DEFAULT_CONFIG, props + args.consumer_property))
    return settings


def _start(consumer: Any, partitions: list[Any], args: argparse.Namespace, start_ms: int | None) -> None:
    """Position assigned partitions where the options say (with a group: only when asked explicitly)."""
    if start_ms is not None:
        found = consumer.offsets_for_times({tp: start_ms for tp in partitions})
        ends = consumer.end_offsets(partitions)
        for tp in partitions:
            hit = found.get(tp)
            consumer.seek(tp, hit.offset if hit is not None else ends[tp])  # none that late: start at the end
        return
    if args.group is not None:
        return  # committed offsets, else auto.offset.reset
    offset = (args.offset or ("earliest" if args.from_beginning else "latest")).lower()
    if offset == "earliest":
        consumer.seek_to_beginning(*partitions)
    elif offset == "latest":
        consumer.seek_to_end(*partitions)
    else:
        for tp in partitions:
            consumer.seek(tp, int(offset))


def _assign(consumer: Any, args: argparse.Namespace) -> list[Any]:
    from kafka import TopicPartition

    if args.partition is not None:
        return [TopicPartition(args.topic, args.partition)]
    topics = [args.topic] if args.topic else sorted(t for t in consumer.topics() if re.fullmatch(args.include, t))
    out = []
    for t in topics:
        parts = consumer.partitions_for_topic(t)
        if not parts:
            raise _UsageError(f"topic {t!r} does not exist")
        out += [TopicPartition(t, p) for p in sorted(parts)]
    return out


def run(args: argparse.Namespace) -> int:
    try:
        _check(args)
        start_ms = parse_timestamp(args.from_timestamp) if args.from_timestamp is not None else None
        fmt_props = dict(read_properties(args.property_file) if args.property_file else [])
        fmt_props.update(args.property)
        formatter = MessageFormatter.from_properties(fmt_props)
        settings = _settings(args)
        if args.include is not None:
            re.compile(args.include)
    except (_UsageError, ClientConfigError, TimestampError) as e:
        error(PROG, str(e))
        return 2
    except re.error as e:
        error(PROG, f"--include {args.include!r} is not a regular expression: {e}")
        return 2
    from kafka import ConsumerRebalanceListener, KafkaConsumer
    from kafka.errors import KafkaError

    count = 0
    try:
        consumer = KafkaConsumer(**settings)
    except KafkaError as e:
        error(PROG, f"cannot connect to {args.bootstrap_server}: {e}")
        return 1
    except (AssertionError, ValueError) as e:
        error(PROG, f"bad consumer setting: {e}")
        return 2
    try:
        if args.group is None:
            partitions = _assign(consumer, args)
            consumer.assign(partitions)
            _start(consumer, partitions, args, start_ms)
        else:

            class Seek(ConsumerRebalanceListener):
                def on_partitions_revoked(self, revoked: Any) -> None:
                    pass

                def on_partitions_assigned(self, assigned: Any) -> None:
                    if assigned:
                        _start(consumer, list(assigned), args, start_ms)

            if args.topic:
                consumer.subscribe(topics=[args.topic], listener=Seek())
            else:
                consumer.subscribe(pattern=args.include, listener=Seek())
        out = sys.stdout.buffer
        last = time.monotonic()
        while args.max_messages is None or count < args.max_messages:
            wait = 1000 if args.timeout_ms is None else max(0, min(1000, args.timeout_ms))
            # never more than still to print, so that the group's position is exactly what was printed
            room = 500 if args.max_messages is None else min(500, args.max_messages - count)
            batches = consumer.poll(timeout_ms=wait, max_records=room)
            if not batches:
                if args.timeout_ms is not None and (time.monotonic() - last) * 1000 >= args.timeout_ms:
                    break
                continue
            last = time.monotonic()
            for records in batches.values():
                for r in records:
                    if args.max_messages is not None and count >= args.max_messages:
                        break
                    out.write(formatter.format(r))
                    count += 1
            out.flush()
        if args.group is not None:
            consumer.commit()  # what was printed counts as consumed
    except KeyboardInterrupt:
        pass
    except _UsageError as e:
        error(PROG, str(e))
        return 1
    except KafkaError as e:
        error(PROG, str(e))
        return 1
    finally:
        consumer.close(autocommit=False)
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0
