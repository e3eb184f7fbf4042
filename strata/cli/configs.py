"""``strata configs``: describe or alter the configs of topics, brokers, broker loggers and groups, like
kafka-configs.sh (``--entity-type``, ``--entity-name`` / ``--entity-default``, ``--add-config``,
``--delete-config``, ``--all``), with its output lines; and users' SCRAM credentials in kafka-configs' form
(``--entity-type users --add-config 'SCRAM-SHA-256=[iterations=8192,password=...]'``, DescribeUserScramCredentials
and AlterUserScramCredentials; ``strata users scram`` does the same without a password on the command line).

Speaks the Kafka protocol through :class:`AdminClient` (DescribeConfigs, IncrementalAlterConfigs), so it works
against any Kafka-compatible broker. A broker's or broker logger's configs are asked of that broker, as Kafka's
admin client does.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from strata.protocol.scram import ScramMechanism

from .admin_client import AdminClient, AdminError, DescribedConfig, ScramUpsertion
from .common import SubParsers, UsageError, add_action_command, error
from .users import MECHANISMS, parse_scram_config, print_credentials

NAME = "configs"

# --entity-type -> (ConfigResource type, singular as kafka-configs prints it, the source a dynamic value has)
ENTITY_TYPES: dict[str, tuple[int, str, int]] = {
    "topics": (2, "topic", 1),
    "brokers": (4, "broker", 2),
    "broker-loggers": (8, "broker-logger", 6),
    "groups": (32, "group", 8),
}
SOURCE_NAMES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG",
    8: "GROUP_CONFIG",
}
SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG = 3
USERS = "users"  # SCRAM credentials, not a ConfigResource


class _UsageError(Exception):
    pass


def register(sub: SubParsers) -> None:
    action = add_action_command(sub, NAME, "describe or alter topic, broker, broker-logger and group configs", run)
    d = action("describe", _describe, "dynamic configs (--all: every config) of an entity")
    _entity_options(d)
    d.add_argument("--all", action="store_true", help="every config, not only the dynamic ones")
    al = action("alter", _alter, "add, change or delete dynamic configs of an entity")
    _entity_options(al)
    al.add_argument(
        "--add-config",
        action="append",
        metavar="K=V,K2=[A,B]",
        help="configs to set; a list value in brackets (repeatable)",
    )
    al.add_argument("--delete-config", action="append", metavar="K,K2", help="configs to remove (repeatable)")


def _entity_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--entity-type", required=True, choices=sorted([*ENTITY_TYPES, USERS]))
    who = p.add_mutually_exclusive_group()
    who.add_argument("--entity-name", help="topic name, broker id, group id or user name")
    who.add_argument("--entity-default", action="store_true", help="the cluster-wide default (brokers only)")


def run(args: argparse.Namespace) -> int:
    try:
        if args.entity_default and args.entity_type != "brokers":
            raise _UsageError("--entity-default applies to --entity-type brokers only")
        if (
            not args.entity_default
            and args.entity_name is None
            and (args.entity_type, args.action) != (USERS, "describe")
        ):
            raise _UsageError("one of the arguments --entity-name --entity-default is required")
        users_change = _users_change(args) if args.entity_type == USERS and args.action == "alter" else None
        with AdminClient(args.bootstrap_server, timeout=args.timeout) as a:
            if users_change is not None:
                return _alter_users(a, args.entity_name, *users_change)
            if args.entity_type == USERS:
                return _describe_users(a, args)
            result: int = args.action_func(a, args)
            return result
    except (AdminError, _UsageError, UsageError) as e:
        error("strata configs", str(e))
        return 1


def _target(a: AdminClient, args: argparse.Namespace) -> AdminClient:
    """The connection to ask: the named broker for its own configs and loggers, else the bootstrap broker."""
    if args.entity_type not in ("brokers", "broker-loggers") or args.entity_default:
        return a
    try:
        bid = int(args.entity_name)
    except ValueError:
        raise _UsageError(f"broker id must be an integer, not {args.entity_name!r}") from None
    for b in a.metadata([]).brokers:
        if b.node_id == bid and (b.host, b.port) != (a.host, a.port):
            return AdminClient(f"{b.host}:{b.port}", a.timeout)
    return a


def _entity(args: argparse.Namespace) -> tuple[int, str, str]:
    """(resource type, resource name, how kafka-configs names the entity in its output)."""
    rtype, singular, _ = ENTITY_TYPES[args.entity_type]
    if args.entity_default:
        return rtype, "", "brokers in the cluster"
    return rtype, args.entity_name, f"{singular} {args.entity_name}"


def _describe(a: AdminClient, args: argparse.Namespace) -> int:
    rtype, name, label = _entity(args)
    dynamic_source = SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG if args.entity_default else ENTITY_TYPES[args.entity_type][2]
    target = _target(a, args)
    try:
        entries = target.describe_configs(rtype, name, include_synonyms=True)
    finally:
        if target is not a:
            target.close()
    if not args.all:
        entries = [e for e in entries if e.source == dynamic_source]
    head = "Default" if args.entity_default else ("All" if args.all else "Dynamic")
    print(f"{head} configs for {label} are:")
    for e in entries:
        print(f"  {_entry_line(e)}")
    return 0


def _entry_line(e: DescribedConfig) -> str:
    synonyms = ", ".join(f"{SOURCE_NAMES.get(src, src)}:{n}={_shown(v)}" for n, v, src in e.synonyms)
    return f"{e.name}={_shown(e.value)} sensitive={str(e.sensitive).lower()} synonyms={{{synonyms}}}"


def _shown(value: str | None) -> str:
    return "null" if value is None else value


def parse_add_config(text: str) -> Iterator[tuple[str, str]]:
    """kafka-configs' --add-config syntax: comma-separated k=v pairs; a list value goes in brackets (k=[a,b])."""
    depth, start = 0, 0
    parts = []
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    for part in parts:
        if not part.strip():
            continue
        k, sep, v = part.partition("=")
        if not sep or not k.strip():
            raise _UsageError(f"--add-config entry {part!r} is not of the form key=value")
        v = v.strip()
        if v.startswith("[") and v.endswith("]"):
            v = v[1:-1]
        yield k.strip(), v


