"""``strata get-offsets``: offsets of topic partitions at a time or sentinel, like kafka-get-offsets.sh
(GetOffsetShell): one ``topic:partition:offset`` line per partition, partitions chosen by --topic (a regular
expression) and --partitions, or by --topic-partitions patterns (``topic-regex[:partition|:from-to]``)."""

from __future__ import annotations

import argparse
import re
import sys

from .admin_client import AdminClient, AdminError
from .common import SubParsers, add_bootstrap_option, add_timeout_option

NAME = "get-offsets"
PROG = "strata get-offsets"
TIMES = {"latest": -1, "earliest": -2, "max-timestamp": -3, "earliest-local": -4, "latest-tiered": -5}
# GetOffsetShell's rule syntax: topic regex, then nothing, ":p", ":from-to", ":from-" or ":-to"
_RULE = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")


class _Terse(Exception):
    pass


def register(sub: SubParsers) -> None:
    p = sub.add_parser(NAME, help="offsets of partitions at a time (kafka-get-offsets.sh)")
    add_bootstrap_option(p)
    add_timeout_option(p)
    p.add_argument("--topic", help="topic name or regular expression (default: all topics)")
    p.add_argument("--partitions", help="comma-separated partition ids (default: all)")
    p.add_argument("--topic-partitions", metavar="RULES", help="comma-separated topic-regex[:p|:from-to] rules")
    p.add_argument(
        "--time",
        default="latest",
        help="-1/latest, -2/earliest, -3/max-timestamp, -4/earliest-local, -5/latest-tiered, or epoch ms",
    )
    p.add_argument("--exclude-internal-topics", action="store_true")
    p.set_defaults(func=run)


def parse_time(text: str) -> int:
    if text in TIMES:
        return TIMES[text]
    try:
        return int(text)
    except ValueError:
        raise _Terse(
            f"Malformed time argument {text}. Please use -1 or latest / -2 or earliest / -3 or max-timestamp / "
            "-4 or earliest-local / -5 or latest-tiered, or a specified long format timestamp"
        ) from None


def _rules(args: argparse.Namespace) -> list[tuple[str, int, int]]:
    """(topic regex, first partition, last partition) rules a partition must match one of."""
    if args.topic_partitions is not None:
        if args.topic is not None or args.partitions is not None:
            raise _Terse("--topic-partitions cannot be used with --topic or --partitions")
        out = []
        for spec in args.topic_partitions.split(","):
            m = _RULE.fullmatch(spec)
            if not m:
                raise _Terse(f"Invalid rule specification: {spec}")
            topic, one, lo, hi = (g or None for g in m.groups())
            if one is not None:
                out.append((topic or ".*", int(one), int(one)))
            else:
                out.append((topic or ".*", int(lo or 0), int(hi) - 1 if hi else 2**31 - 1))
        return out
    topic = args.topic or ".*"
    if not args.partitions:
        return [(topic, 0, 2**31 - 1)]
    try:
        ids = [int(x) for x in args.partitions.split(",")]
    except ValueError:
        raise _Terse(
            f"--partitions expects a comma separated list of numeric partition ids, but received: {args.partitions}"
        ) from None
    return [(topic, p, p) for p in ids]


def _offsets(a: AdminClient, topic: str, partitions: list[int], timestamp: int) -> dict[int, int]:
    """One request per leader; when one partition fails, each partition alone, skipping the failing ones."""
    try:
        return a.list_offsets(topic, partitions, timestamp)
    except AdminError:
        pass
    out: dict[int, int] = {}
    for p in partitions:
        try:
            out.update(a.list_offsets(topic, [p], timestamp))
        except AdminError as e:
            print(f"Skip getting offsets for topic-partition {topic}-{p} due to error: {e}", file=sys.stderr)
    return out


def run(args: argparse.Namespace) -> int:
    try:
        timestamp = parse_time(args.time)
        rules = [(re.compile(t), lo, hi) for t, lo, hi in _rules(args)]
        with AdminClient(args.bootstrap_server, timeout=args.timeout) as a:
            chosen: dict[str, list[int]] = {}
            for topic, parts in a.all_partitions(include_internal=not args.exclude_internal_topics).items():
                ps = [p for p in parts if any(rx.fullmatch(topic) and lo <= p <= hi for rx, lo, hi in rules)]
                if ps:
                    chosen[topic] = ps
            if not chosen:
                raise _Terse("Could not match any topic-partitions with the specified filters")
            found: dict[str, int] = {}
            for topic, ps in chosen.items():
                for p, off in _offsets(a, topic, ps, timestamp).items():
                    if off != -1:  # -1: no record at or after that time
                        found[f"{topic}-{p}"] = off
            for name in sorted(found):  # Kafka sorts by TopicPartition.toString()
                topic, _, index = name.rpartition("-")
                print(f"{topic}:{index}:{found[name]}")
    except (_Terse, AdminError, re.error) as e:
        print(f"Error occurred: {e}", file=sys.stderr)
        return 1
    return 0
