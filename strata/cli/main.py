"""``strata`` command line: serve a broker, manage topics (like kafka-topics.sh), dump log segments.

Only ``serve`` imports the broker runtime; ``topics`` speaks the Kafka protocol through strata.cli.admin_client, so it
works against any Kafka-compatible broker, and ``dump-log`` reads segment files offline.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
SOURCE_DEFAULT_CONFIG = 5


def _err(prog: str, msg: str) -> None:
    print(f"{prog}: error: {msg}", file=sys.stderr)


def _key_value(s: str) -> tuple[str, str]:
    k, sep, v = s.partition("=")
    if not sep or not k.strip():
        raise argparse.ArgumentTypeError(f"{s!r} is not of the form key=value")
    return k.strip(), v.strip()


# -- serve -----------------------------------------------------------------------------------------------------------
def _cmd_serve(args: argparse.Namespace) -> int:
    from strata.config import BrokerConfig, ConfigError

    try:
        config = BrokerConfig.load(args.config, args.override or [])
        _ = config.listeners, config.advertised_listeners  # parsed lazily: fail here with exit 2, not in startup
    except ConfigError as e:
        print(f"strata: configuration error: {e}", file=sys.stderr)
        return 2
    from strata.broker.server import run  # imported late: `strata topics` must not pay for the storage stack

    return run(config)


# -- topics ----------------------------------------------------------------------------------------------------------
def _topics_create(a, args: argparse.Namespace) -> int:
    from strata.cli.admin_client import AdminError

    try:
        res = a.create_topic(args.topic, args.partitions, args.replication_factor, dict(args.config or []))
    except AdminError as e:
        if args.if_not_exists and "TOPIC_ALREADY_EXISTS" in str(e):
            return 0
        raise
    print(f"Created topic {args.topic}" + (f" ({res.num_partitions} partitions)." if res.num_partitions > 0 else "."))
    return 0


def _topics_list(a, args: argparse.Namespace) -> int:
    for name in a.list_topics(include_internal=not args.exclude_internal):
        print(name)
    return 0


def _non_default_configs(a, topic: str) -> str:
    from strata.cli.admin_client import RESOURCE_TOPIC

    shown = [c for c in a.describe_configs(RESOURCE_TOPIC, topic) if c.source != SOURCE_DEFAULT_CONFIG]
    return ",".join(f"{c.name}={'<sensitive>' if c.sensitive else c.value}" for c in shown)


def _topics_describe(a, args: argparse.Namespace) -> int:
    names = [args.topic] if args.topic else None
    remote_state = None
    for t in a.describe_topics(names):
        configs = _non_default_configs(a, t.name)
        tiered = "remote.storage.enable=true" in configs.split(",")
        print(f"Topic: {t.name}\tTopicId: {t.topic_id}\tPartitionCount: {len(t.partitions)}\t"
              f"ReplicationFactor: {t.replication_factor}\tConfigs: {configs}")
        if tiered and remote_state is None:      # KIP-405 sizes come from __remote_log_metadata
            from .remote_log_metadata import remote_log_state_or_none
            remote_state = remote_log_state_or_none(a)
        for p in t.partitions:
            line = (f"\tTopic: {t.name}\tPartition: {p.partition}\tLeader: {p.leader}\t"
                    f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}\t"
                    f"LogStartOffset: {p.log_start_offset}\tEndOffset: {p.end_offset}")
            if tiered:       # tiered topics: local/remote offsets (ListOffsets -4 v8+, -5 v9+) and remote size
                from .remote_log_metadata import tiered_describe_fields
                line += tiered_describe_fields(t, p, remote_state)
            print(line + (f"\tError: {p.error}" if p.error else ""))
    return 0


def _topics_delete(a, args: argparse.Namespace) -> int:
    from strata.cli.admin_client import AdminError

    try:
        a.delete_topic(args.topic)
    except AdminError as e:
        if args.if_exists and "UNKNOWN_TOPIC_OR_PARTITION" in str(e):
            return 0
        raise
    print(f"Deleted topic {args.topic}.")
    return 0


def _topics_alter(a, args: argparse.Namespace) -> int:
    a.create_partitions(args.topic, args.partitions)
    print(f"Topic {args.topic} now has {args.partitions} partitions.")
    return 0


def _topics_alter_config(a, args: argparse.Namespace) -> int:
    from strata.cli.admin_client import RESOURCE_TOPIC

    if not args.set and not args.delete:
        raise _UsageError("alter-config needs at least one --set key=value or --delete key")
    a.alter_configs(RESOURCE_TOPIC, args.topic, set=dict(args.set or []), delete=args.delete or [])
    print(f"Completed updating config for topic {args.topic}.")
    return 0


class _UsageError(Exception):
    pass


def _cmd_topics(args: argparse.Namespace) -> int:
    from strata.cli.admin_client import AdminClient, AdminError

    try:
        with AdminClient(args.bootstrap_server, timeout=args.timeout) as a:
            return args.topics_func(a, args)
    except (AdminError, _UsageError) as e:
        _err("strata topics", str(e))
        return 1


# -- dump-log --------------------------------------------------------------------------------------------------------
def _cmd_dump_log(args: argparse.Namespace) -> int:
    from strata.storage.dump import dump_file

    files = [f for f in (args.files_csv or "").split(",") if f] + list(args.files)
    if not files:
        _err("strata dump-log", "give at least one .log, .index or .timeindex file")
        return 2
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        _err("strata dump-log", f"no such file: {', '.join(missing)}")
        return 1
    for f in files:
        try:
            dump_file(f, print_data_log=args.print_data_log, deep_iteration=args.deep_iteration)
        except (OSError, ValueError) as e:  # unreadable file, or a name that is not <20-digit offset>.log
            _err("strata dump-log", f"cannot dump {f}: {getattr(e, 'strerror', None) or e}")
            return 1
    return 0


# -- parser ----------------------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="strata", description="Strata: a Kafka-wire-compatible broker")
    sub = p.add_subparsers(dest="command", required=True,
                           metavar="{serve,topics,groups,dump-log,remote-log-metadata,pipeline}")

    s = sub.add_parser("serve", help="run a broker")
    s.add_argument("config", nargs="?", help="server.properties file")
    s.add_argument("--override", action="append", metavar="KEY=VALUE", help="override a property (repeatable)")
    s.set_defaults(func=_cmd_serve)

    t = sub.add_parser("topics", help="create, list, describe, alter or delete topics")
    t.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT",
                   help=f"broker to talk to (default {DEFAULT_BOOTSTRAP})")
    t.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the broker (default 30)")
    t.set_defaults(func=_cmd_topics)
    # --bootstrap-server is also accepted after the action, as kafka-topics.sh users type it anywhere.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap-server", default=argparse.SUPPRESS, metavar="HOST:PORT")
    tsub = t.add_subparsers(dest="action", required=True)

    def action(name: str, fn: Callable, help: str) -> argparse.ArgumentParser:
        ap = tsub.add_parser(name, parents=[common], help=help)
        ap.set_defaults(topics_func=fn)
        return ap

    c = action("create", _topics_create, "create a topic")
    c.add_argument("--topic", required=True)
    c.add_argument("--partitions", type=int, default=-1, help="default: the broker's num.partitions")
    c.add_argument("--replication-factor", type=int, default=-1, help="default: default.replication.factor")
    c.add_argument("--config", type=_key_value, action="append", metavar="KEY=VALUE", help="topic config (repeatable)")
    c.add_argument("--if-not-exists", action="store_true")
    ls = action("list", _topics_list, "list topic names")
    ls.add_argument("--exclude-internal", action="store_true")
    d = action("describe", _topics_describe, "partitions (leader, replicas, isr, offsets) and non-default configs")
    d.add_argument("--topic", help="one topic (default: all)")
    x = action("delete", _topics_delete, "delete a topic")
    x.add_argument("--topic", required=True)
    x.add_argument("--if-exists", action="store_true")
    al = action("alter", _topics_alter, "increase the partition count")
    al.add_argument("--topic", required=True)
    al.add_argument("--partitions", type=int, required=True)
    ac = action("alter-config", _topics_alter_config, "set or delete topic config overrides")
    ac.add_argument("--topic", required=True)
    ac.add_argument("--set", type=_key_value, action="append", metavar="KEY=VALUE", help="repeatable")
    ac.add_argument("--delete", action="append", metavar="KEY", help="remove an override (repeatable)")

    dl = sub.add_parser("dump-log", help="print segment files like kafka-dump-log.sh (.log, .index, .timeindex)")
    dl.add_argument("files", nargs="*", metavar="FILE")
    dl.add_argument("--files", dest="files_csv", metavar="F1,F2", help="comma-separated files (kafka-dump-log style)")
    dl.add_argument("--print-data-log", action="store_true", help="also print each record's key and payload")
    dl.add_argument("--deep-iteration", action="store_true", help="print every record's metadata")
    dl.set_defaults(func=_cmd_dump_log)

    from .groups import add_groups_parser   # `strata groups` (kafka-consumer-groups.sh)
    add_groups_parser(sub, DEFAULT_BOOTSTRAP)

    from .remote_log_metadata import add_parser as add_remote_log_metadata_parser
    add_remote_log_metadata_parser(sub, DEFAULT_BOOTSTRAP)   # `strata remote-log-metadata`

    from strata.pipeline.cli import add_parser as add_pipeline_parser   # `strata pipeline` (Spark jobs; pyspark imported lazily)
    add_pipeline_parser(sub, DEFAULT_BOOTSTRAP)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)