def _alter(a: AdminClient, args: argparse.Namespace) -> int:
    if not args.add_config and not args.delete_config:
        raise _UsageError("alter needs --add-config or --delete-config")
    rtype, name, label = _entity(args)
    to_set = dict(kv for text in args.add_config or [] for kv in parse_add_config(text))
    to_delete = [k.strip() for text in args.delete_config or [] for k in text.split(",") if k.strip()]
    target = _target(a, args)
    try:
        target.alter_configs(rtype, name, set=to_set, delete=to_delete)
    finally:
        if target is not a:
            target.close()
    if args.entity_default:
        print("Completed updating default config for brokers in the cluster.")
    else:
        print(f"Completed updating config for {label}.")
    return 0


def _describe_users(a: AdminClient, args: argparse.Namespace) -> int:
    return print_credentials(
        a.describe_user_scram_credentials(None if args.entity_name is None else [args.entity_name])
    )


def _users_change(args: argparse.Namespace) -> tuple[list[ScramUpsertion], list[str]]:
    """kafka-configs' SCRAM credential configs: a mechanism name = [iterations=N,]password=P, or deleted by name;
    checked (and salted) before connecting."""
    if not args.add_config and not args.delete_config:
        raise _UsageError("alter needs --add-config or --delete-config")
    user = args.entity_name
    to_set = dict(kv for text in args.add_config or [] for kv in parse_add_config(text))
    to_delete = [k.strip() for text in args.delete_config or [] for k in text.split(",") if k.strip()]
    unknown = sorted({k for k in [*to_set, *to_delete] if k not in MECHANISMS})
    if unknown:
        raise _UsageError(
            "Only SCRAM credential configs can be altered for 'users' using --bootstrap-server. "
            f"Unexpected config names: {','.join(unknown)}"
        )
    return [parse_scram_config(user, k, v) for k, v in to_set.items()], to_delete


def _alter_users(a: AdminClient, user: str, upsertions: list[ScramUpsertion], to_delete: list[str]) -> int:
    # one request per mechanism: Kafka's controller refuses a user named twice in one request (DUPLICATE_RESOURCE)
    for k in to_delete:
        a.alter_user_scram_credentials(deletions=[(user, ScramMechanism.from_name(k))])
    for up in upsertions:
        a.alter_user_scram_credentials([up])
    print(f"Completed updating config for user {user}.")
    return 0
