"""``strata topics``: create, list, describe, alter or delete topics, like kafka-topics.sh.

Speaks the Kafka protocol through :class:`AdminClient`, so it works against any Kafka-compatible broker.
"""

from __future__ import annotations

import argparse

from .admin_client import RESOURCE_TOPIC, AdminClient, AdminError
from .common import SubParsers, UsageError, add_action_command, key_value, run_action
from .recovery import recovery_state
from .remote_log_metadata import RemoteLogState, remote_log_state_or_none, tiered_describe_fields

NAME = "topics"
SOURCE_DEFAULT_CONFIG = 5


class _UsageError(UsageError):
    pass


READ_REPLICA_PREFIX = "remote.readreplica="


def register(sub: SubParsers) -> None:
    action = add_action_command(sub, NAME, "create, list, describe, alter or delete topics", run)
    c = action("create", _create, "create a topic")
    c.add_argument("--topic", required=True)
    c.add_argument("--partitions", type=int, default=-1, help="default: the broker's num.partitions")
    c.add_argument("--replication-factor", type=int, default=-1, help="default: default.replication.factor")
    c.add_argument("--config", type=key_value, action="append", metavar="KEY=VALUE", help="topic config (repeatable)")
    c.add_argument("--if-not-exists", action="store_true")
    ls = action("list", _list, "list topic names")
    ls.add_argument("--exclude-internal", action="store_true")
    d = action("describe", _describe, "partitions (leader, replicas, isr, offsets) and non-default configs")
    d.add_argument("--topic", help="one topic (default: all)")
    x = action("delete", _delete, "delete a topic")
    x.add_argument("--topic", required=True)
    x.add_argument("--if-exists", action="store_true")
    al = action("alter", _alter, "increase the partition count")
    al.add_argument("--topic", required=True)
    al.add_argument("--partitions", type=int, required=True)
    ac = action("alter-config", _alter_config, "set or delete topic config overrides")
    ac.add_argument("--topic", required=True)
    ac.add_argument("--set", type=key_value, action="append", metavar="KEY=VALUE", help="repeatable")
    ac.add_argument("--delete", action="append", metavar="KEY", help="remove an override (repeatable)")


def run(args: argparse.Namespace) -> int:
    return run_action("strata topics", AdminClient, args)


def _create(a: AdminClient, args: argparse.Namespace) -> int:
    try:
        res = a.create_topic(args.topic, args.partitions, args.replication_factor, dict(args.config or []))
    except AdminError as e:
        if args.if_not_exists and "TOPIC_ALREADY_EXISTS" in str(e):
            return 0
        raise
    print(f"Created topic {args.topic}" + (f" ({res.num_partitions} partitions)." if res.num_partitions > 0 else "."))
    return 0


def _list(a: AdminClient, args: argparse.Namespace) -> int:
    for name in a.list_topics(include_internal=not args.exclude_internal):
        print(name)
    return 0


def _non_default_configs(a: AdminClient, topic: str) -> str:
    shown = [c for c in a.describe_configs(RESOURCE_TOPIC, topic) if c.source != SOURCE_DEFAULT_CONFIG]
    return ",".join(f"{c.name}={'<sensitive>' if c.sensitive else c.value}" for c in shown)


def _describe(a: AdminClient, args: argparse.Namespace) -> int:
    names = [args.topic] if args.topic else None
    remote_state: RemoteLogState | None = None
    for t in a.describe_topics(names):
        configs = _non_default_configs(a, t.name)
        tiered = "remote.storage.enable=true" in configs.split(",")
        recovered = recovery_state(a, t.name) if tiered else None  # recovered from the bucket (issue 24)
        origin = next(
            (c[len(READ_REPLICA_PREFIX) :] for c in configs.split(",") if c.startswith(READ_REPLICA_PREFIX)), ""
        )
        print(
            f"Topic: {t.name}\tTopicId: {t.topic_id}\tPartitionCount: {len(t.partitions)}\t"
            f"ReplicationFactor: {t.replication_factor}\tConfigs: {configs}"
            + ("\tRecovery: RECOVERED" if recovered is not None else "")
        )
        if tiered and not origin and remote_state is None:  # KIP-405 sizes come from __remote_log_metadata
            remote_state = remote_log_state_or_none(a)
        lags = a.offset_lags(t.name, [p.partition for p in t.partitions]) if origin else {}
        for p in t.partitions:
            line = (
                f"\tTopic: {t.name}\tPartition: {p.partition}\tLeader: {p.leader}\t"
                f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}\t"
                f"LogStartOffset: {p.log_start_offset}\tEndOffset: {p.end_offset}"
            )
            if origin:  # a read replica: served from the origin's bucket up to its last synced offset
                lag = lags.get(p.partition, -1)
                line += f"\tReadReplicaOf: {origin}\tSyncedOffset: {p.latest_tiered_offset}\tLag: {lag}"
            elif tiered:  # tiered topics: local/remote offsets (ListOffsets -4 v8+, -5 v9+) and remote size
                line += tiered_describe_fields(t, p, remote_state)
            rec = (recovered or {}).get("partitions", {}).get(str(p.partition))
            if rec is not None:
                line += f"\tRecoveredUpTo: {int(rec['next_offset']) - 1}"
            print(line + (f"\tError: {p.error}" if p.error else ""))
    return 0


def _delete(a: AdminClient, args: argparse.Namespace) -> int:
    try:
        a.delete_topic(args.topic)
    except AdminError as e:
        if args.if_exists and "UNKNOWN_TOPIC_OR_PARTITION" in str(e):
            return 0
        raise
    print(f"Deleted topic {args.topic}.")
    return 0


def _alter(a: AdminClient, args: argparse.Namespace) -> int:
    a.create_partitions(args.topic, args.partitions)
    print(f"Topic {args.topic} now has {args.partitions} partitions.")
    return 0


def _alter_config(a: AdminClient, args: argparse.Namespace) -> int:
    if not args.set and not args.delete:
        raise _UsageError("alter-config needs at least one --set key=value or --delete key")
    a.alter_configs(RESOURCE_TOPIC, args.topic, set=dict(args.set or []), delete=args.delete or [])
    print(f"Completed updating config for topic {args.topic}.")
    return 0
